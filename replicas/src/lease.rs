//! A session's claim on one replica: the proof that it was counted, released exactly once.
//!
//! Counting by hand at open and close would leak a count on every forgotten error path; a
//! lease releases its count when dropped, so a closed session can never keep load on a
//! replica and a count is never released twice.
//!
//! A lease holds the router's shared state ([`RouterState`]), not the router: everything a
//! lease does per transaction is there, one `Arc` away, and the router that hands leases out
//! stays above it.

use std::sync::Arc;

use pgtier_policy::ReplicaId;
use pgtier_policy::tiers::Tier;

use crate::router_state::RouterState;

/// One session counted on one replica of a router. Dropping it releases the count.
#[derive(Debug)]
#[must_use = "dropping a lease releases the session's count at once"]
pub struct SessionLease {
    state: Arc<RouterState>,
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
        state: Arc<RouterState>,
        replica: ReplicaId,
        class: Tier,
    ) -> SessionLease {
        let drain_epoch_seen = state.drain_epoch();
        SessionLease {
            state,
            replica,
            class,
            in_flight: false,
            drain_epoch_seen,
        }
    }

    /// The session started a transaction: counted in flight while the router decides on that
    /// signal. Idempotent, so every path that needs a server may call it.
    pub(crate) fn begin_transaction(&mut self) {
        if !self.in_flight && self.state.counts_in_flight() {
            self.in_flight = self.state.transaction_started(self.replica, self.class);
        }
    }

    /// Whether the session should leave its replica before its next transaction (the
    /// recovery-tail drain). Asks the policy once per rejoin; otherwise one atomic load.
    pub fn should_move(&mut self) -> bool {
        let epoch = self.state.drain_epoch();
        if epoch == self.drain_epoch_seen {
            return false;
        }
        self.drain_epoch_seen = epoch;
        self.state.should_drain(self.replica, self.class)
    }

    /// The session's transaction ended (its server was released). Idempotent.
    pub fn end_transaction(&mut self) {
        if std::mem::take(&mut self.in_flight) {
            self.state.transaction_ended(self.replica, self.class);
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

    /// The shared state of the router that counted it (its epochs and health, for a session
    /// between transactions).
    pub fn router_state(&self) -> &Arc<RouterState> {
        &self.state
    }

    /// The replica's address, for the server pool.
    pub fn replica_addr(&self) -> Option<std::net::SocketAddr> {
        self.state.replica_addr(self.replica)
    }
}

impl Drop for SessionLease {
    fn drop(&mut self) {
        self.end_transaction();
        self.state.release_count(self.replica, self.class);
    }
}
