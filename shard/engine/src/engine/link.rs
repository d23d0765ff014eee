//! Servers given to clients and taken back: a client that needs a server gets an idle one,
//! a new one, or waits in its pool's FIFO; a linked client's bytes move to its server; at the
//! end of a transaction (transaction mode, unless the client is pinned) or when the client
//! leaves, the server goes through the release path (`crate::server::release`) and back to
//! the pool, or closes. Slots move between shards here too.

use std::sync::Arc;

use bytes::Bytes;
use pgtier_core::config::PoolMode;
use pgtier_pool::{Checkin, Lease, PoolError, PoolId};
use pgtier_wire::session_state::Effects;
use tracing::debug;

use crate::action::{Action, Conn};
use crate::client::ClientState;
use crate::client::forward::{ForwardEnd, ForwardLimits, ForwardOptions, ForwardShared};
use crate::command::Command;
use crate::engine::moving::Arrived;
use crate::engine::{Engine, reads};
use crate::gates::ShutdownMode;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::prepared::StatementLimits;
use crate::server::moved::{DetachedSocket, MovedServer};
use crate::server::release::ClientLeft;
use crate::server::{ReleaseStep, Reset, ServerState};
use crate::tracker::Tracker;

impl Engine {
    /// A welcomed client between transactions sent bytes: it needs a server (or it left).
    pub(super) fn on_idle_client_bytes(&mut self, id: ClientId) {
        let whole_unit_missing = self.clients.needs_whole_unit(id, &self.env, &*self.routing);
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        match client.input().first() {
            None => {}
            Some(b'X') => self.close_client(id, None),
            // Refused before it takes a server: garbage never reaches one.
            Some(code) if !Tracker::is_client_message(code) => {
                self.protocol_error(id, &format!("invalid frontend message type {code}"));
            }
            // A reader session's transaction is routed by its first whole unit.
            Some(_) if whole_unit_missing => {}
            Some(_) => {
                client.queued(self.now);
                self.need_server(id);
            }
        }
    }

