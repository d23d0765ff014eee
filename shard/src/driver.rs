//! One shard: a pinned thread's ring, its listener, and the loop that turns completions into
//! engine events and engine actions into ring operations. It decides nothing about the
//! protocol: who gets which server, what a client is told, when a server is reset or closed
//! are all the engine's (`pgtier_engine`). What is here is how a ring is used well:
//!
//! - **Collect, dispatch, submit once.** Each pass reaps every completion, hands each to the
//!   engine, runs the engine's timer when due, turns the actions into operations (flushing
//!   each connection's send queue once, however many sends the pass queued), and submits
//!   them in the same `io_uring_enter` that waits, with the engine's next deadline as the
//!   timeout.
//! - **Typed keys.** Every operation's `user_data` is an `OpKey` (kind, slot index, slot
//!   generation); a completion for a slot freed and reused since is stale and dropped.
//! - **Buffers belong to the kernel while an op is in flight.** Each connection has one
//!   receive and one send slot with in-flight flags (`conn_io`); nothing moves or frees
//!   their memory until the completion is reaped.
//! - **Teardown in steps.** A closing connection stops receiving, has its in-flight ops
//!   cancelled, and its socket is closed and its slot freed (engine told with
//!   `handle_closed`) only once the kernel owns none of its buffers. Dropping a shard
//!   cancels everything in flight and waits for the completions before any buffer is freed.

use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtier_engine::{Action, ClientId, CloseHow, Command, Conn, Engine, ServerId};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::{debug, error, info};

use crate::cancel_conn::CancelConn;
use crate::conn_io::{IoConn, IoTable, KEEP_RECV_BYTES, Stage, client_key, server_key};
use crate::io::errno::{ErrnoAction, classify};
use crate::io::op_key::{OpKey, OpKind};
use crate::io::ring::{Completion, Op, Ring};
use crate::io::slab::{CancelConnId, Slab};
use crate::mailbox::Mailbox;

/// Bytes a client receive buffer grows by: small, because 10,000 idle clients each keep one.
pub const CLIENT_RECV_CHUNK_BYTES: usize = 2048;
/// Free room asked for before each client receive.
const CLIENT_RECV_MIN_FREE_BYTES: usize = 512;
/// Most cancel connections in flight on one shard.
const MAX_CANCEL_CONNS: usize = 1024;
/// How long a dropped shard waits for the kernel to give its buffers back.
const DROP_WAIT: Duration = Duration::from_millis(500);

/// Ring-facing limits read from the configuration.
#[derive(Debug, Clone, Copy)]
struct IoLimits {
    send_batch_max_chunks: usize,
    send_budget_bytes: usize,
    server_recv_chunk_bytes: usize,
}

impl IoLimits {
    fn from_config(config: &pgtier_core::config::Config) -> IoLimits {
        let s = &config.pgtier;
        IoLimits {
            send_batch_max_chunks: (s.send_batch_max_chunks as usize).clamp(1, 1024),
            send_budget_bytes: (s.send_budget_bytes as usize).max(1),
            server_recv_chunk_bytes: (s.recv_buffer_bytes as usize).max(4096),
        }
    }
}

/// What a shard needs from the process around it.
pub struct ShardParts<R: Ring> {
    pub index: usize,
    pub ring: R,
    pub engine: Engine,
    /// Every shard's mailbox (this one's included), for posts between shards.
    pub mailboxes: Vec<Arc<Mailbox>>,
    /// The listener; `None` in tests without one.
    pub listener: Option<RawFd>,
    /// Test-only: panic after this many accepts (see `proxy::panic_hook_from_env`).
    pub panic_after_accepts: Option<u64>,
}

