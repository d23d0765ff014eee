//! MD5 password authentication, both sides: `md5` + md5(md5(password + user) + salt).
//!
//! A stored secret is either the plaintext or PostgreSQL's `md5` + md5(password + user) hash
//! (as in `pg_authid` and PgBouncer's userlist.txt); both verify the same client response.

use bytes::BytesMut;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

use super::{AuthError, os_random};
use crate::messages::Message;
use crate::messages::backend::Authentication;
use crate::messages::frontend::PasswordMessage;

/// `md5` followed by 32 lowercase hex digits.
pub(crate) const MD5_HASH_LEN: usize = 35;

fn md5_hex(parts: &[&[u8]], out: &mut [u8; 32]) {
    let mut hasher = Md5::new();
    for part in parts {
        hasher.update(part);
    }
    let digest = hasher.finalize();
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for (i, byte) in digest.iter().enumerate() {
        out[2 * i] = HEX[(byte >> 4) as usize];
        out[2 * i + 1] = HEX[(byte & 0xf) as usize];
    }
}

/// The stored form: `md5` + md5(password + user).
pub fn md5_password_hash(user: &[u8], password: &[u8]) -> [u8; MD5_HASH_LEN] {
    let mut out = [0u8; MD5_HASH_LEN];
    out[..3].copy_from_slice(b"md5");
    let mut hex = [0u8; 32];
    md5_hex(&[password, user], &mut hex);
    out[3..].copy_from_slice(&hex);
    out
}

/// The client's response: `md5` + md5(hex of the stored hash + salt).
pub fn md5_salted_response(stored_hash: &[u8; MD5_HASH_LEN], salt: [u8; 4]) -> [u8; MD5_HASH_LEN] {
    let mut out = [0u8; MD5_HASH_LEN];
    out[..3].copy_from_slice(b"md5");
    let mut hex = [0u8; 32];
    md5_hex(&[&stored_hash[3..], &salt], &mut hex);
    out[3..].copy_from_slice(&hex);
    out
}

/// A stored MD5 secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Md5Secret {
    hash: [u8; MD5_HASH_LEN],
}

impl core::fmt::Debug for Md5Secret {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Md5Secret(..)")
    }
}

impl Md5Secret {
    /// From a userlist/pg_authid entry: an `md5` hash is used as is, anything else is a
    /// plaintext password hashed with `user`.
    pub fn from_stored(user: &[u8], stored: &[u8]) -> Self {
        let is_hash = stored.len() == MD5_HASH_LEN
            && stored.starts_with(b"md5")
            && stored[3..]
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
        match <[u8; MD5_HASH_LEN]>::try_from(stored) {
            Ok(hash) if is_hash => Self { hash },
            _ => Self {
                hash: md5_password_hash(user, stored),
            },
        }
    }

    pub fn hash(&self) -> &[u8; MD5_HASH_LEN] {
        &self.hash
    }
}

/// Sans-I/O MD5 verifier for one client.
#[derive(Debug)]
pub struct Md5Server {
    secret: Md5Secret,
    salt: [u8; 4],
}

impl Md5Server {
    /// `salt` must come from a CSPRNG and differ per attempt.
    pub fn new(secret: Md5Secret, salt: [u8; 4]) -> Self {
        Self { secret, salt }
    }

    pub fn with_os_rng(secret: Md5Secret) -> Result<Self, AuthError> {
        let mut salt = [0u8; 4];
        os_random(&mut salt)?;
        Ok(Self::new(secret, salt))
    }

    /// Appends AuthenticationMD5Password with this exchange's salt.
    pub fn encode_request(&self, out: &mut BytesMut) {
        Authentication::Md5Password { salt: self.salt }.encode(out);
    }

    /// Checks the body of the client's PasswordMessage ('p').
    pub fn handle_password(&self, body: &[u8]) -> Result<(), AuthError> {
        let message = PasswordMessage::decode_body(body)?;
        let expected = md5_salted_response(&self.secret.hash, self.salt);
        if bool::from(message.password.ct_eq(&expected)) {
            Ok(())
        } else {
            Err(AuthError::InvalidPassword)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_hash_and_both_stored_forms() {
        // SELECT 'md5' || md5('secret' || 'alice');
        let hash = md5_password_hash(b"alice", b"secret");
        assert_eq!(&hash, b"md54a0a68b43b6cd5cf266fa02f196e2371");
        let plain = Md5Secret::from_stored(b"alice", b"secret");
        let stored = Md5Secret::from_stored(b"alice", &hash);
        assert_eq!(plain, stored);
        let salt = [1, 2, 3, 4];
        let server = Md5Server::new(stored, salt);
        let mut out = BytesMut::new();
        PasswordMessage {
            password: &md5_salted_response(&hash, salt),
        }
        .encode(&mut out);
        assert_eq!(server.handle_password(&out[5..]), Ok(()));
        let mut wrong = BytesMut::new();
        let other = md5_password_hash(b"alice", b"Secret");
        PasswordMessage {
            password: &md5_salted_response(&other, salt),
        }
        .encode(&mut wrong);
        assert_eq!(
            server.handle_password(&wrong[5..]),
            Err(AuthError::InvalidPassword)
        );
        assert!(server.handle_password(b"no nul").is_err());
    }
}
