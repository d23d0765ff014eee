//! One worker's slice of the server pool: pools by exact key, idle servers reused most recently
//! used first (so the coldest age out under `server_idle_timeout`), counts per state, the
//! clients waiting for a server (a FIFO per class, served in the pool's
//! [`WaitOrder`](crate::WaitOrder)), and per pool what its logins taught (the welcome cache,
//! a login failure to report). Pure: time is an argument, the only shared state is the
//! [`PoolBudget`]s the caller hands in.
//!
//! Sessions look their key up once with [`PoolSlice::register`] (the only hashing and the only
//! allocation for a new key) and then use the returned [`PoolId`], an index, for every checkout.
//!
//! A pool is *listed* (found by [`PoolSlice::find`] and [`PoolSlice::register`]) until it is
//! drained or evicted; from then on it only empties, reached through the ids already handed
//! out, and a new registration of its key gets a fresh pool (a replica back up, an entry
//! changed by a reload, a key registered again after eviction). A pool is forgotten, its id
//! going stale, once it is unused: no registration, no server in any state, no waiter, no
//! handed-over slot, and no login failure still in force (that one is dropped by
//! [`PoolSlice::collect_closable`] once `retry_at` passed, so a stream of clients with a bad
//! password meets the memo instead of one login attempt each).

use crate::budget::PoolBudget;
use crate::host_turn::HostBalance;
use crate::key::PoolKey;
use crate::lease::{CloseReason, Lease};
use crate::pool::PoolCounts;
use crate::pool::{LoginFailure, Pool, PoolLimits};
use crate::wait_order::WaitClass;
use crate::waiters::{WaitTicket, Waiters};
use crate::welcome::{Spellings, Welcome};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A registered pool in one slice. Stays valid while the session that registered it has not
/// called [`PoolSlice::unregister`], and while the pool holds anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId {
    index: u32,
    generation: u32,
}

/// What to do with a server that came back (or was just opened).
#[derive(Debug, PartialEq, Eq)]
pub enum Checkin<S, W> {
    /// Give it to this waiter, the first of the pool's waiters in its
    /// [`WaitOrder`](crate::WaitOrder) (the longest-waiting one under FIFO).
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
    /// Worker `to` asked for a server of this pool ([`PoolSlice::release_for`]): move it to
    /// `to` whole and report [`PoolSlice::moved`], or end it (Terminate, then wait for the
    /// connection to close) and report [`PoolSlice::left`], which hands its slot to `to`. The
    /// server counts as leaving until then.
    HandOver { lease: Lease<S>, to: usize },
}

/// An idle server taken out of the pool to close.
#[derive(Debug, PartialEq, Eq)]
pub struct Closing<S> {
    pub pool: PoolId,
    pub lease: Lease<S>,
    pub reason: CloseReason,
    /// True: the server counts as leaving and still holds its budget slots; report
    /// [`PoolSlice::left`] for `pool` once its connection is closed. False: its slots are
    /// given back already.
    pub leaving: bool,
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
    /// The slice already holds `max_pools` pools (`max_pools_per_worker`); see
    /// [`PoolSlice::evict_for_room`].
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

/// Why [`PoolSlice::try_open`] took no slot. A refusal changes no count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The pool is draining, in its login-retry pause (`retry_at`), or the id is stale.
    NotNow,
    /// The pool's own budget (pool_size, plus the reserve when allowed) is spent.
    PoolFull,
    /// A shared budget (max_db_connections / max_user_connections) is spent; its index in
    /// [`PoolLimits::shared_budgets`].
    SharedFull { budget: usize },
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
    /// Listed pools only, which are exactly the pools not draining (see the module doc).
    by_key: HashMap<PoolKey, PoolId, ahash::RandomState>,
    pub(crate) waiters: Waiters<W>,
    max_pools: usize,
    /// Workers sharing the budgets, for each pool's fair share.
    pub(crate) workers: u32,
    /// `pool_idle_timeout`: an unused pool stays listed this long (see `idle_pools.rs`);
    /// None forgets it as soon as it is unused.
    pub(crate) idle_pool_timeout: Option<Duration>,
    /// This worker's index among them, where it publishes its idle servers
    /// ([`PoolLimits::idle_board`]); out of range until [`PoolSlice::set_worker`].
    pub(crate) worker: usize,
    /// Pools with a borrow on its way (`borrow.rs`), so the timer scans them only then.
    pub(crate) pending_borrows: u32,
}

