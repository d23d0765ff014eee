//! Periodic work of a shard: timeouts (PgBouncer's names), min_pool_size, counter folds; and
//! the commands that arrive through the mailbox: cancel, reload, shutdown.

use std::time::Duration;

use pgtier_wire::SqlState;
use tracing::info;

use crate::client::ClientState;
use crate::control::ServerFailureCause;
use crate::io::ring::Ring;
use crate::io::slab::{ClientId, ServerId};
use crate::mailbox::{Command, ShutdownMode};
use crate::proto::{self, sqlstate};
use crate::server::ServerState;
use crate::shard::{HOUSEKEEPING_PERIOD, Limits, Shard, TimerEvent};

impl<R: Ring> Shard<R> {
    pub(crate) fn on_timer(&mut self, event: TimerEvent) {
        match event {
            TimerEvent::Housekeeping => {
                self.check_client_timeouts();
                self.check_server_timeouts();
                self.warm_pools();
                self.reroute_waiters_of_down_replicas();
                self.retry_waiting_pools();
                self.expire_listings();
                if self.shutdown.is_some() {
                    self.progress_shutdown();
                }
                self.fold_counters();
                if !self.finished() {
                    self.timers
                        .schedule(self.now + HOUSEKEEPING_PERIOD, TimerEvent::Housekeeping);
                }
            }
        }
    }

    pub(crate) fn on_command(&mut self, command: Command) {
        match command {
            Command::Cancel { pid, secret } => self.handle_cancel(pid, secret),
            Command::Reload { config, users } => {
                self.limits = Limits::from_config(&config);
                self.flush_policy = pgtier_core::metrics::FlushPolicy::from(&config.pgtier);
                for pool_id in self.pools.ids() {
                    let pool = self.pools.get_mut(pool_id);
                    if let Some(db) = config.database(&pool.key.database) {
                        pool.max_size = db.pool_size;
                        pool.min_size = db.min_pool_size;
                        pool.reserve_size = db.reserve_pool_size;
                        pool.spellings.limit = self.limits.max_spellings_per_pool;
                        pool.database_cap.max = db.max_db_connections;
                        pool.user_cap.max = config.max_user_connections(&pool.key.user);
                        pool.login.password =
                            db.password.clone().or_else(|| users.get(&pool.key.user));
                    }
                }
                self.config = config;
                self.users = users;
                self.scram_secrets.clear();
                info!(shard = self.index, "configuration reloaded");
            }
            Command::ReleaseIdle { key, from } => self.release_idle_for(&key, from),
            Command::SlotGranted { key } => self.adopt_granted_slot(&key),
            Command::ReleaseIdleUnderCap { database, user } => {
                self.release_idle_under_cap(database.as_deref(), user.as_deref());
            }
            Command::ListSessions { from, request_id } => self.answer_listing(from, request_id),
            Command::Listed { request_id, part } => self.on_listed(request_id, *part),
            Command::Shutdown(mode) => {
                let mode = self.shutdown.map_or(mode, |current| current.max(mode));
                self.shutdown = Some(mode);
                self.close_listener();
                self.progress_shutdown();
            }
        }
    }

    fn close_listener(&mut self) {
        if let Some(fd) = self.listener.take() {
            if self.accept_armed {
                self.submit(
                    crate::io::op_key::OpKey::new(crate::io::op_key::OpKind::Cancel, 0, 0),
                    crate::io::ring::Op::Cancel {
                        target: crate::io::op_key::OpKey::new(
                            crate::io::op_key::OpKind::Accept,
                            0,
                            0,
                        )
                        .encode(),
                    },
                );
            }
            // SAFETY: the listener fd is owned by this shard; a pending multishot accept ends
            // with an error completion once it is closed and cancelled.
            unsafe { libc::close(fd) };
        }
    }

    /// Closes whoever the shutdown mode says may go now; idle servers close once no client
    /// is left to use them.
    fn progress_shutdown(&mut self) {
        let Some(mode) = self.shutdown else { return };
        let clients: Vec<(ClientId, bool)> = self
            .clients
            .slots()
            .map(|(slot, client)| (ClientId(slot), client.server().is_some()))
            .collect();
        for (id, has_server) in clients {
            match mode {
                ShutdownMode::WaitForClients => {}
                ShutdownMode::WaitForTransactions if has_server => {
                    if let Some(client) = self.clients.get_mut(id.0) {
                        client.close_when_idle = true;
                    }
                }
                _ => {
                    let error = proto::fatal(sqlstate::ADMIN_SHUTDOWN, "pgtier is shutting down");
                    self.close_client(id, Some(error));
                }
            }
        }
        if self.clients.is_empty() || mode == ShutdownMode::Immediate {
            let servers: Vec<ServerId> = self
                .servers
                .slots()
                .map(|(slot, _)| ServerId(slot))
                .collect();
            for id in servers {
                let idle = self.servers.get(id.0).is_some_and(|s| {
                    matches!(
                        s.state,
                        ServerState::Idle { .. }
                            | ServerState::Connecting { .. }
                            | ServerState::LoggingIn { .. }
                    )
                });
                if idle || mode == ShutdownMode::Immediate || self.clients.is_empty() {
                    self.close_server(id);
                }
            }
        }
    }

