//! Cancel keys: the BackendKeyData each client is given, and the table from key to client.
//!
//! The secret carries the shard index in its high byte, so a CancelRequest arriving on any
//! shard is routed to the shard that owns the client ([`shard_of`]). The pid is the server's
//! real pid in session mode (so `pg_terminate_backend` of what the client was told works) and
//! random otherwise. Keys are unique within a shard; a key forgotten when its client closes
//! can never cancel the next client's query.
//!
//! With peering (`peer_id`), the key is laid out as PgBouncer's, so that any process of the
//! group, pgtier or PgBouncer, forwards a CancelRequest to the one that issued it: the peer
//! id is in the second and third bytes of the 8-byte key (the pid's middle bytes, low byte
//! first), and the low two bits of the last byte (the secret's) are a forwarding budget,
//! issued as 3 and lowered by each forward ([`peer_of`], [`ttl_of`]).

use std::collections::HashMap;

use crate::ids::ClientId;
use crate::random::{self, Random, RandomUnavailable};

/// Bits of the secret that name the shard (its high byte).
const SHARD_BITS: u32 = 8;

/// Where the shard's bits start in the secret.
const SHARD_SHIFT: u32 = 32 - SHARD_BITS;

/// Most shards the secret can name.
pub const MAX_SHARDS: usize = 1 << SHARD_BITS;

/// The secret's bits that count how many more times a request may be forwarded to a peer.
pub(crate) const TTL_MASK: u32 = 0b11;

/// A client's BackendKeyData.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CancelKey {
    pub pid: u32,
    pub secret: u32,
}

/// The shard that owns a client with this cancel secret.
pub(crate) fn shard_of(secret: u32) -> usize {
    (secret >> SHARD_SHIFT) as usize
}

/// The peer that issued a key (with peering on): the key's second and third bytes.
pub(crate) fn peer_of(key: CancelKey) -> u16 {
    let [_, low, high, _] = key.pid.to_be_bytes();
    u16::from_le_bytes([low, high])
}

/// Forwards left to a request with this key (with peering on).
pub(crate) fn ttl_of(key: CancelKey) -> u32 {
    key.secret & TTL_MASK
}

/// `pid` with peer id `peer` in its middle bytes, as PgBouncer lays them out.
fn with_peer(pid: u32, peer: u16) -> u32 {
    let [first, _, _, last] = pid.to_be_bytes();
    let [low, high] = peer.to_le_bytes();
    u32::from_be_bytes([first, low, high, last])
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

    /// A new key for `client`: `pid` if given (the server's real one), else random. With
    /// `peer` (this process's `peer_id`, 0: none) the key carries it and a full TTL.
    pub fn issue(
        &mut self,
        client: ClientId,
        pid: Option<u32>,
        peer: u16,
        random: &mut dyn Random,
    ) -> Result<CancelKey, RandomUnavailable> {
        loop {
            let bytes = random::bytes::<8>(random)?;
            let random_pid = u32::from_be_bytes([bytes[0] & 0x7f, bytes[1], bytes[2], bytes[3]]);
            let low = u32::from_be_bytes([0, bytes[5], bytes[6], bytes[7]]);
            let mut key = CancelKey {
                pid: pid.unwrap_or(random_pid.max(1)),
                secret: (self.shard << SHARD_SHIFT) | low,
            };
            if peer != 0 {
                key.pid = with_peer(key.pid, peer).max(1);
                key.secret |= TTL_MASK;
            }
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
    fn the_shard_is_in_the_high_byte() {
        assert_eq!(shard_of(0x03ad_beef), 3);
        let mut keys = CancelKeys::new(5);
        let key = keys
            .issue(client(1), None, 0, &mut SeededRandom::new(1))
            .expect("key");
        assert_eq!(shard_of(key.secret), 5);
        assert!(key.pid > 0 && key.pid <= i32::MAX as u32, "a positive pid");
    }

    #[test]
    fn with_peering_the_key_carries_the_peer_id_and_a_full_ttl_as_pgbouncers() {
        let mut keys = CancelKeys::new(7);
        let mut random = SeededRandom::new(3);
        for peer in [1u16, 2, 0x1234, u16::MAX] {
            let key = keys
                .issue(client(1), Some(0x0a0b_0c0d), peer, &mut random)
                .expect("key");
            let mut bytes = key.pid.to_be_bytes().to_vec();
            bytes.extend(key.secret.to_be_bytes());
            assert_eq!(
                u16::from(bytes[1]) + (u16::from(bytes[2]) << 8),
                peer,
                "PgBouncer reads the id from bytes 1 and 2"
            );
            assert_eq!(bytes[7] & 0b11, 0b11, "TTL 3 in the last byte's low bits");
            assert_eq!(
                (bytes[0], bytes[3]),
                (0x0a, 0x0d),
                "the rest of the pid stays"
            );
            assert_eq!(peer_of(key), peer);
            assert_eq!(ttl_of(key), 3);
            assert_eq!(shard_of(key.secret), 7);
            assert_eq!(keys.lookup(key), Some(client(1)));
        }
    }

    #[test]
    fn a_given_pid_is_kept_and_keys_map_to_their_client() {
        let mut keys = CancelKeys::new(0);
        let mut random = SeededRandom::new(2);
        let key = keys
            .issue(client(3), Some(4242), 0, &mut random)
            .expect("key");
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
            keys.issue(client(1), Some(1), 0, &mut NoRandom),
            Err(RandomUnavailable)
        );
        assert!(keys.is_empty());
    }
}
