//! One shard: a pinned thread's ring, its listener, its clients, servers and pool slices, and
//! the loop that collects completions, dispatches them, runs due timers and submits once.
//!
//! Handlers live beside this file by concern: `session.rs` (client startup, auth, forwarding
//! to the server), `admin_session.rs` (the admin console), `pooling.rs` (pools, waiters,
//! hand-over, release), `login.rs` (server connect and login), `backend.rs` (server receive,
//! relay, drain), `relay.rs` (walking a server's output), `cancel.rs` (cancel keys and
//! connections), `housekeeping.rs` (timeouts, mailbox commands, shutdown). This file owns the
//! loop, dispatch, and submitting and tearing down ops.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use pgtier_core::config::Config;
use tracing::{debug, error, warn};

use crate::cancel::CancelConn;
use crate::client::{Client, ClientState};
use crate::io::errno::{ErrnoAction, classify};
use crate::io::op_key::{OpKey, OpKind};
use crate::io::ring::{Completion, Op, Ring};
use crate::io::slab::{CancelConnId, ClientId, ServerId, Slab, SlotRef};
use crate::io::timer::Timers;
use crate::mailbox::{Mailbox, ShutdownMode};
use crate::pool::{PoolBudgets, Pools};
use crate::routing::SharedRouting;
use crate::server::{Server, ServerState};
use crate::stats::{LocalStats, SharedStats};
use crate::userlist::UserList;
use pgtier_core::metrics::{ClassLatency, FlushPolicy, ShardCounters, SharedTotals};

/// Bytes a client receive buffer grows by: small, because 10,000 idle clients each keep one.
pub const CLIENT_RECV_CHUNK_BYTES: usize = 2048;
/// Free room asked for before each client receive.
pub const CLIENT_RECV_MIN_FREE_BYTES: usize = 512;
/// Longest startup packet accepted (PostgreSQL's own limit).
pub const MAX_STARTUP_BYTES: u32 = 10_000;
/// Housekeeping period: timeouts are checked at this granularity, as PgBouncer does.
pub const HOUSEKEEPING_PERIOD: Duration = Duration::from_millis(250);

/// State shared by all shards, read off the query path.
pub struct Shared {
    pub mailboxes: Vec<Arc<Mailbox>>,
    pub budgets: Arc<PoolBudgets>,
    pub stats: Arc<SharedStats>,
    pub totals: Arc<SharedTotals>,
    /// Clients connected across all shards (max_client_conn).
    pub clients: AtomicU32,
    /// Shards whose loop has returned.
    pub finished_shards: AtomicUsize,
    /// Replica routers, admission reply mailboxes, per-class latency.
    pub routing: SharedRouting,
}

/// Limits read from the configuration once per (re)load.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_client_message_bytes: usize,
    pub send_batch_max_chunks: usize,
    pub send_budget_bytes: usize,
    pub client_buffer_limit_bytes: usize,
    pub server_recv_chunk_bytes: usize,
    pub max_server_message_bytes: usize,
    /// Client spellings of tracked parameters one pool remembers.
    pub max_spellings_per_pool: usize,
}

impl Limits {
    pub fn from_config(config: &Config) -> Limits {
        let s = &config.pgtier;
        Limits {
            max_client_message_bytes: s.max_client_message_bytes as usize,
            send_batch_max_chunks: (s.send_batch_max_chunks as usize).clamp(1, 1024),
            send_budget_bytes: (s.send_budget_bytes as usize).max(1),
            client_buffer_limit_bytes: (s.client_buffer_limit_bytes as usize).max(4096),
            server_recv_chunk_bytes: (s.recv_buffer_bytes as usize).max(4096),
            max_server_message_bytes: s.max_server_message_bytes as usize,
            max_spellings_per_pool: s.max_spellings_per_pool as usize,
        }
    }
}

/// Events on the shard's timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerEvent {
    Housekeeping,
}

