//! A client from its first byte to its welcome: startup packets, the password exchange, the
//! replica admission on a replica-set entry, its pool, and the welcome (from the pool's
//! cached parameters, or from the server whose login values it waited for).
//!
//! `auth_query`: a client the auth file does not list, on a database with an `auth_user`,
//! parks on the pool of (database, auth_user) like any client waiting for a server; the
//! server it gets runs `auth_query` for the client's name and goes back to the pool, and
//! the client's password exchange checks the secret found. The lookup is bounded like any
//! use of a pool (its size, `query_wait_timeout` while parked) and as a whole by
//! `server_connect_timeout`; the secrets found are cached (`client::lookup`), so only a
//! login storm of new users reaches the server.

use std::time::Instant;

use bytes::{Bytes, BytesMut};
use pgtier_core::config::{ADMIN_DATABASE, ADMIN_DATABASE_ALIAS, AuthType, PoolMode};
use pgtier_core::hba::{ClientAddr as HbaAddr, HbaRequest};
use pgtier_pool::{Lease, PoolError, PoolKey, ServerTarget, StartupProfile};
use tracing::warn;

use super::clients::ClientTable;
use super::env::Env;
use super::stats::StatsSink;
use crate::action::{Conn, Outbox};
use crate::cancel::CancelKey;
use crate::class::session_class;
use crate::client::auth::{self, AuthContext, AuthStep};
use crate::client::auth_method::{self, Method};
use crate::client::lookup::{self, Answer, Found};
use crate::client::startup::{self, LoginRequest, StartupStep};
use crate::client::{ClientState, Session, SessionStart};
use crate::console_session::ConsoleSession;
use crate::engine::Engine;
use crate::engine::tls_io::{SslAnswer, requires_tls};
use crate::gates::Gates;
use crate::ids::{ClientId, ServerId, SlotRef};
use crate::messages::{self, sqlstate};
use crate::params::{TrackedParams, tracked_index};
use crate::random::Random;
use crate::services::{Admission, AdmissionReply, Refusal, ReplicaLease, Routing};
use crate::settings::MAX_STARTUP_BYTES;

/// The request id of a client's admission: its slot, so a reply finds the client (or finds
/// it gone: a stale generation) without a table.
pub(super) fn request_id(id: ClientId) -> u64 {
    (u64::from(id.0.generation) << 32) | u64::from(id.0.index)
}

fn client_of(request_id: u64) -> ClientId {
    ClientId(SlotRef {
        index: request_id as u32,
        generation: (request_id >> 32) as u32,
    })
}

fn refusal_error(refusal: &Refusal) -> bytes::Bytes {
    messages::fatal(refusal.code, &refusal.message)
}

impl Engine {
    pub(super) fn on_startup_bytes(&mut self, id: ClientId) {
        match self.clients.read_startup(id, &mut self.outbox) {
            Startup::Wait => {}
            Startup::ProtocolError(message) => self.protocol_error(id, message),
            Startup::Close(error) => self.close_client(id, error),
            Startup::Cancel(key) => {
                self.close_client(id, None);
                self.route_cancel(key);
            }
            Startup::Login(request) => self.on_login(id, request),
        }
    }

    fn on_login(&mut self, id: ClientId, request: LoginRequest) {
        let started = self.clients.start_session(
            id,
            request,
            &self.env,
            self.admin.gates(),
            &mut self.stats,
            &mut self.outbox,
        );
        match started {
            Ok(true) => self.start_authentication(id),
            Ok(false) => {}
            Err(error) => self.close_client(id, Some(error)),
        }
    }

    fn start_authentication(&mut self, id: ClientId) {
        let method = match self.clients.auth_method(id, &self.env) {
            Ok(method) => method,
            Err(error) => {
                self.close_client(id, Some(error));
                return;
            }
        };
        match self
            .clients
            .lookup_user_for(id, method, &self.env, self.now)
        {
            Some(auth_user) => self.start_lookup(id, method, &auth_user),
            None => self.begin_exchange(id, method),
        }
    }

    /// The password exchange of `method` (none for trust).
    pub(super) fn begin_exchange(&mut self, id: ClientId, method: Method) {
        let exchange = self.clients.begin_exchange(
            id,
            method,
            &self.env,
            self.random.as_mut(),
            &mut self.outbox,
        );
        match exchange {
            Exchange::Gone => {}
            Exchange::Passed => self.on_authenticated(id),
            Exchange::Started => self.on_auth_bytes(id),
            Exchange::Failed(error) => self.close_client(id, Some(error)),
        }
    }

