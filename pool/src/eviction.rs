//! Closing idle servers of other pools to make room: under a shared cap that stops a pool
//! from opening (PgBouncer's answer to a full `max_db_connections` or `max_user_connections`:
//! end an idle server of another pool under the same cap), and under `max_pools_per_worker`
//! when a new key cannot get a pool.
//!
//! Every server taken out here is *leaving*: it keeps its slots until the engine reports it
//! closed ([`PoolSlice::left`]), so the counts stay exact and the backend is gone before a
//! waiting pool can use its slot. The victim is always the idle server that went idle
//! longest among the eligible pools: the least likely to be wanted back.

use crate::budget::PoolBudget;
use crate::lease::CloseReason;
use crate::pool::Pool;
use crate::slice::{Closing, PoolId, PoolSlice};
use std::sync::Arc;

impl<S, W: Copy> PoolSlice<S, W> {
    /// The open of pool `id` was refused by its shared budget `budget` (the index of
    /// [`Refusal::SharedFull`](crate::Refusal::SharedFull)): takes out an idle server of
    /// another pool of this slice that holds the same budget (the same `Arc`), to be closed.
    /// None: no such server here; ask the other workers ([`PoolSlice::should_ask_others`],
    /// their [`PoolSlice::release_idle_sharing`]).
    pub fn evict_idle_sharing(&mut self, id: PoolId, budget: usize) -> Option<Closing<S>> {
        let shared = Arc::clone(self.pool(id)?.limits.shared_budgets.get(budget)?);
        self.take_oldest_idle(
            |other, pool| other != id && pool.limits.holds(&shared),
            CloseReason::SharedBudgetFull,
        )
    }

    /// The open of pool `id` was refused by its own budget, which other pools share (a
    /// replication pool and the ordinary pool of its database and user, as PgBouncer counts
    /// replication servers in the pool): takes out the longest-idle server of another pool
    /// of this slice holding that budget, to be closed. None: no such server here; ask the
    /// other workers through the budget ([`PoolSlice::request_release_of_pool_budget`]).
    pub fn evict_idle_sibling(&mut self, id: PoolId) -> Option<Closing<S>> {
        let budget = Arc::clone(&self.pool(id)?.limits.pool_budget);
        self.take_oldest_idle(
            |other, pool| other != id && Arc::ptr_eq(&pool.limits.pool_budget, &budget),
            CloseReason::SharedBudgetFull,
        )
    }

    /// Asks the other workers to close one idle server holding pool `id`'s own budget (they
    /// do at their next housekeeping, or when one comes back unwanted), for a pool whose
    /// budget other pools share and whose clients wait.
    pub fn request_release_of_pool_budget(&self, id: PoolId) {
        if let Some(pool) = self.pool(id) {
            pool.limits.pool_budget.request_release();
        }
    }

    /// Another worker's clients wait under `budget` (a shared cap): takes out an idle server
    /// of a pool of this slice that holds it and has no client waiting here, to be closed.
    pub fn release_idle_sharing(&mut self, budget: &Arc<PoolBudget>) -> Option<Closing<S>> {
        self.take_oldest_idle(
            |_, pool| pool.waiters.len() == 0 && pool.limits.holds(budget),
            CloseReason::ReleaseRequested,
        )
    }

    /// [`PoolSlice::register`] was refused with
    /// [`PoolError::TooManyPools`](crate::PoolError::TooManyPools): evicts the least recently
    /// used pool (oldest registration, checkin or close) that no session is registered with
    /// and no client waits for. It is unlisted and drained at once, so registering again
    /// succeeds now; its idle servers go into `out` to be closed (leaving), and it is
    /// forgotten once they are reported [`PoolSlice::left`] (at once if it holds nothing).
    /// False: every pool is in use.
    pub fn evict_for_room(&mut self, out: &mut Vec<Closing<S>>) -> bool {
        let mut victim: Option<(std::time::Instant, PoolId)> = None;
        // Slot order, not key order: ties go the same way on every run.
        for index in 0..self.slot_count() {
            let Some(id) = self.id_at_slot(index) else {
                continue;
            };
            let Some(pool) = self.pool(id) else { continue };
            // A draining pool is unlisted already and takes no room.
            let evictable = !pool.draining && pool.registrations == 0 && pool.waiters.len() == 0;
            if evictable && victim.is_none_or(|(used, _)| pool.last_used < used) {
                victim = Some((pool.last_used, id));
            }
        }
        let Some((_, id)) = victim else {
            return false;
        };
        self.unlist(id);
        if let Some(pool) = self.pool_mut(id) {
            while let Some(lease) = pool.idle.pop_front() {
                pool.leave(None);
                out.push(Closing {
                    pool: id,
                    lease,
                    reason: CloseReason::PoolEvicted,
                    leaving: true,
                });
            }
        }
        self.forget_if_unused(id);
        true
    }

    /// Takes the longest-idle server of the pools `eligible` accepts out as leaving.
    fn take_oldest_idle(
        &mut self,
        eligible: impl Fn(PoolId, &Pool<S>) -> bool,
        reason: CloseReason,
    ) -> Option<Closing<S>> {
        let mut oldest: Option<(std::time::Instant, PoolId)> = None;
        for index in 0..self.slot_count() {
            let Some(id) = self.id_at_slot(index) else {
                continue;
            };
            let Some(pool) = self.pool(id) else { continue };
            let Some(since) = pool.oldest_idle_since() else {
                continue;
            };
            if eligible(id, pool) && oldest.is_none_or(|(oldest, _)| since < oldest) {
                oldest = Some((since, id));
            }
        }
        let (_, id) = oldest?;
        let pool = self.pool_mut(id)?;
        let lease = pool.idle.pop_front()?;
        pool.leave(None);
        Some(Closing {
            pool: id,
            lease,
            reason,
            leaving: true,
        })
    }
}
