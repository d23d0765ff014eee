//! TLS on both sides of the engine, as a layer under the protocol: what a TLS connection
//! receives is decrypted before anything reads it, and what the engine sends it leaves as
//! TLS records ([`seal`], run by `Engine::poll_action`). Plain connections pass
//! through untouched, so only TLS connections lose the zero-copy path.
//!
//! Negotiation, as PostgreSQL does it:
//! - A client's SSLRequest gets `S` when `client_tls_sslmode` is not `disable` (else `N`);
//!   bytes sent after the SSLRequest before the answer are refused (08P01), as they could
//!   have been injected by someone in the middle.
//! - A client that opens with a TLS handshake (PostgreSQL 17's `sslnegotiation=direct`) must
//!   negotiate ALPN `postgresql`, else it is closed.
//! - A StartupMessage in plain text where `client_tls_sslmode` requires TLS gets 28000.
//! - On the Unix socket, as PgBouncer: an SSLRequest gets `N` and no mode requires TLS.
//! - A server gets an SSLRequest first unless `server_tls_sslmode = disable`: its `S` starts
//!   a handshake (certificate checks by mode, `crate::tls::verify`); its `N` continues in
//!   plain text unless the mode requires TLS, which fails the login.
//! - Over TLS, SCRAM-SHA-256-PLUS (`tls-server-end-point`) is offered to clients and used
//!   with servers that offer it.
//!
//! The client and server tables hold the TLS configurations and sessions: here they start,
//! feed and seal them and say what happened; the engine closes what failed.

use bytes::Bytes;
use pgtier_core::config::SslMode;
use tracing::debug;

use super::clients::ClientTable;
use super::servers::ServerTable;
use crate::action::{Action, CloseHow, Conn, Outbox, Wire};
use crate::addr::ClientAddr;
use crate::client::ClientTls;
use crate::ids::{ClientId, ServerId};
use crate::server::ServerConn;
use crate::tls::TlsSession;

/// The first byte of a TLS handshake record (a ClientHello). No startup packet starts with
/// it: its length would be over 350 MB.
pub(super) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// SSLRequest: length 8, code 80877103.
const SSL_REQUEST: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Whether a mode refuses plain text.
pub(super) fn requires_tls(mode: SslMode) -> bool {
    matches!(
        mode,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
    )
}

/// An action on its way to the driver: on a TLS connection a `Send` of protocol bytes is
/// encrypted (nothing goes out while the handshake still runs: the session keeps it), and a
/// closing flush is preceded by close_notify. `Ok(None)`: nothing to do for now; `Err`: the
/// connection's TLS refused the bytes (it must close).
// Every action passes here: inlined into `Engine::poll_action`, as when it was its method.
#[inline]
pub(super) fn seal(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    outbox: &mut Outbox,
    action: Action,
    wire: Wire,
) -> Result<Option<Action>, Conn> {
    match action {
        Action::Send { conn, bytes } if wire == Wire::Plain => {
            let Some(session) = tls_session(clients, servers, conn) else {
                return Ok(Some(Action::Send { conn, bytes }));
            };
            match session.send(&bytes) {
                Ok(()) => Ok(session
                    .take_output()
                    .map(|bytes| Action::Send { conn, bytes })),
                Err(error) => {
                    debug!(?conn, %error, "TLS send refused");
                    Err(conn)
                }
            }
        }
        Action::Close {
            conn,
            how: CloseHow::Flush,
        } if wire == Wire::Plain => {
            if let Some(session) = tls_session(clients, servers, conn)
                && !session.is_handshaking()
            {
                session.close_notify();
                if let Some(bytes) = session.take_output() {
                    let close = Action::Close {
                        conn,
                        how: CloseHow::Flush,
                    };
                    outbox.push_front(close, Wire::Raw);
                    return Ok(Some(Action::Send { conn, bytes }));
                }
            }
            Ok(Some(Action::Close {
                conn,
                how: CloseHow::Flush,
            }))
        }
        action => Ok(Some(action)),
    }
}

fn tls_session<'a>(
    clients: &'a mut ClientTable,
    servers: &'a mut ServerTable,
    conn: Conn,
) -> Option<&'a mut TlsSession> {
    match conn {
        Conn::Client(id) => clients.get_mut(id.0)?.tls_mut().map(|tls| &mut tls.session),
        Conn::Server(id) => servers.get_mut(id.0)?.io_mut().tls_mut(),
    }
}

