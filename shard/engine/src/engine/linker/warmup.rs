//! Pools kept warm before any client comes. A database entry with a forced `user` has pool
//! keys known at start: the entry, that user, its server (or each of its replicas) and no
//! startup parameters. With `min_pool_size` above zero, every shard registers those pools
//! itself and keeps them registered, so the housekeeping pass opens their minimum
//! (`pgtier_pool::PoolSlice::collect_opens`) without waiting for a client: each shard opens
//! its share ([`pgtier_pool::PoolSlice::warm_share`]), so the shards together open
//! `min_pool_size` servers, not `workers` times it. A replica that goes Down has its warm
//! pools drained (the servers are gone, and a drained pool forgets its login failure memo);
//! once the replica is up again the next pass registers fresh pools, which warm up again.
//! Entries without a forced user are warmed as PgBouncer does: once a client made their pool
//! exist, to the whole `min_pool_size` from the shard holding it. A forced user whose only
//! credential is a SCRAM secret waits for a client of that user to prove its key.

use pgtier_core::config::{Config, ServerSet};
use pgtier_pool::{PoolId, PoolKey, PoolSlice, ServerTarget, StartupProfile};

use super::Linker;
use crate::engine::clients::Logins;
use crate::engine::env::Env;
use crate::ids::{ClientId, ServerId};
use crate::services::Routing;

/// One pool this shard keeps warm.
#[derive(Debug)]
pub(in crate::engine) struct WarmPool {
    key: PoolKey,
    /// This shard's registration of it, while it holds one.
    pool: Option<PoolId>,
}

/// The pools the configuration says to keep warm: entries with a forced `user` and a
/// `min_pool_size`; for a replica set, one per replica. (A reader entry's primary pool is
/// warmed once a client made it exist.)
pub(in crate::engine) fn warm_pools(config: &Config) -> Vec<WarmPool> {
    let mut warm = Vec::new();
    for (name, db) in &config.databases {
        let Some(user) = db.user.as_deref() else {
            continue;
        };
        if db.min_pool_size == 0 {
            continue;
        }
        let targets: Vec<ServerTarget> = match &db.servers {
            ServerSet::Single(_) | ServerSet::Hosts(_) => vec![ServerTarget::Primary],
            ServerSet::Replicas(set) => set
                .replicas
                .iter()
                .map(|addr| ServerTarget::Replica(*addr))
                .collect(),
        };
        for target in targets {
            let key = PoolKey::new(
                name.as_str().into(),
                user.into(),
                target,
                StartupProfile::default(),
            );
            warm.push(WarmPool { key, pool: None });
        }
    }
    warm
}

impl Linker {
    /// Registers the warm pools this shard does not hold (at start, after a reload, once a
    /// Down replica is up again) and drains those of Down replicas. Runs before the
    /// housekeeping pass opens what pools want.
    pub(in crate::engine) fn keep_pools_warm(
        &mut self,
        env: &Env,
        routing: &dyn Routing,
        logins: &Logins,
        now: std::time::Instant,
    ) {
        let shards = env.shared().shards();
        let mut warm = std::mem::take(&mut self.warm);
        for entry in &mut warm {
            let down = match entry.key.target {
                ServerTarget::Replica(addr) => routing.is_down(&entry.key.database, addr),
                ServerTarget::Primary => false,
            };
            if let Some(id) = entry.pool {
                let current = !self.pools.is_draining(id) && self.pools.key(id) == Some(&entry.key);
                if current && !down {
                    continue;
                }
                if down {
                    self.pools.drain(id);
                }
                self.pools.unregister(id);
                entry.pool = None;
            }
            if down || !can_log_in_alone(env, logins, &entry.key) {
                continue;
            }
            let limits = env.pool_limits(&entry.key);
            // Never evicts another pool for it: a warm pool waits for room like any other.
            if let Ok(id) = self.pools.register(&entry.key, &limits, now) {
                let share = PoolSlice::<ServerId, ClientId>::warm_share(
                    limits.min_pool_size,
                    env.shard(),
                    shards,
                );
                self.pools.keep_warm(id, share);
                entry.pool = Some(id);
            }
        }
        self.warm = warm;
    }

    /// A reload may change which pools are warm and their minimum: every warm registration
    /// is dropped, and the next housekeeping pass registers the new set.
    pub(in crate::engine) fn reset_warm_pools(&mut self, config: &Config) {
        for entry in std::mem::take(&mut self.warm) {
            if let Some(id) = entry.pool {
                self.pools.unregister(id);
            }
        }
        self.warm = warm_pools(config);
    }
}

/// Whether a server of `key` can log in before any client did: not when the only
/// credential of its user is a SCRAM secret from the auth file, whose ClientKey pgtier
/// learns from a client's proof (`credentials::server_login`). Such a pool is warmed
/// once a client of that user has logged in (the next pass sees the key); trying
/// earlier would fail, and the failed login's memo would refuse that very client.
fn can_log_in_alone(env: &Env, logins: &Logins, key: &PoolKey) -> bool {
    let configured = env
        .config()
        .database(&key.database)
        .and_then(|db| db.password.clone());
    let stored = configured.or_else(|| env.users().get(&key.server_user));
    match stored {
        Some(secret) if crate::credentials::is_scram_secret(&secret) => {
            logins.secrets().client_key(&key.server_user).is_some()
        }
        _ => true,
    }
}
