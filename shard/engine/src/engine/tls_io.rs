//! TLS on both sides of the engine, as a layer under the protocol: what a TLS connection
//! receives is decrypted before anything reads it, and what the engine sends it leaves as
//! TLS records ([`Engine::seal`], run by `Engine::poll_action`). Plain connections pass
//! through untouched, so only TLS connections lose the zero-copy path.
//!
//! Negotiation, as PostgreSQL does it:
//! - A client's SSLRequest gets `S` when `client_tls_sslmode` is not `disable` (else `N`);
//!   bytes sent after the SSLRequest before the answer are refused (08P01), as they could
//!   have been injected by someone in the middle.
//! - A client that opens with a TLS handshake (PostgreSQL 17's `sslnegotiation=direct`) must
//!   negotiate ALPN `postgresql`, else it is closed.
//! - A StartupMessage in plain text where `client_tls_sslmode` requires TLS gets 28000.
//! - A server gets an SSLRequest first unless `server_tls_sslmode = disable`: its `S` starts
//!   a handshake (certificate checks by mode, `crate::tls::verify`); its `N` continues in
//!   plain text unless the mode requires TLS, which fails the login.
//! - Over TLS, SCRAM-SHA-256-PLUS (`tls-server-end-point`) is offered to clients and used
//!   with servers that offer it.

use bytes::Bytes;
use pgtier_core::config::SslMode;
use tracing::debug;

use super::Engine;
use crate::action::{Action, CloseHow, Conn, Wire};
use crate::client::ClientTls;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::tls::TlsSession;

/// The first byte of a TLS handshake record (a ClientHello). No startup packet starts with
/// it: its length would be over 350 MB.
pub(super) const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// SSLRequest: length 8, code 80877103.
const SSL_REQUEST: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Whether a mode refuses plain text.
fn requires_tls(mode: SslMode) -> bool {
    matches!(
        mode,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
    )
}

impl Engine {
    /// An action on its way to the driver: on a TLS connection a `Send` of protocol bytes is
    /// encrypted (nothing goes out while the handshake still runs: the session keeps it),
    /// and a closing flush is preceded by close_notify. `None`: nothing to do for now.
    pub(super) fn seal(&mut self, action: Action, wire: Wire) -> Option<Action> {
        match action {
            Action::Send { conn, bytes } if wire == Wire::Plain => {
                let Some(session) = self.tls_session(conn) else {
                    return Some(Action::Send { conn, bytes });
                };
                match session.send(&bytes) {
                    Ok(()) => session
                        .take_output()
                        .map(|bytes| Action::Send { conn, bytes }),
                    Err(error) => {
                        debug!(?conn, %error, "TLS send refused");
                        self.tls_failed(conn, "TLS send refused");
                        None
                    }
                }
            }
            Action::Close {
                conn,
                how: CloseHow::Flush,
            } if wire == Wire::Plain => {
                if let Some(session) = self.tls_session(conn)
                    && !session.is_handshaking()
                {
                    session.close_notify();
                    if let Some(bytes) = session.take_output() {
                        let close = Action::Close {
                            conn,
                            how: CloseHow::Flush,
                        };
                        self.outbox.push_front(close, Wire::Raw);
                        return Some(Action::Send { conn, bytes });
                    }
                }
                Some(Action::Close {
                    conn,
                    how: CloseHow::Flush,
                })
            }
            action => Some(action),
        }
    }

    fn tls_session(&mut self, conn: Conn) -> Option<&mut TlsSession> {
        match conn {
            Conn::Client(id) => self
                .clients
                .get_mut(id.0)?
                .tls_mut()
                .map(|tls| &mut tls.session),
            Conn::Server(id) => self.servers.get_mut(id.0)?.io_mut().tls_mut(),
        }
    }

    fn tls_failed(&mut self, conn: Conn, why: &str) {
        match conn {
            Conn::Client(id) => self.close_client_after_flush(id),
            Conn::Server(id) => self.server_tls_failed(id, why),
        }
    }