// ---- clients ----

/// How a client's TLS session began.
pub(super) enum TlsStart {
    Started,
    /// TLS is not configured: the client is closed without a reply.
    NotConfigured,
    /// The session could not be made: the client is closed.
    Refused,
    Gone,
}

/// What a client's ciphertext gave.
pub(super) enum ClientTlsRead {
    /// Whether plaintext may be waiting in its input.
    Plaintext(bool),
    /// Its TLS failed (the alert is queued): it closes after it.
    Failed,
    /// It sent close_notify, or opened with direct TLS without ALPN `postgresql`: it closes.
    Closed,
    Gone,
}

/// The answer to a client's SSLRequest.
pub(super) enum SslAnswer {
    /// `S` was sent and its session began.
    Encrypted,
    /// TLS is not configured: it gets `N`.
    Declined,
    /// It is on TLS already.
    AlreadyEncrypted,
    /// Bytes followed the SSLRequest before the answer (08P01).
    DataAfterRequest,
    /// The session could not be made: the client is closed.
    Refused,
    Gone,
}

impl ClientTable {
    /// A client whose first bytes are a TLS handshake (direct TLS): its session begins.
    pub(super) fn begin_direct_tls(&mut self, id: ClientId) -> TlsStart {
        let Some((client, logins)) = self.get_with_logins(id.0) else {
            return TlsStart::Gone;
        };
        let Some(acceptor) = logins.acceptor() else {
            debug!(?id, "direct TLS attempted but TLS is not configured");
            return TlsStart::NotConfigured;
        };
        match TlsSession::accept(acceptor) {
            Ok(session) => {
                client.start_tls(ClientTls {
                    session,
                    direct: true,
                });
                TlsStart::Started
            }
            Err(error) => {
                debug!(?id, %error, "TLS session refused");
                TlsStart::Refused
            }
        }
    }

    /// Ciphertext from a client on TLS: its plaintext joins its input, what its session
    /// answers goes to `outbox`.
    pub(super) fn tls_received(
        &mut self,
        id: ClientId,
        data: &[u8],
        outbox: &mut Outbox,
    ) -> ClientTlsRead {
        let Some(client) = self.get_mut(id.0) else {
            return ClientTlsRead::Gone;
        };
        let Some((result, output, alpn_ok)) = client.tls_received(data) else {
            return ClientTlsRead::Gone;
        };
        if let Some(output) = output {
            outbox.send_raw(Conn::Client(id), output);
        }
        match result {
            Err(error) => {
                debug!(?id, %error, "client TLS failed");
                ClientTlsRead::Failed
            }
            Ok(received) if received.peer_closed => ClientTlsRead::Closed,
            Ok(received) => {
                if received.handshake_finished && !alpn_ok {
                    debug!(?id, "direct TLS without ALPN postgresql");
                    return ClientTlsRead::Closed;
                }
                ClientTlsRead::Plaintext(received.plaintext_bytes > 0)
            }
        }
    }

    /// An SSLRequest: `S` and a TLS session when TLS is configured.
    pub(super) fn answer_ssl_request(&mut self, id: ClientId, outbox: &mut Outbox) -> SslAnswer {
        let Some((client, logins)) = self.get_with_logins(id.0) else {
            return SslAnswer::Gone;
        };
        if client.tls().is_some() {
            return SslAnswer::AlreadyEncrypted;
        }
        // A Unix socket is local already: PgBouncer answers `N` there whatever the mode.
        let unix = client.info().peer().is_some_and(ClientAddr::is_unix);
        let Some(acceptor) = logins.acceptor().filter(|_| !unix) else {
            return SslAnswer::Declined;
        };
        if !client.input().is_empty() {
            return SslAnswer::DataAfterRequest;
        }
        match TlsSession::accept(acceptor) {
            Ok(session) => {
                client.start_tls(ClientTls {
                    session,
                    direct: false,
                });
                outbox.send_raw(Conn::Client(id), Bytes::from_static(b"S"));
                SslAnswer::Encrypted
            }
            Err(error) => {
                debug!(?id, %error, "TLS session refused");
                SslAnswer::Refused
            }
        }
    }
}

// ---- servers ----

/// What a server's answer to the SSLRequest leads to.
pub(super) enum Negotiation {
    /// The answer has not arrived (or the server is gone).
    Wait,
    /// Its login goes on (over TLS when it said `S`).
    StartLogin,
    /// TLS with it failed, for this reason.
    Failed(String),
}

