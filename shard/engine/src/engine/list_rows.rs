//! The rows this shard reports about itself for the admin console's `SHOW CLIENTS`,
//! `SHOW SERVERS` and `SHOW POOLS` (the types are in `crate::listing`): values copied out of
//! the client and server slabs and the pool slices, so the console never reads engine state.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Instant, SystemTime};

use pgtier_pool::{PoolId, ServerTarget};

use crate::addr::ServerAddr;
use crate::client::{ClientConn, ClientState};
use crate::engine::view::ShardView;
use crate::listing::{ClientRow, PoolRow, ServerRow, ShardListing};
use crate::params::tracked_index;
use crate::server::{ServerConn, ServerState};

/// Per-pool counts the pool slice does not keep, gathered from the slabs.
#[derive(Default)]
struct PoolTally {
    clients_active: u32,
    clients_waiting: u32,
    oldest_wait: Option<Instant>,
    servers_used: u32,
    servers_tested: u32,
    servers_login: u32,
    servers_being_canceled: u32,
}

/// PgBouncer's `replication` word for a server whose pool has startup profile `profile`
/// (a replication connection's pool keeps its `replication` parameter).
fn server_replication(profile: &pgtier_pool::StartupProfile) -> &'static str {
    match profile
        .parameters()
        .find(|(name, _)| *name == "replication")
    {
        Some((_, value)) if value.eq_ignore_ascii_case("database") => "logical",
        Some(_) => "physical",
        None => "none",
    }
}