pub struct Shard<R: Ring> {
    pub index: usize,
    pub ring: R,
    pub config: Arc<Config>,
    pub users: Arc<UserList>,
    pub limits: Limits,
    pub shared: Arc<Shared>,
    /// The listener; `None` once closed for shutdown (or in tests without one).
    pub listener: Option<RawFd>,
    /// True from submitting the multishot accept until a completion without MORE.
    pub accept_armed: bool,
    /// The mailbox eventfd read target; owned by the kernel while `mailbox_armed`.
    pub mailbox_buf: Box<u64>,
    pub mailbox_armed: bool,
    pub clients: Slab<Client>,
    pub servers: Slab<Server>,
    pub cancels: Slab<CancelConn>,
    pub pools: Pools,
    /// SCRAM secrets derived from the auth file, by user ("" = the unknown-user decoy), with
    /// the ClientKey each user last proved (for SCRAM-secret server logins); cleared on reload.
    pub scram_secrets: HashMap<String, crate::auth::UserScram>,
    /// BackendKeyData handed to clients of this shard.
    pub cancel_keys: HashMap<(u32, u32), ClientId>,
    pub timers: Timers<TimerEvent>,
    pub stats: LocalStats,
    /// Traffic counts not yet folded into `Shared::totals`.
    pub counters: ShardCounters,
    pub flush_policy: FlushPolicy,
    /// Per-class query latency not yet folded into `Shared::routing`.
    pub latency: ClassLatency,
    /// Start of the current observation interval (shard 0 closes intervals).
    pub interval_started: Option<Instant>,
    /// Time of the current loop pass (one clock read per pass).
    pub now: Instant,
    pub shutdown: Option<ShutdownMode>,
    /// `SHOW CLIENTS`/`SHOW POOLS` rows being gathered for this shard's admin sessions.
    pub admin_listings: crate::admin_listing::AdminListings,
    completions: Vec<Completion>,
}

impl<R: Ring> Shard<R> {
    pub fn new(
        index: usize,
        ring: R,
        config: Arc<Config>,
        users: Arc<UserList>,
        shared: Arc<Shared>,
        listener: Option<RawFd>,
    ) -> Shard<R> {
        let max_clients = config.pgtier.max_client_conn as usize + 64;
        let max_servers = max_servers(&config);
        let budgets = shared.budgets.clone();
        let flush_policy = FlushPolicy::from(&config.pgtier);
        Shard {
            index,
            ring,
            limits: Limits::from_config(&config),
            config,
            users,
            shared,
            listener,
            accept_armed: false,
            mailbox_buf: Box::new(0),
            mailbox_armed: false,
            clients: Slab::with_capacity(max_clients),
            servers: Slab::with_capacity(max_servers),
            cancels: Slab::with_capacity(max_servers),
            pools: Pools::new(budgets),
            scram_secrets: HashMap::new(),
            cancel_keys: HashMap::new(),
            timers: Timers::default(),
            stats: LocalStats::default(),
            counters: ShardCounters::default(),
            flush_policy,
            latency: ClassLatency::default(),
            interval_started: None,
            now: Instant::now(),
            shutdown: None,
            admin_listings: crate::admin_listing::AdminListings::default(),
            completions: Vec::with_capacity(256),
        }
    }

    /// Runs until shutdown completes.
    pub fn run(&mut self) -> Result<(), String> {
        self.start();
        while !self.finished() {
            self.turn(true)?;
        }
        self.fold_counters();
        Ok(())
    }

    /// Arms the listener and mailbox and schedules housekeeping.
    pub fn start(&mut self) {
        self.now = Instant::now();
        self.arm_accept();
        self.arm_mailbox();
        self.timers
            .schedule(self.now + HOUSEKEEPING_PERIOD, TimerEvent::Housekeeping);
    }

    /// One pass: dispatch what completed, run due timers, submit and (if `wait`) sleep until
    /// the next completion or deadline.
    pub fn turn(&mut self, wait: bool) -> Result<(), String> {
        self.now = Instant::now();
        let mut completions = std::mem::take(&mut self.completions);
        self.ring.reap(&mut completions);
        for completion in completions.drain(..) {
            self.dispatch(completion);
        }
        self.completions = completions;
        while let Some(event) = self.timers.pop_due(self.now) {
            self.on_timer(event);
        }
        self.counters
            .maybe_flush(self.flush_policy, &self.shared.totals);
        let timeout = self.timers.next_timeout(self.now);
        self.ring
            .submit_and_wait(wait && !self.finished(), timeout)
            .map_err(|error| format!("shard {}: io_uring_enter failed: {error}", self.index))
    }

    /// Folds every pending count into the shared totals.
    pub fn fold_counters(&mut self) {
        self.counters.flush_into(&self.shared.totals);
        self.stats.fold_into(&self.shared.stats);
        self.fold_latency();
    }

