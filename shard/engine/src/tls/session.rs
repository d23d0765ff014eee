//! [`TlsSession`]: one TLS connection, sans I/O. Ciphertext from the socket goes in with
//! [`receive`](TlsSession::receive), which appends the plaintext to the caller's buffer;
//! plaintext to send goes in with [`send`](TlsSession::send); TLS records for the socket
//! (handshake, data, alerts) come out of [`take_output`](TlsSession::take_output). It never
//! touches a socket, a file or a clock of its own.
//!
//! Bounds: TLS records only shrink when decrypted, so the plaintext `receive` appends over a
//! connection's life is at most the ciphertext it was given; one call may add the rest of a
//! record begun in an earlier call ([`MAX_PARTIAL_RECORD_BYTES`]). rustls's own buffers are
//! drained at every call, so what a peer can make a session hold is one partial record plus
//! what the driver hands it. Plaintext queued before the handshake finishes is capped at
//! [`HANDSHAKE_SEND_LIMIT_BYTES`]. Records are
//! moved from rustls into one output buffer that is reused once the `Bytes` taken from it
//! are dropped, so the steady state allocates only what rustls itself needs per record.

use super::config::{TlsAcceptor, TlsConnector};
use super::error::TlsError;
use super::provider;
use super::x509::{self, EndPointHash};
use bytes::{BufMut, Bytes, BytesMut};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConnection, Connection, ServerConnection};
use std::io::{Read, Write};

/// Plaintext a session holds for the peer before the handshake finishes (and TLS records
/// rustls holds between two calls, which the session drains at once).
pub(crate) const HANDSHAKE_SEND_LIMIT_BYTES: usize = 64 * 1024;

/// The most ciphertext a session keeps between two `receive` calls: one TLS record that has
/// not fully arrived (16 KiB of payload, its expansion and the 5-byte header).
#[cfg(test)]
pub(crate) const MAX_PARTIAL_RECORD_BYTES: usize = 16 * 1024 + 2048 + 5;

/// What one [`TlsSession::receive`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// The handshake finished during this call: ALPN, the peer's certificate and the
    /// negotiated suite are known from now on.
    pub handshake_finished: bool,
    /// The peer sent close_notify: no more plaintext will come (ciphertext after it is ignored).
    pub peer_closed: bool,
    /// Plaintext bytes appended to the caller's buffer.
    pub plaintext_bytes: usize,
}

/// One TLS connection, either side.
#[derive(Debug)]
pub struct TlsSession {
    conn: Connection,
    /// TLS records waiting for [`TlsSession::take_output`].
    output: BytesMut,
    /// Accepting side: the certificate this side presents.
    local_leaf: Option<CertificateDer<'static>>,
    /// Plaintext given to [`TlsSession::send`] while the handshake was running (rustls holds
    /// it until the handshake finishes); at most [`HANDSHAKE_SEND_LIMIT_BYTES`].
    early_plaintext_bytes: usize,
}

impl TlsSession {
    /// A session for a client that sent SSLRequest (pgtier is the TLS server).
    pub fn accept(acceptor: &TlsAcceptor) -> Result<TlsSession, TlsError> {
        let conn =
            ServerConnection::new(acceptor.rustls_config().clone()).map_err(TlsError::Refused)?;
        Ok(TlsSession::new(
            Connection::Server(conn),
            Some(acceptor.leaf().clone()),
        ))
    }

    /// A session towards a server whose `server_name` is a host name or an IP address (the
    /// database entry's `host`); the ClientHello is ready in [`TlsSession::take_output`].
    pub fn connect(connector: &TlsConnector, server_name: &str) -> Result<TlsSession, TlsError> {
        let name = ServerName::try_from(server_name.to_string()).map_err(|_| {
            TlsError::InvalidServerName {
                name: server_name.to_string(),
            }
        })?;
        let conn = ClientConnection::new(connector.rustls_config().clone(), name)
            .map_err(TlsError::Refused)?;
        Ok(TlsSession::new(Connection::Client(conn), None))
    }

    fn new(mut conn: Connection, local_leaf: Option<CertificateDer<'static>>) -> TlsSession {
        conn.set_buffer_limit(Some(HANDSHAKE_SEND_LIMIT_BYTES));
        let mut session = TlsSession {
            conn,
            output: BytesMut::new(),
            local_leaf,
            early_plaintext_bytes: 0,
        };
        session.drain_records();
        session
    }

