//! This shard's slice of the server pools: one `Pool` per exact key (database entry, user,
//! server address, startup parameters that change server behaviour), its idle servers, its
//! FIFO of waiting clients, and a budget shared with the other shards so a configured pool
//! size holds for the whole process.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use pgtier_core::config::PoolMode;
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
    budget: Arc<AtomicU32>,
}

impl Pool {
    /// Takes one slot of the cross-shard budget (a slot handed over first), if any is left.
    pub fn try_reserve_server(&mut self) -> bool {
        if self.granted > 0 {
            self.granted -= 1;
            self.open_here += 1;
            return true;
        }
        let max = self.max_size;
        let taken = self
            .budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
                (open < max).then_some(open + 1)
            })
            .is_ok();
        if taken {
            self.open_here += 1;
        }
        taken
    }

    /// Gives back the slot of a server that closed.
    pub fn release_server_slot(&mut self) {
        debug_assert!(self.open_here > 0);
        self.open_here = self.open_here.saturating_sub(1);
        self.budget.fetch_sub(1, Ordering::AcqRel);
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
            self.granted = 0;
        }
    }

    /// The servers this shard may keep while another shard's clients wait for the pool: an
    /// even split of the pool size, rounded up.
    pub fn fair_share(&self, shards: usize) -> u32 {
        self.max_size.div_ceil(shards.max(1) as u32)
    }

    /// Servers of this pool open across all shards.
    pub fn open_everywhere(&self) -> u32 {
        self.budget.load(Ordering::Acquire)
    }
}

/// Budgets shared by all shards, one per pool key; consulted only when a shard creates a pool.
#[derive(Default)]
pub struct PoolBudgets {
    budgets: Mutex<HashMap<PoolKey, Arc<AtomicU32>>>,
}

impl PoolBudgets {
    fn budget(&self, key: &PoolKey) -> Arc<AtomicU32> {
        let mut budgets = match self.budgets.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        budgets.entry(key.clone()).or_default().clone()
    }

    /// Gives a slot handed to a shard without that pool back to the budget.
    pub fn give_back(&self, key: &PoolKey) {
        self.budget(key).fetch_sub(1, Ordering::AcqRel);
    }
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
        max_size: u32,
        min_size: u32,
    ) -> PoolId {
        let id = PoolId(self.pools.len() as u32);
        let budget = self.budgets.budget(&key);
        self.pools.push(Pool {
            key: key.clone(),
            login,
            mode,
            max_size,
            min_size,
            idle: Vec::new(),
            waiters: VecDeque::new(),
            open_here: 0,
            connecting: 0,
            welcome: None,
            welcome_tracked: TrackedParams::default(),
            spellings: Spellings::default(),
            failure: None,
            last_release_request: None,
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

    #[test]
    fn budget_is_shared_across_shards() {
        let budgets = Arc::new(PoolBudgets::default());
        let mut shard_a = Pools::new(budgets.clone());
        let mut shard_b = Pools::new(budgets);
        let login = ServerLogin {
            dbname: "db".into(),
            password: None,
        };
        let a = shard_a.create(key(), login.clone(), PoolMode::Transaction, 2, 0);
        let b = shard_b.create(key(), login, PoolMode::Transaction, 2, 0);
        assert!(shard_a.get_mut(a).try_reserve_server());
        assert!(shard_b.get_mut(b).try_reserve_server());
        assert!(!shard_a.get_mut(a).try_reserve_server());
        shard_b.get_mut(b).release_server_slot();
        assert!(shard_a.get_mut(a).try_reserve_server());
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
        let a = shard_a.create(key(), login.clone(), PoolMode::Transaction, 1, 0);
        let b = shard_b.create(key(), login, PoolMode::Transaction, 1, 0);
        assert!(shard_a.get_mut(a).try_reserve_server());
        // A's server closes for B: A cannot take the slot back, B can.
        shard_a.get_mut(a).give_slot_away();
        assert!(!shard_a.get_mut(a).try_reserve_server());
        shard_b.get_mut(b).adopt_slot();
        assert!(shard_b.get_mut(b).try_reserve_server());
        assert_eq!(shard_b.get(b).open_everywhere(), 1);
        // A slot handed over but not needed goes back to the budget.
        shard_b.get_mut(b).release_server_slot();
        assert!(shard_a.get_mut(a).try_reserve_server());
        shard_a.get_mut(a).give_slot_away();
        shard_b.get_mut(b).adopt_slot();
        shard_b.get_mut(b).return_unused_slots();
        assert_eq!(shard_b.get(b).open_everywhere(), 0);
        assert_eq!(shard_a.get(a).fair_share(2), 1);
    }
}