impl ShardView<'_> {
    /// This shard's client, server and pool rows.
    pub(crate) fn list_sessions(&self) -> ShardListing {
        let clients = self
            .clients
            .iter()
            .map(|(index, client)| self.client_row(index, client))
            .collect();
        let servers = self
            .servers
            .iter()
            .map(|(index, server)| self.server_row(index, server))
            .collect();
        ShardListing {
            shard: self.env.shard(),
            clients,
            servers,
            pools: self.pool_rows(),
        }
    }

    /// The wall-clock time of monotonic instant `at` (listings print calendar times).
    fn wall_time_of(&self, at: Instant) -> SystemTime {
        let wall_now = self.env.wall_time(self.now);
        let ago = self.now.saturating_duration_since(at);
        wall_now.checked_sub(ago).unwrap_or(wall_now)
    }

    fn client_row(&self, index: crate::ids::SlotRef, client: &ClientConn) -> ClientRow {
        let connected_for = self
            .now
            .saturating_duration_since(client.info().connected_at());
        let session = client.session();
        let lease = session.and_then(|s| s.lease());
        let class = match (lease, client.state()) {
            // The class the router serves it as (a rank below its last one is its last).
            (Some(lease), _) => pgtier_core::class::ClassSetting::from_rank(lease.class().0)
                .map(pgtier_core::class::ClassSetting::as_str),
            (None, ClientState::Routing { .. }) => session.map(|s| s.class().as_str()),
            (None, _) => None,
        };
        let server = client.server();
        let application_name = tracked_index("application_name")
            .and_then(|i| session.and_then(|s| s.tracked().get(i)))
            .map(str::to_string);
        ClientRow {
            id: crate::ids::ClientId(index),
            socket_id: client.info().socket_id(),
            addr: client.info().peer().cloned(),
            local_addr: client.info().local_addr(),
            database: session
                .map(|s| s.database().to_string())
                .unwrap_or_default(),
            user: session.map(|s| s.user().to_string()).unwrap_or_default(),
            replication: match session {
                Some(s) if s.is_physical_replication() => "physical",
                Some(s) if s.is_replication() => "logical",
                _ => "none",
            },
            state: client.state_name(),
            class,
            replica: lease.map(|lease| lease.addr()),
            connected_at: self.wall_time_of(client.info().connected_at()),
            connected_for,
            request_at: self.wall_time_of(client.info().last_active()),
            waiting_for: waiting_since(client)
                .map(|since| self.now.saturating_duration_since(since)),
            server,
            backend_pid: server
                .and_then(|server| self.servers.get(server.0))
                .and_then(|server| server.backend().pid()),
            pinned: session.map(|s| s.pins().reasons()).unwrap_or_default(),
            prepared_statements: session
                .and_then(|s| s.statements())
                .map_or(0, |statements| statements.len()),
            tls: client.tls().and_then(|tls| tls.session.description()),
            application_name,
        }
    }

    fn server_row(&self, index: crate::ids::SlotRef, server: &ServerConn) -> ServerRow {
        let key = self.linker.pools().key(server.pool());
        ServerRow {
            id: crate::ids::ServerId(index),
            socket_id: server.info().socket_id(),
            prepared_statements: server
                .backend()
                .relay()
                .prepared
                .as_ref()
                .map_or(0, |prepared| prepared.statements.len()),
            database: key.map(|k| k.database.to_string()).unwrap_or_default(),
            user: key.map(|k| k.server_user.to_string()).unwrap_or_default(),
            replication: key.map_or("none", |k| server_replication(&k.profile)),
            state: server.state_name(),
            addr: server.info().addr().clone(),
            local_addr: server.info().local_addr(),
            connected_at: self.wall_time_of(server.info().connected_at()),
            request_at: self.wall_time_of(
                server
                    .info()
                    .last_linked()
                    .unwrap_or(server.info().connected_at()),
            ),
            client: server.client(),
            backend_pid: server.backend().pid(),
            tls: server.io().tls().and_then(|tls| tls.description()),
            application_name: tracked_index("application_name")
                .and_then(|i| server.backend().params().get(i))
                .map(str::to_string),
            close_needed: matches!(server.state(), ServerState::Leaving { .. }),
            being_canceled: server.backend().cancels_pending() > 0,
        }
    }

    fn pool_rows(&self) -> Vec<PoolRow> {
        let mut tallies: HashMap<PoolId, PoolTally> = HashMap::new();
        for (_, client) in self.clients.iter() {
            let Some(pool) = client.session().and_then(|s| s.pool()) else {
                continue;
            };
            let tally = tallies.entry(pool).or_default();
            match *client.state() {
                ClientState::Idle { .. }
                | ClientState::Linked { .. }
                | ClientState::Welcoming { .. } => {
                    tally.clients_active += 1;
                }
                ClientState::Queued { since, .. } | ClientState::Joining { since, .. } => {
                    tally.clients_waiting += 1;
                    tally.oldest_wait = Some(tally.oldest_wait.map_or(since, |t| t.min(since)));
                }
                _ => {}
            }
        }
        for (_, server) in self.servers.iter() {
            let tally = tallies.entry(server.pool()).or_default();
            match *server.state() {
                ServerState::Releasing { .. } => tally.servers_used += 1,
                ServerState::Checking { .. } => tally.servers_tested += 1,
                ServerState::Connecting { .. }
                | ServerState::Negotiating { .. }
                | ServerState::LoggingIn { .. } => tally.servers_login += 1,
                _ => {}
            }
            if server.backend().cancels_pending() > 0 {
                tally.servers_being_canceled += 1;
            }
        }
        self.linker
            .pools()
            .pools()
            .map(|(pool, key, counts)| {
                let tally = tallies.remove(&pool).unwrap_or_default();
                PoolRow {
                    database: key.database.to_string(),
                    user: key.server_user.to_string(),
                    addr: match key.target {
                        ServerTarget::Replica(addr) => ServerAddr::Tcp(addr),
                        ServerTarget::Primary => self
                            .primary_addr_for_listing(&key.database)
                            .unwrap_or_else(|| {
                                ServerAddr::Tcp(SocketAddr::from(([0, 0, 0, 0], 0)))
                            }),
                    },
                    mode: self.mode_of_pool(pool).as_str(),
                    clients_active: tally.clients_active,
                    clients_waiting: counts.waiting.max(tally.clients_waiting),
                    servers_active: counts
                        .active
                        .saturating_sub(tally.servers_used + tally.servers_tested),
                    servers_idle: counts.idle,
                    servers_opening: counts.opening,
                    servers_used: tally.servers_used,
                    servers_tested: tally.servers_tested,
                    servers_login: tally.servers_login.max(counts.opening),
                    servers_being_canceled: tally.servers_being_canceled,
                    max_wait: tally
                        .oldest_wait
                        .map(|since| self.now.saturating_duration_since(since)),
                }
            })
            .collect()
    }

    fn primary_addr_for_listing(&self, database: &str) -> Option<ServerAddr> {
        let db = self.env.config().database(database)?;
        match &db.servers {
            pgtier_core::config::ServerSet::Single(host_port) => {
                ServerAddr::of_host(host_port, |host, port| self.servers.resolve(host, port)).ok()
            }
            pgtier_core::config::ServerSet::Hosts(list) => list.hosts.first().and_then(|first| {
                ServerAddr::of_host(first, |host, port| self.servers.resolve(host, port)).ok()
            }),
            pgtier_core::config::ServerSet::Replicas(set) => {
                set.replicas.first().copied().map(ServerAddr::Tcp)
            }
        }
    }

    fn mode_of_pool(&self, pool: PoolId) -> pgtier_core::config::PoolMode {
        self.linker
            .pools()
            .key(pool)
            .and_then(|key| {
                let db = self.env.config().database(&key.database)?;
                Some(self.env.config().pool_mode(db, &key.server_user))
            })
            .unwrap_or(self.env.config().pgtier.pool_mode)
    }
}

