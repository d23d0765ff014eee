//! Messages between shards, carried by each shard's mailbox. The engine both produces them
//! (`Action::Post`) and consumes them (`Engine::handle_command`); the mailbox itself belongs
//! to the driver.

use std::sync::Arc;

use pgtier_core::config::Config;
use pgtier_pool::PoolKey;

use crate::gates::{PauseSignal, ShutdownMode};
use crate::listing::ShardListing;
use crate::server::moved::{DetachedSocket, MovedServer};
use crate::userlist::UserList;

/// A message to one shard.
#[derive(Debug)]
pub enum Command {
    /// A CancelRequest that arrived on another shard; the key says it belongs here.
    Cancel {
        pid: u32,
        secret: u32,
    },
    /// A new validated configuration and auth file (SIGHUP).
    Reload {
        config: Arc<Config>,
        users: Arc<UserList>,
        /// The TLS configurations built from the files the new settings name.
        tls: crate::tls::TlsSides,
        /// A console session waits until every shard applied it (RELOAD, SET).
        pending: Option<Arc<crate::reconfigure::Pending>>,
    },
    Shutdown(ShutdownMode),
    /// SIGUSR1 or SIGUSR2, posted to one running shard: it decides with its gates (every
    /// shard holds the same ones), logs PgBouncer's line and posts the op to every shard as
    /// `Apply`.
    Signal(PauseSignal),
    /// An op every shard applies with no console session waiting for it (a signal's PAUSE
    /// or RESUME).
    Apply(crate::gates::AdminOp),
    /// Shard `from` has clients waiting for `key` and the pool budget is spent: end a server
    /// of that pool here for it (see `pgtier_pool::PoolSlice::release_for`).
    ReleaseIdle {
        key: Arc<PoolKey>,
        from: usize,
    },
    /// Shard `from` would open a server of `key` for its clients and has none idle: lend it
    /// an idle server of that pool from here, moved whole, or answer `LendRefused`
    /// (see `pgtier_pool::PoolSlice::lend`).
    LendIdle {
        key: Arc<PoolKey>,
        from: usize,
    },
    /// The shard asked by `LendIdle` has no idle server of `key` it can move: open one.
    LendRefused {
        key: Arc<PoolKey>,
    },
    /// A server slot of `key` was handed to this shard (the budgets still count it).
    SlotGranted {
        key: Arc<PoolKey>,
    },
    /// A clean idle server moved here whole, for clients waiting on its pool (or idle): its
    /// detached socket and what its backend is (`crate::server::moved`). Its slot is counted
    /// in the budgets already and comes with it.
    ServerMoved {
        server: Box<MovedServer>,
        socket: DetachedSocket,
    },
    /// Another shard has clients waiting under the full `max_db_connections` of `database`
    /// or `max_user_connections` of `user`: close one idle server under that cap here if
    /// nobody here waits for its pool.
    ReleaseIdleUnderCap {
        database: Option<Arc<str>>,
        user: Option<Arc<str>>,
    },
    /// A client's statement on another shard needs `database` (a PostgreSQL database name)
    /// free of other sessions (`DROP DATABASE`...): close the idle servers of it here.
    VacateDatabase {
        database: Arc<str>,
    },
    /// An admin session on shard `from` asks for this shard's client and pool rows (and for
    /// its counts to be folded into the shared statistics first).
    ListSessions {
        from: usize,
        request_id: u64,
    },
    /// This shard's rows for the listing `request_id`.
    Listed {
        request_id: u64,
        part: Box<ShardListing>,
    },
    /// An admin session on shard `from` ran a process-controlling command: apply it here
    /// and answer with `AdminDone` once its condition holds here.
    Admin {
        from: usize,
        request_id: u64,
        op: crate::gates::AdminOp,
    },
    /// This shard's answer to the admin command `request_id` (`error`: refused here).
    AdminDone {
        request_id: u64,
        error: Option<crate::services::Refusal>,
    },
}
