//! `pgtier-forwarder`: the physical limit a proxy is measured against. A bare 1:1 TCP
//! forwarder on io_uring (one server connection per client, bytes copied both ways, no
//! parsing, no pooling), with its ring set up as pgtier sets up a worker's, so that
//! `bench/pgbench-compare.sh` can say how far pgtier is from a proxy that does nothing.
//!
//! ```text
//! pgtier-forwarder --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--threads N]
//! ```
//!
//! Each of the N threads owns one ring and one listener of the port's SO_REUSEPORT group,
//! and thread i is pinned to the i-th allowed CPU, as pgtier's workers are. Each direction of a pair (client to server, server to client) has
//! one buffer and at most one operation in flight: a receive, sends until its bytes are out,
//! the next receive. When either side ends or fails, both sockets are shut down, which
//! completes whatever is still in flight; the pair is freed once nothing is.

use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::process::ExitCode;

use io_uring::{IoUring, cqueue, opcode, squeue, types};
use socket2::{Domain, Protocol, Socket, Type};

const USAGE: &str =
    "usage: pgtier-forwarder --listen 127.0.0.1:PORT --upstream 127.0.0.1:PORT [--threads N]";
/// Submission slots per ring (completion queue twice that); a pair has at most two
/// operations in flight, so this covers hundreds of pairs before the queue is flushed early.
const RING_ENTRIES: u32 = 1024;
/// Bytes one direction receives at once: pgtier's server receive size (64 KiB).
const BUFFER_BYTES: usize = 64 * 1024;
/// IORING_RECVSEND_POLL_FIRST, as pgtier sets it: a receive is armed right after a send, when
/// the answer cannot be there yet, so the kernel's first non-blocking attempt would fail.
const RECVSEND_POLL_FIRST: u16 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    Accept,
    Recv,
    Send,
}

/// What a completion is for, packed into its user_data and decoded in one place. `dir` is
/// 0 for client to server, 1 for server to client; an accept has slot, generation, dir 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpKey {
    kind: OpKind,
    slot: u32,
    generation: u32,
    dir: usize,
}

impl OpKey {
    const GENERATION_MASK: u32 = (1 << 29) - 1;
    const ACCEPT: OpKey = OpKey {
        kind: OpKind::Accept,
        slot: 0,
        generation: 0,
        dir: 0,
    };

    /// Bits 63-62: kind; bit 61: direction; 60-32: generation; 31-0: slot.
    fn encode(self) -> u64 {
        (self.kind as u64) << 62
            | (self.dir as u64 & 1) << 61
            | u64::from(self.generation & Self::GENERATION_MASK) << 32
            | u64::from(self.slot)
    }

    fn decode(data: u64) -> Option<OpKey> {
        let kinds = [OpKind::Accept, OpKind::Recv, OpKind::Send];
        Some(OpKey {
            kind: *kinds.get((data >> 62) as usize)?,
            slot: data as u32,
            generation: (data >> 32) as u32 & Self::GENERATION_MASK,
            dir: (data >> 61) as usize & 1,
        })
    }
}

/// One direction of a pair: bytes read from `from` wait in `buf[sent..filled]` to go to `to`.
struct Direction {
    from: RawFd,
    to: RawFd,
    buf: Box<[u8]>,
    filled: usize,
    sent: usize,
    /// True from the submission of this direction's receive or send until its completion is
    /// reaped: meanwhile `buf` is the kernel's and the pair must not be freed.
    in_flight: bool,
}

/// A client and the server connection opened for it alone.
struct Pair {
    // Both sockets close when the pair drops, which `release` allows only once no operation
    // of the pair is in flight.
    client: TcpStream,
    server: TcpStream,
    dirs: [Direction; 2],
    generation: u32,
    /// Either side ended: both sockets are shut down and nothing new is submitted.
    closing: bool,
}

/// One thread's ring, listener and pairs.
struct Forwarder {
    ring: IoUring,
    listener: TcpListener,
    upstream: SocketAddr,
    pairs: Vec<Option<Pair>>,
    free: Vec<u32>,
    next_generation: u32,
}

