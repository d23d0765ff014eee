//! What every shard's engine shares with the others, all of it touched off the query path
//! or in batches: the client counts behind `max_client_conn` and the per-database and
//! per-user client limits, folded statistics and query
//! digests, the latency
//! of the current observation interval, and the registry of cross-shard pool budgets.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use pgtier_core::class::CLASS_COUNT;
use pgtier_core::metrics::{
    DatabaseRegistry, DigestStore, IntervalSummary, SharedHistogram, SharedTotals, TotalsSnapshot,
};
use pgtier_pool::{HostTurn, IdleBoard, PoolBudget, PoolKey};

use crate::pool_gauges::PublishedGauges;

/// Per-class statistics of the last completed observation interval (`stats_period`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntervalStats {
    /// When the interval ended.
    pub ended_at: SystemTime,
    /// Its length.
    pub length: Duration,
    /// Completed queries and latency percentiles, indexed by class (premium = 0).
    pub latency: [IntervalSummary; CLASS_COUNT],
}

/// Process-wide connection events, summed over shards.
#[derive(Debug, Default)]
pub struct SharedStats {
    pub clients_accepted: AtomicU64,
    pub servers_opened: AtomicU64,
    /// Server connections that moved whole to another shard (counted where they arrived).
    pub servers_moved: AtomicU64,
    pub login_failures: AtomicU64,
    /// Reads of reader entries: run on a replica, run on the primary (no replica could
    /// serve them, or their wait ran out), waits for a replica to catch up, waits that ran out.
    pub reads_on_replicas: AtomicU64,
    pub reads_on_primary: AtomicU64,
    pub read_waits: AtomicU64,
    pub read_waits_timed_out: AtomicU64,
    /// Reads on replicas run again on another server after theirs died unanswered
    /// (`read_retries`).
    pub reads_run_again: AtomicU64,
}

/// Totals at one moment (lagging by at most one batch per shard).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub traffic: TotalsSnapshot,
    pub clients_accepted: u64,
    pub servers_opened: u64,
    pub servers_moved: u64,
    pub login_failures: u64,
    pub reads_on_replicas: u64,
    pub reads_on_primary: u64,
    pub read_waits: u64,
    pub read_waits_timed_out: u64,
    pub reads_run_again: u64,
}

/// One shard's connection events not yet folded in.
#[derive(Debug, Default)]
pub(crate) struct LocalStats {
    pub clients_accepted: u64,
    pub servers_opened: u64,
    /// Servers that arrived whole from another shard.
    pub servers_moved_in: u64,
    pub login_failures: u64,
    pub reads_on_replicas: u64,
    pub reads_on_primary: u64,
    pub read_waits: u64,
    pub read_waits_timed_out: u64,
    pub reads_run_again: u64,
}

impl LocalStats {
    /// Adds everything to `shared` and starts over.
    pub(crate) fn fold_into(&mut self, shared: &SharedStats) {
        let add = |counter: &AtomicU64, value: &mut u64| {
            if *value != 0 {
                counter.fetch_add(*value, Ordering::Relaxed);
                *value = 0;
            }
        };
        add(&shared.clients_accepted, &mut self.clients_accepted);
        add(&shared.servers_opened, &mut self.servers_opened);
        add(&shared.servers_moved, &mut self.servers_moved_in);
        add(&shared.login_failures, &mut self.login_failures);
        add(&shared.reads_on_replicas, &mut self.reads_on_replicas);
        add(&shared.reads_on_primary, &mut self.reads_on_primary);
        add(&shared.read_waits, &mut self.read_waits);
        add(&shared.read_waits_timed_out, &mut self.read_waits_timed_out);
        add(&shared.reads_run_again, &mut self.reads_run_again);
    }
}

/// The budgets one pool key counts against: its own, and the caps of its database entry and
/// of its server user.
#[derive(Debug, Clone)]
pub(crate) struct KeyBudgets {
    pub pool: Arc<PoolBudget>,
    pub database: Arc<PoolBudget>,
    pub user: Arc<PoolBudget>,
    /// Not a budget, but shared by key the same way: the pool's place in its host list.
    pub host_turn: Arc<HostTurn>,
}

