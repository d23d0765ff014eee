//! PgBouncer's idle-server check: a server unused for longer than `server_check_delay`
//! runs `server_check_query` before a client gets it, so a backend that died while idle
//! (terminated, restarted server, dropped connection) is replaced instead of failing a client.

use bytes::BytesMut;
use tracing::debug;

use crate::io::ring::Ring;
use crate::io::slab::ServerId;
use crate::proto;
use crate::server::ServerState;
use crate::shard::Shard;

impl<R: Ring> Shard<R> {
    /// A server idle longer than `server_check_delay` runs `server_check_query` before a
    /// client gets it (PgBouncer's check): true when the check was started. Counted as
    /// connecting, so waiters do not open another server for the same client meanwhile.
    pub(crate) fn start_check_if_stale(&mut self, server_id: ServerId) -> bool {
        let settings = &self.config.pgtier;
        if settings.server_check_query.is_empty() {
            return false;
        }
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return false;
        };
        let ServerState::Idle { since } = server.state else {
            return false;
        };
        // Strictly longer: a server that just passed its check (idle since this loop pass)
        // is not checked again, even with `server_check_delay = 0`.
        if self.now.saturating_duration_since(since) <= settings.server_check_delay.duration() {
            return false;
        }
        let mut out = BytesMut::with_capacity(settings.server_check_query.len() + 8);
        proto::query(&mut out, &settings.server_check_query);
        server.send.push(out.freeze());
        server.swallow += 1;
        server.tracker.on_internal_query();
        server.swallowed_error = None;
        server.state = ServerState::Checking { since: self.now };
        let pool_id = server.pool;
        self.pools.get_mut(pool_id).connecting += 1;
        self.flush_server(server_id);
        true
    }

    /// A check was answered: a server that passed goes back to the pool (fresh, for the
    /// next waiter), one that failed closes (the pool opens another if clients wait).
    pub(crate) fn finish_check(&mut self, server_id: ServerId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let failed = server.swallowed_error.take().is_some() || !server.tracker.is_idle();
        let pool_id = server.pool;
        // Draining until it is back: `close_server` does not count it as connecting then.
        server.state = ServerState::Draining { since: self.now };
        let pool = self.pools.get_mut(pool_id);
        pool.connecting = pool.connecting.saturating_sub(1);
        if failed {
            debug!(
                shard = self.index,
                "server_check_query failed: closing the server"
            );
            self.close_server(server_id);
        } else {
            self.return_to_pool(server_id);
        }
    }
}
