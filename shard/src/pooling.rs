//! Pools on the shard side: choosing a client's pool, queueing clients FIFO, handing idle
//! servers over (re-applying tracked parameters), releasing servers at the end of a
//! transaction, and moving budget slots between shards.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pgtier_core::config::{PoolMode, ServerSet};
use tracing::{debug, warn};

use crate::client::ClientState;
use crate::io::ring::Ring;
use crate::io::slab::{ClientId, ServerId};
use crate::mailbox::Command;
use crate::pool::{PoolId, PoolKey, PoolLimits, Reservation, ServerLogin};
use crate::proto::{self, sqlstate};
use crate::server::{Reset, ServerState};
use crate::shard::{HOUSEKEEPING_PERIOD, Shard};

/// A Terminate message: a server ended on purpose closes its connection after it.
const TERMINATE: &[u8] = b"X\0\0\0\x04";

/// The address of a database entry's server. A session on a replica set uses its lease's
/// replica instead; the first replica is only a fallback when no router exists.
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
        let leased = client
            .lease
            .as_ref()
            .and_then(|lease| Some((lease.replica_addr()?, lease)));
        let addr = match leased {
            Some((addr, _)) => addr,
            None => server_addr(&db.servers)
                .map_err(|message| proto::fatal(sqlstate::CONNECTION_FAILURE, &message))?,
        };
        let replica = leased.map(|(_, lease)| (lease.router().clone(), lease.replica()));
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
        let limits = PoolLimits {
            max_size: db.pool_size,
            min_size: db.min_pool_size,
            reserve_size: db.reserve_pool_size,
            max_db_connections: db.max_db_connections,
            max_user_connections: self.config.max_user_connections(&key.user),
            max_spellings: self.limits.max_spellings_per_pool,
        };
        let pool_id = self.pools.create(key, login, mode, limits);
        self.pools.get_mut(pool_id).replica = replica;
        Ok(pool_id)
    }

    /// Queues a client for a server of its pool.
    pub(crate) fn enqueue_waiter(&mut self, id: ClientId) {
        if self.repin_if_replica_down(id) {
            return;
        }
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let Some(pool_id) = client.pool else { return };
        client.state = ClientState::WaitingForServer { since: self.now };
        self.pools.get_mut(pool_id).waiters.push_back(id);
        self.pump_pool(pool_id);
    }

    pub(crate) fn is_waiting(&self, id: ClientId) -> bool {
        matches!(
            self.clients.get(id.0).map(|c| &c.state),
            Some(ClientState::WaitingForServer { .. })
        )
    }

    /// Hands idle servers to waiting clients in FIFO order and opens servers while clients
    /// outnumber the ones being opened and the budget allows.
    pub(crate) fn pump_pool(&mut self, pool_id: PoolId) {
        // Serving a waiter can hand a server straight back here (a welcome in transaction
        // mode releases it at once); the loop already running picks it up, so a queue of
        // any length is served without the stack growing with it.
        if std::mem::replace(&mut self.pools.get_mut(pool_id).pumping, true) {
            return;
        }
        self.serve_waiters(pool_id);
        self.pools.get_mut(pool_id).pumping = false;
    }

    fn serve_waiters(&mut self, pool_id: PoolId) {
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
                if self.start_check_if_stale(server) {
                    continue;
                }
                self.pools.get_mut(pool_id).waiters.pop_front();
                self.link(waiter, server);
                continue;
            }
            let pool = self.pools.get_mut(pool_id);
            if pool.connecting as usize >= pool.waiters.len() {
                return;
            }
            if let Some(failure) = &pool.failure {
                if failure.retry_at > self.now {
                    // Waiters of an unreachable replica are re-routed once it is Down.
                    if pool.open_here == 0 && pool.replica.is_none() {
                        let error = failure.error.clone();
                        self.fail_waiters(pool_id, error);
                    }
                    return;
                }
            }
            let with_reserve = self.may_use_reserve(pool_id, waiter);
            match self.pools.get_mut(pool_id).try_reserve_server(with_reserve) {
                Reservation::Reserved => {}
                Reservation::PoolFull => {
                    self.ask_other_shards_for_a_server(pool_id);
                    return;
                }
                Reservation::DatabaseFull | Reservation::UserFull => {
                    // The waiters stay queued until a server under the cap closes: make
                    // room like PgBouncer (end an idle server of another pool under the
                    // cap), else ask the other shards (see `server_caps.rs`).
                    if !self.evict_idle_under_cap(pool_id) {
                        self.ask_other_shards_to_free_cap(pool_id);
                        self.ask_other_shards_for_a_server(pool_id);
                    }
                    return;
                }
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
    pub(crate) fn ask_other_shards_for_a_server(&mut self, pool_id: PoolId) {
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

    /// Another shard waits for a server of `key` and has none to spare: end one of ours
    /// for it, an idle one now if no client here waits, else the next one to come back
    /// (`return_to_pool` decides whether this shard can spare it then).
    pub(crate) fn release_idle_for(&mut self, key: &PoolKey, from: usize) {
        let Some(pool_id) = self.pools.find(key) else {
            return;
        };
        let pool = self.pools.get(pool_id);
        let waiting_here = pool.waiters.iter().any(|w| self.is_waiting(*w));
        match pool.idle.first() {
            Some(&server) if !waiting_here => self.leave_for(server, Some(from)),
            _ => self.pools.get_mut(pool_id).release_to = Some(from),
        }
    }

    /// Ends `server_id` so that its slot goes to shard `to` (`None`: back to the shared
    /// budgets): Terminate now, the slot moves when the server closes the connection
    /// (`close_server` of a `Leaving` server).
    pub(crate) fn leave_for(&mut self, server_id: ServerId, to: Option<usize>) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let pool_id = server.pool;
        debug!(
            shard = self.index,
            to, "ending a server to hand its slot over"
        );
        server.state = ServerState::Leaving {
            since: self.now,
            slot_to: to,
        };
        server.recv_paused = false;
        server.send.push(Bytes::from_static(TERMINATE));
        self.pools
            .get_mut(pool_id)
            .idle
            .retain(|idle| *idle != server_id);
        self.flush_server(server_id);
        self.arm_server_recv(server_id);
    }

    /// A shard waiting for this pool gets a server that came back, unless clients wait here
    /// too and this shard holds no more than its share of the pool.
    fn take_release_request(&mut self, pool_id: PoolId) -> Option<usize> {
        let shards = self.shared.mailboxes.len();
        let to = self.pools.get_mut(pool_id).release_to.take()?;
        let pool = self.pools.get(pool_id);
        let waiting_here = pool.waiters.iter().any(|w| self.is_waiting(*w));
        (!waiting_here || pool.open_here > pool.fair_share(shards)).then_some(to)
    }

    /// The slot of a server that left for shard `to` goes to that shard, not back to the
    /// budget where a shard in between could take it; to the budget only if `to` cannot be
    /// told.
    pub(crate) fn hand_slot_to(&mut self, pool_id: PoolId, to: usize) {
        let pool = self.pools.get_mut(pool_id);
        let command = Command::SlotGranted {
            key: Arc::new(pool.key.clone()),
        };
        let posted = self
            .shared
            .mailboxes
            .get(to)
            .is_some_and(|mailbox| mailbox.post(command).is_ok());
        if posted {
            pool.give_slot_away();
        } else {
            pool.release_server_slot();
        }
    }

    /// Another shard handed this one a slot of `key`: open a server with it for the
    /// waiters, or give it back to the budget when nobody here needs it any more.
    pub(crate) fn adopt_granted_slot(&mut self, key: &PoolKey) {
        let Some(pool_id) = self.pools.find(key) else {
            self.shared.budgets.give_back(key);
            return;
        };
        debug!(shard = self.index, "a server slot was handed to this shard");
        self.pools.get_mut(pool_id).adopt_slot();
        self.pump_pool(pool_id);
        self.pools.get_mut(pool_id).return_unused_slots();
    }

    pub(crate) fn fail_waiters(&mut self, pool_id: PoolId, error: Bytes) {
        let waiters: Vec<ClientId> = self.pools.get_mut(pool_id).waiters.drain(..).collect();
        for waiter in waiters {
            if self.is_waiting(waiter) {
                self.close_client(waiter, Some(error.clone()));
            }
        }
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
        let pool = self.pools.get(server.pool);
        let reset = match pool.mode {
            PoolMode::Session => Reset::Configured,
            PoolMode::Transaction if self.config.pgtier.server_reset_query_always => {
                Reset::Configured
            }
            PoolMode::Transaction => Reset::None,
        };
        server.reset = server.reset.max(reset);
        if !welcomed {
            self.start_welcome(client_id, server_id);
            return;
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

    /// The server finished a transaction: its client goes idle (or away, at shutdown) and
    /// the server returns to the pool unless a cancel for it is still on its way.
    pub(crate) fn release_server(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let client_id = server.client();
        server.state = ServerState::Draining { since: self.now };
        let mut close_client = None;
        if let Some(client_id) = client_id {
            if let Some(client) = self.clients.get_mut(client_id.0) {
                client.state = ClientState::Idle { since: self.now };
                if client.close_when_idle {
                    close_client = Some(client_id);
                }
            }
        }
        // Back to the pool through the one release path: after a cancel still on its way,
        // and after its reset (session mode at shutdown, `server_reset_query_always`).
        self.maybe_finish_drain(server_id);
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
        // A pool over its size (reserve servers, or a reload that shrank it) shrinks as its
        // servers come back, unless clients still wait for them.
        let over_size = pool.open_everywhere() > pool.max_size && pool.waiters.is_empty();
        let shutting_down = self.shutdown.is_some() && pool.waiters.is_empty();
        if too_old || over_size || shutting_down {
            self.close_server(server_id);
            return;
        }
        if let Some(to) = self.take_release_request(pool_id) {
            self.leave_for(server_id, Some(to));
            return;
        }
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        server.state = ServerState::Idle { since: self.now };
        server.rollback_sent = false;
        server.swallowed_error = None;
        self.pools.get_mut(pool_id).idle.push(server_id);
        self.pump_pool(pool_id);
    }
}
