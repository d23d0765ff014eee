//! Server output to its client, the per-query path from the server side: the relay moves
//! the server's answers to the linked client, counts them, applies what they decided for
//! the client's statement names and session state, pauses a server whose client does not
//! keep up, and says what comes next (a release, held input, a welcome, a failure), which
//! the engine routes. It touches the client and the server together, so it is the
//! linker's; it holds no state of its own.

use std::time::Instant;

use pgtier_pool::PoolId;
use pgtier_wire::session_state::Effects;
use tracing::{debug, warn};

use crate::action::{Action, Conn, Outbox};
use crate::client::ClientState;
use crate::engine::clients::ClientTable;
use crate::engine::env::Env;
use crate::engine::servers::ServerTable;
use crate::engine::stats::{Answers, StatsSink};
use crate::ids::{ClientId, ServerId};
use crate::prepared::{Chunks, ClientStatements, Fallout};
use crate::server::Reset;
use crate::services::Routing;
use crate::tracker::TxStatus;

/// What the server's output asks of the engine once it is with the client.
pub(in crate::engine) enum Relayed {
    /// Nothing (the server goes on answering, or the link is gone).
    Nothing,
    /// A busy server whose client is not linked to it: a bug, the server closes.
    Orphaned,
    /// The backend sent its FATAL and exits: the server closes, the client once it has
    /// the FATAL. `shutdown`: it announced a shutdown (the replica router hears of it).
    Fatal { pool: PoolId, shutdown: bool },
    /// The backend announced its exit before any answer to a read that may run again
    /// (`shutdown`: a shutdown, which the replica router hears of); nothing went to the
    /// client.
    Died { shutdown: bool },
    /// The server broke the protocol.
    Malformed,
    /// A message over `max_server_message_bytes`, this long.
    TooLong(usize),
    /// The client opened a transaction block in statement mode: what came before its
    /// ReadyForQuery is with the client; the server closes (inside the block, it cannot be
    /// pooled) and the client is disconnected with PgBouncer's error.
    BlockRefused,
    /// Client input held back may go on now.
    ForwardHeld,
    /// The server answered the client's welcome queries.
    Welcome,
    /// The transaction is over: the server can go back (`releasable`: transaction or
    /// statement mode and not pinned; otherwise only a shutdown takes it), and input held
    /// for the ReadyForQuery may go (`ready_seen`) if it stays.
    Idle { releasable: bool, ready_seen: bool },
}

/// Moves server output to the linked client (its statement names, pins and counters
/// follow what the answers said) and pauses the server if the client's queue is over
/// `client_buffer_limit_bytes`.
#[allow(clippy::too_many_arguments)] // each owner it changes, named: no context bag
pub(in crate::engine) fn relay_to_client(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    stats: &mut StatsSink,
    routing: &dyn Routing,
    env: &Env,
    now: Instant,
    outbox: &mut Outbox,
    server_id: ServerId,
    client_id: ClientId,
) -> Relayed {
    let max = env.limits().max_server_message_bytes;
    let Some(server) = servers.get_mut(server_id.0) else {
        return Relayed::Nothing;
    };
    let client = clients
        .get_mut(client_id.0)
        .filter(|client| client.server() == Some(server_id));
    let Some(client) = client else {
        warn!("bug: a busy server without its client");
        return Relayed::Orphaned;
    };
    let welcoming = matches!(client.state(), ClientState::Welcoming { .. });
    let Some(session) = client.session_mut() else {
        return Relayed::Nothing;
    };
    let mut forwarded = Chunks::new();
    let mut scan = server.relay_output(session.tracked_mut(), max);
    server.take_relayed(&mut scan, &mut forwarded);
    if let Some(first) = forwarded.first()
        && session.retry().is_armed()
    {
        // The first bytes of the answer: a read kept to run again no longer may, unless the
        // backend announces its exit in them (`client::retry`): they then stay unsent and
        // the read runs on another server.
        let exit = crate::client::retry::announces_exit(first);
        if let Some(shutdown) = exit
            && session
                .retry()
                .may_run_again_within(env.config().pgtier.read_retries)
        {
            drop(server.backend_mut().relay_mut().take_fallout());
            return Relayed::Died { shutdown };
        }
        session.retry_mut().answer_began();
    }
    apply_fallout(
        session.statements_slot(),
        server.backend_mut().relay_mut().take_fallout(),
    );
    let mut unpinned = false;
    // The values a confirmed clear sets back (RESET ALL, DISCARD ALL) come as
    // ParameterStatus: they are no new state.
    let clearing = session.pins().is_clearing();
    if let Some(status) = scan.last_status {
        session.server_ready(now);
        unpinned = session.pins_mut().on_ready(status, scan.errors);
        if status != TxStatus::Idle
            && let Some(reads) = session.reads_mut()
        {
            // On a replica only a read-only prefix went, so a block open now was opened
            // READ ONLY: PostgreSQL refuses its writes as the primary would.
            reads.in_block();
        }
    }
    if scan.functions_changed {
        routing.functions_changed(session.database());
    }
    let query_started = session.query_started();
    let elapsed_us = query_started.map_or(0, |started| {
        now.saturating_duration_since(started).as_micros() as u64
    });
    if scan.completed > 0 && !server.backend().tracker().has_outstanding() {
        session.query_ended();
    }
    // A transaction lasts from its server's link (transaction mode) or its first query
    // (session mode) to its idle ReadyForQuery.
    let transaction_us = match session.transaction_started() {
        Some(started) if scan.transactions > 0 => {
            session.transaction_ended();
            // A one-query transaction started with its query: no second clock subtraction.
            if query_started == Some(started) {
                elapsed_us
            } else {
                now.saturating_duration_since(started).as_micros() as u64
            }
        }
        _ => elapsed_us,
    };
    session.calls_answered(&scan.answered, elapsed_us, stats.digests_mut());
    let (class, mode, pinned) = (session.class(), session.mode(), session.pins_server());
    let database = session.stats();
    let pool = server.pool();
    let answers = Answers {
        class,
        database,
        completed: scan.completed,
        elapsed_us,
        transactions: scan.transactions,
        transaction_us,
    };
    stats.answered(answers, env.shared());
    for bytes in forwarded {
        client.backlog_mut().queued_for_send(bytes.len());
        outbox.send(Conn::Client(client_id), bytes);
    }
    if unpinned {
        debug!(?client_id, "client unpinned: its session state is gone");
    }
    // A client with more than `client_buffer_limit_bytes` queued pauses its server: a slow
    // client never makes the proxy hold a whole huge result.
    if client.backlog().queued_bytes() > env.limits().client_buffer_limit_bytes
        && server.io_mut().pause()
    {
        outbox.push(Action::PauseRecv(Conn::Server(server_id)));
    }
    if scan.fatal_forwarded {
        // The backend is exiting: the client sees its FATAL and then the end of the
        // connection, exactly as from PostgreSQL, with nothing of pgtier's own after it.
        return Relayed::Fatal {
            pool,
            shutdown: scan.shutdown_forwarded,
        };
    }
    if scan.malformed {
        return Relayed::Malformed;
    }
    if let Some(len) = scan.oversized {
        return Relayed::TooLong(len);
    }
    if scan.block_refused {
        return Relayed::BlockRefused;
    }
    if scan.session_param_changed
        && !clearing
        && mode.releases_at_idle_ready()
        && env.limits().pin_session_state
    {
        pin_client(clients, servers, client_id, server_id, Effects::SET);
    }
    if !scan.idle {
        // A ReadyForQuery ends a segment the client's next messages waited for; an error
        // makes the server skip the rest of its segment, which may end the wait too; and
        // a server in COPY FROM STDIN needs what the client sent, whatever it waited for.
        let copying = servers
            .get(server_id.0)
            .is_some_and(|server| server.backend().tracker().copy_in());
        if scan.ready_seen || scan.errors > 0 || copying {
            return Relayed::ForwardHeld;
        }
        return Relayed::Nothing;
    }
    if welcoming {
        return Relayed::Welcome;
    }
    Relayed::Idle {
        releasable: mode.releases_at_idle_ready() && !pinned && !clients.is_pinned(client_id),
        ready_seen: scan.ready_seen,
    }
}

