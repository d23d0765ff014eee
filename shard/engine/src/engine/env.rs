//! What every part of the shard's engine reads and none changes between reloads: the
//! shard's index, the configuration and user list, the limits derived from them, the
//! state shared with the other shards, and the time the engine was made.

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use pgtier_core::config::{Config, WaiterPolicy};
use pgtier_pool::{PoolKey, PoolLimits, WaitOrder};

use crate::settings::Limits;
use crate::shared::Shared;
use crate::userlist::UserList;

/// The shard's settings and shared state.
pub(crate) struct Env {
    /// This shard's index; cancel secrets carry it.
    shard: usize,
    config: Arc<Config>,
    users: Arc<UserList>,
    limits: Limits,
    shared: Arc<Shared>,
    /// The time of creation, monotonic and wall clock (for the console's timestamps).
    started: (Instant, SystemTime),
}

impl Env {
    pub(super) fn new(
        shard: usize,
        config: Arc<Config>,
        users: Arc<UserList>,
        shared: Arc<Shared>,
        started: (Instant, SystemTime),
    ) -> Env {
        Env {
            shard,
            limits: Limits::from_config(&config),
            config,
            users,
            shared,
            started,
        }
    }

    /// This shard's index; cancel secrets carry it.
    pub(super) fn shard(&self) -> usize {
        self.shard
    }

    pub(super) fn config(&self) -> &Arc<Config> {
        &self.config
    }

    /// This process's `peer_id` (0: no peering; the configuration keeps it in range).
    pub(super) fn peer_id(&self) -> u16 {
        u16::try_from(self.config.pgtier.peer_id).unwrap_or(0)
    }

    pub(super) fn users(&self) -> &Arc<UserList> {
        &self.users
    }

    /// The limits derived from the configuration.
    pub(super) fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The state shared with the other shards.
    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A reload: the new configuration and user list, and the limits derived anew.
    pub(super) fn reload(&mut self, config: Arc<Config>, users: Arc<UserList>) {
        self.limits = Limits::from_config(&config);
        self.config = config;
        self.users = users;
    }

    /// Whether `new` changes how servers are connected to over TLS (PgBouncer's rule: any
    /// `server_tls_*` setting; then every server is recycled, so none keeps weaker or
    /// stale TLS settings).
    pub(super) fn server_tls_differs(&self, new: &Config) -> bool {
        let (old, new) = (&self.config.pgtier, &new.pgtier);
        old.server_tls_sslmode != new.server_tls_sslmode
            || old.server_tls_protocols != new.server_tls_protocols
            || old.server_tls_ciphers != new.server_tls_ciphers
            || old.server_tls13_ciphers != new.server_tls13_ciphers
            || old.server_tls_ca_file != new.server_tls_ca_file
            || old.server_tls_cert_file != new.server_tls_cert_file
            || old.server_tls_key_file != new.server_tls_key_file
    }

    /// The pool limits of `key` from the current configuration.
    pub(super) fn pool_limits(&self, key: &PoolKey) -> PoolLimits {
        let settings = &self.config.pgtier;
        let db = self.config.database(&key.database);
        // PgBouncer's precedence: the server user's [users] value, the entry's, the global.
        let pool_size = self.config.pool_size(db, &key.server_user);
        let reserve = self.config.reserve_pool_size(db, &key.server_user);
        let max_db = db.map_or(settings.max_db_connections, |db| db.max_db_connections);
        let max_user = self.config.max_user_connections(&key.server_user);
        let budgets =
            self.shared
                .budgets
                .for_key(&budget_key(key), pool_size, reserve, max_db, max_user);
        PoolLimits {
            pool_budget: budgets.pool,
            shared_budgets: vec![budgets.database, budgets.user],
            min_pool_size: db.map_or(settings.min_pool_size, |db| db.min_pool_size),
            reserve_pool_timeout: (reserve > 0).then(|| settings.reserve_pool_timeout.duration()),
            server_idle_timeout: settings.server_idle_timeout.enabled(),
            server_lifetime: db
                .map_or(settings.server_lifetime, |db| db.server_lifetime)
                .duration(),
            max_spellings: self.limits.max_spellings_per_pool,
            ask_interval: crate::settings::HOUSEKEEPING_PERIOD,
            host_turn: budgets.host_turn,
            idle_board: self.shared.budgets.idle_board(key, self.shared.shards()),
            wait_order: match settings.waiter_policy {
                WaiterPolicy::Fifo => WaitOrder::Fifo,
                WaiterPolicy::Class => WaitOrder::Class {
                    aging: settings.waiter_aging.duration(),
                },
            },
        }
    }

    /// The wall-clock time of monotonic `now` (derived from the time of creation, so the
    /// engine reads no clock).
    pub(super) fn wall_time(&self, now: Instant) -> SystemTime {
        let since = now.saturating_duration_since(self.started.0);
        self.started.1 + since
    }

    pub(super) fn pool_mode_of(&self, database: &str, user: &str) -> pgtier_core::config::PoolMode {
        self.config
            .database(database)
            .map_or(self.config.pgtier.pool_mode, |db| {
                self.config.pool_mode(db, user)
            })
    }

    pub(super) fn login_retry_at(&self, now: std::time::Instant) -> std::time::Instant {
        now + self.config.pgtier.server_login_retry.duration()
    }

    /// What a console user may run: `None` for a user neither in `admin_users` nor in
    /// `stats_users` (with `auth_type = any` everyone is an admin, as in PgBouncer).
    pub(super) fn console_rights(&self, user: &str) -> Option<crate::services::ConsoleRights> {
        let settings = &self.config.pgtier;
        if settings.auth_type == pgtier_core::config::AuthType::Any || settings.is_admin(user) {
            Some(crate::services::ConsoleRights::Admin)
        } else if settings.is_stats_user(user) {
            Some(crate::services::ConsoleRights::Stats)
        } else {
            None
        }
    }
}

/// The key whose budgets a pool counts against: its own, but a replication pool's servers
/// count in the ordinary pool of its database, user and server, as in PgBouncer (where they
/// are one pool), so `pool_size` holds for both together.
fn budget_key(key: &PoolKey) -> std::borrow::Cow<'_, PoolKey> {
    if key.profile.is_replication() {
        std::borrow::Cow::Owned(PoolKey {
            profile: pgtier_pool::StartupProfile::default(),
            ..key.clone()
        })
    } else {
        std::borrow::Cow::Borrowed(key)
    }
}
