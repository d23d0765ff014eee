//! The engine's periodic and cross-shard work: PgBouncer's timeouts, waiters past
//! `query_wait_timeout`, idle servers to close and servers to open (warmup, starving pools),
//! clients of Down replicas re-routed, counters folded; the commands other shards and the
//! process send (cancel, reload, shutdown, slot handover, listings); and the gathering of
//! every shard's rows for the admin console's sessions (`gates.rs`, `listings.rs`), as
//! `listing.rs` copies them out.

use pgtier_pool::{Closing, PoolId, ServerTarget};
use tracing::info;

use crate::action::{Action, CloseHow, Conn};
use crate::cancel::{CancelKey, shard_of};
use crate::command::Command;
use crate::engine::Engine;
use crate::engine::timeouts::ClientTimeouts;
use crate::gates::ShutdownMode;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::server::ServerState;
use crate::settings::{DEFAULT_DRAIN_LIMIT, LISTING_WAIT};

impl Engine {
    pub(super) fn housekeeping(&mut self) {
        self.check_client_timeouts();
        self.check_server_timeouts();
        self.expire_waiters();
        self.close_idle_servers();
        if !self.admin.is_shutting_down() {
            self.linker
                .keep_pools_warm(&self.env, &*self.routing, self.clients.logins(), self.now);
        }
        self.open_wanted_servers();
        self.reroute_waiters_of_down_replicas();
        self.expire_listings();
        self.close_idle_servers_of_paused();
        self.progress_admin_ops();
        if self.admin.is_shutting_down() {
            self.progress_shutdown();
        }
        self.fold_counters();
        self.clients.drop_empty_call_logs();
        if self.env.config().pgtier.metrics_port != 0 {
            self.publish_pool_gauges();
        }
    }

    fn check_client_timeouts(&mut self) {
        let limits = ClientTimeouts::from_settings(&self.env.config().pgtier);
        let (expired, linger_over) = self.clients.timed_out(&limits, &self.servers, self.now);
        for (id, code, message) in expired {
            self.close_client(id, Some(messages::fatal(code, message)));
        }
        for id in linger_over {
            // Its final error could not be delivered in time: cut it off.
            if let Some(client) = self.clients.get_mut(id.0) {
                client.closed_quietly();
            }
            self.outbox.push(Action::Close {
                conn: Conn::Client(id),
                how: CloseHow::Now,
            });
        }
    }

    fn check_server_timeouts(&mut self) {
        let connect = Engine::enabled(self.env.config().pgtier.server_connect_timeout);
        let drain_limit = connect.unwrap_or(DEFAULT_DRAIN_LIMIT);
        let (failed, retire) = self.servers.timed_out(connect, drain_limit, self.now);
        for id in failed {
            self.server_failed(
                id,
                "server_connect_timeout",
                Some(crate::services::FailureCause::ConnectTimeout),
            );
        }
        for id in retire {
            self.close_server(id);
        }
    }

