//! A server connection on its way to another shard. A socket is process-wide, so a clean
//! idle server need not be ended for another shard's clients: its shard's driver detaches
//! the socket from its ring (`Action::Detach`), the engine packs what it knows of the backend
//! ([`MovedServer`]) and posts both (`Command::ServerMoved`), and the other shard adopts them
//! as an idle server of the same pool (`Action::Adopt`). PostgreSQL sees no new connection.
//!
//! Only what stays true on another shard moves: the pool key, the backend's ParameterStatus
//! values, its real cancel key, the times that age it, and the pool's welcome (the other
//! shard's pool may never have had a server to learn it from). Prepared statements do not:
//! their server-side names `pgtier_<n>` are numbered by this shard's registry and mean other
//! texts on another shard, so a server that may hold some gets `DEALLOCATE ALL` on arrival
//! (answer swallowed) before it serves anyone there. A TLS session moves with its socket:
//! its rustls state (keys, sequence numbers, any partly received record) is a plain value
//! that belongs to whichever shard holds it, so it moves once the handshake is over and no
//! record waits to be sent.

use std::net::SocketAddr;
use std::time::Instant;

use pgtier_pool::PoolKey;

use crate::addr::ServerAddr;
use crate::cancel::CancelKey;
use crate::params::TrackedParams;
use crate::server::{Reset, ServerConn, ServerState};

/// A connected socket that no shard's ring uses: detached by one shard's driver, carried by
/// the engines, adopted (or closed) by a driver. The engine never reads, writes or closes
/// it; it only hands it on. It is not closed when dropped: every path ends in a driver
/// (`Action::Adopt`, `Action::CloseSocket`, or the value `Engine::handle_detached` returns).
#[derive(Debug, PartialEq, Eq)]
pub struct DetachedSocket {
    fd: i32,
}

impl DetachedSocket {
    /// Wraps a socket the caller stops using.
    pub fn from_raw(fd: i32) -> DetachedSocket {
        DetachedSocket { fd }
    }

    /// The socket, for the driver that now owns it.
    pub fn into_raw(self) -> i32 {
        self.fd
    }
}

/// What a moving server's new shard needs to serve its backend as its own.
#[derive(Debug)]
pub struct MovedServer {
    pub(crate) key: PoolKey,
    pub(crate) addr: ServerAddr,
    /// The backend's current values of the tracked parameters.
    pub(crate) params: TrackedParams,
    /// The backend's own cancel key (a running query on the new shard is cancelled with it).
    pub(crate) backend_key: Option<CancelKey>,
    /// The ParameterStatus set of its pool's first login, for a pool that has none yet.
    pub(crate) welcome: Option<Vec<(String, String)>>,
    /// It may hold prepared statements named by the shard it left.
    pub(crate) statements: bool,
    pub(crate) opened_at: Instant,
    pub(crate) idle_since: Instant,
    pub(crate) connected_at: Instant,
    pub(crate) last_linked: Option<Instant>,
    pub(crate) local_addr: Option<SocketAddr>,
    pub(crate) socket_id: crate::ids::SocketId,
    /// A client used it since its last check (it is checked on the new shard too).
    pub(crate) used_since_check: bool,
    /// Its TLS session, if it has one: the socket carries its records.
    pub(crate) tls: Option<Box<crate::tls::TlsSession>>,
}

/// What an adopted server's new shard still needs of its parcel: its pool's welcome, and
/// what its lease is made of.
#[derive(Debug)]
pub struct Arrival {
    pub welcome: Option<Vec<(String, String)>>,
    pub statements: bool,
    pub opened_at: Instant,
    pub idle_since: Instant,
}

