//! The engine's periodic and cross-shard work: PgBouncer's timeouts, waiters past
//! `query_wait_timeout`, idle servers to close and servers to open (warmup, starving pools),
//! clients of Down replicas re-routed, counters folded; the commands other shards and the
//! process send (cancel, reload, shutdown, slot handover, listings); the gathering of every
//! shard's rows for the admin console's sessions (`listings.rs`), as `list_rows.rs` copies them
//! out; and the routing of the admin commands and console sessions: `Admin` decides over the
//! tables (`admin_flows.rs`), and the engine posts to the shards, closes and links what it says.

use bytes::BytesMut;
use pgtier_pool::{Closing, FreedPool, PoolId, ServerTarget};
use tracing::{debug, info};

use crate::action::{Action, CloseHow, Conn};
use crate::addr::ServerAddr;
use crate::cancel::{CancelKey, TTL_MASK, peer_of, shard_of, ttl_of};
use crate::client::ClientState;
use crate::command::Command;
use crate::engine::Engine;
use crate::engine::admin_flows::{
    ConsoleStep, admin_op_condition_holds, client_by_ref, clients_of, complete, console_error,
    idle_servers_of, ignored_set, mark_servers_to_close, refusal_error, servers_of,
};
use crate::engine::timeouts::ClientTimeouts;
use crate::gates::{AdminOp, AdminRequest, ClientRef, PauseSignal, Scope, ShutdownMode};
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::reconfigure::Order;
use crate::server::ServerState;
use crate::services::Refusal;
use crate::settings::{DEFAULT_DRAIN_LIMIT, LISTING_WAIT};

impl Engine {
    pub(super) fn housekeeping(&mut self) {
        self.check_client_timeouts();
        if let Some(after) = Engine::enabled(self.env.config().pgtier.query_wait_notify) {
            self.clients
                .notify_long_waits(after, self.now, &mut self.outbox);
        }
        self.check_server_timeouts();
        if self.env.config().pgtier.server_fast_close {
            self.fast_close_servers();
        }
        self.expire_waiters();
        self.close_idle_servers();
        self.follow_primary_moves();
        if !self.admin.is_shutting_down() {
            self.linker
                .keep_pools_warm(&self.env, &*self.routing, self.clients.logins(), self.now);
        }
        self.open_wanted_servers();
        self.reroute_waiters_of_down_replicas();
        self.rerun_reads_on_down_replicas();
        self.expire_listings();
        for id in self
            .admin
            .idle_servers_of_paused(&self.servers, &self.linker)
        {
            self.close_server(id);
        }
        self.progress_admin_ops();
        if self.admin.is_shutting_down() {
            self.progress_shutdown();
        }
        self.fold_counters();
        self.clients.drop_empty_call_logs();
        self.auth_delay.forget_answered(self.now);
        if self.env.config().pgtier.metrics_port != 0 {
            self.publish_pool_gauges();
        }
    }