impl<S, W: Copy> PoolSlice<S, W> {
    /// An empty slice holding at most `max_pools` listed pools, one of `workers` workers.
    pub fn new(max_pools: usize, workers: usize) -> PoolSlice<S, W> {
        PoolSlice {
            slots: Vec::new(),
            free_slots: Vec::new(),
            by_key: HashMap::with_hasher(ahash::RandomState::new()),
            waiters: Waiters::new(),
            max_pools,
            workers: u32::try_from(workers).unwrap_or(u32::MAX).max(1),
            idle_pool_timeout: None,
            worker: usize::MAX,
            pending_borrows: 0,
        }
    }

    /// This slice is worker `worker`'s: its idle servers are published under that index
    /// for pools registered from now on.
    pub fn set_worker(&mut self, worker: usize) {
        self.worker = worker;
    }

    /// Finds or creates the pool for `key` and counts one more session using it. `limits` is
    /// used only when the pool is new. On [`PoolError::TooManyPools`], try
    /// [`PoolSlice::evict_for_room`] and register again.
    pub fn register(
        &mut self,
        key: &PoolKey,
        limits: &PoolLimits,
        now: Instant,
    ) -> Result<PoolId, PoolError> {
        if let Some(&id) = self.by_key.get(key) {
            if let Some(pool) = self.pool_mut(id) {
                pool.registrations += 1;
                pool.last_used = now;
            }
            return Ok(id);
        }
        if self.by_key.len() >= self.max_pools {
            return Err(PoolError::TooManyPools {
                max_pools: self.max_pools,
            });
        }
        let id = self.allocate_slot(Pool::new(key.clone(), limits.clone(), now, self.worker));
        self.by_key.insert(key.clone(), id);
        Ok(id)
    }

    /// The listed pool for `key`, if any.
    pub fn find(&self, key: &PoolKey) -> Option<PoolId> {
        self.by_key.get(key).copied()
    }

    /// One session stopped using the pool. The pool is forgotten once it is unused.
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

    /// The limits of a pool.
    pub fn limits(&self, id: PoolId) -> Option<&PoolLimits> {
        self.pool(id).map(|pool| &pool.limits)
    }