    pub(super) fn on_auth_bytes(&mut self, id: ClientId) {
        let progress =
            self.clients
                .auth_step(id, &self.env, self.random.as_mut(), &mut self.outbox);
        match progress {
            AuthProgress::Pending => {}
            AuthProgress::Passed => self.on_authenticated(id),
            AuthProgress::Failed(error) => self.close_client(id, Some(error)),
        }
    }

    /// The password is right: the console's welcome, or the admission and the pool.
    fn on_authenticated(&mut self, id: ClientId) {
        match self.clients.authenticated(id, &self.env, &*self.routing) {
            Authenticated::Gone => {}
            Authenticated::Console => self.welcome_console(id),
            Authenticated::Unrouted => self.join_pool(id),
            Authenticated::Refused(error) => self.close_client(id, Some(error)),
            Authenticated::Admission(admission) => self.apply_admission(id, admission),
        }
    }

    /// Acts on an admission decided at once or answered by the control shard.
    fn apply_admission(&mut self, id: ClientId, admission: Admission) {
        match admission {
            Admission::Placed(lease) => self.admitted(id, lease),
            Admission::Pending => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    client.routing(self.now, request_id(id));
                }
            }
            Admission::Refused(refusal) => self.refused(id, &refusal),
        }
    }

    /// No replica for the session: a reader entry's session goes on without one (its
    /// primary serves every transaction); any other session is refused.
    fn refused(&mut self, id: ClientId, refusal: &crate::services::Refusal) {
        let Some(session) = self.clients.get(id.0).and_then(|c| c.session()) else {
            return;
        };
        let reader_entry = self.env.config().database(session.database()).is_some_and(|db| {
            matches!(&db.servers, pgtier_core::config::ServerSet::Replicas(set) if set.is_reader_entry())
        });
        if !reader_entry {
            self.close_client(id, Some(refusal_error(refusal)));
            return;
        }
        tracing::debug!(
            database = %session.database(),
            reason = %refusal.message,
            "no replica admitted the session: its reads run on the primary"
        );
        if session.pool().is_none() {
            self.join_pool(id);
            return;
        }
        if let Some(client) = self.clients.get_mut(id.0) {
            client.queued(self.now);
        }
        self.need_server(id);
    }

    /// The client holds a replica now: a first login continues to its welcome; a client
    /// moved off a failed replica queues on its new replica's pool.
    fn admitted(&mut self, id: ClientId, lease: Box<dyn crate::services::ReplicaLease>) {
        let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return;
        };
        tracing::debug!(
            database = %session.database(),
            user = %session.user(),
            class = %session.class(),
            replica = %lease.addr(),
            "session admitted to a replica"
        );
        session.admitted(lease);
        // Welcomed once its cancel key was issued.
        let welcomed = session.key().is_some();
        if session.reads().is_some() {
            // A reader session keeps its pools: its next read is routed with the new lease.
            if let Some(client) = self.clients.get_mut(id.0) {
                client.queued(self.now);
            }
            self.need_server(id);
            return;
        }
        match session.leave_pool() {
            None => self.join_pool(id),
            Some(old) => {
                self.linker.pools_mut().unregister(old);
                if self.register_pool(id).is_some() {
                    let since = self.now;
                    if let Some(client) = self.clients.get_mut(id.0) {
                        if welcomed {
                            client.queued(since);
                        } else {
                            client.joining(since);
                        }
                    }
                    self.need_server(id);
                }
            }
        }
    }

    pub(super) fn on_admission_reply(&mut self, reply: AdmissionReply) {
        let id = client_of(reply.request_id);
        let waiting = self.clients.get(id.0).is_some_and(|client| {
            matches!(client.state(), ClientState::Routing { request_id, .. } if *request_id == reply.request_id)
        });
        if !waiting {
            // The client left: dropping the lease gives its count back.
            return;
        }
        match reply.result {
            Ok(lease) => self.admitted(id, lease),
            Err(refusal) => self.refused(id, &refusal),
        }
    }

    /// Finds or creates the client's pool and registers the client with it. `None` when
    /// it was refused (and is closing).
    pub(super) fn register_pool(&mut self, id: ClientId) -> Option<pgtier_pool::PoolId> {
        let session = self.clients.get(id.0)?.session()?;
        let Some(db) = self.env.config().database(session.database()) else {
            let message = format!("database \"{}\" does not exist", session.database());
            self.close_client(
                id,
                Some(messages::fatal(sqlstate::INVALID_CATALOG_NAME, &message)),
            );
            return None;
        };
        let reader_entry = matches!(
            &db.servers,
            pgtier_core::config::ServerSet::Replicas(set) if set.is_reader_entry()
        );
        // A reader entry's session starts on its primary; each read picks its replica.
        let target = match session.lease() {
            Some(lease) if !reader_entry => ServerTarget::Replica(lease.addr()),
            _ => ServerTarget::Primary,
        };
        let server_user = db
            .user
            .clone()
            .unwrap_or_else(|| session.user().to_string());
        let profile = StartupProfile::from_parameters(
            session
                .startup_params()
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str())),
        );
        let key = PoolKey::new(
            (**session.database()).into(),
            server_user.as_str().into(),
            target,
            profile,
        );
        let limits = self.env.pool_limits(&key);
        let registered = match self.linker.pools_mut().register(&key, &limits, self.now) {
            Err(PoolError::TooManyPools { .. }) => {
                self.evict_a_pool();
                self.linker.pools_mut().register(&key, &limits, self.now)
            }
            registered => registered,
        };
        match registered {
            Ok(pool) => {
                if let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) {
                    session.joined(pool);
                }
                if reader_entry {
                    self.clients.start_reader_session(id, pool);
                }
                Some(pool)
            }
            Err(error) => {
                let error = messages::fatal(sqlstate::TOO_MANY_CONNECTIONS, &error.to_string());
                self.close_client(id, Some(error));
                None
            }
        }
    }

    /// A logged-in client joins its pool: welcomed from the pool's cached parameters when
    /// it can be, else parked for a server whose login makes its welcome.
    fn join_pool(&mut self, id: ClientId) {
        let Some(pool) = self.register_pool(id) else {
            return;
        };
        let routed = matches!(
            self.linker.pools().key(pool).map(|key| key.target),
            Some(ServerTarget::Replica(_))
        );
        if !routed && let Some(error) = self.linker.pools().login_failure(pool, self.now).cloned() {
            self.close_client(id, Some(error));
            return;
        }
        let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return;
        };
        // A cached welcome serves only a client whose startup spellings the pool has seen
        // a server answer: it must be told the server's own values.
        let cached = session.mode() == PoolMode::Transaction
            && match (
                self.linker.pools().welcome(pool),
                self.linker.pools().spellings(pool),
            ) {
                (Some(welcome), Some(spellings)) => session
                    .tracked_mut()
                    .canonicalize(&welcome.tracked, spellings),
                _ => false,
            };
        if cached {
            self.welcome_from_pool(id, pool);
            return;
        }
        if let Some(client) = self.clients.get_mut(id.0) {
            client.joining(self.now);
        }
        self.need_server(id);
    }

    /// The welcome (`ClientTable::welcome`); false when the client is gone or closing.
    fn welcome(&mut self, id: ClientId, params: &[(String, String)], pid: Option<u32>) -> bool {
        let welcomed =
            self.clients
                .welcome(id, params, pid, self.random.as_mut(), &mut self.outbox);
        match welcomed {
            Ok(welcomed) => welcomed,
            Err(error) => {
                self.close_client(id, Some(error));
                false
            }
        }
    }

    /// The welcome from the pool's cached parameters: no server needed.
    fn welcome_from_pool(&mut self, id: ClientId, pool: pgtier_pool::PoolId) {
        let Some(welcome) = self.linker.pools().welcome(pool).cloned() else {
            return;
        };
        if let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) {
            session.tracked_mut().fill_from(&welcome.tracked);
        }
        if !self.welcome(id, &welcome.params, None) {
            return;
        }
        if let Some(client) = self.clients.get_mut(id.0) {
            client.idle(self.now);
        }
        self.on_idle_client_bytes(id);
    }

    /// A client's first server shows its startup values now: it is welcomed with the
    /// server's values (and, in session mode, the server's real pid); in transaction mode
    /// the server goes back at once.
    pub(super) fn finish_welcome(&mut self, id: ClientId, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if let Some(error) = server.backend_mut().relay_mut().take_swallowed_error() {
            // PostgreSQL refuses a bad startup value (`client_encoding=foo`) at login with
            // FATAL 22023; the SET that applied it here failed the same way.
            self.release_server(server_id);
            self.close_client(id, Some(messages::error_as_fatal(&error)));
            return;
        }
        let (pool, server_params, real_pid) = (
            server.pool(),
            server.backend().params().clone(),
            server.backend().pid(),
        );
        let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return;
        };
        let mode = session.mode();
        if let Some(spellings) = self.linker.pools_mut().spellings_mut(pool) {
            session.tracked().learn_spellings(&server_params, spellings);
        }
        session.told(server_params);
        let params = self
            .linker
            .pools()
            .welcome(pool)
            .map(|welcome| welcome.params.clone())
            .unwrap_or_default();
        let pid = (mode == PoolMode::Session).then_some(real_pid).flatten();
        if !self.welcome(id, &params, pid) {
            return;
        }
        if mode == PoolMode::Session {
            if let Some(client) = self.clients.get_mut(id.0) {
                client.linked(server_id);
            }
            self.forward(id, server_id);
        } else {
            self.release_server(server_id);
        }
    }

    /// The admin console's welcome, once the password is right.
    fn welcome_console(&mut self, id: ClientId) {
        let welcomed =
            self.clients
                .welcome_console(id, &self.env, self.random.as_mut(), &mut self.outbox);
        match welcomed {
            Ok(true) => self.on_console_bytes(id),
            Ok(false) => {}
            Err(error) => self.close_client(id, Some(error)),
        }
    }

    /// Moves a client off its replica, which went Down: a welcomed transaction-mode client
    /// with `repin_idle_sessions` is admitted again elsewhere; anyone else gets 08006.
    pub(super) fn repin(&mut self, id: ClientId) {
        match self.clients.take_lease_to_move(id, &self.env) {
            Repin::Gone => {}
            Repin::Close(error) => self.close_client(id, Some(error)),
            Repin::Move(lease) => {
                let admission = self.routing.repin(lease, request_id(id));
                self.apply_admission(id, admission);
            }
        }
    }
}

