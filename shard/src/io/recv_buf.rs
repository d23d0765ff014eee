//! A socket's receive side, in one of two kinds:
//!
//! - **Own buffer**: a `BytesMut` the kernel fills through one recv at a time. Complete
//!   messages leave it by `split_to(..).freeze()` (ownership moves to a send queue); the
//!   remaining capacity is reused in place once those `Bytes` are dropped, so a stream
//!   allocates nothing and copies nothing in user space.
//! - **Provided buffers**: one multishot recv stays armed on the ring's shared
//!   provided-buffer group (`buf_ring`); the kernel picks a buffer only when data arrives
//!   and the shard copies the bytes out at once. An idle connection holds no receive memory,
//!   and no receive is armed again per message.
//!
//! Clients always use provided buffers. A server switches between the two with its traffic
//! ([`RecvBuf::server`]): most answers are small, and for them the multishot saves arming a
//! receive (a poll, in the kernel) per transaction; a large result fills provided buffers
//! whole, and for it the own buffer saves a copy and a completion per 4 KiB. A full provided
//! buffer switches to the own buffer (the multishot is cancelled), and an own receive that
//! returns less than one provided buffer switches back.

use bytes::BytesMut;

use crate::io::ring::Op;

/// Where received bytes land.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecvKind {
    /// The connection's own buffer, grown by `chunk_bytes` when it needs room.
    Own,
    /// The ring's provided buffers, through a multishot recv.
    Provided,
}

pub(crate) struct RecvBuf {
    /// Received bytes not yet handed on (own-buffer kind only; empty for provided). A
    /// server also copies its provided bytes through it (`copy_provided`), so the copy
    /// reuses one allocation.
    pub data: BytesMut,
    /// The own buffer's growth step.
    chunk_bytes: u32,
    /// A server's provided completion this large (one full provided buffer) is a stream.
    stream_bytes: u32,
    /// Own buffer: true from `prepare` until its completion, and the spare capacity belongs
    /// to the kernel, so `data` must not grow, shrink or be replaced. Provided: true from
    /// `prepare` until a completion without MORE (the multishot is armed).
    in_flight: bool,
    /// The kind of the receive in flight (or of the last one).
    kind: RecvKind,
    /// A server's kind for the next receive armed (see the module doc); `None`: the kind
    /// never changes.
    next: Option<RecvKind>,
}

impl RecvBuf {
    /// An own buffer that never switches (unit tests of the own kind); no memory is
    /// allocated until the first `prepare`.
    #[cfg(test)]
    pub fn new(chunk_bytes: usize) -> RecvBuf {
        RecvBuf {
            data: BytesMut::new(),
            chunk_bytes: u32::try_from(chunk_bytes).unwrap_or(u32::MAX),
            stream_bytes: 0,
            in_flight: false,
            kind: RecvKind::Own,
            next: None,
        }
    }

    /// A server's receive: provided buffers of `provided_bytes` while answers are small,
    /// its own buffer (grown by `chunk_bytes`) while a large one streams in.
    pub fn server(chunk_bytes: usize, provided_bytes: usize) -> RecvBuf {
        RecvBuf {
            data: BytesMut::new(),
            chunk_bytes: u32::try_from(chunk_bytes).unwrap_or(u32::MAX),
            stream_bytes: u32::try_from(provided_bytes).unwrap_or(u32::MAX),
            in_flight: false,
            kind: RecvKind::Provided,
            next: Some(RecvKind::Provided),
        }
    }