/// Budgets by key, database entry and user, created on first use and shared by every shard.
/// Looked up only when a shard creates a pool (a lock there is no cost on the query path).
#[derive(Debug, Default)]
pub struct BudgetRegistry {
    pools: Mutex<HashMap<PoolKey, Arc<PoolBudget>>>,
    databases: Mutex<HashMap<Arc<str>, Arc<PoolBudget>>>,
    users: Mutex<HashMap<Arc<str>, Arc<PoolBudget>>>,
    host_turns: Mutex<HashMap<PoolKey, Arc<HostTurn>>>,
    /// By exact key (a replication pool's idle servers are not its sibling's).
    idle_boards: Mutex<HashMap<PoolKey, Arc<IdleBoard>>>,
    /// Per database entry in a fleet: the configured `max_db_connections` and the live
    /// members that share it (docs/fleet.md); the entry's budget gets
    /// [`pgtier_pool::fleet_share`] of it. Absent: the whole limit.
    fleet_shares: Mutex<HashMap<Arc<str>, FleetShare>>,
}

/// A database entry's cap as configured, and the fleet members it is shared by.
#[derive(Clone, Copy, Debug, Default)]
struct FleetShare {
    configured: u32,
    members: u32,
}

fn entry<K: std::hash::Hash + Eq>(
    map: &Mutex<HashMap<K, Arc<PoolBudget>>>,
    key: K,
    limit: u32,
    reserve: u32,
) -> Arc<PoolBudget> {
    let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
    let budget = map
        .entry(key)
        .or_insert_with(|| Arc::new(PoolBudget::new(limit, reserve)));
    budget.set_limit(limit, reserve);
    budget.clone()
}

impl BudgetRegistry {
    /// The budgets of `key` with the current limits (0 = unlimited for the caps).
    pub(crate) fn for_key(
        &self,
        key: &PoolKey,
        pool_size: u32,
        reserve: u32,
        max_db_connections: u32,
        max_user_connections: u32,
    ) -> KeyBudgets {
        let max_db_connections = self.database_limit(&key.database, max_db_connections);
        KeyBudgets {
            pool: entry(&self.pools, key.clone(), pool_size, reserve),
            database: entry(&self.databases, key.database.clone(), max_db_connections, 0),
            user: entry(
                &self.users,
                key.server_user.clone(),
                max_user_connections,
                0,
            ),
            host_turn: self
                .host_turns
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(key.clone())
                .or_default()
                .clone(),
        }
    }

    /// This host's part of `database`'s configured cap: all of it, or its share while a fleet
    /// shares it. Remembers the configured value for [`BudgetRegistry::share_database`].
    fn database_limit(&self, database: &Arc<str>, configured: u32) -> u32 {
        let mut shares = self
            .fleet_shares
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match shares.get_mut(database) {
            Some(share) => {
                share.configured = configured;
                pgtier_pool::fleet_share(configured, share.members)
            }
            None => configured,
        }
    }

    /// `members` fleet hosts share `database`'s `max_db_connections` (1: this host has it
    /// all again). The entry's budget takes its share now if a pool made it already; servers
    /// above a lowered cap are not replaced as they close, as after a reload that lowered it.
    pub fn share_database(&self, database: &str, members: u32) {
        let database: Arc<str> = Arc::from(database);
        let configured = {
            let mut shares = self
                .fleet_shares
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let configured = self.database(&database).map(|budget| {
                shares
                    .get(&database)
                    .map_or(budget.limit(), |share| share.configured)
            });
            let share = shares.entry(Arc::clone(&database)).or_default();
            share.members = members.max(1);
            if let Some(configured) = configured {
                share.configured = configured;
            }
            (share.configured, share.members)
        };
        if let Some(budget) = self.database(&database) {
            budget.set_limit(pgtier_pool::fleet_share(configured.0, configured.1), 0);
        }
    }

