//! This shard's slice of the server pools: one `Pool` per exact key (database entry, user,
//! server address, startup parameters that change server behaviour), its idle servers, its
//! FIFO of waiting clients, and budgets shared with the other shards so a configured pool
//! size, `max_db_connections` and `max_user_connections` hold for the whole process.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use pgtier_core::config::PoolMode;
use pgtier_core::metrics::CachePadded;
use pgtier_policy::ReplicaId;

use crate::control::ReplicaRouter;
use crate::io::slab::{ClientId, ServerId};
use crate::params::{Spellings, TrackedParams};

/// What makes two server connections interchangeable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The `[databases.NAME]` entry the client asked for.
    pub database: String,
    /// The role the server connection logs in as.
    pub user: String,
    /// The server; for a replica-set entry, the replica the session's lease pins it to.
    pub addr: SocketAddr,
    /// Untracked startup parameters (options, search_path, ...), sorted by name.
    pub startup_params: Vec<(String, String)>,
}

/// Index of a pool in this shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PoolId(pub u32);

/// How a pool's server logs in.
#[derive(Debug, Clone)]
pub struct ServerLogin {
    /// Database name sent to the server.
    pub dbname: String,
    /// Password for md5/SCRAM/cleartext, if known.
    pub password: Option<String>,
}

/// What a failed server login leaves behind until `server_login_retry` passes.
#[derive(Debug, Clone)]
pub struct LoginFailure {
    /// The ErrorResponse (or pgtier's own) every client of the pool gets meanwhile.
    pub error: Bytes,
    pub retry_at: Instant,
}

pub struct Pool {
    pub key: PoolKey,
    pub login: ServerLogin,
    pub mode: PoolMode,
    /// Servers this pool may have open across all shards.
    pub max_size: u32,
    pub min_size: u32,
    /// Idle servers, most recently used last (reused first: warm caches).
    pub idle: Vec<ServerId>,
    /// Clients waiting for a server, oldest first. May hold stale ids (clients that left).
    pub waiters: VecDeque<ClientId>,
    /// Servers of this pool on this shard (connecting, idle or busy).
    pub open_here: u32,
    /// Servers still connecting or logging in.
    pub connecting: u32,
    /// The server's ParameterStatus set from the first login, replayed to new clients.
    pub welcome: Option<Vec<(String, String)>>,
    /// The tracked subset of `welcome`.
    pub welcome_tracked: TrackedParams,
    /// What the servers made of clients' startup spellings of tracked parameters.
    pub spellings: Spellings,
    pub failure: Option<LoginFailure>,
    /// When this shard last asked the others to free an idle server of this pool.
    pub last_release_request: Option<Instant>,
    /// When this shard last asked the others to close an idle server under a full
    /// database or user cap.
    pub last_cap_request: Option<Instant>,
    /// A shard whose clients wait for this pool while its budget is spent here and every
    /// server of it here was busy: the next server that comes back goes to it.
    pub release_to: Option<usize>,
    /// Slots another shard handed over (budget unchanged) and this one has not used yet.
    granted: u32,
    /// `pump_pool` is running for this pool (a nested call leaves the work to it).
    pub pumping: bool,
    /// The replica this pool's servers run on, when its entry is a replica set: connection
    /// failures are reported to the router, and waiters move when the replica is Down.
    pub replica: Option<(Arc<ReplicaRouter>, ReplicaId)>,
    /// Extra servers allowed for a client that waited `reserve_pool_timeout`.
    pub reserve_size: u32,
    budget: Arc<AtomicU32>,
    /// Servers of this pool's database entry across users and shards (max_db_connections).
    pub database_cap: ConnectionCap,
    /// Servers of this pool's user across databases and shards (max_user_connections).
    pub user_cap: ConnectionCap,
}

/// Why a server could not be reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    Reserved,
    /// The pool's own size (plus the reserve, when allowed) is spent.
    PoolFull,
    /// `max_db_connections` is reached for the pool's database entry.
    DatabaseFull,
    /// `max_user_connections` is reached for the pool's user.
    UserFull,
}

/// A count of open servers shared by all shards and pools of one database entry or user,
/// alone on its cache line: touched only when a server opens or closes.
#[derive(Debug, Clone)]
pub struct ConnectionCap {
    open: Arc<CachePadded<AtomicU32>>,
    /// 0 = unlimited (the count is still kept, so a reload can set a cap).
    pub max: u32,
}

