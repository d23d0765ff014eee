//! A client from its first byte to its welcome, the client table's side: startup packets,
//! the password exchange, the replica admission on a replica-set entry, its pool's key, and
//! the welcome (from the pool's cached parameters, or from the server whose login values it
//! waited for). Each step is a `ClientTable` method or a function of the table that says
//! what happened (a FATAL to close with, a pool to join, an admission to act on); the
//! engine routes it (`mod.rs`), and what needs a server too is the linker's
//! (`linker/joining.rs`).
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
use pgtier_pool::{PoolId, PoolKey, ServerTarget, StartupProfile};
use tracing::info;

use super::clients::ClientTable;
use super::env::Env;
use super::stats::StatsSink;
use crate::action::Outbox;
use crate::cancel::CancelKey;
use crate::class::session_class;
use crate::client::auth::{self, AuthContext, AuthStep};
use crate::client::auth_method::{self, Method};
use crate::client::startup::{self, LoginRequest, StartupStep};
use crate::client::{ClientState, Session, SessionStart};
use crate::console_session::ConsoleSession;
use crate::engine::tls_io::{SslAnswer, requires_tls};
use crate::gates::Gates;
use crate::ids::{ClientId, SlotRef};
use crate::login_options::{OptionsPolicy, read_login_options};
use crate::messages::{self, sqlstate};
use crate::params::{TrackedParams, tracked_index};
use crate::random::Random;
use crate::services::{Admission, Refusal, ReplicaLease, Routing};
use crate::settings::MAX_STARTUP_BYTES;

/// The request id of a client's admission: its slot, so a reply finds the client (or finds
/// it gone: a stale generation) without a table.
pub(super) fn request_id(id: ClientId) -> u64 {
    (u64::from(id.0.generation) << 32) | u64::from(id.0.index)
}

pub(super) fn client_of(request_id: u64) -> ClientId {
    ClientId(SlotRef {
        index: request_id as u32,
        generation: (request_id >> 32) as u32,
    })
}

