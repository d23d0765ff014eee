//! The shard's per-pool gauges for the metrics endpoint, computed at housekeeping in one
//! pass over the pools, the clients and the servers, and published into shared state
//! (`crate::pool_gauges`). Nothing on the query path is involved.

use std::collections::HashMap;
use std::sync::Arc;

use pgtier_pool::PoolId;

use crate::client::ClientState;
use crate::engine::view::ShardView;
use crate::pool_gauges::PoolGauge;
use crate::server::ServerState;

impl ShardView<'_> {
    /// This shard's gauges, one per (database, server user).
    pub(crate) fn pool_gauges(&self) -> Vec<PoolGauge> {
        let mut gauges: Vec<PoolGauge> = Vec::new();
        let mut by_name: HashMap<(&str, &str), usize> = HashMap::new();
        let mut by_pool: HashMap<PoolId, usize> = HashMap::new();
        for (pool, key, _) in self.linker.pools().pools() {
            let index = *by_name
                .entry((&key.database, &key.server_user))
                .or_insert_with(|| {
                    gauges.push(PoolGauge {
                        database: Arc::from(&*key.database),
                        user: Arc::from(&*key.server_user),
                        ..PoolGauge::default()
                    });
                    gauges.len() - 1
                });
            by_pool.insert(pool, index);
        }
        for (_, client) in self.clients.iter() {
            let Some(gauge) = client
                .session()
                .and_then(|session| session.pool())
                .and_then(|pool| by_pool.get(&pool))
                .and_then(|index| gauges.get_mut(*index))
            else {
                continue;
            };
            match *client.state() {
                ClientState::Queued { since, .. } | ClientState::Joining { since, .. } => {
                    gauge.clients_waiting += 1;
                    let waited = self.now.saturating_duration_since(since).as_micros() as u64;
                    gauge.max_wait_us = gauge.max_wait_us.max(waited);
                }
                ClientState::Linked { .. } => {
                    gauge.clients_active += 1;
                    if client
                        .session()
                        .is_some_and(|session| session.pins_server())
                    {
                        gauge.clients_pinned += 1;
                    }
                }
                ClientState::Idle { .. } | ClientState::Welcoming { .. } => {
                    gauge.clients_active += 1;
                }
                _ => {}
            }
        }
        let check_delay = self.env.config().pgtier.server_check_delay.duration();
        let checks = !self.env.config().pgtier.server_check_query.is_empty();
        for (_, server) in self.servers.iter() {
            let Some(gauge) = by_pool
                .get(&server.pool())
                .and_then(|index| gauges.get_mut(*index))
            else {
                continue;
            };
            match *server.state() {
                ServerState::Connecting { .. }
                | ServerState::Negotiating { .. }
                | ServerState::LoggingIn { .. } => gauge.servers_login += 1,
                ServerState::Idle { since }
                    if checks && self.now.saturating_duration_since(since) > check_delay =>
                {
                    gauge.servers_used += 1;
                }
                ServerState::Idle { .. } => gauge.servers_idle += 1,
                ServerState::Checking { .. } | ServerState::Releasing { .. } => {
                    gauge.servers_tested += 1;
                }
                ServerState::Busy { .. } => gauge.servers_active += 1,
                ServerState::Leaving { .. } | ServerState::Moving { .. } | ServerState::Closing => {
                }
            }
        }
        gauges
    }
}
