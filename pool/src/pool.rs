//! One pool's state inside a slice and the limits it is opened under. The slice
//! ([`PoolSlice`](crate::PoolSlice)) owns the pools and the waiter slab; the decisions that
//! need only one pool's state (its counts, whether it can be forgotten, its fair share, where
//! a returning server's slot goes) live here, next to the fields they read.
//!
//! Where a server of a pool can be, and which count holds it (every one of them holds one slot
//! of the pool budget and of each shared budget):
//! - `idle`: in the idle list, most recently used last;
//! - `active`: checked out to a session (or handed to a waiter);
//! - `opening`: a slot was taken and the connection is being opened;
//! - `leaving`: taken out to be closed while keeping its slots, so the backend is gone before
//!   the slots move ([`PoolSlice::left`](crate::PoolSlice::left)): to another worker for a
//!   handover, or back to the budgets (cap eviction, room for a new pool).
//!
//! A slot handed over by another worker and not yet used is `granted`: counted in the budgets,
//! held by this pool, backing no server yet.

use crate::budget::PoolBudget;
use crate::host_turn::HostTurn;
use crate::idle_board::IdleBoard;
use crate::idle_list::IdleList;
use crate::key::PoolKey;
use crate::wait_order::WaitOrder;
use crate::waiters::Queue;
use crate::welcome::{MAX_SPELLINGS_PER_POOL, Spellings, Welcome};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Servers and waiters of one pool (or of a whole slice) by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// In the idle list.
    pub idle: u32,
    /// Checked out to a session.
    pub active: u32,
    /// Being connected (budget taken, not yet [`PoolSlice::opened`](crate::PoolSlice::opened)).
    pub opening: u32,
    /// Out of the pool to be closed with their slots still held (not yet [`PoolSlice::left`](crate::PoolSlice::left)).
    pub leaving: u32,
    /// Clients parked for a server.
    pub waiting: u32,
}

impl PoolCounts {
    /// Servers this worker holds budget for: idle + active + opening + leaving.
    pub fn servers(&self) -> u32 {
        self.idle + self.active + self.opening + self.leaving
    }
}

/// Limits of one pool, set at registration and by [`PoolSlice::set_limits`](crate::PoolSlice::set_limits).
///
/// A slot is always given back to the budgets the pool holds at that moment, so a reload must
/// keep the same `Arc`s (change limits with [`PoolBudget::set_limit`]) and keep one shared
/// budget per cap even while the cap is unlimited (limit 0): a budget added to a pool with
/// servers open would be released more often than it was acquired.
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
    /// Client spellings of tracked parameters the pool remembers (`max_spellings_per_pool`).
    pub max_spellings: usize,
    /// Least time between two asks to other workers for a server of this pool
    /// ([`PoolSlice::should_ask_others`](crate::PoolSlice::should_ask_others)).
    pub ask_interval: Duration,
    /// Which waiter a server goes to (`waiter_policy`, `waiter_aging`).
    pub wait_order: WaitOrder,
    /// Where the next open goes in the database's host list, if it has one; shared by every
    /// worker's slice of the pool.
    pub host_turn: Arc<HostTurn>,
    /// Idle servers of this key per worker, shared by every worker's slice of the pool: a
    /// worker with none idle borrows one rather than opening (`borrow.rs`).
    pub idle_board: Arc<IdleBoard>,
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
            max_spellings: MAX_SPELLINGS_PER_POOL,
            ask_interval: Duration::from_millis(250),
            wait_order: WaitOrder::DEFAULT,
            host_turn: Arc::default(),
            idle_board: Arc::default(),
        }
    }

    /// Gives one slot back to the pool budget and every shared budget.
    pub(crate) fn release_slot(&self) {
        self.budgets().for_each(PoolBudget::release);
    }

    /// The pool budget, then the shared budgets.
    pub(crate) fn budgets(&self) -> impl Iterator<Item = &PoolBudget> {
        std::iter::once(self.pool_budget.as_ref())
            .chain(self.shared_budgets.iter().map(Arc::as_ref))
    }

    /// Whether `budget` is one of this pool's budgets (the same `Arc`, not an equal one).
    pub(crate) fn holds(&self, budget: &PoolBudget) -> bool {
        self.budgets().any(|mine| std::ptr::eq(mine, budget))
    }

    /// Servers this worker may keep while another worker's clients wait for the pool: an
    /// even split of the pool size, or of a smaller shared cap, rounded up. Unlimited
    /// everywhere: no limit.
    pub(crate) fn fair_share(&self, workers: u32) -> u32 {
        self.budgets()
            .map(PoolBudget::limit)
            .filter(|&limit| limit > 0)
            .min()
            .map_or(u32::MAX, |smallest| smallest.div_ceil(workers.max(1)))
    }
}

/// A failed server login, remembered until `retry_at` (`server_login_retry`).
#[derive(Debug)]
pub(crate) struct LoginFailure {
    /// The error the pool's clients get meanwhile; None = they keep waiting.
    pub(crate) error: Option<Bytes>,
    pub(crate) retry_at: Instant,
    /// The server refused the login (its clients are failed, `standing_login_failure`);
    /// false for a server that could not be reached, whose waiters wait for the next try.
    pub(crate) refused: bool,
}

