//! A client connection: the one enum that says where it is in its life, and the session it
//! holds once logged in. Its startup packets, password exchange and forwarding are the
//! modules beside this one.

pub mod auth;
pub(crate) mod auth_method;
pub mod calls;
pub mod forward;
pub mod lookup;
pub mod pins;
pub mod reads;
pub(crate) mod retry;
pub mod startup;
pub mod texts;

use crate::addr::ClientAddr;
use std::time::Instant;

use pgtier_core::class::ClassSetting;
use pgtier_core::config::PoolMode;
use pgtier_pool::{PoolId, WaitTicket};

use crate::cancel::CancelKey;
use crate::ids::ServerId;
use crate::inbox::Inbox;
use crate::params::TrackedParams;
use crate::prepared::ClientStatements;
use crate::services::ReplicaLease;
use auth::PasswordCheck;
use auth_method::Method;
use forward::Forwarder;
use lookup::AnswerReader;
use pins::Pins;

/// Where a client is in its life. The fields each variant holds are valid only there.
#[derive(Debug)]
pub enum ClientState {
    /// Connected; its StartupMessage is awaited (SSL/GSSENC requests are answered 'N').
    Startup,
    /// Its password exchange is under way.
    Authenticating(PasswordCheck),
    /// Its authentication failed; the error is held until `answer_at` (`auth_failure_delay`,
    /// `engine/auth_delay.rs`), its input is not read.
    Refused { answer_at: Instant },
    /// Not in the auth file: its secret is being read with `auth_query` since `since`, on a
    /// server of the `auth_user` pool (`session.pool` until the answer). Parked (`ticket`)
    /// until a server is free, then running on `server`, whose answer `answer` reads;
    /// `method` then checks the secret found.
    LookingUp {
        since: Instant,
        ticket: Option<WaitTicket>,
        server: Option<ServerId>,
        // Boxed: the largest variant would otherwise set the size of every client's state.
        answer: Box<AnswerReader>,
        method: Method,
    },
    /// Its replica admission went to the control shard at `since` (at login, or to move off
    /// a replica that went Down); the answer carries `request_id`.
    Routing { since: Instant, request_id: u64 },
    /// Logged in, not yet welcomed: parked since `since` for the server whose login values
    /// will make its welcome (`ticket` while parked in the pool).
    Joining {
        since: Instant,
        ticket: Option<WaitTicket>,
    },
    /// Its first server applies the login's startup values; the welcome follows.
    Welcoming { server: ServerId },
    /// Welcomed, holding no server (between transactions in transaction mode), since `since`.
    Idle { since: Instant },
    /// Welcomed and waiting since `since` for a server for its next query; `notified` once
    /// it was told it is queued (`query_wait_notify`); `cancel_held` once a CancelRequest
    /// for it arrived meanwhile: PostgreSQL would have cancelled that query, so the cancel
    /// goes to its server once the query is sent there.
    Queued {
        since: Instant,
        ticket: Option<WaitTicket>,
        notified: bool,
        cancel_held: bool,
    },
    /// Linked to `server`; bytes flow both ways.
    Linked { server: ServerId },
    /// On the admin console; `listing` while its query waits for every shard's rows.
    Console {
        listing: Option<u64>,
        session: Box<crate::console_session::ConsoleSession>,
    },
    /// Teardown asked of the driver; nothing more happens until `handle_closed`. With
    /// `linger_until`, its queued bytes (a final error) are being sent until then.
    Closing { linger_until: Option<Instant> },
}