    /// Receives into the ring's provided buffers; never allocates.
    pub fn provided() -> RecvBuf {
        RecvBuf {
            data: BytesMut::new(),
            chunk_bytes: 0,
            stream_bytes: 0,
            in_flight: false,
            kind: RecvKind::Provided,
            next: None,
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
        if let Some(next) = self.next {
            if next == RecvKind::Provided && self.kind == RecvKind::Own && self.data.is_empty() {
                // A stream ended: the own buffer is not kept for the next one.
                self.data = BytesMut::new();
            }
            self.kind = next;
        }
        if self.kind == RecvKind::Provided {
            self.in_flight = true;
            return Op::RecvMulti { fd };
        }
        let want = min_free.max(1);
        if self.data.capacity() - self.data.len() < want {
            self.data.reserve(want.max(self.chunk_bytes as usize));
        }
        self.in_flight = true;
        let spare = self.data.spare_capacity_mut();
        Op::Recv {
            fd,
            buf: spare.as_mut_ptr().cast::<u8>(),
            len: spare.len().min(u32::MAX as usize) as u32,
        }
    }

    /// A server's bytes from a provided buffer, copied into its own buffer and split off:
    /// the buffer is reused in place once the bytes handed on are dropped, so small answers
    /// allocate nothing in the steady state. Only while no own receive is in flight.
    pub(crate) fn copy_provided(&mut self, bytes: &[u8]) -> BytesMut {
        debug_assert!(
            self.kind == RecvKind::Provided,
            "the own buffer is the kernel's"
        );
        if self.data.capacity() - self.data.len() < bytes.len() {
            self.data
                .reserve(bytes.len().max(self.stream_bytes as usize));
        }
        self.data.extend_from_slice(bytes);
        self.data.split()
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
    ///
    /// Returns true when a server's multishot, still armed, should be cancelled: it filled
    /// a provided buffer, so a stream is coming, which the own buffer takes from the next
    /// receive on.
    #[must_use]
    pub(crate) fn on_completion(&mut self, result: i32, more: bool) -> bool {
        let received = usize::try_from(result).unwrap_or(0);
        if self.kind == RecvKind::Provided {
            assert!(self.in_flight, "recv completion without a recv armed");
            self.in_flight = more;
            if self.next != Some(RecvKind::Provided) || received < self.stream_bytes as usize {
                return false;
            }
            self.next = Some(RecvKind::Own);
            return more;
        }
        if received == 0 {
            self.on_failed();
            return false;
        }
        self.on_received(received);
        if self.next.is_some() && received < self.stream_bytes as usize {
            // Less than one provided buffer: the stream ended (or trickles), and the
            // multishot costs no more to arm than the next own receive.
            self.next = Some(RecvKind::Provided);
        }
        false
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
        assert!(!buf.on_completion(100, true));
        assert!(buf.in_flight(), "still armed");
        assert_eq!(buf.data.capacity(), 0, "never allocates");
        assert!(!buf.on_completion(-libc::ENOBUFS, false));
        assert!(!buf.in_flight());
    }

    #[test]
    fn a_server_streams_into_its_own_buffer_and_goes_back_to_provided_after() {
        let mut buf = RecvBuf::server(64 * 1024, 4096);
        assert!(matches!(buf.prepare(5, 16), Op::RecvMulti { fd: 5 }));
        assert!(
            !buf.on_completion(90, true),
            "a small answer keeps the multishot"
        );
        assert!(buf.on_completion(4096, true), "a full buffer cancels it");
        assert!(!buf.on_completion(4096, true), "cancelled once");
        assert!(buf.in_flight(), "armed until its last completion");
        assert!(!buf.on_completion(-libc::ECANCELED, false));
        let Op::Recv { len, .. } = buf.prepare(5, 16) else {
            panic!("the own buffer next")
        };
        assert!(len as usize >= 64 * 1024);
        assert!(!buf.on_completion(65536, false));
        buf.data.clear();
        assert!(
            matches!(buf.prepare(5, 16), Op::Recv { .. }),
            "still streaming"
        );
        assert!(!buf.on_completion(200, false));
        buf.data.clear();
        assert!(
            matches!(buf.prepare(5, 16), Op::RecvMulti { .. }),
            "the stream ended"
        );
        assert_eq!(buf.data.capacity(), 0, "the own buffer is not kept");
    }

    #[test]
    fn a_multishot_that_ends_by_itself_after_a_full_buffer_still_switches() {
        let mut buf = RecvBuf::server(64 * 1024, 4096);
        let _ = buf.prepare(5, 16);
        assert!(!buf.on_completion(4096, false), "nothing left to cancel");
        assert!(matches!(buf.prepare(5, 16), Op::Recv { .. }));
        assert!(!buf.on_completion(0, false), "end of stream");
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