/// One pool's state.
#[derive(Debug)]
pub(crate) struct Pool<S> {
    pub(crate) key: PoolKey,
    pub(crate) limits: PoolLimits,
    /// Back = most recently used; its count is published on `limits.idle_board`.
    pub(crate) idle: IdleList<S>,
    pub(crate) active: u32,
    pub(crate) opening: u32,
    /// Servers out of the pool to be closed, their slots still held (see the module doc).
    pub(crate) leaving: u32,
    /// Workers the slots of leaving servers go to once closed, oldest first; the other
    /// `leaving - hand_to.len()` slots go back to the budgets. Slots of one pool are
    /// interchangeable, so it does not matter which server's close pays which entry.
    pub(crate) hand_to: VecDeque<usize>,
    /// Slots handed over by other workers and not used yet.
    pub(crate) granted: u32,
    /// A worker whose clients wait for this pool: the next server that comes back goes to it.
    pub(crate) release_to: Option<usize>,
    /// When this worker last asked the others for a server of this pool.
    pub(crate) last_ask: Option<Instant>,
    /// The last registration, checkin or close (for choosing a pool to evict).
    pub(crate) last_used: Instant,
    /// When a housekeeping pass last found it in use (`pool_idle_timeout` counts from
    /// there, see `idle_pools.rs`).
    pub(crate) last_active: Instant,
    pub(crate) registrations: u32,
    pub(crate) waiters: Queue,
    /// No new opens before its `retry_at`; kept (and the pool with it) until then.
    pub(crate) failure: Option<LoginFailure>,
    pub(crate) draining: bool,
    pub(crate) welcome: Option<Welcome>,
    pub(crate) spellings: Spellings,
    /// Kept warm on every worker ([`PoolSlice::keep_warm`](crate::PoolSlice::keep_warm)):
    /// this worker's part of `min_pool_size`. None: the whole deficit (a pool only this
    /// worker's clients use).
    pub(crate) warm_share: Option<u32>,
    /// No warmup opens before this ([`PoolSlice::vacate`](crate::PoolSlice::vacate)).
    pub(crate) warmup_after: Option<Instant>,
    /// Opens that took a reserve slot and that the caller has not been told of yet
    /// ([`PoolSlice::take_reserve_open`](crate::PoolSlice::take_reserve_open)).
    pub(crate) reserve_opens: u32,
    /// A borrow of another worker's idle server is on its way until then (`borrow.rs`).
    pub(crate) borrow_until: Option<Instant>,
    /// When the last borrow was refused or went unanswered: no other is tried within
    /// `ask_interval`, so a pool whose idle servers elsewhere cannot move opens at once.
    pub(crate) borrow_failed_at: Option<Instant>,
}

impl<S> Pool<S> {
    pub(crate) fn new(key: PoolKey, limits: PoolLimits, now: Instant, worker: usize) -> Pool<S> {
        let spellings = Spellings::with_limit(limits.max_spellings);
        let idle = IdleList::new(Arc::clone(&limits.idle_board), worker);
        Pool {
            key,
            limits,
            idle,
            active: 0,
            opening: 0,
            leaving: 0,
            hand_to: VecDeque::new(),
            granted: 0,
            release_to: None,
            last_ask: None,
            last_used: now,
            last_active: now,
            registrations: 1,
            waiters: Queue::EMPTY,
            failure: None,
            draining: false,
            welcome: None,
            spellings,
            warm_share: None,
            warmup_after: None,
            reserve_opens: 0,
            borrow_until: None,
            borrow_failed_at: None,
        }
    }

    pub(crate) fn counts(&self) -> PoolCounts {
        PoolCounts {
            idle: u32::try_from(self.idle.len()).unwrap_or(u32::MAX),
            active: self.active,
            opening: self.opening,
            leaving: self.leaving,
            waiting: self.waiters.len(),
        }
    }

    /// Nothing refers to the pool and it holds nothing: no session, server, waiter, unused
    /// handed-over slot, nor a login failure still to be reported to the next client.
    pub(crate) fn is_unused(&self) -> bool {
        self.registrations == 0
            && self.counts() == PoolCounts::default()
            && self.granted == 0
            && self.failure.is_none()
    }

    /// Servers usable now or soon (a leaving one is neither).
    pub(crate) fn live_servers(&self) -> u32 {
        let counts = self.counts();
        counts.idle + counts.active + counts.opening
    }

    /// Takes the pending handover request, if any, for a server that is coming back (counted
    /// nowhere yet): it goes to the requesting worker when no client waits here, or when
    /// this worker holds more than its fair share. Never while a budget is over its limit
    /// (closing that server, not moving it, is what the budget needs). A request not granted
    /// is dropped: the requester asks again if its clients still wait.
    pub(crate) fn take_handover(&mut self, workers: u32) -> Option<usize> {
        let to = self.release_to.take()?;
        let with_this_one = self.counts().servers().saturating_add(1);
        let spare = self.waiters.len() == 0 || with_this_one > self.limits.fair_share(workers);
        let over_limit = self.limits.budgets().any(PoolBudget::is_over_limit);
        (spare && !over_limit).then_some(to)
    }

    /// Counts a server as leaving; its slots go to worker `to`, or back to the budgets.
    pub(crate) fn leave(&mut self, to: Option<usize>) {
        self.leaving += 1;
        if let Some(to) = to {
            self.hand_to.push_back(to);
        }
    }

    /// When the oldest idle server went idle.
    pub(crate) fn oldest_idle_since(&self) -> Option<Instant> {
        self.idle.front().map(|lease| lease.idle_since)
    }
}
