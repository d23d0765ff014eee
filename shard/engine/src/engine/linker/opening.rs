//! Servers opened for the pools: a server opened for a pool (or room made for one: another
//! shard asked, an idle server under a shared cap ended, an unused pool evicted), and the
//! pool told of a finished login or a failed one (its waiters get the error, new clients
//! too until `server_login_retry` passes), a server and its pool together.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use pgtier_core::config::{LoadBalanceHosts, ServerSet};
use pgtier_pool::{Checkin, Closing, HostBalance, PoolId, ServerTarget};
use tracing::{debug, info, warn};

use super::Linker;
use crate::action::{Action, CloseHow, Conn, Outbox};
use crate::addr::ServerAddr;
use crate::command::Command;
use crate::engine::env::Env;
use crate::engine::servers::ServerTable;
use crate::engine::stats::StatsSink;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::server::{ServerConn, ServerState};
use crate::services::{ElectedServer, FailureCause, PrimaryNow, Routing};

/// A pool whose waiters must get `error` now (its last server failed to log in).
pub(in crate::engine) struct FailWaiters {
    pub(in crate::engine) pool: PoolId,
    pub(in crate::engine) error: Bytes,
}

impl Linker {
    /// Server `id` logged in: the pool learns its welcome (and the other shards, through
    /// `shared`) and decides what it does (the caller acts on the check-in).
    pub(in crate::engine) fn logged_in(
        &mut self,
        servers: &mut ServerTable,
        id: ServerId,
        now: Instant,
        shared: &crate::shared::Shared,
    ) -> Option<(PoolId, Checkin<ServerId, ClientId>)> {
        let server = servers.get_mut(id.0)?;
        let params = server.logged_in(now)?;
        let pool = server.pool();
        debug!(pid = ?server.backend().pid(), "server login done");
        self.pools_mut().learn_welcome(pool, &params);
        if let Some(key) = self.pools().key(pool) {
            shared.share_welcome(key, &params);
        }
        let checkin = self.pools_mut().opened(pool, id, now);
        if let Some(server) = servers.get_mut(id.0) {
            server.idle(now);
        }
        Some((pool, checkin))
    }

