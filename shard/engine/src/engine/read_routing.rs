//! Reader entries (`primary` plus `replicas`): where each transaction of a session runs.
//! In transaction mode a transaction whose first unit is read-only (`client::reads::scan_unit`
//! over `pgtier_wire::read_only`) goes to the replica the routing service picks for it,
//! with the session's read-your-writes target; everything else — writes, session mode,
//! sessions pinned by session state — goes to the primary. A read whose target no replica
//! has replayed waits (`read_your_writes_timeout`), then runs on the primary.
//!
//! The routing of one transaction ([`TxnRouter`]) borrows the three owners it changes;
//! the client table reads a session's first unit and ends its reads. The engine retires
//! what a new replica pool made room with, and re-routes waiting reads (`mod.rs`).

use std::time::{Duration, Instant};

use pgtier_core::config::{Config, ReadSettings, ReplicaSet, Routing, RywScope, ServerSet};
use pgtier_pool::{Closing, PoolId, PoolKey, ServerTarget};

use super::clients::ClientTable;
use super::env::Env;
use super::linker::Linker;
use super::stats::StatsSink;
use crate::client::reads::{ReadTxn, Unit, scan_unit};
use crate::ids::{ClientId, ServerId};
use crate::prepared::ClientStatements;
use crate::read_functions::EntryFunctions;
use crate::services::{ReadRequest, ReadRoute};

/// How often reads that wait for a replica to catch up ask again (the control shard reads
/// WAL positions every `lsn_poll_interval`, 10 ms by default).
pub(super) const READ_RECHECK: Duration = Duration::from_millis(2);

/// The read-only classifier with an entry's function answers (standard_conforming_strings
/// on, as everywhere in the reader path).
fn classify(text: &[u8], functions: &EntryFunctions<'_>) -> pgtier_wire::read_only::Access {
    pgtier_wire::read_only::classify_using(text, true, functions)
}

/// The first unit of `input`, classified with the entry's function answers; a Bind of one
/// of the client's named statements answers by that statement's text.
pub(super) fn first_unit(
    config: &Config,
    routing: &dyn crate::services::Routing,
    database: &str,
    statements: Option<&ClientStatements>,
    input: &[u8],
) -> Unit {
    let overrides = reader_settings(config, database).map(|s| &s.functions);
    let functions = EntryFunctions::new(routing, database, overrides);
    scan_unit(
        input,
        |text| classify(text, &functions),
        |name| {
            statements?
                .get(name)
                .map(|statement| statement.access(&functions))
        },
    )
}

/// The read settings of `database` when it is an entry with a primary.
fn reader_settings<'c>(config: &'c Config, database: &str) -> Option<&'c ReadSettings> {
    reader_set(config, database).map(|set| &set.reads)
}

/// The replica set of `database` when it is an entry with a primary.
fn reader_set<'c>(config: &'c Config, database: &str) -> Option<&'c ReplicaSet> {
    match &config.database(database)?.servers {
        ServerSet::Replicas(set) if set.is_reader_entry() => Some(set),
        _ => None,
    }
}

/// Where one transaction goes.
pub(super) enum TxnRoute {
    /// Its pool is set: take a server of it.
    Go,
    /// It waits for a replica to replay its target; the recheck timer is armed.
    Wait,
}

/// What routing a reader session's transaction reads and changes: the client table (its
/// session), the linker (its pools, its wait for a replica) and the stats sink, with the
/// settings, the routing service and the time.
pub(super) struct TxnRouter<'a> {
    pub(super) clients: &'a mut ClientTable,
    pub(super) linker: &'a mut Linker,
    pub(super) stats: &'a mut StatsSink,
    pub(super) env: &'a Env,
    pub(super) routing: &'a dyn crate::services::Routing,
    pub(super) now: Instant,
    /// Idle servers given up to make room for a replica pool: the engine retires them.
    pub(super) evicted: Vec<Closing<ServerId>>,
}

