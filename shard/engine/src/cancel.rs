//! Cancel keys: the BackendKeyData each client is given, and the table from key to client.
//!
//! The secret carries the shard index in its low byte, so a CancelRequest arriving on any
//! shard is routed to the shard that owns the client ([`shard_of`]). The pid is the server's
//! real pid in session mode (so `pg_terminate_backend` of what the client was told works) and
//! random otherwise. Keys are unique within a shard; a key forgotten when its client closes
//! can never cancel the next client's query.

use std::collections::HashMap;

use crate::ids::ClientId;
use crate::random::{self, Random, RandomUnavailable};

/// Bits of the secret that name the shard.
const SHARD_BITS: u32 = 8;

/// Most shards the secret can name.
pub const MAX_SHARDS: usize = 1 << SHARD_BITS;

/// A client's BackendKeyData.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CancelKey {
    pub pid: u32,
    pub secret: u32,
}

/// The shard that owns a client with this cancel secret.
pub(crate) fn shard_of(secret: u32) -> usize {
    (secret & ((1 << SHARD_BITS) - 1)) as usize
}

/// One shard's cancel keys.
#[derive(Debug)]
pub(crate) struct CancelKeys {
    shard: u32,
    by_key: HashMap<CancelKey, ClientId, ahash::RandomState>,
}

impl CancelKeys {
    /// Keys for shard `shard` (below [`MAX_SHARDS`]).
    pub fn new(shard: usize) -> CancelKeys {
        debug_assert!(shard < MAX_SHARDS, "the secret has 8 bits for the shard");
        CancelKeys {
            shard: (shard % MAX_SHARDS) as u32,
            by_key: HashMap::with_hasher(ahash::RandomState::new()),
        }
    }

    /// A new key for `client`: `pid` if given (the server's real one), else random.
    pub fn issue(
        &mut self,
        client: ClientId,
        pid: Option<u32>,
        random: &mut dyn Random,
    ) -> Result<CancelKey, RandomUnavailable> {
        loop {
            let bytes = random::bytes::<8>(random)?;
            let random_pid = u32::from_be_bytes([bytes[0] & 0x7f, bytes[1], bytes[2], bytes[3]]);
            let high = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
            let key = CancelKey {
                pid: pid.unwrap_or(random_pid.max(1)),
                secret: (high << SHARD_BITS) | self.shard,
            };
            if let std::collections::hash_map::Entry::Vacant(entry) = self.by_key.entry(key) {
                entry.insert(client);
                return Ok(key);
            }
        }
    }

    /// The client a CancelRequest names, if it is still here.
    pub fn lookup(&self, key: CancelKey) -> Option<ClientId> {
        self.by_key.get(&key).copied()
    }

    /// The client is gone: its key cancels nothing from now on.
    pub fn forget(&mut self, key: CancelKey) {
        self.by_key.remove(&key);
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::SlotRef;
    use crate::random::{NoRandom, SeededRandom};

    fn client(index: u32) -> ClientId {
        ClientId(SlotRef {
            index,
            generation: 0,
        })
    }

    #[test]
    fn the_shard_is_in_the_low_byte() {
        assert_eq!(shard_of(0xdead_be03), 3);
        let mut keys = CancelKeys::new(5);
        let key = keys
            .issue(client(1), None, &mut SeededRandom::new(1))
            .expect("key");
        assert_eq!(shard_of(key.secret), 5);
        assert!(key.pid > 0 && key.pid <= i32::MAX as u32, "a positive pid");
    }

    #[test]
    fn a_given_pid_is_kept_and_keys_map_to_their_client() {
        let mut keys = CancelKeys::new(0);
        let mut random = SeededRandom::new(2);
        let key = keys.issue(client(3), Some(4242), &mut random).expect("key");
        assert_eq!(key.pid, 4242);
        assert_eq!(keys.lookup(key), Some(client(3)));
        keys.forget(key);
        assert_eq!(keys.lookup(key), None);
        assert!(keys.is_empty());
    }

    #[test]
    fn keys_fail_closed_without_randomness() {
        let mut keys = CancelKeys::new(0);
        assert_eq!(
            keys.issue(client(1), Some(1), &mut NoRandom),
            Err(RandomUnavailable)
        );
        assert!(keys.is_empty());
    }
}