// ---- auth_query: a client's secret looked up on a server of the auth_user pool ----

impl Engine {
    /// Parks the client on the `auth_user` pool of its database for a server to run the
    /// lookup on.
    pub(super) fn start_lookup(&mut self, id: ClientId, method: Method, auth_user: &str) {
        let Some(session) = self.clients.get(id.0).and_then(|c| c.session()) else {
            return;
        };
        let key = PoolKey::new(
            (**session.database()).into(),
            auth_user.into(),
            ServerTarget::Primary,
            StartupProfile::default(),
        );
        let limits = self.env.pool_limits(&key);
        let registered = match self.linker.pools_mut().register(&key, &limits, self.now) {
            Err(PoolError::TooManyPools { .. }) => {
                self.evict_a_pool();
                self.linker.pools_mut().register(&key, &limits, self.now)
            }
            registered => registered,
        };
        let pool = match registered {
            Ok(pool) => pool,
            Err(error) => {
                let error = messages::fatal(sqlstate::TOO_MANY_CONNECTIONS, &error.to_string());
                self.close_client(id, Some(error));
                return;
            }
        };
        let since = self.now;
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if let Some(session) = client.session_mut() {
            session.joined(pool);
        }
        client.looking_up(since, Box::default(), method);
        if let Some(error) = self.linker.pools().login_failure(pool, self.now).cloned() {
            // The auth_user's own login failed moments ago (a wrong password for it).
            self.close_client(id, Some(error));
            return;
        }
        self.need_server(id);
    }

