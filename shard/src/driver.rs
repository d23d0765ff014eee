//! One shard: a pinned thread's ring, its listeners, and the loop that turns completions into
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
//!   their memory until the completion is reaped. Clients receive through one multishot
//!   recv into the ring's shared provided buffers, copied out and given back at once, so
//!   an idle client holds no receive memory and a busy one re-arms nothing.
//! - **Teardown in steps.** A closing connection stops receiving, has its in-flight ops
//!   cancelled, and its socket is closed and its slot freed (engine told with
//!   `handle_closed`) only once the kernel owns none of its buffers. Dropping a shard
//!   cancels everything in flight and waits for the completions before any buffer is freed.

use std::os::fd::{IntoRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgtier_engine::ids::Slab;
use pgtier_engine::{
    Action, ClientAddr, ClientId, CloseHow, Command, Conn, DetachedSocket, Engine, ServerAddr,
    ServerId, SlotRef,
};
use tracing::{debug, error, info};

use crate::cancel_conn::{CancelConn, CancelConnId};
use crate::conn_io::{IoConn, IoTable, KEEP_RECV_BYTES, Stage, client_key, server_key};
use crate::io::errno::{ErrnoAction, classify};
use crate::io::op_key::{OpKey, OpKind};
use crate::io::recv_buf::RecvKind;
use crate::io::ring::{Completion, Op, Ring};
use crate::io::send_queue::SpareRings;
use crate::listen::{ListenerKind, ShardListener};
use crate::mailbox::Mailbox;
use crate::sockets::{local_addr, peer_addr, peer_is_own_user, peer_user_name, server_socket};

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
    /// One provided buffer's size (`recv_buffer_bytes`).
    provided_bytes: usize,
}

