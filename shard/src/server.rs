//! A server connection: its socket buffers, what it knows about its backend, and the one enum
//! that says where it is in its life.

use std::os::fd::RawFd;
use std::time::Instant;

use pgtier_wire::auth::ClientAuth;

use crate::io::recv_buf::RecvBuf;
use crate::io::send_queue::SendQueue;
use crate::io::slab::ClientId;
use crate::params::TrackedParams;
use crate::pool::PoolId;
use crate::tracker::Tracker;

/// Where a server is in its life. Fields valid in each variant are listed with it.
#[derive(Debug)]
pub enum ServerState {
    /// connect(2) submitted at `since` (server_connect_timeout).
    Connecting { since: Instant },
    /// StartupMessage sent; authentication and ParameterStatus messages arriving. `auth` is
    /// the password exchange, from the server's first request that needs one.
    LoggingIn {
        since: Instant,
        auth: Option<Box<ClientAuth>>,
    },
    /// In its pool's idle list since `since` (server_idle_timeout).
    Idle { since: Instant },
    /// Serving `client`.
    Busy { client: ClientId },
    /// Since `since`, its client left or a cancel is pending: responses are swallowed until
    /// ReadyForQuery with nothing outstanding, then it returns to the pool (or closes if dirty).
    Draining { since: Instant },
    /// Since `since`, it runs `server_check_query` before a client gets it (it was idle
    /// longer than `server_check_delay`); counted in its pool's `connecting`. It goes back
    /// to the pool if the check succeeds, and closes if it fails.
    Checking { since: Instant },
    /// Since `since`, Terminate was sent so its pool slot can go to shard `slot_to` (or,
    /// with `None`, back to the shared budgets, to make room under a database or user cap):
    /// the slot moves when the server closes the connection, that is once its backend is
    /// gone, so the server never sees more connections than the pool size or cap.
    Leaving {
        since: Instant,
        slot_to: Option<usize>,
    },
    /// Teardown: the socket closes once no operation is in flight.
    Closing,
}

/// What a server must run before another client may have it. A server leaves its client
/// through one path (`Shard::maybe_finish_drain`), which runs this once the server is idle
/// and closes the server if the reset fails, so no session state crosses between clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reset {
    /// Its client could not have left session state on it (transaction mode, unpinned).
    None,
    /// PgBouncer's rule: `server_reset_query`, if set, in session mode (and in transaction
    /// mode with `server_reset_query_always`).
    Configured,
    /// Its client created session state (it was pinned in transaction mode): the state must
    /// go, with `server_reset_query`, or `DISCARD ALL` when that is empty.
    SessionState,
    /// Its session-mode client left it unclean (mid-query, inside a transaction): it closes
    /// once nothing is owed, as PgBouncer does, so the next session gets a fresh backend.
    Close,
}

pub struct Server {
    pub fd: RawFd,
    pub state: ServerState,
    pub pool: PoolId,
    pub recv: RecvBuf,
    pub send: SendQueue,
    /// Owned by the kernel while `connect_in_flight`.
    pub addr: Box<socket2::SockAddr>,
    /// True from submitting connect until its completion is reaped.
    pub connect_in_flight: bool,
    pub tracker: Tracker,
    /// Every ParameterStatus from login, in order (replayed to clients as their welcome).
    pub params: Vec<(String, String)>,
    pub tracked: TrackedParams,
    /// The backend's own BackendKeyData.
    pub backend_key: Option<(u32, u32)>,
    /// Internal queries (reset, SET re-apply) whose responses are swallowed.
    pub swallow: u32,
    /// The first ErrorResponse among swallowed answers (a failed startup SET, a failed
    /// check), kept until the code that sent the query looks at it.
    pub swallowed_error: Option<bytes::Bytes>,
    /// Body bytes of a forwarded message still to come from the socket.
    pub skip_bytes: usize,
    /// A receive is not re-armed because its client's send queue is over the cap.
    pub recv_paused: bool,
    /// Cancel requests sent for this server whose connections have not finished.
    pub cancels_pending: u32,
    /// pgtier sent a ROLLBACK while draining (one try; if the server is still not idle
    /// afterwards it is closed).
    pub rollback_sent: bool,
    /// What must run before another client may have this server.
    pub reset: Reset,
    pub created_at: Instant,
}

impl Server {
    pub fn is_closing(&self) -> bool {
        matches!(self.state, ServerState::Closing)
    }

    pub fn quiescent(&self) -> bool {
        !self.recv.in_flight() && !self.send.in_flight() && !self.connect_in_flight
    }

    pub fn client(&self) -> Option<ClientId> {
        match self.state {
            ServerState::Busy { client } => Some(client),
            _ => None,
        }
    }
}
