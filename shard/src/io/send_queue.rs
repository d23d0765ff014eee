//! Outbound bytes of one socket as a queue of `Bytes` chunks, flushed with one send (single
//! chunk) or one sendmsg of at most `max_iovecs` chunks within a byte budget.
//!
//! Chunks are usually slices of another connection's receive buffer (ownership moves, no
//! copy). While a send is in flight the chunks it covers, the iovec array and the msghdr
//! belong to the kernel: nothing here pops, advances or rewrites them until `on_sent`.
//!
//! A client's queue that empties gives its memory back (the chunk ring and the sendmsg
//! arguments): most clients are idle most of the time, and an idle one should cost nothing
//! here. Its chunk ring goes to the shard's [`SpareRings`], where the next client that gets
//! an answer takes it: a ring allocated, grown and freed at every answer cost about 190
//! instructions per transaction (whole-process callgrind, pgbench -S). A server's queue keeps its memory: servers are few (the
//! pool bounds them) and busy.

use std::collections::VecDeque;

use bytes::{Buf, Bytes};

use crate::io::ring::Op;

/// Heap-pinned sendmsg arguments, reused for every send of this queue.
struct Batch {
    msg: libc::msghdr,
    iovecs: Vec<libc::iovec>,
}

pub(crate) struct SendQueue {
    chunks: VecDeque<Bytes>,
    queued_bytes: usize,
    /// Allocated for a multi-chunk send, kept until the queue empties.
    batch: Option<Box<Batch>>,
    /// True from `prepare` (the op was handed to the ring) until `on_sent` (its completion
    /// was reaped). While true the front chunks and `batch` belong to the kernel.
    in_flight: bool,
    /// Keep the chunk ring and the batch when the queue empties (a server's queue).
    keep_memory: bool,
}

/// A kept chunk ring larger than this is given back when the queue empties: a burst (a large
/// COPY into a server) must not pin its ring for the server's lifetime.
const KEPT_CHUNKS: usize = 16;

/// How many empty chunk rings a shard keeps for its clients' queues: about as many as it
/// has clients being answered at once (a few KiB when full).
const SPARE_RINGS: usize = 128;

/// Empty chunk rings of a shard's send queues, handed from a queue that emptied to the next
/// that fills, so that answering a client allocates nothing while no client holds memory
/// while idle.
#[derive(Default)]
pub(crate) struct SpareRings(Vec<VecDeque<Bytes>>);

impl SpareRings {
    fn take(&mut self) -> VecDeque<Bytes> {
        self.0.pop().unwrap_or_default()
    }

