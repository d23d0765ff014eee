//! PgBouncer's `pool_idle_timeout`: with it set, a pool that has no session, no server and
//! no waiter stays listed (its welcome cache and spellings with it) until it has been unused
//! that long, then is freed; without it a pool is freed as soon as it is unused. The unused
//! time counts from the last housekeeping pass that found the pool in use, as PgBouncer's
//! janitor counts it.

use crate::key::PoolKey;
use crate::slice::PoolSlice;
use std::time::{Duration, Instant};

/// A pool freed by [`PoolSlice::collect_idle_pools`]: its key, and how long it was unused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreedPool {
    pub key: PoolKey,
    pub unused_for: Duration,
}

impl<S, W: Copy> PoolSlice<S, W> {
    /// Sets `pool_idle_timeout` (None: free unused pools at once). Pools already unused are
    /// freed at the next [`PoolSlice::collect_idle_pools`] if it is None or has passed.
    pub fn set_idle_pool_timeout(&mut self, timeout: Option<Duration>) {
        self.idle_pool_timeout = timeout;
    }

    /// Frees the pools unused for longer than `pool_idle_timeout` (all unused ones when it
    /// is not set), pushing each into `out`, and notes the others in use now.
    pub fn collect_idle_pools(&mut self, now: Instant, out: &mut Vec<FreedPool>) {
        let timeout = self.idle_pool_timeout;
        for index in 0..self.slot_count() {
            let Some(id) = self.id_at_slot(index) else {
                continue;
            };
            let Some(pool) = self.pool_mut(id) else {
                continue;
            };
            if !pool.is_unused() {
                pool.last_active = now;
                continue;
            }
            let unused_for = now.saturating_duration_since(pool.last_active);
            if timeout.is_some_and(|timeout| unused_for <= timeout) {
                continue;
            }
            let key = pool.key.clone();
            self.forget(id);
            if timeout.is_some() {
                out.push(FreedPool { key, unused_for });
            }
        }
    }
}
