//! The driver's side of one connection: its socket, its receive buffer and send queue, which
//! of its operations the kernel owns, and how far its teardown has got. The engine owns
//! everything else about the connection; this is only what a ring needs.
//!
//! The table of them ([`IoTable`]) allocates nothing: the engine's slab
//! (`pgtier_engine::ids::Slab`) hands out every client and server id, with its generation,
//! and the table only stores each connection at the id's slot index under that id, so a
//! lookup with an id whose slot was freed and reused since finds nothing.

use std::os::fd::RawFd;

use pgtier_engine::{ClientId, ServerId, SlotRef};

use crate::io::recv_buf::RecvBuf;
use crate::io::send_queue::SendQueue;

/// Capacity above which an empty receive buffer is given back after a burst (a client that
/// once sent a large query keeps no large buffer while idle).
pub(crate) const KEEP_RECV_BYTES: usize = 64 * 1024;

/// Where a connection's teardown is. Which fields are meaningful does not change with it:
/// a connection keeps its buffers until it is freed, because the kernel may still own them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// In use.
    Open,
    /// Closing once everything queued is sent; no more receives are armed.
    Flushing,
    /// Closing: in-flight operations are being cancelled; the socket is closed and the slot
    /// freed once the kernel owns none of its buffers.
    Closing,
    /// Moving to another shard (`Action::Detach`): its receive is cancelled and no new one
    /// is armed, what is queued is still sent, and once the kernel owns none of its buffers
    /// the socket leaves the table without being closed.
    Detaching,
}

/// One connection's I/O state.
pub(crate) struct IoConn {
    pub fd: RawFd,
    pub recv: RecvBuf,
    pub send: SendQueue,
    /// The connect target of a server socket; owned by the kernel while `connecting`.
    pub addr: Option<Box<socket2::SockAddr>>,
    /// True from submitting the connect until its completion is reaped.
    pub connecting: bool,
    /// The engine asked to stop receiving (flow control).
    pub paused: bool,
    pub stage: Stage,
}

impl IoConn {
    /// A server connection: small answers come through the ring's provided buffers, a large
    /// result into a buffer of its own grown by `recv_chunk_bytes` (see `RecvBuf::server`).
    pub fn server(fd: RawFd, recv_chunk_bytes: usize, provided_bytes: usize) -> IoConn {
        IoConn::with(
            fd,
            RecvBuf::server(recv_chunk_bytes, provided_bytes),
            SendQueue::keeping(),
        )
    }

    /// A client connection: it receives into the ring's provided buffers.
    pub fn client(fd: RawFd) -> IoConn {
        IoConn::with(fd, RecvBuf::provided(), SendQueue::new())
    }

    fn with(fd: RawFd, recv: RecvBuf, send: SendQueue) -> IoConn {
        IoConn {
            fd,
            recv,
            send,
            addr: None,
            connecting: false,
            paused: false,
            stage: Stage::Open,
        }
    }

    /// No operation of this connection is owned by the kernel.
    pub(crate) fn quiescent(&self) -> bool {
        !self.recv.in_flight() && !self.send.in_flight() && !self.connecting
    }

    /// A receive may be armed now.
    pub(crate) fn wants_recv(&self) -> bool {
        self.stage == Stage::Open && !self.paused && !self.recv.in_flight() && !self.connecting
    }

    /// Its close may proceed: flushing and everything sent, or closing outright.
    pub(crate) fn ready_to_close(&self) -> bool {
        match self.stage {
            Stage::Open | Stage::Detaching => false,
            Stage::Flushing => self.send.is_empty() && !self.send.in_flight(),
            Stage::Closing => true,
        }
    }

    /// Its socket may leave the table for another shard: detaching, everything sent, and no
    /// operation of it owned by the kernel.
    pub(crate) fn ready_to_detach(&self) -> bool {
        self.stage == Stage::Detaching && self.quiescent() && self.send.is_empty()
    }
}

/// Connections by the engine's slot index, each under the engine id (index and generation)
/// it was inserted with.
#[derive(Default)]
pub(crate) struct IoTable {
    slots: Vec<Option<(SlotRef, IoConn)>>,
}