    /// Clients whose `query_wait_timeout` passed while parked.
    fn expire_waiters(&mut self) {
        while let Some(expired) = self.linker.pools_mut().poll_expired(self.now) {
            let id = expired.waiter;
            if let Some(client) = self.clients.get_mut(id.0) {
                if !client.unparked(true) {
                    continue;
                }
            }
            let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "query_wait_timeout");
            self.close_client(id, Some(error));
        }
    }

    /// Idle servers past `server_lifetime` or `server_idle_timeout`, over a lowered limit,
    /// or asked for by another shard.
    fn close_idle_servers(&mut self) {
        let mut closing: Vec<Closing<ServerId>> = Vec::new();
        self.linker
            .pools_mut()
            .collect_closable(self.now, &mut closing);
        for closing in closing {
            self.retire(closing);
        }
    }

    /// Warmup to `min_pool_size`, and pools whose clients wait with nothing being opened.
    fn open_wanted_servers(&mut self) {
        if self.admin.is_shutting_down() {
            return;
        }
        let mut opens: Vec<PoolId> = Vec::new();
        self.linker.pools_mut().collect_opens(self.now, &mut opens);
        // No warmup for a paused database: PAUSE waits for its servers to be gone.
        opens.retain(|pool| {
            self.linker
                .pools()
                .key(*pool)
                .is_none_or(|key| !self.admin.gates().is_paused(&key.database))
        });
        for pool in opens {
            self.open_server(pool);
        }
        // Clients that still wait with nothing opening for them: their pool is full, and
        // the servers may sit on other shards, which are asked again (once per period).
        let starving: Vec<PoolId> = self
            .linker
            .pools()
            .pools()
            .filter(|(_, _, counts)| counts.waiting > 0 && counts.opening == 0)
            .map(|(pool, _, _)| pool)
            .collect();
        for pool in starving {
            self.open_for_waiters(pool);
        }
    }

    /// Clients queued on pools of Down replicas are routed elsewhere, not failed.
    fn reroute_waiters_of_down_replicas(&mut self) {
        let down: Vec<PoolId> = self
            .linker
            .pools()
            .pools()
            .filter(|(_, key, counts)| {
                counts.waiting > 0
                    && matches!(key.target, ServerTarget::Replica(addr)
                        if self.routing.is_down(&key.database, addr))
            })
            .map(|(pool, _, _)| pool)
            .collect();
        for id in self.linker.unpark_waiters(down, &mut self.clients) {
            self.reroute(id);
        }
    }

    /// Closes whoever the shutdown mode says may go now; idle servers close once no client
    /// is left to use them.
    fn progress_shutdown(&mut self) {
        let Some(mode) = self.admin.shutdown() else {
            return;
        };
        let clients: Vec<(ClientId, bool)> = self
            .clients
            .iter()
            .map(|(slot, client)| (ClientId(slot), client.server().is_some()))
            .collect();
        for (id, has_server) in clients {
            match mode {
                ShutdownMode::WaitForClients => {}
                // A client in a transaction closes when it ends (`release_server`).
                ShutdownMode::WaitForTransactions if has_server => {}
                _ => {
                    let error =
                        messages::fatal(sqlstate::ADMIN_SHUTDOWN, "pgtier is shutting down");
                    self.close_client(id, Some(error));
                }
            }
        }
        let nobody_left = self.clients.iter().all(|(_, client)| client.is_closing());
        for slot in self.servers.slots() {
            let id = ServerId(slot);
            let Some(server) = self.servers.get(id.0) else {
                continue;
            };
            let unused = matches!(
                server.state(),
                ServerState::Idle { .. }
                    | ServerState::Connecting { .. }
                    | ServerState::Negotiating { .. }
                    | ServerState::LoggingIn { .. }
            );
            // Under WAIT_FOR_CLIENTS the clients that stay keep their pool.
            let pool_in_use = mode == ShutdownMode::WaitForClients && !nobody_left;
            if (unused && !pool_in_use) || mode == ShutdownMode::Immediate || nobody_left {
                self.close_server(id);
            }
        }
        if mode == ShutdownMode::Immediate {
            // Nothing lingers: a client's final error is not waited for.
            for slot in self.clients.slots() {
                self.outbox.push(Action::Close {
                    conn: Conn::Client(ClientId(slot)),
                    how: CloseHow::Now,
                });
            }
        }
    }

    // ---- commands ----

    pub(super) fn on_command(&mut self, command: Command) {
        match command {
            Command::Cancel { pid, secret } => self.handle_cancel(CancelKey { pid, secret }),
            Command::Reload { config, users, tls } => {
                // New connections use the new TLS configurations; running sessions keep theirs.
                self.clients.logins_mut().reloaded(tls.acceptor);
                self.servers.reloaded(tls.connector);
                self.stats.configure(&config.pgtier, self.env.shared());
                self.env.reload(config, users);
                let keyed: Vec<(PoolId, pgtier_pool::PoolKey)> = self
                    .linker
                    .pools()
                    .pools()
                    .map(|(pool, key, _)| (pool, key.clone()))
                    .collect();
                for (pool, key) in keyed {
                    let limits = self.env.pool_limits(&key);
                    self.linker.pools_mut().set_limits(pool, limits);
                }
                self.linker.reset_warm_pools(self.env.config());
                info!(shard = self.env.shard(), "configuration reloaded");
            }
            Command::Shutdown(mode) => {
                self.admin.shut_down(mode);
                self.progress_shutdown();
            }
            Command::ReleaseIdle { key, from } => self.release_idle_for(&key, from),
            Command::SlotGranted { key } => self.adopt_granted_slot(&key),
            Command::ServerMoved { server, socket } => self.adopt_moved_server(server, socket),
            Command::ReleaseIdleUnderCap { database, user } => {
                let budget = match (database, user) {
                    (Some(database), _) => self.env.shared().budgets.database(&database),
                    (None, Some(user)) => self.env.shared().budgets.user(&user),
                    (None, None) => None,
                };
                if let Some(budget) = budget
                    && let Some(closing) = self.linker.pools_mut().release_idle_sharing(&budget)
                {
                    self.retire(closing);
                }
            }
            Command::VacateDatabase { database } => self.vacate_database(&database),
            Command::ListSessions { from, request_id } => {
                let part = Box::new(self.list_sessions());
                self.outbox.push(Action::Post {
                    shard: from,
                    command: Command::Listed { request_id, part },
                });
            }
            Command::Listed { request_id, part } => {
                let shards = self.env.shared().shards();
                if let Some(client) = self
                    .admin
                    .listings_mut()
                    .add_part(request_id, *part, shards)
                {
                    self.on_console_bytes(client);
                }
            }
            Command::Admin {
                from,
                request_id,
                op,
            } => self.apply_admin_op(from, request_id, op),
            Command::AdminDone { request_id, error } => {
                self.on_admin_op_done(request_id, error);
            }
        }
    }

    // ---- cancel ----

    /// A CancelRequest arrived here; handled here or passed to the owning shard.
    pub(super) fn route_cancel(&mut self, key: CancelKey) {
        let owner = shard_of(key.secret);
        if owner == self.env.shard() {
            self.handle_cancel(key);
        } else if owner < self.env.shared().shards() {
            self.outbox.push(Action::Post {
                shard: owner,
                command: Command::Cancel {
                    pid: key.pid,
                    secret: key.secret,
                },
            });
        }
    }

    /// Forwards a cancel only if the key's client still has a server running its query.
    fn handle_cancel(&mut self, key: CancelKey) {
        let Some(client) = self.clients.logins().keys().lookup(key) else {
            tracing::debug!("cancel request with an unknown key");
            return;
        };
        let Some(server) = self.clients.get(client.0).and_then(|c| c.server()) else {
            return;
        };
        let running = self
            .servers
            .get(server.0)
            .is_some_and(|s| s.client() == Some(client) && s.backend().tracker().has_outstanding());
        if running {
            self.servers.send_cancel(server, &mut self.outbox);
        }
    }

    /// Starts gathering rows for console session `id`: this shard's now, the others'
    /// through their mailboxes.
    pub(super) fn start_listing(&mut self, id: ClientId) {
        let shards = self.env.shared().shards();
        let request_id = self
            .admin
            .listings_mut()
            .start(id, self.now + LISTING_WAIT, shards);
        for shard in (0..self.env.shared().shards()).filter(|shard| *shard != self.env.shard()) {
            self.outbox.push(Action::Post {
                shard,
                command: Command::ListSessions {
                    from: self.env.shard(),
                    request_id,
                },
            });
        }
        let own = self.list_sessions();
        self.admin.listings_mut().add_part(request_id, own, shards);
    }

    /// Listings past their deadline are answered with the rows that arrived.
    fn expire_listings(&mut self) {
        let shards = self.env.shared().shards();
        let expired = self.admin.listings_mut().expire(self.now, shards);
        for client in expired {
            if self.clients.get(client.0).is_some_and(|c| !c.is_closing()) {
                self.on_console_bytes(client);
            } else {
                self.admin.listings_mut().forget(client);
            }
        }
    }
}
