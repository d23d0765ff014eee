//! A server connection: the one enum that says where it is in its life, and what it knows
//! about its backend. Its login, its output walk and the steps by which it leaves a client
//! are the modules beside this one.

pub mod login;
pub mod moved;
pub mod relay;
pub mod release;

use crate::addr::ServerAddr;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use pgtier_core::config::PoolMode;
use pgtier_pool::{Lease, PoolId};

use crate::cancel::CancelKey;
use crate::ids::{ClientId, ServerId};
use crate::messages;
use crate::params::TrackedParams;
use crate::tracker::Tracker;
use login::ServerLogin;
use relay::Relay;
pub use release::{ReleaseStep, Reset};

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
pub struct ServerConn {
    pub(crate) state: ServerState,
    pub(crate) pool: PoolId,
    pub(crate) addr: ServerAddr,
    pub(crate) mode: PoolMode,
    /// Received bytes not consumed yet (the rest of a message whose start was forwarded
    /// streams through; whole messages wait here only while being read).
    pub(crate) input: BytesMut,
    pub(crate) tracker: Tracker,
    pub(crate) relay: Relay,
    /// The backend's current values of the tracked parameters.
    pub(crate) params: TrackedParams,
    /// The backend's own cancel key.
    pub(crate) key: Option<CancelKey>,
    /// Cancel requests sent for it whose connections have not finished: until then it is
    /// not given to anyone else, so a late cancel can never hit another client's query.
    pub(crate) cancels_pending: u32,
    /// What must run before another client may have it.
    pub(crate) reset: Reset,
    /// Its output is paused: its client has more queued than `client_buffer_limit_bytes`.
    pub(crate) paused: bool,
    /// Its pool lease while it is out of the idle list.
    pub(crate) lease: Option<Lease<ServerId>>,
    /// Its TLS session, when the server accepted the SSLRequest.
    pub(crate) tls: Option<Box<crate::tls::TlsSession>>,
    /// RECONNECT marked it: it closes when next released (PgBouncer's `close_needed`).
    pub(crate) close_needed: bool,
    /// When the connect was asked for, and when a client last got it (listings).
    pub(crate) connected_at: Instant,
    pub(crate) last_linked: Option<Instant>,
    /// The local end of its socket, once connected (listings).
    pub(crate) local_addr: Option<std::net::SocketAddr>,
}

impl ServerConn {
    /// A server about to connect for `pool`.
    pub fn new(pool: PoolId, addr: ServerAddr, mode: PoolMode, now: Instant) -> ServerConn {
        ServerConn {
            state: ServerState::Connecting { since: now },
            pool,
            addr,
            mode,
            input: BytesMut::new(),
            tracker: Tracker::default(),
            relay: Relay::default(),
            params: TrackedParams::default(),
            key: None,
            cancels_pending: 0,
            reset: Reset::None,
            paused: false,
            lease: None,
            tls: None,
            close_needed: false,
            connected_at: now,
            last_linked: None,
            local_addr: None,
        }
    }

    /// It starts releasing now (its client left, or its transaction ended).
    pub fn start_releasing(&mut self, now: Instant) {
        self.state = ServerState::Releasing {
            since: now,
            rolled_back: false,
        };
    }

    /// The client it serves, if any.
    pub fn client(&self) -> Option<ClientId> {
        match self.state {
            ServerState::Busy { client } => Some(client),
            _ => None,
        }
    }

    pub fn is_closing(&self) -> bool {
        matches!(self.state, ServerState::Closing)
    }

    /// Whether SUSPEND stops reading it: a server in the pool or serving a client. One
    /// logging in, checked, reset or leaving keeps being read, since pgtier itself waits for
    /// its answer; a moving one belongs to the hand-off.
    pub fn stops_for_suspend(&self) -> bool {
        matches!(
            self.state,
            ServerState::Idle { .. } | ServerState::Busy { .. }
        )
    }

    /// A query of the engine's own (answer swallowed): the bytes to send.
    pub fn internal_query(&mut self, sql: &str) -> Bytes {
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

    /// The backend pid, for listings.
    pub fn backend_pid(&self) -> Option<u32> {
        self.key.map(|key| key.pid)
    }

    /// The admin-console name of its state.
    pub fn state_name(&self) -> &'static str {
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
        let bytes = server.internal_query("ROLLBACK");
        assert_eq!(&bytes[5..], b"ROLLBACK\0");
        assert!(server.tracker.has_outstanding() && server.relay.owes_internal());
        assert_eq!(server.client(), None);
    }
}
