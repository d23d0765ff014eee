//! A socket's receive buffer: a `BytesMut` the kernel fills through one recv at a time.
//!
//! Complete messages leave it by `split_to(..).freeze()` (ownership moves to a send queue); the
//! remaining capacity is reused in place once those `Bytes` are dropped, so the steady state
//! allocates nothing.

use bytes::BytesMut;

use crate::io::ring::Op;

pub struct RecvBuf {
    pub data: BytesMut,
    /// True from `prepare` until `on_received`/`on_failed`: the spare capacity belongs to the
    /// kernel, so `data` must not grow, shrink or be replaced.
    in_flight: bool,
    /// Allocation size used when the buffer needs fresh room.
    chunk_bytes: usize,
}

impl RecvBuf {
    /// No memory is allocated until the first `prepare`.
    pub fn new(chunk_bytes: usize) -> RecvBuf {
        RecvBuf {
            data: BytesMut::new(),
            in_flight: false,
            chunk_bytes,
        }
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The recv op into the spare capacity, reserving at least `min_free` bytes first.
    pub fn prepare(&mut self, fd: i32, min_free: usize) -> Op {
        assert!(!self.in_flight, "a second recv on one buffer");
        let want = min_free.max(1);
        if self.data.capacity() - self.data.len() < want {
            self.data.reserve(want.max(self.chunk_bytes));
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
    pub fn on_received(&mut self, n: usize) {
        assert!(self.in_flight, "recv completion without a recv in flight");
        self.in_flight = false;
        let spare = self.data.capacity() - self.data.len();
        assert!(n <= spare, "kernel reported more bytes than it was given");
        // SAFETY: the kernel initialised exactly `n` bytes of the spare capacity we handed it.
        unsafe { self.data.set_len(self.data.len() + n) };
    }

    /// A receive completed with `result`: bytes (`> 0`), the end of the stream (0) or an
    /// error (`< 0`).
    pub fn on_failed_or_received(&mut self, result: i32) {
        match usize::try_from(result) {
            Ok(received) if received > 0 => self.on_received(received),
            _ => self.on_failed(),
        }
    }

    pub fn on_failed(&mut self) {
        assert!(self.in_flight, "recv failure without a recv in flight");
        self.in_flight = false;
    }

    /// Gives memory back after a burst (e.g. an idle client that once sent a large query).
    pub fn shrink_if_idle(&mut self, keep_bytes: usize) {
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
