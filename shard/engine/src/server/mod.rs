//! A server connection: the one enum that says where it is in its life, and what it knows
//! about its backend. Its login, its output walk and the steps by which it leaves a client
//! are the modules beside this one.

pub mod login;
pub mod moved;
pub(crate) mod relay;
pub mod release;

use crate::addr::ServerAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use pgtier_core::config::PoolMode;
use pgtier_pool::{Lease, PoolId};

use crate::cancel::CancelKey;
use crate::ids::{ClientId, ServerId};
use crate::inbox::Inbox;
use crate::messages;
use crate::params::TrackedParams;
use crate::tracker::Tracker;
use login::ServerLogin;
use relay::Relay;
pub(crate) use release::ReleaseStep;
pub use release::Reset;

/// Where a server is in its life. The fields each variant holds are valid only there.
#[derive(Debug)]
pub enum ServerState {
    /// Connect asked of the driver at `since` (server_connect_timeout).
    Connecting { since: Instant },
    /// Connected; SSLRequest sent, its one-byte answer awaited.
    Negotiating { since: Instant },
    /// StartupMessage sent; authentication and ParameterStatus messages arriving.
    LoggingIn {
        since: Instant,
        login: Box<ServerLogin>,
    },
    /// In its pool's idle list since `since` (the pool holds its lease).
    Idle { since: Instant },
    /// Running `server_check_query` since `since` before a client gets it.
    Checking { since: Instant },
    /// Serving `client`.
    Busy { client: ClientId },
    /// Since `since`, its client is gone (or its transaction ended): it drains, rolls back
    /// and resets (`ServerConn::next_release_step`) before it goes back to the pool.
    /// `rolled_back`: the one ROLLBACK it gets was sent (if it is still not idle after it,
    /// it closes).
    Releasing { since: Instant, rolled_back: bool },
    /// Since `since`, Terminate was sent so its pool slot can go to shard `to` (`None`: back
    /// to the budgets, to make room under a database or user cap); the slot moves once the
    /// server closes the connection, that is once its backend is gone.
    Leaving { since: Instant, to: Option<usize> },
    /// Since `since`, its socket is being detached so that it moves whole to shard `to`
    /// (`server::moved`); its pool counts it as leaving for `to`. `Engine::handle_detached`
    /// ends it here. If it speaks or breaks first, it closes as a `Leaving` server does,
    /// and its slot goes to `to` once the connection is closed.
    Moving { since: Instant, to: usize },
    /// The driver is tearing it down; nothing more happens until `handle_closed`.
    Closing,
}

/// One server connection.
#[derive(Debug)]
pub(crate) struct ServerConn {
    state: ServerState,
    pool: PoolId,
    mode: PoolMode,
    io: ServerIo,
    backend: Backend,
    info: ServerInfo,
    /// Its pool lease while it is out of the idle list.
    lease: Option<Lease<ServerId>>,
    /// RECONNECT marked it: it closes when next released (PgBouncer's `close_needed`).
    close_needed: bool,
    /// A client's messages went to it since its login or its last `server_check_query`:
    /// with `server_check_delay = 0` only such a server is checked before reuse (a server
    /// fresh from its login is known good), as PgBouncer checks the servers its clients
    /// released.
    used_since_check: bool,
}

/// A server's bytes in and its transport: what it sent and was not consumed yet, its TLS
/// session, and whether its reading is paused.
#[derive(Debug, Default)]
pub(crate) struct ServerIo {
    /// Received bytes not consumed yet (the rest of a message whose start was forwarded
    /// streams through; whole messages wait here only while being read).
    input: Inbox,
    /// Its TLS session, when the server accepted the SSLRequest.
    tls: Option<Box<crate::tls::TlsSession>>,
    /// Its output is paused: its client has more queued than `client_buffer_limit_bytes`.
    paused: bool,
}

impl ServerIo {
    pub fn input(&self) -> &Inbox {
        &self.input
    }

    pub(crate) fn input_mut(&mut self) -> &mut Inbox {
        &mut self.input
    }

