//! Servers opened for the pools: the pool learns of a finished login, and of a failed one
//! (its waiters get the error, new clients too until `server_login_retry` passes), a server
//! and its pool together.

use std::time::Instant;

use bytes::Bytes;
use pgtier_pool::{Checkin, PoolId};
use tracing::{debug, info};

use super::Linker;
use crate::action::{Action, CloseHow, Conn, Outbox};
use crate::engine::servers::ServerTable;
use crate::engine::stats::StatsSink;
use crate::ids::{ClientId, ServerId};
use crate::services::{FailureCause, Routing};

/// A pool whose waiters must get `error` now (its last server failed to log in).
pub(in crate::engine) struct FailWaiters {
    pub(in crate::engine) pool: PoolId,
    pub(in crate::engine) error: Bytes,
}

impl Linker {
    /// Server `id` logged in: the pool learns its welcome and decides what it does (the
    /// caller acts on the check-in).
    pub(in crate::engine) fn logged_in(
        &mut self,
        servers: &mut ServerTable,
        id: ServerId,
        now: Instant,
    ) -> Option<(PoolId, Checkin<ServerId, ClientId>)> {
        let server = servers.get_mut(id.0)?;
        let params = server.logged_in(now)?;
        let pool = server.pool();
        debug!(pid = ?server.backend().pid(), "server login done");
        self.pools_mut().learn_welcome(pool, &params);
        let checkin = self.pools_mut().opened(pool, id, now);
        if let Some(server) = servers.get_mut(id.0) {
            server.idle(now);
        }
        Some((pool, checkin))
    }

    /// A login failed: the server closes, and the pool remembers `error` until `retry_at`
    /// for new clients; the waiters to fail now when no server of the pool is left.
    pub(in crate::engine) fn login_failed(
        &mut self,
        servers: &mut ServerTable,
        id: ServerId,
        error: Bytes,
        retry_at: Instant,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
    ) -> Option<FailWaiters> {
        let server = servers.get_mut(id.0)?;
        let pool = server.pool();
        stats.login_failed();
        info!(
            database = %self.pools().key(pool).map(|key| key.database.to_string()).unwrap_or_default(),
            "server login failed"
        );
        server.mark_closing();
        outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
        self.pools_mut()
            .open_failed(pool, retry_at, Some(error.clone()));
        (self.pools().counts(pool).servers() == 0).then_some(FailWaiters { pool, error })
    }

    /// A server could not be reached (connect refused or timed out, reset during login).
    /// On a replica the router hears of it and the pool's waiters stay queued, to be
    /// re-routed once the replica is Down; elsewhere it is an ordinary failed login.
    #[allow(clippy::too_many_arguments)] // each owner it changes, named: no context bag
    pub(in crate::engine) fn unreachable(
        &mut self,
        servers: &mut ServerTable,
        id: ServerId,
        error: Bytes,
        cause: FailureCause,
        routing: &dyn Routing,
        retry_at: Instant,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
    ) -> Option<FailWaiters> {
        let pool = servers.get(id.0)?.pool();
        if !self.report_replica_failure(pool, cause, routing) {
            return self.login_failed(servers, id, error, retry_at, stats, outbox);
        }
        stats.login_failed();
        if let Some(server) = servers.get_mut(id.0) {
            server.mark_closing();
        }
        outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
        self.pools_mut().open_failed(pool, retry_at, Some(error));
        None
    }
}
