//! One worker's slice of the server pool: pools by exact key, idle servers reused most recently
//! used first (so the coldest age out under `server_idle_timeout`), counts per state, and the
//! FIFO of clients waiting for a server. Pure: time is an argument, the only shared state is the
//! [`PoolBudget`](crate::PoolBudget)s the caller hands in.
//!
//! Sessions look their key up once with [`PoolSlice::register`] (the only hashing and the only
//! allocation for a new key) and then use the returned [`PoolId`], an index, for every checkout.

use crate::budget::PoolBudget;
use crate::key::PoolKey;
use crate::lease::{CloseReason, Lease};
use crate::waiters::{List, WaitTicket, Waiters};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A registered pool in one slice. Stays valid while the session that registered it has not
/// called [`PoolSlice::unregister`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId {
    index: u32,
    generation: u32,
}

/// Limits of one pool, set at registration and by [`PoolSlice::set_limits`].
#[derive(Clone, Debug)]
pub struct PoolLimits {
    /// `pool_size` (+ `reserve_pool_size`) of this (entry, user, server) across all workers.
    pub pool_budget: Arc<PoolBudget>,
    /// Wider caps shared with other pools (`max_db_connections`, `max_user_connections`).
    pub shared_budgets: Vec<Arc<PoolBudget>>,
    /// Servers kept open across all workers even when idle (`min_pool_size`).
    pub min_pool_size: u32,
    /// A waiter older than this may use the reserve (`reserve_pool_timeout`; None = never).
    pub reserve_pool_timeout: Option<Duration>,
    /// Close servers idle this long (`server_idle_timeout`; None = never).
    pub server_idle_timeout: Option<Duration>,
    /// Close servers connected this long when they are next unused (`server_lifetime`; zero
    /// means each server serves one checkout).
    pub server_lifetime: Duration,
}

impl PoolLimits {
    /// Limits with a pool budget and PgBouncer's default timeouts, for tests and simple setups.
    pub fn with_budget(pool_budget: Arc<PoolBudget>) -> PoolLimits {
        PoolLimits {
            pool_budget,
            shared_budgets: Vec::new(),
            min_pool_size: 0,
            reserve_pool_timeout: None,
            server_idle_timeout: Some(Duration::from_secs(600)),
            server_lifetime: Duration::from_secs(3600),
        }
    }

    pub(crate) fn budgets(&self) -> impl Iterator<Item = &PoolBudget> {
        std::iter::once(self.pool_budget.as_ref())
            .chain(self.shared_budgets.iter().map(Arc::as_ref))
    }
}

/// Servers and waiters of one pool (or of a whole slice) by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// In the idle list.
    pub idle: u32,
    /// Checked out to a session.
    pub active: u32,
    /// Being connected (budget taken, not yet [`PoolSlice::opened`]).
    pub opening: u32,
    /// Clients parked for a server.
    pub waiting: u32,
}

impl PoolCounts {
    /// Servers this worker holds budget for: idle + active + opening.
    pub fn servers(&self) -> u32 {
        self.idle + self.active + self.opening
    }
}

/// What to do with a server that came back (or was just opened).
#[derive(Debug, PartialEq, Eq)]
pub enum Checkin<S, W> {
    /// Give it to this waiter, the longest-waiting client of the pool.
    Handoff { waiter: W, lease: Lease<S> },
    /// It is idle in the pool now.
    Pooled,
    /// Close it; it no longer counts against any budget. When `open_replacement` is true,
    /// clients are waiting and a slot was taken for a new server: open one.
    Close {
        lease: Lease<S>,
        reason: CloseReason,
        open_replacement: bool,
    },
}

/// An idle server housekeeping took out of the pool to close.
#[derive(Debug, PartialEq, Eq)]
pub struct Closing<S> {
    pub pool: PoolId,
    pub lease: Lease<S>,
    pub reason: CloseReason,
}

/// A waiter whose deadline passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired<W> {
    pub pool: PoolId,
    pub waiter: W,
}

/// Refusals of [`PoolSlice::register`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolError {
    /// The slice already holds `max_pools` pools (`max_pools_per_worker`).
    TooManyPools { max_pools: usize },
}

impl std::fmt::Display for PoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PoolError::TooManyPools { max_pools } => write!(
                f,
                "this worker already has {max_pools} server pools (max_pools_per_worker)"
            ),
        }
    }
}

