//! Server connections: the connect, the login, moving results to the linked client (with
//! back-pressure), draining a server that left its client, bytes from an idle server, and
//! failures — a connection that breaks, a server's own FATAL, a protocol violation — each
//! reported to the replica router when the server is a replica.

use bytes::Bytes;
use tracing::{debug, info, warn};

use crate::action::{Action, Conn};
use crate::client::ClientState;
use crate::engine::Engine;
use crate::engine::stats::Answers;
use crate::engine::tls_io::{Negotiation, tls_server_name};
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::prepared::{Chunks, ClientStatements, Fallout};
use crate::server::ServerState;
use crate::server::login::{Credentials, LoginStep, ServerLogin};
use crate::services::FailureCause;
use crate::tracker::TxStatus;
use pgtier_core::config::PoolMode;
use pgtier_wire::session_state::Effects;

/// Why a connect failed, for the replica router.
fn connect_failure_cause(errno: i32) -> FailureCause {
    match errno {
        libc_like::ETIMEDOUT => FailureCause::ConnectTimeout,
        libc_like::ECONNRESET | libc_like::EPIPE => FailureCause::ConnectionReset,
        _ => FailureCause::ConnectionRefused,
    }
}

/// The errno values the engine tells apart (Linux's), without depending on libc.
mod libc_like {
    pub const EPIPE: i32 = 32;
    pub const ECONNRESET: i32 = 104;
    pub const ETIMEDOUT: i32 = 110;
}