    // ---- clients ----

    /// A client whose first bytes are a TLS handshake (direct TLS): its session begins, or
    /// it is closed without a reply when TLS is not configured. Returns whether it goes on.
    pub(super) fn begin_direct_tls(&mut self, id: ClientId) -> bool {
        let Some((client, logins)) = self.clients.get_with_logins(id.0) else {
            return false;
        };
        let Some(acceptor) = logins.acceptor() else {
            debug!(?id, "direct TLS attempted but TLS is not configured");
            self.close_client(id, None);
            return false;
        };
        match TlsSession::accept(acceptor) {
            Ok(session) => {
                client.start_tls(ClientTls {
                    session,
                    direct: true,
                });
                true
            }
            Err(error) => {
                debug!(?id, %error, "TLS session refused");
                self.close_client(id, None);
                false
            }
        }
    }

    /// Ciphertext from a client on TLS. Returns whether plaintext may be waiting in its
    /// input for the protocol to read.
    pub(super) fn client_tls_received(&mut self, id: ClientId, data: &[u8]) -> bool {
        let Some(client) = self.clients.get_mut(id.0) else {
            return false;
        };
        let Some((result, output, alpn_ok)) = client.tls_received(data) else {
            return false;
        };
        if let Some(output) = output {
            self.outbox.send_raw(Conn::Client(id), output);
        }
        match result {
            Err(error) => {
                debug!(?id, %error, "client TLS failed");
                self.close_client_after_flush(id);
                false
            }
            Ok(received) if received.peer_closed => {
                self.close_client(id, None);
                false
            }
            Ok(received) => {
                if received.handshake_finished && !alpn_ok {
                    debug!(?id, "direct TLS without ALPN postgresql");
                    self.close_client(id, None);
                    return false;
                }
                received.plaintext_bytes > 0
            }
        }
    }

    /// An SSLRequest: `S` and a TLS session when TLS is configured, else `N`. Returns
    /// whether the startup goes on reading.
    pub(super) fn on_ssl_request(&mut self, id: ClientId) -> bool {
        let Some((client, logins)) = self.clients.get_with_logins(id.0) else {
            return false;
        };
        if client.tls().is_some() {
            self.protocol_error(id, "SSL negotiation over an encrypted connection");
            return false;
        }
        let Some(acceptor) = logins.acceptor() else {
            self.send(Conn::Client(id), Bytes::from_static(b"N"));
            return true;
        };
        if !client.input().is_empty() {
            self.protocol_error(id, "received unencrypted data after SSL request");
            return false;
        }
        match TlsSession::accept(acceptor) {
            Ok(session) => {
                client.start_tls(ClientTls {
                    session,
                    direct: false,
                });
                self.outbox
                    .send_raw(Conn::Client(id), Bytes::from_static(b"S"));
                true
            }
            Err(error) => {
                debug!(?id, %error, "TLS session refused");
                self.close_client(id, None);
                false
            }
        }
    }