impl TxnRouter<'_> {
    /// Sets the pool client `id`'s next transaction runs on (reader sessions only; others
    /// keep theirs).
    pub(super) fn route_transaction(&mut self, id: ClientId) -> TxnRoute {
        let now = self.now;
        let scanned = self
            .clients
            .reads_mut(id)
            .and_then(|reads| reads.scanned.take());
        let Some(client) = self.clients.get(id.0) else {
            return TxnRoute::Go;
        };
        let Some(session) = client.session() else {
            return TxnRoute::Go;
        };
        let Some(reads) = session.reads() else {
            return TxnRoute::Go;
        };
        let primary = reads.primary;
        let waiting_since = match reads.txn {
            ReadTxn::AwaitingReplica { since } => Some(since),
            _ => None,
        };
        let unit = if !session.mode().releases_at_idle_ready() || session.pins_server() {
            Unit::Primary
        } else {
            match scanned {
                // The bytes `needs_whole_unit` just read, unchanged.
                Some((len, unit)) if len == client.input().len() => unit,
                _ => first_unit(
                    self.env.config(),
                    self.routing,
                    session.database(),
                    session.statements(),
                    client.input().bytes(),
                ),
            }
        };
        let bytes = match unit {
            Unit::Read { bytes } => bytes,
            Unit::Primary => {
                self.run_on_primary(id, primary, true);
                return TxnRoute::Go;
            }
            // Nothing sent yet: a login waiting for its welcome (a client between
            // transactions waits for its whole unit before it gets here).
            Unit::Incomplete => {
                self.run_on_primary(id, primary, false);
                return TxnRoute::Go;
            }
        };
        let Some(set) = reader_set(self.env.config(), session.database()) else {
            self.run_on_primary(id, primary, true);
            return TxnRoute::Go;
        };
        let settings = set.reads.clone();
        // Session-level PLB (the papers'): the session's admitted replica serves its reads.
        let session_level_plb =
            matches!(set.routing, Routing::Plb(_)) && !settings.plb_per_transaction;
        let after = if settings.read_your_writes {
            let user_write = match settings.read_your_writes_scope {
                RywScope::User => self.routing.user_write(session.database(), session.user()),
                RywScope::Session => None,
            };
            reads.last_write.max(user_write)
        } else {
            None
        };
        let leased = match session.lease() {
            Some(lease) if session_level_plb => Some(lease.addr()),
            _ => None,
        };
        let request = ReadRequest {
            database: session.database(),
            class: crate::class::tier(session.class()),
            leased,
            after,
            avoid: session.retry().avoid(),
        };
        match self.routing.route_read(&request) {
            ReadRoute::Replica(ticket) => {
                let addr = ticket.addr();
                let Some(pool) = self.replica_pool(id, addr) else {
                    self.run_on_primary(id, primary, false);
                    return TxnRoute::Go;
                };
                if let Some(reads) = self.clients.reads_mut(id) {
                    reads.txn = ReadTxn::OnReplica {
                        ticket,
                        budget: Some(bytes),
                    };
                }
                self.clients.set_pool(id, pool);
                self.stats.read_on_replica();
                TxnRoute::Go
            }
            ReadRoute::Primary => {
                self.stats.read_on_primary();
                self.run_on_primary(id, primary, false);
                TxnRoute::Go
            }
            ReadRoute::NotYet => {
                let since = waiting_since.unwrap_or(now);
                if now.saturating_duration_since(since) >= settings.read_your_writes_timeout {
                    self.stats.read_on_primary();
                    self.stats.read_waited(true);
                    self.run_on_primary(id, primary, false);
                    return TxnRoute::Go;
                }
                if let Some(reads) = self.clients.reads_mut(id) {
                    reads.txn = ReadTxn::AwaitingReplica { since };
                }
                if waiting_since.is_none() {
                    self.stats.read_waited(false);
                }
                self.linker.wait_for_replica(
                    id,
                    now + READ_RECHECK.min(settings.read_your_writes_timeout),
                );
                TxnRoute::Wait
            }
        }
    }

    fn run_on_primary(&mut self, id: ClientId, primary: PoolId, write: bool) {
        if let Some(reads) = self.clients.reads_mut(id) {
            reads.txn = ReadTxn::OnPrimary { write };
        }
        self.clients.set_pool(id, primary);
    }

    /// The session's pool on replica `addr`, registered on first use (same key as its
    /// primary pool but for the server).
    fn replica_pool(&mut self, id: ClientId, addr: std::net::SocketAddr) -> Option<PoolId> {
        let session = self.clients.get(id.0)?.session()?;
        let reads = session.reads()?;
        if let Some(pool) = reads.replica_pool(addr) {
            return Some(pool);
        }
        let primary_key = self.linker.pools().key(reads.primary)?.clone();
        let key = PoolKey::new(
            primary_key.database.clone(),
            primary_key.server_user.clone(),
            ServerTarget::Replica(addr),
            primary_key.profile.clone(),
        );
        let limits = self.env.pool_limits(&key);
        let registered = match self.linker.pools_mut().register(&key, &limits, self.now) {
            Err(pgtier_pool::PoolError::TooManyPools { .. }) => {
                // The idle servers given up are retired by the engine once routed.
                self.linker.pools_mut().evict_for_room(&mut self.evicted);
                self.linker.pools_mut().register(&key, &limits, self.now)
            }
            registered => registered,
        };
        let pool = registered.ok()?;
        self.clients.reads_mut(id)?.replicas.push((addr, pool));
        Some(pool)
    }
}

impl ClientTable {
    /// Whether a reader session's next transaction must wait for more of its first unit
    /// before it can be routed.
    pub(super) fn needs_whole_unit(
        &mut self,
        id: ClientId,
        env: &Env,
        routing: &dyn crate::services::Routing,
    ) -> bool {
        let Some(client) = self.get_mut(id.0) else {
            return false;
        };
        let Some(session) = client.session() else {
            return false;
        };
        if !session.mode().releases_at_idle_ready()
            || session.pins_server()
            || session.reads().is_none()
        {
            return false;
        }
        let unit = first_unit(
            env.config(),
            routing,
            session.database(),
            session.statements(),
            client.input().bytes(),
        );
        let scanned = (client.input().len(), unit);
        if let Some(reads) = client.session_mut().and_then(|s| s.reads_mut()) {
            reads.scanned = Some(scanned);
        }
        unit == Unit::Incomplete
    }

    /// The client's transaction ended (its server is being released): its replica ticket is
    /// given back, and a write on the primary becomes the target of its next reads.
    pub(super) fn end_reader_transaction(
        &mut self,
        id: ClientId,
        env: &Env,
        routing: &dyn crate::services::Routing,
        now: Instant,
    ) {
        let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) else {
            return;
        };
        let Some(reads) = session.reads_mut() else {
            return;
        };
        if !reads.end_transaction(now) {
            return;
        }
        let scope_user = reader_settings(env.config(), session.database())
            .is_some_and(|s| s.read_your_writes && s.read_your_writes_scope == RywScope::User);
        if scope_user {
            routing.note_user_write(session.database(), session.user(), now);
        }
    }
}