/// Since when a client has waited for a server or a replica, while it does.
fn waiting_since(client: &ClientConn) -> Option<Instant> {
    match *client.state() {
        ClientState::Queued { since, .. }
        | ClientState::Joining { since, .. }
        | ClientState::Routing { since, .. } => Some(since),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::action::Conn;
    use crate::testing::{Harness, config, query};

    #[test]
    fn rows_link_clients_and_servers_and_count_the_pools_states() {
        let mut h = Harness::new(&config(
            "pool_mode = \"transaction\"\ndefault_pool_size = 1",
        ));
        let (a, _) = h.login("alice", "db");
        let local = "127.0.0.1:6432".parse().ok();
        h.engine.handle_local_addr(Conn::Client(a), local);
        let listing = h.engine.list_sessions();
        let [server] = &listing.servers[..] else {
            panic!("one server: {listing:?}")
        };
        assert_eq!((server.state, server.client), ("idle", None));
        assert!(server.backend_pid.is_some());
        assert_eq!(
            (server.database.as_str(), server.user.as_str()),
            ("db", "alice")
        );
        let [client] = &listing.clients[..] else {
            panic!("one client")
        };
        assert_eq!((client.local_addr, client.server), (local, None));
        let [pool] = &listing.pools[..] else {
            panic!("one pool")
        };
        assert_eq!(
            (
                pool.clients_active,
                pool.servers_idle,
                pool.servers_active,
                pool.max_wait
            ),
            (1, 1, 0, None)
        );

        let busy = h.live_servers()[0];
        h.backend(busy).hold_queries_with = Some("sleep".into());
        h.client_sends(a, &query("SELECT sleep"));
        let (b, _) = h.login("alice", "db");
        h.client_sends(b, &query("SELECT 1"));
        h.advance(Duration::from_millis(1500));
        let listing = h.engine.list_sessions();
        let server = &listing.servers[0];
        let linked = listing.clients.iter().find(|c| c.id == a).expect("a");
        let waiting = listing.clients.iter().find(|c| c.id == b).expect("b");
        assert_eq!((server.state, server.client), ("active", Some(a)));
        assert_eq!(linked.server, Some(server.id));
        assert_eq!(linked.backend_pid, server.backend_pid);
        assert_eq!(waiting.state, "waiting");
        assert!(waiting.waiting_for >= Some(Duration::from_millis(1500)));
        let pool = &listing.pools[0];
        assert_eq!(
            (
                pool.clients_active,
                pool.clients_waiting,
                pool.servers_active
            ),
            (1, 1, 1)
        );
        assert!(pool.max_wait >= Some(Duration::from_millis(1500)));
    }
}