    fn check_client_timeouts(&mut self) {
        let s = &self.config.pgtier;
        let login = s.client_login_timeout.enabled();
        let wait = s.query_wait_timeout.enabled();
        let idle = s.client_idle_timeout.enabled();
        let idle_tx = s.idle_transaction_timeout.enabled();
        let query = s.query_timeout.enabled();
        let now = self.now;
        let over = |since: std::time::Instant, limit: Option<Duration>| {
            limit.is_some_and(|limit| now.saturating_duration_since(since) > limit)
        };
        let mut expired: Vec<(ClientId, SqlState, &'static str)> = Vec::new();
        for (slot, client) in self.clients.slots() {
            let id = ClientId(slot);
            match &client.state {
                ClientState::Startup | ClientState::Authenticating(_) => {
                    if over(client.connected_at, login) {
                        expired.push((id, sqlstate::PROTOCOL_VIOLATION, "client_login_timeout"));
                    }
                }
                ClientState::WaitingForServer { since }
                | ClientState::WaitingForReplica { since, .. } => {
                    if over(*since, wait) {
                        expired.push((id, sqlstate::PROTOCOL_VIOLATION, "query_wait_timeout"));
                    }
                }
                ClientState::Idle { since } => {
                    if over(*since.max(&client.last_active), idle) {
                        expired.push((id, sqlstate::IDLE_SESSION_TIMEOUT, "client_idle_timeout"));
                    }
                }
                ClientState::Active { server } => {
                    let running = client.query_started;
                    if running.is_some_and(|started| over(started, query)) {
                        expired.push((id, sqlstate::QUERY_CANCELED, "query_timeout"));
                        continue;
                    }
                    let in_tx = self
                        .servers
                        .get(server.0)
                        .is_some_and(|s| s.tracker.idle_in_transaction());
                    if in_tx && over(client.last_active, idle_tx) {
                        expired.push((
                            id,
                            sqlstate::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
                            "idle_transaction_timeout",
                        ));
                    }
                }
                ClientState::Closing { .. } => {}
            }
        }
        for (id, code, message) in expired {
            self.close_client(id, Some(proto::fatal(code, message)));
        }
    }

    fn check_server_timeouts(&mut self) {
        let s = &self.config.pgtier;
        let connect = s.server_connect_timeout.enabled();
        let idle = s.server_idle_timeout.enabled();
        let lifetime = s.server_lifetime.enabled();
        let drain_limit = s
            .server_connect_timeout
            .enabled()
            .or(Some(Duration::from_secs(15)));
        let now = self.now;
        let over = |since: std::time::Instant, limit: Option<Duration>| {
            limit.is_some_and(|limit| now.saturating_duration_since(since) > limit)
        };
        let mut failed = Vec::new();
        let mut retire = Vec::new();
        for (slot, server) in self.servers.slots() {
            let id = ServerId(slot);
            match &server.state {
                ServerState::Connecting { since } | ServerState::LoggingIn { since, .. }
                    if over(*since, connect) =>
                {
                    failed.push(id);
                }
                ServerState::Idle { since } => {
                    let pool = self.pools.get(server.pool);
                    let above_min = pool.open_here > pool.min_size;
                    if (above_min && over(*since, idle)) || over(server.created_at, lifetime) {
                        retire.push(id);
                    }
                }
                ServerState::Draining { since }
                | ServerState::Checking { since }
                | ServerState::Leaving { since, .. }
                    if over(*since, drain_limit) =>
                {
                    retire.push(id)
                }
                _ => {}
            }
        }
        for id in failed {
            self.server_failed(
                id,
                "server_connect_timeout",
                Some(ServerFailureCause::ConnectTimeout),
            );
        }
        for id in retire {
            self.close_server(id);
        }
    }

    /// Pools with waiters retry the budget each period (slots freed on other shards).
    fn retry_waiting_pools(&mut self) {
        for pool_id in self.pools.ids() {
            if !self.pools.get(pool_id).waiters.is_empty() {
                self.pump_pool(pool_id);
            }
        }
    }

    /// Opens servers for pools below min_pool_size (shard 0 only, so shards do not race).
    fn warm_pools(&mut self) {
        if self.index != 0 || self.shutdown.is_some() {
            return;
        }
        for pool_id in self.pools.ids() {
            let pool = self.pools.get(pool_id);
            let failing = pool.failure.as_ref().is_some_and(|f| f.retry_at > self.now);
            if failing || pool.open_everywhere() >= pool.min_size || pool.connecting > 0 {
                continue;
            }
            let reserved = self.pools.get_mut(pool_id).try_reserve_server(false);
            if reserved == crate::pool::Reservation::Reserved && self.open_server(pool_id).is_err()
            {
                self.pools.get_mut(pool_id).release_server_slot();
            }
        }
    }
}