impl std::error::Error for PoolError {}

/// One pool's state.
#[derive(Debug)]
pub(crate) struct Pool<S> {
    pub(crate) key: PoolKey,
    pub(crate) limits: PoolLimits,
    /// Back = most recently used.
    pub(crate) idle: VecDeque<Lease<S>>,
    pub(crate) active: u32,
    pub(crate) opening: u32,
    pub(crate) registrations: u32,
    pub(crate) waiters: List,
    /// No new opens before this (after a failed connect, `server_login_retry`).
    pub(crate) retry_at: Option<Instant>,
    pub(crate) draining: bool,
}

impl<S> Pool<S> {
    pub(crate) fn counts(&self) -> PoolCounts {
        PoolCounts {
            idle: u32::try_from(self.idle.len()).unwrap_or(u32::MAX),
            active: self.active,
            opening: self.opening,
            waiting: self.waiters.len(),
        }
    }

    fn is_unused(&self) -> bool {
        self.registrations == 0 && self.counts() == PoolCounts::default()
    }
}

#[derive(Debug)]
pub(crate) struct Slot<S> {
    pub(crate) generation: u32,
    pub(crate) pool: Option<Pool<S>>,
}

/// One worker's pools. `S` is the server handle, `W` the waiting client's handle.
#[derive(Debug)]
pub struct PoolSlice<S, W> {
    pub(crate) slots: Vec<Slot<S>>,
    free_slots: Vec<u32>,
    by_key: HashMap<PoolKey, PoolId, ahash::RandomState>,
    pub(crate) waiters: Waiters<W>,
    max_pools: usize,
}

impl<S, W: Copy> PoolSlice<S, W> {
    /// An empty slice holding at most `max_pools` pools.
    pub fn new(max_pools: usize) -> PoolSlice<S, W> {
        PoolSlice {
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_key: HashMap::with_hasher(ahash::RandomState::new()),
            waiters: Waiters::new(),
            max_pools,
        }
    }

    /// Finds or creates the pool for `key` and counts one more session using it. `limits` is
    /// used only when the pool is new.
    pub fn register(&mut self, key: &PoolKey, limits: &PoolLimits) -> Result<PoolId, PoolError> {
        if let Some(&id) = self.by_key.get(key) {
            if let Some(pool) = self.pool_mut(id) {
                pool.registrations += 1;
            }
            return Ok(id);
        }
        if self.by_key.len() >= self.max_pools {
            return Err(PoolError::TooManyPools {
                max_pools: self.max_pools,
            });
        }
        let id = self.allocate_slot(Pool {
            key: key.clone(),
            limits: limits.clone(),
            idle: VecDeque::new(),
            active: 0,
            opening: 0,
            registrations: 1,
            waiters: List::EMPTY,
            retry_at: None,
            draining: false,
        });
        self.by_key.insert(key.clone(), id);
        Ok(id)
    }

    /// The pool for `key`, if registered.
    pub fn find(&self, key: &PoolKey) -> Option<PoolId> {
        self.by_key.get(key).copied()
    }

    /// One session stopped using the pool. The pool is forgotten once nothing refers to it
    /// and it holds no server and no waiter.
    pub fn unregister(&mut self, id: PoolId) {
        if let Some(pool) = self.pool_mut(id) {
            debug_assert!(pool.registrations > 0, "unregister without register");
            pool.registrations = pool.registrations.saturating_sub(1);
        }
        self.forget_if_unused(id);
    }

    /// The key of a pool.
    pub fn key(&self, id: PoolId) -> Option<&PoolKey> {
        self.pool(id).map(|pool| &pool.key)
    }

    /// Replaces a pool's limits (reload).
    pub fn set_limits(&mut self, id: PoolId, limits: PoolLimits) {
        if let Some(pool) = self.pool_mut(id) {
            pool.limits = limits;
        }
    }

    /// Counts of one pool.
    pub fn counts(&self, id: PoolId) -> PoolCounts {
        self.pool(id).map(Pool::counts).unwrap_or_default()
    }

    /// Counts summed over every pool of the slice.
    pub fn totals(&self) -> PoolCounts {
        self.pools()
            .fold(PoolCounts::default(), |sum, (_, _, counts)| PoolCounts {
                idle: sum.idle + counts.idle,
                active: sum.active + counts.active,
                opening: sum.opening + counts.opening,
                waiting: sum.waiting + counts.waiting,
            })
    }