impl IoLimits {
    fn from_config(config: &pgtier_core::config::Config) -> IoLimits {
        let s = &config.pgtier;
        IoLimits {
            send_batch_max_chunks: (s.send_batch_max_chunks as usize).clamp(1, 1024),
            send_budget_bytes: (s.send_budget_bytes as usize).max(1),
            server_recv_chunk_bytes: (s.server_recv_buffer_bytes as usize).max(4096),
            provided_bytes: s.recv_buffer_bytes as usize,
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
    /// The listening sockets this shard accepts on (owned: closed at shutdown); none in
    /// tests without a listener.
    pub listeners: Vec<ShardListener>,
    /// Test-only: panic after this many accepts (`PGTIER_TEST_PANIC_AFTER_ACCEPTS`, read by
    /// the `pgtier` crate's `proxy.rs`).
    pub panic_after_accepts: Option<u64>,
}

pub struct Shard<R: Ring> {
    index: usize,
    ring: R,
    engine: Engine,
    clients: IoTable,
    servers: IoTable,
    cancels: Slab<CancelConn>,
    /// The listeners, by the index their accept's key carries.
    listeners: Vec<ListenerSlot>,
    mailboxes: Vec<Arc<Mailbox>>,
    /// The mailbox eventfd read target; owned by the kernel while `mailbox_armed`.
    mailbox_buf: Box<u64>,
    mailbox_armed: bool,
    limits: IoLimits,
    /// Operations handed to the ring whose (last) completion was not reaped yet.
    in_flight: usize,
    /// Connections given bytes this pass, flushed once at its end.
    dirty: Vec<Conn>,
    /// Connections whose receive completed this pass, armed again after the flushes: a
    /// send queued behind a receive's arming waits for the kernel to arm it (a poll, for a
    /// server's POLL_FIRST receive), and that send is what the peer is waiting for.
    rearm: Vec<Conn>,
    /// The engine's next deadline, as of the end of the last turn.
    deadline: Instant,
    completions: Vec<Completion>,
    /// Chunk rings the clients' send queues hand on (`SendQueue` says why).
    spare_rings: SpareRings,
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
            listeners: parts
                .listeners
                .into_iter()
                .map(|listener| ListenerSlot {
                    listener: Some(listener),
                    accept_armed: false,
                    accept_cancelled: false,
                })
                .collect(),
            mailboxes: parts.mailboxes,
            mailbox_buf: Box::new(0),
            mailbox_armed: false,
            limits: IoLimits::from_config(config),
            in_flight: 0,
            dirty: Vec::new(),
            rearm: Vec::new(),
            deadline: Instant::now(),
            completions: Vec::with_capacity(256),
            spare_rings: SpareRings::default(),
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
        self.arm_accepts();
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
        // The deadline asked for at the end of the last turn: what this turn's completions
        // set is in the future, and is asked for at its end (`poll_timeout` walks every timer
        // source, so it runs once per turn, not twice).
        if self.deadline <= now {
            self.engine.handle_timeout(now);
        }
        self.act(now);
        if self.engine.is_shutting_down() {
            self.close_listeners(now);
        }
        // Measured from the turn's start: the timer fires late by this turn's work (some
        // microseconds), and the loop reads the clock once per turn, not twice.
        self.deadline = self.engine.poll_timeout();
        let timeout = self.deadline.saturating_duration_since(now);
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
            && self.listeners.iter().all(|slot| !slot.accept_armed)
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

    fn arm_accepts(&mut self) {
        for index in 0..self.listeners.len() {
            self.arm_accept(index);
        }
    }

    fn arm_accept(&mut self, index: usize) {
        let Some(slot) = self.listeners.get(index) else {
            return;
        };
        let Some(listener) = slot.listener else {
            return;
        };
        if slot.accept_armed || slot.accept_cancelled || !self.accepts_on(listener.kind) {
            return;
        }
        let key = accept_key(index);
        // SAFETY: a multishot accept carries no pointer.
        if unsafe { self.submit(key, Op::AcceptMulti { fd: listener.fd }) }
            && let Some(slot) = self.listeners.get_mut(index)
        {
            slot.accept_armed = true;
        }
    }

    /// Whether the engine takes connections from a listener of `kind` now.
    fn accepts_on(&self, kind: ListenerKind) -> bool {
        match kind {
            ListenerKind::Tcp => !self.engine.is_shutting_down(),
            ListenerKind::Unix { .. } => self.engine.accepts_on_unix_socket(),
        }
    }

    /// Closes the listeners the engine no longer takes connections from (at shutdown: the
    /// TCP ones at once, the Unix socket once the shard is done).
    fn close_listeners(&mut self, now: Instant) {
        for index in 0..self.listeners.len() {
            let Some(listener) = self.listeners[index].listener else {
                continue;
            };
            if !self.accepts_on(listener.kind) {
                self.close_listener(now, index);
            }
        }
    }

    /// Stops listening on listener `index` without dropping a connection the kernel already
    /// took for us.
    ///
    /// Linux resets the connections still in a listener's accept queue when it closes
    /// (unless `net.ipv4.tcp_migrate_req = 1` moves them to another listener of the
    /// SO_REUSEPORT group). So the listener first shrinks its backlog to nothing, which makes
    /// the kernel drop (not reset) new SYNs hashed to it — the client retries them, and by
    /// then the retry lands on a listener that is still open (the new process of a rolling
    /// restart) — then every connection already queued is accepted here and served, and only
    /// then is the socket closed. What is left is a window of a few system calls between the
    /// last accept and the close (see docs/operations.md, "Rolling restart").
    ///
    /// The multishot accept is cancelled first and the rest waits for its last completion:
    /// until then the ring holds a reference to the socket, so closing the fd would not
    /// close the listener, and it would go on taking connections nobody drains.
    ///
    /// When a queued client would only be refused (`WAIT_FOR_SERVERS`, an immediate
    /// shutdown), draining it helps nobody: the TCP listener leaves its `SO_REUSEPORT` group
    /// at once instead (`shutdown(SHUT_RD)` stops a listening socket even while the ring
    /// still holds it), so what the kernel had queued here goes to another process's
    /// listener with `tcp_migrate_req = 1` (reset without it, as when PgBouncer exits), and
    /// nothing more is accepted here to be refused.
    fn close_listener(&mut self, now: Instant, index: usize) {
        let refuses_queued = self.engine.refuses_queued_tcp_clients();
        let Some(slot) = self.listeners.get_mut(index) else {
            return;
        };
        let Some(listener) = slot.listener else {
            return;
        };
        if slot.accept_armed {
            if !slot.accept_cancelled {
                slot.accept_cancelled = true;
                if refuses_queued {
                    stop_listening(listener);
                }
                self.cancel_op(accept_key(index));
            }
            return;
        }
        if refuses_queued {
            stop_listening(listener);
        }
        slot.listener = None;
        let fd = listener.fd;
        // A Unix listener: every shard holds a duplicate of the one socket, its backlog is
        // theirs too, and what is queued on it is accepted by the shards still open. A TCP
        // listener stopped (above, or by the signal loop) has nothing to drain, and `listen`
        // would restart it.
        if refuses_queued || matches!(listener.kind, ListenerKind::Unix { .. }) || !is_listening(fd)
        {
            // SAFETY: the listener fd is this shard's and no operation uses it any more.
            unsafe { libc::close(fd) };
            return;
        }
        // SAFETY: `fd` is this shard's listener; fcntl and listen only change its flags and
        // backlog.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
            libc::listen(fd, 0);
        }
        let mut drained = 0usize;
        loop {
            // SAFETY: non-blocking accept on our listener; null address pointers are allowed.
            let conn = unsafe {
                libc::accept4(
                    fd,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if conn < 0 {
                break;
            }
            drained += 1;
            self.accept_one(now, listener.kind, conn);
        }
        if drained > 0 {
            info!(
                shard = self.index,
                drained, "accepted the queued connections before closing the listener"
            );
        }
        // Stopped, not only closed: the signal loop holds a duplicate (`TcpStops`).
        stop_listening(listener);
        // SAFETY: the listener fd is this shard's and no operation uses it any more.
        unsafe { libc::close(fd) };
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

    fn table(&mut self, conn: Conn) -> (&mut IoTable, SlotRef) {
        match conn {
            Conn::Client(id) => (&mut self.clients, client_key(id)),
            Conn::Server(id) => (&mut self.servers, server_key(id)),
        }
    }

    fn io(&mut self, conn: Conn) -> Option<&mut IoConn> {
        let (table, id) = self.table(conn);
        table.get_mut(id)
    }

    /// `conn`'s I/O state and the shard's spare chunk rings, for a send queue's changes.
    fn io_and_spares(&mut self, conn: Conn) -> Option<(&mut IoConn, &mut SpareRings)> {
        let io = match conn {
            Conn::Client(id) => self.clients.get_mut(client_key(id)),
            Conn::Server(id) => self.servers.get_mut(server_key(id)),
        }?;
        Some((io, &mut self.spare_rings))
    }

    fn op_key(kind: OpKind, conn: Conn) -> OpKey {
        let id = match conn {
            Conn::Client(id) => client_key(id),
            Conn::Server(id) => server_key(id),
        };
        OpKey::new(kind, id.index, id.generation)
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
        // Only own buffers (servers) use it; clients' multishot needs no room of their own.
        let min_free = self.limits.server_recv_chunk_bytes / 4;
        let Some(io) = self.io(conn) else { return };
        if !io.wants_recv() {
            return;
        }
        let op = io.recv.prepare(io.fd, min_free);
        // SAFETY: the receive buffer's spare capacity is the kernel's until `on_recv`
        // (`RecvBuf::prepare` marked it in flight; nothing grows or frees it meanwhile); a
        // multishot into provided buffers points at no memory of the connection.
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
        let mut rearm = std::mem::take(&mut self.rearm);
        for conn in rearm.drain(..) {
            self.arm_recv(conn);
        }
        self.rearm = rearm;
    }

    fn perform(&mut self, now: Instant, action: Action) {
        match action {
            Action::Send { conn, bytes } => {
                if let Some((io, spares)) = self.io_and_spares(conn)
                    && io.stage != Stage::Closing
                {
                    io.send.push(bytes, spares);
                    self.dirty.push(conn);
                }
            }
            Action::PauseRecv(conn) => {
                let Some(io) = self.io(conn) else { return };
                io.paused = true;
                // A one-shot receive simply is not re-armed; a multishot would go on
                // delivering, so it is cancelled (what it posts before the cancel lands
                // still reaches the engine, which holds it).
                if io.recv.kind() == RecvKind::Provided && io.recv.in_flight() {
                    self.cancel_op(Self::op_key(Self::recv_kind(conn), conn));
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
            } => self.send_cancel(now, Some(server), addr, request),
            Action::ForwardCancel { addr, request } => self.send_cancel(now, None, addr, request),
            Action::Post { shard, command } => {
                let undelivered = match self.mailboxes.get(shard) {
                    Some(mailbox) => mailbox.post(command).err(),
                    None => Some(command),
                };
                match undelivered {
                    None => {}
                    // A server on its way cannot be dropped (its socket and its slot would
                    // leak): it stays here, adopted back by this shard's engine.
                    Some(command @ Command::ServerMoved { .. }) => {
                        debug!(shard, "a moving server stays: the mailbox is full");
                        self.engine.handle_command(now, command);
                    }
                    Some(_) => debug!(
                        shard,
                        "a command to another shard was dropped: its mailbox is full"
                    ),
                }
            }
            Action::Detach(server) => self.detach(now, server),
            Action::Adopt { server, socket } => self.adopt(server, socket),
            Action::CloseSocket(socket) => self.close_fd(socket.into_raw()),
        }
    }

    /// Starts moving a server's socket to another shard: no receive from now on (the one
    /// in flight is cancelled), the queue still goes out, and the socket leaves once the
    /// kernel owns none of its buffers (`try_detach`).
    fn detach(&mut self, now: Instant, id: ServerId) {
        let conn = Conn::Server(id);
        let Some(io) = self.io(conn) else { return };
        if io.stage != Stage::Open {
            return;
        }
        io.stage = Stage::Detaching;
        let (recv, queued) = (io.recv.in_flight(), !io.send.is_empty());
        if recv {
            self.cancel_op(Self::op_key(OpKind::ServerRecv, conn));
        }
        if queued {
            self.dirty.push(conn);
        }
        self.try_detach(now, id);
    }

    /// Takes a detaching server's socket out of the table, unclosed, and gives it to the
    /// engine, once nothing of it is in flight. The engine gives it back when the server
    /// does not move after all; it is closed then.
    fn try_detach(&mut self, now: Instant, id: ServerId) {
        if !self
            .servers
            .get_mut(server_key(id))
            .is_some_and(|io| io.ready_to_detach())
        {
            return;
        }
        let Some(io) = self.servers.remove(server_key(id)) else {
            return;
        };
        // The kernel owns none of its buffers (`ready_to_detach`), so they may go; the
        // descriptor goes on, owned by whoever the engine hands it to.
        let socket = DetachedSocket::from_raw(io.fd);
        drop(io);
        if let Some(socket) = self.engine.handle_detached(now, id, socket) {
            self.close_fd(socket.into_raw());
        }
    }

    /// Registers a server socket another shard detached as this slot's connection.
    fn adopt(&mut self, id: ServerId, socket: DetachedSocket) {
        // The descriptor is process-wide and was detached from the other shard's ring with
        // nothing in flight: from here it is this shard's alone.
        let fd = socket.into_raw();
        self.servers.insert(
            server_key(id),
            IoConn::server(
                fd,
                self.limits.server_recv_chunk_bytes,
                self.limits.provided_bytes,
            ),
        );
        self.arm_recv(Conn::Server(id));
    }

    fn connect(&mut self, now: Instant, id: ServerId, addr: ServerAddr) {
        let opened = server_socket(&addr);
        let (socket, target) = match opened {
            Ok(opened) => opened,
            Err(error) => {
                let errno = error.raw_os_error().unwrap_or(libc::EMFILE);
                self.engine.handle_server_connected(now, id, Err(errno));
                return;
            }
        };
        let key = server_key(id);
        let mut io = IoConn::server(
            socket.into_raw_fd(),
            self.limits.server_recv_chunk_bytes,
            self.limits.provided_bytes,
        );
        let target = Box::new(target);
        let op = Op::Connect {
            fd: io.fd,
            addr: target.as_ptr().cast(),
            len: target.len(),
        };
        io.addr = Some(target);
        io.connecting = true;
        self.servers.insert(key, io);
        let op_key = OpKey::new(OpKind::ServerConnect, key.index, key.generation);
        // SAFETY: the boxed address stays in the connection until the connect is reaped.
        if !unsafe { self.submit(op_key, op) } {
            if let Some(io) = self.servers.get_mut(key) {
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
            // The engine gave up moving it: it closes instead.
            (_, Stage::Detaching) | (CloseHow::Now, _) => io.stage = Stage::Closing,
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
        let Some((io, spares)) = self.io_and_spares(conn) else {
            return;
        };
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
            io.send.clear(spares);
        }
        let (table, id) = self.table(conn);
        if let Some(io) = table.remove(id) {
            self.close_fd(io.fd);
            self.engine.handle_closed(Instant::now(), conn);
        }
    }

    /// Opens a cancel connection for `server` (`None`: a request forwarded to a peer, of
    /// which the engine hears nothing more).
    fn send_cancel(
        &mut self,
        now: Instant,
        server: Option<ServerId>,
        addr: ServerAddr,
        request: [u8; 16],
    ) {
        let Ok(conn) = CancelConn::open(server, &addr, request) else {
            self.cancel_done(now, server);
            return;
        };
        let (kind, op) = conn.connect_op();
        let fd = conn.fd;
        let Some(slot) = self.cancels.insert(conn) else {
            // SAFETY: the fd was never submitted; it is ours alone.
            unsafe { libc::close(fd) };
            self.cancel_done(now, server);
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
        // A multishot op (accept, client receive) stays in flight while MORE is set.
        if !completion.more() {
            self.in_flight = self.in_flight.saturating_sub(1);
        }
        let result = completion.result;
        let client = || {
            Conn::Client(ClientId(SlotRef {
                index: key.index,
                generation: key.generation,
            }))
        };
        let server = || {
            Conn::Server(ServerId(SlotRef {
                index: key.index,
                generation: key.generation,
            }))
        };
        match key.kind {
            OpKind::Accept => self.on_accept(now, key.index as usize, result, completion.more()),
            OpKind::ClientRecv => self.on_recv(now, client(), completion),
            OpKind::ServerRecv => self.on_recv(now, server(), completion),
            OpKind::ClientSend => self.on_send(now, client(), result),
            OpKind::ServerSend => self.on_send(now, server(), result),
            OpKind::ServerConnect => self.on_connect(now, server(), result),
            OpKind::MailboxRead => self.on_mailbox(now, result),
            OpKind::CancelConnect | OpKind::CancelSend | OpKind::CancelRecv => {
                let id = CancelConnId(SlotRef {
                    index: key.index,
                    generation: key.generation,
                });
                self.on_cancel_op(now, id, key.kind, result);
            }
            OpKind::Close | OpKind::Cancel => {}
        }
    }

    fn on_accept(&mut self, now: Instant, listener: usize, result: i32, more: bool) {
        let Some(slot) = self.listeners.get_mut(listener) else {
            error!(listener, "bug: an accept completion for no listener");
            return;
        };
        let kind = slot.listener.map(|listener| listener.kind);
        if !more {
            // A multishot accept that ends must be re-armed, or the shard stops accepting.
            slot.accept_armed = false;
            // EINVAL: the socket no longer listens. A shutdown stopped it (this shard's
            // `close_listener`, or the signal loop's `TcpStops` just before the shutdown
            // reaches this shard's mailbox): nothing to accept or re-arm; the listener is
            // closing.
            let stopped = result == -libc::EINVAL && kind == Some(ListenerKind::Tcp);
            if stopped {
                slot.accept_cancelled = true;
            }
            let cancelled = slot.accept_cancelled;
            self.arm_accept(listener);
            if cancelled {
                if let Some(kind) = kind
                    && !stopped
                {
                    self.accept_one(now, kind, result);
                }
                // The cancelled accept is over: drain and close the listener now.
                self.close_listener(now, listener);
                return;
            }
        }
        let Some(kind) = kind else {
            if result >= 0 {
                // SAFETY: a connection accepted for a listener already closed; ours alone.
                unsafe { libc::close(result) };
            }
            return;
        };
        self.accept_one(now, kind, result);
    }

    fn accept_one(&mut self, now: Instant, kind: ListenerKind, result: i32) {
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
        let peer = match kind {
            ListenerKind::Unix { port } => Some(ClientAddr::Unix {
                port,
                own_user: peer_is_own_user(fd),
            }),
            ListenerKind::Tcp => {
                set_nodelay(fd);
                peer_addr(fd).map(ClientAddr::Tcp)
            }
        };
        let Some(id) = self.engine.handle_accept(now, peer) else {
            // SAFETY: the fd is ours alone; the engine has no room to track it.
            unsafe { libc::close(fd) };
            return;
        };
        self.engine
            .handle_local_addr(Conn::Client(id), local_addr(fd));
        if matches!(kind, ListenerKind::Unix { .. }) {
            self.engine.handle_peer_user(id, peer_user_name(fd));
        }
        self.clients.insert(client_key(id), IoConn::client(fd));
        self.arm_recv(Conn::Client(id));
    }

    fn on_recv(&mut self, now: Instant, conn: Conn, completion: Completion) {
        let result = completion.result;
        // A provided buffer goes back to the kernel first, whatever becomes of its bytes
        // (a stale or closing connection's included).
        let provided = completion.buffer().map(|bid| {
            let len = usize::try_from(result).unwrap_or(0);
            let bytes = self.ring.provided(bid, len);
            // A server copies into its own buffer, reused from one answer to the next; a
            // client, which may idle for hours after, into an allocation of the bytes' size.
            let copied = match conn {
                Conn::Server(id) => self
                    .servers
                    .get_mut(server_key(id))
                    .map(|io| io.recv.copy_provided(bytes)),
                Conn::Client(_) => None,
            }
            .unwrap_or_else(|| BytesMut::from(bytes));
            self.ring.recycle(bid);
            copied
        });
        let Some(io) = self.io(conn) else {
            debug!(?conn, "stale receive completion");
            return;
        };
        if io.recv.on_completion(result, completion.more()) {
            // A server's answer filled a provided buffer: the rest comes into its own
            // buffer, armed once the multishot's last completion is in.
            self.cancel_op(Self::op_key(Self::recv_kind(conn), conn));
        }
        let Some(io) = self.io(conn) else { return };
        if io.stage == Stage::Detaching {
            let nothing_read = result == -libc::ECANCELED
                || (result < 0 && classify(result) == ErrnoAction::Retry);
            if nothing_read {
                if let Conn::Server(id) = conn {
                    self.try_detach(now, id);
                }
                return;
            }
            // Bytes, an end of file or an error came before the cancel: the engine hears of
            // it as usual and closes the server rather than move it.
            io.stage = Stage::Open;
        }
        if io.stage != Stage::Open {
            io.recv.data.clear();
            self.try_finish(conn);
            return;
        }
        if result < 0
            && matches!(
                classify(result),
                ErrnoAction::Retry | ErrnoAction::Cancelled
            )
        {
            // A retry, or a multishot cancelled by a pause: armed again unless still paused.
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
        let data = match provided {
            Some(bytes) => bytes,
            None => {
                let data = io.recv.data.split();
                io.recv.shrink_if_idle(KEEP_RECV_BYTES);
                data
            }
        };
        match conn {
            Conn::Client(id) => self.engine.handle_client_data(now, id, data),
            Conn::Server(id) => self.engine.handle_server_data(now, id, data),
        }
        // Armed after this pass's sends (see `rearm`); a multishot is still armed.
        self.rearm.push(conn);
    }

    fn on_send(&mut self, now: Instant, conn: Conn, result: i32) {
        let Some((io, spares)) = self.io_and_spares(conn) else {
            debug!(?conn, "stale send completion");
            return;
        };
        if result < 0 {
            io.send.on_failed();
            if classify(result) == ErrnoAction::Retry && io.stage != Stage::Closing {
                self.dirty.push(conn);
                return;
            }
            if io.stage == Stage::Detaching {
                // It cannot move with a broken socket; the engine closes it.
                io.stage = Stage::Open;
            }
            if io.stage != Stage::Open {
                io.send.clear(spares);
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
        io.send.on_sent(sent, spares);
        let stage = io.stage;
        if let Conn::Client(id) = conn {
            self.engine.handle_client_sent(now, id, sent);
        }
        match stage {
            Stage::Open | Stage::Flushing => self.dirty.push(conn),
            Stage::Detaching => {
                self.dirty.push(conn);
                if let Conn::Server(id) = conn {
                    self.try_detach(now, id);
                }
                return;
            }
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
        let fd = io.fd;
        let outcome = if result < 0 { Err(-result) } else { Ok(()) };
        if outcome.is_ok() {
            self.engine.handle_local_addr(conn, local_addr(fd));
        }
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
                self.close_listeners(now);
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
        self.cancel_done(now, conn.server);
    }

    /// A cancel connection ended: the engine hears of it if it was for one of its servers.
    fn cancel_done(&mut self, now: Instant, server: Option<ServerId>) {
        if let Some(server) = server {
            self.engine.handle_cancel_done(now, server);
        }
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
        for SlotRef { index, generation } in self.clients.ids() {
            targets.push(OpKey::new(OpKind::ClientRecv, index, generation));
            targets.push(OpKey::new(OpKind::ClientSend, index, generation));
        }
        for SlotRef { index, generation } in self.servers.ids() {
            targets.push(OpKey::new(OpKind::ServerRecv, index, generation));
            targets.push(OpKey::new(OpKind::ServerSend, index, generation));
            targets.push(OpKey::new(OpKind::ServerConnect, index, generation));
        }
        targets.extend((0..self.listeners.len()).map(accept_key));
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
                if let Some(bid) = completion.buffer() {
                    self.ring.recycle(bid);
                }
                if !completion.more() {
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

/// A listener's slot: the socket until it is closed, and whether its accept is armed.
struct ListenerSlot {
    /// `None` once closed at shutdown.
    listener: Option<ShardListener>,
    /// True from submitting the multishot accept until a completion without MORE.
    accept_armed: bool,
    /// The listener is closing: the multishot accept was cancelled (or ended because the
    /// socket was stopped), and the listener is drained and closed once its last completion
    /// arrives (`close_listener`).
    accept_cancelled: bool,
}

/// Takes a TCP listener out of its `SO_REUSEPORT` group now (`listen::stop_listening_fd`);
/// its fd stays open until `close_listener` closes it. A Unix listener is shared by every
/// shard and left alone.
fn stop_listening(listener: ShardListener) {
    if listener.kind == ListenerKind::Tcp {
        crate::listen::stop_listening_fd(listener.fd);
    }
}

/// Whether `fd` is a listening socket (`SO_ACCEPTCONN`); not once it was stopped.
fn is_listening(fd: RawFd) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into a live local.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && value != 0
}

/// The key of listener `index`'s multishot accept.
fn accept_key(index: usize) -> OpKey {
    OpKey::new(OpKind::Accept, u32::try_from(index).unwrap_or(u32::MAX), 0)
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
