//! The real ring: io_uring with the best setup flags this kernel accepts.

use std::io;
use std::os::fd::AsRawFd;
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

// io_uring_enter/io_uring_register ABI pieces the crate keeps private, for entering through
// a registered ring descriptor (include/uapi/linux/io_uring.h).
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_ENTER_EXT_ARG: u32 = 8;
const IORING_ENTER_REGISTERED_RING: u32 = 16;
const IORING_REGISTER_RING_FDS: u32 = 20;

/// struct io_uring_getevents_arg.
#[repr(C)]
struct GeteventsArg {
    sigmask: u64,
    sigmask_sz: u32,
    min_wait_usec: u32,
    ts: u64,
}

/// struct io_uring_rsrc_update.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// The provided-buffer group clients receive into (one per ring).
const CLIENT_RECV_GROUP: u16 = 0;

/// How many receive buffers the ring lends to the kernel, and their size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvBuffers {
    pub count: u16,
    pub size: u32,
}

/// Ways of entering the kernel, each measured against the plain wait (docs/benchmarks.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingTuning {
    /// Before sleeping, watch for completions this long (0: sleep at once).
    pub busy_poll: Duration,
    /// IORING_SETUP_SQPOLL with this idle time in ms (0: off).
    pub sqpoll_idle_ms: u32,
    /// Enter through a registered ring descriptor.
    pub registered_fd: bool,
}

impl RingTuning {
    /// The tuning named by `PGTIER_RING_BUSY_POLL_US`, `PGTIER_RING_SQPOLL_MS` and
    /// `PGTIER_RING_REGISTERED_FD` (benchmarks switch them; unset means the default).
    pub fn from_env() -> RingTuning {
        let number = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|value| value.parse::<u32>().ok())
                .unwrap_or(0)
        };
        RingTuning {
            busy_poll: Duration::from_micros(number("PGTIER_RING_BUSY_POLL_US").into()),
            sqpoll_idle_ms: number("PGTIER_RING_SQPOLL_MS"),
            registered_fd: number("PGTIER_RING_REGISTERED_FD") == 1,
        }
    }
}

pub struct UringRing {
    // Field order matters: the ring (and with it the kernel's use of the buffer ring) is
    // dropped before the buffers it may write into.
    ring: IoUring,
    buffers: BufRing,
    flavor: RingFlavor,
    cq_overflow_seen: u32,
    tuning: RingTuning,
    /// The registered ring descriptor's index, with `tuning.registered_fd`.
    registered_fd: Option<u32>,
}

impl UringRing {
    /// Builds a ring with `entries` submission slots (completion queue twice that), trying
    /// SINGLE_ISSUER|DEFER_TASKRUN, then COOP_TASKRUN, then no flags. The caller must use
    /// the ring only from the thread that built it (SINGLE_ISSUER).
    pub fn new(entries: u32, recv: RecvBuffers) -> Result<UringRing, String> {
        UringRing::with_tuning(entries, recv, RingTuning::default())
    }