    /// A server of the `auth_user` pool for a client waiting to be looked up: the query
    /// goes out.
    pub(super) fn run_lookup(&mut self, id: ClientId, lease: Lease<ServerId>) {
        let server_id = lease.server;
        let query = self.env.config().pgtier.auth_query.clone();
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let user = client
            .session()
            .map(|session| session.user().clone())
            .unwrap_or_default();
        client.lookup_runs_on(server_id);
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        server.looks_up_for(id, lease);
        self.send(Conn::Server(server_id), lookup::request(&query, &user));
    }

    /// Bytes of the lookup's answer.
    pub(super) fn on_lookup_answer(&mut self, server_id: ServerId, client_id: ClientId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let Some(client) = self.clients.get_mut(client_id.0) else {
            return;
        };
        let Some(answer) = client.lookup_answer_mut() else {
            return;
        };
        match answer.read(server.io_mut().input_mut().buffer_mut()) {
            Answer::NeedMore => {}
            Answer::Malformed => {
                self.server_failed(server_id, "server sent an invalid message", None);
            }
            Answer::Done(result) => self.finish_lookup(client_id, server_id, result),
        }
    }

    /// The answer is complete: the server goes back to its pool, the secret into the cache,
    /// and the client on to its password exchange.
    fn finish_lookup(&mut self, id: ClientId, server_id: ServerId, result: Result<Found, String>) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let ClientState::LookingUp { method, .. } = client.take_login_step() else {
            return;
        };
        let Some(session) = client.session_mut() else {
            return;
        };
        let auth_pool = session.leave_pool();
        let (database, user) = (session.database().clone(), session.user().clone());
        if let Some(server) = self.servers.get_mut(server_id.0) {
            server.start_releasing(self.now);
        }
        self.advance_release(server_id);
        if let Some(pool) = auth_pool {
            self.linker.pools_mut().unregister(pool);
        }
        match result {
            Ok(found) => {
                self.clients
                    .logins_mut()
                    .lookups_mut()
                    .store(&database, &user, found, self.now);
                self.begin_exchange(id, method);
            }
            Err(error) => {
                warn!(%database, %user, %error, "auth_query failed");
                let error = messages::fatal(
                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    "authentication lookup (auth_query) failed; see pgtier's log",
                );
                self.close_client(id, Some(error));
            }
        }
    }
}