/// What a logged-in client is.
#[derive(Debug)]
pub struct Session {
    /// Shared with every session of the same name (`crate::names`).
    user: std::sync::Arc<str>,
    database: std::sync::Arc<str>,
    mode: PoolMode,
    /// The class its traffic counts under.
    class: ClassSetting,
    /// Its pool (on a replica-set entry, the pool of its replica).
    pool: Option<PoolId>,
    /// Untracked startup parameters: its pool key's profile, kept for a re-pin.
    startup_params: Vec<(String, String)>,
    /// The tracked parameters as it was told them (re-applied on each server).
    tracked: TrackedParams,
    /// The BackendKeyData it was given.
    key: Option<CancelKey>,
    /// Its hold on a replica, on a replica-set entry.
    lease: Option<Box<dyn ReplicaLease>>,
    /// In transaction mode, the session state it created (a plain SET, LISTEN, a temp
    /// table...): it keeps its server until the state is gone.
    pins: Pins,
    /// In transaction mode, its named prepared statements (created at its first).
    statements: Option<Box<ClientStatements>>,
    forwarder: Forwarder,
    /// When its current query started, if one runs (query_timeout, latency).
    query_started: Option<Instant>,
    /// In a transaction since it last got a server at the start of one (latency of
    /// transactions).
    transaction_started: Option<Instant>,
    /// When its server's last ReadyForQuery reached it (idle_transaction_timeout counts
    /// from there, as PgBouncer's counts from the server's last message).
    last_ready: Option<Instant>,
    /// Its database's slot in the shard's per-database tally (resolved once, at startup).
    stats: Option<pgtier_core::metrics::DatabaseSlot>,
    /// On an entry with a primary and replicas: its pools there and where its transaction
    /// runs (set when its pool on the primary is registered).
    reads: Option<Box<reads::ReaderSession>>,
    /// Its calls in flight, for query digests (`None` with `query_digests` off).
    calls: Option<Box<calls::CallLog>>,
    /// Its statement as a read on a replica that may run again (`read_retries`).
    retry: retry::ReadRetry,
}

/// What a StartupMessage names: the session it begins.
pub struct SessionStart {
    pub user: std::sync::Arc<str>,
    pub database: std::sync::Arc<str>,
    pub mode: PoolMode,
    pub class: ClassSetting,
    pub startup_params: Vec<(String, String)>,
    pub tracked: TrackedParams,
    /// `None` for a database no entry serves: its login is refused after authentication,
    /// and a name a client made up gets no row in the statistics.
    pub stats: Option<pgtier_core::metrics::DatabaseSlot>,
}

impl Session {
    pub fn new(start: SessionStart) -> Session {
        Session {
            user: start.user,
            database: start.database,
            mode: start.mode,
            class: start.class,
            pool: None,
            startup_params: start.startup_params,
            tracked: start.tracked,
            key: None,
            lease: None,
            pins: Pins::default(),
            statements: None,
            forwarder: Forwarder::default(),
            query_started: None,
            transaction_started: None,
            last_ready: None,
            stats: start.stats,
            reads: None,
            // Made at its first call (`link`): an idle client holds no call log.
            calls: None,
            retry: retry::ReadRetry::Off,
        }
    }

    pub fn user(&self) -> &std::sync::Arc<str> {
        &self.user
    }

    pub fn database(&self) -> &std::sync::Arc<str> {
        &self.database
    }

    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    pub fn class(&self) -> ClassSetting {
        self.class
    }

    /// Its class, decided once the password was right.
    pub fn classify(&mut self, class: ClassSetting) {
        self.class = class;
    }

    pub fn pool(&self) -> Option<PoolId> {
        self.pool
    }

    /// It registered with `pool`.
    pub fn joined(&mut self, pool: PoolId) {
        self.pool = Some(pool);
    }

    /// It leaves its pool (to register again, or after an `auth_query` lookup).
    pub(crate) fn leave_pool(&mut self) -> Option<PoolId> {
        self.pool.take()
    }

    /// It is a replication connection (a walsender's client): its server is its own, never
    /// reset or reused, and takes no SET of pgtier's.
    pub(crate) fn is_replication(&self) -> bool {
        self.mode == PoolMode::Session
            && self
                .startup_params
                .iter()
                .any(|(name, _)| name == "replication")
    }

    /// It is a physical replication connection (`replication=true`, not `database`).
    pub(crate) fn is_physical_replication(&self) -> bool {
        self.is_replication()
            && self.startup_params.iter().any(|(name, value)| {
                name == "replication" && !value.eq_ignore_ascii_case("database")
            })
    }

