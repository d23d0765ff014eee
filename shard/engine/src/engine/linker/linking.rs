//! Servers given to clients and taken back, the linker's steps over the tables it is
//! given: a client between transactions that needs a server, a server checked out or the
//! client parked, the link itself (the client's welcome or its session values on the
//! server), the client's bytes to its server, the release at the end of a transaction or
//! when the client leaves, and a clean server put back. Each step says what happened; the
//! engine routes it (`mod.rs`). This is the per-query path: no step allocates, and each
//! looks a connection up no more often than the engine did before it was split.

use std::time::Instant;

use pgtier_core::config::{Config, PoolMode};
use pgtier_pool::{Checkin, Lease, PoolId, WaitClass};

use super::Linker;
use crate::action::{Conn, Outbox};
use crate::client::ClientState;
use crate::client::forward::{ForwardLimits, ForwardOptions, ForwardShared, Forwarded};
use crate::engine::admin::Admin;
use crate::engine::clients::ClientTable;
use crate::engine::env::Env;
use crate::engine::servers::ServerTable;
use crate::engine::stats::StatsSink;
use crate::gates::ShutdownMode;
use crate::ids::{ClientId, ServerId};
use crate::prepared::StatementLimits;
use crate::server::release::ClientLeft;
use crate::server::{ReleaseStep, Reset, ServerState};
use crate::services::Routing;
use crate::tracker::Tracker;

/// What a welcomed client's bytes between transactions mean.
pub(in crate::engine) enum IdleBytes {
    Nothing,
    /// A Terminate.
    Quit,
    /// Not a frontend message: refused before it takes a server.
    Invalid(u8),
    /// A length word past `max_client_message_bytes` (or below 4): refused before it takes a
    /// server, so a client claiming 2 GB costs the pool nothing.
    Malformed,
    /// A transaction starts: the client is queued and needs a server.
    Queued,
}

/// A welcomed client between transactions sent bytes.
pub(in crate::engine) fn idle_client_bytes(
    clients: &mut ClientTable,
    env: &Env,
    routing: &dyn Routing,
    id: ClientId,
    now: Instant,
) -> IdleBytes {
    let whole_unit_missing = clients.needs_whole_unit(id, env, routing);
    let Some(client) = clients.get_mut(id.0) else {
        return IdleBytes::Nothing;
    };
    match client.input().first() {
        None => IdleBytes::Nothing,
        Some(b'X') => IdleBytes::Quit,
        // Refused before it takes a server: garbage never reaches one.
        Some(code) if !Tracker::is_client_message(code) => IdleBytes::Invalid(code),
        Some(_)
            if !length_word_fits(
                client.input().bytes(),
                env.limits().max_client_message_bytes,
            ) =>
        {
            IdleBytes::Malformed
        }
        // A reader session's transaction is routed by its first whole unit.
        Some(_) if whole_unit_missing => IdleBytes::Nothing,
        Some(_) => {
            client.queued(now);
            IdleBytes::Queued
        }
    }
}

/// Whether the first message's length word (once its five header bytes are in) is one the
/// forwarder would take; the forwarder checks it again as it streams.
fn length_word_fits(input: &[u8], max_message_bytes: u32) -> bool {
    let Some(&[_, a, b, c, d]) = input.get(..5) else {
        return true;
    };
    let length = u32::from_be_bytes([a, b, c, d]);
    (4..=max_message_bytes).contains(&length)
}

/// Whether a client that needs a server goes on.
pub(in crate::engine) enum Prepared {
    Gone,
    /// Its replica failed or drains: it moves first.
    Repin,
    /// Its transaction starts: the class it waits with, and whether it is a reader
    /// session (whose transaction is routed).
    Go {
        class: WaitClass,
        reader: bool,
    },
}

/// A `Joining` or `Queued` client's transaction starts on its replica lease, unless the
/// lease says it must move.
pub(in crate::engine) fn prepare_transaction(
    clients: &mut ClientTable,
    env: &Env,
    id: ClientId,
) -> Prepared {
    let Some(session) = clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
        return Prepared::Gone;
    };
    if session
        .lease_mut()
        .is_some_and(|lease| lease.replica_failed())
    {
        return Prepared::Repin;
    }
    // The recovery-tail drain moves only sessions that hold nothing on their replica
    // between transactions: transaction or statement mode, not a reader entry, moves
    // allowed.
    let movable = session.mode().releases_at_idle_ready()
        && session.reads().is_none()
        && env.config().pgtier.repin_idle_sessions;
    if movable && session.lease_mut().is_some_and(|lease| lease.should_move()) {
        return Prepared::Repin;
    }
    if let Some(lease) = session.lease_mut() {
        lease.transaction_started();
    }
    Prepared::Go {
        class: crate::class::wait_class(session.class()),
        reader: session.reads().is_some(),
    }
}