    /// Shutdown was asked for and nothing is left.
    pub fn finished(&self) -> bool {
        self.shutdown.is_some()
            && self.clients.is_empty()
            && self.servers.is_empty()
            && self.cancels.is_empty()
            && !self.accept_armed
    }

    fn dispatch(&mut self, completion: Completion) {
        let Some(key) = OpKey::decode(completion.user_data) else {
            error!(
                user_data = completion.user_data,
                "bug: completion with an unknown key"
            );
            return;
        };
        let slot = SlotRef {
            index: key.index,
            generation: key.generation,
        };
        let result = completion.result;
        match key.kind {
            OpKind::Accept => self.on_accept(result, completion.more()),
            OpKind::ClientRecv => self.on_client_recv(ClientId(slot), result),
            OpKind::ClientSend => self.on_client_send(ClientId(slot), result),
            OpKind::ServerConnect => self.on_server_connect(ServerId(slot), result),
            OpKind::ServerRecv => self.on_server_recv(ServerId(slot), result),
            OpKind::ServerSend => self.on_server_send(ServerId(slot), result),
            OpKind::MailboxRead => self.on_mailbox(result),
            OpKind::CancelConnect | OpKind::CancelSend | OpKind::CancelRecv => {
                self.on_cancel_op(CancelConnId(slot), key.kind, result)
            }
            OpKind::Close | OpKind::Cancel => {}
        }
    }

    /// Queues an op. A refused flush means the ring is unusable; the shard logs and goes on
    /// (the op's owner sees its in-flight flag and retries on the next event).
    pub fn submit(&mut self, key: OpKey, op: Op) -> bool {
        match self.ring.push(key, op) {
            Ok(()) => true,
            Err(error) => {
                error!(%error, "io_uring submission failed");
                false
            }
        }
    }

    fn cancel_op(&mut self, target: OpKey) {
        self.submit(
            OpKey::new(OpKind::Cancel, 0, 0),
            Op::Cancel {
                target: target.encode(),
            },
        );
    }

    fn close_fd(&mut self, fd: RawFd) {
        if !self.submit(OpKey::new(OpKind::Close, 0, 0), Op::Close { fd }) {
            // SAFETY: `fd` belongs to a slot being freed; nothing else refers to it.
            unsafe { libc::close(fd) };
        }
    }

    pub fn arm_accept(&mut self) {
        let Some(fd) = self.listener else { return };
        if self.accept_armed || self.shutdown.is_some() {
            return;
        }
        if self.submit(OpKey::new(OpKind::Accept, 0, 0), Op::AcceptMulti { fd }) {
            self.accept_armed = true;
        }
    }

    fn arm_mailbox(&mut self) {
        if self.mailbox_armed || self.index >= self.shared.mailboxes.len() {
            return;
        }
        let fd = self.shared.mailboxes[self.index].eventfd();
        let buf = (&mut *self.mailbox_buf as *mut u64).cast::<u8>();
        if self.submit(
            OpKey::new(OpKind::MailboxRead, 0, 0),
            Op::Read { fd, buf, len: 8 },
        ) {
            self.mailbox_armed = true;
        }
    }

    fn on_mailbox(&mut self, result: i32) {
        assert!(
            self.mailbox_armed,
            "mailbox completion without a read in flight"
        );
        self.mailbox_armed = false;
        if result < 0 && classify(result) == ErrnoAction::Bug {
            error!(result, "mailbox read failed");
        }
        let mailbox = self.shared.mailboxes[self.index].clone();
        while let Some(command) = mailbox.pop() {
            self.on_command(command);
        }
        self.drain_replies();
        if !self.finished() {
            self.arm_mailbox();
        }
    }

    // ---- client socket ops ----

    pub fn client_key(kind: OpKind, id: ClientId) -> OpKey {
        OpKey::new(kind, id.0.index, id.0.generation)
    }

    pub fn server_key(kind: OpKind, id: ServerId) -> OpKey {
        OpKey::new(kind, id.0.index, id.0.generation)
    }

    /// Arms a receive unless one is in flight, the client is closing, or its buffer is full.
    pub fn arm_client_recv(&mut self, id: ClientId) {
        let limit = self.limits.client_buffer_limit_bytes;
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.is_closing() || client.recv.in_flight() || client.recv.data.len() >= limit {
            return;
        }
        let op = client.recv.prepare(client.fd, CLIENT_RECV_MIN_FREE_BYTES);
        if !self.submit(Self::client_key(OpKind::ClientRecv, id), op) {
            if let Some(client) = self.clients.get_mut(id.0) {
                client.recv.on_failed();
            }
        }
    }