impl ConnectionCap {
    fn try_take(&self) -> bool {
        let max = self.max;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (max == 0 || open < max).then_some(open + 1)
            })
            .is_ok()
    }

    fn give_back(&self, count: u32) {
        self.open.fetch_sub(count, Ordering::AcqRel);
    }

    /// Servers counted against this cap now.
    pub fn open(&self) -> u32 {
        self.open.load(Ordering::Acquire)
    }

    /// The cap is set and reached.
    pub fn is_full(&self) -> bool {
        self.max > 0 && self.open() >= self.max
    }
}

impl Pool {
    /// Takes one slot of the cross-shard budget (a slot handed over first), if any is left,
    /// together with one of its database entry's and user's caps. `with_reserve` lets the
    /// pool grow by `reserve_size` over its size.
    pub fn try_reserve_server(&mut self, with_reserve: bool) -> Reservation {
        if self.granted > 0 {
            // A handed-over slot carries its database and user counts with it.
            self.granted -= 1;
            self.open_here += 1;
            return Reservation::Reserved;
        }
        let max = self.max_size + if with_reserve { self.reserve_size } else { 0 };
        let taken = self
            .budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .is_ok();
        if !taken {
            return Reservation::PoolFull;
        }
        if !self.database_cap.try_take() {
            self.budget.fetch_sub(1, Ordering::AcqRel);
            return Reservation::DatabaseFull;
        }
        if !self.user_cap.try_take() {
            self.database_cap.give_back(1);
            self.budget.fetch_sub(1, Ordering::AcqRel);
            return Reservation::UserFull;
        }
        self.open_here += 1;
        Reservation::Reserved
    }

    /// Gives back the slot of a server that closed.
    pub fn release_server_slot(&mut self) {
        debug_assert!(self.open_here > 0);
        self.open_here = self.open_here.saturating_sub(1);
        self.budget.fetch_sub(1, Ordering::AcqRel);
        self.database_cap.give_back(1);
        self.user_cap.give_back(1);
    }

    /// The slot of a server that closed goes to another shard (`adopt_slot` there) instead
    /// of back to the budget, so no shard in between can take it.
    pub fn give_slot_away(&mut self) {
        debug_assert!(self.open_here > 0);
        self.open_here = self.open_here.saturating_sub(1);
    }

    /// Takes a slot another shard gave away; the next `try_reserve_server` uses it.
    pub fn adopt_slot(&mut self) {
        self.granted += 1;
    }

    /// Gives handed-over slots nobody here needed back to the budget.
    pub fn return_unused_slots(&mut self) {
        if self.granted > 0 {
            self.budget.fetch_sub(self.granted, Ordering::AcqRel);
            self.database_cap.give_back(self.granted);
            self.user_cap.give_back(self.granted);
            self.granted = 0;
        }
    }

    /// The servers this shard may keep while another shard's clients wait for the pool: an
    /// even split of the pool size (or of a smaller database or user cap), rounded up.
    pub fn fair_share(&self, shards: usize) -> u32 {
        let mut most = self.max_size;
        for cap in [self.database_cap.max, self.user_cap.max] {
            if cap > 0 {
                most = most.min(cap);
            }
        }
        most.div_ceil(shards.max(1) as u32)
    }

    /// Servers of this pool open across all shards.
    pub fn open_everywhere(&self) -> u32 {
        self.budget.load(Ordering::Acquire)
    }
}

/// Budgets shared by all shards: one per pool key, one per database entry and one per user;
/// consulted only when a shard creates a pool (or gives back a slot it had no pool for).
#[derive(Default)]
pub struct PoolBudgets {
    budgets: Mutex<HashMap<PoolKey, Arc<AtomicU32>>>,
    databases: Mutex<HashMap<String, Arc<CachePadded<AtomicU32>>>>,
    users: Mutex<HashMap<String, Arc<CachePadded<AtomicU32>>>>,
}

fn shared_count<K: std::hash::Hash + Eq + Clone, V: Default + Clone>(
    map: &Mutex<HashMap<K, V>>,
    key: &K,
) -> V {
    let mut map = match map.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    map.entry(key.clone()).or_default().clone()
}

