//! Authentication as sans-I/O state machines: feed the peer's message in, get the reply
//! appended to a `BytesMut`.
//!
//! - Verifying clients: [`ScramServer`] (SCRAM-SHA-256, and SCRAM-SHA-256-PLUS over TLS,
//!   against a stored secret or a plaintext password) and [`Md5Server`].
//! - Logging in to PostgreSQL: [`ClientAuth`] (cleartext, MD5, SCRAM-SHA-256 or
//!   SCRAM-SHA-256-PLUS), built on [`ScramClient`].
//! - Channel binding: [`ChannelBinding`] is the `tls-server-end-point` hash of the TLS
//!   server's certificate, which both sides feed to their state machine;
//!   [`ChannelBindingPolicy`] is libpq's `channel_binding` setting for the client side.
//!
//! Primitives come from audited crates (sha2, hmac, pbkdf2, md-5, base64); secrets are compared
//! in constant time (subtle); nonces and salts are arguments, with `*_with_os_rng`
//! constructors drawing them from the OS RNG.

mod channel_binding;
mod client_auth;
mod error;
mod key_cache;
mod md5;
mod scram_client;
mod scram_keys;
mod scram_message;
mod scram_secret;
mod scram_server;

pub use channel_binding::{ChannelBinding, ChannelBindingPolicy, tls_server_end_point};
pub use client_auth::{AuthProgress, ClientAuth};
pub use error::{AuthError, PeerText};
pub use key_cache::ScramKeyCache;
pub use md5::{Md5Secret, Md5Server, md5_password_hash, md5_salted_response};
pub(crate) use scram_client::ScramClient;
pub use scram_keys::KEY_LEN;
#[cfg(test)]
pub(crate) use scram_keys::salted_password;
pub use scram_secret::{DEFAULT_ITERATIONS, SALT_LEN, ScramSecret};
pub use scram_server::{ScramServer, ScramVerified};

/// The SASL mechanism without channel binding.
pub const SCRAM_SHA_256: &[u8] = b"SCRAM-SHA-256";

/// The channel-binding variant (`tls-server-end-point`), offered and used only over TLS.
pub(crate) const SCRAM_SHA_256_PLUS: &[u8] = b"SCRAM-SHA-256-PLUS";

/// Random bytes behind a nonce; base64 makes them the 24 printable characters PostgreSQL uses.
pub const NONCE_RANDOM_LEN: usize = 18;

/// Fills `buf` from the OS RNG.
pub fn os_random(buf: &mut [u8]) -> Result<(), AuthError> {
    getrandom::fill(buf).map_err(|_| AuthError::RandomUnavailable)
}
