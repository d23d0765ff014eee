//! A client and a server together while the client logs in: whether a pool's cached
//! welcome fits a client, the values a client's first server welcomes it with, and the
//! `auth_query` lookup a server of the `auth_user` pool runs for a client. Each says what
//! happened; the engine routes it (`client_login.rs` has the client table's steps).

use std::time::Instant;

use bytes::Bytes;
use pgtier_pool::{Lease, PoolId};

use super::Linker;
use crate::action::{Conn, Outbox};
use crate::client::ClientState;
use crate::client::auth_method::Method;
use crate::client::lookup::{self, Answer, Found};
use crate::engine::clients::ClientTable;
use crate::engine::env::Env;
use crate::engine::servers::ServerTable;
use crate::ids::{ClientId, ServerId};
use crate::messages;

/// Whether client `id` can be welcomed from pool `pool`'s cached parameters (`None`: it
/// has no session). A cached welcome serves only a transaction-mode client whose startup
/// spellings the pool has seen a server answer: it must be told the server's own values.
pub(in crate::engine) fn welcome_cached(
    clients: &mut ClientTable,
    linker: &Linker,
    id: ClientId,
    pool: PoolId,
) -> Option<bool> {
    let session = clients.get_mut(id.0).and_then(|c| c.session_mut())?;
    Some(
        session.mode().releases_at_idle_ready()
            && match (linker.pools().welcome(pool), linker.pools().spellings(pool)) {
                (Some(welcome), Some(spellings)) => session
                    .tracked_mut()
                    .canonicalize(&welcome.tracked, spellings),
                _ => false,
            },
    )
}

/// What a client's first server welcomes it with.
pub(in crate::engine) enum ServerWelcome {
    Gone,
    /// A startup value was refused (the server goes back, the client closes with this).
    Refused(Bytes),
    /// The parameters to welcome with, the server's pid in session mode, and whether the
    /// client keeps the server (session mode).
    Ready {
        params: Vec<(String, String)>,
        pid: Option<u32>,
        keeps_server: bool,
    },
}

/// A client's first server shows its startup values now: the client learns them (and the
/// pool their spellings), to be welcomed with the server's values.
pub(in crate::engine) fn server_welcome(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    linker: &mut Linker,
    id: ClientId,
    server_id: ServerId,
) -> ServerWelcome {
    let Some(server) = servers.get_mut(server_id.0) else {
        return ServerWelcome::Gone;
    };
    if let Some(error) = server.backend_mut().relay_mut().take_swallowed_error() {
        // PostgreSQL refuses a bad startup value (`client_encoding=foo`) at login with
        // FATAL 22023; the SET that applied it here failed the same way.
        return ServerWelcome::Refused(messages::error_as_fatal(&error));
    }
    let (pool, server_params, real_pid) = (
        server.pool(),
        server.backend().params().clone(),
        server.backend().pid(),
    );
    let Some(session) = clients.get_mut(id.0).and_then(|c| c.session_mut()) else {
        return ServerWelcome::Gone;
    };
    let mode = session.mode();
    if let Some(spellings) = linker.pools_mut().spellings_mut(pool) {
        session.tracked().learn_spellings(&server_params, spellings);
    }
    session.told(server_params);
    let params = linker
        .pools()
        .welcome(pool)
        .map(|welcome| welcome.params.clone())
        .unwrap_or_default();
    let keeps_server = !mode.releases_at_idle_ready();
    let pid = keeps_server.then_some(real_pid).flatten();
    ServerWelcome::Ready {
        params,
        pid,
        keeps_server,
    }
}

/// A server of the `auth_user` pool for a client waiting to be looked up: the query goes
/// out.
pub(in crate::engine) fn run_lookup(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    env: &Env,
    id: ClientId,
    lease: Lease<ServerId>,
    outbox: &mut Outbox,
) {
    let server_id = lease.server;
    let Some(client) = clients.get_mut(id.0) else {
        return;
    };
    let user = client
        .session()
        .map(|session| session.user().clone())
        .unwrap_or_default();
    // The client's entry's `auth_query` (which falls back to the global one).
    let query = client
        .session()
        .and_then(|session| env.config().database(session.database()))
        .map_or_else(
            || env.config().pgtier.auth_query.clone(),
            |db| db.auth_query.clone(),
        );
    client.lookup_runs_on(server_id);
    let Some(server) = servers.get_mut(server_id.0) else {
        return;
    };
    server.looks_up_for(id, lease);
    outbox.send(Conn::Server(server_id), lookup::request(&query, &user));
}

/// Where the lookup's answer stands.
pub(in crate::engine) enum LookupRead {
    Pending,
    /// The server broke the protocol.
    Malformed,
    Done(Result<Found, String>),
}

/// Reads the bytes of the lookup's answer.
pub(in crate::engine) fn read_lookup(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    server_id: ServerId,
    client_id: ClientId,
) -> LookupRead {
    let Some(server) = servers.get_mut(server_id.0) else {
        return LookupRead::Pending;
    };
    let Some(client) = clients.get_mut(client_id.0) else {
        return LookupRead::Pending;
    };
    let Some(answer) = client.lookup_answer_mut() else {
        return LookupRead::Pending;
    };
    match answer.read(server.io_mut().input_mut().buffer_mut()) {
        Answer::NeedMore => LookupRead::Pending,
        Answer::Malformed => LookupRead::Malformed,
        Answer::Done(result) => LookupRead::Done(result),
    }
}

/// A lookup that is over, for the engine to go on with.
pub(in crate::engine) struct EndedLookup {
    /// The method that checks the secret found.
    pub(in crate::engine) method: Method,
    /// The `auth_user` pool the client leaves.
    pub(in crate::engine) auth_pool: Option<PoolId>,
    pub(in crate::engine) database: std::sync::Arc<str>,
    pub(in crate::engine) user: std::sync::Arc<str>,
}

/// The answer is complete: the client leaves the `auth_user` pool and its server starts
/// its release (which the caller advances).
pub(in crate::engine) fn end_lookup(
    clients: &mut ClientTable,
    servers: &mut ServerTable,
    id: ClientId,
    server_id: ServerId,
    now: Instant,
) -> Option<EndedLookup> {
    let client = clients.get_mut(id.0)?;
    let ClientState::LookingUp { method, .. } = client.take_login_step() else {
        return None;
    };
    let session = client.session_mut()?;
    let auth_pool = session.leave_pool();
    let (database, user) = (session.database().clone(), session.user().clone());
    if let Some(server) = servers.get_mut(server_id.0) {
        server.start_releasing(now);
    }
    Some(EndedLookup {
        method,
        auth_pool,
        database,
        user,
    })
}
