//! Limits above a single pool: `max_db_connections` and `max_user_connections` (shared
//! counts per database entry and per server user, see `pool::ConnectionCap`) and the
//! reserve a pool may use for a client that waited `reserve_pool_timeout`. A pool stopped by
//! a cap makes room the way PgBouncer does, by ending an idle server of another pool under
//! the same cap, here or on another shard.

use std::sync::Arc;

use tracing::debug;

use crate::client::ClientState;
use crate::io::ring::Ring;
use crate::io::slab::ClientId;
use crate::mailbox::Command;
use crate::pool::PoolId;
use crate::shard::{HOUSEKEEPING_PERIOD, Shard};

impl<R: Ring> Shard<R> {
    /// `reserve_pool_size` may be used once the oldest waiter waited `reserve_pool_timeout`.
    pub(crate) fn may_use_reserve(&self, pool_id: PoolId, waiter: ClientId) -> bool {
        if self.pools.get(pool_id).reserve_size == 0 {
            return false;
        }
        let timeout = self.config.pgtier.reserve_pool_timeout.duration();
        match self.clients.get(waiter.0).map(|c| &c.state) {
            Some(ClientState::WaitingForServer { since }) => {
                self.now.saturating_duration_since(*since) >= timeout
            }
            _ => false,
        }
    }

    /// A database or user cap stops `pool_id` from opening a server: ends an idle server of
    /// another pool of this shard under the same full cap (its counts come back once its
    /// backend is gone, see `pump_pools_under_caps_of`). False when there is none.
    pub(crate) fn evict_idle_under_cap(&mut self, pool_id: PoolId) -> bool {
        let pool = self.pools.get(pool_id);
        let (database, user) = (pool.key.database.clone(), pool.key.user.clone());
        let (database_full, user_full) = (pool.database_cap.is_full(), pool.user_cap.is_full());
        let victim = self.pools.ids().find_map(|other| {
            let other_pool = self.pools.get(other);
            let shares_cap = (database_full && other_pool.key.database == database)
                || (user_full && other_pool.key.user == user);
            (other != pool_id && shares_cap)
                .then(|| other_pool.idle.first().copied())
                .flatten()
        });
        let Some(victim) = victim else { return false };
        debug!(
            shard = self.index,
            "ending an idle server to make room under a cap"
        );
        self.leave_for(victim, None);
        true
    }

    /// A server of `pool_id` closed and gave its database and user counts back: pools of
    /// this shard under the same caps whose clients wait may open a server now. Only for
    /// capped pools, and only when a server closes.
    pub(crate) fn pump_pools_under_caps_of(&mut self, pool_id: PoolId) {
        let pool = self.pools.get(pool_id);
        let (database_capped, user_capped) = (pool.database_cap.max > 0, pool.user_cap.max > 0);
        if !database_capped && !user_capped {
            return;
        }
        let (database, user) = (pool.key.database.clone(), pool.key.user.clone());
        let waiting: Vec<PoolId> = self
            .pools
            .ids()
            .filter(|other| {
                let other_pool = self.pools.get(*other);
                *other != pool_id
                    && !other_pool.waiters.is_empty()
                    && ((database_capped && other_pool.key.database == database)
                        || (user_capped && other_pool.key.user == user))
            })
            .collect();
        for other in waiting {
            self.pump_pool(other);
        }
    }

    /// A database or user cap is reached and no server under it is idle here: ask the other
    /// shards to close an idle one (at most once per housekeeping period; the waiters here
    /// retry at housekeeping).
    pub(crate) fn ask_other_shards_to_free_cap(&mut self, pool_id: PoolId) {
        if self.shared.mailboxes.len() < 2 {
            return;
        }
        let pool = self.pools.get_mut(pool_id);
        let recent = pool
            .last_cap_request
            .is_some_and(|at| self.now.saturating_duration_since(at) < HOUSEKEEPING_PERIOD);
        if recent {
            return;
        }
        pool.last_cap_request = Some(self.now);
        let database: Option<Arc<str>> = pool
            .database_cap
            .is_full()
            .then(|| pool.key.database.as_str().into());
        let user: Option<Arc<str>> = pool
            .user_cap
            .is_full()
            .then(|| pool.key.user.as_str().into());
        for (index, mailbox) in self.shared.mailboxes.iter().enumerate() {
            if index != self.index {
                let command = Command::ReleaseIdleUnderCap {
                    database: database.clone(),
                    user: user.clone(),
                };
                if mailbox.post(command).is_err() {
                    debug!("cap release request dropped: mailbox full");
                }
            }
        }
    }

    /// Another shard waits under a full database or user cap: close one idle server under
    /// it whose pool has no waiters here.
    pub(crate) fn release_idle_under_cap(&mut self, database: Option<&str>, user: Option<&str>) {
        let victim = self.pools.ids().find_map(|pool_id| {
            let pool = self.pools.get(pool_id);
            let matches = database.is_some_and(|d| d == pool.key.database)
                || user.is_some_and(|u| u == pool.key.user);
            let waiting_here = pool.waiters.iter().any(|w| self.is_waiting(*w));
            (matches && !waiting_here)
                .then(|| pool.idle.first().copied())
                .flatten()
        });
        if let Some(victim) = victim {
            debug!(
                shard = self.index,
                "ending an idle server for another shard's cap"
            );
            self.leave_for(victim, None);
        }
    }
}