pub struct Shard<R: Ring> {
    index: usize,
    ring: R,
    engine: Engine,
    clients: IoTable,
    servers: IoTable,
    cancels: Slab<CancelConn>,
    listener: Option<RawFd>,
    /// True from submitting the multishot accept until a completion without MORE.
    accept_armed: bool,
    mailboxes: Vec<Arc<Mailbox>>,
    /// The mailbox eventfd read target; owned by the kernel while `mailbox_armed`.
    mailbox_buf: Box<u64>,
    mailbox_armed: bool,
    limits: IoLimits,
    /// Operations handed to the ring whose (last) completion was not reaped yet.
    in_flight: usize,
    /// Connections given bytes this pass, flushed once at its end.
    dirty: Vec<Conn>,
    completions: Vec<Completion>,
    accepts: u64,
    panic_after_accepts: Option<u64>,
}

impl<R: Ring> Shard<R> {
    pub fn new(parts: ShardParts<R>, config: &pgtier_core::config::Config) -> Shard<R> {
        Shard {
            index: parts.index,
            ring: parts.ring,
            engine: parts.engine,
            clients: IoTable::default(),
            servers: IoTable::default(),
            cancels: Slab::with_capacity(MAX_CANCEL_CONNS),
            listener: parts.listener,
            accept_armed: false,
            mailboxes: parts.mailboxes,
            mailbox_buf: Box::new(0),
            mailbox_armed: false,
            limits: IoLimits::from_config(config),
            in_flight: 0,
            dirty: Vec::new(),
            completions: Vec::with_capacity(256),
            accepts: 0,
            panic_after_accepts: parts.panic_after_accepts,
        }
    }

    /// Runs until shutdown completes.
    pub fn run(&mut self) -> Result<(), String> {
        self.start();
        while !self.finished() {
            self.turn(true)?;
        }
        self.engine.fold_counters();
        Ok(())
    }

    /// Arms the listener and the mailbox.
    pub fn start(&mut self) {
        self.arm_accept();
        self.arm_mailbox();
    }

    /// One pass: dispatch what completed, run the engine's timer, act on its actions, and
    /// submit (sleeping, if `wait`, until the next completion or deadline).
    pub fn turn(&mut self, wait: bool) -> Result<(), String> {
        let mut completions = std::mem::take(&mut self.completions);
        self.ring.reap(&mut completions);
        let now = Instant::now();
        for completion in completions.drain(..) {
            self.dispatch(now, completion);
        }
        self.completions = completions;
        if self.engine.poll_timeout() <= now {
            self.engine.handle_timeout(now);
        }
        self.act(now);
        let timeout = self
            .engine
            .poll_timeout()
            .saturating_duration_since(Instant::now());
        self.ring
            .submit_and_wait(wait && !self.finished(), Some(timeout))
            .map_err(|error| format!("shard {}: io_uring_enter failed: {error}", self.index))
    }

    /// Shutdown was asked for and nothing is left.
    pub fn finished(&self) -> bool {
        self.engine.is_finished()
            && self.clients.is_empty()
            && self.servers.is_empty()
            && self.cancels.is_empty()
            && !self.accept_armed
    }

    #[cfg(test)]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The ring, for tests that play the kernel's part.
    #[cfg(test)]
    pub fn ring(&mut self) -> &mut R {
        &mut self.ring
    }

    // ---- submitting ----

    /// Queues an op. A refused flush means the ring is unusable; the shard logs it and the
    /// op's owner sees its in-flight flag clear through `on_refused`.
    ///
    /// # Safety
    /// As `Ring::push`: the memory `op` points to stays valid and untouched until its
    /// completion is reaped.
    unsafe fn submit(&mut self, key: OpKey, op: Op) -> bool {
        // SAFETY: forwarded from this function's contract.
        match unsafe { self.ring.push(key, op) } {
            Ok(()) => {
                self.in_flight += 1;
                true
            }
            Err(error) => {
                error!(%error, "io_uring submission failed");
                false
            }
        }
    }

    fn submit_plain(&mut self, key: OpKey, op: Op) -> bool {
        debug_assert!(matches!(op, Op::Close { .. } | Op::Cancel { .. }));
        // SAFETY: close and cancel carry no pointer.
        unsafe { self.submit(key, op) }
    }

    fn cancel_op(&mut self, target: OpKey) {
        self.submit_plain(
            OpKey::new(OpKind::Cancel, 0, 0),
            Op::Cancel {
                target: target.encode(),
            },
        );
    }

