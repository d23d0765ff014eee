//! A scripted ring for tests: it records submissions and lets a test decide, one by one, how
//! each completes — short sends, resets, cancellations, reordering, ENOBUFS, multishot ops
//! ending without MORE — while touching the submitted buffers the way the kernel would.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use crate::io::op_key::OpKey;
use crate::io::ring::{CQE_BUFFER_SHIFT, CQE_F_BUFFER, CQE_F_MORE, Completion, Op, Ring};

/// Provided buffers the fake lends, and their size.
const FAKE_BUFFERS: usize = 8;
const FAKE_BUFFER_BYTES: usize = 4096;

/// One submitted, not yet completed operation.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub key: OpKey,
    pub op: Op,
}

#[derive(Default)]
pub(crate) struct FakeRing {
    /// Submitted and not yet completed, in submission order.
    pub pending: Vec<Pending>,
    /// Completions a test has produced and the shard has not yet reaped.
    ready: VecDeque<Completion>,
    /// Bytes "sent" per fd, in order, for assertions.
    pub sent: Vec<(i32, Vec<u8>)>,
    /// How many times the shard asked to submit.
    pub submits: usize,
    /// Descriptors the shard closed through the ring, in order.
    pub closed: Vec<i32>,
    /// The provided buffers, and which of them a completion lent out and the shard has not
    /// given back yet.
    buffers: Vec<Vec<u8>>,
    pub lent: Vec<u16>,
}

impl FakeRing {
    pub fn new() -> FakeRing {
        FakeRing {
            buffers: vec![vec![0; FAKE_BUFFER_BYTES]; FAKE_BUFFERS],
            ..FakeRing::default()
        }
    }

    /// Removes and returns the first pending op matching `pred`.
    pub fn take(&mut self, pred: impl Fn(&Pending) -> bool) -> Option<Pending> {
        let at = self.pending.iter().position(pred)?;
        Some(self.pending.remove(at))
    }

    pub fn has(&self, pred: impl Fn(&Pending) -> bool) -> bool {
        self.pending.iter().any(pred)
    }

    /// Posts a completion for `pending` with a raw result (`-errno` for failures).
    pub fn complete(&mut self, pending: Pending, result: i32, more: bool) {
        let flags = if more { CQE_F_MORE } else { 0 };
        self.ready.push_back(Completion {
            user_data: pending.key.encode(),
            result,
            flags,
        });
    }

    /// Posts a completion for a multishot op that stays pending (MORE set).
    pub(crate) fn complete_multishot(&mut self, pending: &Pending, result: i32) {
        self.ready.push_back(Completion {
            user_data: pending.key.encode(),
            result,
            flags: CQE_F_MORE,
        });
    }

    /// Completes a Recv by copying `data` into the submitted buffer, as the kernel would; a
    /// multishot RecvMulti gets it in a provided buffer and stays armed.
    pub fn deliver(&mut self, pending: Pending, data: &[u8]) {
        if let Op::RecvMulti { .. } = pending.op {
            let bid = (0..FAKE_BUFFERS as u16)
                .find(|bid| !self.lent.contains(bid))
                .expect("a free provided buffer");
            let n = data.len().min(FAKE_BUFFER_BYTES);
            self.buffers[usize::from(bid)][..n].copy_from_slice(&data[..n]);
            self.lent.push(bid);
            self.ready.push_back(Completion {
                user_data: pending.key.encode(),
                result: n as i32,
                flags: CQE_F_BUFFER | CQE_F_MORE | (u32::from(bid) << CQE_BUFFER_SHIFT),
            });
            self.pending.push(pending);
            return;
        }
        let Op::Recv { buf, len, .. } = pending.op else {
            panic!("deliver on a non-recv op {pending:?}");
        };
        let n = data.len().min(len as usize);
        // SAFETY: the shard keeps `len` bytes at `buf` reserved for this recv until its
        // completion is reaped, exactly the contract the kernel relies on.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
        self.complete(pending, n as i32, false);
    }

    /// Completes a Send/SendMsg after "sending" at most `limit` bytes; returns what was sent.
    pub(crate) fn accept_send(&mut self, pending: Pending, limit: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        match pending.op {
            Op::Send { buf, len, fd } => {
                let n = (len as usize).min(limit);
                // SAFETY: the shard keeps the buffer alive and unchanged until completion.
                bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(buf, n) });
                self.sent.push((fd, bytes.clone()));
            }
            Op::SendMsg { msg, fd } => {
                // SAFETY: as above, for the msghdr and every iovec it lists.
                let msg = unsafe { &*msg };
                for i in 0..msg.msg_iovlen {
                    // SAFETY: msg_iov has msg_iovlen valid entries.
                    let iov = unsafe { &*msg.msg_iov.add(i) };
                    let room = limit - bytes.len();
                    let n = iov.iov_len.min(room);
                    // SAFETY: each iovec points to live bytes owned by the send queue.
                    let part = unsafe { std::slice::from_raw_parts(iov.iov_base as *const u8, n) };
                    bytes.extend_from_slice(part);
                    if bytes.len() == limit {
                        break;
                    }
                }
                self.sent.push((fd, bytes.clone()));
            }
            other => panic!("accept_send on {other:?}"),
        }
        let n = bytes.len() as i32;
        self.complete(pending, n, false);
        bytes
    }

    /// Reverses the order of ready completions (the kernel does not promise any order
    /// between different sockets).
    pub(crate) fn reorder_ready(&mut self) {
        let mut items: Vec<_> = self.ready.drain(..).collect();
        items.reverse();
        self.ready.extend(items);
    }
}

impl Ring for FakeRing {
    unsafe fn push(&mut self, key: OpKey, op: Op) -> io::Result<()> {
        if let Op::Cancel { target } = op {
            // Like the kernel: the target completes with ECANCELED, the cancel itself with 0.
            if let Some(at) = self.pending.iter().position(|p| p.key.encode() == target) {
                let victim = self.pending.remove(at);
                self.complete(victim, -libc::ECANCELED, false);
                self.ready.push_back(Completion {
                    user_data: key.encode(),
                    result: 0,
                    flags: 0,
                });
            } else {
                self.ready.push_back(Completion {
                    user_data: key.encode(),
                    result: -libc::ENOENT,
                    flags: 0,
                });
            }
            return Ok(());
        }
        if let Op::Close { fd } = op {
            self.closed.push(fd);
            self.ready.push_back(Completion {
                user_data: key.encode(),
                result: 0,
                flags: 0,
            });
            return Ok(());
        }
        self.pending.push(Pending { key, op });
        Ok(())
    }

    fn submit_and_wait(&mut self, _wait: bool, _timeout: Option<Duration>) -> io::Result<()> {
        self.submits += 1;
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>) {
        out.extend(self.ready.drain(..));
    }

    fn provided(&self, bid: u16, len: usize) -> &[u8] {
        &self.buffers[usize::from(bid)][..len.min(FAKE_BUFFER_BYTES)]
    }

    fn recycle(&mut self, bid: u16) {
        let at = self
            .lent
            .iter()
            .position(|lent| *lent == bid)
            .expect("a buffer given back twice, or never lent");
        self.lent.remove(at);
    }
}