fn refusal_error(refusal: &Refusal) -> bytes::Bytes {
    messages::fatal(refusal.code, &refusal.message)
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

/// A database no entry serves: PgBouncer's words, which tools and its test suite match on,
/// with PostgreSQL's code for an unknown database, which drivers act on.
fn no_such_database(database: &str) -> Bytes {
    let message = format!("no such database: {database}");
    messages::fatal(sqlstate::INVALID_CATALOG_NAME, &message)
}

/// DISABLE's refusal, in PgBouncer's words.
fn database_disabled(database: &str) -> Bytes {
    let message = format!("database \"{database}\" is disabled");
    messages::fatal(sqlstate::PROTOCOL_VIOLATION, &message)
}

/// The user PgBouncer lets into its console by peer credentials alone.
const CONSOLE_PEER_USER: &str = "pgbouncer";

/// Whether a `replication` startup value asks for a replication connection, as
/// PostgreSQL reads it (`database` for logical replication, a boolean for physical); any
/// other value is refused with PostgreSQL's error.
fn replication_requested(value: &str) -> Result<bool, Bytes> {
    match value.to_ascii_lowercase().as_str() {
        "database" | "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => {
            let message = format!("invalid value for parameter \"replication\": \"{value}\"");
            Err(messages::fatal(sqlstate::INVALID_PARAMETER_VALUE, &message))
        }
    }
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
    /// required, a bad `replication` value, no user).
    pub(super) fn start_session(
        &mut self,
        id: ClientId,
        request: LoginRequest,
        env: &Env,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
    ) -> Result<bool, Bytes> {
        refuse_plaintext_login(self, id, env)?;
        if let Some(negotiation) = request.negotiation {
            self.send(id, negotiation, outbox);
        }
        let mut user = None;
        let mut database = None;
        let mut forwarded = Vec::new();
        let mut tracked = TrackedParams::default();
        let replication = match request
            .params
            .iter()
            .find(|(name, _)| name == "replication")
        {
            None => false,
            Some((_, value)) => replication_requested(value)?,
        };
        let mut params = request.params;
        if !replication {
            read_options(&mut params, &mut tracked, &mut forwarded, env)?;
        }
        for (name, value) in params {
            match name.as_str() {
                "user" => user = Some(value),
                "database" => database = Some(value),
                // A replication connection (PgBouncer 1.23's pass-through) logs its server in
                // with the parameter; `replication=false` is an ordinary connection.
                "replication" if replication => forwarded.push((name, value)),
                "replication" => {}
                _ if env.config().pgtier.ignores_startup_parameter(&name) => {}
                // Its server is its own, and a walsender may take no SET: every parameter
                // goes in the server's StartupMessage.
                _ if replication => forwarded.push((name, value)),
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
        // max_client_conn, counting this client; the console stays reachable past it.
        let connected = env
            .shared()
            .clients
            .load(std::sync::atomic::Ordering::Acquire);
        if !admin && connected > env.config().pgtier.max_client_conn {
            return Err(messages::fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                "no more connections allowed (max_client_conn)",
            ));
        }
        if admin && replication {
            return Err(messages::fatal(
                sqlstate::FEATURE_NOT_SUPPORTED,
                "the admin console takes no replication connections",
            ));
        }
        // A database no entry serves is refused only once the client has authenticated
        // (`authenticated`), as PgBouncer does: a client that cannot log in learns nothing
        // about which databases exist.
        let entry = env.config().database(&database);
        let mode = match entry {
            // A replication connection keeps its own server for its whole life.
            Some(_) if replication => PoolMode::Session,
            Some(db) => env.config().pool_mode(db, &user),
            None => PoolMode::Session,
        };
        log_login_attempt(self, id, &database, &user, replication);
        let class = entry.map_or(pgtier_core::class::ClassSetting::PREMIUM, |db| {
            env.config().class(db, &user)
        });
        let stats =
            (admin || entry.is_some()).then(|| stats.database_slot(&database, env.shared()));
        let known_database = admin || entry.is_some();
        let Some((_, logins)) = self.get_with_logins(id.0) else {
            return Ok(false);
        };
        let (user, database) = (logins.intern(&user), logins.intern(&database));
        let counted = count_client(env, &database, &user, admin, known_database)?;
        let Some(client) = self.get_mut(id.0) else {
            return Ok(false);
        };
        client.start_session(Box::new(Session::new(SessionStart {
            user,
            database,
            mode,
            class,
            startup_params: forwarded,
            tracked,
            stats,
        })));
        self.hold_counts(id.0, counted);
        Ok(true)
    }

    /// The method this client logs in with (`auth_type`, or its `auth_hba_file` line); a
    /// certificate or a peer's system user is checked here, as neither needs an exchange. `Err` is the FATAL to close
    /// the client with.
    pub(super) fn auth_method(&self, id: ClientId, env: &Env) -> Result<Method, Bytes> {
        let auth_type = env.config().pgtier.auth_type;
        let Some(client) = self.get(id.0) else {
            return Ok(Method::Trust);
        };
        let Some(session) = client.session() else {
            return Ok(Method::Trust);
        };
        if self.is_console_peer(id) {
            return Ok(Method::Unchecked);
        }
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
            physical_replication: session.is_physical_replication(),
        };
        let method = auth_method::choose(auth_type, env.users().hba(), &request)?;
        // The line's user name map, for `cert` and `peer`.
        let map = env
            .users()
            .hba()
            .and_then(|hba| hba.rule_for(&request))
            .and_then(|rule| rule.ident_map.as_deref())
            .map(|name| (name, env.users().ident()));
        match method {
            Method::Cert => {
                let name = client.tls().and_then(|tls| tls.session.peer_common_name());
                auth_method::check_certificate(session.user(), tls, name.as_deref(), map)?;
            }
            Method::Peer => {
                let peer_user = match client.info().peer() {
                    Some(crate::addr::ClientAddr::Unix { .. }) => client.info().peer_user(),
                    _ => None,
                };
                auth_method::check_peer(session.user(), peer_user, map)?;
            }
            _ => {}
        }
        Ok(method)
    }

    /// PgBouncer's console login by peer credentials: the user `pgbouncer` on the Unix
    /// socket, from a process of pgtier's own user id, is an admin without a password.
    fn is_console_peer(&self, id: ClientId) -> bool {
        let Some(client) = self.get(id.0) else {
            return false;
        };
        client.info().peer().is_some_and(|peer| peer.is_own_user())
            && client.session().is_some_and(|session| {
                &**session.database() == ADMIN_DATABASE && &**session.user() == CONSOLE_PEER_USER
            })
    }

    /// The `auth_user` whose server must look the client up before `method` can check it:
    /// a method that checks the user (every one but `any`: trust needs the user to exist),
    /// a user the auth file does not list, and a database with an `auth_user`.
    pub(super) fn lookup_user_for(
        &self,
        id: ClientId,
        method: Method,
        env: &Env,
    ) -> Option<String> {
        if method == Method::Unchecked {
            return None;
        }
        let session = self.get(id.0)?.session()?;
        if env.users().get(session.user()).is_some() {
            return None;
        }
        Some(auth_user_of(env, session.database())?.to_string())
    }

    /// Whether `user` may log in to `database` without a password (`trust`, `cert`): it
    /// is listed in the auth file or `auth_query` found it, as PgBouncer requires, so a
    /// client cannot learn which users exist by trying names. With neither an auth file
    /// nor an `auth_user` there is no list to check, and every user is taken (pgtier's
    /// reading of a configuration PgBouncer would let nobody in with).
    fn user_is_known(&self, database: &str, user: &str, env: &Env) -> bool {
        env.users().get(user).is_some()
            || self.logins().lookups().found(database, user)
            || (env.config().pgtier.auth_file.is_none() && auth_user_of(env, database).is_none())
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
        if method.is_passwordless() {
            if method != Method::Unchecked && !self.user_is_known(&database, &user, env) {
                info!(%database, %user, "no such user");
                return Exchange::Failed(method.unknown_user_refusal());
            }
            return Exchange::Passed;
        }
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
        gates: &Gates,
        routing: &dyn Routing,
    ) -> Authenticated {
        let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return Authenticated::Gone;
        };
        if &**session.database() == ADMIN_DATABASE {
            return Authenticated::Console;
        }
        // Refused only now, as PgBouncer does: before its password is checked, a client
        // learns neither which databases exist nor which are disabled.
        if env.config().database(session.database()).is_none() {
            return Authenticated::Refused(no_such_database(session.database()));
        }
        if gates.is_disabled(session.database()) {
            return Authenticated::Refused(database_disabled(session.database()));
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
    /// BackendKeyData (`pid`: the server's in session mode; the key carries this process's
    /// `peer_id`), `login_notify_message` as a NOTICE when set, and ReadyForQuery.
    /// `Ok(false)`: the client is gone; `Err`: no cancel key could be drawn (the FATAL to
    /// close with).
    pub(super) fn welcome(
        &mut self,
        id: ClientId,
        params: &[(String, String)],
        pid: Option<u32>,
        env: &Env,
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
            .issue(id, pid, env.peer_id(), random)
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
        let notice = &env.config().pgtier.login_notify_message;
        if !notice.is_empty() {
            messages::notice(&mut out, notice);
        }
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
        let rights = if self.is_console_peer(id) {
            Some(crate::services::ConsoleRights::Admin)
        } else {
            env.console_rights(&user)
        };
        let Some(rights) = rights else {
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
        if !self.welcome(id, &params, None, env, random, outbox)? {
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
        if welcomed && !reader && (!allowed || !session.mode().releases_at_idle_ready()) {
            drop(lease);
            return Repin::Close(messages::fatal(
                sqlstate::CONNECTION_FAILURE,
                "the replica serving this session failed; reconnect",
            ));
        }
        Repin::Move(lease)
    }
}

/// PgBouncer's line for each login it goes on with (its `log_connections`, on by default):
/// `db/user@addr login attempt: db=... user=... tls=... replication=...`, the TLS part as
/// SHOW CLIENTS shows it (operators and PgBouncer's test suite look for it).
fn log_login_attempt(
    clients: &ClientTable,
    id: ClientId,
    database: &str,
    user: &str,
    replication: bool,
) {
    let Some(client) = clients.get(id.0) else {
        return;
    };
    let tls = client
        .tls()
        .and_then(|tls| tls.session.description())
        .unwrap_or_else(|| "no".to_string());
    let addr = client
        .info()
        .peer()
        .map_or_else(|| "unknown".to_string(), ToString::to_string);
    let replication = if replication { "yes" } else { "no" };
    tracing::info!(
        client = id.index(),
        "{database}/{user}@{addr} login attempt: db={database} user={user} tls={tls} \
         replication={replication}"
    );
}

/// Takes an ordinary login's `options` out of `params` and reads it (`crate::login_options`):
/// its tracked settings go in `tracked` first, so that a top-level parameter of the same name
/// wins as in PostgreSQL; what is left of it goes in `forwarded`. `Err`: PgBouncer's FATAL.
fn read_options(
    params: &mut Vec<(String, String)>,
    tracked: &mut TrackedParams,
    forwarded: &mut Vec<(String, String)>,
    env: &Env,
) -> Result<(), Bytes> {
    let Some(at) = params.iter().position(|(name, _)| name == "options") else {
        return Ok(());
    };
    let (_, options) = params.remove(at);
    let settings = &env.config().pgtier;
    let ignored = |name: &str| {
        settings.ignores_startup_parameter(name) || settings.ignores_startup_parameter("options")
    };
    let extra = |name: &str| {
        settings
            .track_extra_parameters
            .iter()
            .any(|extra| extra.eq_ignore_ascii_case(name))
    };
    let policy = OptionsPolicy {
        ignored: &ignored,
        extra: &extra,
        forward_untracked: settings.forward_startup_options,
    };
    let read = read_login_options(&options, &policy)
        .map_err(|message| messages::fatal(sqlstate::PROTOCOL_VIOLATION, &message))?;
    for (name, value) in &read.tracked {
        tracked.set(name, value);
    }
    if let Some(options) = read.forwarded {
        forwarded.push(("options".to_string(), options));
    }
    Ok(())
}

/// A plain-text login where TLS is required: refused with 28000, as PostgreSQL's
/// `hostssl`-only configuration would. Unix-socket logins are exempt (PgBouncer's rule: TLS
/// is not offered there).
fn refuse_plaintext_login(clients: &ClientTable, id: ClientId, env: &Env) -> Result<(), Bytes> {
    let mode = env.config().pgtier.client_tls_sslmode;
    let plain = clients.get(id.0).is_some_and(|c| {
        c.tls().is_none()
            && !c
                .info()
                .peer()
                .is_some_and(crate::addr::ClientAddr::is_unix)
    });
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

/// Counts a client that names `database` and `user` against `max_db_client_connections`
/// and `max_user_client_connections`, as PgBouncer does before authentication, database
/// first; an admin user on the admin console is never limited (PgBouncer's exception).
/// `Err`: PgBouncer's FATAL for the limit it is past.
fn count_client(
    env: &Env,
    database: &std::sync::Arc<str>,
    user: &std::sync::Arc<str>,
    admin: bool,
    known_database: bool,
) -> Result<crate::client_counts::Counted, Bytes> {
    use crate::client_counts::Scope;
    let mut counted = crate::client_counts::Counted::default();
    let config = env.config();
    if admin && config.pgtier.is_admin(user) {
        return Ok(counted);
    }
    // A name no entry serves is refused after authentication; it is not counted, so
    // made-up names leave no counters behind.
    let db_limit = match config.database(database) {
        Some(db) => db.max_db_client_connections,
        None if known_database => config.pgtier.max_db_client_connections,
        None => 0,
    };
    let user_limit = config.max_user_client_connections(user);
    let counts = &env.shared().client_counts;
    counts
        .admit(Scope::Database, database, db_limit, &mut counted)
        .and_then(|()| counts.admit(Scope::User, user, user_limit, &mut counted))
        .map_err(|scope| {
            tracing::debug!(%database, %user, "{}", scope.exceeded_message());
            messages::fatal(sqlstate::PROTOCOL_VIOLATION, scope.exceeded_message())
        })?;
    Ok(counted)
}

// ---- a logged-in client and its pool: admission answers, registration, auth_query ----

/// What a refused admission leaves the client to do.
pub(super) enum Refused {
    Gone,
    /// Not a reader entry: close with this FATAL.
    Close(Bytes),
    /// A reader entry's first login: its pool on the primary.
    JoinPool,
    /// A reader entry's session that has its pool: queued (its reads run on the primary).
    Queued,
}

/// No replica for the session: a reader entry's session goes on without one (its primary
/// serves every transaction); any other session is refused.
pub(super) fn refused(
    clients: &mut ClientTable,
    id: ClientId,
    refusal: &Refusal,
    env: &Env,
    now: Instant,
) -> Refused {
    let Some(session) = clients.get(id.0).and_then(|c| c.session()) else {
        return Refused::Gone;
    };
    let reader_entry = env.config().database(session.database()).is_some_and(|db| {
        matches!(&db.servers, pgtier_core::config::ServerSet::Replicas(set) if set.is_reader_entry())
    });
    if !reader_entry {
        return Refused::Close(refusal_error(refusal));
    }
    tracing::debug!(
        database = %session.database(),
        reason = %refusal.message,
        "no replica admitted the session: its reads run on the primary"
    );
    if session.pool().is_none() {
        return Refused::JoinPool;
    }
    if let Some(client) = clients.get_mut(id.0) {
        client.queued(now);
    }
    Refused::Queued
}

/// What an admission to a replica leaves the client to do.
pub(super) enum Admitted {
    Gone,
    /// A reader session keeps its pools: queued, its next read is routed with the new lease.
    Queued,
    /// A first login: its pool.
    JoinPool,
    /// Moved off a failed replica: it left pool `old` and joins its new replica's pool
    /// (`welcomed`: it queues there; else it still waits for its welcome).
    Moved {
        old: PoolId,
        welcomed: bool,
    },
}

/// The client holds a replica now.
pub(super) fn admitted(
    clients: &mut ClientTable,
    id: ClientId,
    lease: Box<dyn ReplicaLease>,
    now: Instant,
) -> Admitted {
    let Some(session) = clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
        return Admitted::Gone;
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
        if let Some(client) = clients.get_mut(id.0) {
            client.queued(now);
        }
        return Admitted::Queued;
    }
    match session.leave_pool() {
        None => Admitted::JoinPool,
        Some(old) => Admitted::Moved { old, welcomed },
    }
}

/// Whether client `id` still waits for the admission `request_id` answers.
pub(super) fn awaits_admission(clients: &ClientTable, id: ClientId, request_id: u64) -> bool {
    clients.get(id.0).is_some_and(|client| {
        matches!(client.state(), ClientState::Routing { request_id: waited, .. } if *waited == request_id)
    })
}

/// The key of the pool client `id` joins, and whether its entry is a reader entry.
/// `Ok(None)`: the client is gone; `Err`: its database is not configured (any more).
pub(super) fn pool_key(
    clients: &ClientTable,
    id: ClientId,
    env: &Env,
) -> Result<Option<(PoolKey, bool)>, Bytes> {
    let Some(session) = clients.get(id.0).and_then(|c| c.session()) else {
        return Ok(None);
    };
    let Some(db) = env.config().database(session.database()) else {
        return Err(no_such_database(session.database()));
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
    let parameters = session
        .startup_params()
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()));
    let profile = if session.is_replication() {
        StartupProfile::of_replication(parameters)
    } else {
        StartupProfile::from_parameters(parameters)
    };
    let key = PoolKey::new(
        (**session.database()).into(),
        server_user.as_str().into(),
        target,
        profile,
    );
    Ok(Some((key, reader_entry)))
}

/// The `auth_user` that looks up the users of `database`: its entry's (which falls back to
/// the global one), or for the admin console the global one, as PgBouncer does.
fn auth_user_of<'a>(env: &'a Env, database: &str) -> Option<&'a str> {
    let config = env.config();
    match config.database(database) {
        Some(db) => db.auth_user.as_deref(),
        None if database == ADMIN_DATABASE => config.pgtier.auth_user.as_deref(),
        None => None,
    }
}