    pub fn with_tuning(
        entries: u32,
        recv: RecvBuffers,
        tuning: RingTuning,
    ) -> Result<UringRing, String> {
        type Configure = fn(&mut io_uring::Builder);
        let attempts: [(RingFlavor, Configure); 3] = [
            (RingFlavor::SingleIssuerDeferTaskrun, |b| {
                // TASKRUN_FLAG: the kernel flags deferred work in the SQ ring, which a
                // busy poll watches without a syscall.
                b.setup_single_issuer()
                    .setup_defer_taskrun()
                    .setup_taskrun_flag();
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
            if tuning.sqpoll_idle_ms > 0 {
                // SQPOLL excludes DEFER_TASKRUN: the kernel thread submits, not this one.
                if flavor == RingFlavor::SingleIssuerDeferTaskrun {
                    continue;
                }
                builder.setup_sqpoll(tuning.sqpoll_idle_ms);
            }
            configure(&mut builder);
            match builder.build(entries) {
                Ok(ring) => {
                    if !ring.params().is_feature_nodrop() {
                        warn!("io_uring lacks FEAT_NODROP: completions may be lost under overload");
                    }
                    let buffers = register_buffers(&ring, recv)?;
                    let registered_fd = tuning
                        .registered_fd
                        .then(|| register_ring_fd(&ring))
                        .flatten();
                    debug!(?flavor, entries, ?recv, ?tuning, "io_uring ready");
                    return Ok(UringRing {
                        ring,
                        buffers,
                        flavor,
                        cq_overflow_seen: 0,
                        tuning,
                        registered_fd,
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

    /// Submits what is queued, then watches the rings for up to the busy-poll budget (never
    /// past `timeout`) for a completion or deferred task work, so a wake that comes soon
    /// costs no sleep.
    fn busy_poll(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.ring.submit()?;
        let budget = timeout.map_or(self.tuning.busy_poll, |t| t.min(self.tuning.busy_poll));
        let start = std::time::Instant::now();
        loop {
            for _ in 0..64 {
                if self.ring.submission().taskrun() || !self.ring.completion().is_empty() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= budget {
                return Ok(());
            }
        }
    }

    /// io_uring_enter through the registered descriptor: submit what is queued and, with
    /// `wait`, wait for one completion or `timeout`.
    fn enter_registered(
        &mut self,
        index: u32,
        wait: bool,
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let to_submit = self.ring.submission().len() as u32;
        let mut flags = IORING_ENTER_REGISTERED_RING;
        if wait || self.ring.submission().taskrun() {
            flags |= IORING_ENTER_GETEVENTS;
        }
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
        });
        let arg = GeteventsArg {
            sigmask: 0,
            sigmask_sz: 8,
            min_wait_usec: 0,
            ts: ts
                .as_ref()
                .map_or(0, |ts| ts as *const libc::timespec as u64),
        };
        if ts.is_some() {
            flags |= IORING_ENTER_EXT_ARG;
        }
        // SAFETY: io_uring_enter on this thread's registered ring index; `arg` and the
        // timespec it points to live across the call, and the SQ tail was published by the
        // submission queue handles above.
        let result = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                index,
                to_submit,
                u32::from(wait),
                flags,
                if ts.is_some() {
                    std::ptr::addr_of!(arg).cast::<libc::c_void>()
                } else {
                    std::ptr::null()
                },
                if ts.is_some() {
                    std::mem::size_of::<GeteventsArg>()
                } else {
                    0
                },
            )
        };
        if result < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(result as usize)
        }
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

/// Registers the ring's own descriptor (IORING_REGISTER_RING_FDS) and returns its index, or
/// `None` when the kernel refuses (the ring is then entered through its descriptor).
fn register_ring_fd(ring: &IoUring) -> Option<u32> {
    let mut update = RsrcUpdate {
        offset: u32::MAX,
        resv: 0,
        data: ring.as_raw_fd() as u64,
    };
    // SAFETY: io_uring_register with a valid ring descriptor and one update entry that lives
    // across the call; the kernel writes the chosen index into `offset`.
    let result = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            IORING_REGISTER_RING_FDS,
            std::ptr::addr_of_mut!(update),
            1u32,
        )
    };
    (result == 1).then_some(update.offset)
}

fn unavailable_message(error: &io::Error) -> String {
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
        if wait && !self.tuning.busy_poll.is_zero() {
            self.busy_poll(timeout)?;
        }
        let result = match (self.registered_fd, wait, timeout) {
            (Some(index), _, _) => self.enter_registered(index, wait, timeout),
            (None, false, _) => self.ring.submit(),
            (None, true, None) => self.ring.submit_and_wait(1),
            (None, true, Some(timeout)) => {
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

    /// Every way of entering the kernel reaps what completed: the plain wait, the busy poll
    /// and the registered ring descriptor, alone and together.
    #[test]
    fn each_tuning_submits_and_reaps() {
        let tunings = [
            RingTuning::default(),
            RingTuning {
                busy_poll: Duration::from_micros(50),
                ..RingTuning::default()
            },
            RingTuning {
                registered_fd: true,
                ..RingTuning::default()
            },
            RingTuning {
                busy_poll: Duration::from_micros(50),
                registered_fd: true,
                sqpoll_idle_ms: 0,
            },
        ];
        for tuning in tunings {
            let recv = RecvBuffers { count: 4, size: 64 };
            let Ok(mut ring) = UringRing::with_tuning(8, recv, tuning) else {
                return; // io_uring unavailable here.
            };
            if tuning.registered_fd {
                assert!(
                    ring.registered_fd.is_some(),
                    "the kernel refused the ring fd"
                );
            }
            let key = OpKey::new(OpKind::ClientRecv, 1, 0);
            // SAFETY: a cancel carries no pointer.
            unsafe { ring.push(key, Op::Cancel { target: u64::MAX }) }.expect("push");
            let mut out = Vec::new();
            for _ in 0..100 {
                ring.submit_and_wait(true, Some(Duration::from_millis(100)))
                    .expect("enter");
                ring.reap(&mut out);
                if !out.is_empty() {
                    break;
                }
            }
            assert_eq!(out.len(), 1, "{tuning:?}");
            assert_eq!(out[0].result, -libc::ENOENT);
        }
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