// ---- the client table's login steps: each says what happened, the engine routes it ----

/// What a client's startup packets came to.
pub(super) enum Startup {
    /// Not a whole packet yet (or the client is gone).
    Wait,
    /// A protocol violation: close with this 08P01.
    ProtocolError(&'static str),
    /// Close, with this FATAL if any.
    Close(Option<Bytes>),
    /// A CancelRequest: the connection closes and the key is routed.
    Cancel(CancelKey),
    /// A StartupMessage.
    Login(LoginRequest),
}

/// How a password exchange started.
pub(super) enum Exchange {
    Gone,
    /// Nothing to exchange (trust): the client is authenticated.
    Passed,
    /// The request went: the client's answer is read next.
    Started,
    /// Refused: close with this FATAL.
    Failed(Bytes),
}

/// Where a password exchange stands after the client's bytes.
pub(super) enum AuthProgress {
    Pending,
    Passed,
    Failed(Bytes),
}

/// What an authenticated client goes on to.
pub(super) enum Authenticated {
    Gone,
    /// The admin console's welcome.
    Console,
    /// A database without replica routing: its pool.
    Unrouted,
    /// Its class option is invalid: close with this FATAL.
    Refused(Bytes),
    /// What the replica routing said.
    Admission(Admission),
}

/// Whether a client on a replica that went Down moves.
pub(super) enum Repin {
    Gone,
    /// It cannot move: close with this FATAL.
    Close(Bytes),
    /// Its lease, to be routed again.
    Move(Box<dyn ReplicaLease>),
}

impl ClientTable {
    /// Reads client `id`'s startup packets, answering SSLRequests and GSSENCRequests, up to
    /// the first that needs the engine.
    pub(super) fn read_startup(&mut self, id: ClientId, outbox: &mut Outbox) -> Startup {
        loop {
            let Some(client) = self.get_mut(id.0) else {
                return Startup::Wait;
            };
            match startup::read_startup(client.input_mut().buffer_mut(), MAX_STARTUP_BYTES) {
                StartupStep::NeedMore => return Startup::Wait,
                StartupStep::Decline => {
                    self.send(id, Bytes::from_static(b"N"), outbox);
                }
                StartupStep::SslRequest => match self.answer_ssl_request(id, outbox) {
                    SslAnswer::Encrypted => {}
                    SslAnswer::Declined => {
                        self.send(id, Bytes::from_static(b"N"), outbox);
                    }
                    SslAnswer::AlreadyEncrypted => {
                        return Startup::ProtocolError(
                            "SSL negotiation over an encrypted connection",
                        );
                    }
                    SslAnswer::DataAfterRequest => {
                        return Startup::ProtocolError(
                            "received unencrypted data after SSL request",
                        );
                    }
                    SslAnswer::Refused => return Startup::Close(None),
                    SslAnswer::Gone => return Startup::Wait,
                },
                StartupStep::Cancel(key) => return Startup::Cancel(key),
                StartupStep::Refuse(error) => return Startup::Close(error),
                StartupStep::Login(request) => return Startup::Login(request),
            }
        }
    }

