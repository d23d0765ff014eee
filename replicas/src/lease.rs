//! A session's claim on one replica: the proof that it was counted, released exactly once.
//!
//! Counting by hand at open and close would leak a count on every forgotten error path; a
//! lease releases its count when dropped, so a closed session can never keep load on a
//! replica and a count is never released twice.

use std::sync::Arc;

use pgtier_policy::ReplicaId;
use pgtier_policy::tiers::Tier;

use crate::router::ReplicaRouter;

/// One session counted on one replica of a router. Dropping it releases the count.
#[derive(Debug)]
#[must_use = "dropping a lease releases the session's count at once"]
pub struct SessionLease {
    router: Arc<ReplicaRouter>,
    replica: ReplicaId,
    /// The counted rank (premium 0, freemium 1, ...), already fitted to the router's classes.
    class: Tier,
    /// A transaction of the session is counted in flight on the replica (PLB's
    /// `load_signal = "in_flight"`); released with the lease if the session ends inside one.
    in_flight: bool,
    /// The router's drain epoch this session last asked about (see [`SessionLease::should_move`]).
    drain_epoch_seen: u64,
}

impl SessionLease {
    /// Wraps a count already taken on `replica` for `class`.
    pub(crate) fn counted(
        router: Arc<ReplicaRouter>,
        replica: ReplicaId,
        class: Tier,
    ) -> SessionLease {
        let drain_epoch_seen = router.drain_epoch();
        SessionLease {
            router,
            replica,
            class,
            in_flight: false,
            drain_epoch_seen,
        }
    }

    /// The session started a transaction: counted in flight while the router decides on that
    /// signal. Idempotent, so every path that needs a server may call it.
    pub(crate) fn begin_transaction(&mut self) {
        if !self.in_flight && self.router.counts_in_flight() {
            self.in_flight = self.router.transaction_started(self.replica, self.class);
        }
    }

    /// Whether the session should leave its replica before its next transaction (the
    /// recovery-tail drain). Asks the policy once per rejoin; otherwise one atomic load.
    pub fn should_move(&mut self) -> bool {
        let epoch = self.router.drain_epoch();
        if epoch == self.drain_epoch_seen {
            return false;
        }
        self.drain_epoch_seen = epoch;
        self.router.should_drain(self.replica, self.class)
    }

    /// The session's transaction ended (its server was released). Idempotent.
    pub fn end_transaction(&mut self) {
        if std::mem::take(&mut self.in_flight) {
            self.router.transaction_ended(self.replica, self.class);
        }
    }

    /// The replica the session is pinned to.
    pub fn replica(&self) -> ReplicaId {
        self.replica
    }

    /// The session's class as the router counts it.
    pub fn class(&self) -> Tier {
        self.class
    }

    /// The router that counted it.
    pub fn router(&self) -> &Arc<ReplicaRouter> {
        &self.router
    }

    /// The replica's address, for the server pool.
    pub fn replica_addr(&self) -> Option<std::net::SocketAddr> {
        self.router.replica_addr(self.replica)
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        self.end_transaction();
        self.router.release_count(self.replica, self.class);
    }
}
