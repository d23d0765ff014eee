//! A client connection: the one enum that says where it is in its life, and the session it
//! holds once logged in. Its startup packets, password exchange and forwarding are the
//! modules beside this one.

pub mod auth;
pub mod auth_method;
pub mod calls;
pub mod forward;
pub mod lookup;
pub mod pins;
pub mod reads;
pub mod startup;
pub mod texts;

use crate::addr::ClientAddr;
use std::time::Instant;

use bytes::BytesMut;
use pgtier_core::class::ClassSetting;
use pgtier_core::config::PoolMode;
use pgtier_pool::{PoolId, WaitTicket};

use crate::cancel::CancelKey;
use crate::ids::ServerId;
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
    /// Welcomed and waiting since `since` for a server for its next query.
    Queued {
        since: Instant,
        ticket: Option<WaitTicket>,
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
    pub user: std::sync::Arc<str>,
    pub database: std::sync::Arc<str>,
    pub mode: PoolMode,
    /// The class its traffic counts under.
    pub class: ClassSetting,
    /// Its pool (on a replica-set entry, the pool of its replica).
    pub pool: Option<PoolId>,
    /// Untracked startup parameters: its pool key's profile, kept for a re-pin.
    pub startup_params: Vec<(String, String)>,
    /// The tracked parameters as it was told them (re-applied on each server).
    pub tracked: TrackedParams,
    /// The BackendKeyData it was given.
    pub key: Option<CancelKey>,
    /// Its hold on a replica, on a replica-set entry.
    pub lease: Option<Box<dyn ReplicaLease>>,
    /// In transaction mode, the session state it created (a plain SET, LISTEN, a temp
    /// table...): it keeps its server until the state is gone.
    pub pins: Pins,
    /// In transaction mode, its named prepared statements (created at its first).
    pub statements: Option<Box<ClientStatements>>,
    pub forwarder: Forwarder,
    /// When its current query started, if one runs (query_timeout, latency).
    pub query_started: Option<Instant>,
    /// In a transaction since it last got a server at the start of one (latency of
    /// transactions).
    pub transaction_started: Option<Instant>,
    /// Its database's slot in the shard's per-database tally (resolved once, at startup).
    pub stats: pgtier_core::metrics::DatabaseSlot,
    /// On an entry with a primary and replicas: its pools there and where its transaction
    /// runs (set when its pool on the primary is registered).
    pub reads: Option<Box<reads::ReaderSession>>,
    /// Its calls in flight, for query digests (`None` with `query_digests` off).
    pub calls: Option<Box<calls::CallLog>>,
}

impl Session {
    /// It created session state and keeps its server between transactions.
    pub fn pins_server(&self) -> bool {
        self.pins.is_pinned()
    }
}

/// One client connection.
#[derive(Debug)]
pub struct ClientConn {
    pub(crate) state: ClientState,
    /// Received bytes the engine has not consumed yet (a pipeline waiting for a server).
    pub(crate) input: BytesMut,
    /// Bytes handed to the driver for this client and not yet reported sent.
    pub(crate) queued_bytes: usize,
    /// Its receive is paused (too much input held while it waits).
    pub(crate) paused: bool,
    pub(crate) peer: Option<ClientAddr>,
    /// The local end of its socket (the listener it came through), for listings.
    pub(crate) local_addr: Option<std::net::SocketAddr>,
    pub(crate) connected_at: Instant,
    /// The last time bytes arrived (idle timeouts).
    pub(crate) last_active: Instant,
    /// Set once the StartupMessage named user and database.
    pub(crate) session: Option<Box<Session>>,
    /// Its TLS session, once it asked for TLS (SSLRequest) or opened with a TLS handshake.
    pub(crate) tls: Option<Box<ClientTls>>,
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
            input: BytesMut::new(),
            queued_bytes: 0,
            paused: false,
            peer,
            local_addr: None,
            connected_at: now,
            last_active: now,
            session: None,
            tls: None,
        }
    }

    /// The server it is linked to (welcoming or linked).
    pub fn server(&self) -> Option<ServerId> {
        match self.state {
            ClientState::Linked { server } | ClientState::Welcoming { server } => Some(server),
            ClientState::LookingUp { server, .. } => server,
            _ => None,
        }
    }

    pub fn is_closing(&self) -> bool {
        matches!(self.state, ClientState::Closing { .. })
    }

    /// A session of the admin console.
    pub fn is_console(&self) -> bool {
        matches!(self.state, ClientState::Console { .. })
    }

    /// The admin-console name of its state.
    pub fn state_name(&self) -> &'static str {
        match self.state {
            ClientState::Startup
            | ClientState::Authenticating(_)
            | ClientState::LookingUp { .. } => "login",
            ClientState::Routing { .. } => "waiting_for_replica",
            ClientState::Joining { .. } | ClientState::Queued { .. } => "waiting",
            ClientState::Welcoming { .. } | ClientState::Linked { .. } => "active",
            ClientState::Idle { .. } | ClientState::Console { .. } => "idle",
            ClientState::Closing { .. } => "closing",
        }
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
        client.state = ClientState::Welcoming { server };
        assert_eq!(client.server(), Some(server));
        client.state = ClientState::Linked { server };
        assert_eq!(
            (client.server(), client.state_name()),
            (Some(server), "active")
        );
        client.state = ClientState::Closing { linger_until: None };
        assert!(client.is_closing() && client.server().is_none());
    }
}