impl PoolBudgets {
    fn budget(&self, key: &PoolKey) -> Arc<AtomicU32> {
        shared_count(&self.budgets, key)
    }

    fn cap(
        map: &Mutex<HashMap<String, Arc<CachePadded<AtomicU32>>>>,
        name: &str,
        max: u32,
    ) -> ConnectionCap {
        ConnectionCap {
            open: shared_count(map, &name.to_string()),
            max,
        }
    }

    /// Gives a slot handed to a shard without that pool back to the budgets.
    pub fn give_back(&self, key: &PoolKey) {
        self.budget(key).fetch_sub(1, Ordering::AcqRel);
        Self::cap(&self.databases, &key.database, 0).give_back(1);
        Self::cap(&self.users, &key.user, 0).give_back(1);
    }
}

/// The per-pool limits a shard reads from the configuration when it creates a pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolLimits {
    pub max_size: u32,
    pub min_size: u32,
    pub reserve_size: u32,
    /// max_db_connections of the entry (0 = unlimited).
    pub max_db_connections: u32,
    /// max_user_connections of the server user (0 = unlimited).
    pub max_user_connections: u32,
    /// Client spellings of tracked parameters the pool remembers.
    pub max_spellings: usize,
}

/// All pools of one shard.
pub struct Pools {
    by_key: HashMap<PoolKey, PoolId>,
    pools: Vec<Pool>,
    budgets: Arc<PoolBudgets>,
}

impl Pools {
    pub fn new(budgets: Arc<PoolBudgets>) -> Pools {
        Pools {
            by_key: HashMap::new(),
            pools: Vec::new(),
            budgets,
        }
    }

    pub fn find(&self, key: &PoolKey) -> Option<PoolId> {
        self.by_key.get(key).copied()
    }

    pub fn len(&self) -> usize {
        self.pools.len()
    }

    pub fn create(
        &mut self,
        key: PoolKey,
        login: ServerLogin,
        mode: PoolMode,
        limits: PoolLimits,
    ) -> PoolId {
        let id = PoolId(self.pools.len() as u32);
        let budget = self.budgets.budget(&key);
        let database_cap = PoolBudgets::cap(
            &self.budgets.databases,
            &key.database,
            limits.max_db_connections,
        );
        let user_cap =
            PoolBudgets::cap(&self.budgets.users, &key.user, limits.max_user_connections);
        self.pools.push(Pool {
            key: key.clone(),
            login,
            mode,
            max_size: limits.max_size,
            min_size: limits.min_size,
            reserve_size: limits.reserve_size,
            database_cap,
            user_cap,
            idle: Vec::new(),
            waiters: VecDeque::new(),
            open_here: 0,
            connecting: 0,
            welcome: None,
            welcome_tracked: TrackedParams::default(),
            spellings: Spellings::with_limit(limits.max_spellings),
            failure: None,
            last_release_request: None,
            last_cap_request: None,
            release_to: None,
            granted: 0,
            pumping: false,
            replica: None,
            budget,
        });
        self.by_key.insert(key, id);
        id
    }

    pub fn get(&self, id: PoolId) -> &Pool {
        &self.pools[id.0 as usize]
    }

    pub fn get_mut(&mut self, id: PoolId) -> &mut Pool {
        &mut self.pools[id.0 as usize]
    }