    /// A login failed: the server closes, and the pool remembers `error` until `retry_at`
    /// for new clients; the waiters to fail now when no server of the pool is left. A
    /// transient refusal (57P03) fails nobody: only the next open waits for `retry_at`.
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
        // PgBouncer's words, with the server's (operators and its test suite look for them).
        info!(
            database = %self.pools().key(pool).map(|key| key.database.to_string()).unwrap_or_default(),
            "server login failed: FATAL {}",
            crate::messages::error_text(&error)
        );
        server.mark_closing();
        outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
        if messages::is_transient_login_error(&error) {
            // The server is starting up or shutting down (a restart): nobody is failed for
            // it; the next open waits for `retry_at`, and clients wait for it.
            self.pools_mut().open_failed(pool, retry_at, None);
            return None;
        }
        self.pools_mut()
            .open_failed(pool, retry_at, Some(error.clone()));
        (!has_usable_server(servers, pool, Some(id))).then_some(FailWaiters { pool, error })
    }

    /// TLS with a server failed during its login (certificate refused, handshake failed,
    /// TLS required and the server answered `N`). As PgBouncer does, the server is closed
    /// with the reason in the log and the pool's waiters keep waiting: the next open comes
    /// after `server_login_retry`, and a client gives up on its own timeout (or
    /// `query_wait_timeout`). A TLS failure is a setup problem between pgtier and the
    /// server, not an answer from the server to relay.
    pub(in crate::engine) fn tls_failed(
        &mut self,
        servers: &mut ServerTable,
        id: ServerId,
        why: &str,
        retry_at: Instant,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
    ) {
        let Some(server) = servers.get_mut(id.0) else {
            return;
        };
        let pool = server.pool();
        stats.login_failed();
        info!(
            database = %self.pools().key(pool).map(|key| key.database.to_string()).unwrap_or_default(),
            "closing because: {why}"
        );
        server.mark_closing();
        outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
        self.pools_mut().open_failed(pool, retry_at, None);
    }

    /// A server could not be reached (connect refused or timed out, reset during login), or
    /// refused the login because it is starting up or shutting down.
    /// The pool's waiters stay queued, as PgBouncer's do: the pool tries again once
    /// `server_login_retry` passed (on the next host of a host list; on a replica, the
    /// router hears of it and they are re-routed once it is Down), and they wait until a
    /// server comes or their own limit (`query_wait_timeout`, `query_timeout`) ends the
    /// wait. A client that comes meanwhile while the pool has no server gets `error` at
    /// once (PgBouncer's fast fail).
    #[allow(clippy::too_many_arguments)] // each owner it changes, named: no context bag
    pub(in crate::engine) fn unreachable(
        &mut self,
        servers: &mut ServerTable,
        id: ServerId,
        error: Bytes,
        cause: FailureCause,
        other_hosts: bool,
        routing: &dyn Routing,
        retry_at: Instant,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
    ) {
        let Some(server) = servers.get_mut(id.0) else {
            return;
        };
        let pool = server.pool();
        if !other_hosts {
            self.report_replica_failure(pool, cause, routing);
        }
        stats.login_failed();
        // PgBouncer's words (operators and its test suite look for them), then pgtier's.
        let database = self
            .pools()
            .key(pool)
            .map(|key| key.database.to_string())
            .unwrap_or_default();
        let text = crate::messages::error_text(&error);
        match cause {
            FailureCause::ConnectTimeout => {
                info!(%database, error = %text, "closing because: connect timeout");
            }
            FailureCause::ConnectionRefused | FailureCause::ConnectionReset => {
                info!(%database, error = %text, "closing because: connect failed");
            }
            FailureCause::ServerShutdown => {
                info!(%database, "server login failed: FATAL {text}");
            }
        }
        server.mark_closing();
        outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
        // A server starting up or shutting down (a restart) is about to take logins again:
        // a client that comes meanwhile waits with the others instead of failing fast.
        let memo = (cause != FailureCause::ServerShutdown).then_some(error);
        self.pools_mut().open_unreachable(pool, retry_at, memo);
    }
}

