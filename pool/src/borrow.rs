//! Borrowing another worker's idle server when a login of the pool is refused. PgBouncer has
//! one pool per (database, user), so a client reuses the server the previous client left
//! idle even after `pg_hba.conf` or a password changed; pgtier's pool is split into one
//! slice per worker, and without this a client landing on the other worker would get the
//! refusal although a logged-in server of its pool sits idle. A worker that can still log
//! in opens its own server within `pool_size`, as before: a new client then gets a new
//! backend about as often as it would without pooling across workers, and no message
//! crosses workers on the common path (borrowing every time made a new client reuse the
//! last client's backend, and its pid, far more often; see docs/compatibility.md). At
//! `pool_size` the handover (`handover.rs`) moves idle servers instead.
//! 1. Worker A's waiters outnumber its opens, it has no idle server of the pool, a login of
//!    the pool was refused within `server_login_retry` (here or on another worker), and
//!    [`PoolSlice::borrow_from`] names worker B, which published idle servers of the key
//!    ([`IdleBoard`](crate::IdleBoard)): A sends "lend me an idle server of K" and counts
//!    the borrow as one open on its way, until a deadline; its waiters are not failed with
//!    the refusal meanwhile.
//! 2. B runs [`PoolSlice::lend`]: an idle server that can move (the caller says which) leaves
//!    for A as in a handover (`handover.rs`: it counts as leaving, moves whole, and A adopts
//!    it with [`PoolSlice::adopt_server`], to its oldest waiter). A server is owned by one
//!    worker at all times: the lent one left B's idle list before any message, so no client of
//!    B can get it meanwhile. Nothing to lend (used meanwhile, clients wait on B, a server that
//!    is not clean): B says so.
//! 3. A ends the borrow with [`PoolSlice::end_borrow`] when the server arrives, when B
//!    refuses, or at the deadline ([`PoolSlice::expired_borrows`]); its waiters still
//!    unserved then get the refusal. A refused or unanswered borrow is not tried again
//!    within `ask_interval`, so a pool whose idle servers cannot move does not pay a round
//!    trip per client.

use std::time::Instant;

use crate::key::PoolKey;
use crate::lease::Lease;
use crate::slice::{PoolId, PoolSlice};

impl<S, W: Copy> PoolSlice<S, W> {
    /// The worker to borrow an idle server of pool `id` from, if one should be asked now: a
    /// login of the pool was refused within `server_login_retry` (so opening cannot serve
    /// the waiters), there are other workers, none of this pool's servers is idle here, no
    /// borrow is on its way, none failed within `ask_interval`, the pool is not draining, it
    /// is under no shared cap, and another worker published an idle server of the key.
    pub fn borrow_from(&self, id: PoolId, now: Instant) -> Option<usize> {
        let pool = self.pool(id)?;
        let failed_lately = pool
            .borrow_failed_at
            .is_some_and(|at| now.saturating_duration_since(at) < pool.limits.ask_interval);
        // Under a `max_db_connections` or `max_user_connections` cap the pool makes room by
        // closing another pool's idle server and opening (as PgBouncer evicts to launch),
        // asynchronously: a borrow serving the waiters meanwhile would leave that room
        // unused, the servers of the cap fewer than it allows. Capped pools keep to that.
        let capped = pool
            .limits
            .shared_budgets
            .iter()
            .any(|budget| budget.limit() > 0);
        let login_refused = self.standing_login_failure(id, now).is_some();
        if !login_refused
            || self.workers < 2
            || !pool.idle.is_empty()
            || pool.borrow_until.is_some()
            || failed_lately
            || pool.draining
            || capped
        {
            return None;
        }
        pool.limits.idle_board.holder_besides(self.worker)
    }

    /// A borrow for pool `id` was sent; it counts as one server on its way until `deadline`.
    pub fn start_borrow(&mut self, id: PoolId, deadline: Instant) {
        let Some(pool) = self.pool_mut(id) else {
            return;
        };
        if pool.borrow_until.replace(deadline).is_none() {
            self.pending_borrows += 1;
        }
    }

    /// Whether a borrow for pool `id` is on its way.
    pub fn borrowing(&self, id: PoolId) -> bool {
        self.pool(id)
            .is_some_and(|pool| pool.borrow_until.is_some())
    }

    /// The borrow of pool `id` is over: its server arrived (`failed` false), or it was
    /// refused or went unanswered (`failed` true: no borrow for `ask_interval`).
    pub fn end_borrow(&mut self, id: PoolId, failed: bool, now: Instant) {
        let Some(pool) = self.pool_mut(id) else {
            return;
        };
        if failed {
            pool.borrow_failed_at = Some(now);
        }
        if pool.borrow_until.take().is_none() {
            return;
        }
        if !failed {
            // A server came for the waiters without a new slot: the room they asked for
            // under a full cap is not needed any more (as when a pool takes a slot), or an
            // idle server would be closed later with nobody to use the room.
            pool.limits
                .budgets()
                .for_each(crate::budget::PoolBudget::withdraw_release_request);
        }
        self.pending_borrows = self.pending_borrows.saturating_sub(1);
    }

    /// The earliest deadline of a borrow on its way.
    pub fn next_borrow_deadline(&self) -> Option<Instant> {
        if self.pending_borrows == 0 {
            return None;
        }
        self.slots
            .iter()
            .filter_map(|slot| slot.pool.as_ref()?.borrow_until)
            .min()
    }

    /// Ends the borrows whose deadline passed (as failed) and pushes their pools to `out`:
    /// their waiters need servers opened now.
    pub fn expired_borrows(&mut self, now: Instant, out: &mut Vec<PoolId>) {
        if self.pending_borrows == 0 {
            return;
        }
        let expired: Vec<PoolId> = (0..self.slot_count())
            .filter_map(|index| self.id_at_slot(index))
            .filter(|&id| {
                self.pool(id)
                    .and_then(|pool| pool.borrow_until)
                    .is_some_and(|deadline| now >= deadline)
            })
            .collect();
        for id in expired {
            self.end_borrow(id, true, now);
            out.push(id);
        }
    }

    /// Worker `to` would open a server of `key` and asks for an idle one instead: the most
    /// recently used idle server here that `movable` accepts leaves for `to` (it counts as
    /// leaving; move it whole and report [`PoolSlice::moved`]). None when clients wait here
    /// (they come first), nothing idle can move, or there is no such pool: tell `to`.
    pub fn lend(
        &mut self,
        key: &PoolKey,
        to: usize,
        movable: impl Fn(&S) -> bool,
    ) -> Option<Lease<S>> {
        let id = self.find(key)?;
        let pool = self.pool_mut(id)?;
        if pool.waiters.len() > 0 || pool.draining {
            return None;
        }
        let position = pool.idle.iter().rposition(|lease| movable(&lease.server))?;
        let lease = pool.idle.remove(position)?;
        pool.leave(Some(to));
        Some(lease)
    }
}