    pub fn ids(&self) -> impl Iterator<Item = PoolId> + use<> {
        (0..self.pools.len() as u32).map(PoolId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PoolKey {
        PoolKey {
            database: "db".into(),
            user: "u".into(),
            addr: "127.0.0.1:5432".parse().expect("addr"),
            startup_params: vec![],
        }
    }

    fn size(max_size: u32) -> PoolLimits {
        PoolLimits {
            max_size,
            ..PoolLimits::default()
        }
    }

    fn reserve(pools: &mut Pools, id: PoolId) -> bool {
        pools.get_mut(id).try_reserve_server(false) == Reservation::Reserved
    }

    #[test]
    fn database_and_user_caps_hold_across_pools_and_shards() {
        let budgets = Arc::new(PoolBudgets::default());
        let mut shard_a = Pools::new(budgets.clone());
        let mut shard_b = Pools::new(budgets);
        let login = ServerLogin {
            dbname: "db".into(),
            password: None,
        };
        let capped = PoolLimits {
            max_size: 5,
            max_db_connections: 2,
            max_user_connections: 3,
            ..PoolLimits::default()
        };
        let mut other_user = key();
        other_user.user = "v".into();
        let a = shard_a.create(key(), login.clone(), PoolMode::Transaction, capped);
        let b = shard_b.create(other_user, login.clone(), PoolMode::Transaction, capped);
        assert!(reserve(&mut shard_a, a));
        assert!(reserve(&mut shard_b, b));
        assert_eq!(
            shard_a.get_mut(a).try_reserve_server(false),
            Reservation::DatabaseFull
        );
        // A failed reservation leaves no count behind.
        assert_eq!(shard_a.get(a).open_everywhere(), 1);
        shard_b.get_mut(b).release_server_slot();
        assert!(reserve(&mut shard_a, a));
        assert_eq!(shard_a.get(a).database_cap.open(), 2);
        // The user cap spans databases.
        let mut elsewhere = key();
        elsewhere.database = "other".into();
        let c = shard_b.create(elsewhere, login, PoolMode::Transaction, capped);
        assert!(reserve(&mut shard_b, c));
        assert_eq!(
            shard_b.get_mut(c).try_reserve_server(false),
            Reservation::UserFull
        );
        // While another shard waits, a shard keeps its share of the smallest limit.
        assert_eq!(shard_a.get(a).fair_share(2), 1);
    }

    #[test]
    fn the_reserve_lets_a_pool_grow_past_its_size() {
        let mut pools = Pools::new(Arc::new(PoolBudgets::default()));
        let login = ServerLogin {
            dbname: "db".into(),
            password: None,
        };
        let limits = PoolLimits {
            max_size: 1,
            reserve_size: 1,
            ..PoolLimits::default()
        };
        let id = pools.create(key(), login, PoolMode::Transaction, limits);
        assert!(reserve(&mut pools, id));
        assert!(!reserve(&mut pools, id));
        assert_eq!(
            pools.get_mut(id).try_reserve_server(true),
            Reservation::Reserved
        );
        assert_eq!(
            pools.get_mut(id).try_reserve_server(true),
            Reservation::PoolFull
        );
    }

    #[test]
    fn budget_is_shared_across_shards() {
        let budgets = Arc::new(PoolBudgets::default());
        let mut shard_a = Pools::new(budgets.clone());
        let mut shard_b = Pools::new(budgets);
        let login = ServerLogin {
            dbname: "db".into(),
            password: None,
        };
        let a = shard_a.create(key(), login.clone(), PoolMode::Transaction, size(2));
        let b = shard_b.create(key(), login, PoolMode::Transaction, size(2));
        assert!(reserve(&mut shard_a, a));
        assert!(reserve(&mut shard_b, b));
        assert!(!reserve(&mut shard_a, a));
        shard_b.get_mut(b).release_server_slot();
        assert!(reserve(&mut shard_a, a));
        assert_eq!(shard_a.get(a).open_here, 2);
    }

    #[test]
    fn a_slot_given_away_reaches_only_the_shard_it_was_given_to() {
        let budgets = Arc::new(PoolBudgets::default());
        let mut shard_a = Pools::new(budgets.clone());
        let mut shard_b = Pools::new(budgets);
        let login = ServerLogin {
            dbname: "db".into(),
            password: None,
        };
        let a = shard_a.create(key(), login.clone(), PoolMode::Transaction, size(1));
        let b = shard_b.create(key(), login, PoolMode::Transaction, size(1));
        assert!(reserve(&mut shard_a, a));
        // A's server closes for B: A cannot take the slot back, B can.
        shard_a.get_mut(a).give_slot_away();
        assert!(!reserve(&mut shard_a, a));
        shard_b.get_mut(b).adopt_slot();
        assert!(reserve(&mut shard_b, b));
        assert_eq!(shard_b.get(b).open_everywhere(), 1);
        // A slot handed over but not needed goes back to the budget.
        shard_b.get_mut(b).release_server_slot();
        assert!(reserve(&mut shard_a, a));
        shard_a.get_mut(a).give_slot_away();
        shard_b.get_mut(b).adopt_slot();
        shard_b.get_mut(b).return_unused_slots();
        assert_eq!(shard_b.get(b).open_everywhere(), 0);
        assert_eq!(shard_a.get(a).fair_share(2), 1);
    }
}
