//! TLS for both sides of the proxy, sans I/O: configurations built from PEM bytes and the
//! parsed settings ([`TlsAcceptor`] for clients, [`TlsConnector`] for servers), and
//! [`TlsSession`], one connection's TLS state driven byte-in, byte-out.
//!
//! # Where TLS sits
//! On a TLS connection the engine passes the bytes the driver received through
//! [`TlsSession::receive`] before its protocol framing sees them, and passes what it would
//! send through [`TlsSession::send`], giving the driver [`TlsSession::take_output`] instead.
//! So a TLS connection loses the zero-copy path (received buffers handed on as they are,
//! server output relayed without copying): every byte is decrypted into a new buffer and
//! encrypted into another. Plain connections are untouched. Kernel TLS would restore the
//! zero-copy path after the handshake: [`TlsSession::into_kernel_secrets`] hands over the
//! traffic secrets for that (both configurations enable secret extraction).
//!
//! # Why rustls with the `ring` provider
//! rustls is a memory-safe TLS 1.2/1.3 implementation with a sans-I/O connection API, which
//! is what a pure engine needs. Of its providers, `ring` builds with the C compiler alone
//! (aws-lc-rs may need cmake, nasm or Go, and its prebuilt parts), and has assembly
//! AES-GCM and ChaCha20-Poly1305 on x86_64 and aarch64, which is where the per-byte cost of
//! TLS goes. FIPS validation, the reason to prefer aws-lc-rs, is not a goal. Post-quantum
//! key exchange is not offered by the ring provider (X25519, P-256, P-384 are).
//!
//! # Purity
//! Nothing here opens files or sockets: `shard/src/tls_files.rs` reads the PEM files and
//! calls the builders. Two things come from outside, through rustls: random numbers (the
//! provider's OS generator, for key exchange) and the wall clock (rustls's default time
//! provider, read only to check certificate validity during a handshake).
//!
//! # Files
//! [`config`] builds the configurations, [`pem`] reads PEM input, [`provider`] restricts
//! the crypto provider and names what was negotiated, [`verify`] holds the peer certificate
//! checks of each mode, [`chain`] pgtier's own chain check for X.509 version 1 certificates
//! (which rustls's WebPKI cannot read), [`certificate`] reads a certificate of any version
//! over the DER reader [`der`], [`x509`] reads a certificate's common name and signature
//! hash, [`session`] is the connection, [`error`] the two errors.
//! `test_pki` (tests and the `testing` feature) issues throw-away certificates; `tests`
//! runs both sides against each other.

mod certificate;
mod chain;
pub mod config;
mod der;
pub mod error;
pub mod pem;
mod provider;
pub mod session;
mod verify;
pub(crate) mod x509;

#[cfg(any(test, feature = "testing"))]
pub mod test_pki;
#[cfg(test)]
mod tests;

pub(crate) use config::ALPN_POSTGRESQL;
pub use config::{AcceptorParams, ConnectorParams, TlsAcceptor, TlsConnector};
pub use error::TlsConfigError;
pub use error::TlsError;
pub use pem::PemFile;
pub use session::Received;
pub use session::TlsSession;
#[cfg(test)]
pub(crate) use session::{HANDSHAKE_SEND_LIMIT_BYTES, MAX_PARTIAL_RECORD_BYTES};

/// The TLS configurations an engine works with, as the driver loaded them (both `None`
/// when TLS is off on both sides). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct TlsSides {
    /// For clients (`client_tls_sslmode` other than `disable`).
    pub acceptor: Option<TlsAcceptor>,
    /// For servers (`server_tls_sslmode` other than `disable`).
    pub connector: Option<TlsConnector>,
}
