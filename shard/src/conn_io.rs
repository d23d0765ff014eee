//! The driver's side of one connection: its socket, its receive buffer and send queue, which
//! of its operations the kernel owns, and how far its teardown has got. The engine owns
//! everything else about the connection; this is only what a ring needs.

use std::os::fd::RawFd;

use pgtier_engine::{ClientId, ServerId};

use crate::io::recv_buf::RecvBuf;
use crate::io::send_queue::SendQueue;

/// Capacity above which an empty receive buffer is given back after a burst (a client that
/// once sent a large query keeps no large buffer while idle).
pub const KEEP_RECV_BYTES: usize = 64 * 1024;

/// Where a connection's teardown is. Which fields are meaningful does not change with it:
/// a connection keeps its buffers until it is freed, because the kernel may still own them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
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
pub struct IoConn {
    pub fd: RawFd,
    /// The engine id's generation (the slot index is this entry's position).
    pub generation: u32,
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
    /// A server connection: it receives into a buffer of its own.
    pub fn new(fd: RawFd, generation: u32, recv_chunk_bytes: usize) -> IoConn {
        IoConn::with_recv(fd, generation, RecvBuf::new(recv_chunk_bytes))
    }

    /// A client connection: it receives into the ring's provided buffers.
    pub fn client(fd: RawFd, generation: u32) -> IoConn {
        IoConn::with_recv(fd, generation, RecvBuf::provided())
    }

    fn with_recv(fd: RawFd, generation: u32, recv: RecvBuf) -> IoConn {
        IoConn {
            fd,
            generation,
            recv,
            send: SendQueue::new(),
            addr: None,
            connecting: false,
            paused: false,
            stage: Stage::Open,
        }
    }

    /// No operation of this connection is owned by the kernel.
    pub fn quiescent(&self) -> bool {
        !self.recv.in_flight() && !self.send.in_flight() && !self.connecting
    }

    /// A receive may be armed now.
    pub fn wants_recv(&self) -> bool {
        self.stage == Stage::Open && !self.paused && !self.recv.in_flight() && !self.connecting
    }

    /// Its close may proceed: flushing and everything sent, or closing outright.
    pub fn ready_to_close(&self) -> bool {
        match self.stage {
            Stage::Open | Stage::Detaching => false,
            Stage::Flushing => self.send.is_empty() && !self.send.in_flight(),
            Stage::Closing => true,
        }
    }

    /// Its socket may leave the table for another shard: detaching, everything sent, and no
    /// operation of it owned by the kernel.
    pub fn ready_to_detach(&self) -> bool {
        self.stage == Stage::Detaching && self.quiescent() && self.send.is_empty()
    }
}

/// Connections by slot index, checked against the engine id's generation.
#[derive(Default)]
pub struct IoTable {
    slots: Vec<Option<IoConn>>,
}

impl IoTable {
    pub fn insert(&mut self, index: u32, conn: IoConn) {
        let index = index as usize;
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, || None);
        }
        debug_assert!(
            self.slots[index].is_none(),
            "a slot reused before it was freed"
        );
        self.slots[index] = Some(conn);
    }

    #[cfg(test)]
    pub fn get(&self, index: u32, generation: u32) -> Option<&IoConn> {
        self.slots
            .get(index as usize)?
            .as_ref()
            .filter(|conn| conn.generation == generation)
    }

    pub fn get_mut(&mut self, index: u32, generation: u32) -> Option<&mut IoConn> {
        self.slots
            .get_mut(index as usize)?
            .as_mut()
            .filter(|conn| conn.generation == generation)
    }

    pub fn remove(&mut self, index: u32, generation: u32) -> Option<IoConn> {
        let slot = self.slots.get_mut(index as usize)?;
        if slot.as_ref()?.generation != generation {
            return None;
        }
        slot.take()
    }

    /// Every live connection's (index, generation).
    pub fn ids(&self) -> Vec<(u32, u32)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(index, slot)| {
                let conn = slot.as_ref()?;
                Some((u32::try_from(index).ok()?, conn.generation))
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }
}

/// A client's table key.
pub fn client_key(id: ClientId) -> (u32, u32) {
    (id.index(), id.generation())
}

/// A server's table key.
pub fn server_key(id: ServerId) -> (u32, u32) {
    (id.index(), id.generation())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_generation_finds_nothing() {
        let mut table = IoTable::default();
        table.insert(3, IoConn::new(-1, 7, 64));
        assert!(table.get(3, 7).is_some());
        assert!(table.get(3, 8).is_none());
        assert!(table.remove(3, 8).is_none());
        assert!(table.remove(3, 7).is_some());
        assert!(table.is_empty());
    }

    #[test]
    fn a_detaching_connection_leaves_once_its_queue_is_sent_and_nothing_is_in_flight() {
        let mut conn = IoConn::new(-1, 0, 64);
        conn.send.push(bytes::Bytes::from_static(b"X..."));
        conn.stage = Stage::Detaching;
        assert!(!conn.wants_recv(), "no receives while detaching");
        assert!(!conn.ready_to_close() && !conn.ready_to_detach());
        conn.send.clear();
        assert!(conn.ready_to_detach());
    }

    #[test]
    fn a_flushing_connection_closes_once_its_queue_is_sent() {
        let mut conn = IoConn::new(-1, 0, 64);
        assert!(conn.wants_recv() && !conn.ready_to_close());
        conn.send.push(bytes::Bytes::from_static(b"E..."));
        conn.stage = Stage::Flushing;
        assert!(!conn.wants_recv(), "no receives while flushing");
        assert!(!conn.ready_to_close());
        conn.send.clear();
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
        assert!(conn <= 216, "ClientConn is {conn} bytes");
        let state = size_of::<pgtier_engine::client::ClientState>();
        assert!(state <= 56, "ClientState is {state} bytes");
        let session = size_of::<pgtier_engine::client::Session>();
        assert!(session <= 296, "Session is {session} bytes");
    }
}