impl Linker {
    /// Opens a server for `pool` (its budget slot was taken by `try_open`): a connect is
    /// asked for. When it cannot be (no address, no slot in the table), the pool
    /// remembers why, and its waiters are to fail.
    #[allow(clippy::too_many_arguments)] // each owner it reads or changes, named: no context bag
    pub(in crate::engine) fn open_server(
        &mut self,
        servers: &mut ServerTable,
        env: &Env,
        routing: &dyn Routing,
        stats: &mut StatsSink,
        outbox: &mut Outbox,
        pool: PoolId,
        now: Instant,
    ) -> Option<FailWaiters> {
        let key = self.pools().key(pool).cloned()?;
        if self.pools_mut().take_reserve_open(pool) {
            warn!(
                database = %key.database,
                user = %key.server_user,
                "{}",
                crate::log_lines::TAKING_FROM_RESERVE
            );
        }
        let (addr, listed_host) = match key.target {
            ServerTarget::Replica(addr) => (Ok(ServerAddr::Tcp(addr)), None),
            ServerTarget::Primary => self.primary_addr(env, routing, servers, pool, &key.database),
        };
        let mode = env.pool_mode_of(&key.database, &key.server_user);
        let addr = match addr {
            Ok(addr) => addr,
            Err(message) => {
                let retry_at = env.login_retry_at(now);
                if self.has_other_hosts(env, pool) {
                    // Another host of the list may answer: the waiters wait for the next
                    // attempt, which goes there, as PgBouncer's do.
                    info!(database = %key.database, %message, "closing because: server DNS lookup failed");
                    self.pools_mut().open_failed(pool, retry_at, None);
                    return None;
                }
                let error = messages::fatal(sqlstate::CONNECTION_FAILURE, &message);
                self.pools_mut()
                    .open_failed(pool, retry_at, Some(error.clone()));
                return Some(FailWaiters { pool, error });
            }
        };
        let mut server = ServerConn::new(pool, addr.clone(), mode, now);
        server
            .info_mut()
            .set_socket_id(env.shared().next_socket_id());
        if let Some(host) = listed_host {
            server.opened_for_listed_host(host);
        }
        if mode.releases_at_idle_ready() && env.limits().max_prepared_statements > 0 {
            server.backend_mut().relay_mut().prepared = Some(Box::default());
        }
        let Some(slot) = servers.insert(server) else {
            let error = messages::fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                "too many server connections on this worker",
            );
            self.pools_mut().open_failed(pool, now, Some(error.clone()));
            return Some(FailWaiters { pool, error });
        };
        stats.server_opened();
        outbox.push(Action::Connect {
            server: ServerId(slot),
            addr,
        });
        None
    }

    /// The budget is spent and this shard has no server to give: the slots may sit on other
    /// shards, so ask them for one (at most once per housekeeping period).
    pub(in crate::engine) fn ask_other_shards_for_a_server(
        &mut self,
        env: &Env,
        outbox: &mut Outbox,
        pool: PoolId,
        now: Instant,
    ) {
        let shards = env.shared().shards();
        if shards < 2 || !self.pools_mut().should_ask_others(pool, now) {
            return;
        }
        let Some(key) = self.pools().key(pool).cloned().map(Arc::new) else {
            return;
        };
        for shard in (0..shards).filter(|shard| *shard != env.shard()) {
            let command = Command::ReleaseIdle {
                key: key.clone(),
                from: env.shard(),
            };
            outbox.push(Action::Post { shard, command });
        }
    }

    /// A database or user cap stops `pool`: an idle server of another pool of this shard
    /// under the same cap to end (its counts come back once its backend is gone), else the
    /// other shards are asked to.
    pub(in crate::engine) fn make_room_under_cap(
        &mut self,
        env: &Env,
        outbox: &mut Outbox,
        pool: PoolId,
        budget: usize,
        now: Instant,
    ) -> Option<Closing<ServerId>> {
        if let Some(closing) = self.pools_mut().evict_idle_sharing(pool, budget) {
            debug!(
                shard = env.shard(),
                "ending an idle server to make room under a cap"
            );
            return Some(closing);
        }
        if env.shared().shards() < 2 || !self.pools_mut().should_ask_others(pool, now) {
            return None;
        }
        let key = self.pools().key(pool)?;
        let (database, user) = if budget == 0 {
            (Some(key.database.clone()), None)
        } else {
            (None, Some(key.server_user.clone()))
        };
        for shard in (0..env.shared().shards()).filter(|shard| *shard != env.shard()) {
            let command = Command::ReleaseIdleUnderCap {
                database: database.clone(),
                user: user.clone(),
            };
            outbox.push(Action::Post { shard, command });
        }
        None
    }

    /// The other pools of this shard under the same caps as `pool` whose clients wait (a
    /// server of `pool` closed and gave its database and user counts back).
    pub(in crate::engine) fn waiting_under_caps_of(&self, pool: PoolId) -> Vec<PoolId> {
        let Some(key) = self.pools().key(pool) else {
            return Vec::new();
        };
        self.pools()
            .pools()
            .filter(|(other, other_key, counts)| {
                *other != pool
                    && counts.waiting > 0
                    && (other_key.database == key.database
                        || other_key.server_user == key.server_user)
            })
            .map(|(other, _, _)| other)
            .collect()
    }

    /// `max_pools_per_worker` is reached: the least recently used pool nobody uses gives
    /// its idle servers up, so it is forgotten and a new key fits.
    pub(in crate::engine) fn evict_a_pool(
        &mut self,
        servers: &mut ServerTable,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        let mut closings = Vec::new();
        self.pools_mut().evict_for_room(&mut closings);
        for closing in closings {
            servers.retire(closing, now, outbox);
        }
    }
}