    /// The StartupMessage's parameters start the client's session. `Ok(false)`: the client
    /// is gone; `Err`: the FATAL to close it with (a plain-text login where TLS is
    /// required, a replication connection, no user, a disabled or unknown database).
    pub(super) fn start_session(
        &mut self,
        id: ClientId,
        request: LoginRequest,
        env: &Env,
        gates: &Gates,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
    ) -> Result<bool, Bytes> {
        self.refuse_plaintext_login(id, env)?;
        if let Some(negotiation) = request.negotiation {
            self.send(id, negotiation, outbox);
        }
        let mut user = None;
        let mut database = None;
        let mut forwarded = Vec::new();
        let mut tracked = TrackedParams::default();
        for (name, value) in request.params {
            match name.as_str() {
                "user" => user = Some(value),
                "database" => database = Some(value),
                "replication" => {
                    return Err(messages::fatal(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "replication connections are not supported by pgtier",
                    ));
                }
                _ if env.config().pgtier.ignores_startup_parameter(&name) => {}
                _ => {
                    if !tracked.set(&name, &value) {
                        forwarded.push((name, value));
                    }
                }
            }
        }
        let Some(user) = user.filter(|user| !user.is_empty()) else {
            return Err(messages::fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "no PostgreSQL user name specified in startup packet",
            ));
        };
        let database = database
            .filter(|database| !database.is_empty())
            .unwrap_or_else(|| user.clone());
        // PgBouncer's console is the database `pgbouncer`: the same console.
        let database = if database == ADMIN_DATABASE_ALIAS {
            ADMIN_DATABASE.to_string()
        } else {
            database
        };
        forwarded.sort();
        let admin = database == ADMIN_DATABASE;
        if gates.is_disabled(&database) {
            // DISABLE db, with PgBouncer's words.
            let message = format!("database does not allow connections: {database}");
            return Err(messages::fatal(sqlstate::PROTOCOL_VIOLATION, &message));
        }
        let mode = match env.config().database(&database) {
            Some(db) => env.config().pool_mode(db, &user),
            None if admin => PoolMode::Session,
            None => {
                let message = format!("database \"{database}\" does not exist");
                return Err(messages::fatal(sqlstate::INVALID_CATALOG_NAME, &message));
            }
        };
        let class = env
            .config()
            .database(&database)
            .map_or(pgtier_core::class::ClassSetting::PREMIUM, |db| {
                env.config().class(db, &user)
            });
        let stats = stats.database_slot(&database, env.shared());
        let Some((client, logins)) = self.get_with_logins(id.0) else {
            return Ok(false);
        };
        let (user, database) = (logins.intern(&user), logins.intern(&database));
        client.start_session(Box::new(Session::new(SessionStart {
            user,
            database,
            mode,
            class,
            startup_params: forwarded,
            tracked,
            stats,
        })));
        Ok(true)
    }

    /// A plain-text login where TLS is required: refused with 28000, as PostgreSQL's
    /// `hostssl`-only configuration would.
    fn refuse_plaintext_login(&self, id: ClientId, env: &Env) -> Result<(), Bytes> {
        let mode = env.config().pgtier.client_tls_sslmode;
        let plain = self.get(id.0).is_some_and(|c| c.tls().is_none());
        if !(plain && requires_tls(mode)) {
            return Ok(());
        }
        let message = format!(
            "TLS is required (client_tls_sslmode = {}): connect with sslmode=require or stronger",
            mode.as_str()
        );
        Err(messages::fatal(
            sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            &message,
        ))
    }

    /// The method this client logs in with (`auth_type`, or its `auth_hba_file` line); a
    /// certificate is checked here, as it needs no exchange. `Err` is the FATAL to close
    /// the client with.
    pub(super) fn auth_method(&self, id: ClientId, env: &Env) -> Result<Method, Bytes> {
        let auth_type = env.config().pgtier.auth_type;
        let Some(client) = self.get(id.0) else {
            return Ok(Method::Trust);
        };
        let Some(session) = client.session() else {
            return Ok(Method::Trust);
        };
        if auth_type == AuthType::Any && &**session.database() != ADMIN_DATABASE {
            // PgBouncer's `any` ignores the user name, so each database must name the
            // user its servers log in as.
            let forced = env
                .config()
                .database(session.database())
                .is_some_and(|db| db.user.is_some());
            if !forced {
                let message = format!(
                    "auth_type = any needs the database \"{}\" to set the user its servers log in as",
                    session.database()
                );
                return Err(messages::fatal(
                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    &message,
                ));
            }
        }
        let tls = client.tls().is_some();
        let addr = match client.info().peer() {
            Some(crate::addr::ClientAddr::Unix { .. }) => HbaAddr::Unix,
            Some(crate::addr::ClientAddr::Tcp(peer)) => HbaAddr::Ip(peer.ip()),
            // A TCP client whose address could not be read matches no line rather than
            // being taken for a local one.
            None if auth_type == AuthType::Hba => {
                return Err(messages::fatal(
                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    "the client's address is unknown, so no pg_hba.conf line can match it",
                ));
            }
            None => HbaAddr::Unix,
        };
        let request = HbaRequest {
            addr,
            tls,
            database: session.database(),
            user: session.user(),
        };
        match auth_method::choose(auth_type, env.users().hba(), &request)? {
            Method::Cert => {
                let name = client.tls().and_then(|tls| tls.session.peer_common_name());
                auth_method::check_certificate(session.user(), tls, name.as_deref())?;
                Ok(Method::Trust)
            }
            method => Ok(method),
        }
    }