    /// Every pool with its key and counts (for `SHOW POOLS`).
    pub fn pools(&self) -> impl Iterator<Item = (PoolId, &PoolKey, PoolCounts)> {
        self.slots.iter().enumerate().filter_map(|(index, slot)| {
            let pool = slot.pool.as_ref()?;
            let id = PoolId {
                index: u32::try_from(index).ok()?,
                generation: slot.generation,
            };
            Some((id, &pool.key, pool.counts()))
        })
    }

    /// Takes the most recently used idle server, if any.
    pub fn checkout(&mut self, id: PoolId) -> Option<Lease<S>> {
        let pool = self.pool_mut(id)?;
        let lease = pool.idle.pop_back()?;
        pool.active += 1;
        Some(lease)
    }

    /// Returns a checked-out server: to the oldest waiter, to the idle list, or to be closed
    /// (`server_lifetime` passed, pool draining, or another worker asked for the slot).
    pub fn checkin(&mut self, id: PoolId, mut lease: Lease<S>, now: Instant) -> Checkin<S, W> {
        let Some(pool) = self.pool_mut(id) else {
            return Checkin::Close {
                lease,
                reason: CloseReason::Draining,
                open_replacement: false,
            };
        };
        debug_assert!(pool.active > 0, "checkin without checkout");
        pool.active = pool.active.saturating_sub(1);
        lease.idle_since = now;
        let lifetime_over = now >= lease.opened_at + pool.limits.server_lifetime;
        if pool.draining {
            return self.close_returned(id, lease, CloseReason::Draining, now);
        }
        if lifetime_over {
            return self.close_returned(id, lease, CloseReason::Lifetime, now);
        }
        self.place(id, lease)
    }

    /// Takes a budget slot to open a new server, if the budgets allow it now; on success the
    /// pool counts one server opening and the caller must end it with [`PoolSlice::opened`] or
    /// [`PoolSlice::open_failed`]. A waiter older than `reserve_pool_timeout` may use the
    /// reserve. When the slot is refused and this worker holds no server of the pool, other
    /// workers are asked to release an idle one.
    pub fn try_open(&mut self, id: PoolId, now: Instant) -> bool {
        let Some(pool) = self.pool(id) else {
            return false;
        };
        if pool.draining || pool.retry_at.is_some_and(|retry_at| now < retry_at) {
            return false;
        }
        let use_reserve = match (
            pool.limits.reserve_pool_timeout,
            self.waiters.front_parked_at(&pool.waiters),
        ) {
            (Some(timeout), Some(parked_at)) => parked_at + timeout <= now,
            _ => false,
        };
        let acquired = acquire_all(&pool.limits, use_reserve);
        if let Err(refused) = acquired {
            if pool.counts().servers() == 0 && pool.waiters.len() > 0 {
                refused.request_release();
            }
            return false;
        }
        if let Some(pool) = self.pool_mut(id) {
            pool.opening += 1;
            pool.retry_at = None;
        }
        true
    }

    /// A server opened by [`PoolSlice::try_open`] is ready: it goes to the oldest waiter or
    /// into the idle list.
    pub fn opened(&mut self, id: PoolId, server: S, now: Instant) -> Checkin<S, W> {
        let lease = Lease {
            server,
            opened_at: now,
            idle_since: now,
        };
        let Some(pool) = self.pool_mut(id) else {
            return Checkin::Close {
                lease,
                reason: CloseReason::Draining,
                open_replacement: false,
            };
        };
        debug_assert!(pool.opening > 0, "opened without try_open");
        pool.opening = pool.opening.saturating_sub(1);
        if pool.draining {
            pool.limits.budgets().for_each(PoolBudget::release);
            return Checkin::Close {
                lease,
                reason: CloseReason::Draining,
                open_replacement: false,
            };
        }
        self.place(id, lease)
    }