    fn check_client_timeouts(&mut self) {
        let config = self.env.config().clone();
        let limits = ClientTimeouts::from_config(&config);
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

    /// `server_fast_close`: a server RECONNECT marked, serving a client between
    /// transactions (session mode, or a pinned session), closes now with its client, which
    /// is told why, rather than when the client leaves.
    fn fast_close_servers(&mut self) {
        let marked: Vec<(ServerId, ClientId)> = self
            .servers
            .iter()
            .filter(|(_, server)| server.close_needed() && server.backend().tracker().is_idle())
            .filter_map(|(slot, server)| match *server.state() {
                ServerState::Busy { client } => Some((ServerId(slot), client)),
                _ => None,
            })
            .collect();
        for (server, client) in marked {
            let error = messages::fatal(
                sqlstate::PROTOCOL_VIOLATION,
                "database configuration changed",
            );
            self.close_client(client, Some(error));
            self.close_server(server);
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
    /// or asked for by another shard; then pools unused past `pool_idle_timeout`.
    fn close_idle_servers(&mut self) {
        let mut closing: Vec<Closing<ServerId>> = Vec::new();
        self.linker
            .pools_mut()
            .collect_closable(self.now, &mut closing);
        for closing in closing {
            self.retire(closing);
        }
        let mut freed: Vec<FreedPool> = Vec::new();
        self.linker
            .pools_mut()
            .collect_idle_pools(self.now, &mut freed);
        for pool in freed {
            // PgBouncer's line (operators and its test suite look for it).
            info!(
                shard = self.env.shard(),
                "cleaning up idle pool for user {} on db {} because: pool idle timeout (age= {}s)",
                pool.key.server_user,
                pool.key.database,
                pool.unused_for.as_secs()
            );
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

    /// Reads kept to run again (`read_retries`) whose server is on a replica that went Down
    /// (its probes or another connection's failure said so: a hung or partitioned replica
    /// that never answers) run again elsewhere now; their server is closed. Only reads with
    /// runs left are taken: the others wait for their answer as before.
    fn rerun_reads_on_down_replicas(&mut self) {
        let max = self.env.config().pgtier.read_retries;
        let mut on_down = Vec::new();
        for (client, server) in self.clients.reads_that_may_run_again(max) {
            let down = self
                .servers
                .get(server.0)
                .filter(|server| server.client() == Some(client))
                .and_then(|server| self.linker.pools().key(server.pool()))
                .is_some_and(|key| {
                    matches!(key.target, ServerTarget::Replica(addr)
                        if self.routing.is_down(&key.database, addr))
                });
            if down {
                on_down.push(server);
            }
        }
        for server in on_down {
            self.server_failed(server, "the replica serving this read went Down", None);
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
    ///
    /// Under WAIT_FOR_SERVERS (PgBouncer's semantics) a client waiting for a server goes at
    /// once, one in a transaction finishes it, and an idle one stays until it asks for a
    /// server again (`need_server` closes it then) or until no shard has a server in use
    /// any more, when everything left closes and the process exits. That moment is the
    /// process's, not the shard's: a client idle on one shard stays while another shard
    /// still runs a transaction.
    fn progress_shutdown(&mut self) {
        let Some(mode) = self.admin.shutdown() else {
            return;
        };
        let close_all = match mode {
            ShutdownMode::WaitForClients => self.env.shared().is_done(),
            ShutdownMode::WaitForTransactions => {
                self.transactions_over_everywhere() || self.env.shared().is_done()
            }
            ShutdownMode::Immediate => true,
        };
        let clients: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, client)| !client.is_closing())
            .map(|(slot, _)| ClientId(slot))
            .collect();
        for id in clients {
            if close_all {
                let error = messages::fatal(sqlstate::ADMIN_SHUTDOWN, "pgtier is shutting down");
                self.close_client(id, Some(error));
            } else if mode == ShutdownMode::WaitForTransactions && self.is_waiting_for_server(id) {
                self.close_client(id, Some(messages::server_shutting_down()));
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
        if mode != ShutdownMode::Immediate {
            self.count_idle();
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

    /// During a graceful shutdown: this shard counts itself idle (no client, no server) or
    /// busy again, and marks the process done once every shard is idle. Shards end
    /// together, so a console session never waits on a shard that is gone.
    fn count_idle(&mut self) {
        let idle = self.clients.is_empty() && self.servers.is_empty();
        if self.admin.recount_idle(idle) {
            self.env.shared().shard_idle(idle);
        }
        if idle {
            self.env.shared().check_done();
        }
    }

    /// Under WAIT_FOR_SERVERS: this shard counts itself once none of its clients holds a
    /// server, and says whether every shard has.
    fn transactions_over_everywhere(&mut self) -> bool {
        if !self.admin.transactions_over_counted() {
            let in_use = self
                .clients
                .iter()
                .any(|(_, client)| !client.is_closing() && client.server().is_some());
            if !in_use {
                self.admin.count_transactions_over();
                self.env.shared().shard_transactions_over();
            }
        }
        self.env.shared().all_transactions_over()
    }

    /// The client is parked for a server (its next transaction's, its welcome's, or a
    /// replica's admission).
    fn is_waiting_for_server(&self, id: ClientId) -> bool {
        self.clients.get(id.0).is_some_and(|client| {
            matches!(
                client.state(),
                ClientState::Queued { .. }
                    | ClientState::Joining { .. }
                    | ClientState::Routing { .. }
            )
        })
    }

    // ---- commands ----

    pub(super) fn on_command(&mut self, command: Command) {
        match command {
            Command::Cancel { pid, secret } => self.handle_cancel(CancelKey { pid, secret }),
            Command::Reload {
                config,
                users,
                tls,
                pending,
            } => {
                // New connections use the new TLS configurations; running client sessions
                // keep theirs, servers are recycled when the server side's settings changed.
                let recycle = self.env.server_tls_differs(&config);
                self.clients.logins_mut().reloaded(tls.acceptor);
                self.servers.reloaded(tls.connector);
                if recycle {
                    // A login that failed under the old settings says nothing of the next.
                    self.linker.pools_mut().forget_login_failures();
                    for id in self.servers.recycle_all() {
                        self.log_server_closing(id, "database configuration changed");
                        self.close_server(id);
                    }
                }
                self.stats.configure(&config.pgtier, self.env.shared());
                self.auth_delay.configure(
                    config.pgtier.auth_failure_delay.enabled(),
                    config.pgtier.auth_failure_delay_max_addresses as usize,
                    super::auth_delay::longest_wait(&config),
                );
                let moved = self.databases_moved_by(&config);
                self.env.reload(config, users);
                for database in moved {
                    // PgBouncer's rule: a server of the old definition closes when it is
                    // next released (idle ones now); new servers use the new one.
                    let scope = Scope::Database(database);
                    for id in mark_servers_to_close(&mut self.servers, &self.linker, &scope) {
                        self.close_server(id);
                    }
                }
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
                let idle_pool_timeout = self.env.config().pgtier.pool_idle_timeout.enabled();
                self.linker
                    .pools_mut()
                    .set_idle_pool_timeout(idle_pool_timeout);
                info!(shard = self.env.shard(), "configuration reloaded");
                // The console that asked is answered once the last shard has it in effect.
                if let Some((shard, request_id)) = pending.and_then(|pending| pending.applied()) {
                    self.reconfigured(shard, request_id, None);
                }
            }
            Command::Shutdown(mode) => {
                self.env.shared().note_shutdown();
                self.admin.shut_down(mode);
                self.progress_shutdown();
            }
            Command::ReleaseIdle { key, from } => self.linker.release_idle_for(
                &mut self.servers,
                &key,
                from,
                self.env.shard(),
                self.now,
                &mut self.outbox,
            ),
            Command::LendIdle { key, from } => {
                let lent = self.linker.lend_idle_to(
                    &mut self.servers,
                    &key,
                    from,
                    self.env.shard(),
                    self.now,
                    &mut self.outbox,
                );
                if !lent {
                    self.outbox.push(Action::Post {
                        shard: from,
                        command: Command::LendRefused { key },
                    });
                }
            }
            Command::LendRefused { key } => self.borrow_refused(&key),
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
            Command::VacateDatabase { database } => self.linker.vacate_database(
                &mut self.servers,
                &self.env,
                &database,
                self.now,
                &mut self.outbox,
            ),
            Command::ListSessions { from, request_id } => {
                // The asking console may read the statistics too: they are current with
                // this shard's rows.
                self.fold_counters();
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
            Command::Signal(signal) => self.on_pause_signal(signal),
            Command::Apply(op) => {
                let _ = self.apply_op(&op);
            }
        }
    }

    // ---- cancel ----

    /// A CancelRequest arrived here; handled here, passed to the owning shard, or (with
    /// peering) forwarded to the peer that issued its key.
    pub(super) fn route_cancel(&mut self, mut key: CancelKey) {
        let own_peer = self.env.peer_id();
        if own_peer != 0 {
            let peer = peer_of(key);
            if peer != own_peer {
                self.forward_cancel_to_peer(peer, key);
                return;
            }
            // Keys are kept with a full TTL; a forwarded request arrives with less.
            key.secret |= TTL_MASK;
        }
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

    /// Sends a CancelRequest on to `peer`, which issued its key, with one forward less left;
    /// dropped when none is left or the peer is not in `[peers]` (as PgBouncer does).
    fn forward_cancel_to_peer(&mut self, peer: u16, key: CancelKey) {
        let ttl = ttl_of(key);
        if ttl == 0 {
            info!(
                peer,
                "cancel request dropped: its forwarding TTL was exhausted"
            );
            return;
        }
        let config = self.env.config().clone();
        let Some(entry) = config.peers.get(&peer) else {
            info!(peer, "cancel request dropped: no such peer in [peers]");
            return;
        };
        let addr =
            match ServerAddr::of_host(&entry.addr, |host, port| self.servers.resolve(host, port)) {
                Ok(addr) => addr,
                Err(reason) => {
                    info!(peer, %reason, "cancel request dropped: the peer's address");
                    return;
                }
            };
        debug!(peer, %addr, "forwarding a cancel request to its peer");
        self.outbox.push(Action::ForwardCancel {
            addr,
            request: crate::messages::cancel_request(key.pid, key.secret - 1),
        });
    }

    /// Forwards a cancel if the key's client has a server running its query, or holds it
    /// for the query the client waits with for a server (sent once the query is; PgBouncer
    /// drops it and the query runs in full).
    fn handle_cancel(&mut self, key: CancelKey) {
        let Some(client) = self.clients.logins().keys().lookup(key) else {
            tracing::debug!("cancel request with an unknown key");
            return;
        };
        if self
            .clients
            .get_mut(client.0)
            .is_some_and(|c| c.hold_cancel())
        {
            tracing::debug!(
                client = client.index(),
                "cancel request held until the query it waits with reaches a server"
            );
            return;
        }
        self.cancel_running(client);
    }

    /// Sends a cancel to client `client`'s server if that server runs the client's query.
    pub(super) fn cancel_running(&mut self, client: ClientId) {
        let Some(server) = self.clients.get(client.0).and_then(|c| c.server()) else {
            return;
        };
        let running = self
            .servers
            .get(server.0)
            .is_some_and(|s| s.client() == Some(client) && s.backend().tracker().may_be_running());
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

    // ---- admin commands and console sessions (their flows: `admin_flows.rs`) ----

    /// A console statement the console recognized as an admin command; `out` gets the
    /// answer when it is immediate. Returns true when the op went to the shards: its answer
    /// (and ReadyForQuery) is sent by `answer_console`, which goes on with the session's
    /// next queries, so what `out` held is sent first (for SHUTDOWN, which answers at once,
    /// nothing more of the session is read).
    fn run_admin_op(&mut self, id: ClientId, request: AdminRequest, out: &mut BytesMut) -> bool {
        match request {
            AdminRequest::IgnoredSet => {
                ignored_set(out);
                false
            }
            AdminRequest::Reconfigure(change) => {
                let earlier = std::mem::take(out);
                if !earlier.is_empty() {
                    self.send(Conn::Client(id), earlier.freeze());
                }
                let request_id = self.admin.ops_mut().ask(id, change.tag(), 1, false);
                let order = Order {
                    shard: self.env.shard(),
                    request_id,
                    change,
                };
                if let Err(refusal) = self.admin.console_mut().reconfigure(order) {
                    self.on_admin_op_done(request_id, Some(refusal));
                }
                true
            }
            AdminRequest::Op(AdminOp::Shutdown(mode)) => {
                // Answered first, as PgBouncer does: under WAIT_FOR_SERVERS this session
                // (holding no server) is among the clients closed at once.
                info!(
                    shard = self.env.shard(),
                    ?mode,
                    "SHUTDOWN from the admin console"
                );
                complete(out, "SHUTDOWN");
                messages::ready_for_query(out, b'I');
                let answer = std::mem::take(out);
                self.send(Conn::Client(id), answer.freeze());
                for shard in 0..self.env.shared().shards() {
                    if shard == self.env.shard() {
                        self.on_command(Command::Shutdown(mode));
                    } else {
                        self.outbox.push(Action::Post {
                            shard,
                            command: Command::Shutdown(mode),
                        });
                    }
                }
                true
            }
            AdminRequest::Op(op) => {
                if let Some(refusal) = self
                    .admin
                    .gates()
                    .refusal(&op, self.admin.is_shutting_down())
                {
                    console_error(out, &refusal);
                    return false;
                }
                info!(shard = self.env.shard(), ?op, "admin command");
                let earlier = std::mem::take(out);
                if !earlier.is_empty() {
                    self.send(Conn::Client(id), earlier.freeze());
                }
                self.ask_shards(id, op);
                true
            }
        }
    }

    /// Posts `op` to every shard it concerns (this one included, applied at once).
    fn ask_shards(&mut self, id: ClientId, op: AdminOp) {
        let shards: Vec<usize> = match &op {
            AdminOp::KillClient(ClientRef::Ptr { shard, .. }) => vec![*shard],
            _ => (0..self.env.shared().shards()).collect(),
        };
        if shards
            .iter()
            .any(|shard| *shard >= self.env.shared().shards())
        {
            let error = Refusal {
                code: sqlstate::PROTOCOL_VIOLATION,
                message: "client not found".to_string(),
            };
            self.answer_console(id, op.tag(), Some(error));
            return;
        }
        let request_id = self.admin.ops_mut().ask(
            id,
            op.tag().to_string(),
            shards.len(),
            matches!(op, AdminOp::KillClient(ClientRef::Id(_))),
        );
        for shard in shards {
            if shard == self.env.shard() {
                self.apply_admin_op(self.env.shard(), request_id, op.clone());
            } else {
                self.outbox.push(Action::Post {
                    shard,
                    command: Command::Admin {
                        from: self.env.shard(),
                        request_id,
                        op: op.clone(),
                    },
                });
            }
        }
    }

    /// Applies an op posted by shard `from` (maybe this one); answers now or once its
    /// condition holds.
    fn apply_admin_op(&mut self, from: usize, request_id: u64, op: AdminOp) {
        match self.apply_op(&op) {
            Err(error) => self.admin_op_answered(from, request_id, Some(error)),
            Ok(()) if admin_op_condition_holds(&self.clients, &self.servers, &self.linker, &op) => {
                self.admin_op_answered(from, request_id, None);
            }
            Ok(()) => self.admin.ops_mut().wait(from, request_id, op),
        }
    }

    /// The databases with pools here whose entry in `next` opens other servers than the
    /// entry in effect (another host, database, login or startup values; or no entry).
    fn databases_moved_by(&self, next: &pgtier_core::config::Config) -> Vec<String> {
        let current = self.env.config();
        let mut moved: Vec<String> = self
            .linker
            .pools()
            .pools()
            .map(|(_, key, _)| key.database.to_string())
            .filter(
                |database| match (current.database(database), next.database(database)) {
                    (Some(before), Some(after)) => !before.connects_like(after),
                    (None, None) => false,
                    _ => true,
                },
            )
            .collect();
        moved.sort();
        moved.dedup();
        moved
    }

    /// SIGUSR1/SIGUSR2 (on shard 0): PgBouncer's line, and the op to every shard.
    fn on_pause_signal(&mut self, signal: PauseSignal) {
        let (op, line) = self
            .admin
            .gates()
            .on_signal(signal, self.admin.is_shutting_down());
        info!("{line}");
        let Some(op) = op else {
            return;
        };
        for shard in 0..self.env.shared().shards() {
            if shard == self.env.shard() {
                let _ = self.apply_op(&op);
            } else {
                self.outbox.push(Action::Post {
                    shard,
                    command: Command::Apply(op.clone()),
                });
            }
        }
    }

    /// Applies `op` on this shard; `Err` is its refusal here.
    fn apply_op(&mut self, op: &AdminOp) -> Result<(), String> {
        match op {
            AdminOp::Pause(scope) => {
                self.admin
                    .pause(scope, &mut self.clients, &mut self.linker, self.now);
                // PAUSE disconnects every server: the idle ones now.
                for id in idle_servers_of(&self.servers, &self.linker, scope) {
                    self.close_server(id);
                }
                Ok(())
            }
            AdminOp::Resume(scope) => {
                let released =
                    self.admin
                        .resume(scope, &self.clients, &self.servers, &mut self.outbox);
                for id in released {
                    self.need_server(id);
                }
                Ok(())
            }
            AdminOp::Reconnect(scope) => {
                for id in mark_servers_to_close(&mut self.servers, &self.linker, scope) {
                    self.close_server(id);
                }
                Ok(())
            }
            AdminOp::WaitClose(_) => Ok(()),
            AdminOp::Kill(scope) => {
                // Every client of the scope gets PgBouncer's error and goes, every server
                // closes now; each database is paused by name, so RESUME of one lifts it.
                for database in self.databases_killed_by(scope) {
                    self.admin
                        .gates_mut()
                        .pause(&Scope::Database(database.clone()));
                    // Its pools go: a new client's welcome needs a server again.
                    self.env.shared().forget_welcomes_of(&database);
                }
                for id in clients_of(&self.clients, scope) {
                    if self.clients.is_console_client(id) {
                        continue;
                    }
                    let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "database removed");
                    self.close_client(id, Some(error));
                }
                for id in servers_of(&self.servers, &self.linker, scope) {
                    self.close_server(id);
                }
                Ok(())
            }
            AdminOp::KillClient(target) => match client_by_ref(&self.clients, *target) {
                Some(id) => {
                    let error =
                        messages::fatal(sqlstate::PROTOCOL_VIOLATION, "admin forced disconnect");
                    self.close_client(id, Some(error));
                    Ok(())
                }
                None => Err("client not found".to_string()),
            },
            AdminOp::Disable(database) => {
                self.admin.gates_mut().set_disabled(database, true);
                Ok(())
            }
            AdminOp::Enable(database) => {
                self.admin.gates_mut().set_disabled(database, false);
                Ok(())
            }
            AdminOp::Suspend => {
                self.admin
                    .suspend(&self.clients, &self.servers, &mut self.outbox);
                Ok(())
            }
            AdminOp::Shutdown(mode) => {
                self.on_command(Command::Shutdown(*mode));
                Ok(())
            }
        }
    }

    /// The databases a KILL of `scope` pauses: the one named, or every configured entry
    /// and every database this shard has a pool or a client of (the console's excepted).
    fn databases_killed_by(&self, scope: &Scope) -> Vec<String> {
        let Scope::All = scope else {
            return match scope {
                Scope::Database(name) => vec![name.clone()],
                Scope::All => Vec::new(),
            };
        };
        let mut names: std::collections::BTreeSet<String> =
            self.env.config().databases.keys().cloned().collect();
        for (_, key, _) in self.linker.pools().pools() {
            names.insert(key.database.to_string());
        }
        for (_, client) in self.clients.iter() {
            if let Some(session) = client.session() {
                names.insert(session.database().to_string());
            }
        }
        names.retain(|name| !pgtier_core::config::is_admin_database(name));
        names.into_iter().collect()
    }

    /// Sends shard `from` this shard's answer to `request_id`.
    fn admin_op_answered(&mut self, from: usize, request_id: u64, error: Option<String>) {
        let error = error.map(|message| Refusal {
            code: sqlstate::PROTOCOL_VIOLATION,
            message,
        });
        self.reconfigured(from, request_id, error);
    }

    /// Sends shard `from` the answer to its console's `request_id`.
    fn reconfigured(&mut self, from: usize, request_id: u64, error: Option<Refusal>) {
        if from == self.env.shard() {
            self.on_admin_op_done(request_id, error);
        } else {
            self.outbox.push(Action::Post {
                shard: from,
                command: Command::AdminDone { request_id, error },
            });
        }
    }

    /// One shard answered; the console session is answered once all did.
    fn on_admin_op_done(&mut self, request_id: u64, error: Option<Refusal>) {
        if let Some((client, tag, error)) = self.admin.ops_mut().answered(request_id, error) {
            self.answer_console(client, &tag, error);
        }
    }

    /// Answers a console session's op and goes on with its pipelined queries.
    fn answer_console(&mut self, id: ClientId, tag: &str, error: Option<Refusal>) {
        if self
            .clients
            .get(id.0)
            .is_none_or(|client| client.is_closing())
        {
            return;
        }
        let mut out = BytesMut::new();
        match error {
            Some(refusal) => refusal_error(&mut out, &refusal),
            None => complete(&mut out, tag),
        }
        messages::ready_for_query(&mut out, b'I');
        self.send(Conn::Client(id), out.freeze());
        self.on_console_bytes(id);
    }

    /// Re-checks the ops waiting here (after a server closed, and at housekeeping), and
    /// times out clients a pause held past `query_wait_timeout`.
    pub(super) fn progress_admin_ops(&mut self) {
        for (from, request_id, op) in self.admin.ops_mut().take_waiting() {
            if admin_op_condition_holds(&self.clients, &self.servers, &self.linker, &op) {
                self.admin_op_answered(from, request_id, None);
            } else {
                self.admin.ops_mut().wait(from, request_id, op);
            }
        }
        let timeout = Engine::enabled(self.env.config().pgtier.query_wait_timeout);
        let expired = self
            .admin
            .expire_paused_clients(&self.clients, timeout, self.now);
        for id in expired {
            let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "query_wait_timeout");
            self.close_client(id, Some(error));
        }
    }

    /// Handles every whole message of console session `id`, in order.
    pub(super) fn on_console_bytes(&mut self, id: ClientId) {
        self.fold_counters();
        let mut listing = self.admin.listings_mut().take_ready(id);
        let mut out = BytesMut::new();
        loop {
            let step = self.admin.console_step(
                id,
                &mut self.clients,
                self.env.config(),
                &mut self.stats,
                &mut listing,
                &mut out,
            );
            match step {
                ConsoleStep::Answered => {}
                ConsoleStep::Wait => break,
                ConsoleStep::Gone => return,
                ConsoleStep::Quit => {
                    self.send_console(id, out);
                    self.close_client(id, None);
                    return;
                }
                ConsoleStep::Refuse(message) => {
                    self.console_refuses(id, out, message);
                    return;
                }
                ConsoleStep::Admin(request) => {
                    if self.run_admin_op(id, request, &mut out) {
                        break;
                    }
                    messages::ready_for_query(&mut out, b'I');
                }
                ConsoleStep::NeedListing => {
                    if !self.admin.listings_mut().is_gathering(id) {
                        self.start_listing(id);
                        listing = self.admin.listings_mut().take_ready(id);
                    }
                    if listing.is_none() {
                        break;
                    }
                }
            }
        }
        self.send_console(id, out);
    }

    fn send_console(&mut self, id: ClientId, out: BytesMut) {
        if !out.is_empty() {
            self.send(Conn::Client(id), out.freeze());
        }
    }

    fn console_refuses(&mut self, id: ClientId, out: BytesMut, message: &str) {
        self.send_console(id, out);
        let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, message);
        self.close_client(id, Some(error));
    }
}