    /// A plain-text login where TLS is required: refused with 28000, as PostgreSQL's
    /// `hostssl`-only configuration would. Returns whether it was refused.
    pub(super) fn refuse_plaintext_login(&mut self, id: ClientId) -> bool {
        let mode = self.env.config().pgtier.client_tls_sslmode;
        let plain = self.clients.get(id.0).is_some_and(|c| c.tls().is_none());
        if !(plain && requires_tls(mode)) {
            return false;
        }
        let message = format!(
            "TLS is required (client_tls_sslmode = {}): connect with sslmode=require or stronger",
            mode.as_str()
        );
        let error = messages::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, &message);
        self.close_client(id, Some(error));
        true
    }

    // ---- servers ----

    /// A server connected: an SSLRequest first when server TLS is on. Returns whether one
    /// was sent (the login then waits for its answer).
    pub(super) fn negotiate_server_tls(&mut self, id: ServerId) -> bool {
        if self.servers.connector().is_none() {
            return false;
        }
        let Some(server) = self.servers.get_mut(id.0) else {
            return false;
        };
        // As libpq: sslmode does not apply to a Unix-domain socket (the kernel is the channel).
        if server.info().addr().unix_path().is_some() {
            return false;
        }
        server.negotiating(self.now);
        self.outbox
            .send_raw(Conn::Server(id), Bytes::from_static(SSL_REQUEST));
        true
    }

    /// The server's one-byte answer to the SSLRequest.
    pub(super) fn on_negotiation_answer(&mut self, id: ServerId) {
        let mode = self.env.config().pgtier.server_tls_sslmode;
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let Some(answer) = server.io().input().first() else {
            return;
        };
        if server.io().input().len() > 1 {
            // Nothing may follow the answer before the handshake: it would be unencrypted
            // data an attacker in the middle could have put there.
            self.server_tls_failed(id, "server sent unencrypted data after the SSL answer");
            return;
        }
        server.io_mut().input_mut().clear();
        match answer {
            b'S' => {
                let name = self
                    .servers
                    .get(id.0)
                    .map(|server| tls_server_name(&self.env, &self.linker, server))
                    .unwrap_or_default();
                let Some(connector) = self.servers.connector() else {
                    return;
                };
                let session = match TlsSession::connect(connector, &name) {
                    Ok(session) => session,
                    Err(error) => {
                        let why = format!("TLS to server {name} refused: {error}");
                        self.server_tls_failed(id, &why);
                        return;
                    }
                };
                let Some(server) = self.servers.get_mut(id.0) else {
                    return;
                };
                let mut session = Box::new(session);
                if let Some(hello) = session.take_output() {
                    self.outbox.send_raw(Conn::Server(id), hello);
                }
                server.io_mut().start_tls(session);
                self.start_server_login(id);
            }
            b'N' if !requires_tls(mode) => self.start_server_login(id),
            b'N' => {
                let why = format!(
                    "server does not support TLS, and server_tls_sslmode = {}",
                    mode.as_str()
                );
                self.server_tls_failed(id, &why);
            }
            _ => self.server_tls_failed(id, "unexpected answer from server to SSL request"),
        }
    }

    /// Bytes from a server on TLS: its plaintext joins the server's input. Returns whether
    /// plaintext may be waiting.
    pub(super) fn server_tls_received(&mut self, id: ServerId, data: &[u8]) -> bool {
        let Some(server) = self.servers.get_mut(id.0) else {
            return false;
        };
        let Some((result, output)) = server.io_mut().tls_received(data) else {
            return true;
        };
        if let Some(output) = output {
            self.outbox.send_raw(Conn::Server(id), output);
        }
        match result {
            Err(error) => {
                self.server_tls_failed(id, &format!("TLS with server failed: {error}"));
                false
            }
            Ok(received) if received.peer_closed => {
                // The server's plaintext before its close_notify is still read.
                received.plaintext_bytes > 0
            }
            Ok(received) => received.plaintext_bytes > 0,
        }
    }

    /// TLS with a server failed before or during its login: the pool's waiters get the
    /// reason (08006), as for any failed login.
    fn server_tls_failed(&mut self, id: ServerId, why: &str) {
        debug!(?id, why, "server TLS failed");
        self.server_failed(id, why, None);
    }
}

/// The name a server's certificate is checked against: the configured host, or the
/// address of a replica.
fn tls_server_name(
    env: &super::env::Env,
    linker: &super::linker::Linker,
    server: &crate::server::ServerConn,
) -> String {
    let configured = linker
        .pools()
        .key(server.pool())
        .and_then(|key| env.config().database(&key.database))
        .and_then(|db| match &db.servers {
            pgtier_core::config::ServerSet::Single(host_port) => Some(host_port.host.clone()),
            pgtier_core::config::ServerSet::Replicas(_) => None,
        });
    configured.unwrap_or_else(|| server.info().addr().host_text())
}
