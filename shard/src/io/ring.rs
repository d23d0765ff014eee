//! The small interface the shard loop needs from a completion ring, so the loop runs over the
//! real io_uring (`uring::UringRing`) or over a scripted one in tests (`fake::FakeRing`).
//!
//! Ops carry raw pointers into heap buffers owned by a connection. From `push` until the
//! matching completion is reaped, that memory belongs to the kernel: the owner must neither
//! move, free nor touch it (the connection's in-flight flags enforce this).

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use crate::io::op_key::OpKey;

/// One operation to submit.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// Multishot accept: one completion per new connection, re-armed when MORE is absent.
    AcceptMulti { fd: RawFd },
    /// recv(2) into `len` bytes at `buf`.
    Recv { fd: RawFd, buf: *mut u8, len: u32 },
    /// Multishot recv(2) into the ring's provided buffers: one completion per arrival,
    /// each naming the buffer it filled (`Completion::buffer`), until one without MORE.
    RecvMulti { fd: RawFd },
    /// send(2) with MSG_NOSIGNAL of `len` bytes at `buf`.
    Send { fd: RawFd, buf: *const u8, len: u32 },
    /// sendmsg(2) with MSG_NOSIGNAL; `msg` and its iovecs stay valid until completion.
    SendMsg { fd: RawFd, msg: *const libc::msghdr },
    /// connect(2) to the address at `addr`, valid until completion.
    Connect {
        fd: RawFd,
        addr: *const libc::sockaddr,
        len: libc::socklen_t,
    },
    /// read(2), used for the mailbox eventfd.
    Read { fd: RawFd, buf: *mut u8, len: u32 },
    /// close(2) of a descriptor nobody references any more.
    Close { fd: RawFd },
    /// AsyncCancel of the operation submitted with `target`.
    Cancel { target: u64 },
}

/// One reaped completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    pub user_data: u64,
    pub result: i32,
    pub flags: u32,
}

/// Bit in `Completion::flags`: the completion names a provided buffer (upper 16 bits).
pub(crate) const CQE_F_BUFFER: u32 = 1;
/// Bit in `Completion::flags`: a multishot operation stays armed and will post again.
pub(crate) const CQE_F_MORE: u32 = 1 << 1;
/// Where a provided buffer's id sits in `Completion::flags`.
pub(crate) const CQE_BUFFER_SHIFT: u32 = 16;

impl Completion {
    pub fn more(&self) -> bool {
        self.flags & CQE_F_MORE != 0
    }

    /// The provided buffer this completion filled, which must go back to the ring.
    pub fn buffer(&self) -> Option<u16> {
        (self.flags & CQE_F_BUFFER != 0).then_some((self.flags >> CQE_BUFFER_SHIFT) as u16)
    }
}

/// What the shard loop needs from a ring.
pub trait Ring {
    /// Queues `op`; when the submission queue is full the ring flushes it to the kernel
    /// and retries, so this only fails if the kernel refuses the flush.
    ///
    /// # Safety
    /// Every pointer in `op` must stay valid, and its memory untouched by anyone else, until
    /// the completion of this op is reaped (for a multishot op, its last completion): from
    /// now on that memory belongs to the kernel.
    unsafe fn push(&mut self, key: OpKey, op: Op) -> io::Result<()>;

    /// Submits everything queued and waits for at least one completion, or until `timeout`.
    /// With `wait == false` it only submits.
    fn submit_and_wait(&mut self, wait: bool, timeout: Option<Duration>) -> io::Result<()>;

    /// Moves every available completion into `out`.
    fn reap(&mut self, out: &mut Vec<Completion>);

    /// The first `len` bytes of provided buffer `bid`, as the kernel filled them.
    fn provided(&self, bid: u16, len: usize) -> &[u8];

    /// Gives provided buffer `bid` back to the kernel; every buffer a completion names must
    /// come back, whatever became of the completion.
    fn recycle(&mut self, bid: u16);
}
