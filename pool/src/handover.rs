//! Moving a pool's budget slots between workers. Idle servers parked on one worker must not
//! starve another worker's clients for the whole `query_wait_timeout`, and a slot freed for
//! them must not be taken by a third worker on the way, so a slot moves by message, never
//! through the budget:
//! 1. Worker A's clients wait, its open is refused with [`Refusal::PoolFull`](crate::Refusal),
//!    and [`PoolSlice::should_ask_others`] says it may ask (at most once per `ask_interval`):
//!    A sends "A wants a server of key K" to the other workers.
//! 2. Worker B runs [`PoolSlice::release_for`]: an idle server leaves now, or the next one to
//!    come back does ([`Checkin::HandOver`](crate::Checkin::HandOver) from `checkin` or
//!    `opened`).
//! 3. A leaving server keeps its slots while the engine ends it (Terminate, then the
//!    connection closes), so the backend is gone before the slot moves and PostgreSQL never
//!    sees more than the pool size. [`PoolSlice::left`] then names the worker the slot now
//!    belongs to; the engine sends it "a slot of key K was handed to you".
//! 4. Worker A runs [`PoolSlice::adopt_slot`]; its next [`PoolSlice::try_open`] uses the slot
//!    without touching the budgets, and [`PoolSlice::return_unused_slots`] gives back what
//!    nobody used by the end of that call. A worker without the pool gives the slot back with
//!    [`give_back_slot`].
//!
//!
//! A clean server usually moves whole instead (the engine detaches its socket and posts it
//! to `to` with its state): step 3 then ends with [`PoolSlice::moved`] rather than
//! [`PoolSlice::left`] (the slot travels with the server, the budgets keep counting it), and
//! worker `to` counts it in with [`PoolSlice::adopt_server`], which places it as any
//! returning server (to the oldest waiter, else idle). A move that fails before the socket
//! left (the server spoke, or its connection broke) ends as a closed leaving server:
//! [`PoolSlice::left`] grants the slot as in step 3.
//!
//! Every slot is therefore counted exactly once at all times: by a server of one slice
//! (idle, active, opening or leaving), as granted in one slice, or by the one message that
//! carries it ([`SlotGrant`], or a moving server). If that message cannot be delivered, the
//! sender gives the slot back with [`give_back_slot`] (the limits built for the grant's key),
//! or adopts its own moving server back.

use crate::key::PoolKey;
use crate::lease::Lease;
use crate::pool::PoolLimits;
use crate::slice::{Checkin, PoolId, PoolSlice};
use std::time::Instant;

/// A slot that left this slice for another worker ([`PoolSlice::left`]): tell worker `to`
/// that a slot of `key` is its now. The budgets keep counting it meanwhile; if `to` cannot be
/// told, give it back with [`give_back_slot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotGrant {
    pub to: usize,
    pub key: PoolKey,
}

/// Gives one slot back to the pool budget and every shared budget of `limits`: for a slot
/// handed to a worker that has no such pool ([`PoolSlice::adopt_slot`] returned false), or
/// one whose [`SlotGrant`] could not be delivered.
pub fn give_back_slot(limits: &PoolLimits) {
    limits.release_slot();
}

/// What [`PoolSlice::release_for`] did for another worker's clients.
#[derive(Debug, PartialEq, Eq)]
pub enum Release<S> {
    /// End this idle server now and report [`PoolSlice::left`] for the pool
    /// ([`PoolSlice::find`] of the key) once it is closed; its slot then goes to the asking
    /// worker. Given only when no client waits here.
    Now(Lease<S>),
    /// Nothing idle (or clients wait here): the next server to come back goes to the asking
    /// worker (unless clients wait here and this worker holds no more than its fair share).
    Later,
    /// No such pool here.
    Unknown,
}

impl<S, W: Copy> PoolSlice<S, W> {
    /// Whether to ask the other workers for a server of this pool now: there are other
    /// workers, clients wait here, the pool is not draining, this worker holds fewer than
    /// `pool_size` servers of it, and it did not ask within `ask_interval`. True records
    /// `now` as the last ask. One ask covers both messages of a refused open: "release a
    /// server of this key" ([`PoolSlice::release_for`]) and, under a full shared cap,
    /// "release an idle server under this cap" ([`PoolSlice::release_idle_sharing`]).
    pub fn should_ask_others(&mut self, id: PoolId, now: Instant) -> bool {
        let workers = self.workers;
        let Some(pool) = self.pool_mut(id) else {
            return false;
        };
        let pool_size = pool.limits.pool_budget.limit();
        let below_size = pool_size == 0 || pool.counts().servers() < pool_size;
        let asked_recently = pool
            .last_ask
            .is_some_and(|asked| now.saturating_duration_since(asked) < pool.limits.ask_interval);
        let ask = workers > 1
            && pool.waiters.len() > 0
            && !pool.draining
            && below_size
            && !asked_recently;
        if ask {
            pool.last_ask = Some(now);
        }
        ask
    }

