//! A client connection: its socket buffers and the one enum that says where it is in its life.

use std::os::fd::RawFd;
use std::time::Instant;

use pgtier_core::class::ClassSetting;
use pgtier_wire::auth::{Md5Server, ScramServer};
use pgtier_wire::session_state::{Effects, StateScanner};

use crate::control::SessionLease;
use crate::io::recv_buf::RecvBuf;
use crate::io::send_queue::SendQueue;
use crate::io::slab::ServerId;
use crate::params::TrackedParams;
use crate::pool::PoolId;

/// Where a client is in its life. Fields valid in each variant are listed with it.
#[derive(Debug)]
pub enum ClientState {
    /// Connected; waiting for a StartupMessage (SSL/GSSENC requests are answered 'N' here).
    Startup,
    /// Startup read; a password exchange is under way.
    Authenticating(ClientAuth),
    /// Logged in (welcome sent), no server: between transactions in transaction mode.
    /// `since` is when it became idle (client_idle_timeout).
    Idle { since: Instant },
    /// Queued in its pool's waiters since `since` (query_wait_timeout). If `Client::welcomed`
    /// is false the wait is for the login's welcome.
    WaitingForServer { since: Instant },
    /// Its replica admission went to the control shard at `since` (login, or a re-pin off a
    /// Down replica); the answer carries `request_id`. `epoch` is the router's failure epoch
    /// read before asking.
    WaitingForReplica {
        since: Instant,
        request_id: u64,
        epoch: u64,
    },
    /// Linked to `server`; bytes flow both ways.
    Active { server: ServerId },
    /// Teardown: no new operations; the socket closes once none is in flight. With `linger`,
    /// queued bytes (a final ErrorResponse) are sent first.
    Closing { linger: bool },
}

/// The password exchange in progress.
#[derive(Debug)]
pub enum ClientAuth {
    /// AuthenticationMD5Password sent with this verifier's salt.
    Md5(Md5Server),
    /// AuthenticationSASL sent; waiting for SASLInitialResponse.
    ScramStart,
    /// SASLContinue sent; waiting for the client-final message.
    ScramFinal(Box<ScramServer>),
}

pub struct Client {
    pub fd: RawFd,
    pub state: ClientState,
    pub recv: RecvBuf,
    pub send: SendQueue,
    /// Set once the startup packet named them.
    pub user: String,
    pub database: String,
    pub pool: Option<PoolId>,
    /// Connected to the admin console (database `pgtier`), not to a pool.
    pub admin: bool,
    /// The service class its traffic is counted under.
    pub class: ClassSetting,
    /// On a replica-set entry: its count on the replica it is pinned to. Taken (released)
    /// when the client closes or is re-pinned.
    pub lease: Option<SessionLease>,
    /// The router's failure epoch when this client last checked its replica.
    pub failure_epoch_seen: u64,
    /// Untracked startup parameters (sorted), kept from startup until the pool is chosen.
    pub startup_params: Vec<(String, String)>,
    /// Tracked parameters as this client was told them (re-applied on each server).
    pub tracked: TrackedParams,
    /// The BackendKeyData this client was given (pid is the server's in session mode).
    pub cancel_key: Option<(u32, u32)>,
    /// AuthenticationOk, ParameterStatus, BackendKeyData and ReadyForQuery were sent.
    pub welcomed: bool,
    /// Body bytes of a forwarded message still to come from the socket.
    pub skip_bytes: usize,
    /// Last time bytes arrived (idle and idle-in-transaction timeouts).
    pub last_active: Instant,
    /// When the current query started, if one is running (query_timeout).
    pub query_started: Option<Instant>,
    pub connected_at: Instant,
    /// The shard is shutting down for transactions: close when the transaction ends.
    pub close_when_idle: bool,
    /// In transaction mode: the session state it created (a plain SET, LISTEN, a temp
    /// table, a named statement...), which keeps it on its server until it leaves; empty
    /// while it has created none.
    pub pinned: Effects,
    /// Classifies the Query or Parse message being forwarded, while `pinned` is empty.
    pub state_scan: Option<StateScanner>,
}

impl Client {
    pub fn new(fd: RawFd, now: Instant, recv_chunk_bytes: usize) -> Client {
        Client {
            fd,
            state: ClientState::Startup,
            recv: RecvBuf::new(recv_chunk_bytes),
            send: SendQueue::new(),
            user: String::new(),
            database: String::new(),
            pool: None,
            admin: false,
            class: ClassSetting::Premium,
            lease: None,
            failure_epoch_seen: 0,
            startup_params: Vec::new(),
            tracked: TrackedParams::default(),
            cancel_key: None,
            welcomed: false,
            skip_bytes: 0,
            last_active: now,
            query_started: None,
            connected_at: now,
            close_when_idle: false,
            pinned: Effects::NONE,
            state_scan: None,
        }
    }

    pub fn server(&self) -> Option<ServerId> {
        match self.state {
            ClientState::Active { server } => Some(server),
            _ => None,
        }
    }

    /// It created session state and keeps its server between transactions.
    pub fn pins_server(&self) -> bool {
        self.pinned.pins()
    }

    pub fn is_closing(&self) -> bool {
        matches!(self.state, ClientState::Closing { .. })
    }

    /// No operation of this client is owned by the kernel.
    pub fn quiescent(&self) -> bool {
        !self.recv.in_flight() && !self.send.in_flight()
    }
}
