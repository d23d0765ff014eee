//! What the engine asks of the world around it, as traits its driver implements: replica
//! routing (the control shard's routers) and the admin console. Both are decisions made
//! elsewhere with their own tests; the engine only calls them, so its own tests use fakes.

use std::fmt;
use std::net::SocketAddr;

use bytes::BytesMut;
use pgtier_policy::tiers::Tier;
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
    /// The class (rank) the session was admitted in, as its router counts it.
    fn class(&self) -> Tier;
    /// Whether the replica went Down since this lease last asked (cheap: one atomic load
    /// when nothing failed).
    fn replica_failed(&mut self) -> bool;
    /// The session needs a server for a transaction (PLB's in-flight signal counts it until
    /// [`ReplicaLease::transaction_ended`] or the lease's drop). Idempotent.
    fn transaction_started(&mut self) {}
    /// The session's transaction ended and its server was released. Idempotent.
    fn transaction_ended(&mut self) {}
    /// Whether the session should move to another replica before its next transaction,
    /// though its own is up (PLB's recovery-tail drain after a rejoin). Cheap when nothing
    /// rejoined.
    fn should_move(&mut self) -> bool {
        false
    }
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

/// One transaction's hold on a replica (a read of a reader entry). It counts as in flight on
/// that replica, for the weighted power-of-two-choices, until it is dropped.
pub trait ReadTicket: fmt::Debug + Send {
    /// The replica's address.
    fn addr(&self) -> SocketAddr;
}

/// A read of a reader entry (`primary` plus `replicas`), to be placed on a replica.
#[derive(Clone, Copy, Debug)]
pub struct ReadRequest<'a> {
    pub database: &'a str,
    /// The session's class as a rank (premium 0).
    pub class: Tier,
    /// The session's admitted replica under session-level PLB (`plb_per_transaction` off):
    /// the read may run only there. `None`: any replica the entry's routing allows.
    pub leased: Option<SocketAddr>,
    /// Read-your-writes: the read must see every transaction that committed on the primary
    /// before this instant (`None`: no target).
    pub after: Option<std::time::Instant>,
    /// A replica the read must not run on: its server there died under this very read, which
    /// is being run again (`read_retries`) before the replica's Down is published.
    pub avoid: Option<SocketAddr>,
}

/// Where a read runs.
#[derive(Debug)]
pub enum ReadRoute {
    /// On this replica.
    Replica(Box<dyn ReadTicket>),
    /// No replica may serve it (all Down or past the lag cap): on the primary.
    Primary,
    /// Some replica may serve it once it has replayed the read's target: ask again later
    /// (the engine falls back to the primary at `read_your_writes_timeout`).
    NotYet,
}

/// Replica routing by service class.
pub trait Routing {
    /// Whether `database` is a replica-set entry (its sessions need an admission).
    fn is_routed(&self, database: &str) -> bool;
    /// Admits a new session of `class` on `database`.
    fn admit(&self, database: &str, class: Tier, request_id: u64) -> Admission;
    /// Moves a session off its replica, which went Down.
    fn repin(&self, lease: Box<dyn ReplicaLease>, request_id: u64) -> Admission;
    /// The next answer of the control shard, if one arrived.
    fn poll_reply(&self) -> Option<AdmissionReply>;
    /// A connection to `replica` of `database` failed (the replica may go Down at once).
    fn report_failure(&self, database: &str, replica: SocketAddr, cause: FailureCause);
    /// Whether `replica` of `database` is Down.
    fn is_down(&self, database: &str, replica: SocketAddr) -> bool;
    /// Places one read transaction of a reader entry.
    fn route_read(&self, _request: &ReadRequest<'_>) -> ReadRoute {
        ReadRoute::Primary
    }
    /// A write transaction of `user` on `database` finished on the primary at `at` (for
    /// `read_your_writes_scope = "user"`, shared by every shard).
    fn note_user_write(&self, _database: &str, _user: &str, _at: std::time::Instant) {}
    /// The latest write of `user` on `database` noted by any shard.
    fn user_write(&self, _database: &str, _user: &str) -> Option<std::time::Instant> {
        None
    }
    /// What reader entry `database`'s primary says of calls of function `name` in `schema`:
    /// `Some(true)` when every function of that name is STABLE or IMMUTABLE, `Some(false)`
    /// when one is VOLATILE or none exists, `None` when not known yet (a look-up is then
    /// requested, so a later transaction may know). Never blocks.
    fn function_read_only(
        &self,
        _database: &str,
        _schema: pgtier_wire::read_only::CalleeSchema,
        _name: &[u8],
    ) -> Option<bool> {
        None
    }
    /// A transaction that may have changed functions committed through `database`: what
    /// is known of its primary's functions is forgotten.
    fn functions_changed(&self, _database: &str) {}
    /// The host `database`'s writes go to when pgtier elects it (a reader entry whose
    /// hosts it polls): `None` when the entry's configured primary is used as written.
    fn primary(&self, _database: &str) -> Option<PrimaryNow> {
        None
    }
}

