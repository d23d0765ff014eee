//! The linker's state: the pools of the shard (who waits for which server, which servers
//! are idle, the budgets), the servers being put back, the reads waiting for a replica to
//! catch up, the pools kept warm, and the pinned-pool check. The linker is the one place
//! that touches a client and a server together, in the steps here, which take the tables
//! they change and say what happened for the engine to route: `linking.rs` (a client that
//! needs a server, the link, forwarding, the release, the return to the pool), `to_client.rs`
//! (a server's output to its client), `opening.rs` (servers opened for pools, logins done
//! or failed), `joining.rs` (a logging-in client's welcome values and `auth_query`),
//! `vacate.rs` (databases vacated for a client's DDL).

pub(super) mod joining;
pub(super) mod linking;
pub(super) mod opening;
pub(super) mod to_client;
pub(super) mod vacate;
pub(super) mod warmup;

use std::sync::Arc;
use std::time::Instant;

use pgtier_pool::PoolSlice;

use crate::client::pins::PinnedCheck;
use crate::ids::{ClientId, ServerId};

/// What links clients and servers.
pub(crate) struct Linker {
    pools: PoolSlice<ServerId, ClientId>,
    /// While a server is being put back: the servers released meanwhile, put back after it
    /// (`Engine::return_to_pool`). A hand-off can release at once (a waiter welcomed without
    /// a query), and a thousand such waiters would otherwise nest a thousand calls deep.
    returning: Option<Vec<ServerId>>,
    /// Reader sessions whose read waits for a replica to catch up, and when they are next
    /// routed again (`read_routing.rs`).
    read_waits: Vec<ClientId>,
    next_read_recheck: Option<Instant>,
    /// Pools registered before any client, for `min_pool_size` (`warmup.rs`).
    warm: Vec<warmup::WarmPool>,
    /// When a full pool was last checked for being held entirely by pinned clients (the
    /// check walks the clients, so it runs at most once a second, and warns once a minute).
    pinned_check: PinnedCheck,
    /// Per reader entry whose primary pgtier elects: the election epoch this shard last
    /// acted on (`Engine::follow_primary_moves`); absent = 0, the first one.
    primary_epochs: Vec<(Arc<str>, u64)>,
}

impl Linker {
    pub(in crate::engine) fn new(
        pools: PoolSlice<ServerId, ClientId>,
        warm: Vec<warmup::WarmPool>,
    ) -> Linker {
        Linker {
            pools,
            returning: None,
            read_waits: Vec::new(),
            next_read_recheck: None,
            warm,
            pinned_check: PinnedCheck::default(),
            primary_epochs: Vec::new(),
        }
    }

    /// Records that `database`'s elected primary is at `epoch`; true when that is news to
    /// this shard (its servers on the old primary are to go).
    pub(in crate::engine) fn primary_moved(&mut self, database: &Arc<str>, epoch: u64) -> bool {
        match self
            .primary_epochs
            .iter_mut()
            .find(|(name, _)| name == database)
        {
            Some((_, seen)) if *seen == epoch => false,
            Some((_, seen)) => {
                *seen = epoch;
                true
            }
            None => {
                self.primary_epochs.push((Arc::clone(database), epoch));
                epoch != 0
            }
        }
    }

    pub(in crate::engine) fn pools(&self) -> &PoolSlice<ServerId, ClientId> {
        &self.pools
    }

    pub(in crate::engine) fn pools_mut(&mut self) -> &mut PoolSlice<ServerId, ClientId> {
        &mut self.pools
    }

    // ---- servers being put back ----

    /// A server is to be put back: false when another is being put back already (this
    /// one waits its turn, `next_return`); true when the caller puts it back now and then
    /// drains the others.
    pub(in crate::engine) fn begin_return(&mut self, id: ServerId) -> bool {
        if let Some(queued) = self.returning.as_mut() {
            queued.push(id);
            return false;
        }
        self.returning = Some(Vec::new());
        true
    }

    /// The next server released while one was being put back.
    pub(in crate::engine) fn next_return(&mut self) -> Option<ServerId> {
        self.returning.as_mut().and_then(|queued| queued.pop())
    }

    /// Every server released meanwhile was put back.
    pub(in crate::engine) fn end_returns(&mut self) {
        self.returning = None;
    }

    // ---- reads waiting for a replica ----