impl IoTable {
    /// Stores `conn` under `id`, whose slot the engine allocated (and so holds nothing here).
    pub fn insert(&mut self, id: SlotRef, conn: IoConn) {
        let index = id.index as usize;
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || None);
        }
        debug_assert!(
            self.slots[index].is_none(),
            "a slot reused before it was freed"
        );
        self.slots[index] = Some((id, conn));
    }

    #[cfg(test)]
    pub fn get(&self, id: SlotRef) -> Option<&IoConn> {
        match self.slots.get(id.index as usize)? {
            Some((stored, conn)) if *stored == id => Some(conn),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, id: SlotRef) -> Option<&mut IoConn> {
        match self.slots.get_mut(id.index as usize)? {
            Some((stored, conn)) if *stored == id => Some(conn),
            _ => None,
        }
    }

    pub fn remove(&mut self, id: SlotRef) -> Option<IoConn> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.as_ref()?.0 != id {
            return None;
        }
        slot.take().map(|(_, conn)| conn)
    }

    /// Every live connection's id.
    pub fn ids(&self) -> Vec<SlotRef> {
        self.slots.iter().flatten().map(|(id, _)| *id).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

/// A client's table key.
pub fn client_key(id: ClientId) -> SlotRef {
    id.0
}

/// A server's table key.
pub fn server_key(id: ServerId) -> SlotRef {
    id.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_generation_finds_nothing() {
        let slot = |generation| SlotRef {
            index: 3,
            generation,
        };
        let mut table = IoTable::default();
        table.insert(slot(7), IoConn::server(-1, 64, 4096));
        assert!(table.get(slot(7)).is_some());
        assert!(table.get(slot(8)).is_none());
        assert!(table.remove(slot(8)).is_none());
        assert_eq!(table.ids(), [slot(7)]);
        assert!(table.remove(slot(7)).is_some());
        assert!(table.is_empty());
    }

    #[test]
    fn a_detaching_connection_leaves_once_its_queue_is_sent_and_nothing_is_in_flight() {
        let mut conn = IoConn::server(-1, 64, 4096);
        conn.send
            .push(bytes::Bytes::from_static(b"X..."), &mut Default::default());
        conn.stage = Stage::Detaching;
        assert!(!conn.wants_recv(), "no receives while detaching");
        assert!(!conn.ready_to_close() && !conn.ready_to_detach());
        conn.send.clear(&mut Default::default());
        assert!(conn.ready_to_detach());
    }

    #[test]
    fn a_flushing_connection_closes_once_its_queue_is_sent() {
        let mut conn = IoConn::server(-1, 64, 4096);
        assert!(conn.wants_recv() && !conn.ready_to_close());
        conn.send
            .push(bytes::Bytes::from_static(b"E..."), &mut Default::default());
        conn.stage = Stage::Flushing;
        assert!(!conn.wants_recv(), "no receives while flushing");
        assert!(!conn.ready_to_close());
        conn.send.clear(&mut Default::default());
        assert!(conn.ready_to_close());
    }
}
/// What an idle client costs is mostly these structs (its receive and send sides hold no
/// buffer, `recv_buf` and `send_queue`); a field that grows them shows here first.
#[cfg(all(test, target_pointer_width = "64"))]
mod idle_client_size {
    #[test]
    fn per_client_structs_stay_small() {
        use std::mem::size_of;
        assert!(
            size_of::<super::IoConn>() <= 128,
            "{}",
            size_of::<super::IoConn>()
        );
        let conn = size_of::<pgtier_engine::client::ClientConn>();
        // 240: 8 of them are its process-wide listing id (PgBouncer 1.25's `id`), 16 the
        // Unix peer's user name that `peer` authentication reads at accept.
        assert!(conn <= 240, "ClientConn is {conn} bytes");
        let state = size_of::<pgtier_engine::client::ClientState>();
        assert!(state <= 56, "ClientState is {state} bytes");
        let session = size_of::<pgtier_engine::client::Session>();
        // 320: the server's last ReadyForQuery (1.25's idle_transaction_timeout counts from
        // it), and a stats slot that may be absent (a database no entry serves is refused
        // only after authentication). 400: a read that may run again after its server dies
        // keeps the client's own bytes of its statement inline (two `Bytes`, no allocation
        // per read transaction) and the replica to avoid (`client/retry.rs`), +80.
        assert!(session <= 400, "Session is {session} bytes");
    }
}