    /// Starts a send of the client's queue if none is in flight.
    pub fn flush_client(&mut self, id: ClientId) {
        let (chunks, budget) = (
            self.limits.send_batch_max_chunks,
            self.limits.send_budget_bytes,
        );
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let Some(op) = client.send.prepare(client.fd, chunks, budget) else {
            return;
        };
        if !self.submit(Self::client_key(OpKind::ClientSend, id), op) {
            if let Some(client) = self.clients.get_mut(id.0) {
                client.send.on_failed();
            }
        }
    }

    /// Queues `bytes` for the client and starts sending.
    pub fn send_to_client(&mut self, id: ClientId, bytes: Bytes) {
        if let Some(client) = self.clients.get_mut(id.0) {
            client.send.push(bytes);
        }
        self.flush_client(id);
    }

    fn on_client_send(&mut self, id: ClientId, result: i32) {
        let Some(client) = self.clients.get_mut(id.0) else {
            debug!(?id, "stale client send completion");
            return;
        };
        if result < 0 {
            client.send.on_failed();
            if classify(result) == ErrnoAction::Retry && !client.is_closing() {
                self.flush_client(id);
                return;
            }
            if classify(result) == ErrnoAction::Bug {
                error!(result, "bug: client send failed");
            }
            if let Some(client) = self.clients.get_mut(id.0) {
                client.send.clear();
            }
            self.close_client(id, None);
            self.try_finish_client(id);
            return;
        }
        client.send.on_sent(result as usize);
        self.counters.record_bytes(0, result as u64);
        let queued = client.send.queued_bytes();
        let server = client.server();
        if client.is_closing() {
            self.flush_client(id);
            self.try_finish_client(id);
            return;
        }
        self.flush_client(id);
        if let Some(server) = server {
            if queued <= self.limits.client_buffer_limit_bytes / 2 {
                self.resume_server_recv(server);
            }
        }
    }

    /// Begins a client's teardown; `error` (an ErrorResponse) is sent before the socket
    /// closes.
    pub fn close_client(&mut self, id: ClientId, error: Option<Bytes>) {
        let linger = error.is_some();
        self.begin_client_close(id, error, linger);
    }

    /// Begins a client's teardown after what is already queued for it is sent (a server's
    /// own FATAL error): the client sees exactly what the server said, then the close.
    pub fn close_client_after_flush(&mut self, id: ClientId) {
        self.begin_client_close(id, None, true);
    }