    /// Opening a server failed: its slot goes back, and no new open is tried for this pool
    /// before `retry_at` (`now + server_login_retry`). Waiters stay parked; fail them with
    /// [`PoolSlice::next_waiter`] if the failure is theirs (bad password, no such database).
    pub fn open_failed(&mut self, id: PoolId, retry_at: Instant) {
        if let Some(pool) = self.pool_mut(id) {
            debug_assert!(pool.opening > 0, "open_failed without try_open");
            pool.opening = pool.opening.saturating_sub(1);
            pool.retry_at = Some(retry_at);
            pool.limits.budgets().for_each(PoolBudget::release);
        }
        self.forget_if_unused(id);
    }

    /// A checked-out server was closed instead of checked in (dirty, broken, replica down).
    /// Returns true when clients wait and a slot was taken for a replacement: open one.
    pub fn closed(&mut self, id: PoolId, now: Instant) -> bool {
        let Some(pool) = self.pool_mut(id) else {
            return false;
        };
        debug_assert!(pool.active > 0, "closed without checkout");
        pool.active = pool.active.saturating_sub(1);
        pool.limits.budgets().for_each(PoolBudget::release);
        let replace = pool.waiters.len() > 0 && self.try_open(id, now);
        self.forget_if_unused(id);
        replace
    }

    /// Stops a pool: no new servers, idle ones closed by [`PoolSlice::collect_closable`],
    /// active ones closed at checkin.
    pub fn drain(&mut self, id: PoolId) {
        if let Some(pool) = self.pool_mut(id) {
            pool.draining = true;
        }
    }

    /// Drains every pool whose key matches (e.g. all pools of a replica that went Down).
    pub fn drain_where(&mut self, mut matches: impl FnMut(&PoolKey) -> bool) {
        for slot in &mut self.slots {
            if let Some(pool) = slot.pool.as_mut().filter(|pool| matches(&pool.key)) {
                pool.draining = true;
            }
        }
    }

    /// Whether a pool is draining.
    pub fn is_draining(&self, id: PoolId) -> bool {
        self.pool(id).is_some_and(|pool| pool.draining)
    }

    /// Parks a client until a server comes back or `deadline` passes (`None` = no deadline).
    pub fn park(
        &mut self,
        id: PoolId,
        waiter: W,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<WaitTicket> {
        let pool = pool_in(&mut self.slots, id)?;
        Some(
            self.waiters
                .park(&mut pool.waiters, id.index, waiter, now, deadline),
        )
    }

    /// Removes a parked client (it disconnected). None if it was no longer parked.
    pub fn cancel_wait(&mut self, ticket: WaitTicket) -> Option<W> {
        let id = self.id_at(self.waiters.pool_of(ticket)?)?;
        let pool = pool_in(&mut self.slots, id)?;
        let waiter = self.waiters.cancel(&mut pool.waiters, ticket);
        self.forget_if_unused(id);
        waiter
    }

    /// Removes and returns the longest-waiting client of a pool (to fail it or route it
    /// elsewhere).
    pub fn next_waiter(&mut self, id: PoolId) -> Option<W> {
        let pool = pool_in(&mut self.slots, id)?;
        let unparked = self.waiters.pop_front(&mut pool.waiters);
        unparked.map(|unparked| unparked.waiter)
    }

    /// Servers still to open for `min_pool_size`, counted across all workers.
    pub fn warmup_deficit(&self, id: PoolId) -> u32 {
        self.pool(id).map_or(0, |pool| {
            let in_use = pool.limits.pool_budget.in_use();
            pool.limits.min_pool_size.saturating_sub(in_use)
        })
    }

    /// Clients parked on a pool.
    pub fn waiting(&self, id: PoolId) -> u32 {
        self.pool(id).map_or(0, |pool| pool.waiters.len())
    }

    /// The earliest waiter deadline, for the worker's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.waiters
            .earliest_deadline()
            .map(|(deadline, _)| deadline)
    }

    /// Removes one waiter whose deadline is at or before `now`; call until None.
    pub fn poll_expired(&mut self, now: Instant) -> Option<Expired<W>> {
        let (deadline, index) = self.waiters.earliest_deadline()?;
        if deadline > now {
            return None;
        }
        let id = self.id_at(index)?;
        let pool = pool_in(&mut self.slots, id)?;
        let unparked = self.waiters.pop_expired(&mut pool.waiters, now)?;
        Some(Expired {
            pool: id,
            waiter: unparked.waiter,
        })
    }