    /// The `auth_user` whose server must look the client's secret up before `method` can
    /// check it: a password method, a user the auth file does not list, a database with an
    /// `auth_user`, and no secret found recently.
    pub(super) fn lookup_user_for(
        &self,
        id: ClientId,
        method: Method,
        env: &Env,
        now: Instant,
    ) -> Option<String> {
        if matches!(method, Method::Trust | Method::Cert) {
            return None;
        }
        let session = self.get(id.0)?.session()?;
        if env.users().get(session.user()).is_some() {
            return None;
        }
        let auth_user = env
            .config()
            .database(session.database())?
            .auth_user
            .clone()?;
        if self
            .logins()
            .lookups()
            .is_fresh(session.database(), session.user(), now)
        {
            return None;
        }
        Some(auth_user)
    }

    /// Starts the password exchange of `method` (none for trust), against the auth file's
    /// entry or the secret `auth_query` found.
    pub(super) fn begin_exchange(
        &mut self,
        id: ClientId,
        method: Method,
        env: &Env,
        random: &mut dyn Random,
        outbox: &mut Outbox,
    ) -> Exchange {
        let Some(session) = self.get(id.0).and_then(|c| c.session()) else {
            return Exchange::Gone;
        };
        let (user, database) = (session.user().clone(), session.database().clone());
        let channel_binding = self.channel_binding_of(id);
        let (looked_up, secrets) = self.logins_mut().auth_caches(&database, &user);
        let context = AuthContext {
            user: &user,
            users: env.users(),
            looked_up,
            secrets,
            random,
            channel_binding,
        };
        match auth::start(method, context) {
            Ok(None) => Exchange::Passed,
            Ok(Some((check, request))) => {
                if let Some(client) = self.get_mut(id.0) {
                    client.authenticating(check);
                }
                self.send(id, request, outbox);
                Exchange::Started
            }
            Err(error) => Exchange::Failed(error),
        }
    }

    /// The client's answers in its password exchange.
    pub(super) fn auth_step(
        &mut self,
        id: ClientId,
        env: &Env,
        random: &mut dyn Random,
        outbox: &mut Outbox,
    ) -> AuthProgress {
        let Some((client, logins)) = self.get_with_logins(id.0) else {
            return AuthProgress::Pending;
        };
        if client.input().is_empty() {
            return AuthProgress::Pending;
        }
        let ClientState::Authenticating(check) = client.take_login_step() else {
            return AuthProgress::Pending;
        };
        let (user, database) = client
            .session()
            .map(|session| (session.user().clone(), session.database().clone()))
            .unwrap_or_default();
        let channel_binding = client
            .tls()
            .and_then(|tls| tls.session.local_certificate_der())
            .and_then(|der| pgtier_wire::auth::ChannelBinding::from_certificate(der).ok());
        let (looked_up, secrets) = logins.auth_caches(&database, &user);
        let context = AuthContext {
            user: &user,
            users: env.users(),
            looked_up,
            secrets,
            random,
            channel_binding,
        };
        match check.step(client.input_mut().buffer_mut(), context) {
            AuthStep::NeedMore(check) => {
                client.authenticating(check);
                AuthProgress::Pending
            }
            AuthStep::Continue(check, reply) => {
                client.authenticating(check);
                self.send(id, reply, outbox);
                AuthProgress::Pending
            }
            AuthStep::Passed {
                final_message,
                client_key,
            } => {
                if let Some(key) = client_key {
                    // A looked-up SCRAM secret logs the client's servers in with it.
                    self.logins_mut()
                        .lookups_mut()
                        .remember_client_key(&database, &user, key);
                }
                if let Some(final_message) = final_message {
                    self.send(id, final_message, outbox);
                }
                AuthProgress::Passed
            }
            AuthStep::Failed(error) => AuthProgress::Failed(error),
        }
    }

