//! The linker's state: the pools of the shard (who waits for which server, which servers
//! are idle, the budgets), the servers being put back, the reads waiting for a replica to
//! catch up, the pools kept warm, and the pinned-pool check. The linker is the one place
//! that touches a client and a server together (`link.rs`).

use std::time::Instant;

use pgtier_pool::PoolSlice;

use crate::client::pins::PinnedCheck;
use crate::ids::{ClientId, ServerId};

/// What links clients and servers.
pub(crate) struct Linker {
    pub(super) pools: PoolSlice<ServerId, ClientId>,
    /// While a server is being put back: the servers released meanwhile, put back after it
    /// (`link::return_to_pool`). A hand-off can release at once (a waiter welcomed without
    /// a query), and a thousand such waiters would otherwise nest a thousand calls deep.
    pub(super) returning: Option<Vec<ServerId>>,
    /// Reader sessions whose read waits for a replica to catch up, and when they are next
    /// routed again (`reads.rs`).
    pub(super) read_waits: Vec<ClientId>,
    pub(super) next_read_recheck: Option<Instant>,
    /// Pools registered before any client, for `min_pool_size` (`warmup.rs`).
    pub(super) warm: Vec<super::warmup::WarmPool>,
    /// When a full pool was last checked for being held entirely by pinned clients (the
    /// check walks the clients, so it runs at most once a second, and warns once a minute).
    pub(super) pinned_check: PinnedCheck,
}

impl Linker {
    pub(super) fn new(
        pools: PoolSlice<ServerId, ClientId>,
        warm: Vec<super::warmup::WarmPool>,
    ) -> Linker {
        Linker {
            pools,
            returning: None,
            read_waits: Vec::new(),
            next_read_recheck: None,
            warm,
            pinned_check: PinnedCheck::default(),
        }
    }
}
