//! Vacating a database for a client's DDL (the linker's part: which pools, which idle servers, and their close). The
//! pooler never blocks a client's own database DDL. PostgreSQL refuses `DROP DATABASE x`, `ALTER
//! DATABASE x RENAME`, `ALTER DATABASE x SET TABLESPACE` and `CREATE DATABASE y TEMPLATE x` (55006)
//! while other sessions are connected to `x`, and waits about 5 s for them to leave first. Through
//! pgtier those sessions are often only its idle pooled servers of `x`, left by clients that have
//! gone. So when forwarding finds such a statement (`pgtier_wire::database_ddl`), every shard
//! closes its idle servers of `x` (Terminate, then the close) before the statement leaves this
//! shard: the backends are gone within PostgreSQL's wait. A server still finishing with a departed
//! client closes at its release instead of going back. Servers in use by other clients stay:
//! PostgreSQL's answer about them is the true one.
//!
//! `x` is the PostgreSQL database the servers are connected to (an entry's `dbname`), not
//! the entry's name. The warmup of the emptied pools (`min_pool_size`) waits
//! [`WARMUP_HOLD`], so it does not connect to `x` again while PostgreSQL waits; clients of
//! `x` that ask for a server still get one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtier_core::config::Config;
use pgtier_pool::{Closing, PoolId, PoolKey};

use super::Linker;
use crate::action::{Action, Outbox};
use crate::command::Command;
use crate::engine::env::Env;
use crate::engine::servers::ServerTable;
use crate::ids::ServerId;

/// How long the warmup of a vacated pool waits: longer than PostgreSQL waits for other
/// sessions of the database to end (5 s), so a refill never races the statement.
pub(in crate::engine) const WARMUP_HOLD: Duration = Duration::from_secs(10);

/// The PostgreSQL database the servers of `key` connect to: the entry's `dbname`, or the
/// client's database name for the fallback entry (`*`) and entries gone from the
/// configuration.
pub(in crate::engine) fn server_dbname<'a>(config: &'a Config, key: &'a PoolKey) -> &'a str {
    config
        .database(&key.database)
        .map_or(&*key.database, |db| db.server_dbname(&key.database))
}

impl Linker {
    /// This shard's pools of `database` give their idle servers up (the servers to retire)
    /// and hold their warmup for [`WARMUP_HOLD`]. `None` when no pool connects to it.
    pub(in crate::engine) fn vacate(
        &mut self,
        config: &Config,
        database: &str,
        now: Instant,
    ) -> Option<(Vec<PoolId>, Vec<Closing<ServerId>>)> {
        let pools: Vec<PoolId> = self
            .pools
            .pools()
            .filter(|(_, key, _)| server_dbname(config, key) == database)
            .map(|(pool, _, _)| pool)
            .collect();
        if pools.is_empty() {
            return None;
        }
        let warmup_after = now + WARMUP_HOLD;
        let mut closing = Vec::new();
        for &pool in &pools {
            self.pools.vacate(pool, warmup_after, &mut closing);
        }
        Some((pools, closing))
    }

    /// A client's statement about to be forwarded needs these databases free: every shard
    /// (this one at once, the others through their mailboxes) closes its idle servers of
    /// them.
    pub(in crate::engine) fn vacate_databases(
        &mut self,
        servers: &mut ServerTable,
        env: &Env,
        targets: Vec<pgtier_wire::database_ddl::Target>,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        for target in targets {
            tracing::info!(
                shard = env.shard(),
                database = %target.database,
                statement = target.command.as_str(),
                "a client's statement needs the database free of other sessions: \
                 closing pgtier's idle servers of it on every shard"
            );
            let database: Arc<str> = target.database.into();
            for shard in 0..env.shared().shards() {
                if shard == env.shard() {
                    self.vacate_database(servers, env, &database, now, outbox);
                } else {
                    outbox.push(Action::Post {
                        shard,
                        command: Command::VacateDatabase {
                            database: Arc::clone(&database),
                        },
                    });
                }
            }
        }
    }

    /// This shard's part: its idle servers of `database` close now, those being released
    /// close once released, and the warmup of their pools waits.
    pub(in crate::engine) fn vacate_database(
        &mut self,
        servers: &mut ServerTable,
        env: &Env,
        database: &str,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        let Some((pools, closing)) = self.vacate(env.config(), database, now) else {
            return;
        };
        let closed = closing.len();
        for server in closing {
            servers.retire(server, now, outbox);
        }
        let releasing = servers.close_when_released(&pools);
        tracing::info!(
            shard = env.shard(),
            database,
            closed,
            releasing,
            "closed idle servers of the database for a client's statement"
        );
    }
}