    /// Feeds ciphertext from the peer; decrypts everything complete and appends it to
    /// `plaintext` (a partial record is kept for the next call). On error the session is
    /// dead: send [`TlsSession::take_output`] (the alert) and close.
    pub fn receive(
        &mut self,
        mut ciphertext: &[u8],
        plaintext: &mut BytesMut,
    ) -> Result<Received, TlsError> {
        let was_handshaking = self.conn.is_handshaking();
        let mut received = Received::default();
        while !ciphertext.is_empty() {
            let read = match self.conn.read_tls(&mut ciphertext) {
                Ok(read) => read,
                Err(error) => {
                    // Only rustls's own buffer limits end up here; drained every pass, they
                    // mean a peer misbehaving beyond them.
                    let error = rustls::Error::General(error.to_string());
                    return Err(self.failed(error));
                }
            };
            let state = self
                .conn
                .process_new_packets()
                .map_err(|e| self.failed(e))?;
            received.plaintext_bytes +=
                self.read_plaintext(state.plaintext_bytes_to_read(), plaintext);
            if state.peer_has_closed() {
                received.peer_closed = true;
                break;
            }
            if read == 0 {
                break;
            }
        }
        self.drain_records();
        received.handshake_finished = was_handshaking && !self.conn.is_handshaking();
        Ok(received)
    }

    /// Queues application data for the peer. Before the handshake finishes it is held (at
    /// most [`HANDSHAKE_SEND_LIMIT_BYTES`] in all; beyond that nothing of `plaintext` is taken
    /// and the error is [`TlsError::SendBufferFull`]); afterwards it is encrypted at once.
    pub fn send(&mut self, mut plaintext: &[u8]) -> Result<(), TlsError> {
        if self.conn.is_handshaking() {
            let queued = self.early_plaintext_bytes + plaintext.len();
            if queued > HANDSHAKE_SEND_LIMIT_BYTES {
                return Err(TlsError::SendBufferFull);
            }
            self.early_plaintext_bytes = queued;
        }
        while !plaintext.is_empty() {
            let written =
                self.conn.writer().write(plaintext).map_err(|error| {
                    TlsError::Refused(rustls::Error::General(error.to_string()))
                })?;
            self.drain_records();
            if written == 0 {
                // Not reached: the early bytes fit rustls's limit, and after the handshake its
                // record buffer is drained at every pass.
                return Err(TlsError::SendBufferFull);
            }
            plaintext = plaintext.get(written..).unwrap_or_default();
        }
        Ok(())
    }

    /// TLS records to put on the wire, if any.
    pub(crate) fn take_output(&mut self) -> Option<Bytes> {
        self.drain_records();
        if self.output.is_empty() {
            return None;
        }
        Some(self.output.split().freeze())
    }

    /// Whether records are waiting for [`TlsSession::take_output`].
    pub(crate) fn has_output(&self) -> bool {
        !self.output.is_empty() || self.conn.wants_write()
    }

    /// Queues a close_notify alert (then take the output and close).
    pub(crate) fn close_notify(&mut self) {
        self.conn.send_close_notify();
        self.drain_records();
    }

    /// Whether the handshake is still running.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// The negotiated ALPN protocol (`postgresql`), if the peer offered ALPN.
    pub(crate) fn alpn_protocol(&self) -> Option<&[u8]> {
        self.conn.alpn_protocol()
    }

    /// The first certificate of the peer's chain (DER), once the handshake verified it. The
    /// accepting side has one only when the client presented a certificate.
    pub(crate) fn peer_certificate_der(&self) -> Option<&[u8]> {
        self.conn
            .peer_certificates()
            .and_then(|chain| chain.first())
            .map(|certificate| certificate.as_ref())
    }

    /// The certificate this side presented (DER): the accepting side's server certificate.
    pub(crate) fn local_certificate_der(&self) -> Option<&[u8]> {
        self.local_leaf.as_ref().map(|leaf| leaf.as_ref())
    }