impl ServerConn {
    /// Whether this server may move to another shard whole: idle and clean (nothing owed,
    /// nothing received and unread, not paused, no cancel on its way, no reset pending, not
    /// marked by RECONNECT, no statement answer owed) and with no TLS record left to send (see the module doc).
    pub(crate) fn is_movable(&self) -> bool {
        let clean = self.io.input.is_empty()
            && self.backend.tracker.is_idle()
            && !self.backend.tracker.last_ready_in_block()
            && !self.backend.relay.owes_internal()
            && self.backend.cancels_pending == 0
            && self.backend.reset == Reset::None
            && !self.io.paused
            && !self.close_needed;
        let portable = self
            .io
            .tls
            .as_ref()
            .is_none_or(|tls| !tls.is_handshaking() && !tls.has_output())
            && self
                .backend
                .relay
                .prepared
                .as_ref()
                .is_none_or(|prepared| prepared.ledger.is_empty());
        let settled = !matches!(
            self.state,
            ServerState::Connecting { .. }
                | ServerState::Negotiating { .. }
                | ServerState::LoggingIn { .. }
                | ServerState::Closing
        );
        clean && portable && settled
    }

    /// Packs it for its new shard, its socket detached at `now`: what stays true of its
    /// backend there (`key`: its pool's; `welcome`: its pool's first login's parameters).
    pub(crate) fn into_parcel(
        self,
        key: PoolKey,
        welcome: Option<Vec<(String, String)>>,
        now: Instant,
    ) -> MovedServer {
        let statements = self.backend.holds_statements();
        let lease = self.lease.as_ref();
        MovedServer {
            key,
            statements,
            opened_at: lease.map_or(self.info.connected_at, |lease| lease.opened_at),
            idle_since: lease.map_or(now, |lease| lease.idle_since),
            addr: self.info.addr,
            params: self.backend.params,
            backend_key: self.backend.key,
            welcome,
            connected_at: self.info.connected_at,
            last_linked: self.info.last_linked,
            local_addr: self.info.local_addr,
            socket_id: self.info.socket_id,
            used_since_check: self.used_since_check,
            tls: self.io.tls,
        }
    }