    fn close_fd(&mut self, fd: RawFd) {
        if !self.submit_plain(OpKey::new(OpKind::Close, 0, 0), Op::Close { fd }) {
            // SAFETY: `fd` belongs to a slot being freed; nothing else refers to it.
            unsafe { libc::close(fd) };
        }
    }

    fn arm_accept(&mut self) {
        let Some(fd) = self.listener else { return };
        if self.accept_armed || self.engine.is_shutting_down() {
            return;
        }
        // SAFETY: a multishot accept carries no pointer.
        if unsafe { self.submit(OpKey::new(OpKind::Accept, 0, 0), Op::AcceptMulti { fd }) } {
            self.accept_armed = true;
        }
    }

    fn close_listener(&mut self) {
        if let Some(fd) = self.listener.take() {
            if self.accept_armed {
                self.cancel_op(OpKey::new(OpKind::Accept, 0, 0));
            }
            // SAFETY: the listener fd is this shard's; a pending multishot accept ends with
            // an error completion once it is closed and cancelled.
            unsafe { libc::close(fd) };
        }
    }

    fn arm_mailbox(&mut self) {
        if self.mailbox_armed {
            return;
        }
        let Some(mailbox) = self.mailboxes.get(self.index) else {
            return;
        };
        let fd = mailbox.eventfd();
        let buf = (&mut *self.mailbox_buf as *mut u64).cast::<u8>();
        // SAFETY: `mailbox_buf` is boxed and stays put until `on_mailbox` reaps the read.
        let armed = unsafe {
            self.submit(
                OpKey::new(OpKind::MailboxRead, 0, 0),
                Op::Read { fd, buf, len: 8 },
            )
        };
        self.mailbox_armed = armed;
    }

    fn table(&mut self, conn: Conn) -> (&mut IoTable, (u32, u32)) {
        match conn {
            Conn::Client(id) => (&mut self.clients, client_key(id)),
            Conn::Server(id) => (&mut self.servers, server_key(id)),
        }
    }

    fn io(&mut self, conn: Conn) -> Option<&mut IoConn> {
        let (table, (index, generation)) = self.table(conn);
        table.get_mut(index, generation)
    }

    fn op_key(kind: OpKind, conn: Conn) -> OpKey {
        let (index, generation) = match conn {
            Conn::Client(id) => client_key(id),
            Conn::Server(id) => server_key(id),
        };
        OpKey::new(kind, index, generation)
    }

    fn recv_kind(conn: Conn) -> OpKind {
        match conn {
            Conn::Client(_) => OpKind::ClientRecv,
            Conn::Server(_) => OpKind::ServerRecv,
        }
    }

    fn send_kind(conn: Conn) -> OpKind {
        match conn {
            Conn::Client(_) => OpKind::ClientSend,
            Conn::Server(_) => OpKind::ServerSend,
        }
    }

    /// Arms a receive unless one is in flight, the engine paused it, or it is closing.
    fn arm_recv(&mut self, conn: Conn) {
        let min_free = match conn {
            Conn::Client(_) => CLIENT_RECV_MIN_FREE_BYTES,
            Conn::Server(_) => self.limits.server_recv_chunk_bytes / 4,
        };
        let Some(io) = self.io(conn) else { return };
        if !io.wants_recv() {
            return;
        }
        let op = io.recv.prepare(io.fd, min_free);
        // SAFETY: the receive buffer's spare capacity is the kernel's until `on_recv`
        // (`RecvBuf::prepare` marked it in flight; nothing grows or frees it meanwhile).
        if !unsafe { self.submit(Self::op_key(Self::recv_kind(conn), conn), op) }
            && let Some(io) = self.io(conn)
        {
            io.recv.on_failed();
        }
    }

