//! The server side of a linked session: receiving from servers, relaying results to clients,
//! server failures, and what happens to a server its client leaves (drain, roll back, close).

use bytes::{Buf, BytesMut};
use pgtier_core::config::PoolMode;
use tracing::{debug, warn};

use crate::control::ServerFailureCause;
use crate::io::errno::{ErrnoAction, classify};
use crate::io::ring::Ring;
use crate::io::slab::{ClientId, ServerId};
use crate::proto::{self, sqlstate};
use crate::relay;
use crate::server::{Reset, ServerState};
use crate::shard::Shard;
use crate::tracker::ServerPhase;
use pgtier_wire::session_state::Effects;

/// Largest message accepted from a server nobody is using (they are tiny notices).
const MAX_IDLE_MESSAGE_BYTES: usize = 1 << 20;

impl<R: Ring> Shard<R> {
    pub(crate) fn on_server_recv(&mut self, id: ServerId, result: i32) {
        let Some(server) = self.servers.get_mut(id.0) else {
            debug!(?id, "stale server recv completion");
            return;
        };
        if result <= 0 {
            server.recv.on_failed();
            if server.is_closing() {
                self.try_finish_server(id);
                return;
            }
            if result < 0 && classify(result) == ErrnoAction::Retry {
                self.arm_server_recv(id);
                return;
            }
            if matches!(server.state, ServerState::Leaving { .. }) {
                // Terminated on purpose: its backend is gone, its slot moves on.
                self.close_server(id);
                return;
            }
            self.log_errno("server recv", result);
            self.server_failed(
                id,
                "server closed the connection unexpectedly",
                Some(ServerFailureCause::ConnectionReset),
            );
            return;
        }
        server.recv.on_received(result as usize);
        match server.state {
            ServerState::Closing => {
                server.recv.data.clear();
                self.try_finish_server(id);
                return;
            }
            ServerState::Connecting { .. } => {
                warn!("bug: server data before connect completed");
            }
            ServerState::LoggingIn { .. } => self.on_login_bytes(id),
            ServerState::Busy { client } => self.relay_to_client(id, client),
            ServerState::Draining { .. } | ServerState::Checking { .. } => self.drain_server(id),
            ServerState::Idle { .. } => self.on_idle_server_bytes(id),
            ServerState::Leaving { .. } => server.recv.data.clear(),
        }
        self.arm_server_recv(id);
    }

