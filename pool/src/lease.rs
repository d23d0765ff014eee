//! The one owner of a server connection while it is outside the idle list. Checkout moves a
//! `Lease` out of the pool; checkin moves it back. A server is therefore always in exactly one
//! place: idle in its pool, or in the lease a session (or the engine, while ending a leaving
//! server) holds.

use std::time::Instant;

/// A server handle with the times the pool needs to age it.
#[derive(Debug, PartialEq, Eq)]
pub struct Lease<S> {
    /// The caller's handle (the shard's `ServerId`).
    pub server: S,
    /// When the server connection was opened (for `server_lifetime`).
    pub opened_at: Instant,
    /// When it last went idle (for `server_idle_timeout` and `server_check_delay`).
    pub idle_since: Instant,
}

/// Why the pool wants a server closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Connected longer than `server_lifetime`.
    Lifetime,
    /// Idle longer than `server_idle_timeout`, above `min_pool_size`.
    IdleTimeout,
    /// Another worker's clients wait for a slot of a budget this server holds.
    ReleaseRequested,
    /// The pool is draining (replica down, entry removed or changed by a reload).
    Draining,
    /// More servers are open than a (lowered) budget limit allows.
    OverLimit,
    /// Another pool of this worker waits under a full budget this server holds: a shared
    /// cap (`max_db_connections`, `max_user_connections`), or the pool size a replication
    /// pool shares with the ordinary pool of its database and user.
    SharedBudgetFull,
    /// This worker needed room for a new pool (`max_pools_per_worker`) and this server's pool
    /// was the least recently used one nobody was registered with.
    PoolEvicted,
    /// A client's statement needs the server's database free of other sessions (`DROP
    /// DATABASE`, `ALTER DATABASE ... RENAME`, `CREATE DATABASE ... TEMPLATE`).
    DatabaseVacated,
}

impl CloseReason {
    /// Whether the server is closed to make room for clients of another pool or worker
    /// (PgBouncer says "evicted").
    pub const fn is_eviction(self) -> bool {
        matches!(
            self,
            CloseReason::SharedBudgetFull | CloseReason::ReleaseRequested
        )
    }

    /// Text for logs and admin output.
    pub const fn as_str(self) -> &'static str {
        match self {
            CloseReason::Lifetime => "server_lifetime",
            CloseReason::IdleTimeout => "server_idle_timeout",
            CloseReason::ReleaseRequested => "release requested",
            CloseReason::Draining => "pool draining",
            CloseReason::OverLimit => "over pool size",
            CloseReason::SharedBudgetFull => "shared connection cap full",
            CloseReason::PoolEvicted => "pool evicted (max_pools_per_worker)",
            CloseReason::DatabaseVacated => "database dropped, renamed or copied",
        }
    }
}