    /// The common name of the peer's certificate. PgBouncer compares it with the user name
    /// for `auth_type = cert`.
    pub(crate) fn peer_common_name(&self) -> Option<String> {
        x509::common_name(self.peer_certificate_der()?)
    }

    /// SCRAM's `tls-server-end-point` channel binding data (RFC 5929): the hash of the
    /// server's certificate, this side's on the accepting side and the peer's on the
    /// connecting side. `None` before the handshake, or when the certificate's signature
    /// algorithm has no single hash (RSA-PSS, Ed25519; PostgreSQL offers no binding then).
    pub fn tls_server_end_point(&self) -> Option<Vec<u8>> {
        if self.conn.is_handshaking() {
            return None;
        }
        let certificate = match &self.conn {
            Connection::Server(_) => self.local_certificate_der()?,
            Connection::Client(_) => self.peer_certificate_der()?,
        };
        let algorithm = match x509::end_point_hash(certificate)? {
            EndPointHash::Sha256 => &ring::digest::SHA256,
            EndPointHash::Sha384 => &ring::digest::SHA384,
            EndPointHash::Sha512 => &ring::digest::SHA512,
        };
        Some(
            ring::digest::digest(algorithm, certificate)
                .as_ref()
                .to_vec(),
        )
    }

    /// OpenSSL's name of the negotiated version (`TLSv1.3`), after the handshake.
    pub(crate) fn protocol_version_name(&self) -> Option<&'static str> {
        self.conn.protocol_version().map(provider::version_name)
    }

    /// OpenSSL's name of the negotiated suite (`TLS_AES_256_GCM_SHA384`,
    /// `ECDHE-RSA-AES128-GCM-SHA256`), after the handshake.
    pub(crate) fn cipher_suite_name(&self) -> Option<&'static str> {
        let suite = provider::from_rustls(self.conn.negotiated_cipher_suite()?)?;
        Some(suite.openssl_name())
    }

    /// The `tls` column of SHOW CLIENTS / SHOW SERVERS, as PgBouncer prints it:
    /// `TLSv1.3/TLS_AES_256_GCM_SHA384/ECDH=X25519`. `None` during the handshake.
    pub fn description(&self) -> Option<String> {
        if self.conn.is_handshaking() {
            return None;
        }
        let version = self.protocol_version_name()?;
        let suite = self.cipher_suite_name()?;
        match self.conn.negotiated_key_exchange_group() {
            Some(group) => Some(format!(
                "{version}/{suite}/ECDH={}",
                provider::group_name(group.name())
            )),
            None => Some(format!("{version}/{suite}")),
        }
    }

    /// The traffic secrets and sequence numbers, for handing the connection to kernel TLS.
    /// Only after the handshake, with all output taken and nothing buffered.
    #[cfg(test)]
    pub(crate) fn into_kernel_secrets(mut self) -> Result<rustls::ExtractedSecrets, TlsError> {
        if self.has_output() {
            self.drain_records();
            return Err(TlsError::OutputPending);
        }
        self.conn
            .dangerous_extract_secrets()
            .map_err(TlsError::Refused)
    }

    /// Moves every record rustls holds into `output`.
    fn drain_records(&mut self) {
        while self.conn.wants_write() {
            let mut writer = (&mut self.output).writer();
            match self.conn.write_tls(&mut writer) {
                Ok(0) | Err(_) => break, // a BytesMut writer never fails or blocks
                Ok(_) => {}
            }
        }
    }

    /// Appends up to `available` decrypted bytes to `plaintext`; returns how many.
    fn read_plaintext(&mut self, available: usize, plaintext: &mut BytesMut) -> usize {
        if available == 0 {
            return 0;
        }
        let start = plaintext.len();
        plaintext.resize(start + available, 0);
        let mut filled = start;
        let mut reader = self.conn.reader();
        while filled < start + available {
            match reader.read(&mut plaintext[filled..]) {
                Ok(0) | Err(_) => break,
                Ok(read) => filled += read,
            }
        }
        plaintext.truncate(filled);
        filled - start
    }

    /// Turns a rustls error into a [`TlsError`], noting whether rustls queued an alert.
    fn failed(&mut self, error: rustls::Error) -> TlsError {
        let alert_queued = self.conn.wants_write();
        self.drain_records();
        TlsError::Protocol {
            error,
            alert_queued,
        }
    }
}