    fn begin_client_close(&mut self, id: ClientId, error: Option<Bytes>, linger: bool) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.is_closing() {
            return;
        }
        let previous = std::mem::replace(&mut client.state, ClientState::Closing { linger: false });
        if let Some(key) = client.cancel_key.take() {
            self.cancel_keys.remove(&key);
        }
        // Released now, not when the slot is freed: a lingering error must not hold load.
        drop(client.lease.take());
        if let ClientState::Active { server } = previous {
            self.client_left_server(id, server);
        }
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if let Some(error) = error {
            client.send.push(error);
        }
        client.state = ClientState::Closing { linger };
        let recv_in_flight = client.recv.in_flight();
        let send_in_flight = client.send.in_flight();
        if recv_in_flight {
            self.cancel_op(Self::client_key(OpKind::ClientRecv, id));
        }
        if send_in_flight && !linger {
            self.cancel_op(Self::client_key(OpKind::ClientSend, id));
        }
        if linger {
            self.flush_client(id);
        }
        self.try_finish_client(id);
    }

    /// Frees a closing client once the kernel owns none of its buffers.
    pub fn try_finish_client(&mut self, id: ClientId) {
        let Some(client) = self.clients.get(id.0) else {
            return;
        };
        let ClientState::Closing { linger } = client.state else {
            return;
        };
        if !client.quiescent() || (linger && !client.send.is_empty()) {
            return;
        }
        if let Some(client) = self.clients.remove(id.0) {
            self.shared.clients.fetch_sub(1, Ordering::AcqRel);
            self.close_fd(client.fd);
        }
    }

    // ---- server socket ops ----

    pub fn arm_server_recv(&mut self, id: ServerId) {
        let chunk = self.limits.server_recv_chunk_bytes;
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.is_closing() || server.recv.in_flight() || server.recv_paused {
            return;
        }
        let op = server.recv.prepare(server.fd, chunk / 4);
        if !self.submit(Self::server_key(OpKind::ServerRecv, id), op) {
            if let Some(server) = self.servers.get_mut(id.0) {
                server.recv.on_failed();
            }
        }
    }

    fn resume_server_recv(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.recv_paused {
            server.recv_paused = false;
            self.arm_server_recv(id);
        }
    }

    pub fn flush_server(&mut self, id: ServerId) {
        let (chunks, budget) = (
            self.limits.send_batch_max_chunks,
            self.limits.send_budget_bytes,
        );
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.connect_in_flight {
            return;
        }
        let Some(op) = server.send.prepare(server.fd, chunks, budget) else {
            return;
        };
        if !self.submit(Self::server_key(OpKind::ServerSend, id), op) {
            if let Some(server) = self.servers.get_mut(id.0) {
                server.send.on_failed();
            }
        }
    }

    fn on_server_send(&mut self, id: ServerId, result: i32) {
        let Some(server) = self.servers.get_mut(id.0) else {
            debug!(?id, "stale server send completion");
            return;
        };
        if result < 0 {
            server.send.on_failed();
            if classify(result) == ErrnoAction::Retry && !server.is_closing() {
                self.flush_server(id);
                return;
            }
            if let Some(server) = self.servers.get_mut(id.0) {
                server.send.clear();
            }
            self.server_failed(
                id,
                "could not send to the server",
                Some(crate::control::ServerFailureCause::ConnectionReset),
            );
            return;
        }
        server.send.on_sent(result as usize);
        if server.is_closing() {
            server.send.clear();
            self.try_finish_server(id);
            return;
        }
        self.flush_server(id);
    }

    /// Begins a server's teardown: leaves its pool (giving back its budget slot), cancels
    /// its in-flight operations, closes the socket once none is left.
    pub fn close_server(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.is_closing() {
            return;
        }
        let previous = std::mem::replace(&mut server.state, ServerState::Closing);
        let pool_id = server.pool;
        let (recv, connect) = (server.recv.in_flight(), server.connect_in_flight);
        let send = server.send.in_flight();
        if !send {
            server.send.clear();
        }
        let pool = self.pools.get_mut(pool_id);
        match previous {
            ServerState::Connecting { .. }
            | ServerState::LoggingIn { .. }
            | ServerState::Checking { .. } => {
                pool.connecting = pool.connecting.saturating_sub(1);
            }
            ServerState::Idle { .. } => pool.idle.retain(|idle| *idle != id),
            _ => {}
        }
        match previous {
            ServerState::Leaving {
                slot_to: Some(to), ..
            } => self.hand_slot_to(pool_id, to),
            _ => {
                self.pools.get_mut(pool_id).release_server_slot();
                self.pump_pools_under_caps_of(pool_id);
            }
        }
        if recv {
            self.cancel_op(Self::server_key(OpKind::ServerRecv, id));
        }
        if connect {
            self.cancel_op(Self::server_key(OpKind::ServerConnect, id));
        }
        if send {
            self.cancel_op(Self::server_key(OpKind::ServerSend, id));
        }
        self.try_finish_server(id);
        self.pump_pool(pool_id);
    }

    pub fn try_finish_server(&mut self, id: ServerId) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        if !server.is_closing() || !server.quiescent() {
            return;
        }
        if let Some(server) = self.servers.remove(id.0) {
            self.close_fd(server.fd);
        }
    }

    /// Logs an errno from a completion per the classifier.
    pub fn log_errno(&self, what: &str, result: i32) {
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

    pub fn warn_once(&self, message: &str) {
        warn!(shard = self.index, "{message}");
    }
}

/// Server slots per shard: every configured pool full several times over (pools are per
/// user too), or one per client, whichever is more; capacity is reserved, not touched.
fn max_servers(config: &Config) -> usize {
    let per_db: usize = config
        .databases
        .values()
        .map(|db| db.pool_size.max(config.pgtier.default_pool_size) as usize)
        .sum();
    (per_db * 4)
        .max(config.pgtier.max_client_conn as usize)
        .max(256)
        + 64
}