    pub fn tls(&self) -> Option<&crate::tls::TlsSession> {
        self.tls.as_deref()
    }

    pub(crate) fn tls_mut(&mut self) -> Option<&mut crate::tls::TlsSession> {
        self.tls.as_deref_mut()
    }

    /// The server accepted the SSLRequest: its TLS session began.
    pub fn start_tls(&mut self, session: Box<crate::tls::TlsSession>) {
        self.tls = Some(session);
    }

    /// Ciphertext from it: its plaintext joins its input. `None` without TLS.
    pub(crate) fn tls_received(
        &mut self,
        data: &[u8],
    ) -> Option<(
        Result<crate::tls::Received, crate::tls::TlsError>,
        Option<Bytes>,
    )> {
        let session = self.tls.as_mut()?;
        let result = session.receive(data, self.input.buffer_mut());
        Some((result, session.take_output()))
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// Its reading pauses: true when it was not paused yet.
    pub fn pause(&mut self) -> bool {
        !std::mem::replace(&mut self.paused, true)
    }

    /// Its reading resumes: true when it was paused.
    pub(crate) fn unpause(&mut self) -> bool {
        std::mem::replace(&mut self.paused, false)
    }
}

/// What pgtier knows of a server's backend session: where its protocol exchange stands,
/// the relay's walk of its output, its parameter values, its cancel key, and what must run
/// before another client may have it.
#[derive(Debug, Default)]
pub(crate) struct Backend {
    tracker: Tracker,
    relay: Relay,
    /// The backend's current values of the tracked parameters.
    params: TrackedParams,
    /// The backend's own cancel key.
    key: Option<CancelKey>,
    /// What must run before another client may have it.
    reset: Reset,
    /// Cancel requests sent for it whose connections have not finished: until then it is
    /// not given to anyone else, so a late cancel can never hit another client's query.
    cancels_pending: u32,
}

impl Backend {
    pub fn tracker(&self) -> &Tracker {
        &self.tracker
    }

    pub(crate) fn relay(&self) -> &Relay {
        &self.relay
    }

    pub(crate) fn relay_mut(&mut self) -> &mut Relay {
        &mut self.relay
    }

    /// Its relay and tracker at once, for the forward that writes to both.
    pub(crate) fn relay_and_tracker_mut(&mut self) -> (&mut Relay, &mut Tracker) {
        (&mut self.relay, &mut self.tracker)
    }

    /// The backend's current values of the tracked parameters.
    pub fn params(&self) -> &TrackedParams {
        &self.params
    }

    /// The same, to share values found equal to a client's (see
    /// `TrackedParams::write_differences`).
    pub(crate) fn params_mut(&mut self) -> &mut TrackedParams {
        &mut self.params
    }

    /// What must run before another client may have it.
    #[cfg(any(test, feature = "testing"))]
    pub fn reset(&self) -> Reset {
        self.reset
    }

    /// Its client left `reset` to be run before the next one.
    pub(crate) fn needs_reset(&mut self, reset: Reset) {
        self.reset = self.reset.max(reset);
    }

    /// The backend pid, for listings.
    pub fn pid(&self) -> Option<u32> {
        self.key.map(|key| key.pid)
    }

    /// A query of the engine's own (answer swallowed): the bytes to send.
    pub(crate) fn internal_query(&mut self, sql: &str) -> Bytes {
        let mut out = BytesMut::with_capacity(sql.len() + 8);
        messages::query(&mut out, sql);
        self.relay.expect_internal(&mut self.tracker);
        if let Some(prepared) = self.relay.prepared.as_deref_mut() {
            // A simple Query drops the server's unnamed statement.
            prepared
                .statements
                .set_unnamed(crate::prepared::unnamed::ServerUnnamed::Empty);
        }
        out.freeze()
    }

    /// Whether it may hold prepared statements pgtier named (`pgtier_<n>`, this shard's
    /// numbering).
    pub(crate) fn holds_statements(&self) -> bool {
        self.relay
            .prepared
            .as_ref()
            .is_some_and(|prepared| !prepared.statements.is_empty())
    }