    /// Starts a send of the connection's queue if none is in flight.
    fn flush(&mut self, conn: Conn) {
        let (chunks, budget) = (
            self.limits.send_batch_max_chunks,
            self.limits.send_budget_bytes,
        );
        let Some(io) = self.io(conn) else { return };
        if io.connecting || io.stage == Stage::Closing {
            return;
        }
        let Some(op) = io.send.prepare(io.fd, chunks, budget) else {
            return;
        };
        // SAFETY: the queued chunks (and the msghdr for a batch) are the kernel's until
        // `on_send` (`SendQueue::prepare` marked them in flight).
        if !unsafe { self.submit(Self::op_key(Self::send_kind(conn), conn), op) }
            && let Some(io) = self.io(conn)
        {
            io.send.on_failed();
        }
    }

    // ---- actions ----

    /// Acts on every action the engine decided (acting can be an event of its own, such as
    /// a socket that cannot be created, whose actions are taken in the same loop), then
    /// flushes the connections that got bytes, each once.
    fn act(&mut self, now: Instant) {
        while let Some(action) = self.engine.poll_action() {
            self.perform(now, action);
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        for conn in dirty.drain(..) {
            self.flush(conn);
        }
        self.dirty = dirty;
    }

    fn perform(&mut self, now: Instant, action: Action) {
        match action {
            Action::Send { conn, bytes } => {
                if let Some(io) = self.io(conn)
                    && io.stage != Stage::Closing
                {
                    io.send.push(bytes);
                    self.dirty.push(conn);
                }
            }
            Action::PauseRecv(conn) => {
                if let Some(io) = self.io(conn) {
                    io.paused = true;
                }
            }
            Action::ResumeRecv(conn) => {
                if let Some(io) = self.io(conn) {
                    io.paused = false;
                }
                self.arm_recv(conn);
            }
            Action::Connect { server, addr } => self.connect(now, server, addr),
            Action::Close { conn, how } => self.close(conn, how),
            Action::SendCancel {
                server,
                addr,
                request,
            } => self.send_cancel(now, server, addr, request),
            Action::Post { shard, command } => {
                let delivered = self
                    .mailboxes
                    .get(shard)
                    .is_some_and(|mailbox| mailbox.post(command).is_ok());
                if !delivered {
                    debug!(
                        shard,
                        "a command to another shard was dropped: its mailbox is full"
                    );
                }
            }
        }
    }

    fn connect(&mut self, now: Instant, id: ServerId, addr: SocketAddr) {
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        );
        let socket = match socket {
            Ok(socket) => socket,
            Err(error) => {
                let errno = error.raw_os_error().unwrap_or(libc::EMFILE);
                self.engine.handle_server_connected(now, id, Err(errno));
                return;
            }
        };
        let _ = socket.set_tcp_nodelay(true);
        let (index, generation) = server_key(id);
        let mut io = IoConn::new(
            socket.into_raw_fd(),
            generation,
            self.limits.server_recv_chunk_bytes,
        );
        let target = Box::new(SockAddr::from(addr));
        let op = Op::Connect {
            fd: io.fd,
            addr: target.as_ptr().cast(),
            len: target.len(),
        };
        io.addr = Some(target);
        io.connecting = true;
        self.servers.insert(index, io);
        // SAFETY: the boxed address stays in the connection until the connect is reaped.
        if !unsafe { self.submit(OpKey::new(OpKind::ServerConnect, index, generation), op) } {
            if let Some(io) = self.servers.get_mut(index, generation) {
                io.connecting = false;
            }
            self.engine.handle_server_connected(now, id, Err(libc::EIO));
        }
    }

    /// Begins a connection's teardown as the engine asked.
    fn close(&mut self, conn: Conn, how: CloseHow) {
        let Some(io) = self.io(conn) else { return };
        match (how, io.stage) {
            (_, Stage::Closing) => return,
            (CloseHow::Flush, Stage::Flushing) => return,
            (CloseHow::Flush, Stage::Open) => io.stage = Stage::Flushing,
            (CloseHow::Now, _) => io.stage = Stage::Closing,
        }
        let (recv, send, connecting) = (io.recv.in_flight(), io.send.in_flight(), io.connecting);
        let closing = io.stage == Stage::Closing;
        if recv {
            self.cancel_op(Self::op_key(Self::recv_kind(conn), conn));
        }
        if closing && send {
            self.cancel_op(Self::op_key(Self::send_kind(conn), conn));
        }
        if closing && connecting {
            self.cancel_op(Self::op_key(OpKind::ServerConnect, conn));
        }
        if !closing {
            self.dirty.push(conn);
        }
        self.try_finish(conn);
    }