/// pgtier's ring setup: SINGLE_ISSUER|DEFER_TASKRUN, else COOP_TASKRUN, else no flags.
/// Must run on the thread that uses the ring (SINGLE_ISSUER).
fn build_ring() -> io::Result<(IoUring, &'static str)> {
    type Configure = fn(&mut io_uring::Builder);
    let attempts: [(&str, Configure); 3] = [
        ("single issuer + defer taskrun", |b| {
            b.setup_single_issuer().setup_defer_taskrun();
        }),
        ("coop taskrun", |b| {
            b.setup_coop_taskrun();
        }),
        ("plain", |_| {}),
    ];
    let mut last_error = io::Error::other("io_uring setup failed");
    for (flavor, configure) in attempts {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(RING_ENTRIES * 2);
        configure(&mut builder);
        match builder.build(RING_ENTRIES) {
            Ok(ring) => return Ok((ring, flavor)),
            Err(error) => last_error = error,
        }
    }
    Err(last_error)
}

impl Forwarder {
    /// Collects the completions, dispatches them, then submits once and waits.
    fn run(mut self) -> io::Result<()> {
        self.submit(OpKey::ACCEPT)?;
        let mut completions: Vec<(u64, i32, u32)> = Vec::with_capacity(RING_ENTRIES as usize);
        loop {
            if let Err(error) = self.ring.submit_and_wait(1) {
                // A signal, or completions the kernel must hand over first: wait again.
                let again = Some(libc::EINTR) == error.raw_os_error()
                    || Some(libc::EBUSY) == error.raw_os_error();
                if !again {
                    return Err(error);
                }
            }
            completions.clear();
            let cq = self.ring.completion();
            completions.extend(cq.map(|c| (c.user_data(), c.result(), c.flags())));
            for &(data, result, flags) in &completions {
                let Some(key) = OpKey::decode(data) else {
                    eprintln!("pgtier-forwarder: bug: unknown completion {data:#x}");
                    continue;
                };
                match key.kind {
                    OpKind::Accept => self.on_accept(result, flags)?,
                    OpKind::Recv | OpKind::Send => self.on_transfer(key, result)?,
                }
            }
        }
    }