/// Whether client input held back while the server answered a segment that changed
/// statements can go on now: the server still serves this client and holds nothing back,
/// and the linked client has input.
pub(in crate::engine) fn held_input_ready(
    clients: &ClientTable,
    servers: &ServerTable,
    server_id: ServerId,
    client_id: ClientId,
) -> bool {
    let Some(server) = servers.get(server_id.0) else {
        return false;
    };
    if server.client() != Some(client_id)
        || (server.backend().relay().holds_back_client() && !server.backend().tracker().copy_in())
    {
        return false;
    }
    clients.get(client_id.0).is_some_and(|client| {
        !client.input().is_empty() && matches!(client.state(), ClientState::Linked { .. })
    })
}

/// A transaction-mode client sent text with session-state effects: what pins keeps it
/// on its server from now on (the server is reset when they part); what clears is
/// counted once the server confirms it (`Pins::on_ready`).
pub(in crate::engine) fn pin_client(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    id: ClientId,
    server_id: ServerId,
    effects: Effects,
) {
    let in_block = servers
        .get(server_id.0)
        .is_some_and(|server| server.backend().tracker().last_ready_in_block());
    let Some(session) = clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
        return;
    };
    let was_pinned = session.pins_server();
    session.pins_mut().sent(effects, in_block);
    if !effects.pins() {
        return;
    }
    if !was_pinned {
        debug!(
            ?id,
            ?effects,
            "client pinned to its server by session state"
        );
    }
    if let Some(server) = servers.get_mut(server_id.0) {
        server.backend_mut().needs_reset(Reset::SessionState);
    }
}

/// Applies what a server's answers decided for its client's statement names.
fn apply_fallout(names: &mut Option<Box<ClientStatements>>, fallout: Vec<Fallout>) {
    // Almost every answer decides nothing: no partition to build.
    if fallout.is_empty() {
        return;
    }
    let Some(names) = names.as_mut() else {
        return;
    };
    // A name registered by a Parse that failed or was skipped goes before anything comes
    // back: a Close of the name sent before that Parse (and skipped too) restores the
    // statement the name had, which the Parse's registration had replaced.
    let (forgets, rest): (Vec<Fallout>, Vec<Fallout>) = fallout
        .into_iter()
        .partition(|change| matches!(change, Fallout::Forget(..)));
    for change in forgets.into_iter().chain(rest) {
        match change {
            Fallout::Forget(name, statement) => names.forget(&name, &statement),
            Fallout::Restore(name, statement) => names.restore(&name, statement),
            Fallout::Clear => names.clear(),
            Fallout::RestoreAll(taken, _) => {
                for (name, statement) in taken {
                    names.restore(&name, statement);
                }
            }
            Fallout::Unnamed { expected, to } => {
                if names.unnamed().map(|unnamed| unnamed.token) == expected {
                    names.set_unnamed(to);
                }
            }
        }
    }
}