    pub(crate) fn startup_params(&self) -> &[(String, String)] {
        &self.startup_params
    }

    /// pgtier consumes the class option of the startup parameter `i` (`options`): the rest
    /// of it stays, or the parameter goes when nothing is left.
    pub(crate) fn strip_class_option(&mut self, i: usize) {
        match crate::class::strip_class_option(&self.startup_params[i].1) {
            Some(rest) => self.startup_params[i].1 = rest,
            None => {
                self.startup_params.remove(i);
            }
        }
    }

    pub fn tracked(&self) -> &TrackedParams {
        &self.tracked
    }

    pub(crate) fn tracked_mut(&mut self) -> &mut TrackedParams {
        &mut self.tracked
    }

    /// It was told the server's values of the tracked parameters.
    pub fn told(&mut self, tracked: TrackedParams) {
        self.tracked = tracked;
    }

    pub fn key(&self) -> Option<CancelKey> {
        self.key
    }

    /// It was welcomed with this BackendKeyData.
    pub fn welcomed(&mut self, key: CancelKey) {
        self.key = Some(key);
    }

    pub fn lease(&self) -> Option<&dyn ReplicaLease> {
        self.lease.as_deref()
    }

    pub(crate) fn lease_mut(&mut self) -> Option<&mut (dyn ReplicaLease + 'static)> {
        self.lease.as_deref_mut()
    }

    /// It was admitted to a replica.
    pub fn admitted(&mut self, lease: Box<dyn ReplicaLease>) {
        self.lease = Some(lease);
    }

    /// Its replica lease, taken to move it elsewhere.
    pub(crate) fn take_lease(&mut self) -> Option<Box<dyn ReplicaLease>> {
        self.lease.take()
    }

    pub fn pins(&self) -> &Pins {
        &self.pins
    }

    pub(crate) fn pins_mut(&mut self) -> &mut Pins {
        &mut self.pins
    }

    /// It created session state and keeps its server between transactions.
    pub(crate) fn pins_server(&self) -> bool {
        self.pins.is_pinned()
    }

    pub fn statements(&self) -> Option<&ClientStatements> {
        self.statements.as_deref()
    }

    /// The statements' slot, filled by the rewriter at its first named statement.
    pub(crate) fn statements_slot(&mut self) -> &mut Option<Box<ClientStatements>> {
        &mut self.statements
    }

    pub fn query_started(&self) -> Option<Instant> {
        self.query_started
    }

    pub fn transaction_started(&self) -> Option<Instant> {
        self.transaction_started
    }

    /// When its server's last ReadyForQuery reached it.
    pub fn last_ready(&self) -> Option<Instant> {
        self.last_ready
    }

    /// Its server said ReadyForQuery.
    pub(crate) fn server_ready(&mut self, now: Instant) {
        self.last_ready = Some(now);
    }

    /// It got a server at the start of a transaction.
    pub(crate) fn transaction_began(&mut self, now: Instant) {
        self.transaction_started = Some(now);
    }

    /// Its query ended: when it had started.
    pub(crate) fn query_ended(&mut self) -> Option<Instant> {
        self.query_started.take()
    }

    /// Its transaction ended: when it had started.
    pub fn transaction_ended(&mut self) -> Option<Instant> {
        self.transaction_started.take()
    }

    /// It went idle between transactions: no query or transaction runs, and its replica
    /// is told.
    pub(crate) fn went_idle(&mut self) {
        self.query_started = None;
        self.transaction_started = None;
        if let Some(lease) = self.lease.as_mut() {
            lease.transaction_ended();
        }
    }

    /// Its database's slot in the shard's per-database tally (`None`: no entry serves it).
    pub fn stats(&self) -> Option<pgtier_core::metrics::DatabaseSlot> {
        self.stats
    }

    pub fn reads(&self) -> Option<&reads::ReaderSession> {
        self.reads.as_deref()
    }

    pub(crate) fn reads_mut(&mut self) -> Option<&mut reads::ReaderSession> {
        self.reads.as_deref_mut()
    }