/// The elected primary of an entry, as [`Routing::primary`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrimaryNow {
    /// `None`: no host is the primary now (demoted, none promoted yet): no new servers.
    pub server: Option<ElectedServer>,
    /// Moves with every change of `server`.
    pub epoch: u64,
}

/// Which server an elected primary is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectedServer {
    /// A reader entry's primary or one of its replicas, by address.
    Addr(SocketAddr),
    /// The host at this index of a host list (`target_session_attrs`).
    Listed(usize),
}

/// No replica sets: every database entry has one server.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoRouting;

impl Routing for NoRouting {
    fn is_routed(&self, _database: &str) -> bool {
        false
    }

    fn admit(&self, _database: &str, _class: Tier, _request_id: u64) -> Admission {
        Admission::Refused(Refusal {
            code: pgtier_wire::sqlstate::CANNOT_CONNECT_NOW,
            message: "replica routing is off".to_string(),
        })
    }

    fn repin(&self, _lease: Box<dyn ReplicaLease>, request_id: u64) -> Admission {
        self.admit("", Tier(1), request_id)
    }

    fn poll_reply(&self) -> Option<AdmissionReply> {
        None
    }

    fn report_failure(&self, _database: &str, _replica: SocketAddr, _cause: FailureCause) {}

    fn is_down(&self, _database: &str, _replica: SocketAddr) -> bool {
        false
    }
}

/// What a console session may run: PgBouncer's `admin_users` run everything, its
/// `stats_users` only the read-only `SHOW` commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsoleRights {
    Admin,
    Stats,
}

/// One query for the console, with what it may read.
#[derive(Clone, Copy, Debug)]
pub struct ConsoleRequest<'a> {
    /// The query text (a simple-query string, or one extended-protocol statement).
    pub query: &'a str,
    pub rights: ConsoleRights,
    /// Result column formats Bind asked for (PostgreSQL's rules: none = all text, one = all
    /// columns, else one per column); empty for simple queries.
    pub formats: &'a [i16],
    /// Every shard's rows, when [`Console::needs_listing`] asked for them.
    pub listing: Option<&'a Listing>,
    /// The configuration the engine runs with.
    pub config: &'a pgtier_core::config::Config,
    /// What PAUSE, KILL and DISABLE hold on this shard (every shard holds the same).
    pub gates: &'a crate::gates::Gates,
}

/// The answer to one extended-protocol statement, split where the protocol splits it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatementAnswer {
    /// Its RowDescription (`None`: it returns no rows, NoData).
    pub description: Option<BytesMut>,
    /// Notices, DataRows and CommandComplete, or an ErrorResponse (or EmptyQueryResponse).
    pub body: BytesMut,
    /// The body is an ErrorResponse.
    pub failed: bool,
}

/// The admin console (database `pgtier`, alias `pgbouncer`).
pub trait Console {
    /// Whether some statement of `query` needs every shard's client and pool rows.
    fn needs_listing(&self, query: &str) -> bool;
    /// Answers one simple-query string into `out` (everything but ReadyForQuery).
    fn answer(&mut self, request: &ConsoleRequest<'_>, out: &mut BytesMut);
    /// Answers one statement of the extended protocol.
    fn answer_statement(&mut self, request: &ConsoleRequest<'_>) -> StatementAnswer;
    /// `None` when `query` is not a process-controlling command (PAUSE, KILL, RELOAD, SET,
    /// SHUTDOWN...); otherwise what the engine must do, or the refusal to answer (wrong
    /// rights, unknown database, bad syntax). `admin`: the session's user is in
    /// `admin_users`. RELOAD is requested here (the process rereads its files); SET builds
    /// the new configuration from `config`.
    fn admin_command(
        &mut self,
        _query: &str,
        _admin: bool,
        _config: &pgtier_core::config::Config,
    ) -> Option<Result<crate::gates::AdminRequest, Refusal>> {
        None
    }

    /// Hands a RELOAD or SET to the process, which answers shard `order.shard` with
    /// `Command::AdminDone` (at once when it fails, else once every shard applied the new
    /// configuration). Refused when nothing in this process carries changes out.
    fn reconfigure(&mut self, _order: crate::reconfigure::Order) -> Result<(), Refusal> {
        Err(Refusal {
            code: pgtier_wire::sqlstate::PROTOCOL_VIOLATION,
            message: "this pgtier cannot change its configuration at runtime".to_string(),
        })
    }
}

/// A console that knows no commands, for engines without one.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoConsole;

impl Console for NoConsole {
    fn needs_listing(&self, _query: &str) -> bool {
        false
    }

    fn answer(&mut self, _request: &ConsoleRequest<'_>, out: &mut BytesMut) {
        no_console(out);
    }

    fn answer_statement(&mut self, _request: &ConsoleRequest<'_>) -> StatementAnswer {
        let mut body = BytesMut::new();
        no_console(&mut body);
        StatementAnswer {
            description: None,
            body,
            failed: true,
        }
    }
}

fn no_console(out: &mut BytesMut) {
    pgtier_wire::error_fields::ErrorNotice::new(
        pgtier_wire::error_fields::Severity::Error,
        pgtier_wire::sqlstate::FEATURE_NOT_SUPPORTED,
        "the admin console is not available",
    )
    .encode_error(out);
}