    /// The server connection broke. Its client (if any) gets `message` as a FATAL error.
    /// With a `cause`, a server on a replica is reported to its router (the replica goes
    /// Down at once) and the clients waiting on its pool are re-routed rather than failed.
    pub(crate) fn server_failed(
        &mut self,
        id: ServerId,
        message: &str,
        cause: Option<ServerFailureCause>,
    ) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool_id = server.pool;
        match server.state {
            ServerState::Connecting { .. } | ServerState::LoggingIn { .. } => {
                let error = proto::fatal(sqlstate::CONNECTION_FAILURE, message);
                match cause {
                    Some(cause) => self.server_unreachable(id, error, cause),
                    None => self.login_failed(id, error),
                }
            }
            ServerState::Busy { client } => {
                let on_replica = cause.is_some_and(|c| self.report_replica_failure(pool_id, c));
                self.close_server(id);
                let message = if on_replica {
                    format!("the replica serving this connection failed: {message}")
                } else {
                    message.to_string()
                };
                self.close_client(
                    client,
                    Some(proto::fatal(sqlstate::CONNECTION_FAILURE, &message)),
                );
            }
            _ => {
                if let Some(cause) = cause {
                    self.report_replica_failure(pool_id, cause);
                }
                self.close_server(id);
            }
        }
    }

    /// Moves server output to the linked client; releases the server at the end of a
    /// transaction in transaction mode.
    fn relay_to_client(&mut self, server_id: ServerId, client_id: ClientId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let client = self
            .clients
            .get_mut(client_id.0)
            .filter(|c| c.server() == Some(server_id));
        let Some(client) = client else {
            warn!("bug: busy server without its client");
            self.close_server(server_id);
            return;
        };
        let started = client.query_started;
        let scan = relay::scan(server, Some(client), self.limits.max_server_message_bytes);
        server.recv.data.advance(scan.drop_bytes);
        if scan.forward_bytes > 0 {
            client
                .send
                .push(server.recv.data.split_to(scan.forward_bytes).freeze());
        }
        let elapsed_us = started.map_or(0, |s| {
            self.now.saturating_duration_since(s).as_micros() as u64
        });
        for _ in 0..scan.completed {
            self.counters.record_query(client.class, elapsed_us);
            self.latency.record(client.class, elapsed_us);
        }
        for _ in 0..scan.transactions {
            self.counters.record_transaction(client.class, elapsed_us);
        }
        if client.send.queued_bytes() > self.limits.client_buffer_limit_bytes {
            server.recv_paused = true;
        }
        let close_when_idle = client.close_when_idle;
        let welcomed = client.welcomed;
        let pool_id = server.pool;
        let mode = self.pools.get(pool_id).mode;
        self.flush_client(client_id);
        if scan.fatal_forwarded {
            // The backend is exiting: the client sees its FATAL and then the end of the
            // connection, exactly as from PostgreSQL, with nothing of pgtier's own after it.
            if scan.shutdown_forwarded {
                self.report_replica_failure(pool_id, ServerFailureCause::ServerShutdown);
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
        if scan.idle && !welcomed {
            // PostgreSQL refuses a bad startup value (`client_encoding=foo`) at login with
            // FATAL 22023; the SET that applied it here failed the same way.
            let refused = self
                .servers
                .get_mut(server_id.0)
                .and_then(|server| server.swallowed_error.take());
            match refused {
                Some(error) => self.close_client(client_id, Some(proto::error_as_fatal(&error))),
                None => self.finish_welcome(client_id, server_id),
            }
            return;
        }
        if scan.session_param_changed && mode == PoolMode::Transaction {
            self.pin_client(client_id, server_id, Effects::SET);
        }
        let pinned = self
            .clients
            .get(client_id.0)
            .is_some_and(|client| client.pins_server());
        if scan.idle && ((mode == PoolMode::Transaction && !pinned) || close_when_idle) {
            self.release_server(server_id);
        }
    }

    /// Keeps a transaction-mode client on its server from now on: it created session state
    /// (`effects`), which would otherwise reach the server's next client. The server is
    /// reset when the client leaves.
    pub(crate) fn pin_client(
        &mut self,
        client_id: ClientId,
        server_id: ServerId,
        effects: Effects,
    ) {
        let Some(client) = self.clients.get_mut(client_id.0) else {
            return;
        };
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if !client.pins_server() {
            debug!(?client_id, "client pinned to its server by session state");
        }
        client.pinned = client.pinned.union(effects);
        client.state_scan = None;
        server.reset = server.reset.max(Reset::SessionState);
    }

    /// The server sent a message longer than `max_server_message_bytes`: what came before
    /// it is already with the client; the server closes (its result cannot be skipped
    /// safely) and the client gets 54000 and is closed, since its response is cut short.
    fn server_message_too_long(&mut self, server_id: ServerId, client_id: ClientId, len: usize) {
        warn!(
            len,
            "server message over max_server_message_bytes: closing the server"
        );
        self.close_server(server_id);
        let message = format!(
            "server message of {len} bytes exceeds max_server_message_bytes ({})",
            self.limits.max_server_message_bytes
        );
        let error = proto::fatal(sqlstate::PROGRAM_LIMIT_EXCEEDED, &message);
        self.close_client(client_id, Some(error));
    }

    /// A client left while linked to `server_id`. The server drains whatever it still owes
    /// (its running query cancelled), then `maybe_finish_drain` rolls it back, resets it and
    /// pools it, or closes it: the one path by which a server leaves its client.
    pub(crate) fn client_left_server(&mut self, client_id: ClientId, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if server.client() != Some(client_id) {
            return;
        }
        if server.recv_paused || server.tracker.copy_in() {
            // Paused by back-pressure mid-result, the backend is blocked writing rows nobody
            // will read, and PostgreSQL does not act on a cancel while blocked in a write;
            // in COPY FROM STDIN it waits for data that will never come. Closing the socket
            // makes it abort now (and roll back), where draining would wait.
            self.close_server(server_id);
            return;
        }
        server.state = ServerState::Draining { since: self.now };
        let session_mode = self.pools.get(server.pool).mode == PoolMode::Session;
        if session_mode && !server.tracker.is_idle() {
            server.reset = Reset::Close;
        }
        if server.tracker.has_outstanding() && self.config.pgtier.cancel_on_client_disconnect {
            self.send_cancel(server_id);
        }
        self.maybe_finish_drain(server_id);
    }

    /// Sends a reset (answer swallowed) to a draining server; it goes on once that is
    /// answered. False when there is nothing to run (`server_reset_query` empty for a
    /// `Reset::Configured` server).
    fn send_reset_query(&mut self, server_id: ServerId) -> bool {
        let configured = &self.config.pgtier.server_reset_query;
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return false;
        };
        debug_assert!(matches!(server.state, ServerState::Draining { .. }));
        let reset = match std::mem::replace(&mut server.reset, Reset::None) {
            Reset::None | Reset::Close => return false,
            Reset::Configured if configured.is_empty() => return false,
            Reset::SessionState if configured.is_empty() => "DISCARD ALL",
            Reset::Configured | Reset::SessionState => configured.as_str(),
        };
        let mut out = BytesMut::with_capacity(reset.len() + 8);
        proto::query(&mut out, reset);
        server.send.push(out.freeze());
        server.swallow += 1;
        server.tracker.on_internal_query();
        self.flush_server(server_id);
        true
    }

    /// Swallows everything from a server without a client until it is idle again.
    fn drain_server(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let scan = relay::scan(server, None, self.limits.max_server_message_bytes);
        server.recv.data.advance(scan.drop_bytes);
        if scan.malformed || scan.oversized.is_some() {
            self.close_server(server_id);
            return;
        }
        self.maybe_finish_drain(server_id);
    }

    /// The next step for a server that left its client, once nothing is owed and no cancel
    /// is on its way: a failed internal query (rollback, reset) closes it; inside a
    /// transaction block it gets one ROLLBACK; idle, it gets its reset, then goes back to
    /// the pool. Anything else (an unsynced extended sequence, COPY) closes it, which makes
    /// the backend roll back on its own. Either way no later client sees this one's state.
    pub(crate) fn maybe_finish_drain(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let checking = match server.state {
            ServerState::Draining { .. } => false,
            ServerState::Checking { .. } => true,
            _ => return,
        };
        if server.tracker.has_outstanding() || server.swallow > 0 || server.cancels_pending > 0 {
            return;
        }
        if checking {
            self.finish_check(server_id);
            return;
        }
        if server.reset == Reset::Close {
            self.close_server(server_id);
            return;
        }
        if server.swallowed_error.take().is_some() {
            debug!("an internal query failed on a released server: closing it");
            self.close_server(server_id);
            return;
        }
        match server.tracker.phase() {
            ServerPhase::Idle => {
                if !self.send_reset_query(server_id) {
                    self.return_to_pool(server_id);
                }
            }
            ServerPhase::InTransaction(_) if !server.rollback_sent => {
                server.rollback_sent = true;
                let mut out = BytesMut::with_capacity(16);
                proto::query(&mut out, "ROLLBACK");
                server.send.push(out.freeze());
                server.swallow += 1;
                server.tracker.on_internal_query();
                self.flush_server(server_id);
            }
            _ => self.close_server(server_id),
        }
    }

    /// Bytes from a server nobody is using: parameter changes and notices are fine, anything
    /// else (typically a FATAL before the backend exits) retires it.
    fn on_idle_server_bytes(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let pool_id = server.pool;
        let mut shutting_down = false;
        loop {
            let data = &server.recv.data;
            if data.len() < 5 {
                return;
            }
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if !(4..=MAX_IDLE_MESSAGE_BYTES).contains(&len) {
                break;
            }
            if data.len() < len + 1 {
                return;
            }
            let code = data[0];
            let message = server.recv.data.split_to(len + 1);
            match code {
                b'S' => {
                    if let Some((name, value)) = proto::parse_parameter_status(&message[5..]) {
                        server.tracked.set(name, value);
                    }
                }
                b'N' | b'A' => {}
                b'E' if relay::is_shutdown_error(&message[5..]) => {
                    shutting_down = true;
                    break;
                }
                _ => break,
            }
        }
        if shutting_down {
            self.report_replica_failure(pool_id, ServerFailureCause::ServerShutdown);
        }
        self.close_server(server_id);
    }
}
