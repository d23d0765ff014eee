//! A packet-level netem in userspace, standing in for `tc netem` (this kernel has none):
//! iptables' `NFQUEUE` target hands each packet of a link to a queue (`nfqueue.rs`), and a
//! thread here holds its verdict for a delay drawn per packet, then accepts it, or drops it
//! for a loss share. Verdicts leave in order of their due time, not of arrival, so jitter
//! and late packets reorder a flow's segments for real, as netem's do.
//!
//! Safety of the lab: the queue is fail-open (a full queue accepts rather than drops), the
//! rules say `--queue-bypass` (a queue nobody listens on accepts), `QueueRules` deletes its
//! rules when dropped, and a stopped netem accepts every packet it still holds at once. So a
//! netem that stops or dies delays nothing further and blackholes nothing.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::nfqueue::{Message, QueueSocket, Verdict, push_verdict};

/// What happens to each packet: held `delay ± jitter` (uniform, never below zero), plus
/// `late_by` for `late_percent` % of packets, and dropped for `loss_percent` %.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetemSpec {
    pub delay: Duration,
    pub jitter: Duration,
    pub late_percent: u32,
    pub late_by: Duration,
    pub loss_percent: u32,
}

impl NetemSpec {
    /// `delay ± jitter` on every packet.
    pub fn jitter(delay: Duration, jitter: Duration) -> NetemSpec {
        NetemSpec {
            delay,
            jitter,
            ..NetemSpec::default()
        }
    }

    /// `late_percent` % of packets held `late_by`, the rest passed at once: the later
    /// packets of a flow overtake them.
    pub fn reorder(late_percent: u32, late_by: Duration) -> NetemSpec {
        NetemSpec {
            late_percent,
            late_by,
            ..NetemSpec::default()
        }
    }

    /// The fate of one packet, from two uniform draws.
    fn fate(&self, rng: &mut Rng) -> Fate {
        if self.loss_percent > 0 && rng.percent() < self.loss_percent {
            return Fate::Drop;
        }
        let mut hold = self.delay;
        if !self.jitter.is_zero() {
            let span = 2 * self.jitter.as_micros() as u64;
            let offset = Duration::from_micros(rng.below(span + 1));
            hold = (hold + offset).saturating_sub(self.jitter);
        }
        let late = self.late_percent > 0 && rng.percent() < self.late_percent;
        if late {
            hold += self.late_by;
        }
        Fate::Hold { hold, late }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fate {
    Drop,
    Hold { hold: Duration, late: bool },
}

/// xorshift64*: deterministic per seed, good enough to draw delays.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, bound: u64) -> u64 {
        if bound == 0 { 0 } else { self.next() % bound }
    }

    fn percent(&mut self) -> u32 {
        self.below(100) as u32
    }
}

/// What the netem did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetemStats {
    /// Packets queued to it.
    pub packets: u64,
    pub accepted: u64,
    pub dropped: u64,
    /// Packets given the extra `late_by`.
    pub late: u64,
    /// Accepted packets that left after a later packet of their own flow (connection and
    /// direction): the reordering the flow's receiver sees.
    pub reordered: u64,
}

#[derive(Debug, Default)]
struct Counters {
    packets: AtomicU64,
    accepted: AtomicU64,
    dropped: AtomicU64,
    late: AtomicU64,
    reordered: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> NetemStats {
        NetemStats {
            packets: self.packets.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            late: self.late.load(Ordering::Relaxed),
            reordered: self.reordered.load(Ordering::Relaxed),
        }
    }
}

/// The most packets the kernel holds for us; past it the queue fails open (accepts).
const QUEUE_MAX_LEN: u32 = 16_384;
/// How often the thread looks at its stop flag when nothing is due.
const IDLE_POLL_MS: i32 = 50;