    /// The reset query may drop the server's named statements (`DISCARD ALL` does): what
    /// the cache believes follows it. Should the query fail, the server is closed anyway.
    pub(super) fn statements_reset_by(&mut self, query: &str) {
        let Some(prepared) = self.relay.prepared.as_mut() else {
            return;
        };
        let effects = pgtier_wire::session_state::classify_query(query.as_bytes());
        if effects.intersects(
            pgtier_wire::session_state::Effects::DISCARD_ALL
                .union(pgtier_wire::session_state::Effects::DEALLOCATE_ALL),
        ) {
            prepared.statements.clear();
        } else if effects.intersects(pgtier_wire::session_state::Effects::DEALLOCATE) {
            prepared.statements.all_unknown();
        }
    }

    /// A cancel request goes for what it runs: its backend key, when it has one. It is not
    /// given to anyone else until the cancel connection finishes.
    pub(crate) fn cancel_sent(&mut self) -> Option<CancelKey> {
        let key = self.key?;
        self.cancels_pending += 1;
        Some(key)
    }

    /// A cancel connection for it finished.
    pub(crate) fn cancel_done(&mut self) {
        self.cancels_pending = self.cancels_pending.saturating_sub(1);
    }

    /// Cancel requests sent for it whose connections have not finished.
    pub(crate) fn cancels_pending(&self) -> u32 {
        self.cancels_pending
    }
}

/// Where a server is and when it was used, for listings.
#[derive(Debug)]
pub(crate) struct ServerInfo {
    /// Its number in listings (`SHOW SERVERS`' `id`); it keeps it when it moves shards.
    socket_id: crate::ids::SocketId,
    addr: ServerAddr,
    /// When the connect was asked for, and when a client last got it (listings).
    connected_at: Instant,
    last_linked: Option<Instant>,
    /// The local end of its socket, once connected (listings).
    local_addr: Option<std::net::SocketAddr>,
    /// The entry of its database's host list it was opened for (the name its certificate
    /// is checked against); `None` for an entry of one host or a replica.
    listed_host: Option<Box<str>>,
}

impl ServerInfo {
    pub fn socket_id(&self) -> crate::ids::SocketId {
        self.socket_id
    }

    /// Numbered when opened (or when it arrives from another shard, with its own number).
    pub(crate) fn set_socket_id(&mut self, id: crate::ids::SocketId) {
        self.socket_id = id;
    }

    pub(crate) fn listed_host(&self) -> Option<&str> {
        self.listed_host.as_deref()
    }

    pub fn addr(&self) -> &ServerAddr {
        &self.addr
    }

    pub fn connected_at(&self) -> Instant {
        self.connected_at
    }

    pub(crate) fn last_linked(&self) -> Option<Instant> {
        self.last_linked
    }

    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.local_addr
    }

    /// The driver learned the local end of its socket.
    pub(crate) fn set_local_addr(&mut self, addr: Option<std::net::SocketAddr>) {
        self.local_addr = addr;
    }
}

impl ServerConn {
    /// A server about to connect for `pool`.
    pub fn new(pool: PoolId, addr: ServerAddr, mode: PoolMode, now: Instant) -> ServerConn {
        ServerConn {
            state: ServerState::Connecting { since: now },
            pool,
            mode,
            io: ServerIo::default(),
            backend: Backend::default(),
            info: ServerInfo {
                socket_id: crate::ids::SocketId::default(),
                addr,
                connected_at: now,
                last_linked: None,
                local_addr: None,
                listed_host: None,
            },
            lease: None,
            close_needed: false,
            used_since_check: false,
        }
    }

    /// It is opened for `host` of its database's host list.
    pub(crate) fn opened_for_listed_host(&mut self, host: &str) {
        self.info.listed_host = Some(host.into());
    }

    pub fn state(&self) -> &ServerState {
        &self.state
    }

    // ---- transitions ----

    /// It starts releasing now (its client left, or its transaction ended).
    pub(crate) fn start_releasing(&mut self, now: Instant) {
        self.state = ServerState::Releasing {
            since: now,
            rolled_back: false,
        };
    }

