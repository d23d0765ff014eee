//! The real ring: io_uring with the best setup flags this kernel accepts.

use std::io;
use std::time::Duration;

use io_uring::{IoUring, opcode, squeue, types};
use tracing::{debug, warn};

use crate::io::buf_ring::BufRing;
use crate::io::op_key::OpKey;
use crate::io::ring::{Completion, Op, Ring};

/// Which setup flags the ring ended up with, for the startup log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingFlavor {
    SingleIssuerDeferTaskrun,
    CoopTaskrun,
    Plain,
}

impl std::fmt::Display for RingFlavor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RingFlavor::SingleIssuerDeferTaskrun => "single issuer, deferred task running",
            RingFlavor::CoopTaskrun => "cooperative task running",
            RingFlavor::Plain => "plain",
        })
    }
}

/// IORING_RECVSEND_POLL_FIRST (not re-exported by the io-uring crate).
const RECVSEND_POLL_FIRST: u16 = 1;

/// The provided-buffer group clients receive into (one per ring).
const CLIENT_RECV_GROUP: u16 = 0;

/// How many receive buffers the ring lends to the kernel, and their size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvBuffers {
    pub count: u16,
    pub size: u32,
}

pub struct UringRing {
    // Field order matters: the ring (and with it the kernel's use of the buffer ring) is
    // dropped before the buffers it may write into.
    ring: IoUring,
    buffers: BufRing,
    flavor: RingFlavor,
    cq_overflow_seen: u32,
}

impl UringRing {
    /// Builds a ring with `entries` submission slots (completion queue twice that), trying
    /// SINGLE_ISSUER|DEFER_TASKRUN, then COOP_TASKRUN, then no flags. The caller must use
    /// the ring only from the thread that built it (SINGLE_ISSUER).
    pub fn new(entries: u32, recv: RecvBuffers) -> Result<UringRing, String> {
        type Configure = fn(&mut io_uring::Builder);
        let attempts: [(RingFlavor, Configure); 3] = [
            (RingFlavor::SingleIssuerDeferTaskrun, |b| {
                b.setup_single_issuer().setup_defer_taskrun();
            }),
            (RingFlavor::CoopTaskrun, |b| {
                b.setup_coop_taskrun();
            }),
            (RingFlavor::Plain, |_| {}),
        ];
        let mut last_error = None;
        for (flavor, configure) in attempts {
            let mut builder = IoUring::builder();
            builder.setup_cqsize(entries.saturating_mul(2));
            configure(&mut builder);
            match builder.build(entries) {
                Ok(ring) => {
                    if !ring.params().is_feature_nodrop() {
                        warn!("io_uring lacks FEAT_NODROP: completions may be lost under overload");
                    }
                    let buffers = register_buffers(&ring, recv)?;
                    debug!(?flavor, entries, ?recv, "io_uring ready");
                    return Ok(UringRing {
                        ring,
                        buffers,
                        flavor,
                        cq_overflow_seen: 0,
                    });
                }
                Err(error) => {
                    if matches!(error.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EPERM)) {
                        return Err(unavailable_message(&error));
                    }
                    last_error = Some(error);
                }
            }
        }
        Err(match last_error {
            Some(error) => unavailable_message(&error),
            None => "io_uring setup failed".to_string(),
        })
    }

    pub fn flavor(&self) -> RingFlavor {
        self.flavor
    }

    fn entry(key: OpKey, op: Op) -> squeue::Entry {
        let entry = match op {
            Op::AcceptMulti { fd } => opcode::AcceptMulti::new(types::Fd(fd))
                .flags(libc::SOCK_CLOEXEC)
                .build(),
            // POLL_FIRST: a socket is only re-armed after its data was consumed, so the
            // kernel's first non-blocking attempt would almost always fail; go straight to poll.
            Op::Recv { fd, buf, len } => opcode::Recv::new(types::Fd(fd), buf, len)
                .ioprio(RECVSEND_POLL_FIRST)
                .build(),
            Op::RecvMulti { fd } => {
                opcode::RecvMulti::new(types::Fd(fd), CLIENT_RECV_GROUP).build()
            }
            Op::Send { fd, buf, len } => opcode::Send::new(types::Fd(fd), buf, len)
                .flags(libc::MSG_NOSIGNAL)
                .build(),
            Op::SendMsg { fd, msg } => opcode::SendMsg::new(types::Fd(fd), msg)
                .flags(libc::MSG_NOSIGNAL as u32)
                .build(),
            Op::Connect { fd, addr, len } => opcode::Connect::new(types::Fd(fd), addr, len).build(),
            Op::Read { fd, buf, len } => opcode::Read::new(types::Fd(fd), buf, len).build(),
            Op::Close { fd } => opcode::Close::new(types::Fd(fd)).build(),
            Op::Cancel { target } => opcode::AsyncCancel::new(target).build(),
        };
        entry.user_data(key.encode())
    }

    fn note_overflow(&mut self) {
        let overflow = self.ring.completion().overflow();
        if overflow != self.cq_overflow_seen {
            self.cq_overflow_seen = overflow;
            warn!(
                overflow,
                "io_uring completion queue overflowed; raise pgtier.ring_entries"
            );
        }
    }
}

