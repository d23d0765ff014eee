//! Connection-event counters (clients accepted, servers opened, failed logins). Traffic totals
//! (queries, transactions, bytes, wait time) use `pgtier_core::metrics`; both follow the same
//! rule: each shard counts in plain fields and folds them into shared atomics in batches, so
//! the query path never touches a shared cache line.

use std::sync::atomic::{AtomicU64, Ordering};

use pgtier_core::metrics::TotalsSnapshot;

/// Process-wide connection events, summed over shards.
#[derive(Debug, Default)]
pub struct SharedStats {
    pub clients_accepted: AtomicU64,
    pub servers_opened: AtomicU64,
    pub login_failures: AtomicU64,
}

/// Totals at one moment (lagging by at most one batch per shard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub traffic: TotalsSnapshot,
    pub clients_accepted: u64,
    pub servers_opened: u64,
    pub login_failures: u64,
}

impl SharedStats {
    pub fn snapshot(&self, traffic: TotalsSnapshot) -> StatsSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            traffic,
            clients_accepted: load(&self.clients_accepted),
            servers_opened: load(&self.servers_opened),
            login_failures: load(&self.login_failures),
        }
    }
}

/// One shard's unflushed connection events.
#[derive(Debug, Default)]
pub struct LocalStats {
    pub clients_accepted: u64,
    pub servers_opened: u64,
    pub login_failures: u64,
}

impl LocalStats {
    /// Adds everything to `shared` and starts over.
    pub fn fold_into(&mut self, shared: &SharedStats) {
        let add = |c: &AtomicU64, v: &mut u64| {
            if *v != 0 {
                c.fetch_add(*v, Ordering::Relaxed);
                *v = 0;
            }
        };
        add(&shared.clients_accepted, &mut self.clients_accepted);
        add(&shared.servers_opened, &mut self.servers_opened);
        add(&shared.login_failures, &mut self.login_failures);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds_in_batches() {
        let shared = SharedStats::default();
        let mut local = LocalStats {
            clients_accepted: 3,
            ..LocalStats::default()
        };
        local.fold_into(&shared);
        assert_eq!(
            shared.snapshot(TotalsSnapshot::default()).clients_accepted,
            3
        );
        assert_eq!(local.clients_accepted, 0);
    }
}
