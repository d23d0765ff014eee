//! The server side: choosing a client's pool, handing servers to waiting clients, opening and
//! logging in server connections, relaying results, and returning servers to the pool.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::IntoRawFd;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use pgtier_core::config::{PoolMode, ServerSet};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::{debug, info, warn};

use crate::auth::{self, ScramClient};
use crate::client::ClientState;
use crate::io::errno::{ErrnoAction, classify};
use crate::io::op_key::OpKind;
use crate::io::recv_buf::RecvBuf;
use crate::io::ring::{Op, Ring};
use crate::io::send_queue::SendQueue;
use crate::io::slab::{ClientId, ServerId};
use crate::mailbox::Command;
use crate::params::TrackedParams;
use crate::pool::{LoginFailure, PoolId, PoolKey, ServerLogin};
use crate::proto::{self, sqlstate};
use crate::relay;
use crate::server::{Server, ServerState};
use crate::shard::{HOUSEKEEPING_PERIOD, Shard};
use crate::tracker::Tracker;

/// Largest message accepted from a server during login.
const MAX_LOGIN_MESSAGE_BYTES: usize = 1 << 20;

/// The address of a database entry's server. A replica set uses its first replica until the
/// routing policy picks one per session.
fn server_addr(servers: &ServerSet) -> Result<SocketAddr, String> {
    match servers {
        ServerSet::Single(host_port) => {
            if let Ok(ip) = host_port.host.parse() {
                return Ok(SocketAddr::new(ip, host_port.port));
            }
            (host_port.host.as_str(), host_port.port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| format!("cannot resolve server host {host_port}"))
        }
        ServerSet::Replicas(set) => set
            .replicas
            .first()
            .copied()
            .ok_or_else(|| "replica set is empty".to_string()),
    }
}

