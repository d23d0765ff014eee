//! The stored SCRAM-SHA-256 verifier: `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`
//! as in `pg_authid.rolpassword` and PgBouncer's userlist.txt, or one derived from a
//! plaintext password.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::AuthError;
use super::scram_keys::{Key, client_key, prepare_password, salted_password, server_key, sha256};

/// Iterations PostgreSQL uses by default (`scram_iterations`).
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// Salt bytes PostgreSQL generates (`SCRAM_DEFAULT_SALT_LEN`).
pub const SALT_LEN: usize = 16;

/// Longest salt accepted from a stored secret.
const MAX_SALT_LEN: usize = 64;

/// What a server needs to verify a SCRAM-SHA-256 client.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    pub iterations: u32,
    salt: [u8; MAX_SALT_LEN],
    salt_len: usize,
    pub stored_key: Key,
    pub server_key: Key,
}

impl core::fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ScramSecret")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

impl ScramSecret {
    /// Parses `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(text: &str) -> Result<Self, AuthError> {
        Self::parse_parts(text).ok_or(AuthError::InvalidSecret)
    }

    fn parse_parts(text: &str) -> Option<Self> {
        let rest = text.strip_prefix("SCRAM-SHA-256$")?;
        let (params, keys) = rest.split_once('$')?;
        let (iterations, salt_b64) = params.split_once(':')?;
        let (stored_b64, server_b64) = keys.split_once(':')?;
        let iterations: u32 = iterations.parse().ok().filter(|i| *i > 0)?;
        let mut salt = [0u8; MAX_SALT_LEN];
        let salt_len = STANDARD.decode_slice(salt_b64, &mut salt).ok()?;
        let stored_key = decode_key(stored_b64)?;
        let server_key = decode_key(server_b64)?;
        Some(Self {
            iterations,
            salt,
            salt_len,
            stored_key,
            server_key,
        })
    }

    /// Derives the secret PostgreSQL would store for `password` with this salt and count.
    pub fn from_password(password: &[u8], salt: &[u8], iterations: u32) -> Result<Self, AuthError> {
        if salt.is_empty() || salt.len() > MAX_SALT_LEN || iterations == 0 {
            return Err(AuthError::InvalidSecret);
        }
        let salted = salted_password(&prepare_password(password), salt, iterations);
        let mut salt_buf = [0u8; MAX_SALT_LEN];
        salt_buf[..salt.len()].copy_from_slice(salt);
        Ok(Self {
            iterations,
            salt: salt_buf,
            salt_len: salt.len(),
            stored_key: sha256(&client_key(&salted)),
            server_key: server_key(&salted),
        })
    }

    /// A secret no password matches, to run a full exchange for an unknown user without
    /// revealing that the user does not exist (PostgreSQL's "mock" authentication).
    pub fn unmatchable(salt: [u8; SALT_LEN], keys_random: [u8; 32]) -> Self {
        let mut salt_buf = [0u8; MAX_SALT_LEN];
        salt_buf[..SALT_LEN].copy_from_slice(&salt);
        Self {
            iterations: DEFAULT_ITERATIONS,
            salt: salt_buf,
            salt_len: SALT_LEN,
            stored_key: keys_random,
            server_key: sha256(&keys_random),
        }
    }

    pub fn salt(&self) -> &[u8] {
        &self.salt[..self.salt_len]
    }

    /// Formats the secret as PostgreSQL stores it.
    pub fn to_text(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            STANDARD.encode(self.salt()),
            STANDARD.encode(self.stored_key),
            STANDARD.encode(self.server_key)
        )
    }
}

fn decode_key(b64: &str) -> Option<Key> {
    let mut buf = [0u8; 48];
    let len = STANDARD.decode_slice(b64, &mut buf).ok()?;
    buf[..len].try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_formats() {
        let secret = ScramSecret::from_password(b"secret", b"0123456789abcdef", 4096).unwrap();
        let text = secret.to_text();
        assert!(text.starts_with("SCRAM-SHA-256$4096:MDEyMzQ1Njc4OWFiY2RlZg==$"));
        assert_eq!(ScramSecret::parse(&text).unwrap(), secret);
    }

    #[test]
    fn rejects_malformed_secrets() {
        for bad in [
            "",
            "md5abc",
            "SCRAM-SHA-256$0:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA",
            "SCRAM-SHA-256$4096:!!$AAAA:AAAA",
            "SCRAM-SHA-256$4096:c2FsdA==",
        ] {
            assert_eq!(
                ScramSecret::parse(bad),
                Err(AuthError::InvalidSecret),
                "{bad}"
            );
        }
    }
}
