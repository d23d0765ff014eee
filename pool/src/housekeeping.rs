//! Periodic decisions of a slice, run from the worker's timer: which idle servers to close
//! (`server_lifetime`, `server_idle_timeout` above `min_pool_size`, budgets over a lowered
//! limit, release requests from other workers, draining pools), which login failures have
//! served their `server_login_retry`, and which servers to open (warmup to `min_pool_size`,
//! split across workers for pools kept warm on all of them, and retries for clients that wait
//! while this worker has no server of their pool). Outputs
//! go into caller-owned vectors so a tick allocates nothing once they have grown.

use crate::budget::PoolBudget;
use crate::lease::{CloseReason, Lease};
use crate::pool::Pool;
use crate::slice::{Closing, PoolId, PoolSlice};
use std::time::Instant;

impl<S, W: Copy> PoolSlice<S, W> {
    /// Moves every idle server that should close now into `out`; their budget slots are
    /// already given back when this returns (`leaving` is false). Also ends login failure
    /// memos whose `retry_at` passed, so their pools can be forgotten.
    pub fn collect_closable(&mut self, now: Instant, out: &mut Vec<Closing<S>>) {
        for index in 0..self.slot_count() {
            let Some(id) = self.id_at_slot(index) else {
                continue;
            };
            if let Some(pool) = self.pool_mut(id) {
                if pool
                    .failure
                    .as_ref()
                    .is_some_and(|failure| now >= failure.retry_at)
                {
                    pool.failure = None;
                }
                close_idle(id, pool, now, out);
            }
            self.forget_if_unused(id);
        }
    }

    /// Takes budget for servers this slice should open now and pushes one `PoolId` per
    /// server into `out`; end each with [`PoolSlice::opened`] or [`PoolSlice::open_failed`].
    /// Covers warmup to `min_pool_size` (counted across all workers) and pools whose clients
    /// wait with no server of this worker opening for them. Also the call to make after
    /// [`PoolSlice::left`] gave a slot back to the budgets: pools under the same caps whose
    /// clients wait open with it.
    pub fn collect_opens(&mut self, now: Instant, out: &mut Vec<PoolId>) {
        for index in 0..self.slot_count() {
            let Some(id) = self.id_at_slot(index) else {
                continue;
            };
            let wanted = self.pool(id).map_or(0, |pool| opens_wanted(pool, now));
            for _ in 0..wanted {
                if self.try_open(id, now).is_err() {
                    break;
                }
                out.push(id);
            }
        }
    }
}

/// How many servers a pool should start opening now.
fn opens_wanted<S>(pool: &Pool<S>, now: Instant) -> u32 {
    if pool.draining {
        return 0;
    }
    let counts = pool.counts();
    let starving = counts.waiting > 0 && counts.idle == 0 && counts.opening == 0;
    let deficit = pool
        .limits
        .min_pool_size
        .saturating_sub(pool.limits.pool_budget.in_use());
    // A pool kept warm on every worker opens only this worker's part, so the workers
    // together open `min_pool_size`, not `workers` times it (their checks race).
    let warmup = match pool.warm_share {
        _ if pool.warmup_after.is_some_and(|after| now < after) => 0,
        Some(share) => deficit.min(share.saturating_sub(counts.servers())),
        None => deficit,
    };
    warmup.max(u32::from(starving))
}

/// Idle servers of one pool to close: all when draining; past their lifetime; the least
/// recently used past the idle timeout while the pool stays above `min_pool_size`; least
/// recently used first while a budget is over its (lowered) limit; one per release request.
fn close_idle<S>(id: PoolId, pool: &mut Pool<S>, now: Instant, out: &mut Vec<Closing<S>>) {
    let release = |pool: &mut Pool<S>, lease: Lease<S>, reason, out: &mut Vec<Closing<S>>| {
        pool.limits.budgets().for_each(PoolBudget::release);
        out.push(Closing {
            pool: id,
            lease,
            reason,
            leaving: false,
        });
    };
    if pool.draining {
        while let Some(lease) = pool.idle.pop_front() {
            release(pool, lease, CloseReason::Draining, out);
        }
        return;
    }
    let lifetime = pool.limits.server_lifetime;
    let mut position = 0;
    while position < pool.idle.len() {
        if now >= pool.idle[position].opened_at + lifetime {
            if let Some(lease) = pool.idle.remove(position) {
                release(pool, lease, CloseReason::Lifetime, out);
            }
        } else {
            position += 1;
        }
    }
    if let Some(timeout) = pool.limits.server_idle_timeout {
        while pool
            .idle
            .front()
            .is_some_and(|lease| now >= lease.idle_since + timeout)
            && pool.limits.pool_budget.in_use() > pool.limits.min_pool_size
        {
            if let Some(lease) = pool.idle.pop_front() {
                release(pool, lease, CloseReason::IdleTimeout, out);
            }
        }
    }
    while !pool.idle.is_empty() && pool.limits.budgets().any(PoolBudget::is_over_limit) {
        if let Some(lease) = pool.idle.pop_front() {
            release(pool, lease, CloseReason::OverLimit, out);
        }
    }
    while !pool.idle.is_empty() && pool.limits.budgets().any(PoolBudget::take_release_request) {
        if let Some(lease) = pool.idle.pop_front() {
            release(pool, lease, CloseReason::ReleaseRequested, out);
        }
    }
}