impl<R: Ring> Shard<R> {
    /// The pool for an authenticated client, created on first use.
    pub(crate) fn pool_for_client(
        &mut self,
        id: ClientId,
        startup_params: Vec<(String, String)>,
    ) -> Result<PoolId, Bytes> {
        let Some(client) = self.clients.get(id.0) else {
            return Err(Bytes::new());
        };
        let Some(db) = self.config.database(&client.database) else {
            let message = format!("database \"{}\" does not exist", client.database);
            return Err(proto::fatal(sqlstate::INVALID_CATALOG_NAME, &message));
        };
        let addr = server_addr(&db.servers)
            .map_err(|message| proto::fatal(sqlstate::CONNECTION_FAILURE, &message))?;
        let server_user = db.user.clone().unwrap_or_else(|| client.user.clone());
        let key = PoolKey {
            database: client.database.clone(),
            user: server_user,
            addr,
            startup_params,
        };
        if let Some(pool) = self.pools.find(&key) {
            return Ok(pool);
        }
        if self.pools.len() >= self.config.pgtier.max_pools_per_worker as usize {
            return Err(proto::fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                "too many pools (max_pools_per_worker)",
            ));
        }
        let mode = self.config.pool_mode(db, &client.user);
        let password = db.password.clone().or_else(|| self.users.get(&key.user));
        let login = ServerLogin {
            dbname: db.dbname.clone(),
            password,
        };
        let (max, min) = (db.pool_size, db.min_pool_size);
        Ok(self.pools.create(key, login, mode, max, min))
    }

    /// Queues a client for a server of its pool.
    pub(crate) fn enqueue_waiter(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let Some(pool_id) = client.pool else { return };
        client.state = ClientState::WaitingForServer { since: self.now };
        self.pools.get_mut(pool_id).waiters.push_back(id);
        self.pump_pool(pool_id);
    }

    fn is_waiting(&self, id: ClientId) -> bool {
        matches!(
            self.clients.get(id.0).map(|c| &c.state),
            Some(ClientState::WaitingForServer { .. })
        )
    }

    /// Hands idle servers to waiting clients in FIFO order and opens servers while clients
    /// outnumber the ones being opened and the budget allows.
    pub(crate) fn pump_pool(&mut self, pool_id: PoolId) {
        loop {
            let waiter = loop {
                match self.pools.get(pool_id).waiters.front().copied() {
                    Some(waiter) if self.is_waiting(waiter) => break Some(waiter),
                    Some(_) => {
                        self.pools.get_mut(pool_id).waiters.pop_front();
                    }
                    None => break None,
                }
            };
            let Some(waiter) = waiter else { return };
            let pool = self.pools.get_mut(pool_id);
            if let Some(server) = pool.idle.pop() {
                pool.waiters.pop_front();
                self.link(waiter, server);
                continue;
            }
            if pool.connecting as usize >= pool.waiters.len() {
                return;
            }
            if let Some(failure) = &pool.failure {
                if failure.retry_at > self.now {
                    if pool.open_here == 0 {
                        let error = failure.error.clone();
                        self.fail_waiters(pool_id, error);
                    }
                    return;
                }
            }
            if !pool.try_reserve_server() {
                self.ask_other_shards_for_a_server(pool_id);
                return;
            }
            if let Err(message) = self.open_server(pool_id) {
                warn!(%message, "cannot open a server connection");
                self.pools.get_mut(pool_id).release_server_slot();
                let error = proto::fatal(sqlstate::CONNECTION_FAILURE, &message);
                self.fail_waiters(pool_id, error);
                return;
            }
        }
    }

    /// The budget is spent and this shard has no server to give: the slots may sit idle on
    /// other shards, so ask them to close one (at most once per housekeeping period).
    fn ask_other_shards_for_a_server(&mut self, pool_id: PoolId) {
        let shards = self.shared.mailboxes.len();
        let pool = self.pools.get_mut(pool_id);
        if shards < 2 || pool.open_here >= pool.max_size {
            return;
        }
        let recent = pool
            .last_release_request
            .is_some_and(|at| self.now.saturating_duration_since(at) < HOUSEKEEPING_PERIOD);
        if recent {
            return;
        }
        pool.last_release_request = Some(self.now);
        let key = Arc::new(pool.key.clone());
        for (index, mailbox) in self.shared.mailboxes.iter().enumerate() {
            if index != self.index {
                let command = Command::ReleaseIdle {
                    key: key.clone(),
                    from: self.index,
                };
                if mailbox.post(command).is_err() {
                    debug!("release request dropped: mailbox full");
                }
            }
        }
    }

    /// Another shard waits for a server of `key`: close one of ours that is idle while no
    /// client here waits for it, and tell that shard to retry.
    pub(crate) fn release_idle_for(&mut self, key: &PoolKey, from: usize) {
        let Some(pool_id) = self.pools.find(key) else {
            return;
        };
        let pool = self.pools.get(pool_id);
        let waiting_here = pool.waiters.iter().any(|w| self.is_waiting(*w));
        let Some(&server) = pool.idle.first() else {
            return;
        };
        if waiting_here {
            return;
        }
        self.close_server(server);
        if let Some(mailbox) = self.shared.mailboxes.get(from) {
            let _ = mailbox.post(Command::RetryPool {
                key: Arc::new(key.clone()),
            });
        }
    }

    fn fail_waiters(&mut self, pool_id: PoolId, error: Bytes) {
        let waiters: Vec<ClientId> = self.pools.get_mut(pool_id).waiters.drain(..).collect();
        for waiter in waiters {
            if self.is_waiting(waiter) {
                self.close_client(waiter, Some(error.clone()));
            }
        }
    }

    /// Opens a TCP connection for `pool_id`; the caller reserved its budget slot.
    pub(crate) fn open_server(&mut self, pool_id: PoolId) -> Result<(), String> {
        let addr = self.pools.get(pool_id).key.addr;
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        )
        .map_err(|error| format!("cannot create a socket for {addr}: {error}"))?;
        let _ = socket.set_tcp_nodelay(true);
        let fd = socket.into_raw_fd();
        let server = Server {
            fd,
            state: ServerState::Connecting { since: self.now },
            pool: pool_id,
            recv: RecvBuf::new(self.limits.server_recv_chunk_bytes),
            send: SendQueue::new(),
            addr: Box::new(SockAddr::from(addr)),
            connect_in_flight: false,
            tracker: Tracker::default(),
            params: Vec::new(),
            tracked: TrackedParams::default(),
            backend_key: None,
            swallow: 0,
            skip_bytes: 0,
            recv_paused: false,
            cancels_pending: 0,
            rollback_sent: false,
            created_at: self.now,
        };
        let Some(slot) = self.servers.insert(server) else {
            // SAFETY: the fd was never handed to the kernel ring; we own it alone.
            unsafe { libc::close(fd) };
            return Err("too many server connections on this worker".to_string());
        };
        let id = ServerId(slot);
        self.pools.get_mut(pool_id).connecting += 1;
        self.stats.servers_opened += 1;
        let Some(server) = self.servers.get_mut(id.0) else {
            return Ok(());
        };
        let op = Op::Connect {
            fd,
            addr: server.addr.as_ptr().cast(),
            len: server.addr.len(),
        };
        server.connect_in_flight = true;
        if !self.submit(Self::server_key(OpKind::ServerConnect, id), op) {
            if let Some(server) = self.servers.get_mut(id.0) {
                server.connect_in_flight = false;
            }
            self.close_server(id);
        }
        Ok(())
    }

    pub(crate) fn on_server_connect(&mut self, id: ServerId, result: i32) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        assert!(
            server.connect_in_flight,
            "connect completion without a connect in flight"
        );
        server.connect_in_flight = false;
        if server.is_closing() {
            self.try_finish_server(id);
            return;
        }
        if result < 0 {
            let addr = server
                .addr
                .as_socket()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let message = format!(
                "could not connect to server {addr}: {}",
                std::io::Error::from_raw_os_error(-result)
            );
            self.login_failed(id, proto::fatal(sqlstate::CONNECTION_FAILURE, &message));
            return;
        }
        let pool = self.pools.get(server.pool);
        let mut params: Vec<(&str, &str)> = vec![
            ("user", pool.key.user.as_str()),
            ("database", pool.login.dbname.as_str()),
        ];
        params.extend(
            pool.key
                .startup_params
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        let mut out = BytesMut::with_capacity(128);
        proto::startup_message(&mut out, &params);
        server.send.push(out.freeze());
        server.state = ServerState::LoggingIn {
            since: self.now,
            scram: None,
        };
        self.flush_server(id);
        self.arm_server_recv(id);
    }

    pub(crate) fn on_server_recv(&mut self, id: ServerId, result: i32) {
        let Some(server) = self.servers.get_mut(id.0) else {
            debug!(?id, "stale server recv completion");
            return;
        };
        if result <= 0 {
            server.recv.on_failed();
            if server.is_closing() {
                self.try_finish_server(id);
                return;
            }
            if result < 0 && classify(result) == ErrnoAction::Retry {
                self.arm_server_recv(id);
                return;
            }
            self.log_errno("server recv", result);
            self.server_failed(id, "server closed the connection unexpectedly");
            return;
        }
        server.recv.on_received(result as usize);
        match server.state {
            ServerState::Closing => {
                server.recv.data.clear();
                self.try_finish_server(id);
                return;
            }
            ServerState::Connecting { .. } => {
                warn!("bug: server data before connect completed");
            }
            ServerState::LoggingIn { .. } => self.on_login_bytes(id),
            ServerState::Busy { client } => self.relay_to_client(id, client),
            ServerState::Draining { .. } => self.drain_server(id),
            ServerState::Idle { .. } => self.on_idle_server_bytes(id),
        }
        self.arm_server_recv(id);
    }

    /// The server connection broke. Its client (if any) gets `message` as a FATAL error.
    pub(crate) fn server_failed(&mut self, id: ServerId, message: &str) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        match server.state {
            ServerState::Connecting { .. } | ServerState::LoggingIn { .. } => {
                self.login_failed(id, proto::fatal(sqlstate::CONNECTION_FAILURE, message));
            }
            ServerState::Busy { client } => {
                self.close_server(id);
                self.close_client(
                    client,
                    Some(proto::fatal(sqlstate::CONNECTION_FAILURE, message)),
                );
            }
            _ => self.close_server(id),
        }
    }

    /// A login failed: every client waiting on the pool gets `error` now, and new ones get it
    /// until `server_login_retry` passes.
    fn login_failed(&mut self, id: ServerId, error: Bytes) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool_id = server.pool;
        self.stats.login_failures += 1;
        let retry = self.config.pgtier.server_login_retry.duration();
        self.pools.get_mut(pool_id).failure = Some(LoginFailure {
            error: error.clone(),
            retry_at: self.now + retry,
        });
        info!(pool = ?self.pools.get(pool_id).key.database, "server login failed");
        self.close_server(id);
        if self.pools.get(pool_id).open_here == 0 {
            self.fail_waiters(pool_id, error);
        }
    }

    fn on_login_bytes(&mut self, id: ServerId) {
        loop {
            let Some(server) = self.servers.get_mut(id.0) else {
                return;
            };
            let data = &server.recv.data;
            if data.len() < 5 {
                return;
            }
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if !(4..=MAX_LOGIN_MESSAGE_BYTES).contains(&len) {
                let error =
                    proto::fatal(sqlstate::PROTOCOL_VIOLATION, "invalid message from server");
                self.login_failed(id, error);
                return;
            }
            if data.len() < len + 1 {
                return;
            }
            let message = server.recv.data.split_to(len + 1).freeze();
            let body = &message[5..];
            match message[0] {
                b'R' => {
                    if let Err(reason) = self.on_server_auth_request(id, body) {
                        self.login_failed(id, proto::fatal(sqlstate::INVALID_PASSWORD, &reason));
                        return;
                    }
                }
                b'S' => {
                    if let Some((name, value)) = proto::parse_parameter_status(body) {
                        server.tracked.set(name, value);
                        match server.params.iter_mut().find(|(n, _)| n == name) {
                            Some(entry) => entry.1 = value.to_string(),
                            None => server.params.push((name.to_string(), value.to_string())),
                        }
                    }
                }
                b'K' if body.len() >= 8 => {
                    let pid = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                    let secret = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                    server.backend_key = Some((pid, secret));
                }
                b'E' => {
                    self.login_failed(id, message);
                    return;
                }
                b'Z' => {
                    self.on_login_done(id);
                    return;
                }
                _ => {}
            }
        }
    }

    fn on_server_auth_request(&mut self, id: ServerId, body: &[u8]) -> Result<(), String> {
        let Some(server) = self.servers.get_mut(id.0) else {
            return Ok(());
        };
        let pool = self.pools.get(server.pool);
        let user = pool.key.user.clone();
        let password = pool.login.password.clone();
        let need_password = || {
            password.clone().ok_or_else(|| {
                format!("no password configured for server login of user \"{user}\"")
            })
        };
        let kind = body
            .get(..4)
            .map_or(u32::MAX, |k| u32::from_be_bytes([k[0], k[1], k[2], k[3]]));
        let payload = body.get(4..).unwrap_or(&[]);
        let mut out = BytesMut::with_capacity(128);
        match kind {
            0 => return Ok(()),
            3 => proto::password_message(&mut out, need_password()?.as_bytes(), true),
            5 => {
                let salt: [u8; 4] = payload
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or("bad md5 salt")?;
                let answer = auth::md5_client_answer(&need_password()?, &user, salt);
                proto::password_message(&mut out, answer.as_bytes(), true);
            }
            10 => {
                let offers_scram = payload.split(|b| *b == 0).any(|m| m == b"SCRAM-SHA-256");
                if !offers_scram {
                    return Err("server offers no supported SASL mechanism".to_string());
                }
                let (client, first) = ScramClient::start(&need_password()?);
                proto::sasl_initial_response(&mut out, "SCRAM-SHA-256", first.as_bytes());
                server.state = ServerState::LoggingIn {
                    since: self.now,
                    scram: Some(Box::new(client)),
                };
            }
            11 | 12 => {
                let ServerState::LoggingIn {
                    scram: Some(scram), ..
                } = &mut server.state
                else {
                    return Err("SASL message out of order".to_string());
                };
                let text = std::str::from_utf8(payload).map_err(|_| "bad SASL message")?;
                if kind == 11 {
                    let reply = scram
                        .on_server_first(text)
                        .map_err(|e| format!("SCRAM: {e:?}"))?;
                    proto::password_message(&mut out, reply.as_bytes(), false);
                } else {
                    scram
                        .on_server_final(text)
                        .map_err(|_| "server SCRAM signature is wrong")?;
                    return Ok(());
                }
            }
            other => return Err(format!("unsupported server authentication request {other}")),
        }
        server.send.push(out.freeze());
        self.flush_server(id);
        Ok(())
    }

    fn on_login_done(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let pool = self.pools.get_mut(server.pool);
        pool.connecting = pool.connecting.saturating_sub(1);
        pool.failure = None;
        if pool.welcome.is_none() {
            pool.welcome = Some(server.params.clone());
            pool.welcome_tracked = server.tracked.clone();
        }
        debug!(pid = ?server.backend_key.map(|k| k.0), "server login done");
        self.return_to_pool(id);
    }

    /// Links a waiting client with a server and starts moving its bytes.
    pub(crate) fn link(&mut self, client_id: ClientId, server_id: ServerId) {
        let Some(client) = self.clients.get_mut(client_id.0) else {
            return;
        };
        if let ClientState::WaitingForServer { since } = client.state {
            let wait_us = self.now.saturating_duration_since(since).as_micros() as u64;
            self.counters.record_wait(wait_us);
        }
        client.state = ClientState::Active { server: server_id };
        let welcomed = client.welcomed;
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        server.state = ServerState::Busy { client: client_id };
        let mode = self.pools.get(server.pool).mode;
        if !welcomed {
            self.welcome_from_server(client_id, server_id, mode == PoolMode::Session);
            if mode == PoolMode::Transaction {
                self.release_server(server_id);
                return;
            }
        }
        self.reapply_params(client_id, server_id);
        self.forward_to_server(client_id, server_id);
    }

    /// Sends SETs for tracked parameters where the server differs from what the client has
    /// been told; the answers are swallowed.
    fn reapply_params(&mut self, client_id: ClientId, server_id: ServerId) {
        let Some(client) = self.clients.get(client_id.0) else {
            return;
        };
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let mut sql = String::new();
        if !client.tracked.write_differences(&server.tracked, &mut sql) {
            return;
        }
        let mut out = BytesMut::with_capacity(sql.len() + 8);
        proto::query(&mut out, &sql);
        server.send.push(out.freeze());
        server.swallow += 1;
        server.tracker.on_internal_query();
    }

    /// Moves server output to the linked client; releases the server at the end of a
    /// transaction in transaction mode.
    fn relay_to_client(&mut self, server_id: ServerId, client_id: ClientId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let client = self
            .clients
            .get_mut(client_id.0)
            .filter(|c| c.server() == Some(server_id));
        let Some(client) = client else {
            warn!("bug: busy server without its client");
            self.close_server(server_id);
            return;
        };
        let started = client.query_started;
        let scan = relay::scan(server, Some(client));
        server.recv.data.advance(scan.drop_bytes);
        if scan.forward_bytes > 0 {
            client
                .send
                .push(server.recv.data.split_to(scan.forward_bytes).freeze());
        }
        let elapsed_us = started.map_or(0, |s| {
            self.now.saturating_duration_since(s).as_micros() as u64
        });
        for _ in 0..scan.completed {
            self.counters.record_query(client.class, elapsed_us);
        }
        for _ in 0..scan.transactions {
            self.counters.record_transaction(client.class, elapsed_us);
        }
        if client.send.queued_bytes() > self.limits.client_buffer_limit_bytes {
            server.recv_paused = true;
        }
        let close_when_idle = client.close_when_idle;
        let mode = self.pools.get(server.pool).mode;
        self.flush_client(client_id);
        if scan.malformed {
            self.server_failed(server_id, "server sent an invalid message");
            return;
        }
        if scan.idle && (mode == PoolMode::Transaction || close_when_idle) {
            self.release_server(server_id);
        }
    }

    /// The server finished a transaction: its client goes idle (or away, at shutdown) and
    /// the server returns to the pool unless a cancel for it is still on its way.
    pub(crate) fn release_server(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let client_id = server.client();
        server.state = ServerState::Draining { since: self.now };
        let cancels_pending = server.cancels_pending;
        let mut close_client = None;
        if let Some(client_id) = client_id {
            if let Some(client) = self.clients.get_mut(client_id.0) {
                client.state = ClientState::Idle { since: self.now };
                if client.close_when_idle {
                    close_client = Some(client_id);
                }
            }
        }
        if cancels_pending == 0 {
            self.return_to_pool(server_id);
        }
        if let Some(client_id) = close_client {
            let error = proto::fatal(sqlstate::ADMIN_SHUTDOWN, "pgtier is shutting down");
            self.close_client(client_id, Some(error));
        } else if let Some(client_id) = client_id {
            let pending = self
                .clients
                .get(client_id.0)
                .is_some_and(|c| !c.recv.data.is_empty());
            if pending {
                self.enqueue_waiter(client_id);
            }
        }
    }

    /// Puts a clean, idle server in its pool (or closes it when it is too old or the pool
    /// shrank) and serves waiters.
    pub(crate) fn return_to_pool(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let pool_id = server.pool;
        let pool = self.pools.get(pool_id);
        let too_old = self
            .config
            .pgtier
            .server_lifetime
            .enabled()
            .is_some_and(|lifetime| {
                self.now.saturating_duration_since(server.created_at) > lifetime
            });
        let over_size = pool.open_everywhere() > pool.max_size;
        let shutting_down = self.shutdown.is_some() && pool.waiters.is_empty();
        if too_old || over_size || shutting_down {
            self.close_server(server_id);
            return;
        }
        server.state = ServerState::Idle { since: self.now };
        server.rollback_sent = false;
        self.pools.get_mut(pool_id).idle.push(server_id);
        self.pump_pool(pool_id);
    }

    /// A client left while linked to `server_id`: cancel a running query and drain, roll the
    /// server back into the pool when clean, or close it when it is mid-transaction.
    pub(crate) fn client_left_server(&mut self, client_id: ClientId, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if server.client() != Some(client_id) {
            return;
        }
        let mode = self.pools.get(server.pool).mode;
        if server.tracker.has_outstanding() || server.swallow > 0 {
            server.state = ServerState::Draining { since: self.now };
            if self.config.pgtier.cancel_on_client_disconnect {
                self.send_cancel(server_id);
            }
            return;
        }
        if !server.tracker.is_idle() {
            // Mid-transaction with nothing running: roll back and check, or close.
            server.state = ServerState::Draining { since: self.now };
            self.roll_back_or_close(server_id);
            return;
        }
        let reset = &self.config.pgtier.server_reset_query;
        if mode == PoolMode::Session && !reset.is_empty() {
            let mut out = BytesMut::with_capacity(reset.len() + 8);
            proto::query(&mut out, reset);
            server.send.push(out.freeze());
            server.swallow += 1;
            server.tracker.on_internal_query();
            server.state = ServerState::Draining { since: self.now };
            self.flush_server(server_id);
            return;
        }
        self.return_to_pool(server_id);
    }

    /// Swallows everything from a server without a client until it is idle again.
    fn drain_server(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let scan = relay::scan(server, None);
        server.recv.data.advance(scan.drop_bytes);
        if scan.malformed {
            self.close_server(server_id);
            return;
        }
        self.maybe_finish_drain(server_id);
    }

    /// A draining server with nothing owed and no cancel pending goes back to the pool if
    /// clean, or closes if its client left it inside a transaction.
    pub(crate) fn maybe_finish_drain(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get(server_id.0) else {
            return;
        };
        if !matches!(server.state, ServerState::Draining { .. }) {
            return;
        }
        if server.tracker.has_outstanding() || server.swallow > 0 || server.cancels_pending > 0 {
            return;
        }
        if server.tracker.is_idle() {
            self.return_to_pool(server_id);
        } else {
            self.roll_back_or_close(server_id);
        }
    }

    /// A draining server left inside a transaction block gets one ROLLBACK (answer swallowed);
    /// it returns to the pool only if the next ReadyForQuery says 'I'. Anything else — an
    /// unsynced extended sequence, COPY, or a failed rollback — closes it, which makes the
    /// server roll back on its own. Either way no later client sees the transaction.
    fn roll_back_or_close(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if server.rollback_sent || !server.tracker.idle_in_transaction() {
            self.close_server(server_id);
            return;
        }
        server.rollback_sent = true;
        let mut out = BytesMut::with_capacity(16);
        proto::query(&mut out, "ROLLBACK");
        server.send.push(out.freeze());
        server.swallow += 1;
        server.tracker.on_internal_query();
        self.flush_server(server_id);
    }

    /// Bytes from a server nobody is using: parameter changes and notices are fine, anything
    /// else (typically a FATAL before the backend exits) retires it.
    fn on_idle_server_bytes(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        loop {
            let data = &server.recv.data;
            if data.len() < 5 {
                return;
            }
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if !(4..=MAX_LOGIN_MESSAGE_BYTES).contains(&len) {
                break;
            }
            if data.len() < len + 1 {
                return;
            }
            let code = data[0];
            let message = server.recv.data.split_to(len + 1);
            match code {
                b'S' => {
                    if let Some((name, value)) = proto::parse_parameter_status(&message[5..]) {
                        server.tracked.set(name, value);
                    }
                }
                b'N' | b'A' => {}
                _ => break,
            }
        }
        self.close_server(server_id);
    }
}
