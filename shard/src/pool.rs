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

use crate::io::slab::{ClientId, ServerId};
use crate::params::TrackedParams;

/// What makes two server connections interchangeable.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The `[databases.NAME]` entry the client asked for.
    pub database: String,
    /// The role the server connection logs in as.
    pub user: String,
    /// The server (a later change picks a replica per session; its pool is keyed by address).
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
    pub failure: Option<LoginFailure>,
    /// When this shard last asked the others to free an idle server of this pool.
    pub last_release_request: Option<Instant>,
    budget: Arc<AtomicU32>,
}

impl Pool {
    /// Takes one slot of the cross-shard budget, if any is left.
    pub fn try_reserve_server(&mut self) -> bool {
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
            failure: None,
            last_release_request: None,
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
}