impl Linker {
    /// Where a new server of `pool`, on its entry's primary, connects: the entry's host,
    /// the next host of its host list (named too: its certificate is checked against it),
    /// or the primary (else the first replica) of a replica set: the one pgtier elected
    /// among its hosts when it polls them (a promoted replica after a failover).
    fn primary_addr<'a>(
        &mut self,
        env: &'a Env,
        routing: &dyn Routing,
        servers: &ServerTable,
        pool: PoolId,
        database: &str,
    ) -> (Result<ServerAddr, String>, Option<&'a str>) {
        let Some(db) = env.config().database(database) else {
            return (Err(format!("database \"{database}\" does not exist")), None);
        };
        let resolve = |host: &str, port: u16| servers.resolve(host, port);
        let elected = match &db.servers {
            ServerSet::Single(_) => None,
            ServerSet::Hosts(_) | ServerSet::Replicas(_) => routing.primary(database),
        };
        match (&db.servers, elected) {
            (ServerSet::Single(host_port), _) => (ServerAddr::of_host(host_port, resolve), None),
            (_, Some(PrimaryNow { server: None, .. })) => (
                Err(
                    "no primary: no host of the entry is read-write on a newer timeline than \
                     the last primary"
                        .to_string(),
                ),
                None,
            ),
            (
                ServerSet::Hosts(list),
                Some(PrimaryNow {
                    server: Some(ElectedServer::Listed(index)),
                    ..
                }),
            ) => match list.hosts.get(index) {
                Some(host) => (ServerAddr::of_host(host, resolve), Some(host.host.as_str())),
                None => (Err("the elected host is not in the list".to_string()), None),
            },
            (ServerSet::Hosts(list), _) => {
                let balance = match list.balance {
                    LoadBalanceHosts::RoundRobin => HostBalance::RoundRobin,
                    LoadBalanceHosts::Disable => HostBalance::StayUntilFailure,
                };
                let index = self.pools_mut().next_host(pool, list.hosts.len(), balance);
                match list.hosts.get(index) {
                    Some(host) => (ServerAddr::of_host(host, resolve), Some(host.host.as_str())),
                    None => (Err("the host list is empty".to_string()), None),
                }
            }
            (
                ServerSet::Replicas(_),
                Some(PrimaryNow {
                    server: Some(ElectedServer::Addr(addr)),
                    ..
                }),
            ) => (Ok(ServerAddr::Tcp(addr)), None),
            (ServerSet::Replicas(set), _) => (
                set.primary
                    .or_else(|| set.replicas.first().copied())
                    .map(ServerAddr::Tcp)
                    .ok_or_else(|| "replica set is empty".to_string()),
                None,
            ),
        }
    }

    /// Whether `pool`'s entry is a host list with another host to try after a failure.
    pub(in crate::engine) fn has_other_hosts(&self, env: &Env, pool: PoolId) -> bool {
        self.pools()
            .key(pool)
            .and_then(|key| env.config().database(&key.database))
            .is_some_and(|db| matches!(&db.servers, ServerSet::Hosts(list) if list.hosts.len() > 1))
    }
}

/// Whether pool `pool` has a server (besides `failed`) that will serve its waiters: logged
/// in, not closing, and not marked by RECONNECT to close at its release. Without one the
/// waiters would only wait for logins that fail the same way, so they get the error now
/// (PgBouncer's `kill_pool_logins`).
pub(super) fn has_usable_server(
    servers: &ServerTable,
    pool: PoolId,
    failed: Option<ServerId>,
) -> bool {
    servers.iter().any(|(slot, server)| {
        Some(ServerId(slot)) != failed
            && server.pool() == pool
            && !server.is_closing()
            && !server.close_needed()
            && !matches!(
                server.state(),
                ServerState::Connecting { .. }
                    | ServerState::Negotiating { .. }
                    | ServerState::LoggingIn { .. }
            )
    })
}