    /// Keeps `ring` for another queue if it is small and there is room; else frees it.
    fn give(&mut self, mut ring: VecDeque<Bytes>) {
        if ring.capacity() == 0 || ring.capacity() > KEPT_CHUNKS || self.0.len() >= SPARE_RINGS {
            return;
        }
        ring.clear();
        self.0.push(ring);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Default for SendQueue {
    fn default() -> Self {
        SendQueue::new()
    }
}

impl SendQueue {
    /// A queue that gives its memory back whenever it empties (a client's).
    pub fn new() -> SendQueue {
        SendQueue {
            chunks: VecDeque::new(),
            queued_bytes: 0,
            batch: None,
            in_flight: false,
            keep_memory: false,
        }
    }

    /// A queue that keeps its memory between sends (a server's), up to [`KEPT_CHUNKS`].
    pub fn keeping() -> SendQueue {
        SendQueue {
            keep_memory: true,
            ..SendQueue::new()
        }
    }

    /// Queues `chunk`; an empty queue without a ring takes one of `spares`.
    pub fn push(&mut self, chunk: Bytes, spares: &mut SpareRings) {
        if chunk.is_empty() {
            return;
        }
        if self.chunks.capacity() == 0 {
            self.chunks = spares.take();
        }
        self.queued_bytes += chunk.len();
        self.chunks.push_back(chunk);
    }

    #[cfg(test)]
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The op sending as much of the queue as fits in `max_iovecs` chunks and `budget_bytes`,
    /// or `None` when empty or a send is already in flight.
    pub fn prepare(&mut self, fd: i32, max_iovecs: usize, budget_bytes: usize) -> Option<Op> {
        if self.in_flight || self.chunks.is_empty() {
            return None;
        }
        self.in_flight = true;
        let first = &self.chunks[0];
        if self.chunks.len() == 1 || first.len() >= budget_bytes || max_iovecs <= 1 {
            let len = first.len().min(u32::MAX as usize) as u32;
            return Some(Op::Send {
                fd,
                buf: first.as_ptr(),
                len,
            });
        }
        let batch = self.batch.get_or_insert_with(|| {
            Box::new(Batch {
                // SAFETY: msghdr is plain old data; all-zero is its documented empty value.
                msg: unsafe { std::mem::zeroed() },
                iovecs: Vec::with_capacity(self.chunks.len().min(max_iovecs)),
            })
        });
        batch.iovecs.clear();
        let mut total = 0usize;
        for chunk in self.chunks.iter().take(max_iovecs) {
            if total > 0 && total + chunk.len() > budget_bytes {
                break;
            }
            batch.iovecs.push(libc::iovec {
                iov_base: chunk.as_ptr() as *mut libc::c_void,
                iov_len: chunk.len(),
            });
            total += chunk.len();
        }
        batch.msg.msg_iov = batch.iovecs.as_mut_ptr();
        batch.msg.msg_iovlen = batch.iovecs.len();
        Some(Op::SendMsg {
            fd,
            msg: &batch.msg,
        })
    }

    /// Consumes `sent` bytes from the front after a (possibly short) send completed.
    pub(crate) fn on_sent(&mut self, sent: usize, spares: &mut SpareRings) {
        assert!(self.in_flight, "send completion without a send in flight");
        self.in_flight = false;
        let mut left = sent.min(self.queued_bytes);
        self.queued_bytes -= left;
        while left > 0 {
            let Some(front) = self.chunks.front_mut() else {
                break;
            };
            if front.len() <= left {
                left -= front.len();
                self.chunks.pop_front();
            } else {
                front.advance(left);
                left = 0;
            }
        }
        if self.chunks.is_empty() && !(self.keep_memory && self.chunks.capacity() <= KEPT_CHUNKS) {
            self.release(spares);
        }
    }

    /// Gives back the chunk ring (to `spares`) and the batch's memory (nothing is in flight).
    fn release(&mut self, spares: &mut SpareRings) {
        spares.give(std::mem::take(&mut self.chunks));
        self.batch = None;
    }

    /// The send failed: the kernel is done with the buffers, nothing was consumed.
    pub(crate) fn on_failed(&mut self) {
        assert!(self.in_flight, "send failure without a send in flight");
        self.in_flight = false;
    }

    /// Drops everything not in flight (the peer is gone). Must not be called while in flight.
    pub fn clear(&mut self, spares: &mut SpareRings) {
        assert!(
            !self.in_flight,
            "clearing a send queue the kernel still reads"
        );
        self.queued_bytes = 0;
        self.release(spares);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op_bytes(op: Op) -> Vec<u8> {
        match op {
            Op::Send { buf, len, .. } => {
                // SAFETY: test reads the chunk the queue keeps alive while in flight.
                let bytes = unsafe { std::slice::from_raw_parts(buf, len as usize) };
                bytes.to_vec()
            }
            Op::SendMsg { msg, .. } => {
                // SAFETY: as above for the msghdr and its iovecs.
                let msg = unsafe { &*msg };
                let mut out = Vec::new();
                for i in 0..msg.msg_iovlen {
                    // SAFETY: msg_iovlen entries are valid.
                    let iov = unsafe { &*msg.msg_iov.add(i) };
                    // SAFETY: each points into a live chunk.
                    out.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(iov.iov_base as *const u8, iov.iov_len)
                    });
                }
                out
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn an_emptied_queue_holds_no_memory() {
        let mut spares = SpareRings::default();
        let mut queue = SendQueue::new();
        queue.push(Bytes::from_static(b"abc"), &mut spares);
        queue.push(Bytes::from_static(b"defg"), &mut spares);
        let op = queue.prepare(3, 8, 1 << 20).expect("op");
        assert!(matches!(op, Op::SendMsg { .. }));
        assert!(queue.batch.is_some() && queue.chunks.capacity() > 0);
        queue.on_sent(5, &mut spares);
        assert!(queue.batch.is_some(), "kept while bytes remain");
        assert!(queue.prepare(3, 8, 1 << 20).is_some());
        queue.on_sent(2, &mut spares);
        assert!(queue.is_empty());
        assert!(queue.batch.is_none());
        assert_eq!(queue.chunks.capacity(), 0);
    }

    #[test]
    fn an_emptied_clients_ring_is_taken_by_the_next_queue_that_fills() {
        let mut spares = SpareRings::default();
        let (mut first, mut second) = (SendQueue::new(), SendQueue::new());
        first.push(Bytes::from_static(b"abc"), &mut spares);
        let ring = first.chunks.as_slices().0.as_ptr();
        assert!(first.prepare(3, 8, 1 << 20).is_some());
        first.on_sent(3, &mut spares);
        assert_eq!(first.chunks.capacity(), 0, "the idle client holds no ring");
        assert_eq!(spares.len(), 1);
        second.push(Bytes::from_static(b"de"), &mut spares);
        assert_eq!(spares.len(), 0);
        assert_eq!(
            second.chunks.as_slices().0.as_ptr(),
            ring,
            "the same ring, no allocation"
        );
        assert!(second.prepare(3, 8, 1 << 20).is_some());
        second.on_sent(1, &mut spares);
        assert_eq!(spares.len(), 0, "kept while bytes remain");
    }

    #[test]
    fn a_servers_queue_keeps_its_memory_unless_a_burst_grew_it() {
        let mut spares = SpareRings::default();
        let mut queue = SendQueue::keeping();
        queue.push(Bytes::from_static(b"abc"), &mut spares);
        assert!(queue.prepare(3, 8, 1 << 20).is_some());
        queue.on_sent(3, &mut spares);
        assert!(queue.is_empty());
        let kept = queue.chunks.capacity();
        assert!(kept > 0, "the ring is kept for the next send");
        queue.push(Bytes::from_static(b"de"), &mut spares);
        assert_eq!(queue.chunks.capacity(), kept, "no new allocation");
        assert!(queue.prepare(3, 8, 1 << 20).is_some());
        queue.on_sent(2, &mut spares);

        for _ in 0..=KEPT_CHUNKS {
            queue.push(Bytes::from_static(b"x"), &mut spares);
        }
        assert!(queue.prepare(3, 64, 1 << 20).is_some());
        queue.on_sent(KEPT_CHUNKS + 1, &mut spares);
        assert!(queue.is_empty());
        assert_eq!(queue.chunks.capacity(), 0, "a burst's ring is given back");
        assert!(queue.batch.is_none());
    }

    #[test]
    fn single_chunk_uses_plain_send() {
        let mut spares = SpareRings::default();
        let mut queue = SendQueue::new();
        queue.push(Bytes::from_static(b"hello"), &mut spares);
        assert!(matches!(
            queue.prepare(3, 64, 1 << 16),
            Some(Op::Send { len: 5, .. })
        ));
        assert!(
            queue.prepare(3, 64, 1 << 16).is_none(),
            "one send at a time"
        );
        queue.on_sent(5, &mut spares);
        assert!(queue.is_empty());
    }

    #[test]
    fn short_send_resumes_at_the_right_offset() {
        let mut spares = SpareRings::default();
        let mut queue = SendQueue::new();
        queue.push(Bytes::from_static(b"abc"), &mut spares);
        queue.push(Bytes::from_static(b"defg"), &mut spares);
        queue.push(Bytes::from_static(b"hi"), &mut spares);
        let op = queue.prepare(3, 64, 1 << 16).expect("op");
        assert_eq!(op_bytes(op), b"abcdefghi");
        queue.on_sent(4, &mut spares); // "abc" + "d"
        let op = queue.prepare(3, 64, 1 << 16).expect("op");
        assert_eq!(op_bytes(op), b"efghi");
        queue.on_sent(5, &mut spares);
        assert!(queue.is_empty());
        assert_eq!(queue.queued_bytes(), 0);
    }

    #[test]
    fn batch_respects_iovec_and_byte_limits() {
        let mut spares = SpareRings::default();
        let mut queue = SendQueue::new();
        for _ in 0..100 {
            queue.push(Bytes::from_static(b"0123456789"), &mut spares);
        }
        let op = queue.prepare(3, 64, 1 << 20).expect("op");
        assert_eq!(op_bytes(op).len(), 640);
        queue.on_sent(640, &mut spares);
        let op = queue.prepare(3, 64, 25).expect("op");
        assert_eq!(
            op_bytes(op).len(),
            20,
            "budget stops after the chunk that fits"
        );
        queue.on_failed();
    }

    #[test]
    fn chunks_pushed_while_in_flight_keep_their_order() {
        let mut spares = SpareRings::default();
        let mut queue = SendQueue::new();
        queue.push(Bytes::from_static(b"ab"), &mut spares);
        queue.push(Bytes::from_static(b"cd"), &mut spares);
        let _op = queue.prepare(3, 64, 1 << 16);
        queue.push(Bytes::from_static(b"ef"), &mut spares);
        queue.on_sent(4, &mut spares);
        let op = queue.prepare(3, 64, 1 << 16).expect("op");
        assert_eq!(op_bytes(op), b"ef");
    }
}
