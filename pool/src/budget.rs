//! The cross-worker server budget. A pool size must hold across all workers, and workers share
//! nothing on the query path, so each budget is one cache-line-padded atomic counter that a
//! worker touches only when it opens or closes a server — never per query. This is the one
//! shared, non-pure piece of the crate: the alternative, a control shard granting slots by
//! message, would add a round trip to every server open.
//!
//! A shared cap's budget also carries release requests: a worker whose clients wait under a
//! full `max_db_connections` or `max_user_connections` while it holds no server of their pool
//! asks the others to close an idle one (of any pool under the cap), so idle servers parked on
//! one worker cannot starve another worker for the whole `query_wait_timeout`. (For a full
//! pool budget the engine asks by message for a server of that very key, which moves whole.)

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;

/// Shared count of open (or opening) servers against a limit, plus a reserve.
#[repr(align(128))]
#[derive(Debug)]
pub struct PoolBudget {
    /// Servers counted against this budget, all workers together.
    in_use: AtomicU32,
    /// Most servers without the reserve; 0 = unlimited.
    limit: AtomicU32,
    /// Extra servers allowed through [`PoolBudget::try_acquire_reserve`].
    reserve: AtomicU32,
    /// Idle servers other workers are asked to close.
    release_requests: AtomicU32,
    /// Whether `failure` holds a login failure: read first, so that no worker takes the
    /// lock while none is recorded (the common case).
    has_failure: AtomicBool,
    /// The last failed login of this budget's pool and until when it stands, for every
    /// worker: a login the server refused on one worker is not tried again by the others
    /// before `server_login_retry`, as PgBouncer's one pool would not. Written only when a
    /// login fails or succeeds after a failure.
    failure: Mutex<Option<(Instant, Bytes)>>,
}

impl PoolBudget {
    /// A budget of `limit` servers (0 = unlimited) plus `reserve` for long waits.
    pub fn new(limit: u32, reserve: u32) -> PoolBudget {
        PoolBudget {
            in_use: AtomicU32::new(0),
            limit: AtomicU32::new(limit),
            reserve: AtomicU32::new(reserve),
            release_requests: AtomicU32::new(0),
            has_failure: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }

    /// A login of this budget's pool failed with `error`; it stands until `retry_at`.
    pub(crate) fn record_failure(&self, retry_at: Instant, error: Bytes) {
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        *failure = Some((retry_at, error));
        self.has_failure.store(true, Ordering::Release);
    }

    /// A login of this budget's pool succeeded: the failure is over.
    pub(crate) fn clear_failure(&self) {
        if !self.has_failure.load(Ordering::Acquire) {
            return;
        }
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        *failure = None;
        self.has_failure.store(false, Ordering::Release);
    }

    /// The error of a login failure that still stands at `now`, recorded by any worker.
    pub(crate) fn failure(&self, now: Instant) -> Option<Bytes> {
        if !self.has_failure.load(Ordering::Acquire) {
            return None;
        }
        let failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        failure
            .as_ref()
            .filter(|(retry_at, _)| now < *retry_at)
            .map(|(_, error)| error.clone())
    }

    /// Takes one slot within the limit; false when the budget is spent.
    pub(crate) fn try_acquire(&self) -> bool {
        self.acquire_below(self.limit.load(Ordering::Relaxed), 0)
    }

    /// Takes one slot within limit + reserve (for clients that waited `reserve_pool_timeout`).
    pub(crate) fn try_acquire_reserve(&self) -> bool {
        self.acquire_below(
            self.limit.load(Ordering::Relaxed),
            self.reserve.load(Ordering::Relaxed),
        )
    }

    fn acquire_below(&self, limit: u32, reserve: u32) -> bool {
        if limit == 0 {
            self.in_use.fetch_add(1, Ordering::AcqRel);
            return true;
        }
        let ceiling = limit.saturating_add(reserve);
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                (count < ceiling).then_some(count + 1)
            })
            .is_ok()
    }

    /// Gives back one slot. Never goes below zero (a double release is a bug, caught in debug
    /// builds, and must not wrap the count in release builds).
    pub fn release(&self) {
        let released = self
            .in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                count.checked_sub(1)
            });
        debug_assert!(released.is_ok(), "PoolBudget released more than acquired");
    }

    /// Servers counted now.
    pub fn in_use(&self) -> u32 {
        self.in_use.load(Ordering::Acquire)
    }

    /// The limit (0 = unlimited).
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The reserve.
    pub fn reserve(&self) -> u32 {
        self.reserve.load(Ordering::Relaxed)
    }

    /// Changes limit and reserve (config reload). Servers above a lowered limit are not
    /// closed here; they stop being replaced as they close.
    pub fn set_limit(&self, limit: u32, reserve: u32) {
        self.limit.store(limit, Ordering::Relaxed);
        self.reserve.store(reserve, Ordering::Relaxed);
    }

    /// Whether more slots are taken than the limit and the reserve allow (they were lowered
    /// by a reload). A server opened from the reserve is not over: as in PgBouncer, it stays
    /// in the pool until an idle timeout or its lifetime ends it, and clients use it meanwhile.
    pub(crate) fn is_over_limit(&self) -> bool {
        let limit = self.limit();
        limit != 0 && self.in_use() > limit.saturating_add(self.reserve())
    }

    /// Whether a new slot could be taken now (a hint; [`PoolBudget::try_acquire`] decides).
    pub fn has_room(&self) -> bool {
        let limit = self.limit();
        limit == 0 || self.in_use() < limit
    }

    /// Asks other workers to close one idle server. At most one request is outstanding
    /// (none when nothing is in use): a pool still starving asks again when it is refused
    /// again, so requests never outlive the need. Counting every refused ask made workers
    /// close idle servers long after the starving clients were served (PgBouncer evicts one
    /// server per connection it launches).
    pub(crate) fn request_release(&self) {
        let cap = self.in_use().min(1);
        let _ =
            self.release_requests
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |requests| {
                    (requests < cap).then_some(requests + 1)
                });
    }

    /// Claims one outstanding release request; true means "close one idle server".
    pub(crate) fn take_release_request(&self) -> bool {
        self.release_requests
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |requests| {
                requests.checked_sub(1)
            })
            .is_ok()
    }

    /// Withdraws one outstanding release request, if any: a pool just took a slot of this
    /// budget, so clients that waited for room have some (a pool still starving asks again
    /// when refused again). Without this, a request a freed slot made needless would still
    /// close an idle server later, after every client was served.
    pub(crate) fn withdraw_release_request(&self) {
        let _ = self.take_release_request();
    }

    /// Outstanding release requests.
    pub fn release_requests(&self) -> u32 {
        self.release_requests.load(Ordering::Acquire)
    }
}