    /// Where each of `workers` workers publishes its idle servers of `key`.
    pub(crate) fn idle_board(&self, key: &PoolKey, workers: usize) -> Arc<IdleBoard> {
        self.idle_boards
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_insert_with(|| Arc::new(IdleBoard::new(workers)))
            .clone()
    }

    /// Slots held in every budget together (zero once every server is closed).
    pub fn in_use(&self) -> u32 {
        let sum = |map: &Mutex<HashMap<_, Arc<PoolBudget>>>| -> u32 {
            let map = map.lock().unwrap_or_else(PoisonError::into_inner);
            map.values().map(|budget| budget.in_use()).sum()
        };
        sum_pools(&self.pools) + sum(&self.databases) + sum(&self.users)
    }

    /// The cap of a database entry, if any pool used it.
    pub fn database(&self, name: &str) -> Option<Arc<PoolBudget>> {
        let map = self
            .databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        map.get(name).cloned()
    }

    /// The cap of a server user, if any pool used it.
    pub fn user(&self, name: &str) -> Option<Arc<PoolBudget>> {
        let map = self.users.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(name).cloned()
    }
}

fn sum_pools(map: &Mutex<HashMap<PoolKey, Arc<PoolBudget>>>) -> u32 {
    let map = map.lock().unwrap_or_else(PoisonError::into_inner);
    map.values().map(|budget| budget.in_use()).sum()
}

/// State shared by the engines of every shard.
#[derive(Debug)]
pub struct Shared {
    shards: usize,
    /// Clients connected across all shards (`max_client_conn`).
    pub clients: AtomicU32,
    /// Clients per database entry and per user (`max_db_client_connections`,
    /// `max_user_client_connections`).
    pub client_counts: Arc<crate::client_counts::ClientCounts>,
    /// Names the `*` entry has served (its "registered new auto-database" line, once each).
    pub auto_databases: crate::auto_databases::AutoDatabases,
    pub stats: SharedStats,
    pub totals: SharedTotals,
    /// Query latency of the current interval per class (premium = 0), folded by shards.
    pub latency: [SharedHistogram; CLASS_COUNT],
    /// The last completed interval, published by shard 0.
    pub interval: ArcSwapOption<IntervalStats>,
    /// Interval rollovers so far.
    pub intervals: AtomicU64,
    pub budgets: BudgetRegistry,
    /// Per-database totals (`SHOW STATS`, the metrics endpoint), folded by shards.
    pub databases: DatabaseRegistry,
    /// Query digests (`SHOW QUERIES`, the metrics endpoint), folded by shards.
    pub digests: Arc<DigestStore>,
    /// Digests the metrics endpoint exports (`digest_metrics_top`, set by the shards).
    pub digest_metrics_top: AtomicUsize,
    /// Per-pool gauges each shard publishes at housekeeping while the metrics endpoint is on.
    pub pool_gauges: PublishedGauges,
    /// SCRAM keys of server logins, derived once per (password, salt, iterations) for every
    /// shard: a new server connection costs no PBKDF2 on the shard's loop after the first.
    pub scram_keys: Arc<pgtier_wire::auth::ScramKeyCache>,
    /// The last [`SocketId`](crate::ids::SocketId) handed out (0: none yet).
    socket_ids: AtomicU64,
    /// Shards that have no server in use any more during a `WAIT_FOR_SERVERS` shutdown
    /// (each counts itself once: no new transaction starts then, so it stays so).
    transactions_over: AtomicUsize,
    /// A shutdown was asked for (a signal's or the console's `SHUTDOWN`): the process's
    /// signal loop reads it, so a signal during a console's shutdown is a second one.
    shutting_down: AtomicBool,
    /// Shards with neither a client nor a server left during a graceful shutdown (each
    /// counts itself in and out, at housekeeping).
    idle_shards: AtomicUsize,
    /// Every shard was idle at once during a graceful shutdown: the process is done and
    /// every shard stops (together, so none waits on a shard that is gone).
    done: AtomicBool,
    /// The ParameterStatus set of the latest server login of each pool on any shard, so a
    /// shard whose own slice of a pool has logged no server in yet welcomes a client
    /// without waiting for a server (which a small pool may not have free). Touched at
    /// server logins and at a shard's first client of a pool only.
    welcomes: Mutex<HashMap<PoolKey, WelcomeParams>>,
}