    /// Frees a closing connection once the kernel owns none of its buffers.
    fn try_finish(&mut self, conn: Conn) {
        let Some(io) = self.io(conn) else { return };
        if !io.ready_to_close() {
            return;
        }
        if io.stage == Stage::Flushing {
            // Sent everything: the rest is an ordinary close.
            io.stage = Stage::Closing;
        }
        if !io.quiescent() {
            return;
        }
        if !io.send.in_flight() {
            io.send.clear();
        }
        let (table, (index, generation)) = self.table(conn);
        if let Some(io) = table.remove(index, generation) {
            self.close_fd(io.fd);
            self.engine.handle_closed(Instant::now(), conn);
        }
    }

    fn send_cancel(&mut self, now: Instant, server: ServerId, addr: SocketAddr, request: [u8; 16]) {
        let Ok(conn) = CancelConn::open(server, addr, request) else {
            self.engine.handle_cancel_done(now, server);
            return;
        };
        let (kind, op) = conn.connect_op();
        let fd = conn.fd;
        let Some(slot) = self.cancels.insert(conn) else {
            // SAFETY: the fd was never submitted; it is ours alone.
            unsafe { libc::close(fd) };
            self.engine.handle_cancel_done(now, server);
            return;
        };
        let id = CancelConnId(slot);
        // SAFETY: the cancel connection's boxed address stays alive in the slab until the
        // connect is reaped.
        if !unsafe { self.submit(cancel_key(kind, id), op) } {
            self.finish_cancel(now, id);
        }
    }

    // ---- completions ----