impl Linker {
    /// An idle server of `pool` for a client, one that sat idle long starting its check
    /// instead (`ServerTable::start_check_if_stale`).
    pub(in crate::engine) fn checkout(
        &mut self,
        servers: &mut ServerTable,
        config: &Config,
        pool: PoolId,
        now: Instant,
        outbox: &mut Outbox,
    ) -> Option<Lease<ServerId>> {
        while let Some(lease) = self.pools_mut().checkout(pool) {
            if servers.start_check_if_stale(&lease, config, now, outbox) {
                continue;
            }
            return Some(lease);
        }
        None
    }

    /// No idle server: the client parks in the pool's FIFO (until `query_wait_timeout`).
    pub(in crate::engine) fn park(
        &mut self,
        clients: &mut ClientTable,
        config: &Config,
        id: ClientId,
        class: WaitClass,
        pool: PoolId,
        now: Instant,
    ) {
        // The user's, else the entry's, else the global query_wait_timeout.
        let wait = clients
            .get(id.0)
            .and_then(|client| client.session())
            .map_or(config.pgtier.query_wait_timeout, |session| {
                config.query_wait_timeout(config.database(session.database()), session.user())
            });
        let deadline = wait.enabled().map(|timeout| now + timeout);
        let ticket = self.pools_mut().park_as(pool, id, class, now, deadline);
        if let Some(client) = clients.get_mut(id.0) {
            client.parked(ticket);
        }
    }

    /// Server `id` came back clean: it closes (a shutdown with nobody waiting, a pause, a
    /// reconnect) or goes back to its pool, which says what it does next.
    pub(in crate::engine) fn return_one(
        &mut self,
        servers: &mut ServerTable,
        admin: &Admin,
        id: ServerId,
        now: Instant,
    ) -> Returned {
        let Some(server) = servers.get_mut(id.0) else {
            return Returned::Nothing;
        };
        server.pooled();
        let pool = server.pool();
        if server.lease().is_none() {
            return Returned::Nothing;
        }
        // Under WAIT_FOR_CLIENTS the pool keeps serving the clients that stay.
        if admin.shutdown() > Some(ShutdownMode::WaitForClients) && self.pools().waiting(pool) == 0
        {
            return Returned::Close;
        }
        if admin.closes_on_release(servers, self, id) {
            // PAUSE, KILL or RECONNECT: the server goes once released.
            return Returned::Close;
        }
        let Some(lease) = servers.get_mut(id.0).and_then(|s| s.take_lease()) else {
            return Returned::Nothing;
        };
        Returned::Checkin(pool, self.pools_mut().checkin(pool, lease, now))
    }
}

/// What became of a server that came back clean.
pub(in crate::engine) enum Returned {
    Nothing,
    Close,
    Checkin(PoolId, Checkin<ServerId, ClientId>),
}

/// What giving a server to a client came to.
pub(in crate::engine) enum Linked {
    /// Nobody took it (the client left or stopped waiting): it goes back.
    GiveBack(Lease<ServerId>),
    /// The client waits for an `auth_query` lookup: the server runs it.
    Lookup(Lease<ServerId>),
    Gone,
    /// A first server: the client's welcome starts on it.
    Welcoming(ServerId),
    /// Linked, the client's session values sent: its bytes go on; `cancel` when a
    /// CancelRequest arrived for the query it waited with.
    Serving {
        server: ServerId,
        cancel: bool,
    },
}