/// The ParameterStatus set of a server login, shared between shards.
type WelcomeParams = Arc<[(String, String)]>;

/// Pools whose welcome [`Shared`] keeps before it starts over (a bound on its memory).
const MAX_SHARED_WELCOMES: usize = 16_384;

impl Shared {
    pub fn new(shards: usize) -> Shared {
        Shared {
            shards: shards.max(1),
            clients: AtomicU32::new(0),
            client_counts: Arc::default(),
            auto_databases: Default::default(),
            stats: SharedStats::default(),
            totals: SharedTotals::new(),
            latency: std::array::from_fn(|_| SharedHistogram::new()),
            interval: ArcSwapOption::empty(),
            intervals: AtomicU64::new(0),
            budgets: BudgetRegistry::default(),
            databases: DatabaseRegistry::default(),
            digests: Arc::default(),
            scram_keys: Arc::default(),
            digest_metrics_top: AtomicUsize::new(50),
            pool_gauges: PublishedGauges::new(shards),
            socket_ids: AtomicU64::new(0),
            transactions_over: AtomicUsize::new(0),
            shutting_down: AtomicBool::new(false),
            idle_shards: AtomicUsize::new(0),
            done: AtomicBool::new(false),
            welcomes: Mutex::default(),
        }
    }

    /// A server of pool `key` logged in and reported `params`.
    pub(crate) fn share_welcome(&self, key: &PoolKey, params: &[(String, String)]) {
        let mut welcomes = self.welcomes.lock().unwrap_or_else(PoisonError::into_inner);
        if welcomes.len() >= MAX_SHARED_WELCOMES && !welcomes.contains_key(key) {
            welcomes.clear();
        }
        welcomes.insert(key.clone(), params.into());
    }

    /// The ParameterStatus set of the latest server login of pool `key` on any shard.
    pub(crate) fn shared_welcome(&self, key: &PoolKey) -> Option<WelcomeParams> {
        let welcomes = self.welcomes.lock().unwrap_or_else(PoisonError::into_inner);
        welcomes.get(key).cloned()
    }

    /// Forgets every shared welcome (a reload may point a pool at another server).
    pub fn forget_welcomes(&self) {
        self.welcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    /// Forgets the shared welcomes of `database`'s pools (KILL: its pools are gone).
    pub(crate) fn forget_welcomes_of(&self, database: &str) {
        self.welcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|key, _| &*key.database != database);
    }