    /// A `Joining` or `Queued` client needs a server: an idle one of its pool (after a
    /// check when it sat idle long), else it parks in the pool's FIFO and a server is
    /// opened for it when the budgets allow.
    pub(super) fn need_server(&mut self, id: ClientId) {
        let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return;
        };
        if session
            .lease_mut()
            .is_some_and(|lease| lease.replica_failed())
        {
            self.repin(id);
            return;
        }
        // The recovery-tail drain moves only sessions that hold nothing on their replica
        // between transactions: transaction mode, not a reader entry, moves allowed.
        let movable = session.mode() == PoolMode::Transaction
            && session.reads().is_none()
            && self.env.config().pgtier.repin_idle_sessions;
        if movable && session.lease_mut().is_some_and(|lease| lease.should_move()) {
            self.repin(id);
            return;
        }
        if let Some(lease) = session.lease_mut() {
            lease.transaction_started();
        }
        let class = crate::class::wait_class(session.class());
        if self.admin.held_by_pause(&self.clients, id, self.now) {
            return;
        }
        // Only a reader session's transaction is routed; the others keep their pool.
        let reader = self
            .clients
            .get(id.0)
            .and_then(|c| c.session())
            .is_some_and(|s| s.reads().is_some());
        if reader {
            let mut router = reads::TxnRouter {
                clients: &mut self.clients,
                linker: &mut self.linker,
                stats: &mut self.stats,
                env: &self.env,
                routing: &*self.routing,
                now: self.now,
                evicted: Vec::new(),
            };
            let route = router.route_transaction(id);
            for closing in router.evicted {
                self.retire(closing);
            }
            if let reads::TxnRoute::Wait = route {
                return;
            }
        }
        let Some(pool) = self
            .clients
            .get(id.0)
            .and_then(|c| c.session())
            .and_then(|s| s.pool())
        else {
            return;
        };
        while let Some(lease) = self.linker.pools_mut().checkout(pool) {
            if self.servers.start_check_if_stale(
                &lease,
                self.env.config(),
                self.now,
                &mut self.outbox,
            ) {
                continue;
            }
            self.link(id, lease);
            return;
        }
        let deadline = Engine::enabled(self.env.config().pgtier.query_wait_timeout)
            .map(|timeout| self.now + timeout);
        let ticket = self
            .linker
            .pools_mut()
            .park_as(pool, id, class, self.now, deadline);
        if let Some(client) = self.clients.get_mut(id.0) {
            client.parked(ticket);
        }
        self.open_for_waiters(pool);
    }

    /// Opens servers while a pool's waiters outnumber the servers being opened for them
    /// and the budgets allow; a refusal makes room where it can (another shard's idle
    /// server, an idle server of another pool under a full cap).
    pub(super) fn open_for_waiters(&mut self, pool: PoolId) {
        loop {
            let counts = self.linker.pools().counts(pool);
            if counts.opening >= counts.waiting {
                return;
            }
            if let Some(error) = self.linker.failed_login_for(pool, self.now) {
                self.fail_waiters(pool, error);
                return;
            }
            match self.linker.pools_mut().try_open(pool, self.now) {
                Ok(()) => self.open_server(pool),
                Err(pgtier_pool::Refusal::NotNow) => return,
                Err(pgtier_pool::Refusal::PoolFull) => {
                    self.linker
                        .warn_if_pinned_out(pool, &self.clients, self.now);
                    self.linker.ask_other_shards_for_a_server(
                        &self.env,
                        &mut self.outbox,
                        pool,
                        self.now,
                    );
                    return;
                }
                Err(pgtier_pool::Refusal::SharedFull { budget }) => {
                    let closing = self.linker.make_room_under_cap(
                        &self.env,
                        &mut self.outbox,
                        pool,
                        budget,
                        self.now,
                    );
                    if let Some(closing) = closing {
                        self.retire(closing);
                    }
                    return;
                }
            }
        }
    }

    /// Fails every client waiting on a pool with `error`.
    pub(super) fn fail_waiters(&mut self, pool: PoolId, error: Bytes) {
        while let Some(waiter) = self.linker.pools_mut().next_waiter(pool) {
            self.clients.clear_ticket(waiter);
            self.close_client(waiter, Some(error.clone()));
        }
    }

    /// Opens a server for `pool`; its budget slot was taken by `try_open`.
    pub(super) fn open_server(&mut self, pool: PoolId) {
        let failed = self.linker.open_server(
            &mut self.servers,
            &self.env,
            &mut self.stats,
            &mut self.outbox,
            pool,
            self.now,
        );
        if let Some(fail) = failed {
            self.fail_waiters(fail.pool, fail.error);
        }
    }

    /// A check was answered: a server that passed goes back to the pool (to the oldest
    /// waiter), one that failed closes (the pool replaces it for waiters).
    pub(super) fn finish_check(&mut self, id: ServerId) {
        match self.servers.check_failed(id) {
            None => {}
            Some(true) => {
                debug!(
                    shard = self.env.shard(),
                    "server_check_query failed: closing the server"
                );
                self.close_server(id);
            }
            Some(false) => self.return_to_pool(id),
        }
    }

    /// Gives `lease`'s server to client `id` (which waited for it, or found it idle).
    pub(super) fn link(&mut self, id: ClientId, lease: Lease<ServerId>) {
        let server_id = lease.server;
        let Some(client) = self.clients.get_mut(id.0) else {
            self.give_back(lease);
            return;
        };
        let (since, joining) = match *client.state() {
            ClientState::Joining { since, .. } => (since, true),
            ClientState::Queued { since, .. } => (since, false),
            ClientState::LookingUp { .. } => {
                self.run_lookup(id, lease);
                return;
            }
            _ => {
                // It is not waiting any more (it left in between): the server goes on.
                self.give_back(lease);
                return;
            }
        };
        let wait_us = self.now.saturating_duration_since(since).as_micros() as u64;
        let database = client.session().map(|session| session.stats());
        self.stats.waited(database, wait_us);
        let Some(session) = client.session_mut() else {
            return;
        };
        let reset = match session.mode() {
            PoolMode::Session => Reset::Configured,
            PoolMode::Transaction if self.env.config().pgtier.server_reset_query_always => {
                Reset::Configured
            }
            PoolMode::Transaction if session.pins_server() => Reset::SessionState,
            PoolMode::Transaction => Reset::None,
        };
        session.transaction_began(self.now);
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        server.serve(id, self.now, lease, reset);
        if joining {
            client.welcoming(server_id);
            self.start_welcome(id, server_id);
            return;
        }
        client.linked(server_id);
        let Some(session) = client.session() else {
            return;
        };
        let mut sql = String::new();
        if session
            .tracked()
            .write_differences(server.backend().params(), &mut sql)
        {
            let bytes = server.backend_mut().internal_query(&sql);
            self.send(Conn::Server(server_id), bytes);
        }
        self.resume_client(id);
        self.forward(id, server_id);
    }

    /// A server that was handed out to nobody after all goes back.
    fn give_back(&mut self, lease: Lease<ServerId>) {
        let id = lease.server;
        if let Some(server) = self.servers.get_mut(id.0) {
            server.hold_lease(lease);
            server.start_releasing(self.now);
        }
        self.advance_release(id);
    }

    /// A client being welcomed by `server_id`: its startup values are applied on the server
    /// first (answer swallowed; `finish_welcome` follows it), or it is welcomed at once when
    /// the server already shows them.
    fn start_welcome(&mut self, id: ClientId, server_id: ServerId) {
        let Some(session) = self.clients.get(id.0).and_then(|c| c.session()) else {
            return;
        };
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let mut sql = String::new();
        let defaults = self
            .linker
            .pools()
            .welcome(server.pool())
            .map(|welcome| welcome.tracked.clone())
            .unwrap_or_default();
        if !session
            .tracked()
            .write_login_sets(&defaults, server.backend().params(), &mut sql)
        {
            self.finish_welcome(id, server_id);
            return;
        }
        let bytes = server.backend_mut().internal_query(&sql);
        self.send(Conn::Server(server_id), bytes);
    }

    /// Moves the client's complete (or streaming) messages to its server.
    pub(super) fn forward(&mut self, id: ClientId, server_id: ServerId) {
        let max = self.env.limits().max_client_message_bytes;
        let whole_limit = self.env.limits().client_input_limit_bytes;
        let statement_limits = StatementLimits {
            per_server: self.env.limits().max_prepared_statements,
            client_bytes: self.env.limits().max_client_prepared_bytes,
        };
        let pinning = self.env.limits().pin_session_state;
        let Some((client, logins)) = self.clients.get_with_logins(id.0) else {
            return;
        };
        let Some((server, registry, scratch)) = self.servers.get_with_statements(server_id.0)
        else {
            return;
        };
        let shared = ForwardShared {
            registry,
            scratch,
            texts: logins.texts_mut(),
            digests: self.stats.digests_mut(),
        };
        let options = ForwardOptions {
            sizes: ForwardLimits {
                max_message_bytes: max,
                whole_message_bytes: whole_limit,
            },
            statements: statement_limits,
            pinning,
            now: self.now,
        };
        let Some(out) = client.forward_to(server, shared, options) else {
            return;
        };
        if !out.vacate.is_empty() {
            // Before the statement goes: the closes are on their way when it arrives.
            self.linker.vacate_databases(
                &mut self.servers,
                &self.env,
                out.vacate,
                self.now,
                &mut self.outbox,
            );
        }
        for chunk in out.chunks {
            self.send(Conn::Server(server_id), chunk);
        }
        if pinning && !out.effects.is_empty() {
            self.pin_client(id, server_id, out.effects);
        }
        match out.end {
            None => {}
            Some(ForwardEnd::Terminate) => self.close_client(id, None),
            Some(ForwardEnd::InvalidType(code)) => {
                self.protocol_error(id, &format!("invalid frontend message type {code}"));
            }
            Some(ForwardEnd::Malformed) => {
                self.protocol_error(id, "invalid message length or sequence");
            }
            Some(ForwardEnd::TooManyStatements) => {
                let message = format!(
                    "prepared statements of this connection exceed max_client_prepared_bytes ({})",
                    self.env.limits().max_client_prepared_bytes
                );
                let error = messages::fatal(sqlstate::OUT_OF_MEMORY, &message);
                self.close_client(id, Some(error));
            }
        }
    }

    /// A transaction-mode client sent text with session-state effects (`relay::pin_client`).
    pub(super) fn pin_client(&mut self, id: ClientId, server_id: ServerId, effects: Effects) {
        super::linker::relay::pin_client(
            &mut self.clients,
            &mut self.servers,
            id,
            server_id,
            effects,
        );
    }

    /// The server finished a transaction (or a welcome, or a shutdown waits): its client
    /// goes idle (or away, at shutdown) and the server goes through the release path.
    pub(super) fn release_server(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let client_id = server.client();
        server.start_releasing(self.now);
        let closing_at_shutdown = self.admin.shutdown() >= Some(ShutdownMode::WaitForTransactions);
        if let Some(client_id) = client_id
            && let Some(client) = self.clients.get_mut(client_id.0)
        {
            client.idle(self.now);
            if let Some(session) = client.session_mut() {
                session.went_idle();
            }
            self.clients
                .end_reader_transaction(client_id, &self.env, &*self.routing, self.now);
        }
        self.advance_release(server_id);
        let Some(client_id) = client_id else {
            return;
        };
        if closing_at_shutdown {
            let error = messages::fatal(sqlstate::ADMIN_SHUTDOWN, "pgtier is shutting down");
            self.close_client(client_id, Some(error));
        } else {
            // A pipelined next transaction is already here.
            self.on_idle_client_bytes(client_id);
        }
    }

    /// A client left while linked to `server_id`: the server drains what it still owes (a
    /// running query cancelled), then takes the release path.
    pub(super) fn client_left_server(&mut self, client_id: ClientId, server_id: ServerId) {
        let cancel_on_disconnect = self.env.config().pgtier.cancel_on_client_disconnect;
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        if server.client() != Some(client_id) {
            return;
        }
        match server.client_left(cancel_on_disconnect) {
            ClientLeft::CloseNow => self.close_server(server_id),
            ClientLeft::Release { cancel } => {
                server.start_releasing(self.now);
                if cancel {
                    self.servers.send_cancel(server_id, &mut self.outbox);
                }
                self.advance_release(server_id);
            }
        }
    }

    /// Takes the next step of a releasing server (see `crate::server::release`).
    pub(super) fn advance_release(&mut self, id: ServerId) {
        // Borrowed field by field, not cloned: this runs at the end of every transaction.
        let reset_query = &self.env.config().pgtier.server_reset_query;
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if !matches!(server.state(), ServerState::Releasing { .. }) {
            return;
        }
        match server.next_release_step(reset_query) {
            ReleaseStep::Wait => {}
            ReleaseStep::Query(bytes) => self.send(Conn::Server(id), bytes),
            ReleaseStep::Pool => self.return_to_pool(id),
            ReleaseStep::Close(why) => {
                debug!(?id, why, "closing a released server");
                self.close_server(id);
            }
        }
    }

    /// Puts a clean server back: to the pool's oldest waiter, into its idle list, closed
    /// (lifetime, a shrunk pool, a shutdown), or handed to another shard. Iterative: a server
    /// released while another is being put back waits for it, so the chain of hand-offs a
    /// burst of logins makes stays one call deep.
    pub(super) fn return_to_pool(&mut self, id: ServerId) {
        if !self.linker.begin_return(id) {
            return;
        }
        let mut next = Some(id);
        while let Some(id) = next {
            self.return_one(id);
            next = self.linker.next_return();
        }
        self.linker.end_returns();
    }

    fn return_one(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        server.pooled();
        let pool = server.pool();
        if server.lease().is_none() {
            return;
        }
        // Under WAIT_FOR_CLIENTS the pool keeps serving the clients that stay.
        if self.admin.shutdown() > Some(ShutdownMode::WaitForClients)
            && self.linker.pools().waiting(pool) == 0
        {
            self.close_server(id);
            return;
        }
        if self
            .admin
            .closes_on_release(&self.servers, &self.linker, id)
        {
            // PAUSE, KILL or RECONNECT: the server goes once released.
            self.close_server(id);
            return;
        }
        let Some(lease) = self.servers.get_mut(id.0).and_then(|s| s.take_lease()) else {
            return;
        };
        let checkin = self.linker.pools_mut().checkin(pool, lease, self.now);
        self.act_on_checkin(id, pool, checkin);
    }

    /// Acts on what the pool decided for a server that came back or was just opened.
    pub(super) fn act_on_checkin(
        &mut self,
        id: ServerId,
        pool: PoolId,
        checkin: Checkin<ServerId, ClientId>,
    ) {
        match checkin {
            Checkin::Handoff { waiter, lease } => {
                self.clients.clear_ticket(waiter);
                self.link(waiter, lease);
            }
            Checkin::Pooled => {
                if let Some(server) = self.servers.get_mut(id.0) {
                    server.idle(self.now);
                }
            }
            Checkin::Close {
                lease: _,
                reason,
                open_replacement,
            } => {
                debug!(
                    ?id,
                    reason = reason.as_str(),
                    "closing a server the pool gave up"
                );
                self.close_unpooled(id);
                if open_replacement {
                    self.open_server(pool);
                }
            }
            Checkin::HandOver { lease, to } => {
                if let Some(server) = self.servers.get_mut(id.0) {
                    server.hold_lease(lease);
                }
                self.hand_on(id, to);
            }
        }
    }

    /// Closes a server whose budget the pool already settled (it decided the close).
    pub(super) fn close_unpooled(&mut self, id: ServerId) {
        self.servers.close_unpooled(id, &mut self.outbox);
    }

    /// The pool accounting of a server that is closing, by the state it was in.
    pub(super) fn settle_closed_server(
        &mut self,
        id: ServerId,
        pool: PoolId,
        previous: ServerState,
        lease: Option<Lease<ServerId>>,
    ) {
        match previous {
            ServerState::Connecting { .. }
            | ServerState::Negotiating { .. }
            | ServerState::LoggingIn { .. } => {
                // Counted as opening: an open that did not finish.
                self.linker.pools_mut().open_failed(pool, self.now, None);
                self.open_for_waiters(pool);
            }
            ServerState::Idle { .. } => {
                if self.linker.pools_mut().take_idle(pool, &id).is_some()
                    && self.linker.pools_mut().closed(pool, self.now)
                {
                    self.open_server(pool);
                }
            }
            ServerState::Leaving { .. } | ServerState::Moving { .. } => {
                if let Some(grant) = self.linker.pools_mut().left(pool) {
                    let command = Command::SlotGranted {
                        key: Arc::new(grant.key),
                    };
                    self.outbox.push(Action::Post {
                        shard: grant.to,
                        command,
                    });
                }
                self.open_for_waiters_under_caps(pool);
            }
            ServerState::Checking { .. }
            | ServerState::Busy { .. }
            | ServerState::Releasing { .. } => {
                if lease.is_some() && self.linker.pools_mut().closed(pool, self.now) {
                    self.open_server(pool);
                }
                self.open_for_waiters_under_caps(pool);
            }
            ServerState::Closing => {}
        }
        let _ = id;
    }

    /// A server of `pool` closed and gave its database and user counts back: pools of this
    /// shard under the same caps whose clients wait may open a server now.
    fn open_for_waiters_under_caps(&mut self, pool: PoolId) {
        for other in self.linker.waiting_under_caps_of(pool) {
            self.open_for_waiters(other);
        }
    }

    /// `max_pools_per_worker` is reached: an unused pool's idle servers go.
    pub(super) fn evict_a_pool(&mut self) {
        self.linker
            .evict_a_pool(&mut self.servers, self.now, &mut self.outbox);
    }

    /// Ends an idle server the pool took out to close (`ServerTable::retire`).
    pub(super) fn retire(&mut self, closing: pgtier_pool::Closing<ServerId>) {
        self.servers.retire(closing, self.now, &mut self.outbox);
    }

    /// Another shard handed this one a slot of `key`: open a server with it for the
    /// waiters, or give it back when nobody here needs it any more.
    pub(super) fn adopt_granted_slot(&mut self, key: &pgtier_pool::PoolKey) {
        let Some(pool) = self.linker.pools().find(key) else {
            pgtier_pool::give_back_slot(&self.env.pool_limits(key));
            return;
        };
        debug!(
            shard = self.env.shard(),
            "a server slot was handed to this shard"
        );
        self.linker.pools_mut().adopt_slot(key);
        self.open_for_waiters(pool);
        self.linker.pools_mut().return_unused_slots(pool);
    }

    /// The timer: reads waiting for a replica to catch up are routed again.
    pub(super) fn recheck_read_waits(&mut self) {
        let waiting = self.linker.take_read_waits();
        for id in waiting {
            let waits = self
                .clients
                .get(id.0)
                .and_then(|c| c.session())
                .and_then(|s| s.reads())
                .is_some_and(|reads| {
                    matches!(
                        reads.txn,
                        crate::client::reads::ReadTxn::AwaitingReplica { .. }
                    )
                });
            if waits {
                self.need_server(id);
            }
        }
    }

    /// Clients taken off the pool of a replica that went Down: a reader session's read is
    /// routed again (elsewhere); other sessions move with their lease.
    pub(super) fn reroute(&mut self, id: ClientId) {
        match self.clients.reads_mut(id) {
            Some(reads) => {
                reads.txn = crate::client::reads::ReadTxn::Between;
                self.need_server(id);
            }
            None => self.repin(id),
        }
    }

    /// Server `id` goes to shard `to` (`ServerTable::hand_on`).
    pub(super) fn hand_on(&mut self, id: ServerId, to: usize) {
        self.servers
            .hand_on(id, to, self.env.shard(), self.now, &mut self.outbox);
    }

    /// A server arrived from another shard (or came back undelivered): it becomes a server
    /// of its pool here (`moving.rs`), given to the oldest waiter or kept idle. Without a
    /// pool it cannot join (too many pools, no server slot), its socket is closed and its
    /// slot given back.
    pub(super) fn adopt_moved_server(&mut self, parcel: Box<MovedServer>, socket: DetachedSocket) {
        let parcel = *parcel;
        let limits = self.env.pool_limits(&parcel.key);
        let (pool, registered) = match self.linker.pools().find(&parcel.key) {
            Some(pool) => (pool, false),
            None => {
                let registered =
                    match self
                        .linker
                        .pools_mut()
                        .register(&parcel.key, &limits, self.now)
                    {
                        Err(PoolError::TooManyPools { .. }) => {
                            self.evict_a_pool();
                            self.linker
                                .pools_mut()
                                .register(&parcel.key, &limits, self.now)
                        }
                        registered => registered,
                    };
                match registered {
                    Ok(pool) => (pool, true),
                    Err(_) => {
                        debug!(
                            shard = self.env.shard(),
                            "no pool for a server that moved here"
                        );
                        pgtier_pool::give_back_slot(&limits);
                        self.outbox.push(Action::CloseSocket(socket));
                        return;
                    }
                }
            }
        };
        let arrived = self.linker.arrive(
            &mut self.servers,
            &mut self.outbox,
            &self.env,
            self.now,
            pool,
            (parcel, socket),
        );
        match arrived {
            Arrived::NoSlot(socket) => {
                pgtier_pool::give_back_slot(&limits);
                self.outbox.push(Action::CloseSocket(socket));
            }
            Arrived::Placed => self.stats.server_moved_in(),
            Arrived::Deallocate { id, bytes } => {
                self.stats.server_moved_in();
                self.send(Conn::Server(id), bytes);
            }
            Arrived::Checkin { id, checkin } => {
                self.stats.server_moved_in();
                self.act_on_checkin(id, pool, checkin);
            }
        }
        if registered {
            // The pool lives on while it holds the server (or a waiter), as any pool does.
            self.linker.pools_mut().unregister(pool);
        }
    }
}
