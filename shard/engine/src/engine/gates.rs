//! The admin console on this shard.
//!
//! The admin console's sessions in the engine: each whole message of a console client goes
//! to its [`ConsoleSession`] (simple and extended protocol), whose statements the console
//! service answers. A statement that needs every shard's rows waits for them (gathered
//! through the mailboxes, `listings.rs`), and the messages after it wait behind it.
//!
//! The process-controlling admin commands on this shard (`crate::gates`): the console
//! session that ran one waits here until every shard answered; each shard applies the ops it
//! is posted, keeps the per-database gates, holds the clients a PAUSE makes wait, and answers
//! a waiting op once its condition holds on this shard.

use bytes::BytesMut;
use pgtier_core::config::Config;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::CommandComplete;
use tracing::info;

use super::clients::ClientTable;
use super::linker::Linker;
use super::servers::ServerTable;
use crate::action::{Action, Conn, Outbox};
use crate::client::ClientState;
use crate::command::Command;
use crate::console_session::{Answerer, Handled};
use crate::engine::Engine;
use crate::gates::{AdminOp, AdminRequest, Scope, client_key};
use crate::ids::{ClientId, ServerId};
use crate::listing::Listing;
use crate::messages::{self, sqlstate};
use crate::server::ServerState;
use crate::services::{Console, ConsoleRequest, ConsoleRights, StatementAnswer};