    /// The password is right: a console session, a database without routing, or one whose
    /// session the replica routing admits (its class taken from the `options` parameter).
    pub(super) fn authenticated(
        &mut self,
        id: ClientId,
        env: &Env,
        routing: &dyn Routing,
    ) -> Authenticated {
        let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return Authenticated::Gone;
        };
        if &**session.database() == ADMIN_DATABASE {
            return Authenticated::Console;
        }
        if !routing.is_routed(session.database()) {
            return Authenticated::Unrouted;
        }
        let Some(db) = env.config().database(session.database()) else {
            return Authenticated::Gone;
        };
        let options = session
            .startup_params()
            .iter()
            .position(|(name, _)| name == "options");
        let raw = options.map(|i| session.startup_params()[i].1.as_str());
        let class = match session_class(env.config(), db, session.user(), raw) {
            Ok(class) => class,
            Err(error) => {
                let code = pgtier_wire::SqlState::parse(error.sqlstate().as_bytes())
                    .unwrap_or(sqlstate::INTERNAL_ERROR);
                return Authenticated::Refused(messages::fatal(code, &error.to_string()));
            }
        };
        // pgtier consumes the class option: PostgreSQL would take it as a placeholder
        // setting, but forwarding it would split one replica's pools by class for nothing.
        if let Some(i) = options {
            session.strip_class_option(i);
        }
        session.classify(class);
        let database = session.database().clone();
        Authenticated::Admission(routing.admit(
            &database,
            crate::class::tier(class),
            request_id(id),
        ))
    }

    /// AuthenticationOk, the parameters `params` with the client's tracked values, a
    /// BackendKeyData (`pid`: the server's in session mode) and ReadyForQuery. `Ok(false)`:
    /// the client is gone; `Err`: no cancel key could be drawn (the FATAL to close with).
    pub(super) fn welcome(
        &mut self,
        id: ClientId,
        params: &[(String, String)],
        pid: Option<u32>,
        random: &mut dyn Random,
        outbox: &mut Outbox,
    ) -> Result<bool, Bytes> {
        let Some((client, logins)) = self.get_with_logins(id.0) else {
            return Ok(false);
        };
        let Some(session) = client.session_mut() else {
            return Ok(false);
        };
        let key = logins
            .keys_mut()
            .issue(id, pid, random)
            .map_err(auth::no_randomness)?;
        session.welcomed(key);
        let mut out = BytesMut::with_capacity(512);
        messages::auth_ok(&mut out);
        for (name, value) in params {
            let value = tracked_index(name)
                .and_then(|i| session.tracked().get(i))
                .unwrap_or(value);
            messages::parameter_status(&mut out, name, value);
        }
        messages::backend_key_data(&mut out, key.pid, key.secret);
        messages::ready_for_query(&mut out, b'I');
        self.send(id, out.freeze(), outbox);
        Ok(true)
    }

    /// The admin console's welcome, once the password is right: pgtier's own parameters,
    /// the ones drivers read at connect (psycopg2, JDBC, libpq); the client becomes a
    /// console session. A user without console rights gets PgBouncer's refusal.
    pub(super) fn welcome_console(
        &mut self,
        id: ClientId,
        env: &Env,
        random: &mut dyn Random,
        outbox: &mut Outbox,
    ) -> Result<bool, Bytes> {
        let user = self
            .get(id.0)
            .and_then(|c| c.session())
            .map(|s| s.user().clone())
            .unwrap_or_default();
        let Some(rights) = env.console_rights(&user) else {
            return Err(messages::fatal(sqlstate::PROTOCOL_VIOLATION, "not allowed"));
        };
        let params: Vec<(String, String)> = [
            ("server_version", "15.0 (pgtier)"),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("IntervalStyle", "postgres"),
            ("TimeZone", "UTC"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
            ("is_superuser", "off"),
        ]
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
        if !self.welcome(id, &params, None, random, outbox)? {
            return Ok(false);
        }
        if let Some(client) = self.get_mut(id.0) {
            let max_named =
                usize::try_from(env.config().pgtier.max_prepared_statements).unwrap_or(usize::MAX);
            client.console(Box::new(ConsoleSession::new(rights, max_named)));
        }
        Ok(true)
    }

    /// A client whose replica went Down: a welcomed transaction-mode client with
    /// `repin_idle_sessions` (or a reader session) moves with its lease; anyone else gets
    /// 08006.
    pub(super) fn take_lease_to_move(&mut self, id: ClientId, env: &Env) -> Repin {
        let allowed = env.config().pgtier.repin_idle_sessions;
        let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return Repin::Gone;
        };
        let welcomed = session.key().is_some();
        let Some(lease) = session.take_lease() else {
            return Repin::Gone;
        };
        // A reader session holds no state on its replica between transactions (session
        // mode and pinned sessions run on the primary): it always moves.
        let reader = session.reads().is_some();
        if welcomed && !reader && (!allowed || session.mode() == PoolMode::Session) {
            drop(lease);
            return Repin::Close(messages::fatal(
                sqlstate::CONNECTION_FAILURE,
                "the replica serving this session failed; reconnect",
            ));
        }
        Repin::Move(lease)
    }
}