impl ServerTable {
    /// A server connected: an SSLRequest first when server TLS is on. Returns whether one
    /// was sent (the login then waits for its answer).
    pub(super) fn negotiate_tls(
        &mut self,
        id: ServerId,
        now: std::time::Instant,
        outbox: &mut Outbox,
    ) -> bool {
        if self.connector().is_none() {
            return false;
        }
        let Some(server) = self.get_mut(id.0) else {
            return false;
        };
        // As libpq: sslmode does not apply to a Unix-domain socket (the kernel is the channel).
        if server.info().addr().unix_path().is_some() {
            return false;
        }
        server.negotiating(now);
        outbox.send_raw(Conn::Server(id), Bytes::from_static(SSL_REQUEST));
        true
    }

    /// The server's one-byte answer to the SSLRequest, under `server_tls_sslmode = mode`;
    /// `name` says what its certificate is checked against.
    pub(super) fn negotiation_answer(
        &mut self,
        id: ServerId,
        mode: SslMode,
        name: impl FnOnce(&ServerConn) -> String,
        outbox: &mut Outbox,
    ) -> Negotiation {
        let Some(server) = self.get_mut(id.0) else {
            return Negotiation::Wait;
        };
        let Some(answer) = server.io().input().first() else {
            return Negotiation::Wait;
        };
        if server.io().input().len() > 1 {
            // Nothing may follow the answer before the handshake: it would be unencrypted
            // data an attacker in the middle could have put there.
            return Negotiation::Failed(
                "server sent unencrypted data after the SSL answer".to_string(),
            );
        }
        server.io_mut().input_mut().clear();
        match answer {
            b'S' => {
                let name = name(server);
                let Some(connector) = self.connector() else {
                    return Negotiation::Wait;
                };
                let session = match TlsSession::connect(connector, &name) {
                    Ok(session) => session,
                    Err(error) => {
                        return Negotiation::Failed(format!(
                            "TLS to server {name} refused: {error}"
                        ));
                    }
                };
                let Some(server) = self.get_mut(id.0) else {
                    return Negotiation::Wait;
                };
                let mut session = Box::new(session);
                if let Some(hello) = session.take_output() {
                    outbox.send_raw(Conn::Server(id), hello);
                }
                server.io_mut().start_tls(session);
                Negotiation::StartLogin
            }
            b'N' if !requires_tls(mode) => Negotiation::StartLogin,
            b'N' => Negotiation::Failed(format!(
                "server does not support TLS, and server_tls_sslmode = {}",
                mode.as_str()
            )),
            _ => Negotiation::Failed("unexpected answer from server to SSL request".to_string()),
        }
    }

    /// Bytes from a server on TLS: its plaintext joins its input. `Ok`: whether plaintext
    /// may be waiting; `Err`: why its TLS failed.
    pub(super) fn tls_received(
        &mut self,
        id: ServerId,
        data: &[u8],
        outbox: &mut Outbox,
    ) -> Result<bool, String> {
        let Some(server) = self.get_mut(id.0) else {
            return Ok(false);
        };
        let Some((result, output)) = server.io_mut().tls_received(data) else {
            return Ok(true);
        };
        if let Some(output) = output {
            outbox.send_raw(Conn::Server(id), output);
        }
        match result {
            Err(error) => Err(format!("TLS with server failed: {error}")),
            // The server's plaintext before its close_notify is still read.
            Ok(received) => Ok(received.plaintext_bytes > 0),
        }
    }
}

/// The name a server's certificate is checked against: the configured host (the one of a
/// host list it was opened for), or the address of a replica.
pub(super) fn tls_server_name(
    env: &super::env::Env,
    linker: &super::linker::Linker,
    server: &crate::server::ServerConn,
) -> String {
    if let Some(host) = server.info().listed_host() {
        return host.to_string();
    }
    let configured = linker
        .pools()
        .key(server.pool())
        .and_then(|key| env.config().database(&key.database))
        .and_then(|db| match &db.servers {
            pgtier_core::config::ServerSet::Single(host_port) => Some(host_port.host.clone()),
            pgtier_core::config::ServerSet::Hosts(_)
            | pgtier_core::config::ServerSet::Replicas(_) => None,
        });
    configured.unwrap_or_else(|| server.info().addr().host_text())
}