/// One host's share of a server budget its fleet shares (docs/fleet.md): `limit` divided by
/// the live `members`, rounded up (so the fleet together never has less than `limit`, and at
/// most `members - 1` more), at least 1. `0` (no limit) stays 0; no member counts as one.
pub fn fleet_share(limit: u32, members: u32) -> u32 {
    if limit == 0 {
        return 0;
    }
    limit.div_ceil(members.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn each_fleet_host_takes_its_share_rounded_up() {
        assert_eq!(fleet_share(100, 3), 34);
        assert_eq!(fleet_share(100, 1), 100);
        assert_eq!(fleet_share(100, 0), 100);
        assert_eq!(fleet_share(2, 3), 1);
        assert_eq!(fleet_share(0, 3), 0);
    }

    #[test]
    fn acquire_stops_at_limit_and_release_reopens() {
        let budget = PoolBudget::new(2, 0);
        assert!(budget.try_acquire());
        assert!(budget.try_acquire());
        assert!(!budget.try_acquire());
        budget.release();
        assert!(budget.try_acquire());
        assert_eq!(budget.in_use(), 2);
    }

    #[test]
    fn reserve_only_through_reserve_acquire() {
        let budget = PoolBudget::new(1, 1);
        assert!(budget.try_acquire());
        assert!(!budget.try_acquire());
        assert!(budget.try_acquire_reserve());
        assert!(!budget.try_acquire_reserve());
    }

    #[test]
    fn zero_limit_is_unlimited() {
        let budget = PoolBudget::new(0, 0);
        for _ in 0..1000 {
            assert!(budget.try_acquire());
        }
        assert_eq!(budget.in_use(), 1000);
    }

    #[test]
    fn lowered_limit_blocks_new_slots() {
        let budget = PoolBudget::new(3, 0);
        assert!(budget.try_acquire() && budget.try_acquire());
        budget.set_limit(1, 0);
        assert!(!budget.try_acquire());
        budget.release();
        assert!(!budget.try_acquire());
        budget.release();
        assert!(budget.try_acquire());
    }

    #[test]
    fn one_release_request_at_most_and_a_taken_slot_withdraws_it() {
        let budget = PoolBudget::new(4, 0);
        assert!(budget.try_acquire() && budget.try_acquire() && budget.try_acquire());
        budget.request_release();
        budget.request_release();
        assert_eq!(
            budget.release_requests(),
            1,
            "one close per ask, asked again if needed"
        );
        budget.withdraw_release_request();
        assert_eq!(budget.release_requests(), 0);
        budget.withdraw_release_request();
        assert_eq!(budget.release_requests(), 0);
    }

    #[test]
    fn release_requests_are_capped_by_servers_in_use() {
        let budget = PoolBudget::new(4, 0);
        budget.request_release();
        assert_eq!(budget.release_requests(), 0, "nothing to release");
        assert!(budget.try_acquire());
        budget.request_release();
        budget.request_release();
        assert_eq!(budget.release_requests(), 1);
        assert!(budget.take_release_request());
        assert!(!budget.take_release_request());
    }

    #[test]
    fn budget_never_exceeded_under_threads() {
        const LIMIT: u32 = 7;
        let budget = Arc::new(PoolBudget::new(LIMIT, 0));
        let peak = Arc::new(AtomicU32::new(0));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let budget = Arc::clone(&budget);
                let peak = Arc::clone(&peak);
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        if budget.try_acquire() {
                            peak.fetch_max(budget.in_use(), Ordering::Relaxed);
                            budget.release();
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("worker thread panicked");
        }
        assert!(peak.load(Ordering::Relaxed) <= LIMIT);
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn budget_is_cache_line_padded() {
        assert_eq!(std::mem::align_of::<PoolBudget>(), 128);
    }
}