impl Engine {
    pub(super) fn on_server_connected(&mut self, id: ServerId, result: Result<(), i32>) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if !matches!(server.state(), ServerState::Connecting { .. }) {
            return;
        }
        if let Err(errno) = result {
            let message = format!(
                "could not connect to server {}: {}",
                server.info().addr(),
                std::io::Error::from_raw_os_error(errno)
            );
            let error = messages::fatal(sqlstate::CONNECTION_FAILURE, &message);
            self.server_unreachable(id, error, connect_failure_cause(errno));
            return;
        }
        if self.servers.negotiate_tls(id, self.now, &mut self.outbox) {
            return;
        }
        self.start_server_login(id);
    }

    /// Sends the StartupMessage (over TLS when the server accepted it).
    pub(super) fn start_server_login(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let pool = server.pool();
        let Some(key) = self.linker.pools().key(pool) else {
            return;
        };
        let entry = self.env.config().database(&key.database);
        let dbname = super::linker::vacate::server_dbname(self.env.config(), key);
        let mut params: Vec<(&str, &str)> = key.profile.parameters().collect();
        // The entry's connect parameters (pgbouncer.ini's client_encoding, datestyle,
        // timezone) open every server of the entry. These are tracked parameters, so a client
        // that sent its own value gets it with SET when linked; a duplicate is never sent.
        for (name, value) in entry.map_or(&[][..], |db| db.connect_params.as_slice()) {
            if !params
                .iter()
                .any(|(given, _)| given.eq_ignore_ascii_case(name))
            {
                params.push((name, value));
            }
        }
        let startup = ServerLogin::startup_message(&key.server_user, dbname, &params);
        server.logging_in(self.now);
        self.send(Conn::Server(id), startup);
    }

    pub(super) fn on_login_bytes(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let Some(key) = self.linker.pools().key(server.pool()) else {
            return;
        };
        let channel_binding = server
            .io()
            .tls()
            .filter(|session| !session.is_handshaking())
            .and_then(|session| session.peer_certificate_der())
            .and_then(|der| pgtier_wire::auth::ChannelBinding::from_certificate(der).ok());
        let password = self
            .env
            .config()
            .database(&key.database)
            .and_then(|db| db.password.clone())
            .or_else(|| self.env.users().get(&key.server_user))
            .or_else(|| {
                self.clients
                    .logins()
                    .lookups()
                    .secret(&key.database, &key.server_user)
                    .map(str::to_string)
            });
        let client_key = self
            .clients
            .logins()
            .secrets()
            .client_key(&key.server_user)
            .or_else(|| {
                self.clients
                    .logins()
                    .lookups()
                    .client_key(&key.database, &key.server_user)
            });
        let credentials = Credentials {
            user: &key.server_user,
            password: password.as_deref(),
            client_key,
            channel_binding,
            key_cache: Some(&self.env.shared().scram_keys),
        };
        let Some((login, input)) = server.login_mut() else {
            return;
        };
        match login.step(input.buffer_mut(), credentials, self.random.as_mut()) {
            LoginStep::Continue { reply } => {
                if let Some(reply) = reply {
                    self.send(Conn::Server(id), reply);
                }
            }
            LoginStep::Failed { error, .. } => self.login_failed(id, error),
            LoginStep::Done => self.on_login_done(id),
        }
    }

    fn on_login_done(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let Some(params) = server.logged_in(self.now) else {
            return;
        };
        let pool = server.pool();
        debug!(pid = ?server.backend().pid(), "server login done");
        self.linker.pools_mut().learn_welcome(pool, &params);
        let checkin = self.linker.pools_mut().opened(pool, id, self.now);
        if let Some(server) = self.servers.get_mut(id.0) {
            server.idle(self.now);
        }
        self.act_on_checkin(id, pool, checkin);
    }

    /// A login failed: every client waiting on the pool gets `error` now, and new ones get
    /// it until `server_login_retry` passes.
    fn login_failed(&mut self, id: ServerId, error: Bytes) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let pool = server.pool();
        self.stats.login_failed();
        info!(
            database = %self.linker.pools().key(pool).map(|key| key.database.to_string()).unwrap_or_default(),
            "server login failed"
        );
        server.mark_closing();
        self.outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: crate::action::CloseHow::Now,
        });
        let retry_at = self.env.login_retry_at(self.now);
        self.linker
            .pools_mut()
            .open_failed(pool, retry_at, Some(error.clone()));
        if self.linker.pools().counts(pool).servers() == 0 {
            self.fail_waiters(pool, error);
        }
    }

    /// A server could not be reached (connect refused or timed out, reset during login).
    /// On a replica the router hears of it and the pool's waiters stay queued, to be
    /// re-routed once the replica is Down; elsewhere it is an ordinary failed login.
    fn server_unreachable(&mut self, id: ServerId, error: Bytes, cause: FailureCause) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool = server.pool();
        if !self
            .linker
            .report_replica_failure(pool, cause, &*self.routing)
        {
            self.login_failed(id, error);
            return;
        }
        self.stats.login_failed();
        if let Some(server) = self.servers.get_mut(id.0) {
            server.mark_closing();
        }
        self.outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: crate::action::CloseHow::Now,
        });
        let retry_at = self.env.login_retry_at(self.now);
        self.linker
            .pools_mut()
            .open_failed(pool, retry_at, Some(error));
    }

    /// Moves server output to the linked client; releases the server at the end of a
    /// transaction in transaction mode.
    pub(super) fn relay_to_client(&mut self, server_id: ServerId, client_id: ClientId) {
        if self.clients.is_looking_up(client_id) {
            self.on_lookup_answer(server_id, client_id);
            return;
        }
        let max = self.env.limits().max_server_message_bytes;
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let client = self
            .clients
            .get_mut(client_id.0)
            .filter(|client| client.server() == Some(server_id));
        let Some(client) = client else {
            warn!("bug: a busy server without its client");
            self.close_server(server_id);
            return;
        };
        let welcoming = matches!(client.state(), ClientState::Welcoming { .. });
        let Some(session) = client.session_mut() else {
            return;
        };
        let mut forwarded = Chunks::new();
        let scan = server.relay_output(session.tracked_mut(), max, &mut forwarded);
        apply_fallout(
            session.statements_slot(),
            server.backend_mut().relay_mut().take_fallout(),
        );
        let mut unpinned = false;
        // The values a confirmed clear sets back (RESET ALL, DISCARD ALL) come as
        // ParameterStatus: they are no new state.
        let clearing = session.pins().is_clearing();
        if let Some(status) = scan.last_status {
            unpinned = session.pins_mut().on_ready(status, scan.errors);
            if status != TxStatus::Idle
                && let Some(reads) = session.reads_mut()
            {
                // On a replica only a read-only prefix went, so a block open now was opened
                // READ ONLY: PostgreSQL refuses its writes as the primary would.
                reads.in_block();
            }
        }
        if scan.functions_changed {
            self.routing.functions_changed(session.database());
        }
        let elapsed_us = session.query_started().map_or(0, |started| {
            self.now.saturating_duration_since(started).as_micros() as u64
        });
        if scan.completed > 0 && !server.backend().tracker().has_outstanding() {
            session.query_ended();
        }
        // A transaction lasts from its server's link (transaction mode) or its first query
        // (session mode) to its idle ReadyForQuery.
        let transaction_us = match session.transaction_started() {
            Some(started) if scan.transactions > 0 => {
                session.transaction_ended();
                self.now.saturating_duration_since(started).as_micros() as u64
            }
            _ => elapsed_us,
        };
        session.calls_answered(&scan.answered, elapsed_us, self.stats.digests_mut());
        let (class, mode, pinned) = (session.class(), session.mode(), session.pins_server());
        let database = session.stats();
        let pool = server.pool();
        let answers = Answers {
            class,
            database,
            completed: scan.completed,
            elapsed_us,
            transactions: scan.transactions,
            transaction_us,
        };
        self.stats.answered(answers, self.env.shared());
        for bytes in forwarded {
            self.send(Conn::Client(client_id), bytes);
        }
        if unpinned {
            debug!(?client_id, "client unpinned: its session state is gone");
        }
        self.apply_back_pressure(server_id, client_id);
        if scan.fatal_forwarded {
            // The backend is exiting: the client sees its FATAL and then the end of the
            // connection, exactly as from PostgreSQL, with nothing of pgtier's own after it.
            if scan.shutdown_forwarded {
                self.linker.report_replica_failure(
                    pool,
                    FailureCause::ServerShutdown,
                    &*self.routing,
                );
            }
            self.close_server(server_id);
            self.close_client_after_flush(client_id);
            return;
        }
        if scan.malformed {
            self.server_failed(server_id, "server sent an invalid message", None);
            return;
        }
        if let Some(len) = scan.oversized {
            self.server_message_too_long(server_id, client_id, len);
            return;
        }
        if scan.session_param_changed
            && !clearing
            && mode == PoolMode::Transaction
            && self.env.limits().pin_session_state
        {
            self.pin_client(client_id, server_id, Effects::SET);
        }
        if !scan.idle {
            // A ReadyForQuery ends a segment the client's next messages waited for; an error
            // makes the server skip the rest of its segment, which may end the wait too; and
            // a server in COPY FROM STDIN needs what the client sent, whatever it waited for.
            let copying = self
                .servers
                .get(server_id.0)
                .is_some_and(|server| server.backend().tracker().copy_in());
            if scan.ready_seen || scan.errors > 0 || copying {
                self.forward_held_input(server_id, client_id);
            }
            return;
        }
        if welcoming {
            self.finish_welcome(client_id, server_id);
            return;
        }
        let shutting_down =
            self.admin.shutdown() >= Some(crate::gates::ShutdownMode::WaitForTransactions);
        if (mode == PoolMode::Transaction && !pinned && !self.clients.is_pinned(client_id))
            || shutting_down
        {
            self.release_server(server_id);
        } else if scan.ready_seen {
            // The server stays with its client (pinned, or session mode): input that waited
            // for this ReadyForQuery goes now.
            self.forward_held_input(server_id, client_id);
        }
    }

    /// Client input held back while the server answered a segment that changed statements
    /// goes on now, if the server still serves this client.
    fn forward_held_input(&mut self, server_id: ServerId, client_id: ClientId) {
        let Some(server) = self.servers.get(server_id.0) else {
            return;
        };
        if server.client() != Some(client_id)
            || (server.backend().relay().holds_back_client()
                && !server.backend().tracker().copy_in())
        {
            return;
        }
        let pending = self.clients.get(client_id.0).is_some_and(|client| {
            !client.input().is_empty() && matches!(client.state(), ClientState::Linked { .. })
        });
        if pending {
            self.forward(client_id, server_id);
        }
    }

    /// A client with more than `client_buffer_limit_bytes` queued pauses its server: a slow
    /// client never makes the proxy hold a whole huge result.
    fn apply_back_pressure(&mut self, server_id: ServerId, client_id: ClientId) {
        let limit = self.env.limits().client_buffer_limit_bytes;
        let queued = self
            .clients
            .get(client_id.0)
            .map_or(0, |client| client.backlog().queued_bytes());
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if queued > limit && server.io_mut().pause() {
            self.outbox.push(Action::PauseRecv(Conn::Server(server_id)));
        }
    }

    /// The server sent a message longer than `max_server_message_bytes`: what came before
    /// is with the client already; the server closes (its result cannot be skipped safely)
    /// and the client gets 54000, since its response is cut short.
    fn server_message_too_long(&mut self, server_id: ServerId, client_id: ClientId, len: usize) {
        warn!(
            len,
            "server message over max_server_message_bytes: closing the server"
        );
        self.close_server(server_id);
        let message = format!(
            "server message of {len} bytes exceeds max_server_message_bytes ({})",
            self.env.limits().max_server_message_bytes
        );
        let error = messages::fatal(sqlstate::PROGRAM_LIMIT_EXCEEDED, &message);
        self.close_client(client_id, Some(error));
    }

    /// Swallows everything from a server without a client, then takes its next step.
    pub(super) fn drain_server(&mut self, id: ServerId) {
        let max = self.env.limits().max_server_message_bytes;
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        // Its client is gone: what the answers decided for its names concerns no one.
        let scan = server.drain_output(max);
        if scan.malformed || scan.oversized.is_some() {
            self.close_server(id);
            return;
        }
        match server.state() {
            ServerState::Checking { .. } if scan.idle => self.finish_check(id),
            ServerState::Releasing { .. } => self.advance_release(id),
            _ => {}
        }
    }

    /// Bytes from a server nobody uses: parameter changes and notices are fine; anything
    /// else (typically a FATAL before the backend exits) retires it.
    pub(super) fn on_idle_server_bytes(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let pool = server.pool();
        let (retire, shutting_down) = server.read_idle_output();
        if shutting_down {
            self.linker
                .report_replica_failure(pool, FailureCause::ServerShutdown, &*self.routing);
        }
        if retire {
            self.close_server(id);
        }
    }

    /// The server connection ended or failed.
    pub(super) fn on_server_gone(&mut self, id: ServerId, errno: Option<i32>) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        match server.state() {
            ServerState::Closing => {}
            // Terminated on purpose: its backend is gone, its slot moves on.
            ServerState::Leaving { .. } | ServerState::Moving { .. } => self.close_server(id),
            ServerState::Connecting { .. } => {
                self.on_server_connected(id, Err(errno.unwrap_or(libc_like::ECONNRESET)));
            }
            _ => self.server_failed(
                id,
                "server closed the connection unexpectedly",
                Some(FailureCause::ConnectionReset),
            ),
        }
    }

    /// The server connection broke. Its client (if any) gets `message` as a FATAL error.
    /// With a `cause`, a server on a replica is reported to its router (the replica goes
    /// Down at once) and the clients waiting on its pool are re-routed rather than failed.
    pub(super) fn server_failed(
        &mut self,
        id: ServerId,
        message: &str,
        cause: Option<FailureCause>,
    ) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool = server.pool();
        match *server.state() {
            ServerState::Connecting { .. }
            | ServerState::Negotiating { .. }
            | ServerState::LoggingIn { .. } => {
                let error = messages::fatal(sqlstate::CONNECTION_FAILURE, message);
                match cause {
                    Some(cause) => self.server_unreachable(id, error, cause),
                    None => self.login_failed(id, error),
                }
            }
            ServerState::Busy { client } => {
                let on_replica = cause.is_some_and(|cause| {
                    self.linker
                        .report_replica_failure(pool, cause, &*self.routing)
                });
                self.close_server(id);
                let message = if on_replica {
                    format!("the replica serving this connection failed: {message}")
                } else {
                    message.to_string()
                };
                let error = messages::fatal(sqlstate::CONNECTION_FAILURE, &message);
                self.close_client(client, Some(error));
            }
            _ => {
                if let Some(cause) = cause {
                    self.linker
                        .report_replica_failure(pool, cause, &*self.routing);
                }
                self.close_server(id);
            }
        }
    }

    pub(super) fn on_cancel_done(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        server.backend_mut().cancel_done();
        self.advance_release(id);
    }

    /// The server's one-byte answer to the SSLRequest (`tls_io.rs`).
    pub(super) fn on_negotiation_answer(&mut self, id: ServerId) {
        let mode = self.env.config().pgtier.server_tls_sslmode;
        let (env, linker) = (&self.env, &self.linker);
        let name = |server: &crate::server::ServerConn| tls_server_name(env, linker, server);
        match self
            .servers
            .negotiation_answer(id, mode, name, &mut self.outbox)
        {
            Negotiation::Wait => {}
            Negotiation::StartLogin => self.start_server_login(id),
            Negotiation::Failed(why) => self.server_tls_failed(id, &why),
        }
    }

    /// TLS with a server failed before or during its login: the pool's waiters get the
    /// reason (08006), as for any failed login.
    pub(super) fn server_tls_failed(&mut self, id: ServerId, why: &str) {
        debug!(?id, why, "server TLS failed");
        self.server_failed(id, why, None);
    }
}

/// Applies what a server's answers decided for its client's statement names.
fn apply_fallout(names: &mut Option<Box<ClientStatements>>, fallout: Vec<Fallout>) {
    let Some(names) = names.as_mut() else {
        return;
    };
    // A name registered by a Parse that failed or was skipped goes before anything comes
    // back: a Close of the name sent before that Parse (and skipped too) restores the
    // statement the name had, which the Parse's registration had replaced.
    let (forgets, rest): (Vec<Fallout>, Vec<Fallout>) = fallout
        .into_iter()
        .partition(|change| matches!(change, Fallout::Forget(..)));
    for change in forgets.into_iter().chain(rest) {
        match change {
            Fallout::Forget(name, statement) => names.forget(&name, &statement),
            Fallout::Restore(name, statement) => names.restore(&name, statement),
            Fallout::Clear => names.clear(),
            Fallout::RestoreAll(taken) => {
                for (name, statement) in taken {
                    names.restore(&name, statement);
                }
            }
            Fallout::Unnamed { expected, to } => {
                if names.unnamed().map(|unnamed| unnamed.token) == expected {
                    names.set_unnamed(to);
                }
            }
        }
    }
}