    fn dispatch(&mut self, now: Instant, completion: Completion) {
        let Some(key) = OpKey::decode(completion.user_data) else {
            error!(
                user_data = completion.user_data,
                "bug: a completion with an unknown key"
            );
            return;
        };
        if !(key.kind == OpKind::Accept && completion.more()) {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        let result = completion.result;
        let client = || {
            Conn::Client(ClientId(pgtier_engine::SlotRef {
                index: key.index,
                generation: key.generation,
            }))
        };
        let server = || {
            Conn::Server(ServerId(pgtier_engine::SlotRef {
                index: key.index,
                generation: key.generation,
            }))
        };
        match key.kind {
            OpKind::Accept => self.on_accept(now, result, completion.more()),
            OpKind::ClientRecv => self.on_recv(now, client(), result),
            OpKind::ServerRecv => self.on_recv(now, server(), result),
            OpKind::ClientSend => self.on_send(now, client(), result),
            OpKind::ServerSend => self.on_send(now, server(), result),
            OpKind::ServerConnect => self.on_connect(now, server(), result),
            OpKind::MailboxRead => self.on_mailbox(now, result),
            OpKind::CancelConnect | OpKind::CancelSend | OpKind::CancelRecv => {
                let id = CancelConnId(crate::io::slab::SlotRef {
                    index: key.index,
                    generation: key.generation,
                });
                self.on_cancel_op(now, id, key.kind, result);
            }
            OpKind::Close | OpKind::Cancel => {}
        }
    }

    fn on_accept(&mut self, now: Instant, result: i32, more: bool) {
        if !more {
            // A multishot accept that ends must be re-armed, or the shard stops accepting.
            self.accept_armed = false;
            self.arm_accept();
        }
        if result < 0 {
            log_errno("accept", result);
            return;
        }
        let fd = result;
        self.accepts += 1;
        if cfg!(debug_assertions) && self.panic_after_accepts.is_some_and(|n| self.accepts >= n) {
            panic!(
                "test hook: shard {} panics on accept {}",
                self.index, self.accepts
            );
        }
        set_nodelay(fd);
        let peer = peer_addr(fd);
        let Some(id) = self.engine.handle_accept(now, peer) else {
            // SAFETY: the fd is ours alone; the engine has no room to track it.
            unsafe { libc::close(fd) };
            return;
        };
        let (index, generation) = client_key(id);
        self.clients
            .insert(index, IoConn::new(fd, generation, CLIENT_RECV_CHUNK_BYTES));
        self.arm_recv(Conn::Client(id));
    }

    fn on_recv(&mut self, now: Instant, conn: Conn, result: i32) {
        let Some(io) = self.io(conn) else {
            debug!(?conn, "stale receive completion");
            return;
        };
        io.recv.on_failed_or_received(result);
        if io.stage != Stage::Open {
            io.recv.data.clear();
            self.try_finish(conn);
            return;
        }
        if result < 0 && classify(result) == ErrnoAction::Retry {
            self.arm_recv(conn);
            return;
        }
        if result <= 0 {
            log_errno("receive", result);
            match conn {
                Conn::Client(id) => self.engine.handle_client_gone(now, id),
                Conn::Server(id) => self.engine.handle_server_gone(now, id, errno_of(result)),
            }
            return;
        }
        let data = io.recv.data.split();
        io.recv.shrink_if_idle(KEEP_RECV_BYTES);
        match conn {
            Conn::Client(id) => self.engine.handle_client_data(now, id, data),
            Conn::Server(id) => self.engine.handle_server_data(now, id, data),
        }
        self.arm_recv(conn);
    }

    fn on_send(&mut self, now: Instant, conn: Conn, result: i32) {
        let Some(io) = self.io(conn) else {
            debug!(?conn, "stale send completion");
            return;
        };
        if result < 0 {
            io.send.on_failed();
            if classify(result) == ErrnoAction::Retry && io.stage != Stage::Closing {
                self.dirty.push(conn);
                return;
            }
            if io.stage != Stage::Open {
                io.send.clear();
                io.stage = Stage::Closing;
                self.try_finish(conn);
                return;
            }
            log_errno("send", result);
            match conn {
                Conn::Client(id) => self.engine.handle_client_gone(now, id),
                Conn::Server(id) => self.engine.handle_server_gone(now, id, errno_of(result)),
            }
            return;
        }
        let sent = result as usize;
        io.send.on_sent(sent);
        let stage = io.stage;
        if let Conn::Client(id) = conn {
            self.engine.handle_client_sent(now, id, sent);
        }
        match stage {
            Stage::Open | Stage::Flushing => self.dirty.push(conn),
            Stage::Closing => {}
        }
        self.try_finish(conn);
    }

    fn on_connect(&mut self, now: Instant, conn: Conn, result: i32) {
        let Conn::Server(id) = conn else { return };
        let Some(io) = self.io(conn) else { return };
        io.connecting = false;
        if io.stage != Stage::Open {
            self.try_finish(conn);
            return;
        }
        let outcome = if result < 0 { Err(-result) } else { Ok(()) };
        self.engine.handle_server_connected(now, id, outcome);
        self.dirty.push(conn);
        self.arm_recv(conn);
    }

    fn on_mailbox(&mut self, now: Instant, result: i32) {
        self.mailbox_armed = false;
        if result < 0 && classify(result) == ErrnoAction::Bug {
            error!(result, "mailbox read failed");
        }
        let Some(mailbox) = self.mailboxes.get(self.index).cloned() else {
            return;
        };
        while let Some(command) = mailbox.pop() {
            self.on_command(now, command);
        }
        self.engine.handle_routing_replies(now);
        if !self.finished() {
            self.arm_mailbox();
        }
    }

    fn on_command(&mut self, now: Instant, command: Command) {
        match &command {
            Command::Reload { config, .. } => {
                self.limits = IoLimits::from_config(config);
                info!(shard = self.index, "configuration reloaded");
            }
            Command::Shutdown(_) => {
                self.engine.handle_command(now, command);
                self.close_listener();
                return;
            }
            _ => {}
        }
        self.engine.handle_command(now, command);
    }

    fn on_cancel_op(&mut self, now: Instant, id: CancelConnId, kind: OpKind, result: i32) {
        let Some(conn) = self.cancels.get_mut(id.0) else {
            return;
        };
        match conn.next_op(kind, result) {
            Some((kind, op)) => {
                // SAFETY: the cancel connection's boxed packet and scratch buffer stay in the
                // slab until this op is reaped.
                if !unsafe { self.submit(cancel_key(kind, id), op) } {
                    self.finish_cancel(now, id);
                }
            }
            None => self.finish_cancel(now, id),
        }
    }

    fn finish_cancel(&mut self, now: Instant, id: CancelConnId) {
        let Some(conn) = self.cancels.remove(id.0) else {
            return;
        };
        self.close_fd(conn.fd);
        self.engine.handle_cancel_done(now, conn.server);
    }
}

impl<R: Ring> Drop for Shard<R> {
    /// Nothing the kernel still writes into may be freed: every in-flight operation is
    /// cancelled and its completion waited for (bounded, so a broken ring cannot hang the
    /// process on its way out) before the buffers go.
    fn drop(&mut self) {
        if self.in_flight == 0 {
            return;
        }
        let mut targets = Vec::new();
        for (index, generation) in self.clients.ids() {
            targets.push(OpKey::new(OpKind::ClientRecv, index, generation));
            targets.push(OpKey::new(OpKind::ClientSend, index, generation));
        }
        for (index, generation) in self.servers.ids() {
            targets.push(OpKey::new(OpKind::ServerRecv, index, generation));
            targets.push(OpKey::new(OpKind::ServerSend, index, generation));
            targets.push(OpKey::new(OpKind::ServerConnect, index, generation));
        }
        targets.push(OpKey::new(OpKind::Accept, 0, 0));
        targets.push(OpKey::new(OpKind::MailboxRead, 0, 0));
        for target in targets {
            self.cancel_op(target);
        }
        let deadline = Instant::now() + DROP_WAIT;
        let mut completions = Vec::new();
        while self.in_flight > 0 && Instant::now() < deadline {
            if self
                .ring
                .submit_and_wait(true, Some(Duration::from_millis(10)))
                .is_err()
            {
                break;
            }
            completions.clear();
            self.ring.reap(&mut completions);
            for completion in &completions {
                let multishot = OpKey::decode(completion.user_data)
                    .is_some_and(|key| key.kind == OpKind::Accept)
                    && completion.more();
                if !multishot {
                    self.in_flight = self.in_flight.saturating_sub(1);
                }
            }
        }
        if self.in_flight > 0 {
            error!(
                shard = self.index,
                in_flight = self.in_flight,
                "operations still in flight at shard exit; their buffers are leaked, not freed"
            );
            // Leaking is the only safe choice left: the kernel may still write into them.
            std::mem::forget(std::mem::take(&mut self.clients));
            std::mem::forget(std::mem::take(&mut self.servers));
            std::mem::forget(std::mem::replace(&mut self.mailbox_buf, Box::new(0)));
        }
    }
}

fn cancel_key(kind: OpKind, id: CancelConnId) -> OpKey {
    OpKey::new(kind, id.0.index, id.0.generation)
}

fn errno_of(result: i32) -> Option<i32> {
    (result < 0).then_some(-result)
}

/// Logs an errno from a completion per the classifier.
fn log_errno(what: &str, result: i32) {
    match classify(result) {
        ErrnoAction::Bug => error!(
            what,
            errno = -result,
            "bug: operation rejected by the kernel"
        ),
        ErrnoAction::Close => debug!(what, errno = -result, "connection ended"),
        ErrnoAction::Retry | ErrnoAction::Cancelled => {}
    }
}

fn set_nodelay(fd: i32) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a live local; failure only costs latency.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

/// The peer address of a fresh client socket, for the admin console's listings.
fn peer_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: `fd` was just accepted and is open for the duration of this call; the borrow
    // does not outlive it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).peer_addr().ok()?.as_socket()
}