    /// Reader session `id`'s read waits for a replica to catch up; the recheck timer is
    /// armed for `at` unless it is already earlier.
    pub(in crate::engine) fn wait_for_replica(&mut self, id: ClientId, at: Instant) {
        self.read_waits.push(id);
        self.next_read_recheck.get_or_insert(at);
    }

    /// The recheck timer fired: the sessions whose reads waited.
    pub(in crate::engine) fn take_read_waits(&mut self) -> Vec<ClientId> {
        self.next_read_recheck = None;
        std::mem::take(&mut self.read_waits)
    }

    /// The next time waiting reads are routed again.
    pub(in crate::engine) fn read_recheck_at(&self) -> Option<Instant> {
        self.next_read_recheck
    }

    /// Whether a client of `pool`, whose login PostgreSQL refused, can still be served by
    /// another shard's idle server: one is on its way, or one can be asked for.
    pub(in crate::engine) fn lendable(&self, pool: pgtier_pool::PoolId, now: Instant) -> bool {
        let pools = self.pools();
        pools.borrowing(pool) || pools.borrow_from(pool, now).is_some()
    }

    /// The memoed login failure of a pool whose clients must get it now (not on a replica,
    /// whose waiters are re-routed instead): one that stands while this shard holds no
    /// server of the pool that will serve them (servers RECONNECT marked will not), as
    /// PgBouncer's `kill_pool_logins`.
    pub(in crate::engine) fn failed_login_for(
        &self,
        servers: &crate::engine::servers::ServerTable,
        pool: pgtier_pool::PoolId,
        now: Instant,
    ) -> Option<bytes::Bytes> {
        let replica = matches!(
            self.pools().key(pool).map(|key| key.target),
            Some(pgtier_pool::ServerTarget::Replica(_))
        );
        if replica {
            return None;
        }
        let error = self.pools().standing_login_failure(pool, now)?;
        (!opening::has_usable_server(servers, pool, None)).then_some(error)
    }

    /// Tells the router that a connection to a pool's replica failed. False when the pool
    /// is not on a replica.
    pub(in crate::engine) fn report_replica_failure(
        &self,
        pool: pgtier_pool::PoolId,
        cause: crate::services::FailureCause,
        routing: &dyn crate::services::Routing,
    ) -> bool {
        let Some(key) = self.pools().key(pool) else {
            return false;
        };
        let pgtier_pool::ServerTarget::Replica(addr) = key.target else {
            return false;
        };
        tracing::debug!(replica = %addr, ?cause, "server connection to a replica failed");
        routing.report_failure(&key.database, addr, cause);
        true
    }

    /// A client waits on a full pool: if every server of the pool is held by a pinned client,
    /// no transaction will free one, and the operator should hear why (rate-limited).
    pub(in crate::engine) fn warn_if_pinned_out(
        &mut self,
        pool: pgtier_pool::PoolId,
        clients: &crate::engine::clients::ClientTable,
        now: Instant,
    ) {
        if !self.pinned_check.due(now) {
            return;
        }
        let (mut linked, mut pinned) = (0usize, 0usize);
        for (_, client) in clients.iter() {
            let Some(session) = client.session() else {
                continue;
            };
            if session.pool() == Some(pool) && client.server().is_some() {
                linked += 1;
                pinned += usize::from(session.pins_server());
            }
        }
        let counts = self.pools.counts(pool);
        if linked > 0 && pinned == linked && linked >= counts.active as usize {
            if let Some(key) = self.pools.key(pool) {
                tracing::warn!(
                    database = %key.database,
                    user = %key.server_user,
                    servers = linked,
                    waiting = counts.waiting,
                    "pool exhausted by pinned clients: every server is held by a client with \
                     session state (SHOW CLIENTS, column pinned, says which); raise the pool \
                     size or have clients undo their session state"
                );
                self.pinned_check.warned(now);
            }
        }
    }

    /// Takes every client parked on `pools` off them (their tickets are void): the clients
    /// the caller must now place elsewhere (re-route, hold for a RESUME).
    pub(in crate::engine) fn unpark_waiters(
        &mut self,
        pools: Vec<pgtier_pool::PoolId>,
        clients: &mut crate::engine::clients::ClientTable,
    ) -> Vec<ClientId> {
        let mut unparked = Vec::new();
        for pool in pools {
            let mut waiters = Vec::new();
            self.pools.take_waiters(pool, &mut waiters);
            for id in waiters {
                if let Some(client) = clients.get_mut(id.0) {
                    if !client.unparked(false) {
                        continue;
                    }
                }
                unparked.push(id);
            }
        }
        unparked
    }
}
