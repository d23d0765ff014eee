//! Per-pool gauges (clients active and waiting, servers by PgBouncer's states, the longest
//! wait) that each shard publishes into shared state at housekeeping while the metrics
//! endpoint is on, so a scrape reads them without asking any shard for work.

use std::sync::Arc;

use arc_swap::ArcSwap;

/// One pool (database, server user) on one shard when it was published. Several pool keys of
/// a shard (other startup parameters, other replicas) with the same database and user are
/// added into one gauge.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolGauge {
    pub database: Arc<str>,
    pub user: Arc<str>,
    /// Logged-in clients that are idle or linked to a server (PgBouncer's `cl_active`).
    pub clients_active: u32,
    /// Clients queued for a server (`cl_waiting`).
    pub clients_waiting: u32,
    /// Clients whose session state (SET, a temporary table, an advisory lock...) pins their
    /// server to them between transactions: those servers serve no other client.
    pub clients_pinned: u32,
    /// Servers linked to a client (`sv_active`).
    pub servers_active: u32,
    /// Idle servers ready for use (`sv_idle`).
    pub servers_idle: u32,
    /// Idle servers past `server_check_delay`, which run `server_check_query` first (`sv_used`).
    pub servers_used: u32,
    /// Servers running `server_check_query` or their reset (`sv_tested`).
    pub servers_tested: u32,
    /// Servers connecting or logging in (`sv_login`).
    pub servers_login: u32,
    /// How long the oldest queued client has waited, microseconds (0: none waits).
    pub max_wait_us: u64,
}

impl PoolGauge {
    /// Adds `other`'s counts; the longest wait is the larger.
    pub fn merge(&mut self, other: &PoolGauge) {
        self.clients_active += other.clients_active;
        self.clients_waiting += other.clients_waiting;
        self.clients_pinned += other.clients_pinned;
        self.servers_active += other.servers_active;
        self.servers_idle += other.servers_idle;
        self.servers_used += other.servers_used;
        self.servers_tested += other.servers_tested;
        self.servers_login += other.servers_login;
        self.max_wait_us = self.max_wait_us.max(other.max_wait_us);
    }
}

/// The gauges every shard published last, one slot per shard.
#[derive(Debug)]
pub struct PublishedGauges {
    shards: Box<[ArcSwap<Vec<PoolGauge>>]>,
}

impl PublishedGauges {
    pub fn new(shards: usize) -> PublishedGauges {
        PublishedGauges {
            shards: (0..shards.max(1))
                .map(|_| ArcSwap::from_pointee(Vec::new()))
                .collect(),
        }
    }

    /// Replaces shard `shard`'s gauges.
    pub fn publish(&self, shard: usize, gauges: Vec<PoolGauge>) {
        if let Some(slot) = self.shards.get(shard) {
            slot.store(Arc::new(gauges));
        }
    }

    /// Every shard's gauges added up per (database, user), sorted.
    pub fn merged(&self) -> Vec<PoolGauge> {
        let mut merged: std::collections::BTreeMap<(Arc<str>, Arc<str>), PoolGauge> =
            Default::default();
        for slot in self.shards.iter() {
            for gauge in slot.load().iter() {
                merged
                    .entry((gauge.database.clone(), gauge.user.clone()))
                    .and_modify(|total| total.merge(gauge))
                    .or_insert_with(|| gauge.clone());
            }
        }
        merged.into_values().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge(database: &str, user: &str, active: u32, wait_us: u64) -> PoolGauge {
        PoolGauge {
            database: database.into(),
            user: user.into(),
            clients_active: active,
            max_wait_us: wait_us,
            ..PoolGauge::default()
        }
    }

    #[test]
    fn shards_are_added_per_database_and_user() {
        let published = PublishedGauges::new(2);
        published.publish(0, vec![gauge("b", "u", 1, 5), gauge("a", "u", 2, 0)]);
        published.publish(1, vec![gauge("b", "u", 3, 9)]);
        published.publish(7, vec![gauge("ignored", "u", 1, 0)]);
        let merged = published.merged();
        assert_eq!(merged.len(), 2);
        assert_eq!((&*merged[0].database, merged[0].clients_active), ("a", 2));
        assert_eq!((merged[1].clients_active, merged[1].max_wait_us), (4, 9));
        published.publish(1, Vec::new());
        assert_eq!(
            published.merged()[1].clients_active,
            1,
            "replaced, not added"
        );
    }
}