impl Engine {
    /// A console statement the console recognized as an admin command; `out` gets the
    /// answer when it is immediate. Returns true when the op went to the shards: its answer
    /// (and ReadyForQuery) is sent by `answer_console`, which goes on with the session's
    /// next queries, so what `out` held is sent first (for SHUTDOWN, which answers at once,
    /// nothing more of the session is read).
    pub(super) fn run_admin_op(
        &mut self,
        id: ClientId,
        request: AdminRequest,
        out: &mut BytesMut,
    ) -> bool {
        match request {
            AdminRequest::Reloaded => {
                complete(out, "RELOAD");
                false
            }
            AdminRequest::Set { config, key } => {
                info!(shard = self.env.shard(), setting = %key, "SET from the admin console");
                for shard in 0..self.env.shared().shards() {
                    let command = Command::Reload {
                        config: config.clone(),
                        users: self.env.users().clone(),
                        tls: self.tls_sides(),
                    };
                    if shard == self.env.shard() {
                        self.on_command(command);
                    } else {
                        self.outbox.push(Action::Post { shard, command });
                    }
                }
                complete(out, "SET");
                false
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
            AdminOp::KillClient { shard, .. } => vec![*shard],
            _ => (0..self.env.shared().shards()).collect(),
        };
        if shards
            .iter()
            .any(|shard| *shard >= self.env.shared().shards())
        {
            self.answer_console(id, op.tag(), Some("client not found".to_string()));
            return;
        }
        let request_id = self.admin.ops_mut().ask(id, op.tag(), shards.len());
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
    pub(super) fn apply_admin_op(&mut self, from: usize, request_id: u64, op: AdminOp) {
        let result = match &op {
            AdminOp::Pause(scope) => {
                self.admin.gates_mut().pause(scope);
                self.hold_waiters_of(scope);
                self.close_idle_servers_of(scope);
                Ok(())
            }
            AdminOp::Resume(scope) => {
                let was_suspended = self.admin.gates().is_suspended();
                self.admin.gates_mut().resume(scope);
                if was_suspended && !self.admin.gates().is_suspended() {
                    resume_reading(&self.clients, &self.servers, &mut self.outbox);
                }
                self.release_paused_clients();
                Ok(())
            }
            AdminOp::Reconnect(scope) => {
                self.mark_servers_to_close(scope);
                Ok(())
            }
            AdminOp::WaitClose(_) => Ok(()),
            AdminOp::Kill(database) => {
                let scope = Scope::Database(database.clone());
                self.admin.gates_mut().pause(&scope);
                self.kill_database(&scope);
                Ok(())
            }
            AdminOp::KillClient { key, .. } => self.kill_client(*key),
            AdminOp::Disable(database) => {
                self.admin.gates_mut().set_disabled(database, true);
                Ok(())
            }
            AdminOp::Enable(database) => {
                self.admin.gates_mut().set_disabled(database, false);
                Ok(())
            }
            AdminOp::Suspend => {
                self.admin.gates_mut().suspend();
                suspend_reading(&self.clients, &self.servers, &mut self.outbox);
                Ok(())
            }
            AdminOp::Shutdown(mode) => {
                self.on_command(Command::Shutdown(*mode));
                Ok(())
            }
        };
        match result {
            Err(error) => self.admin_op_answered(from, request_id, Some(error)),
            Ok(()) if admin_op_condition_holds(&self.clients, &self.servers, &self.linker, &op) => {
                self.admin_op_answered(from, request_id, None);
            }
            Ok(()) => self.admin.ops_mut().wait(from, request_id, op),
        }
    }

    /// Sends shard `from` this shard's answer to `request_id`.
    fn admin_op_answered(&mut self, from: usize, request_id: u64, error: Option<String>) {
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
    pub(super) fn on_admin_op_done(&mut self, request_id: u64, error: Option<String>) {
        if let Some((client, tag, error)) = self.admin.ops_mut().answered(request_id, error) {
            self.answer_console(client, tag, error);
        }
    }

    /// Answers a console session's op and goes on with its pipelined queries.
    fn answer_console(&mut self, id: ClientId, tag: &str, error: Option<String>) {
        if self
            .clients
            .get(id.0)
            .is_none_or(|client| client.is_closing())
        {
            return;
        }
        let mut out = BytesMut::new();
        match error {
            Some(error) => console_error(&mut out, &error),
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
        self.expire_paused_clients();
    }

    /// A client about to take a server: true (and it is held) when its database is paused.
    /// Under SUSPEND every database's new transactions wait, those of clients that
    /// connected since included.
    pub(super) fn held_by_pause(&mut self, id: ClientId) -> bool {
        let suspended = self.admin.gates().is_suspended();
        if !suspended && !self.admin.gates().any_paused() {
            return false;
        }
        let Some(session) = self.clients.get(id.0).and_then(|c| c.session()) else {
            return false;
        };
        if !suspended && !self.admin.gates().is_paused(session.database()) {
            return false;
        }
        self.admin.ops_mut().hold(id, self.now);
        true
    }

    /// Whether a released server of `pool` must close instead of going back: its database
    /// is paused, or it was marked by RECONNECT.
    pub(super) fn closes_on_release(&self, id: ServerId) -> bool {
        let Some(server) = self.servers.get(id.0) else {
            return false;
        };
        server.close_needed()
            || (self.admin.gates().any_paused()
                && self
                    .linker
                    .pools()
                    .key(server.pool())
                    .is_some_and(|key| self.admin.gates().is_paused(&key.database)))
    }

    /// Clients already parked in the pools of `scope` wait for the RESUME instead.
    fn hold_waiters_of(&mut self, scope: &Scope) {
        let pools: Vec<pgtier_pool::PoolId> = self
            .linker
            .pools()
            .pools()
            .filter(|(_, key, counts)| counts.waiting > 0 && scope.covers(&key.database))
            .map(|(pool, _, _)| pool)
            .collect();
        for id in self.linker.unpark_waiters(pools, &mut self.clients) {
            self.held_by_pause(id);
        }
    }

    /// RESUME: every held client whose database is no longer paused asks for its server.
    fn release_paused_clients(&mut self) {
        let held = self.admin.ops_mut().take_held();
        for (id, since) in held {
            let still_waiting = self.clients.get(id.0).is_some_and(|client| {
                matches!(
                    client.state(),
                    ClientState::Joining { ticket: None, .. }
                        | ClientState::Queued { ticket: None, .. }
                )
            });
            if !still_waiting {
                continue;
            }
            if self.clients.client_in(id, &Scope::All) && !self.held_by_pause_check(id) {
                self.need_server(id);
            } else {
                self.admin.ops_mut().hold(id, since);
            }
        }
    }

    fn held_by_pause_check(&self, id: ClientId) -> bool {
        self.clients
            .get(id.0)
            .and_then(|client| client.session())
            .is_some_and(|session| {
                self.admin.gates().is_suspended()
                    || self.admin.gates().is_paused(session.database())
            })
    }

    /// Held clients past `query_wait_timeout` are closed as PgBouncer closes waiting ones;
    /// clients that left are forgotten.
    fn expire_paused_clients(&mut self) {
        let timeout = Engine::enabled(self.env.config().pgtier.query_wait_timeout);
        let clients = &self.clients;
        let expired = self.admin.ops_mut().expire_held(self.now, timeout, |id| {
            clients.get(id.0).is_some_and(|client| {
                matches!(
                    client.state(),
                    ClientState::Joining { ticket: None, .. }
                        | ClientState::Queued { ticket: None, .. }
                )
            })
        });
        for id in expired {
            let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "query_wait_timeout");
            self.close_client(id, Some(error));
        }
    }

    /// Idle servers of a paused scope close at once (PAUSE disconnects every server).
    pub(super) fn close_idle_servers_of(&mut self, scope: &Scope) {
        let idle: Vec<ServerId> = self
            .servers
            .iter()
            .filter(|(_, server)| matches!(server.state(), ServerState::Idle { .. }))
            .map(|(slot, _)| ServerId(slot))
            .filter(|id| server_in(&self.servers, &self.linker, *id, scope))
            .collect();
        for id in idle {
            self.close_idle_server(id);
        }
    }

    /// Idle servers of paused databases (one that finished its login during the pause).
    pub(super) fn close_idle_servers_of_paused(&mut self) {
        if !self.admin.gates().any_paused() {
            return;
        }
        let idle: Vec<ServerId> = self
            .servers
            .iter()
            .filter(|(_, server)| matches!(server.state(), ServerState::Idle { .. }))
            .map(|(slot, _)| ServerId(slot))
            .filter(|id| self.closes_on_release(*id))
            .collect();
        for id in idle {
            self.close_idle_server(id);
        }
    }

    /// Closes an idle server (`close_server` takes it out of the idle list and settles its
    /// slot).
    fn close_idle_server(&mut self, id: ServerId) {
        self.close_server(id);
    }

    /// RECONNECT: every server of `scope` closes at its next release; idle ones now.
    fn mark_servers_to_close(&mut self, scope: &Scope) {
        let marked: Vec<ServerId> = self
            .servers
            .iter()
            .map(|(slot, _)| ServerId(slot))
            .filter(|id| server_in(&self.servers, &self.linker, *id, scope))
            .collect();
        for id in &marked {
            if let Some(server) = self.servers.get_mut(id.0) {
                server.mark_close_needed();
            }
        }
        for id in marked {
            if self
                .servers
                .get(id.0)
                .is_some_and(|server| matches!(server.state(), ServerState::Idle { .. }))
            {
                self.close_idle_server(id);
            }
        }
    }

    /// KILL: every client of the database gets PgBouncer's error and goes, every server
    /// closes now.
    fn kill_database(&mut self, scope: &Scope) {
        let clients: Vec<ClientId> = self
            .clients
            .iter()
            .map(|(slot, _)| ClientId(slot))
            .filter(|id| self.clients.client_in(*id, scope))
            .collect();
        for id in clients {
            let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "database removed");
            self.close_client(id, Some(error));
        }
        let servers: Vec<ServerId> = self
            .servers
            .iter()
            .map(|(slot, _)| ServerId(slot))
            .filter(|id| server_in(&self.servers, &self.linker, *id, scope))
            .collect();
        for id in servers {
            self.close_server(id);
        }
    }

    /// KILL_CLIENT: the client whose key (see `client_key`) is `key`, if it is here.
    fn kill_client(&mut self, key: u64) -> Result<(), String> {
        let found = self
            .clients
            .iter()
            .map(|(slot, _)| ClientId(slot))
            .find(|id| client_key(*id) == key)
            .filter(|id| self.clients.get(id.0).is_some_and(|c| !c.is_closing()));
        let Some(id) = found else {
            return Err("client not found".to_string());
        };
        let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "admin forced disconnect");
        self.close_client(id, Some(error));
        Ok(())
    }
}

fn complete(out: &mut BytesMut, tag: &str) {
    CommandComplete {
        tag: tag.as_bytes(),
    }
    .encode(out);
}

/// An admin command error as PgBouncer sends it (SQLSTATE 08P01).
fn console_error(out: &mut BytesMut, message: &str) {
    pgtier_wire::error_fields::ErrorNotice::new(
        pgtier_wire::error_fields::Severity::Error,
        sqlstate::PROTOCOL_VIOLATION,
        message,
    )
    .encode_error(out);
}

/// SUSPEND: no connection of this shard is read any more but the console sessions (and
/// servers still logging in or leaving, whose replies pgtier itself waits for). What a
/// receive already in flight brings is still relayed, and the clients' queues drain.
fn suspend_reading(clients: &ClientTable, servers: &ServerTable, outbox: &mut Outbox) {
    let clients: Vec<ClientId> = clients
        .iter()
        .filter(|(_, client)| !client.is_console() && !client.is_closing())
        .map(|(slot, _)| ClientId(slot))
        .collect();
    for id in clients {
        outbox.push(Action::PauseRecv(Conn::Client(id)));
    }
    let servers: Vec<ServerId> = servers
        .iter()
        .filter(|(_, server)| server.stops_for_suspend())
        .map(|(slot, _)| ServerId(slot))
        .collect();
    for id in servers {
        outbox.push(Action::PauseRecv(Conn::Server(id)));
    }
}

/// RESUME after SUSPEND: every connection is read again, but those still paused for
/// their own reasons (a client over its input limit, a server held by a slow client).
fn resume_reading(clients: &ClientTable, servers: &ServerTable, outbox: &mut Outbox) {
    let clients: Vec<ClientId> = clients
        .iter()
        .filter(|(_, client)| {
            !client.is_console() && !client.is_closing() && !client.backlog().is_paused()
        })
        .map(|(slot, _)| ClientId(slot))
        .collect();
    for id in clients {
        outbox.push(Action::ResumeRecv(Conn::Client(id)));
    }
    let servers: Vec<ServerId> = servers
        .iter()
        .filter(|(_, server)| server.stops_for_suspend() && !server.io().is_paused())
        .map(|(slot, _)| ServerId(slot))
        .collect();
    for id in servers {
        outbox.push(Action::ResumeRecv(Conn::Server(id)));
    }
}

/// Whether server `id` is of a database `scope` covers.
fn server_in(servers: &ServerTable, linker: &Linker, id: ServerId, scope: &Scope) -> bool {
    servers
        .get(id.0)
        .and_then(|server| linker.pools().key(server.pool()))
        .is_some_and(|key| scope.covers(&key.database))
}

/// Whether an op's condition holds on this shard.
fn admin_op_condition_holds(
    clients: &ClientTable,
    servers: &ServerTable,
    linker: &Linker,
    op: &AdminOp,
) -> bool {
    match op {
        AdminOp::Pause(scope) => !servers.iter().any(|(slot, server)| {
            !server.is_closing() && server_in(servers, linker, ServerId(slot), scope)
        }),
        AdminOp::WaitClose(scope) => !servers.iter().any(|(slot, server)| {
            server.close_needed()
                && !server.is_closing()
                && server_in(servers, linker, ServerId(slot), scope)
        }),
        AdminOp::Suspend => !clients.iter().any(|(_, client)| {
            client.backlog().queued_bytes() > 0 && !client.is_closing() && !client.is_console()
        }),
        _ => true,
    }
}

// ---- console sessions: their messages, and the statements the console service answers ----

/// Longest admin message accepted.
const MAX_ADMIN_QUERY_BYTES: u32 = 64 * 1024;

/// The console service with what one session's statements may read.
struct SessionAnswerer<'a> {
    console: &'a mut dyn Console,
    config: &'a Config,
    gates: &'a crate::gates::Gates,
    rights: ConsoleRights,
    listing: Option<&'a Listing>,
}