    /// Replaces a pool's limits (reload); keep the budget `Arc`s (see [`PoolLimits`]).
    pub fn set_limits(&mut self, id: PoolId, limits: PoolLimits) {
        if let Some(pool) = self.pool_mut(id) {
            pool.spellings.limit = limits.max_spellings;
            pool.idle.set_board(Arc::clone(&limits.idle_board));
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
                leaving: sum.leaving + counts.leaving,
                waiting: sum.waiting + counts.waiting,
            })
    }

    /// Every pool with its key and counts (for `SHOW POOLS`), drained ones included.
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

    /// Checks out one given idle server (its connection broke while idle, or it must be
    /// checked before use): it counts as active from now; end it with [`PoolSlice::closed`]
    /// or [`PoolSlice::checkin`]. None: it is not idle in this pool.
    pub fn take_idle(&mut self, id: PoolId, server: &S) -> Option<Lease<S>>
    where
        S: PartialEq,
    {
        let pool = self.pool_mut(id)?;
        let position = pool.idle.iter().position(|lease| lease.server == *server)?;
        let lease = pool.idle.remove(position)?;
        pool.active += 1;
        Some(lease)
    }

    /// Returns a checked-out server: to the first waiter, to the idle list, to another
    /// worker that asked for it, or to be closed (`server_lifetime` passed, pool draining, a
    /// budget over its limit or asking for it back).
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
        pool.last_used = now;
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

    /// Takes a slot to open a new server, if the pool and its budgets allow it now; on
    /// success the pool counts one server opening and the caller must end it with
    /// [`PoolSlice::opened`] or [`PoolSlice::open_failed`]. A slot handed over by another
    /// worker ([`PoolSlice::adopt_slot`]) is used first, without touching the budgets (it is
    /// counted already). A waiter older than `reserve_pool_timeout` may use the reserve.
    /// When a shared cap refuses and this worker holds no server of the pool while clients
    /// wait, other workers are asked (through that budget) to release an idle one.
    pub fn try_open(&mut self, id: PoolId, now: Instant) -> Result<(), Refusal> {
        let Some(pool) = self.pool(id) else {
            return Err(Refusal::NotNow);
        };
        // A login refused on this worker, or with an error on any other, is not tried
        // again before its `retry_at`.
        let retry_later = pool
            .failure
            .as_ref()
            .is_some_and(|failure| now < failure.retry_at)
            || pool.limits.pool_budget.failure(now).is_some();
        if pool.draining || retry_later {
            return Err(Refusal::NotNow);
        }
        let granted = pool.granted > 0;
        let mut from_reserve = false;
        if !granted {
            let use_reserve = match (
                pool.limits.reserve_pool_timeout,
                self.waiters.oldest_parked_at(&pool.waiters),
            ) {
                (Some(timeout), Some(parked_at)) => parked_at + timeout <= now,
                _ => false,
            };
            match acquire_all(&pool.limits, use_reserve) {
                Ok(slot) => from_reserve = slot == BudgetSlot::Reserve,
                Err(refusal) => {
                    // Under a full shared cap, an idle server of another pool must close. A
                    // full pool budget is not asked through the budget: the engine asks the
                    // other workers by message for a server of this very key, which moves
                    // whole rather than closing ([`PoolSlice::release_for`]).
                    let starving = pool.counts().servers() == 0 && pool.waiters.len() > 0;
                    let shared_cap = matches!(refusal, Refusal::SharedFull { .. });
                    if let Some(budget) =
                        refusing_budget(&pool.limits, refusal).filter(|_| starving && shared_cap)
                    {
                        budget.request_release();
                    }
                    return Err(refusal);
                }
            }
        }
        if let Some(pool) = self.pool_mut(id) {
            if granted {
                pool.granted -= 1;
            }
            pool.reserve_opens += u32::from(from_reserve);
            pool.opening += 1;
            pool.failure = None;
        }
        Ok(())
    }

    /// Whether an open of pool `id` took a reserve slot (its client waited
    /// `reserve_pool_timeout`) that the caller was not told of yet; each such open is told
    /// once, so the caller can say so when it opens the server.
    pub fn take_reserve_open(&mut self, id: PoolId) -> bool {
        let Some(pool) = self.pool_mut(id) else {
            return false;
        };
        let taken = pool.reserve_opens > 0;
        pool.reserve_opens = pool.reserve_opens.saturating_sub(1);
        taken
    }

    /// A server opened by [`PoolSlice::try_open`] is ready (its login succeeded, which ends
    /// any login failure memo): it goes to a worker that asked for it, to the first waiter,
    /// or into the idle list.
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
        pool.failure = None;
        pool.limits.pool_budget.clear_failure();
        pool.limits.host_turn.opened();
        if pool.draining {
            pool.limits.budgets().for_each(PoolBudget::release);
            self.forget_if_unused(id);
            return Checkin::Close {
                lease,
                reason: CloseReason::Draining,
                open_replacement: false,
            };
        }
        self.place(id, lease)
    }

    /// Opening a server failed: its slot goes back, and no new open is tried for this pool
    /// before `retry_at` (`now + server_login_retry`). `error` (the server's ErrorResponse,
    /// or pgtier's own) is what clients joining the pool get meanwhile, see
    /// [`PoolSlice::login_failure`]; None keeps them waiting (a failure that is not theirs).
    /// Waiters stay parked: fail them with [`PoolSlice::next_waiter`] or
    /// [`PoolSlice::take_waiters`].
    pub fn open_failed(&mut self, id: PoolId, retry_at: Instant, error: Option<Bytes>) {
        self.open_failed_as(id, retry_at, error, true);
    }

    /// Opening a server failed because it could not be reached (refused or timed-out
    /// connect, reset in login): as [`PoolSlice::open_failed`], but `error` is only for
    /// clients that join meanwhile (PgBouncer's fast fail) and stays on this worker; the
    /// waiters are not failed by it (`standing_login_failure` leaves it out), they wait for
    /// the next attempt.
    pub fn open_unreachable(&mut self, id: PoolId, retry_at: Instant, error: Option<Bytes>) {
        self.open_failed_as(id, retry_at, error, false);
    }

    fn open_failed_as(
        &mut self,
        id: PoolId,
        retry_at: Instant,
        error: Option<Bytes>,
        refused: bool,
    ) {
        if let Some(pool) = self.pool_mut(id) {
            debug_assert!(pool.opening > 0, "open_failed without try_open");
            pool.opening = pool.opening.saturating_sub(1);
            if let Some(error) = error.as_ref().filter(|_| refused) {
                pool.limits
                    .pool_budget
                    .record_failure(retry_at, error.clone());
            }
            pool.failure = Some(LoginFailure {
                error,
                retry_at,
                refused,
            });
            pool.limits.host_turn.failed();
            pool.limits.budgets().for_each(PoolBudget::release);
        }
        self.forget_if_unused(id);
    }

    /// Which of `hosts` entries of its database's host list the pool's next open goes to
    /// (`balance`: PgBouncer's `load_balance_hosts`); 0 for a stale id.
    pub fn next_host(&mut self, id: PoolId, hosts: usize, balance: HostBalance) -> usize {
        self.pool_mut(id)
            .map_or(0, |pool| pool.limits.host_turn.next(hosts, balance))
    }

    /// Forgets every pool's login failure memo: the configuration of how servers are
    /// reached changed (server TLS settings), so a failed login says nothing about the next
    /// one, which may go at once.
    pub fn forget_login_failures(&mut self) {
        for slot in &mut self.slots {
            if let Some(pool) = slot.pool.as_mut() {
                pool.failure = None;
                // The memo other workers share goes too (each worker forgets on the same
                // reload).
                pool.limits.pool_budget.clear_failure();
            }
        }
    }

    /// Forgets one pool's login failure memo: where its servers are reached changed (its
    /// entry's primary moved), so the next open may go at once.
    pub fn forget_login_failure(&mut self, id: PoolId) {
        if let Some(pool) = self.pool_mut(id) {
            pool.failure = None;
            pool.limits.pool_budget.clear_failure();
        }
    }

    /// The error a client joining this pool gets now instead of waiting: Some while `now <
    /// retry_at` of the last failed login (on this worker, or with an error on any other)
    /// and this slice holds no server of the pool (idle, active or opening), so a login
    /// that may still succeed is waited for.
    pub fn login_failure(&self, id: PoolId, now: Instant) -> Option<Bytes> {
        let pool = self.pool(id)?;
        if pool.live_servers() > 0 {
            return None;
        }
        match pool.failure.as_ref() {
            Some(failure) if now < failure.retry_at => failure.error.clone(),
            _ => pool.limits.pool_budget.failure(now),
        }
    }

    /// The error of the pool's last failed login while it stands (`now < retry_at`, on
    /// this worker, or with an error on any other), whatever servers this slice holds: for
    /// a caller that knows better than the slice which of them will serve again (servers
    /// RECONNECT marked will not).
    pub fn standing_login_failure(&self, id: PoolId, now: Instant) -> Option<Bytes> {
        let pool = self.pool(id)?;
        match pool.failure.as_ref() {
            Some(failure) if now < failure.retry_at && failure.refused => failure.error.clone(),
            _ => pool.limits.pool_budget.failure(now),
        }
    }

    /// A checked-out server was closed instead of checked in (dirty, broken, replica down).
    /// Returns true when clients wait and a slot was taken for a replacement: open one.
    pub fn closed(&mut self, id: PoolId, now: Instant) -> bool {
        let Some(pool) = self.pool_mut(id) else {
            return false;
        };
        debug_assert!(pool.active > 0, "closed without checkout");
        pool.active = pool.active.saturating_sub(1);
        pool.last_used = now;
        pool.limits.budgets().for_each(PoolBudget::release);
        let replace = pool.waiters.len() > 0 && self.try_open(id, now).is_ok();
        self.forget_if_unused(id);
        replace
    }

    /// Stops a pool: no new servers, idle ones closed by [`PoolSlice::collect_closable`],
    /// active ones closed at checkin. It is unlisted at once (see the module doc); take its
    /// waiters with [`PoolSlice::take_waiters`] to route them elsewhere.
    pub fn drain(&mut self, id: PoolId) {
        self.unlist(id);
    }

    /// Drains every listed pool whose key matches (e.g. all pools of a replica that went
    /// Down: `|key| key.target == ServerTarget::Replica(addr) && *key.database == *db`).
    pub fn drain_where(&mut self, mut matches: impl FnMut(&PoolKey) -> bool) {
        let drained: Vec<PoolId> = self
            .by_key
            .iter()
            .filter(|(key, _)| matches(key))
            .map(|(_, &id)| id)
            .collect();
        for id in drained {
            self.unlist(id);
        }
    }

    /// Whether a pool is draining (drained or evicted).
    pub fn is_draining(&self, id: PoolId) -> bool {
        self.pool(id).is_some_and(|pool| pool.draining)
    }

    /// Parks a client of the freemium class (see [`PoolSlice::park_as`]).
    pub fn park(
        &mut self,
        id: PoolId,
        waiter: W,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<WaitTicket> {
        self.park_as(id, waiter, WaitClass::Freemium, now, deadline)
    }

    /// Parks a client of `class` until a server comes back (it is served in the pool's
    /// [`WaitOrder`](crate::WaitOrder)) or `deadline` passes (`None` = no deadline).
    pub fn park_as(
        &mut self,
        id: PoolId,
        waiter: W,
        class: WaitClass,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<WaitTicket> {
        let pool = pool_in(&mut self.slots, id)?;
        Some(
            self.waiters
                .park(&mut pool.waiters, id.index, waiter, class, now, deadline),
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

    /// Removes and returns the first waiter of a pool in its [`WaitOrder`](crate::WaitOrder)
    /// (to fail it or route it elsewhere).
    pub fn next_waiter(&mut self, id: PoolId) -> Option<W> {
        let pool = pool_in(&mut self.slots, id)?;
        let order = pool.limits.wait_order;
        let unparked = self.waiters.pop_next(&mut pool.waiters, order);
        self.forget_if_unused(id);
        unparked.map(|unparked| unparked.waiter)
    }

    /// Moves every client parked on a pool into `out`, in its [`WaitOrder`](crate::WaitOrder)
    /// (a drained replica's waiters, to route elsewhere; or all of them, to fail them).
    pub fn take_waiters(&mut self, id: PoolId, out: &mut Vec<W>) {
        let Some(pool) = pool_in(&mut self.slots, id) else {
            return;
        };
        let order = pool.limits.wait_order;
        while let Some(unparked) = self.waiters.pop_next(&mut pool.waiters, order) {
            out.push(unparked.waiter);
        }
        self.forget_if_unused(id);
    }

    /// The pool is kept warm on every worker (a configured pool whose key is known before
    /// any client: a forced `user`, no startup parameters): this worker opens at most
    /// `share` of its `min_pool_size` servers, the others the rest. Split the minimum so the
    /// shares add up to it.
    pub fn keep_warm(&mut self, id: PoolId, share: u32) {
        if let Some(pool) = self.pool_mut(id) {
            pool.warm_share = Some(share);
        }
    }

    /// Worker `worker`'s part of `min_pool_size` among `workers`: an even split, the first
    /// `min_pool_size % workers` workers opening one more.
    pub fn warm_share(min_pool_size: u32, worker: usize, workers: usize) -> u32 {
        let workers = u32::try_from(workers).unwrap_or(u32::MAX).max(1);
        let worker = u32::try_from(worker).unwrap_or(u32::MAX);
        min_pool_size / workers + u32::from(worker < min_pool_size % workers)
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
        self.forget_if_unused(id);
        Some(Expired {
            pool: id,
            waiter: unparked.waiter,
        })
    }

    /// What the pool's first server login reported; None until learned.
    pub fn welcome(&self, id: PoolId) -> Option<&Welcome> {
        self.pool(id)?.welcome.as_ref()
    }

    /// Remembers the ParameterStatus set of a server login of the pool. The first login wins;
    /// later calls change nothing (every server of a pool starts from the same settings).
    pub fn learn_welcome(&mut self, id: PoolId, params: &[(String, String)]) {
        if let Some(pool) = self.pool_mut(id) {
            if pool.welcome.is_none() {
                pool.welcome = Some(Welcome::from_params(params));
            }
        }
    }

    /// What the pool's servers made of clients' startup spellings.
    pub fn spellings(&self, id: PoolId) -> Option<&Spellings> {
        self.pool(id).map(|pool| &pool.spellings)
    }

    /// The spellings, to learn from a login.
    pub fn spellings_mut(&mut self, id: PoolId) -> Option<&mut Spellings> {
        self.pool_mut(id).map(|pool| &mut pool.spellings)
    }

    /// A returned or new server, counted nowhere on entry: to a worker that asked for it
    /// (when this one can spare it), to the first waiter in the pool's
    /// [`WaitOrder`](crate::WaitOrder), else closed when a budget is over its limit or asks
    /// for it back, else idle.
    pub(crate) fn place(&mut self, id: PoolId, lease: Lease<S>) -> Checkin<S, W> {
        let workers = self.workers;
        let Some(pool) = pool_in(&mut self.slots, id) else {
            return Checkin::Close {
                lease,
                reason: CloseReason::Draining,
                open_replacement: false,
            };
        };
        if let Some(to) = pool.take_handover(workers) {
            pool.leave(Some(to));
            return Checkin::HandOver { lease, to };
        }
        let order = pool.limits.wait_order;
        if let Some(unparked) = self.waiters.pop_next(&mut pool.waiters, order) {
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
        self.forget_if_unused(id);
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
            open_replacement = pool.waiters.len() > 0 && self.try_open(id, now).is_ok();
        }
        self.forget_if_unused(id);
        Checkin::Close {
            lease,
            reason,
            open_replacement,
        }
    }

    /// Marks a pool draining and removes it from the key index, so it only empties from now.
    /// A login failure memo goes too: no client can join the pool any more to be told.
    pub(crate) fn unlist(&mut self, id: PoolId) {
        let Some(pool) = pool_in(&mut self.slots, id) else {
            return;
        };
        pool.draining = true;
        pool.failure = None;
        if self.by_key.get(&pool.key) == Some(&id) {
            self.by_key.remove(&pool.key);
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

    /// The pool in slot `index` (of `0..slot_count()`), for passes over the whole slice
    /// that may forget pools on the way.
    pub(crate) fn id_at_slot(&self, index: usize) -> Option<PoolId> {
        self.id_at(u32::try_from(index).ok()?)
    }

    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
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

    /// Frees the slot of a pool that is unused (see the module doc), unless
    /// `pool_idle_timeout` keeps it listed (a drained pool is never kept).
    pub(crate) fn forget_if_unused(&mut self, id: PoolId) {
        let lingers = self.idle_pool_timeout.is_some();
        if !self
            .pool(id)
            .is_some_and(|pool| pool.is_unused() && (pool.draining || !lingers))
        {
            return;
        }
        self.forget(id);
    }

    /// Frees the slot of pool `id`, which must be unused.
    pub(crate) fn forget(&mut self, id: PoolId) {
        if !self.pool(id).is_some_and(Pool::is_unused) {
            return;
        }
        let slot = &mut self.slots[id.index as usize];
        if let Some(pool) = slot.pool.take() {
            if pool.borrow_until.is_some() {
                self.pending_borrows = self.pending_borrows.saturating_sub(1);
            }
            // A drained pool's key may already name a fresh pool.
            if self.by_key.get(&pool.key) == Some(&id) {
                self.by_key.remove(&pool.key);
            }
        }
        slot.generation = slot.generation.wrapping_add(1);
        self.free_slots.push(id.index);
    }
}

/// The live pool behind `id`, borrowing only the slots (so the waiter slab stays usable).
pub(crate) fn pool_in<S>(slots: &mut [Slot<S>], id: PoolId) -> Option<&mut Pool<S>> {
    let slot = slots.get_mut(id.index as usize)?;
    if slot.generation != id.generation {
        return None;
    }
    slot.pool.as_mut()
}

/// Which slot of its own budget an open took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BudgetSlot {
    /// Within `pool_size`.
    Pool,
    /// Beyond it, from the reserve.
    Reserve,
}

/// Takes one slot of every budget of a pool, or none: on a refusal the slots already taken
/// are given back.
fn acquire_all(limits: &PoolLimits, use_reserve: bool) -> Result<BudgetSlot, Refusal> {
    let pool_budget = limits.pool_budget.as_ref();
    let slot = if pool_budget.try_acquire() {
        BudgetSlot::Pool
    } else if use_reserve && pool_budget.try_acquire_reserve() {
        BudgetSlot::Reserve
    } else {
        return Err(Refusal::PoolFull);
    };
    for (taken, budget) in limits.shared_budgets.iter().enumerate() {
        if !budget.try_acquire() {
            pool_budget.release();
            limits.shared_budgets[..taken]
                .iter()
                .for_each(|budget| budget.release());
            return Err(Refusal::SharedFull { budget: taken });
        }
    }
    limits
        .budgets()
        .for_each(PoolBudget::withdraw_release_request);
    Ok(slot)
}

/// The budget behind a refusal.
fn refusing_budget(limits: &PoolLimits, refusal: Refusal) -> Option<&PoolBudget> {
    match refusal {
        Refusal::NotNow => None,
        Refusal::PoolFull => Some(limits.pool_budget.as_ref()),
        Refusal::SharedFull { budget } => limits.shared_budgets.get(budget).map(AsRef::as_ref),
    }
}
