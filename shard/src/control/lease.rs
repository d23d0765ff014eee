//! A session's claim on one replica: the proof that it was counted, released exactly once.
//!
//! Counting by hand at open and close would leak a count on every forgotten error path; a
//! lease releases its count when dropped, so a closed session can never keep load on a
//! replica and a count is never released twice.

use std::sync::Arc;

use pgtier_policy::{ReplicaId, ServiceClass};

use crate::control::router::ReplicaRouter;

/// One session counted on one replica of a router. Dropping it releases the count.
#[derive(Debug)]
#[must_use = "dropping a lease releases the session's count at once"]
pub struct SessionLease {
    router: Arc<ReplicaRouter>,
    replica: ReplicaId,
    class: ServiceClass,
}

impl SessionLease {
    /// Wraps a count already taken on `replica` for `class`.
    pub(crate) fn counted(
        router: Arc<ReplicaRouter>,
        replica: ReplicaId,
        class: ServiceClass,
    ) -> SessionLease {
        SessionLease {
            router,
            replica,
            class,
        }
    }

    /// The replica the session is pinned to.
    pub fn replica(&self) -> ReplicaId {
        self.replica
    }

    /// The session's class.
    pub fn class(&self) -> ServiceClass {
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
        self.router.release_count(self.replica, self.class);
    }
}