impl Answerer for SessionAnswerer<'_> {
    fn simple(&mut self, query: &str, out: &mut BytesMut) {
        let request = ConsoleRequest {
            query,
            rights: self.rights,
            formats: &[],
            listing: self.listing,
            config: self.config,
            gates: self.gates,
        };
        self.console.answer(&request, out);
    }

    fn statement(&mut self, query: &str, formats: &[i16]) -> StatementAnswer {
        let request = ConsoleRequest {
            query,
            rights: self.rights,
            formats,
            listing: self.listing,
            config: self.config,
            gates: self.gates,
        };
        self.console.answer_statement(&request)
    }
}

impl Engine {
    /// Handles every whole message of console session `id`, in order.
    pub(super) fn on_console_bytes(&mut self, id: ClientId) {
        self.fold_counters();
        let limits = pgtier_wire::FrameLimits {
            max_message_len: MAX_ADMIN_QUERY_BYTES,
            ..pgtier_wire::FrameLimits::default()
        };
        let mut listing = self.admin.listings_mut().take_ready(id);
        let mut out = BytesMut::new();
        loop {
            let Some(client) = self.clients.get_mut(id.0) else {
                return;
            };
            let Some((input, session)) = client.console_input_mut() else {
                return;
            };
            if self.admin.ops().is_asking(id) {
                // Its admin command waits for the shards; what follows waits behind it.
                break;
            }
            let header = match pgtier_wire::framing::peek_header(input.bytes(), &limits) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(_) => {
                    self.console_refuses(id, out, "admin console message too long or malformed");
                    return;
                }
            };
            if header.code == b'X' {
                self.send_console(id, out);
                self.close_client(id, None);
                return;
            }
            if input.len() < header.frame_len() {
                break;
            }
            let body = &input.bytes()[5..header.frame_len()];
            // PAUSE, KILL, SHUTDOWN... come as simple queries (psql, scripts); the extended
            // protocol is for drivers reading SHOW output.
            let admin = session.rights() == ConsoleRights::Admin;
            let admin_op = match (header.code, messages::query_text(body)) {
                (b'Q', Some(query)) => {
                    self.admin
                        .console_mut()
                        .admin_command(query, admin, self.env.config())
                }
                _ => None,
            };
            if let Some(request) = admin_op {
                let _ = input.buffer_mut().split_to(header.frame_len());
                match request {
                    Ok(request) => {
                        if self.run_admin_op(id, request, &mut out) {
                            break;
                        }
                    }
                    Err(refusal) => {
                        pgtier_wire::error_fields::ErrorNotice::new(
                            pgtier_wire::error_fields::Severity::Error,
                            refusal.code,
                            &refusal.message,
                        )
                        .encode_error(&mut out);
                    }
                }
                messages::ready_for_query(&mut out, b'I');
                continue;
            }
            let wants_listing = session
                .query_to_run(header.code, body)
                .is_some_and(|query| self.admin.console_mut().needs_listing(query));
            if wants_listing && listing.is_none() {
                if !self.admin.listings_mut().is_gathering(id) {
                    self.start_listing(id);
                    listing = self.admin.listings_mut().take_ready(id);
                }
                if listing.is_none() {
                    break;
                }
                continue;
            }
            let frame = input.buffer_mut().split_to(header.frame_len());
            let (console, gates) = self.admin.console_and_gates();
            let mut answerer = SessionAnswerer {
                console,
                config: self.env.config(),
                gates,
                rights: session.rights(),
                listing: listing.as_ref(),
            };
            let handled = session.handle(header.code, &frame[5..], &mut answerer, &mut out);
            if let Handled::Refuse(message) = handled {
                self.console_refuses(id, out, message);
                return;
            }
            if header.code == b'Q' || header.code == b'E' {
                // As PgBouncer counts its console's queries under its `pgbouncer` database.
                let slot = self
                    .clients
                    .get(id.0)
                    .and_then(|c| c.session())
                    .map(|s| s.stats());
                if let Some(slot) = slot {
                    self.stats.console_query(slot);
                }
            }
            if wants_listing {
                listing = None;
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