    /// Worker `to` has clients waiting for `key` and no slot: an idle server of it here
    /// leaves now for `to` if no client waits here (the least recently used one; it counts as
    /// leaving and keeps its slots), else the next server to come back goes to `to`.
    pub fn release_for(&mut self, key: &PoolKey, to: usize) -> Release<S> {
        let Some(id) = self.find(key) else {
            return Release::Unknown;
        };
        let Some(pool) = self.pool_mut(id) else {
            return Release::Unknown;
        };
        if pool.waiters.len() == 0 {
            if let Some(lease) = pool.idle.pop_front() {
                pool.leave(Some(to));
                return Release::Now(lease);
            }
        }
        pool.release_to = Some(to);
        Release::Later
    }

    /// A leaving server's connection is closed (its backend is gone). Returns the worker its
    /// slot now belongs to, with the key to name in the message ("a slot of this key was
    /// handed to you"): the pool may be forgotten by the time this returns, so the key comes
    /// with the answer. None: the slot went back to the budgets (pools under the same caps
    /// whose clients wait can open with it: [`PoolSlice::collect_opens`]). Slots of one pool
    /// are interchangeable, so which leaving server closes first does not matter.
    pub fn left(&mut self, id: PoolId) -> Option<SlotGrant> {
        let pool = self.pool_mut(id)?;
        debug_assert!(pool.leaving > 0, "left without a leaving server");
        if pool.leaving == 0 {
            return None;
        }
        pool.leaving -= 1;
        let grant = match pool.hand_to.pop_front() {
            Some(to) => Some(SlotGrant {
                to,
                key: pool.key.clone(),
            }),
            None => {
                pool.limits.release_slot();
                None
            }
        };
        self.forget_if_unused(id);
        grant
    }

    /// A leaving server for worker `to` left this slice whole (its connection moved to `to`,
    /// see the module doc): it stops counting here, and its slot is not given back: it is
    /// counted by the server in transit until `to` runs [`PoolSlice::adopt_server`].
    pub fn moved(&mut self, id: PoolId, to: usize) {
        let Some(pool) = self.pool_mut(id) else {
            return;
        };
        debug_assert!(pool.leaving > 0, "moved without a leaving server");
        if pool.leaving == 0 {
            return;
        }
        pool.leaving -= 1;
        // The request it served. Slots of one pool are interchangeable, so any entry for
        // `to` is the right one to strike.
        if let Some(position) = pool.hand_to.iter().position(|&worker| worker == to) {
            pool.hand_to.remove(position);
        }
        self.forget_if_unused(id);
    }

    /// A server of this pool arrived whole from another worker ([`PoolSlice::moved`] there);
    /// its slot is counted in the budgets already. It is placed as a returning server: to a
    /// worker that asked, to the oldest waiter, else idle (keeping its lease's times), or
    /// closed (draining pool, past its lifetime, a budget over its limit or asking for one
    /// back; the slot is then given back).
    pub fn adopt_server(&mut self, id: PoolId, lease: Lease<S>, now: Instant) -> Checkin<S, W> {
        let Some(pool) = self.pool_mut(id) else {
            return Checkin::Close {
                lease,
                reason: crate::lease::CloseReason::Draining,
                open_replacement: false,
            };
        };
        pool.last_used = now;
        let reason = if pool.draining {
            Some(crate::lease::CloseReason::Draining)
        } else if now >= lease.opened_at + pool.limits.server_lifetime {
            Some(crate::lease::CloseReason::Lifetime)
        } else {
            None
        };
        if let Some(reason) = reason {
            pool.limits.release_slot();
            self.forget_if_unused(id);
            return Checkin::Close {
                lease,
                reason,
                open_replacement: false,
            };
        }
        self.place(id, lease)
    }

    /// A server of this pool arrived whole and must run something before it is placed
    /// (statements of the worker it left to drop): it counts as checked out from now; end it
    /// with [`PoolSlice::checkin`] or [`PoolSlice::closed`]. False: no such pool.
    pub fn adopt_checked_out(&mut self, id: PoolId) -> bool {
        let Some(pool) = self.pool_mut(id) else {
            return false;
        };
        pool.active += 1;
        true
    }

    /// Another worker handed this one a slot of `key` (the budgets still count it): the next
    /// [`PoolSlice::try_open`] of the pool uses it. Serve the pool's waiters, then call
    /// [`PoolSlice::return_unused_slots`]. False: no such pool here; give the slot back with
    /// [`give_back_slot`].
    pub fn adopt_slot(&mut self, key: &PoolKey) -> bool {
        let Some(pool) = self.find(key).and_then(|id| self.pool_mut(id)) else {
            return false;
        };
        pool.granted += 1;
        true
    }

    /// Gives handed-over slots that no open used back to the budgets.
    pub fn return_unused_slots(&mut self, id: PoolId) {
        let Some(pool) = self.pool_mut(id) else {
            return;
        };
        for _ in 0..std::mem::take(&mut pool.granted) {
            pool.limits.release_slot();
        }
        self.forget_if_unused(id);
    }
}