/// A running netem on one queue; stops on `stop` or drop, accepting what it holds.
#[derive(Debug)]
pub struct Netem {
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Netem {
    /// Binds `queue` in the namespace called `ns` (the caller's own with `None`) and starts
    /// holding its packets as `spec` says; `seed` makes the draws repeatable.
    pub fn start(ns: Option<String>, queue: u16, spec: NetemSpec, seed: u64) -> io::Result<Netem> {
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let (ready_tx, ready_rx) = mpsc::channel();
        let (stopping, counting) = (Arc::clone(&stop), Arc::clone(&counters));
        let thread = std::thread::spawn(move || {
            let entered = match &ns {
                Some(ns) => super::netns::enter_named(ns),
                None => Ok(()),
            };
            let socket = match entered.and_then(|()| QueueSocket::bind(queue, QUEUE_MAX_LEN)) {
                Ok(socket) => socket,
                Err(error) => {
                    let _ = ready_tx.send(Err(io::Error::new(error.kind(), error.to_string())));
                    return Err(error);
                }
            };
            let _ = ready_tx.send(Ok(()));
            let mut scheduler = Scheduler {
                socket,
                spec,
                rng: Rng(seed | 1),
                held: BinaryHeap::new(),
                arrivals: 0,
                order: FlowOrder::default(),
                counters: counting,
            };
            let outcome = scheduler.run(&stopping);
            let released = scheduler.release_all();
            let unbound = scheduler.socket.unbind();
            outcome.and(released).and(unbound)
        });
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| io::Error::other("the netem did not start"))??;
        Ok(Netem {
            stop,
            counters,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> NetemStats {
        self.counters.snapshot()
    }

    /// Stops the netem (every packet it holds is accepted at once) and returns its counts,
    /// or the error that ended its thread.
    pub fn stop(mut self) -> io::Result<NetemStats> {
        self.join()?;
        Ok(self.counters.snapshot())
    }

    fn join(&mut self) -> io::Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(thread) => thread
                .join()
                .map_err(|_| io::Error::other("the netem thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        let _ = self.join();
    }
}

/// One held packet: due time, arrival order (the tie-break keeps equal delays in order),
/// packet id, flow.
type Held = Reverse<(Instant, u64, u32, Option<u64>)>;

/// The thread's state: the socket, the packets held by due time, the counters.
struct Scheduler {
    socket: QueueSocket,
    spec: NetemSpec,
    rng: Rng,
    held: BinaryHeap<Held>,
    arrivals: u64,
    order: FlowOrder,
    counters: Arc<Counters>,
}

impl Scheduler {
    fn run(&mut self, stop: &AtomicBool) -> io::Result<()> {
        let mut buf = vec![0u8; 256 * 1024];
        let mut out = Vec::with_capacity(32 * 256);
        while !stop.load(Ordering::Relaxed) {
            let wait_ms = match self.held.peek() {
                Some(Reverse((due, ..))) => {
                    let left = due.saturating_duration_since(Instant::now());
                    // Round up: waking early would spin until the deadline.
                    i32::try_from(left.as_micros().div_ceil(1000))
                        .unwrap_or(IDLE_POLL_MS)
                        .min(IDLE_POLL_MS)
                }
                None => IDLE_POLL_MS,
            };
            if self.socket.wait_readable(wait_ms)? {
                self.receive(&mut buf, &mut out)?;
            }
            self.release_due(Instant::now(), &mut out);
            self.flush(&mut out)?;
        }
        Ok(())
    }

    /// Takes every datagram ready now; drops are answered at once, the rest held.
    fn receive(&mut self, buf: &mut [u8], out: &mut Vec<u8>) -> io::Result<()> {
        loop {
            let n = match self.socket.recv(buf, false) {
                Ok(n) => n,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                // Overrun: the kernel accepted what it could not hand us (fail-open).
                Err(error) if error.raw_os_error() == Some(libc::ENOBUFS) => continue,
                Err(error) => return Err(error),
            };
            let now = Instant::now();
            for message in super::nfqueue::parse(&buf[..n]) {
                let Message::Packet { id, flow } = message else {
                    continue;
                };
                self.counters.packets.fetch_add(1, Ordering::Relaxed);
                self.arrivals += 1;
                match self.spec.fate(&mut self.rng) {
                    Fate::Drop => {
                        self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        push_verdict(out, self.socket.queue(), id, Verdict::Drop);
                    }
                    Fate::Hold { hold, late } => {
                        if late {
                            self.counters.late.fetch_add(1, Ordering::Relaxed);
                        }
                        self.held
                            .push(Reverse((now + hold, self.arrivals, id, flow)));
                    }
                }
            }
        }
    }

    /// Moves every packet due by `now` into `out` as an accept.
    fn release_due(&mut self, now: Instant, out: &mut Vec<u8>) {
        while let Some(Reverse((due, arrival, id, flow))) = self.held.peek().copied() {
            if due > now {
                break;
            }
            self.held.pop();
            self.accept(arrival, id, flow, out);
        }
    }

    fn accept(&mut self, arrival: u64, id: u32, flow: Option<u64>, out: &mut Vec<u8>) {
        if self.order.overtaken(flow, arrival) {
            self.counters.reordered.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.accepted.fetch_add(1, Ordering::Relaxed);
        push_verdict(out, self.socket.queue(), id, Verdict::Accept);
    }

    /// Sends the verdicts gathered in `out`, in datagrams of a bounded size.
    fn flush(&self, out: &mut Vec<u8>) -> io::Result<()> {
        // Each verdict is one 32-byte message; 256 of them fit any socket's limits.
        for chunk in out.chunks(32 * 256) {
            self.socket.send(chunk)?;
        }
        out.clear();
        Ok(())
    }

    /// Accepts every held packet now (the netem is stopping).
    fn release_all(&mut self) -> io::Result<()> {
        let mut out = Vec::new();
        while let Some(Reverse((_, arrival, id, flow))) = self.held.pop() {
            self.accept(arrival, id, flow, &mut out);
        }
        self.flush(&mut out)
    }
}

/// Which accepted packets left after a later packet of their own flow.
#[derive(Debug, Default)]
struct FlowOrder {
    /// Per flow, the arrival number of its latest-arrived packet accepted so far.
    highest: HashMap<u64, u64>,
}

impl FlowOrder {
    /// Notes that the packet that arrived `arrival`-th, of `flow`, leaves now; true when a
    /// packet of the same flow that arrived after it already left.
    fn overtaken(&mut self, flow: Option<u64>, arrival: u64) -> bool {
        let Some(flow) = flow else {
            return false;
        };
        let highest = self.highest.entry(flow).or_insert(arrival);
        if arrival < *highest {
            return true;
        }
        *highest = arrival;
        false
    }
}

/// iptables rules sending a link's packets to a queue, deleted again on drop. Run with the
/// namespace's `iptables` (`ip netns exec NS iptables`), or in the caller's own namespace.
#[derive(Debug)]
pub struct QueueRules {
    ns: Option<String>,
    /// Each rule's arguments after the chain, as given to `-A` and then to `-D`.
    rules: Vec<(String, Vec<String>)>,
}

impl QueueRules {
    /// No rules yet, in the namespace called `ns` (the caller's own with `None`).
    pub fn new(ns: Option<String>) -> QueueRules {
        QueueRules {
            ns,
            rules: Vec::new(),
        }
    }

    /// Appends `chain` `matches` `-j NFQUEUE --queue-num queue --queue-bypass`: from now on
    /// the packets it matches wait for the queue's verdict (or pass when nobody listens).
    pub fn add(&mut self, chain: &str, matches: &[&str], queue: u16) -> io::Result<()> {
        let mut args: Vec<String> = matches.iter().map(|m| m.to_string()).collect();
        args.extend(
            [
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue.to_string(),
                "--queue-bypass",
            ]
            .map(String::from),
        );
        self.iptables("-A", chain, &args)?;
        self.rules.push((chain.to_string(), args));
        Ok(())
    }

    /// Deletes every rule added (packets already queued still get their verdicts).
    pub fn clear(&mut self) -> io::Result<()> {
        let mut first_error = None;
        while let Some((chain, args)) = self.rules.pop() {
            if let Err(error) = self.iptables("-D", &chain, &args) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    fn iptables(&self, op: &str, chain: &str, args: &[String]) -> io::Result<()> {
        let tool = iptables_tool();
        let mut command = match &self.ns {
            Some(ns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", ns, &tool]);
                command
            }
            None => Command::new(&tool),
        };
        // -w: wait for the xtables lock, which every namespace of the machine shares.
        let out = command
            .args(["-w", op, chain])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| io::Error::new(error.kind(), format!("{tool}: {error}")))?;
        if out.status.success() {
            return Ok(());
        }
        Err(io::Error::other(format!(
            "{tool} {op} {chain} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Drop for QueueRules {
    fn drop(&mut self) {
        let _ = self.clear();
    }
}

/// The iptables the rules are written with: `PGTIER_IPTABLES`, else `iptables` (Debian's
/// default, iptables-nft, whose `NFQUEUE` is the kernel's xtables target run through
/// nf_tables' compat layer; `iptables-legacy` works as well where the kernel has it).
pub fn iptables_tool() -> String {
    std::env::var("PGTIER_IPTABLES").unwrap_or_else(|_| "iptables".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_its_bounds_and_spreads() {
        let spec = NetemSpec::jitter(Duration::from_millis(50), Duration::from_millis(40));
        let mut rng = Rng(7);
        let holds: Vec<Duration> = (0..2000)
            .map(|_| match spec.fate(&mut rng) {
                Fate::Hold { hold, late } => {
                    assert!(!late);
                    hold
                }
                Fate::Drop => panic!("no loss asked"),
            })
            .collect();
        assert!(holds.iter().all(|h| *h >= Duration::from_millis(10)));
        assert!(holds.iter().all(|h| *h <= Duration::from_millis(90)));
        assert!(holds.iter().any(|h| *h < Duration::from_millis(20)));
        assert!(holds.iter().any(|h| *h > Duration::from_millis(80)));
    }

    #[test]
    fn jitter_wider_than_the_delay_never_goes_negative() {
        let spec = NetemSpec::jitter(Duration::from_millis(5), Duration::from_millis(40));
        let mut rng = Rng(3);
        for _ in 0..500 {
            assert!(matches!(spec.fate(&mut rng), Fate::Hold { .. }));
        }
    }

    #[test]
    fn reordering_holds_about_its_share_and_passes_the_rest() {
        let spec = NetemSpec::reorder(10, Duration::from_millis(20));
        let mut rng = Rng(11);
        let mut late = 0;
        for _ in 0..10_000 {
            match spec.fate(&mut rng) {
                Fate::Hold { hold, late: true } => {
                    assert_eq!(hold, Duration::from_millis(20));
                    late += 1;
                }
                Fate::Hold { hold, late: false } => assert_eq!(hold, Duration::ZERO),
                Fate::Drop => panic!("no loss asked"),
            }
        }
        assert!((800..1200).contains(&late), "{late} of 10000 late");
    }

    #[test]
    fn only_a_packet_overtaken_within_its_own_flow_counts() {
        let mut order = FlowOrder::default();
        // Flow 1 sends arrivals 1 and 3, flow 2 arrival 2; 2 leaves first, then 3, then 1.
        assert!(!order.overtaken(Some(2), 2));
        assert!(!order.overtaken(Some(1), 3));
        assert!(order.overtaken(Some(1), 1));
        // Another flow's later packet leaving first is no reordering of this one.
        assert!(!order.overtaken(Some(2), 4));
        assert!(!order.overtaken(None, 0));
    }

    #[test]
    fn loss_drops_about_its_share() {
        let spec = NetemSpec {
            loss_percent: 5,
            ..NetemSpec::default()
        };
        let mut rng = Rng(5);
        let dropped = (0..10_000)
            .filter(|_| spec.fate(&mut rng) == Fate::Drop)
            .count();
        assert!((350..650).contains(&dropped), "{dropped} of 10000 dropped");
    }
}
