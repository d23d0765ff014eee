//! A socket's receive side, in one of two kinds:
//!
//! - **Own buffer** (servers): a `BytesMut` the kernel fills through one recv at a time.
//!   Complete messages leave it by `split_to(..).freeze()` (ownership moves to a send
//!   queue); the remaining capacity is reused in place once those `Bytes` are dropped, so
//!   the steady state allocates nothing. Servers are few and carry the large results, so
//!   each keeps a buffer sized for throughput.
//! - **Provided buffers** (clients): one multishot recv stays armed on the ring's shared
//!   provided-buffer group (`buf_ring`); the kernel picks a buffer only when data arrives
//!   and the shard copies the bytes out at once. An idle client holds no receive memory.

use bytes::BytesMut;

use crate::io::ring::Op;

/// Where received bytes land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvKind {
    /// The connection's own buffer, grown by `chunk_bytes` when it needs room.
    Own { chunk_bytes: u32 },
    /// The ring's provided buffers, through a multishot recv.
    Provided,
}

pub(crate) struct RecvBuf {
    /// Received bytes not yet handed on (own-buffer kind only; empty for provided).
    pub data: BytesMut,
    /// Own buffer: true from `prepare` until its completion, and the spare capacity belongs
    /// to the kernel, so `data` must not grow, shrink or be replaced. Provided: true from
    /// `prepare` until a completion without MORE (the multishot is armed).
    in_flight: bool,
    kind: RecvKind,
}

impl RecvBuf {
    /// No memory is allocated until the first `prepare`.
    pub fn new(chunk_bytes: usize) -> RecvBuf {
        RecvBuf {
            data: BytesMut::new(),
            in_flight: false,
            kind: RecvKind::Own {
                chunk_bytes: u32::try_from(chunk_bytes).unwrap_or(u32::MAX),
            },
        }
    }

    /// Receives into the ring's provided buffers; never allocates.
    pub fn provided() -> RecvBuf {
        RecvBuf {
            data: BytesMut::new(),
            in_flight: false,
            kind: RecvKind::Provided,
        }
    }

    pub fn kind(&self) -> RecvKind {
        self.kind
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The recv op: for an own buffer into its spare capacity, reserving at least
    /// `min_free` bytes first; for provided buffers the multishot.
    pub fn prepare(&mut self, fd: i32, min_free: usize) -> Op {
        assert!(!self.in_flight, "a second recv on one buffer");
        let RecvKind::Own { chunk_bytes } = self.kind else {
            self.in_flight = true;
            return Op::RecvMulti { fd };
        };
        let want = min_free.max(1);
        if self.data.capacity() - self.data.len() < want {
            self.data.reserve(want.max(chunk_bytes as usize));
        }
        self.in_flight = true;
        let spare = self.data.spare_capacity_mut();
        Op::Recv {
            fd,
            buf: spare.as_mut_ptr().cast::<u8>(),
            len: spare.len().min(u32::MAX as usize) as u32,
        }
    }

    /// The kernel wrote `n` bytes after the old end.
    pub(crate) fn on_received(&mut self, n: usize) {
        assert!(self.in_flight, "recv completion without a recv in flight");
        self.in_flight = false;
        let spare = self.data.capacity() - self.data.len();
        assert!(n <= spare, "kernel reported more bytes than it was given");
        // SAFETY: the kernel initialised exactly `n` bytes of the spare capacity we handed it.
        unsafe { self.data.set_len(self.data.len() + n) };
    }

    /// A receive completed with `result`: bytes (`> 0`), the end of the stream (0) or an
    /// error (`< 0`); `more` says a multishot stays armed. Provided-buffer bytes are the
    /// caller's to copy out; only the in-flight state changes here.
    pub(crate) fn on_completion(&mut self, result: i32, more: bool) {
        if self.kind == RecvKind::Provided {
            assert!(self.in_flight, "recv completion without a recv armed");
            self.in_flight = more;
            return;
        }
        match usize::try_from(result) {
            Ok(received) if received > 0 => self.on_received(received),
            _ => self.on_failed(),
        }
    }

    pub(crate) fn on_failed(&mut self) {
        assert!(self.in_flight, "recv failure without a recv in flight");
        self.in_flight = false;
    }

    /// Gives memory back after a burst (e.g. an idle client that once sent a large query).
    pub(crate) fn shrink_if_idle(&mut self, keep_bytes: usize) {
        if !self.in_flight && self.data.is_empty() && self.data.capacity() > keep_bytes {
            self.data = BytesMut::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_bytes_become_visible() {
        let mut buf = RecvBuf::new(64);
        let Op::Recv { buf: ptr, len, .. } = buf.prepare(5, 16) else {
            panic!()
        };
        assert!(len >= 16);
        // SAFETY: emulates the kernel writing into the spare capacity.
        unsafe { std::ptr::copy_nonoverlapping(b"hey".as_ptr(), ptr, 3) };
        buf.on_received(3);
        assert_eq!(&buf.data[..], b"hey");
    }

    #[test]
    #[should_panic(expected = "a second recv")]
    fn double_arm_is_a_bug() {
        let mut buf = RecvBuf::new(64);
        let _ = buf.prepare(5, 16);
        let _ = buf.prepare(5, 16);
    }

    #[test]
    fn a_provided_receive_stays_armed_until_a_completion_without_more() {
        let mut buf = RecvBuf::provided();
        assert!(matches!(buf.prepare(5, 16), Op::RecvMulti { fd: 5 }));
        buf.on_completion(100, true);
        assert!(buf.in_flight(), "still armed");
        assert_eq!(buf.data.capacity(), 0, "never allocates");
        buf.on_completion(-libc::ENOBUFS, false);
        assert!(!buf.in_flight());
    }

    #[test]
    fn split_off_bytes_keep_the_tail_reusable() {
        let mut buf = RecvBuf::new(64);
        let _ = buf.prepare(5, 16);
        buf.on_received(0);
        buf.data.extend_from_slice(b"0123456789");
        let sent = buf.data.split_to(10).freeze();
        drop(sent);
        let cap_before = buf.data.capacity();
        let _ = buf.prepare(5, 8);
        assert!(buf.data.capacity() >= cap_before.min(8));
        buf.on_failed();
    }
}