    /// On a reader entry: its reads are routed from now on, starting on `primary`.
    pub(crate) fn become_reader(&mut self, primary: PoolId) {
        if self.reads.is_none() {
            self.reads = Some(Box::new(reads::ReaderSession::new(primary)));
        }
    }

    pub(crate) fn calls_mut(&mut self) -> Option<&mut calls::CallLog> {
        self.calls.as_deref_mut()
    }

    /// Its calls in flight were answered (`answered`, in `time_us`): each complete one goes
    /// to the query digests.
    pub(crate) fn calls_answered(
        &mut self,
        answered: &[crate::server::relay::Answered],
        time_us: u64,
        digests: &mut crate::digests::ShardDigests,
    ) {
        if let Some(calls) = self.calls.as_deref_mut() {
            calls.answered(answered, time_us, &self.database, digests);
        }
    }

    /// It holds a call log (tests: an idle client holds none).
    #[cfg(test)]
    pub(crate) fn has_call_log(&self) -> bool {
        self.calls.is_some()
    }

    pub(crate) fn retry(&self) -> &retry::ReadRetry {
        &self.retry
    }

    pub(crate) fn retry_mut(&mut self) -> &mut retry::ReadRetry {
        &mut self.retry
    }

    /// Its statement runs again on another server: the calls it had in flight there will
    /// never be answered (they are logged again as it is forwarded again).
    pub(crate) fn calls_unanswered(&mut self) {
        if let Some(calls) = self.calls.as_deref_mut() {
            calls.unanswered();
        }
    }

    /// Its call log is dropped (digests turned off, or it had nothing in flight).
    pub(crate) fn drop_calls(&mut self) {
        self.calls = None;
    }
}

/// One client connection.
#[derive(Debug)]
pub struct ClientConn {
    state: ClientState,
    /// Received bytes the engine has not consumed yet (a pipeline waiting for a server).
    input: Inbox,
    backlog: Backlog,
    info: ClientInfo,
    /// Set once the StartupMessage named user and database.
    session: Option<Box<Session>>,
    /// Its TLS session, once it asked for TLS (SSLRequest) or opened with a TLS handshake.
    tls: Option<Box<ClientTls>>,
}

/// Where a client connected from, and when it was last heard of (listings, timeouts).
#[derive(Debug)]
pub struct ClientInfo {
    /// Its number in listings (`SHOW CLIENTS`' `id`) and for `KILL_CLIENT`.
    socket_id: crate::ids::SocketId,
    peer: Option<ClientAddr>,
    /// The local end of its socket (the listener it came through), for listings.
    local_addr: Option<std::net::SocketAddr>,
    /// The system user the peer process of a Unix-socket client runs as (SO_PEERCRED),
    /// for `peer` authentication.
    peer_user: Option<Box<str>>,
    connected_at: Instant,
    /// The last time bytes arrived (idle timeouts).
    last_active: Instant,
}

impl ClientInfo {
    pub fn socket_id(&self) -> crate::ids::SocketId {
        self.socket_id
    }

    /// Numbered when accepted (the engine draws from the process's counter).
    pub(crate) fn set_socket_id(&mut self, id: crate::ids::SocketId) {
        self.socket_id = id;
    }

    /// Bytes arrived from it at `now`.
    pub fn active(&mut self, now: Instant) {
        self.last_active = now;
    }

    pub(crate) fn last_active(&self) -> Instant {
        self.last_active
    }

    pub fn connected_at(&self) -> Instant {
        self.connected_at
    }

    pub fn peer(&self) -> Option<&ClientAddr> {
        self.peer.as_ref()
    }

    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.local_addr
    }

    /// The driver learned the local end of its socket.
    pub(crate) fn set_local_addr(&mut self, addr: Option<std::net::SocketAddr>) {
        self.local_addr = addr;
    }

    pub fn peer_user(&self) -> Option<&str> {
        self.peer_user.as_deref()
    }

    pub(crate) fn set_peer_user(&mut self, user: Option<String>) {
        self.peer_user = user.map(String::into_boxed_str);
    }
}