/// The key of the `auth_user` pool client `id`'s lookup runs on: in the entry its
/// database's `auth_dbname` names (else the global `auth_dbname`, else its own database).
/// `Ok(None)`: the client is gone; `Err`: the FATAL to close it with, PgBouncer's: "bouncer
/// config error" when `auth_dbname` names no entry or the admin console (the console's own
/// users need a global `auth_dbname`), and a refusal naming a disabled `auth_dbname`.
pub(super) fn lookup_key(
    clients: &ClientTable,
    id: ClientId,
    auth_user: &str,
    env: &Env,
    gates: &Gates,
) -> Result<Option<PoolKey>, Bytes> {
    let Some(session) = clients.get(id.0).and_then(|c| c.session()) else {
        return Ok(None);
    };
    let config = env.config();
    let auth_dbname = match config.database(session.database()) {
        Some(db) => db.auth_dbname.as_deref(),
        None => config.pgtier.auth_dbname.as_deref(),
    };
    let database = auth_dbname.unwrap_or(session.database());
    let config_error = || messages::fatal(sqlstate::PROTOCOL_VIOLATION, "bouncer config error");
    if database == ADMIN_DATABASE || database == ADMIN_DATABASE_ALIAS {
        // The console's sessions run no query on a server.
        let name = auth_dbname.unwrap_or(ADMIN_DATABASE_ALIAS);
        tracing::error!(
            database = %session.database(),
            "cannot use the reserved \"{name}\" database as an auth_dbname"
        );
        return Err(config_error());
    }
    if config.database(database).is_none() {
        tracing::error!(
            database = %session.database(),
            "authentication database \"{database}\" is not configured (auth_dbname)"
        );
        return Err(config_error());
    }
    if auth_dbname.is_some() && gates.is_disabled(database) {
        let message = format!("authentication database \"{database}\" is disabled");
        return Err(messages::fatal(sqlstate::PROTOCOL_VIOLATION, &message));
    }
    Ok(Some(PoolKey::new(
        database.into(),
        auth_user.into(),
        ServerTarget::Primary,
        StartupProfile::default(),
    )))
}

/// Client `id` parks on the `auth_user` pool `pool` for its lookup (`method` checks the
/// secret found). False when it is gone.
pub(super) fn start_looking_up(
    clients: &mut ClientTable,
    id: ClientId,
    pool: PoolId,
    method: Method,
    now: Instant,
) -> bool {
    let Some(client) = clients.get_mut(id.0) else {
        return false;
    };
    if let Some(session) = client.session_mut() {
        session.joined(pool);
    }
    client.looking_up(now, Box::default(), method);
    true
}