    /// A returned or new server: to the oldest waiter, else closed when a budget is over its
    /// limit or asks for it back, else idle. The server is counted active on entry.
    fn place(&mut self, id: PoolId, lease: Lease<S>) -> Checkin<S, W> {
        let Some(pool) = pool_in(&mut self.slots, id) else {
            return Checkin::Close {
                lease,
                reason: CloseReason::Draining,
                open_replacement: false,
            };
        };
        if let Some(unparked) = self.waiters.pop_front(&mut pool.waiters) {
            pool.active += 1;
            return Checkin::Handoff {
                waiter: unparked.waiter,
                lease,
            };
        }
        let reason = if pool.limits.budgets().any(PoolBudget::is_over_limit) {
            CloseReason::OverLimit
        } else if pool.limits.budgets().any(PoolBudget::take_release_request) {
            CloseReason::ReleaseRequested
        } else {
            pool.idle.push_back(lease);
            return Checkin::Pooled;
        };
        pool.limits.budgets().for_each(PoolBudget::release);
        Checkin::Close {
            lease,
            reason,
            open_replacement: false,
        }
    }

    /// Closes a server that was checked in; opens a replacement for waiters if allowed.
    fn close_returned(
        &mut self,
        id: PoolId,
        lease: Lease<S>,
        reason: CloseReason,
        now: Instant,
    ) -> Checkin<S, W> {
        let mut open_replacement = false;
        if let Some(pool) = self.pool(id) {
            pool.limits.budgets().for_each(PoolBudget::release);
            open_replacement = pool.waiters.len() > 0 && self.try_open(id, now);
        }
        self.forget_if_unused(id);
        Checkin::Close {
            lease,
            reason,
            open_replacement,
        }
    }

    pub(crate) fn pool(&self, id: PoolId) -> Option<&Pool<S>> {
        let slot = self.slots.get(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        slot.pool.as_ref()
    }

    pub(crate) fn pool_mut(&mut self, id: PoolId) -> Option<&mut Pool<S>> {
        pool_in(&mut self.slots, id)
    }

    pub(crate) fn id_at(&self, index: u32) -> Option<PoolId> {
        let slot = self.slots.get(index as usize)?;
        slot.pool.as_ref()?;
        Some(PoolId {
            index,
            generation: slot.generation,
        })
    }

    fn allocate_slot(&mut self, pool: Pool<S>) -> PoolId {
        if let Some(index) = self.free_slots.pop() {
            let slot = &mut self.slots[index as usize];
            slot.pool = Some(pool);
            return PoolId {
                index,
                generation: slot.generation,
            };
        }
        let index = u32::try_from(self.slots.len()).unwrap_or(u32::MAX);
        self.slots.push(Slot {
            generation: 0,
            pool: Some(pool),
        });
        PoolId {
            index,
            generation: 0,
        }
    }

    /// Frees the slot of a pool nothing refers to and that holds nothing.
    pub(crate) fn forget_if_unused(&mut self, id: PoolId) {
        if !self.pool(id).is_some_and(Pool::is_unused) {
            return;
        }
        let slot = &mut self.slots[id.index as usize];
        if let Some(pool) = slot.pool.take() {
            self.by_key.remove(&pool.key);
        }
        slot.generation = slot.generation.wrapping_add(1);
        self.free_slots.push(id.index);
    }
}

/// The live pool behind `id`, borrowing only the slots (so the waiter slab stays usable).
fn pool_in<S>(slots: &mut [Slot<S>], id: PoolId) -> Option<&mut Pool<S>> {
    let slot = slots.get_mut(id.index as usize)?;
    if slot.generation != id.generation {
        return None;
    }
    slot.pool.as_mut()
}

/// Takes one slot of every budget of a pool, or none: on a refusal the slots already taken
/// are given back and the refusing budget is returned.
fn acquire_all(limits: &PoolLimits, use_reserve: bool) -> Result<(), &PoolBudget> {
    let pool_budget = limits.pool_budget.as_ref();
    let pool_acquired =
        pool_budget.try_acquire() || (use_reserve && pool_budget.try_acquire_reserve());
    if !pool_acquired {
        return Err(pool_budget);
    }
    for (taken, budget) in limits.shared_budgets.iter().enumerate() {
        if !budget.try_acquire() {
            pool_budget.release();
            limits.shared_budgets[..taken]
                .iter()
                .for_each(|budget| budget.release());
            return Err(budget);
        }
    }
    Ok(())
}