/// A client's send backlog and receive pause: what was handed to the driver for it and not
/// reported sent, and whether its receive is paused (too much input held while it waits).
#[derive(Debug, Default)]
pub struct Backlog {
    queued_bytes: usize,
    paused: bool,
}

impl Backlog {
    /// `bytes` were handed to the driver for it.
    pub(crate) fn queued_for_send(&mut self, bytes: usize) {
        self.queued_bytes += bytes;
    }

    /// The driver sent `bytes` of it: what is still queued.
    pub fn sent(&mut self, bytes: usize) -> usize {
        self.queued_bytes = self.queued_bytes.saturating_sub(bytes);
        self.queued_bytes
    }

    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Its receive resumes: true when it was paused.
    pub(crate) fn unpause(&mut self) -> bool {
        std::mem::replace(&mut self.paused, false)
    }
}

/// A client's TLS: its session, and whether it began with the handshake itself (PostgreSQL
/// 17's `sslnegotiation=direct`, which must then negotiate ALPN `postgresql`).
#[derive(Debug)]
pub struct ClientTls {
    pub session: crate::tls::TlsSession,
    pub direct: bool,
}

impl ClientConn {
    pub fn new(peer: Option<ClientAddr>, now: Instant) -> ClientConn {
        ClientConn {
            state: ClientState::Startup,
            input: Inbox::default(),
            backlog: Backlog::default(),
            info: ClientInfo {
                socket_id: crate::ids::SocketId::default(),
                peer,
                local_addr: None,
                peer_user: None,
                connected_at: now,
                last_active: now,
            },
            session: None,
            tls: None,
        }
    }

    pub fn state(&self) -> &ClientState {
        &self.state
    }

    /// The server it is linked to (welcoming or linked).
    pub fn server(&self) -> Option<ServerId> {
        match self.state {
            ClientState::Linked { server } | ClientState::Welcoming { server } => Some(server),
            ClientState::LookingUp { server, .. } => server,
            _ => None,
        }
    }

    pub(crate) fn is_closing(&self) -> bool {
        matches!(self.state, ClientState::Closing { .. })
    }

    /// A session of the admin console.
    pub(crate) fn is_console(&self) -> bool {
        matches!(self.state, ClientState::Console { .. })
    }