/// Gives `lease`'s server to client `id` (which waited for it, or found it idle).
#[allow(clippy::too_many_arguments)] // each owner it changes, named: no context bag
pub(in crate::engine) fn link(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    stats: &mut StatsSink,
    env: &Env,
    id: ClientId,
    lease: Lease<ServerId>,
    now: Instant,
    outbox: &mut Outbox,
) -> Linked {
    let server_id = lease.server;
    let Some(client) = clients.get_mut(id.0) else {
        return Linked::GiveBack(lease);
    };
    let (since, joining) = match *client.state() {
        ClientState::Joining { since, .. } => (since, true),
        ClientState::Queued { since, .. } => (since, false),
        ClientState::LookingUp { .. } => return Linked::Lookup(lease),
        // It is not waiting any more (it left in between): the server goes on.
        _ => return Linked::GiveBack(lease),
    };
    // Most links find an idle server in the batch that queued the client: no wait to
    // measure (a comparison, not a clock subtraction, on every transaction).
    let wait_us = if now > since {
        now.duration_since(since).as_micros() as u64
    } else {
        0
    };
    let database = client.session().and_then(|session| session.stats());
    stats.waited(database, wait_us);
    if !joining {
        // A welcome's server is counted once the client keeps it (`finish_welcome`).
        stats.assigned(database);
    }
    let Some(session) = client.session_mut() else {
        return Linked::Gone;
    };
    // Statement mode is transaction mode whose transactions are single statements: the
    // same resets apply (`server_reset_query_always` is PgBouncer's for both).
    let reset = match session.mode() {
        PoolMode::Session if session.is_replication() => Reset::Replication,
        PoolMode::Session => Reset::Configured,
        _ if env.config().pgtier.server_reset_query_always => Reset::Configured,
        _ if session.pins_server() => Reset::SessionState,
        PoolMode::Transaction | PoolMode::Statement => Reset::None,
    };
    let refuses_blocks = session.mode().refuses_transaction_blocks();
    let rewrites =
        session.mode().releases_at_idle_ready() && env.limits().max_prepared_statements > 0;
    session.transaction_began(now);
    let Some(server) = servers.get_mut(server_id.0) else {
        return Linked::Gone;
    };
    server.serve(id, now, lease, reset);
    server
        .backend_mut()
        .relay_mut()
        .set_refuses_blocks(refuses_blocks);
    if rewrites {
        // A server opened while `max_prepared_statements` was 0 takes up statement
        // rewriting once a reload or SET turns it on, as PgBouncer's servers do. What
        // clients prepared on it before kept their own names, never `pgtier_N`, so none is
        // confused with the statements pgtier prepares from now on.
        server
            .backend_mut()
            .relay_mut()
            .prepared
            .get_or_insert_with(Box::default);
    }
    if joining {
        client.welcoming(server_id);
        return Linked::Welcoming(server_id);
    }
    let cancel = client.linked(server_id);
    let Some(session) = client.session_mut() else {
        return Linked::Gone;
    };
    // A read on a replica may run again should this server die before it answers.
    let again = crate::engine::read_retry::may_run_reads_again(session, env);
    session.retry_mut().linked(again);
    let session = &*session;
    let mut sql = String::new();
    if !session.is_replication()
        && session
            .tracked()
            .write_differences(server.backend_mut().params_mut(), &mut sql)
    {
        let bytes = server.backend_mut().internal_query(&sql);
        outbox.send(Conn::Server(server_id), bytes);
    }
    Linked::Serving {
        server: server_id,
        cancel,
    }
}

/// A client being welcomed by `server_id`: its startup values are applied on the server
/// first (answer swallowed; the welcome follows it). True when the server already shows
/// them: the welcome is finished at once.
pub(in crate::engine) fn start_welcome(
    clients: &ClientTable,
    servers: &mut ServerTable,
    linker: &Linker,
    id: ClientId,
    server_id: ServerId,
    outbox: &mut Outbox,
) -> bool {
    let Some(session) = clients.get(id.0).and_then(|c| c.session()) else {
        return false;
    };
    if session.is_replication() {
        // Its parameters went in its server's StartupMessage; a walsender takes no SET.
        return true;
    }
    let Some(server) = servers.get_mut(server_id.0) else {
        return false;
    };
    let mut sql = String::new();
    let defaults = linker
        .pools()
        .welcome(server.pool())
        .map(|welcome| welcome.tracked.clone())
        .unwrap_or_default();
    if !session
        .tracked()
        .write_login_sets(&defaults, server.backend().params(), &mut sql)
    {
        return true;
    }
    let bytes = server.backend_mut().internal_query(&sql);
    outbox.send(Conn::Server(server_id), bytes);
    false
}

