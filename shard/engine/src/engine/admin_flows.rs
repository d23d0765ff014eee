//! The admin side's flows over the tables: the admin console's sessions on this shard and
//! what the process-controlling admin commands (`crate::gates`) do here. They are methods of
//! [`Admin`] taking the tables they read or change, and return facts (the clients and
//! servers to close, the clients to give a server) that the engine acts on, since closing a
//! connection or linking a client is not the admin side's to do.
//!
//! The admin console's sessions: each whole message of a console client goes to its
//! [`ConsoleSession`](crate::console_session::ConsoleSession) (simple and extended protocol),
//! whose statements the console service answers. A statement that needs every shard's rows
//! waits for them (gathered through the mailboxes, `listings.rs`), and the messages after it
//! wait behind it.
//!
//! The admin commands: the console session that ran one waits until every shard answered;
//! each shard applies the ops it is posted, keeps the per-database gates, holds the clients a
//! PAUSE makes wait, and answers a waiting op once its condition holds on this shard.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgtier_core::config::Config;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::CommandComplete;

use super::admin::Admin;
use super::clients::ClientTable;
use super::linker::Linker;
use super::servers::ServerTable;
use super::stats::StatsSink;
use crate::action::{Action, Conn, Outbox};
use crate::client::ClientState;
use crate::console_session::{Answerer, Handled};
use crate::gates::{AdminOp, AdminRequest, ClientRef, Scope, client_key};
use crate::ids::{ClientId, ServerId};
use crate::listing::Listing;
use crate::messages::{self, sqlstate};
use crate::server::ServerState;
use crate::services::{Console, ConsoleRequest, ConsoleRights, Refusal, StatementAnswer};

impl Admin {
    /// A client about to take a server: true (and it is held) when its database is paused.
    /// Under SUSPEND every database's new transactions wait, those of clients that
    /// connected since included.
    // Inlined: every transaction asks, and almost always nothing is paused.
    #[inline]
    pub(super) fn held_by_pause(
        &mut self,
        clients: &ClientTable,
        id: ClientId,
        now: Instant,
    ) -> bool {
        if !self.gates().is_suspended() && !self.gates().any_paused() {
            return false;
        }
        self.hold_if_paused(clients, id, now)
    }

    /// [`Admin::held_by_pause`] once something is paused or suspended.
    fn hold_if_paused(&mut self, clients: &ClientTable, id: ClientId, now: Instant) -> bool {
        let suspended = self.gates().is_suspended();
        let Some(session) = clients.get(id.0).and_then(|c| c.session()) else {
            return false;
        };
        if !suspended && !self.gates().is_paused(session.database()) {
            return false;
        }
        self.ops_mut().hold(id, now);
        true
    }

    /// Whether a released server must close instead of going back: its database is
    /// paused, or it was marked by RECONNECT.
    pub(super) fn closes_on_release(
        &self,
        servers: &ServerTable,
        linker: &Linker,
        id: ServerId,
    ) -> bool {
        let Some(server) = servers.get(id.0) else {
            return false;
        };
        server.close_needed()
            || (self.gates().any_paused()
                && linker
                    .pools()
                    .key(server.pool())
                    .is_some_and(|key| self.gates().is_paused(&key.database)))
    }

    /// PAUSE: the gate closes, and clients already parked in the pools of `scope` wait for
    /// the RESUME instead.
    pub(super) fn pause(
        &mut self,
        scope: &Scope,
        clients: &mut ClientTable,
        linker: &mut Linker,
        now: Instant,
    ) {
        self.gates_mut().pause(scope);
        let pools: Vec<pgtier_pool::PoolId> = linker
            .pools()
            .pools()
            .filter(|(_, key, counts)| counts.waiting > 0 && scope.covers(&key.database))
            .map(|(pool, _, _)| pool)
            .collect();
        for id in linker.unpark_waiters(pools, clients) {
            self.held_by_pause(clients, id, now);
        }
    }

    /// RESUME: the gate opens (reading resumes after a SUSPEND); the held clients whose
    /// database is no longer paused, which now ask for their server.
    pub(super) fn resume(
        &mut self,
        scope: &Scope,
        clients: &ClientTable,
        servers: &ServerTable,
        outbox: &mut Outbox,
    ) -> Vec<ClientId> {
        let was_suspended = self.gates().is_suspended();
        self.gates_mut().resume(scope);
        if was_suspended && !self.gates().is_suspended() {
            resume_reading(clients, servers, outbox);
        }
        let mut released = Vec::new();
        for (id, since) in self.ops_mut().take_held() {
            if !still_waiting(clients, id) {
                continue;
            }
            if clients.client_in(id, &Scope::All) && !self.is_held(clients, id) {
                released.push(id);
            } else {
                self.ops_mut().hold(id, since);
            }
        }
        released
    }

