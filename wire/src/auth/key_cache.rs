//! Salted-password results shared by every SCRAM login of a process: PBKDF2 over a password
//! costs milliseconds (4096 rounds of HMAC-SHA-256 by default), and a pooler logs in to the
//! same servers with the same password again and again (every new server connection, every
//! shard). The server's salt and iteration count are fixed per role until its password
//! changes, so the ClientKey and ServerKey they give are remembered under a digest of
//! (password, salt, iterations): only the first login of each pays for the derivation.
//!
//! The cache holds no password, only the keys a SCRAM exchange derives from it (what the
//! server itself stores). It is bounded: when full it is emptied and refills.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::scram_keys::{Key, sha256};

/// Entries kept before the cache starts over (one per role and password in practice).
pub(crate) const MAX_CACHED_KEYS: usize = 4096;

/// ClientKey and ServerKey by (password, salt, iterations).
#[derive(Debug, Default)]
pub struct ScramKeyCache {
    keys: Mutex<HashMap<Key, (Key, Key)>>,
}

impl ScramKeyCache {
    fn slot(password: &[u8], salt: &[u8], iterations: u32) -> Key {
        let length = (password.len() as u64).to_be_bytes();
        sha256_parts(&[&length, password, salt, &iterations.to_be_bytes()])
    }

    /// The keys of an earlier login with the same password, salt and iteration count.
    pub fn get(&self, password: &[u8], salt: &[u8], iterations: u32) -> Option<(Key, Key)> {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.get(&Self::slot(password, salt, iterations)).copied()
    }

    /// Remembers the keys derived for (password, salt, iterations).
    pub fn put(&self, password: &[u8], salt: &[u8], iterations: u32, derived: (Key, Key)) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        if keys.len() >= MAX_CACHED_KEYS {
            keys.clear();
        }
        keys.insert(Self::slot(password, salt, iterations), derived);
    }

    /// How many derivations are remembered.
    pub fn len(&self) -> usize {
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// SHA-256 of the concatenation of `parts`.
fn sha256_parts(parts: &[&[u8]]) -> Key {
    let mut joined = Vec::with_capacity(parts.iter().map(|part| part.len()).sum());
    for part in parts {
        joined.extend_from_slice(part);
    }
    sha256(&joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_found_only_for_the_same_password_salt_and_iterations() {
        let cache = ScramKeyCache::default();
        let keys = ([1u8; 32], [2u8; 32]);
        cache.put(b"secret", b"salt", 4096, keys);
        assert_eq!(cache.get(b"secret", b"salt", 4096), Some(keys));
        assert_eq!(cache.get(b"secret", b"salt", 4097), None);
        assert_eq!(cache.get(b"secret", b"SALT", 4096), None);
        assert_eq!(cache.get(b"Secret", b"salt", 4096), None);
        // The password's length is part of the digest: no ambiguity at the boundary.
        assert_eq!(cache.get(b"secrets", b"alt", 4096), None);
    }

    #[test]
    fn a_full_cache_starts_over() {
        let cache = ScramKeyCache::default();
        for i in 0..MAX_CACHED_KEYS as u32 + 1 {
            cache.put(&i.to_be_bytes(), b"salt", 4096, ([0; 32], [0; 32]));
        }
        assert_eq!(cache.len(), 1);
    }
}