    /// Queues the operation `key` names (for a pair: on its direction's buffer), flushing the
    /// submission queue to the kernel when it is full.
    fn submit(&mut self, key: OpKey) -> io::Result<()> {
        let entry = match key.kind {
            OpKind::Accept => opcode::AcceptMulti::new(types::Fd(self.listener.as_raw_fd()))
                .flags(libc::SOCK_CLOEXEC)
                .build(),
            OpKind::Recv | OpKind::Send => {
                let Some(pair) = self.pairs[key.slot as usize].as_mut() else {
                    return Ok(());
                };
                let d = &mut pair.dirs[key.dir];
                assert!(!d.in_flight, "one operation per direction at a time");
                d.in_flight = true;
                if key.kind == OpKind::Recv {
                    let (buf, len) = (d.buf.as_mut_ptr(), d.buf.len() as u32);
                    opcode::Recv::new(types::Fd(d.from), buf, len)
                        .ioprio(RECVSEND_POLL_FIRST)
                        .build()
                } else {
                    assert!(d.sent < d.filled, "a send has bytes to send");
                    let pending = &d.buf[d.sent..d.filled];
                    opcode::Send::new(types::Fd(d.to), pending.as_ptr(), pending.len() as u32)
                        .flags(libc::MSG_NOSIGNAL)
                        .build()
                }
            }
        };
        let entry: squeue::Entry = entry.user_data(key.encode());
        loop {
            // SAFETY: an accept carries no pointer. A receive or send points into the pair's
            // heap buffer, which nothing touches while `in_flight` is set and `release`
            // frees only once no operation of the pair is in flight.
            if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn on_accept(&mut self, result: i32, flags: u32) -> io::Result<()> {
        if !cqueue::more(flags) {
            self.submit(OpKey::ACCEPT)?;
        }
        if result < 0 {
            let error = io::Error::from_raw_os_error(-result);
            eprintln!("pgtier-forwarder: accept: {error}");
            return Ok(());
        }
        // SAFETY: accept just returned this fd, and nothing else holds it.
        let client = unsafe { TcpStream::from_raw_fd(result) };
        // A blocking connect: on loopback the handshake completes inside the call.
        let server = match TcpStream::connect(self.upstream) {
            Ok(server) => server,
            Err(error) => {
                eprintln!("pgtier-forwarder: connect {}: {error}", self.upstream);
                return Ok(()); // dropping `client` closes it
            }
        };
        // Nagle would hold small messages back until an ACK; pgtier turns it off too. A
        // refusal (a client already gone) only costs latency, as it does in pgtier.
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                self.pairs.push(None);
                u32::try_from(self.pairs.len() - 1).map_err(io::Error::other)?
            }
        };
        self.next_generation = self.next_generation.wrapping_add(1) & OpKey::GENERATION_MASK;
        let generation = self.next_generation;
        let (c, s) = (client.as_raw_fd(), server.as_raw_fd());
        let direction = |from, to| Direction {
            from,
            to,
            buf: vec![0; BUFFER_BYTES].into_boxed_slice(),
            filled: 0,
            sent: 0,
            in_flight: false,
        };
        self.pairs[slot as usize] = Some(Pair {
            client,
            server,
            dirs: [direction(c, s), direction(s, c)],
            generation,
            closing: false,
        });
        for dir in [0, 1] {
            let kind = OpKind::Recv;
            self.submit(OpKey {
                kind,
                slot,
                generation,
                dir,
            })?;
        }
        Ok(())
    }

    /// A receive or send of a pair completed: pass the bytes on, or end the pair.
    fn on_transfer(&mut self, key: OpKey, result: i32) -> io::Result<()> {
        let Some(Some(pair)) = self.pairs.get_mut(key.slot as usize) else {
            eprintln!(
                "pgtier-forwarder: bug: completion for free slot {}",
                key.slot
            );
            return Ok(());
        };
        assert_eq!(
            pair.generation, key.generation,
            "a pair outlives its operations"
        );
        let d = &mut pair.dirs[key.dir];
        assert!(d.in_flight, "a completion for an operation in flight");
        d.in_flight = false;
        if pair.closing {
            self.release(key.slot);
            return Ok(());
        }
        let next = match (key.kind, result) {
            (OpKind::Recv, n) if n > 0 => {
                (d.filled, d.sent) = (n as usize, 0);
                OpKind::Send
            }
            (OpKind::Send, n) if n > 0 => {
                d.sent += n as usize;
                // A short send goes on with the rest.
                if d.sent < d.filled {
                    OpKind::Send
                } else {
                    OpKind::Recv
                }
            }
            (kind, errno) if errno < 0 && retries(-errno) => kind,
            // 0 from a receive is the peer's orderly end; any other error ends the pair too.
            _ => return self.close(key.slot),
        };
        self.submit(OpKey { kind: next, ..key })
    }

    /// Ends both sides: shutting the sockets down completes their pending receives (0 bytes)
    /// and sends (EPIPE), after which `release` frees the pair.
    fn close(&mut self, slot: u32) -> io::Result<()> {
        if let Some(pair) = self.pairs[slot as usize].as_mut() {
            pair.closing = true;
            // A side the peer reset may refuse the shutdown: there is nothing left to end.
            let _ = pair.client.shutdown(Shutdown::Both);
            let _ = pair.server.shutdown(Shutdown::Both);
        }
        self.release(slot);
        Ok(())
    }

    /// Frees a closing pair (closing its sockets) once none of its operations is in flight.
    fn release(&mut self, slot: u32) {
        let done = self.pairs[slot as usize]
            .as_ref()
            .is_some_and(|pair| pair.closing && pair.dirs.iter().all(|d| !d.in_flight));
        if done {
            self.pairs[slot as usize] = None;
            self.free.push(slot);
        }
    }
}