    /// Connected, its SSLRequest sent at `now`.
    pub(crate) fn negotiating(&mut self, now: Instant) {
        self.state = ServerState::Negotiating { since: now };
    }

    /// Its StartupMessage was sent at `now`.
    /// StartupMessage sent at `now`; `connect_query` runs once the server is ready.
    pub(crate) fn logging_in(&mut self, now: Instant, connect_query: Option<&str>) {
        self.state = ServerState::LoggingIn {
            since: now,
            login: Box::new(ServerLogin::with_connect_query(connect_query)),
        };
    }

    /// Its login and its input, while it logs in.
    pub(crate) fn login_mut(&mut self) -> Option<(&mut ServerLogin, &mut Inbox)> {
        match &mut self.state {
            ServerState::LoggingIn { login, .. } => Some((login, &mut self.io.input)),
            _ => None,
        }
    }

    /// Its login finished: it learns its backend's values and key, and the login's
    /// parameters are handed back for the pool's welcome. It is `Releasing` until the pool
    /// says where it goes.
    pub(crate) fn logged_in(&mut self, now: Instant) -> Option<Vec<(String, String)>> {
        let ServerState::LoggingIn { login, .. } = std::mem::replace(
            &mut self.state,
            ServerState::Releasing {
                since: now,
                rolled_back: false,
            },
        ) else {
            return None;
        };
        let backend = login.into_backend();
        self.backend.params = backend.tracked;
        self.backend.key = backend.key;
        Some(backend.params)
    }

    /// In its pool's idle list since `now`.
    pub fn idle(&mut self, now: Instant) {
        self.state = ServerState::Idle { since: now };
    }

    /// Running `server_check_query` since `now`, holding `lease` out of the idle list.
    pub fn checking(&mut self, now: Instant, lease: Lease<ServerId>) {
        self.state = ServerState::Checking { since: now };
        self.lease = Some(lease);
        self.used_since_check = false;
    }

    /// A client's messages went to it.
    pub(crate) fn carried_client_messages(&mut self) {
        self.used_since_check = true;
    }

    /// Whether a client's messages went to it since its login or its last check.
    pub(crate) fn used_since_check(&self) -> bool {
        self.used_since_check
    }

    /// Serving `client` from `now` with `lease`; `reset` must run before the next client.
    pub fn serve(&mut self, client: ClientId, now: Instant, lease: Lease<ServerId>, reset: Reset) {
        self.state = ServerState::Busy { client };
        self.info.last_linked = Some(now);
        self.lease = Some(lease);
        self.backend.reset = self.backend.reset.max(reset);
    }

    /// Runs a client's `auth_query` lookup with `lease` (not a link: nothing of the client
    /// stays on it).
    pub(crate) fn looks_up_for(&mut self, client: ClientId, lease: Lease<ServerId>) {
        self.state = ServerState::Busy { client };
        self.lease = Some(lease);
    }

    /// Terminate goes to it at `now` so its slot can go to shard `to`; it is read until
    /// its backend closes the connection.
    pub fn leaving(&mut self, now: Instant, to: Option<usize>) {
        self.state = ServerState::Leaving { since: now, to };
        self.io.paused = false;
    }

    /// Its socket is being detached at `now` to move whole to shard `to`.
    pub fn moving(&mut self, now: Instant, to: usize) {
        self.state = ServerState::Moving { since: now, to };
    }

    /// Its teardown begins: its input is dropped; its previous state and lease are handed
    /// back for its pool accounting.
    pub(crate) fn begin_closing(&mut self) -> (ServerState, Option<Lease<ServerId>>) {
        let previous = std::mem::replace(&mut self.state, ServerState::Closing);
        self.io.input.discard();
        (previous, self.lease.take())
    }

    /// Its teardown begins with its pool accounting already settled.
    pub(crate) fn mark_closing(&mut self) {
        self.state = ServerState::Closing;
        self.io.input.discard();
    }

    // ---- what it is ----

    pub fn io(&self) -> &ServerIo {
        &self.io
    }

