//! SCRAM-SHA-256 key derivation (RFC 5802 section 3) from the sha2, hmac and pbkdf2 crates.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Bytes of every SCRAM-SHA-256 key, proof and signature.
pub const KEY_LEN: usize = 32;

pub(crate) type Key = [u8; KEY_LEN];

type HmacSha256 = Hmac<Sha256>;

/// `Hi(password, salt, iterations)`: PBKDF2-HMAC-SHA-256.
pub(crate) fn salted_password(password: &[u8], salt: &[u8], iterations: u32) -> [u8; KEY_LEN] {
    let mut out = [0u8; KEY_LEN];
    pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
    out
}

/// HMAC-SHA-256 over the concatenation of `parts`.
pub(crate) fn hmac(key: &[u8], parts: &[&[u8]]) -> Key {
    // HMAC accepts keys of any length, so this cannot fail.
    let Ok(mut mac) = HmacSha256::new_from_slice(key) else {
        unreachable!("HMAC takes keys of any length");
    };
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

pub(crate) fn sha256(data: &[u8]) -> Key {
    Sha256::digest(data).into()
}

pub(crate) fn client_key(salted: &Key) -> Key {
    hmac(salted, &[b"Client Key"])
}

pub(crate) fn server_key(salted: &Key) -> Key {
    hmac(salted, &[b"Server Key"])
}

pub(crate) fn xor(a: &Key, b: &Key) -> Key {
    core::array::from_fn(|i| a[i] ^ b[i])
}

/// Applies SASLprep as PostgreSQL does: a password that is not valid UTF-8 or that SASLprep
/// rejects is used as raw bytes.
pub(crate) fn prepare_password(password: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    let Ok(text) = core::str::from_utf8(password) else {
        return password.into();
    };
    match stringprep::saslprep(text) {
        Ok(std::borrow::Cow::Borrowed(s)) => s.as_bytes().into(),
        Ok(std::borrow::Cow::Owned(s)) => s.into_bytes().into(),
        Err(_) => password.into(),
    }
}