/// The one errno classifier: true when the operation is simply submitted again.
fn retries(errno: i32) -> bool {
    match errno {
        // Interrupted, or no data or room after all (a spurious wake-up): try again.
        libc::EINTR | libc::EAGAIN => true,
        // The kernel had no memory for the operation at that moment.
        libc::ENOBUFS | libc::ENOMEM => true,
        // Reset, broken pipe, timed out and the rest: the connection is over.
        _ => false,
    }
}

/// A listener on `addr` that joins the port's SO_REUSEPORT group.
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.cloexec(),
        Some(Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

struct Args {
    listen: SocketAddr,
    upstream: SocketAddr,
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let (mut listen, mut upstream, mut threads) = (None, None, 1);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--listen" => listen = Some(value.parse().map_err(|e| bad(&e))?),
            "--upstream" => upstream = Some(value.parse().map_err(|e| bad(&e))?),
            "--threads" => threads = value.parse().map_err(|e| bad(&e))?,
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    match (listen, upstream) {
        (Some(listen), Some(upstream)) if threads > 0 => Ok(Args {
            listen,
            upstream,
            threads,
        }),
        _ => Err("--listen and --upstream are required, --threads at least 1".to_string()),
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("pgtier-forwarder: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    // Every listener is bound before any thread starts: a bind error stops the process at
    // once, and the port takes connections as soon as it answers at all.
    let mut listeners = Vec::with_capacity(args.threads);
    for _ in 0..args.threads {
        match listen(args.listen) {
            Ok(listener) => listeners.push(listener),
            Err(error) => {
                eprintln!("pgtier-forwarder: listen on {}: {error}", args.listen);
                return ExitCode::FAILURE;
            }
        }
    }
    let cpus = allowed_cpus();
    let threads: Vec<_> = listeners
        .into_iter()
        .enumerate()
        .map(|(index, listener)| {
            let upstream = args.upstream;
            let cpu = (!cpus.is_empty()).then(|| cpus[index % cpus.len()]);
            std::thread::spawn(move || {
                if let Some(cpu) = cpu {
                    pin(cpu);
                }
                if let Err(error) = serve(index, listener, upstream) {
                    // One ring down skews the comparison: stop the whole process.
                    eprintln!("pgtier-forwarder: thread {index}: {error}");
                    std::process::exit(1);
                }
            })
        })
        .collect();
    for thread in threads {
        if thread.join().is_err() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// The CPUs this process may run on, in order (empty when the mask cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size, and
    // CPU_ISSET reads inside it for every index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpu`; a refusal (a narrower cpuset) only leaves it unpinned.
fn pin(cpu: usize) {
    // SAFETY: as in `allowed_cpus`; `cpu` came from the mask, so it is below CPU_SETSIZE, and
    // sched_setaffinity only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
    }
}

/// One thread's life: its ring, built on this thread (SINGLE_ISSUER), then the loop.
fn serve(index: usize, listener: TcpListener, upstream: SocketAddr) -> io::Result<()> {
    let (ring, flavor) = build_ring()?;
    eprintln!("pgtier-forwarder: thread {index}: io_uring ({flavor})");
    Forwarder {
        ring,
        listener,
        upstream,
        pairs: Vec::new(),
        free: Vec::new(),
        next_generation: 0,
    }
    .run()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key survives its packing into user_data, including the top generation.
    #[test]
    fn op_keys_round_trip() {
        for kind in [OpKind::Accept, OpKind::Recv, OpKind::Send] {
            for dir in [0, 1] {
                let key = OpKey {
                    kind,
                    slot: u32::MAX,
                    generation: OpKey::GENERATION_MASK,
                    dir,
                };
                assert_eq!(OpKey::decode(key.encode()), Some(key));
            }
        }
        assert_eq!(OpKey::decode(3 << 62), None);
    }
}