    /// A shard became idle during a graceful shutdown (`idle`), or busy again (a console
    /// session on the Unix socket); once every shard is idle the process is done.
    pub(crate) fn shard_idle(&self, idle: bool) {
        if idle {
            self.idle_shards.fetch_add(1, Ordering::AcqRel);
        } else {
            self.idle_shards.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Marks the process done when every shard is idle; says whether it is done.
    pub(crate) fn check_done(&self) -> bool {
        if self.idle_shards.load(Ordering::Acquire) >= self.shards {
            self.done.store(true, Ordering::Release);
        }
        self.is_done()
    }

    /// Every shard was idle at once during a graceful shutdown.
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// A shard began a shutdown.
    pub fn note_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Whether any shard began a shutdown.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// One more shard has no server in use under a `WAIT_FOR_SERVERS` shutdown (call once
    /// per shard).
    pub(crate) fn shard_transactions_over(&self) {
        self.transactions_over.fetch_add(1, Ordering::AcqRel);
    }

    /// Every shard has no server in use under a `WAIT_FOR_SERVERS` shutdown: the process
    /// may close what is left and exit.
    pub(crate) fn all_transactions_over(&self) -> bool {
        self.transactions_over.load(Ordering::Acquire) >= self.shards
    }

    /// A new socket id for a client accepted or a server opened on any shard (one atomic
    /// add per connection, never per query). The first is 1.
    pub fn next_socket_id(&self) -> crate::ids::SocketId {
        crate::ids::SocketId(self.socket_ids.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// How many shards run.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// Totals over all shards.
    pub fn snapshot(&self) -> StatsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        StatsSnapshot {
            traffic: self.totals.snapshot(),
            clients_accepted: load(&self.stats.clients_accepted),
            servers_opened: load(&self.stats.servers_opened),
            servers_moved: load(&self.stats.servers_moved),
            login_failures: load(&self.stats.login_failures),
            reads_on_replicas: load(&self.stats.reads_on_replicas),
            reads_on_primary: load(&self.stats.reads_on_primary),
            read_waits: load(&self.stats.read_waits),
            read_waits_timed_out: load(&self.stats.read_waits_timed_out),
            reads_run_again: load(&self.stats.reads_run_again),
        }
    }

    /// The last completed observation interval.
    pub fn last_interval(&self) -> Option<IntervalStats> {
        self.interval.load_full().map(|stats| *stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_pool::{ServerTarget, StartupProfile};

    fn key(user: &str) -> PoolKey {
        PoolKey::new(
            "db".into(),
            user.into(),
            ServerTarget::Primary,
            StartupProfile::default(),
        )
    }

    #[test]
    fn local_stats_fold_in_batches() {
        let shared = Shared::new(1);
        let mut local = LocalStats {
            clients_accepted: 3,
            ..LocalStats::default()
        };
        local.fold_into(&shared.stats);
        assert_eq!(shared.snapshot().clients_accepted, 3);
        assert_eq!(local.clients_accepted, 0);
    }

    #[test]
    fn one_budget_per_key_and_caps_shared_by_name() {
        let registry = BudgetRegistry::default();
        let alice = registry.for_key(&key("alice"), 2, 0, 3, 0);
        let again = registry.for_key(&key("alice"), 2, 0, 3, 0);
        let bob = registry.for_key(&key("bob"), 2, 0, 3, 0);
        assert!(Arc::ptr_eq(&alice.pool, &again.pool));
        assert!(!Arc::ptr_eq(&alice.pool, &bob.pool));
        assert!(
            Arc::ptr_eq(&alice.database, &bob.database),
            "one cap per database"
        );
        assert!(!Arc::ptr_eq(&alice.user, &bob.user));
        assert_eq!(alice.database.limit(), 3);
        assert!(registry.database("db").is_some() && registry.user("carol").is_none());
    }

    #[test]
    fn a_fleet_shares_a_database_cap_by_its_live_members() {
        let registry = BudgetRegistry::default();
        let budgets = registry.for_key(&key("alice"), 2, 0, 10, 0);
        assert_eq!(budgets.database.limit(), 10);
        registry.share_database("db", 3);
        assert_eq!(budgets.database.limit(), 4, "ceil(10 / 3)");
        // A reload (or a new pool) passes the configured cap again: the share stays.
        registry.for_key(&key("bob"), 2, 0, 10, 0);
        assert_eq!(budgets.database.limit(), 4);
        registry.for_key(&key("bob"), 2, 0, 20, 0);
        assert_eq!(budgets.database.limit(), 7, "ceil(20 / 3)");
        registry.share_database("db", 1);
        assert_eq!(budgets.database.limit(), 20);
        // Shared before any pool of the entry exists: its first pool gets the share.
        registry.share_database("other", 2);
        let other = PoolKey::new(
            "other".into(),
            "alice".into(),
            ServerTarget::Primary,
            StartupProfile::default(),
        );
        assert_eq!(registry.for_key(&other, 2, 0, 9, 0).database.limit(), 5);
        // No cap stays no cap.
        registry.for_key(&other, 2, 0, 0, 0);
        assert_eq!(registry.database("other").map(|b| b.limit()), Some(0));
    }

    #[test]
    fn a_reload_changes_the_limits_of_existing_budgets() {
        let registry = BudgetRegistry::default();
        let first = registry.for_key(&key("alice"), 2, 0, 0, 0);
        registry.for_key(&key("alice"), 5, 1, 0, 0);
        assert_eq!((first.pool.limit(), first.pool.reserve()), (5, 1));
    }
}