    /// Whether client `id`'s database is behind a gate.
    fn is_held(&self, clients: &ClientTable, id: ClientId) -> bool {
        clients
            .get(id.0)
            .and_then(|client| client.session())
            .is_some_and(|session| {
                self.gates().is_suspended() || self.gates().is_paused(session.database())
            })
    }

    /// SUSPEND: the gate closes and this shard stops reading.
    pub(super) fn suspend(
        &mut self,
        clients: &ClientTable,
        servers: &ServerTable,
        outbox: &mut Outbox,
    ) {
        self.gates_mut().suspend();
        suspend_reading(clients, servers, outbox);
    }

    /// Held clients past `query_wait_timeout` are let go (the ones to close, as PgBouncer
    /// closes waiting ones); clients that left are forgotten.
    pub(super) fn expire_paused_clients(
        &mut self,
        clients: &ClientTable,
        timeout: Option<Duration>,
        now: Instant,
    ) -> Vec<ClientId> {
        self.ops_mut()
            .expire_held(now, timeout, |id| still_waiting(clients, id))
    }

    /// Idle servers of paused databases (one that finished its login during the pause):
    /// the ones to close.
    pub(super) fn idle_servers_of_paused(
        &self,
        servers: &ServerTable,
        linker: &Linker,
    ) -> Vec<ServerId> {
        if !self.gates().any_paused() {
            return Vec::new();
        }
        servers
            .iter()
            .filter(|(_, server)| matches!(server.state(), ServerState::Idle { .. }))
            .map(|(slot, _)| ServerId(slot))
            .filter(|id| self.closes_on_release(servers, linker, *id))
            .collect()
    }

    /// Takes console session `id`'s next whole message and answers it into `out` when the
    /// console can; says what the engine has to do about the rest. `listing` is the rows
    /// gathered for the statement that waited for them (used up by that statement).
    pub(super) fn console_step(
        &mut self,
        id: ClientId,
        clients: &mut ClientTable,
        config: &Config,
        stats: &mut StatsSink,
        listing: &mut Option<Listing>,
        out: &mut BytesMut,
    ) -> ConsoleStep {
        let limits = pgtier_wire::FrameLimits {
            max_message_len: MAX_ADMIN_QUERY_BYTES,
            ..pgtier_wire::FrameLimits::default()
        };
        // The `pgbouncer` database's tally slot, where its statements are counted.
        let stats_slot = clients
            .get(id.0)
            .and_then(|c| c.session())
            .and_then(|s| s.stats());
        let Some(client) = clients.get_mut(id.0) else {
            return ConsoleStep::Gone;
        };
        let Some((input, session)) = client.console_input_mut() else {
            return ConsoleStep::Gone;
        };
        if self.ops().is_asking(id) {
            // Its admin command waits for the shards; what follows waits behind it.
            return ConsoleStep::Wait;
        }
        let header = match pgtier_wire::framing::peek_header(input.bytes(), &limits) {
            Ok(Some(header)) => header,
            Ok(None) => return ConsoleStep::Wait,
            Err(_) => return ConsoleStep::Refuse("admin console message too long or malformed"),
        };
        if header.code == b'X' {
            return ConsoleStep::Quit;
        }
        if input.len() < header.frame_len() {
            return ConsoleStep::Wait;
        }
        let body = &input.bytes()[5..header.frame_len()];
        // PAUSE, KILL, SHUTDOWN... come as simple queries (psql, scripts); the extended
        // protocol is for drivers reading SHOW output.
        let admin = session.rights() == ConsoleRights::Admin;
        let admin_op = match (header.code, messages::query_text(body)) {
            (b'Q', Some(query)) => self.console_mut().admin_command(query, admin, config),
            _ => None,
        };
        if let Some(request) = admin_op {
            let _ = input.buffer_mut().split_to(header.frame_len());
            match request {
                Ok(request) => return ConsoleStep::Admin(request),
                Err(refusal) => {
                    pgtier_wire::error_fields::ErrorNotice::new(
                        pgtier_wire::error_fields::Severity::Error,
                        refusal.code,
                        &refusal.message,
                    )
                    .encode_error(out);
                    messages::ready_for_query(out, b'I');
                    return ConsoleStep::Answered;
                }
            }
        }
        let wants_listing = session
            .query_to_run(header.code, body)
            .is_some_and(|query| self.console_mut().needs_listing(query));
        if wants_listing && listing.is_none() {
            return ConsoleStep::NeedListing;
        }
        let frame = input.buffer_mut().split_to(header.frame_len());
        let (console, gates) = self.console_and_gates();
        let mut answerer = SessionAnswerer {
            console,
            config,
            gates,
            rights: session.rights(),
            listing: listing.as_ref(),
        };
        if header.code == b'Q' || header.code == b'E' {
            // As PgBouncer counts its console's queries under its `pgbouncer` database,
            // before answering (`SHOW TOTALS` counts itself).
            if let Some(slot) = stats_slot {
                stats.console_query(slot);
            }
        }
        let handled = session.handle(header.code, &frame[5..], &mut answerer, out);
        if let Handled::Refuse(message) = handled {
            return ConsoleStep::Refuse(message);
        }
        if wants_listing {
            *listing = None;
        }
        ConsoleStep::Answered
    }
}