    /// The admin-console name of its state.
    pub(crate) fn state_name(&self) -> &'static str {
        match self.state {
            ClientState::Startup
            | ClientState::Authenticating(_)
            | ClientState::Refused { .. }
            | ClientState::LookingUp { .. } => "login",
            ClientState::Routing { .. } => "waiting_for_replica",
            ClientState::Joining { .. } | ClientState::Queued { .. } => "waiting",
            ClientState::Welcoming { .. } | ClientState::Linked { .. } => "active",
            ClientState::Idle { .. } | ClientState::Console { .. } => "idle",
            ClientState::Closing { .. } => "closing",
        }
    }

    // ---- transitions ----

    /// Its teardown begins: its input is dropped, and its previous state and session are
    /// handed back for what they held to be given back.
    pub(crate) fn begin_closing(
        &mut self,
        linger_until: Option<Instant>,
    ) -> (ClientState, Option<Box<Session>>) {
        let previous = std::mem::replace(&mut self.state, ClientState::Closing { linger_until });
        self.input.discard();
        (previous, self.session.take())
    }

    /// Closed at shutdown with nothing of its own left to give back.
    pub(crate) fn closed_quietly(&mut self) {
        self.state = ClientState::Closing { linger_until: None };
    }

    /// Its StartupMessage named who it is.
    pub(crate) fn start_session(&mut self, session: Box<Session>) {
        self.session = Some(session);
    }

    /// The login step in progress (its password check, its lookup), taken out to be
    /// advanced; it is `Startup` meanwhile and gets its next state from the step's outcome.
    pub(crate) fn take_login_step(&mut self) -> ClientState {
        std::mem::replace(&mut self.state, ClientState::Startup)
    }

    /// Its password exchange goes on with `check`.
    pub(crate) fn authenticating(&mut self, check: PasswordCheck) {
        self.state = ClientState::Authenticating(check);
    }

    /// Its authentication failed: the error is answered at `answer_at`.
    pub(crate) fn refused(&mut self, answer_at: Instant) {
        self.state = ClientState::Refused { answer_at };
    }

    /// Its authentication failed and its error is still held.
    pub(crate) fn is_refused(&self) -> bool {
        matches!(self.state, ClientState::Refused { .. })
    }

    /// Its secret is being looked up (`auth_query`) since `since`.
    pub(crate) fn looking_up(&mut self, since: Instant, answer: Box<AnswerReader>, method: Method) {
        self.state = ClientState::LookingUp {
            since,
            ticket: None,
            server: None,
            answer,
            method,
        };
    }

    /// Its lookup runs on `server` now.
    pub(crate) fn lookup_runs_on(&mut self, on: ServerId) {
        if let ClientState::LookingUp { server, .. } = &mut self.state {
            *server = Some(on);
        }
    }

    /// The reader of its lookup's answer, while it looks up.
    pub(crate) fn lookup_answer_mut(&mut self) -> Option<&mut AnswerReader> {
        match &mut self.state {
            ClientState::LookingUp { answer, .. } => Some(answer),
            _ => None,
        }
    }

    /// Its replica admission was asked of the control shard at `since`.
    pub fn routing(&mut self, since: Instant, request_id: u64) {
        self.state = ClientState::Routing { since, request_id };
    }

    /// Logged in, it waits since `since` for the server that makes its welcome.
    pub fn joining(&mut self, since: Instant) {
        self.state = ClientState::Joining {
            since,
            ticket: None,
        };
    }

    /// Welcomed, it waits since `since` for a server for its next query.
    pub fn queued(&mut self, since: Instant) {
        // Queued again for the same query (routed once more): a cancel held stays.
        let cancel_held = matches!(
            self.state,
            ClientState::Queued {
                cancel_held: true,
                ..
            }
        );
        self.state = ClientState::Queued {
            since,
            ticket: None,
            notified: false,
            cancel_held,
        };
    }

    /// A CancelRequest for it arrived. True while it waits for a server with a query: the
    /// cancel is held for that query. Otherwise nothing of its runs that could be cancelled.
    pub(crate) fn hold_cancel(&mut self) -> bool {
        match &mut self.state {
            ClientState::Queued { cancel_held, .. } => {
                *cancel_held = true;
                true
            }
            _ => false,
        }
    }

    /// Whether it has waited for a server longer than `after` in its current wait and was
    /// not told yet (`query_wait_notify`).
    pub(crate) fn owes_wait_notice(&self, after: std::time::Duration, now: Instant) -> bool {
        matches!(self.state, ClientState::Queued { since, notified: false, .. }
            if now.saturating_duration_since(since) > after)
    }

    /// It was told it is queued: once per wait.
    pub(crate) fn wait_notified(&mut self) {
        if let ClientState::Queued { notified, .. } = &mut self.state {
            *notified = true;
        }
    }

    /// It parked in its pool's queue (`ticket`), or left it (`None`).
    pub fn parked(&mut self, ticket: Option<WaitTicket>) {
        match &mut self.state {
            ClientState::Joining { ticket: slot, .. }
            | ClientState::Queued { ticket: slot, .. }
            | ClientState::LookingUp { ticket: slot, .. } => *slot = ticket,
            _ => {}
        }
    }

    /// It is taken off its pool's queue, its ticket void: true when it was parked
    /// (`lookups`: a client parked for its `auth_query` lookup counts too).
    pub fn unparked(&mut self, lookups: bool) -> bool {
        match &mut self.state {
            ClientState::Joining { ticket, .. } | ClientState::Queued { ticket, .. } => {
                *ticket = None;
                true
            }
            ClientState::LookingUp { ticket, .. } if lookups => {
                *ticket = None;
                true
            }
            _ => false,
        }
    }

    /// Its first server applies its startup values.
    pub(crate) fn welcoming(&mut self, server: ServerId) {
        self.state = ClientState::Welcoming { server };
    }

    /// Linked to `server`: bytes flow both ways. True when a cancel was held for the query
    /// it waited with.
    pub fn linked(&mut self, server: ServerId) -> bool {
        let cancel_held = matches!(
            self.state,
            ClientState::Queued {
                cancel_held: true,
                ..
            }
        );
        self.state = ClientState::Linked { server };
        cancel_held
    }

    /// Welcomed and holding no server since `since`.
    pub fn idle(&mut self, since: Instant) {
        self.state = ClientState::Idle { since };
    }

    /// On the admin console from now on.
    pub fn console(&mut self, session: Box<crate::console_session::ConsoleSession>) {
        self.state = ClientState::Console {
            listing: None,
            session,
        };
    }

    /// Its console session and its input, to read a statement from.
    pub(crate) fn console_input_mut(
        &mut self,
    ) -> Option<(&mut Inbox, &mut crate::console_session::ConsoleSession)> {
        match &mut self.state {
            ClientState::Console { session, .. } => Some((&mut self.input, session)),
            _ => None,
        }
    }

    // ---- its session ----

    pub fn session(&self) -> Option<&Session> {
        self.session.as_deref()
    }

    pub(crate) fn session_mut(&mut self) -> Option<&mut Session> {
        self.session.as_deref_mut()
    }

    // ---- its bytes ----

    pub fn input(&self) -> &Inbox {
        &self.input
    }

    pub(crate) fn input_mut(&mut self) -> &mut Inbox {
        &mut self.input
    }

    /// Where it connected from and when it was last heard of.
    pub fn info(&self) -> &ClientInfo {
        &self.info
    }

    pub(crate) fn info_mut(&mut self) -> &mut ClientInfo {
        &mut self.info
    }

    /// What was queued for it and whether its receive is paused.
    pub fn backlog(&self) -> &Backlog {
        &self.backlog
    }

    pub(crate) fn backlog_mut(&mut self) -> &mut Backlog {
        &mut self.backlog
    }

    /// It holds more than `limit` unread: true when its receive must pause now.
    pub(crate) fn pause_if_over(&mut self, limit: usize) -> bool {
        if self.input.len() > limit && !self.backlog.paused {
            self.backlog.paused = true;
            return true;
        }
        false
    }

    // ---- its TLS ----

    pub fn tls(&self) -> Option<&ClientTls> {
        self.tls.as_deref()
    }

    pub(crate) fn tls_mut(&mut self) -> Option<&mut ClientTls> {
        self.tls.as_deref_mut()
    }

    /// Its TLS session began.
    pub fn start_tls(&mut self, tls: ClientTls) {
        self.tls = Some(Box::new(tls));
    }

    /// Ciphertext from it: its plaintext joins its input.
    pub(crate) fn tls_received(
        &mut self,
        data: &[u8],
    ) -> Option<(
        Result<crate::tls::Received, crate::tls::TlsError>,
        Option<bytes::Bytes>,
        bool,
    )> {
        let tls = self.tls.as_mut()?;
        let result = tls.session.receive(data, self.input.buffer_mut());
        let output = tls.session.take_output();
        let alpn_ok =
            !tls.direct || tls.session.alpn_protocol() == Some(crate::tls::ALPN_POSTGRESQL);
        Some((result, output, alpn_ok))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SlotRef;

    #[test]
    fn a_client_is_linked_only_while_welcoming_or_linked() {
        let mut client = ClientConn::new(None, Instant::now());
        assert_eq!(client.server(), None);
        assert_eq!(client.state_name(), "login");
        let server = ServerId(SlotRef {
            index: 4,
            generation: 1,
        });
        client.welcoming(server);
        assert_eq!(client.server(), Some(server));
        client.linked(server);
        assert_eq!(
            (client.server(), client.state_name()),
            (Some(server), "active")
        );
        client.closed_quietly();
        assert!(client.is_closing() && client.server().is_none());
    }
}
