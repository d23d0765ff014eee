//! The typed `user_data` of every submission: operation kind, slot index and slot generation
//! packed into one u64 and decoded in exactly one place.
//!
//! A completion whose generation no longer matches its slot belongs to a connection that was
//! closed and whose slot was reused; the shard drops it (see `Slab::get`).

/// What an operation was submitted for. The kind picks the handler a completion goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OpKind {
    /// Multishot accept on one of the shard's listeners (index: which one).
    Accept = 1,
    /// Receive on a client socket.
    ClientRecv = 2,
    /// Send (or sendmsg) on a client socket.
    ClientSend = 3,
    /// Connect of a server socket.
    ServerConnect = 4,
    /// Receive on a server socket.
    ServerRecv = 5,
    /// Send (or sendmsg) on a server socket.
    ServerSend = 6,
    /// Read of the shard's mailbox eventfd (index unused).
    MailboxRead = 7,
    /// Fire-and-forget close of a socket whose slot is already freed.
    Close = 8,
    /// AsyncCancel of another operation; its result is not needed.
    Cancel = 9,
    /// Connect of a one-shot cancel-request socket.
    CancelConnect = 10,
    /// Send of the 16-byte CancelRequest on a cancel socket.
    CancelSend = 11,
    /// Receive on a cancel socket (the server closes it when done).
    CancelRecv = 12,
}

impl OpKind {
    fn from_u8(raw: u8) -> Option<OpKind> {
        Some(match raw {
            1 => OpKind::Accept,
            2 => OpKind::ClientRecv,
            3 => OpKind::ClientSend,
            4 => OpKind::ServerConnect,
            5 => OpKind::ServerRecv,
            6 => OpKind::ServerSend,
            7 => OpKind::MailboxRead,
            8 => OpKind::Close,
            9 => OpKind::Cancel,
            10 => OpKind::CancelConnect,
            11 => OpKind::CancelSend,
            12 => OpKind::CancelRecv,
            _ => return None,
        })
    }
}

/// Generations are kept to 24 bits inside the key: the width at which the engine's slab
/// (`pgtier_engine::ids::Slab`, the one slab of the process) wraps them.
pub const GENERATION_MASK: u32 = (1 << pgtier_engine::ids::GENERATION_BITS) - 1;

/// A decoded `user_data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpKey {
    pub kind: OpKind,
    pub index: u32,
    pub generation: u32,
}

impl OpKey {
    pub fn new(kind: OpKind, index: u32, generation: u32) -> OpKey {
        OpKey {
            kind,
            index,
            generation: generation & GENERATION_MASK,
        }
    }

    /// Layout: bits 56..64 kind, 32..56 generation, 0..32 index.
    pub fn encode(self) -> u64 {
        (u64::from(self.kind as u8) << 56)
            | (u64::from(self.generation & GENERATION_MASK) << 32)
            | u64::from(self.index)
    }

    /// `None` for a value the shard never encoded (a bug in the caller, reported by it).
    pub fn decode(raw: u64) -> Option<OpKey> {
        let kind = OpKind::from_u8((raw >> 56) as u8)?;
        Some(OpKey {
            kind,
            index: raw as u32,
            generation: ((raw >> 32) as u32) & GENERATION_MASK,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind() {
        for raw_kind in 1..=12u8 {
            let kind = OpKind::from_u8(raw_kind).expect("known kind");
            let key = OpKey::new(kind, u32::MAX - 3, 0x00ab_cdef);
            assert_eq!(OpKey::decode(key.encode()), Some(key));
        }
    }

    #[test]
    fn generation_wraps_at_24_bits() {
        let key = OpKey::new(OpKind::ClientRecv, 7, (1 << 24) + 5);
        assert_eq!(OpKey::decode(key.encode()).map(|k| k.generation), Some(5));
    }

    #[test]
    fn unknown_kind_is_rejected() {
        assert_eq!(OpKey::decode(0), None);
        assert_eq!(OpKey::decode(0xff << 56), None);
    }
}