/// What a console session's next message asks of the engine.
pub(super) enum ConsoleStep {
    /// Answered into the output (if it had an answer); go on.
    Answered,
    /// No whole message yet, or the session waits for its op: send what was answered.
    Wait,
    /// The client is gone (or no longer a console session): nothing to send.
    Gone,
    /// Terminate: send what was answered, then close.
    Quit,
    /// A message the console cannot take: send what was answered, then close with this.
    Refuse(&'static str),
    /// An admin command, to run on the shards (the message is taken).
    Admin(AdminRequest),
    /// The statement needs every shard's rows: gather them, then step again.
    NeedListing,
}

/// Whether a held client still waits for its server (not linked, not gone).
fn still_waiting(clients: &ClientTable, id: ClientId) -> bool {
    clients.get(id.0).is_some_and(|client| {
        matches!(
            client.state(),
            ClientState::Joining { ticket: None, .. } | ClientState::Queued { ticket: None, .. }
        )
    })
}

/// Idle servers of `scope` (PAUSE closes them at once).
pub(super) fn idle_servers_of(
    servers: &ServerTable,
    linker: &Linker,
    scope: &Scope,
) -> Vec<ServerId> {
    servers
        .iter()
        .filter(|(_, server)| matches!(server.state(), ServerState::Idle { .. }))
        .map(|(slot, _)| ServerId(slot))
        .filter(|id| server_in(servers, linker, *id, scope))
        .collect()
}

/// Every server of `scope` (KILL closes them).
pub(super) fn servers_of(servers: &ServerTable, linker: &Linker, scope: &Scope) -> Vec<ServerId> {
    servers
        .iter()
        .map(|(slot, _)| ServerId(slot))
        .filter(|id| server_in(servers, linker, *id, scope))
        .collect()
}

/// Every client of `scope` (KILL closes them).
pub(super) fn clients_of(clients: &ClientTable, scope: &Scope) -> Vec<ClientId> {
    clients
        .iter()
        .map(|(slot, _)| ClientId(slot))
        .filter(|id| clients.client_in(*id, scope))
        .collect()
}

/// RECONNECT: every server of `scope` is marked to close at its next release; the idle
/// ones, to close now.
pub(super) fn mark_servers_to_close(
    servers: &mut ServerTable,
    linker: &Linker,
    scope: &Scope,
) -> Vec<ServerId> {
    let marked = servers_of(servers, linker, scope);
    for id in &marked {
        if let Some(server) = servers.get_mut(id.0) {
            server.mark_close_needed();
        }
    }
    marked
        .into_iter()
        .filter(|id| {
            servers
                .get(id.0)
                .is_some_and(|server| matches!(server.state(), ServerState::Idle { .. }))
        })
        .collect()
}

/// KILL_CLIENT: the client `target` names, if it is here and not closing already.
pub(super) fn client_by_ref(clients: &ClientTable, target: ClientRef) -> Option<ClientId> {
    let named = |id: ClientId| match target {
        ClientRef::Id(socket_id) => clients
            .get(id.0)
            .is_some_and(|client| client.info().socket_id() == socket_id),
        ClientRef::Ptr { key, .. } => client_key(id) == key,
    };
    clients
        .iter()
        .map(|(slot, _)| ClientId(slot))
        .find(|id| named(*id))
        .filter(|id| clients.get(id.0).is_some_and(|c| !c.is_closing()))
}

pub(super) fn complete(out: &mut BytesMut, tag: &str) {
    CommandComplete {
        tag: tag.as_bytes(),
    }
    .encode(out);
}

/// An admin command error as PgBouncer sends it (SQLSTATE 08P01).
pub(super) fn console_error(out: &mut BytesMut, message: &str) {
    refusal_error(
        out,
        &Refusal {
            code: sqlstate::PROTOCOL_VIOLATION,
            message: message.to_string(),
        },
    );
}

/// An admin command refused with its own SQLSTATE (a failed RELOAD is F0000).
pub(super) fn refusal_error(out: &mut BytesMut, refusal: &Refusal) {
    pgtier_wire::error_fields::ErrorNotice::new(
        pgtier_wire::error_fields::Severity::Error,
        refusal.code,
        &refusal.message,
    )
    .encode_error(out);
}

/// PgBouncer's answer to a SET of a client parameter on its console (`client_encoding`,
/// `datestyle`...), which drivers send without asking: a notice that it is ignored, and `SET`.
pub(super) fn ignored_set(out: &mut BytesMut) {
    pgtier_wire::error_fields::ErrorNotice::new(
        pgtier_wire::error_fields::Severity::Notice,
        sqlstate::SUCCESSFUL_COMPLETION,
        "SET ignored",
    )
    .encode_notice(out);
    complete(out, "SET");
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
pub(super) fn admin_op_condition_holds(
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