    /// A server that moved here, idle since `now` in `pool` (`mode` its pool mode, and
    /// `prepared` whether statements are rewritten on it).
    pub fn adopted(
        pool: pgtier_pool::PoolId,
        parcel: MovedServer,
        mode: pgtier_core::config::PoolMode,
        prepared: bool,
        now: Instant,
    ) -> (ServerConn, Arrival) {
        let mut server = ServerConn::new(pool, parcel.addr, mode, parcel.connected_at);
        if prepared {
            server.backend.relay.prepared = Some(Box::default());
        }
        server.state = ServerState::Idle { since: now };
        server.backend.params = parcel.params;
        server.backend.key = parcel.backend_key;
        server.info.last_linked = parcel.last_linked;
        server.info.local_addr = parcel.local_addr;
        server.info.socket_id = parcel.socket_id;
        server.used_since_check = parcel.used_since_check;
        server.io.tls = parcel.tls;
        let arrival = Arrival {
            welcome: parcel.welcome,
            statements: parcel.statements,
            opened_at: parcel.opened_at,
            idle_since: parcel.idle_since,
        };
        (server, arrival)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_core::config::PoolMode;

    fn server() -> ServerConn {
        let mut server = ServerConn::new(
            crate::test_support::pool_id(),
            ServerAddr::Tcp("127.0.0.1:5432".parse().expect("addr")),
            PoolMode::Transaction,
            Instant::now(),
        );
        server.state = ServerState::Idle {
            since: Instant::now(),
        };
        server
    }

    #[test]
    fn only_a_clean_server_without_statements_moves() {
        assert!(server().is_movable());
        let mut owed = server();
        let _ = owed.backend.internal_query("ROLLBACK");
        assert!(!owed.is_movable(), "an internal answer is owed");
        let mut unread = server();
        unread.io.input.received(bytes::BytesMut::from(&b"N"[..]));
        assert!(!unread.is_movable(), "bytes not read yet");
        let mut cancelled = server();
        cancelled.backend.cancels_pending = 1;
        assert!(!cancelled.is_movable(), "a cancel is on its way");
        let mut marked = server();
        marked.close_needed = true;
        assert!(!marked.is_movable(), "RECONNECT closes it instead");
        let mut logging_in = server();
        logging_in.state = ServerState::Connecting {
            since: Instant::now(),
        };
        assert!(!logging_in.is_movable());
        let mut empty_cache = server();
        empty_cache.backend.relay.prepared = Some(Box::default());
        assert!(
            empty_cache.is_movable(),
            "a statement cache moves (emptied on arrival)"
        );
        assert!(!empty_cache.backend().holds_statements());
    }

    /// A TLS session towards a rustls server over the test PKI, and that server.
    fn tls_pair() -> (crate::tls::TlsSession, crate::tls::TlsSession) {
        use crate::tls::{ConnectorParams, PemFile, TlsConnector, TlsSession};
        use pgtier_core::config::{SslMode, TlsCiphers, TlsProtocols};
        let pki = crate::tls::test_pki::TestPki::shared();
        let ciphers = TlsCiphers::parse("default").expect("ciphers");
        let connector = TlsConnector::new(&ConnectorParams {
            mode: SslMode::VerifyFull,
            protocols: TlsProtocols::parse("secure").expect("protocols"),
            ciphers: &ciphers,
            ca: Some(PemFile::new("ca.crt", pki.ca_cert_pem.as_bytes())),
            client_cert: None,
        })
        .expect("connector");
        let sides = crate::testing::client_tls(SslMode::Require);
        let acceptor = sides.acceptor.as_ref().expect("acceptor");
        let client = TlsSession::connect(&connector, "localhost").expect("connect");
        let server = TlsSession::accept(acceptor).expect("accept");
        (client, server)
    }

    /// Moves records between the two sessions until neither has more to send.
    fn handshake(
        client: &mut crate::tls::TlsSession,
        server: &mut crate::tls::TlsSession,
    ) -> bytes::BytesMut {
        let mut plaintext = bytes::BytesMut::new();
        for _ in 0..16 {
            let mut moved = false;
            while let Some(records) = client.take_output() {
                server.receive(&records, &mut plaintext).expect("records");
                moved = true;
            }
            while let Some(records) = server.take_output() {
                client.receive(&records, &mut plaintext).expect("records");
                moved = true;
            }
            if !moved {
                break;
            }
        }
        plaintext
    }

    #[test]
    fn a_tls_server_moves_with_its_session_once_the_handshake_is_over() {
        let (session, mut peer) = tls_pair();
        let mut handshaking = server();
        handshaking.io.tls = Some(Box::new(session));
        assert!(!handshaking.is_movable(), "the handshake is running");
        let Some(mut session) = handshaking.io.tls.take() else {
            panic!("session");
        };
        handshake(&mut session, &mut peer);
        assert!(!session.is_handshaking());
        session.send(b"x").expect("queued");
        let mut sending = server();
        sending.io.tls = Some(session);
        assert!(!sending.is_movable(), "a record waits to be sent");
        let Some(mut session) = sending.io.tls.take() else {
            panic!("session");
        };
        let mut received = bytes::BytesMut::new();
        while let Some(records) = session.take_output() {
            peer.receive(&records, &mut received).expect("records");
        }
        assert_eq!(&received[..], b"x");
        let mut settled = server();
        settled.io.tls = Some(session);
        assert!(settled.is_movable());
        // It arrives with its session: the peer's next record decrypts on the new shard.
        let parcel = settled.into_parcel(
            PoolKey::new(
                "db".into(),
                "user".into(),
                pgtier_pool::ServerTarget::Primary,
                pgtier_pool::StartupProfile::default(),
            ),
            None,
            Instant::now(),
        );
        let (mut adopted, _) = ServerConn::adopted(
            crate::test_support::pool_id(),
            parcel,
            PoolMode::Transaction,
            false,
            Instant::now(),
        );
        peer.send(b"hello").expect("queued");
        let mut plaintext = bytes::BytesMut::new();
        while let Some(records) = peer.take_output() {
            adopted
                .io
                .tls
                .as_mut()
                .expect("the session moved")
                .receive(&records, &mut plaintext)
                .expect("decrypts");
        }
        assert_eq!(&plaintext[..], b"hello");
    }

    #[test]
    fn a_detached_socket_gives_back_the_descriptor_it_wraps() {
        assert_eq!(DetachedSocket::from_raw(17).into_raw(), 17);
    }
}