/// Moves the client's complete (or streaming) messages to its server; what went, and
/// what the engine must do about it, is in `out` (the bytes are not sent yet: a
/// statement that needs a database vacated waits for the closes to be on their way).
/// False when the client, its session or the server is gone.
pub(in crate::engine) fn forward(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    stats: &mut StatsSink,
    id: ClientId,
    server_id: ServerId,
    options: ForwardOptions,
    out: &mut Forwarded,
) -> bool {
    let Some((client, logins)) = clients.get_with_logins(id.0) else {
        return false;
    };
    let Some((server, registry, scratch)) = servers.get_with_statements(server_id.0) else {
        return false;
    };
    let shared = ForwardShared {
        registry,
        scratch,
        texts: logins.texts_mut(),
        digests: stats.digests_mut(),
    };
    let forwarded = client.forward_to(server, shared, options, out);
    let counted = out.statements;
    if let Some(database) = client.session().and_then(|session| session.stats()) {
        stats.statements(
            database,
            counted.client_parses,
            counted.server_parses,
            counted.binds,
        );
    }
    if out.started {
        server.carried_client_messages();
    }
    forwarded
}

/// The settings a client's forward follows, from the limits in force.
pub(in crate::engine) fn forward_options(env: &Env, now: Instant) -> ForwardOptions {
    let limits = env.limits();
    ForwardOptions {
        sizes: ForwardLimits {
            max_message_bytes: limits.max_client_message_bytes,
            whole_message_bytes: limits.client_input_limit_bytes,
        },
        statements: StatementLimits {
            per_server: limits.max_prepared_statements,
            client_bytes: limits.max_client_prepared_bytes,
        },
        pinning: limits.pin_session_state,
        now,
    }
}

/// The server finished a transaction (or a welcome, or a shutdown waits): its client
/// goes idle and the server starts its release. The client it served, if any; `None`
/// when the server is gone.
pub(in crate::engine) fn release(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    env: &Env,
    routing: &dyn Routing,
    server_id: ServerId,
    now: Instant,
) -> Option<Option<ClientId>> {
    let server = servers.get_mut(server_id.0)?;
    let client_id = server.client();
    server.start_releasing(now);
    if let Some(client_id) = client_id
        && let Some(client) = clients.get_mut(client_id.0)
    {
        client.idle(now);
        if let Some(session) = client.session_mut() {
            session.went_idle();
        }
        clients.end_reader_transaction(client_id, env, routing, now);
    }
    Some(client_id)
}

/// What a server does after its client left it.
pub(in crate::engine) enum LeftBehind {
    Nothing,
    CloseNow,
    /// Its release started (a running query cancelled).
    Releasing,
}

impl ServerTable {
    /// Client `client_id` left while linked to server `id`: the server drains what it still
    /// owes (a running query cancelled), then takes the release path, or closes now.
    pub(in crate::engine) fn client_left(
        &mut self,
        id: ServerId,
        client_id: ClientId,
        cancel_on_disconnect: bool,
        now: Instant,
        outbox: &mut Outbox,
    ) -> LeftBehind {
        let Some(server) = self.get_mut(id.0) else {
            return LeftBehind::Nothing;
        };
        if server.client() != Some(client_id) {
            return LeftBehind::Nothing;
        }
        match server.client_left(cancel_on_disconnect) {
            ClientLeft::CloseNow => LeftBehind::CloseNow,
            ClientLeft::Release { cancel } => {
                server.start_releasing(now);
                if cancel {
                    self.send_cancel(id, outbox);
                }
                LeftBehind::Releasing
            }
        }
    }

    /// Takes the next step of a releasing server (see `crate::server::release`): its query
    /// is sent, or it is clean (`Pool`) or cannot be made so (`Close`).
    pub(in crate::engine) fn release_step(
        &mut self,
        id: ServerId,
        reset_query: &str,
        outbox: &mut Outbox,
    ) -> ReleaseStep {
        let Some(server) = self.get_mut(id.0) else {
            return ReleaseStep::Wait;
        };
        if !matches!(server.state(), ServerState::Releasing { .. }) {
            return ReleaseStep::Wait;
        }
        match server.next_release_step(reset_query) {
            ReleaseStep::Query(bytes) => {
                outbox.send(Conn::Server(id), bytes);
                ReleaseStep::Wait
            }
            step => step,
        }
    }
}