/// Maps the provided-buffer ring and registers it with `ring`.
fn register_buffers(ring: &IoUring, recv: RecvBuffers) -> Result<BufRing, String> {
    let buffers = BufRing::new(recv.count, recv.size, CLIENT_RECV_GROUP)
        .map_err(|error| format!("receive buffer ring: {error}"))?;
    // SAFETY: the entry array stays mapped until `buffers` drops, which `UringRing`'s field
    // order puts after the ring itself.
    unsafe {
        ring.submitter().register_buf_ring_with_flags(
            buffers.register_addr(),
            buffers.count(),
            buffers.group,
            0,
        )
    }
    .map_err(|error| {
        format!(
            "io_uring provided-buffer rings are unavailable ({error}): pgtier needs Linux >= 6.1"
        )
    })?;
    Ok(buffers)
}

fn unavailable_message(error: &io::Error) -> String {
    if error.raw_os_error() == Some(libc::ENOMEM) {
        // Ring memory counts against the locked-memory limit of the user (summed over all of
        // its processes), not the machine's free memory: say which knob it is.
        return format!(
            "io_uring could not set up its ring ({error}): the rings count against the \
             locked-memory limit of the user pgtier runs as, summed over its processes \
             (RLIMIT_MEMLOCK, `ulimit -l`; systemd's LimitMEMLOCK=). Raise it, or lower \
             `ring_entries` (each shard's ring takes about ring_entries x 100 bytes)"
        );
    }
    format!(
        "io_uring is unavailable ({error}). pgtier needs io_uring: on Linux >= 6.1 set \
         `sysctl kernel.io_uring_disabled=0` (or 1 and run as a member of \
         kernel.io_uring_group), and in containers allow the io_uring_setup, io_uring_enter \
         and io_uring_register syscalls in the seccomp profile (e.g. docker \
         --security-opt seccomp=unconfined)"
    )
}

impl Ring for UringRing {
    unsafe fn push(&mut self, key: OpKey, op: Op) -> io::Result<()> {
        let entry = Self::entry(key, op);
        loop {
            // SAFETY: the caller guarantees (this function's contract) that every pointer in
            // `op` stays valid and untouched until the op's completion is reaped.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok(());
            }
            // The submission queue is full: hand what we have to the kernel and retry.
            debug!("submission queue full; flushing (consider raising pgtier.ring_entries)");
            self.ring.submit()?;
        }
    }

    fn submit_and_wait(&mut self, wait: bool, timeout: Option<Duration>) -> io::Result<()> {
        let result = match (wait, timeout) {
            (false, _) => self.ring.submit(),
            (true, None) => self.ring.submit_and_wait(1),
            (true, Some(timeout)) => {
                let ts = types::Timespec::from(timeout);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(error) => match error.raw_os_error() {
                // The timeout passed, a signal arrived, or the CQ is busy: the loop just goes on.
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {
                    Ok(())
                }
                _ => Err(error),
            },
        }
    }

    fn reap(&mut self, out: &mut Vec<Completion>) {
        self.note_overflow();
        for cqe in self.ring.completion() {
            out.push(Completion {
                user_data: cqe.user_data(),
                result: cqe.result(),
                flags: cqe.flags(),
            });
        }
    }

    fn provided(&self, bid: u16, len: usize) -> &[u8] {
        self.buffers.filled(bid, len)
    }

    fn recycle(&mut self, bid: u16) {
        self.buffers.recycle(bid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::op_key::OpKind;

    /// ENOMEM from io_uring_setup is the user's locked-memory limit, not free memory: the
    /// message names the limit and the setting that shrinks the ring.
    #[test]
    fn a_ring_refused_for_memory_names_the_locked_memory_limit() {
        let message = unavailable_message(&io::Error::from_raw_os_error(libc::ENOMEM));
        assert!(message.contains("RLIMIT_MEMLOCK"), "{message}");
        assert!(message.contains("ring_entries"), "{message}");
        let other = unavailable_message(&io::Error::from_raw_os_error(libc::EINVAL));
        assert!(other.contains("io_uring_disabled"), "{other}");
    }

    /// A ring whose completion queue is far smaller than the burst it gets: with the kernel's
    /// FEAT_NODROP every completion must still be reaped, none lost or duplicated.
    #[test]
    fn completion_queue_overflow_loses_nothing() {
        // 4 submission entries, so 8 completion entries: the burst of 64 completions below is
        // posted while nobody reaps, so most of it lands in the kernel's overflow list.
        let Ok(mut ring) = UringRing::new(4, RecvBuffers { count: 4, size: 64 }) else {
            return; // io_uring unavailable here: covered by the startup error test instead.
        };
        const BURST: u32 = 64;
        for slot in 0..BURST {
            // Cancelling an operation that does not exist completes at once with ENOENT.
            let key = OpKey::new(OpKind::ClientRecv, slot, 0);
            // SAFETY: a cancel carries no pointer.
            unsafe {
                ring.push(
                    key,
                    Op::Cancel {
                        target: u64::MAX - u64::from(slot),
                    },
                )
            }
            .expect("push");
        }
        ring.submit_and_wait(false, None).expect("submit");
        let mut out = Vec::new();
        for _ in 0..1000 {
            ring.reap(&mut out);
            if out.len() >= BURST as usize {
                break;
            }
            ring.submit_and_wait(true, Some(Duration::from_millis(1)))
                .expect("flush the overflow list");
        }
        let mut slots: Vec<u32> = out
            .iter()
            .filter_map(|c| OpKey::decode(c.user_data).map(|k| k.index))
            .collect();
        slots.sort_unstable();
        slots.dedup();
        assert_eq!(out.len(), BURST as usize, "every completion reaped once");
        assert_eq!(slots.len(), BURST as usize);
        assert!(out.iter().all(|c| c.result == -libc::ENOENT), "{out:?}");
        assert_eq!(ring.cq_overflow_seen, 0, "the kernel dropped completions");
    }
}