    pub(crate) fn io_mut(&mut self) -> &mut ServerIo {
        &mut self.io
    }

    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    pub(crate) fn backend_mut(&mut self) -> &mut Backend {
        &mut self.backend
    }

    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    pub(crate) fn info_mut(&mut self) -> &mut ServerInfo {
        &mut self.info
    }

    pub fn pool(&self) -> PoolId {
        self.pool
    }

    pub fn lease(&self) -> Option<&Lease<ServerId>> {
        self.lease.as_ref()
    }

    /// It holds `lease` out of the pool's idle list.
    pub(crate) fn hold_lease(&mut self, lease: Lease<ServerId>) {
        self.lease = Some(lease);
    }

    pub(crate) fn take_lease(&mut self) -> Option<Lease<ServerId>> {
        self.lease.take()
    }

    // ---- cancels, back-pressure, RECONNECT ----

    /// RECONNECT marked it: it closes when next released.
    pub(crate) fn mark_close_needed(&mut self) {
        self.close_needed = true;
    }

    pub fn close_needed(&self) -> bool {
        self.close_needed
    }

    // ---- its TLS ----

    // ---- its output ----

    /// Reads what an idle server said: parameter changes and notices are fine. Returns
    /// (retire, shutting_down): anything else (typically a FATAL before the backend exits)
    /// retires it, and `shutting_down` says whether that was a shutdown error.
    pub(crate) fn read_idle_output(&mut self) -> (bool, bool) {
        let limits = pgtier_wire::FrameLimits {
            max_message_len: crate::settings::MAX_IDLE_MESSAGE_BYTES as u32,
            ..pgtier_wire::FrameLimits::default()
        };
        loop {
            let frame =
                match pgtier_wire::framing::split_message(self.io.input.buffer_mut(), &limits) {
                    Ok(Some(frame)) => frame.bytes,
                    Ok(None) => return (false, false),
                    Err(_) => return (true, false),
                };
            match frame[0] {
                b'S' => {
                    if let Some((name, value)) = messages::parse_parameter_status(&frame[5..]) {
                        self.backend.params.set(name, value);
                    }
                }
                b'N' | b'A' => {}
                b'E' => return (true, relay::is_shutdown_error(&frame[5..])),
                _ => return (true, false),
            }
        }
    }

    /// The client it serves, if any.
    pub fn client(&self) -> Option<ClientId> {
        match self.state {
            ServerState::Busy { client } => Some(client),
            _ => None,
        }
    }

    pub(crate) fn is_closing(&self) -> bool {
        matches!(self.state, ServerState::Closing)
    }

    /// Whether SUSPEND stops reading it: a server in the pool or serving a client. One
    /// logging in, checked, reset or leaving keeps being read, since pgtier itself waits for
    /// its answer; a moving one belongs to the hand-off.
    pub(crate) fn stops_for_suspend(&self) -> bool {
        matches!(
            self.state,
            ServerState::Idle { .. } | ServerState::Busy { .. }
        )
    }

    /// The admin-console name of its state.
    pub(crate) fn state_name(&self) -> &'static str {
        match self.state {
            ServerState::Connecting { .. }
            | ServerState::Negotiating { .. }
            | ServerState::LoggingIn { .. } => "login",
            ServerState::Idle { .. } | ServerState::Moving { .. } => "idle",
            ServerState::Checking { .. } => "tested",
            ServerState::Busy { .. } => "active",
            ServerState::Releasing { .. } => "used",
            ServerState::Leaving { .. } | ServerState::Closing => "closing",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_query_is_owed_an_answer_that_is_swallowed() {
        let mut server = ServerConn::new(
            crate::test_support::pool_id(),
            ServerAddr::Tcp("127.0.0.1:5432".parse().expect("addr")),
            PoolMode::Transaction,
            Instant::now(),
        );
        assert_eq!(server.state_name(), "login");
        let bytes = server.backend.internal_query("ROLLBACK");
        assert_eq!(&bytes[5..], b"ROLLBACK\0");
        assert!(server.backend.tracker.has_outstanding() && server.backend.relay.owes_internal());
        assert_eq!(server.client(), None);
    }
}
