//! What the engine asks of the world around it, as traits its driver implements: replica
//! routing (the control shard's routers) and the admin console. Both are decisions made
//! elsewhere with their own tests; the engine only calls them, so its own tests use fakes.

use std::fmt;
use std::net::SocketAddr;

use bytes::BytesMut;
use pgtier_policy::ServiceClass;
use pgtier_wire::SqlState;

use crate::listing::Listing;

/// A session's hold on one replica. Dropping it gives the replica's session count back, so
/// it is released exactly once, whatever path the session ends by.
pub trait ReplicaLease: fmt::Debug + Send + std::any::Any {
    /// The lease as `Any`, so the routing service that made it can take its own type back
    /// (to move the session elsewhere).
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
    /// The replica's address.
    fn addr(&self) -> SocketAddr;
    /// The class the session was admitted in.
    fn class(&self) -> ServiceClass;
    /// Whether the replica went Down since this lease last asked (cheap: one atomic load
    /// when nothing failed).
    fn replica_failed(&mut self) -> bool;
}

/// An admission that was refused, with the SQLSTATE to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: SqlState,
    pub message: String,
}

/// The outcome of asking for a replica.
#[derive(Debug)]
pub enum Admission {
    /// Decided at once: the session runs on this replica.
    Placed(Box<dyn ReplicaLease>),
    /// The control shard decides; its answer arrives through `Routing::poll_reply`.
    Pending,
    Refused(Refusal),
}

/// The control shard's answer to a `Pending` admission.
#[derive(Debug)]
pub struct AdmissionReply {
    /// What the engine passed when it asked.
    pub request_id: u64,
    pub result: Result<Box<dyn ReplicaLease>, Refusal>,
}

/// Why a server connection to a replica failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureCause {
    ConnectionRefused,
    ConnectTimeout,
    ConnectionReset,
    /// The server said it is shutting down (57P01..57P03).
    ServerShutdown,
}

/// Replica routing by service class.
pub trait Routing {
    /// Whether `database` is a replica-set entry (its sessions need an admission).
    fn is_routed(&self, database: &str) -> bool;
    /// Admits a new session of `class` on `database`.
    fn admit(&self, database: &str, class: ServiceClass, request_id: u64) -> Admission;
    /// Moves a session off its replica, which went Down.
    fn repin(&self, lease: Box<dyn ReplicaLease>, request_id: u64) -> Admission;
    /// The next answer of the control shard, if one arrived.
    fn poll_reply(&self) -> Option<AdmissionReply>;
    /// A connection to `replica` of `database` failed (the replica may go Down at once).
    fn report_failure(&self, database: &str, replica: SocketAddr, cause: FailureCause);
    /// Whether `replica` of `database` is Down.
    fn is_down(&self, database: &str, replica: SocketAddr) -> bool;
}

/// No replica sets: every database entry has one server.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRouting;

impl Routing for NoRouting {
    fn is_routed(&self, _database: &str) -> bool {
        false
    }

    fn admit(&self, _database: &str, _class: ServiceClass, _request_id: u64) -> Admission {
        Admission::Refused(Refusal {
            code: pgtier_wire::sqlstate::CANNOT_CONNECT_NOW,
            message: "replica routing is off".to_string(),
        })
    }

    fn repin(&self, _lease: Box<dyn ReplicaLease>, request_id: u64) -> Admission {
        self.admit("", ServiceClass::Freemium, request_id)
    }

    fn poll_reply(&self) -> Option<AdmissionReply> {
        None
    }

    fn report_failure(&self, _database: &str, _replica: SocketAddr, _cause: FailureCause) {}

    fn is_down(&self, _database: &str, _replica: SocketAddr) -> bool {
        false
    }
}

/// The admin console (database `pgtier`).
pub trait Console {
    /// Whether some statement of `query` needs every shard's client and pool rows.
    fn needs_listing(&self, query: &str) -> bool;
    /// Answers one simple-query string into `out` (everything but ReadyForQuery).
    fn answer(&mut self, query: &str, listing: Option<&Listing>, out: &mut BytesMut);
}

/// A console that knows no commands, for engines without one.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoConsole;

impl Console for NoConsole {
    fn needs_listing(&self, _query: &str) -> bool {
        false
    }

    fn answer(&mut self, _query: &str, _listing: Option<&Listing>, out: &mut BytesMut) {
        pgtier_wire::error_fields::ErrorNotice::new(
            pgtier_wire::error_fields::Severity::Error,
            pgtier_wire::sqlstate::FEATURE_NOT_SUPPORTED,
            "the admin console is not available",
        )
        .encode_error(out);
    }
}
