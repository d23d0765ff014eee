//! The read side of a reader entry (`primary` plus `replicas`): places each read transaction
//! on a replica, the primary, or "not yet", from the replica router's health and roles, the
//! LSN view the poller publishes, and the in-flight counters (seed 003).
//!
//! Shared by every shard through an `Arc`, next to the entry's [`ReplicaRouter`] (which still
//! admits sessions: under session-level PLB a session's class and lease decide its replica).
//! A decision reads one `ArcSwap` for the LSN view, one for the role snapshot, and at most two
//! in-flight counters; the only state it changes is the chosen replica's counter (through the
//! ticket) and the shard's own [`ReadLocal`].
//!
//! Which replicas may serve a read:
//! - not Down in the router's snapshot, not excluded by the lag cap, weight above zero;
//! - not the replica a read that is run again must avoid (its server died under it);
//! - with a lease (session-level PLB): only the leased replica;
//! - `routing = "plb"` with `plb_per_transaction`: the replicas whose current role serves the
//!   read's class (its pool, replicas borrowed for it, and Mixed ones);
//! - otherwise every replica, weighed by `routing = "p2c"`'s `weights` (else 1).
//!
//! With a read-your-writes instant, a replica is ready once it replayed the target of
//! [`LsnView::target_after`]. An entry the poller cannot log in to (no probe login) has no
//! LSN view: such reads go to the primary at once instead of waiting for a target that will
//! never be known.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use arc_swap::ArcSwap;
use pgtier_core::config::{ReadSettings, ReplicaSet as ConfiguredReplicas, Routing};
use pgtier_policy::tiers::{Tier, TierRole};
use pgtier_policy::{
    Alternation, MAX_REPLICAS, ReadCandidate, ReadChoice, ReadStanding, ReplicaId, Role,
    SplitMix64, choose_read,
};

use crate::functions::FunctionCatalog;
use crate::lsn::{LagCap, LsnView};
use crate::primary_election::{HostRole, PrimaryElection, PrimaryMove};
use crate::probe::ProbeLogin;
use crate::read_ticket::{InFlightRead, ReadCounters};
use crate::route_table::RouteRole;
use crate::router::ReplicaRouter;

/// Where [`ReadRouter::route`] placed a read.
#[derive(Debug)]
pub enum ReadPlacement {
    /// On this replica, counted in flight until the ticket is dropped.
    Replica(InFlightRead),
    Primary,
    NotYet,
}

/// One read to place.
#[derive(Clone, Copy, Debug)]
pub struct ReadAsk {
    pub class: Tier,
    /// The session's leased replica (session-level PLB).
    pub leased: Option<SocketAddr>,
    /// Read-your-writes: see every commit acknowledged before this instant.
    pub after: Option<Instant>,
    /// A replica not to use: the read is run again after its server there died, and the
    /// replica may not be Down in the snapshot yet.
    pub avoid: Option<SocketAddr>,
}

/// Source of ids telling readers apart in shard-local state.
static NEXT_READER_ID: AtomicU64 = AtomicU64::new(1);

/// Most readers whose alternation a shard remembers; older ones are forgotten (a reload
/// replaced them, or there are that many entries, and a fresh cycle is harmless).
const LOCAL_ALTERNATIONS: usize = 64;

/// A shard's own state for read placement: its random source and one two-replica
/// alternation per reader entry.
#[derive(Debug)]
pub struct ReadLocal {
    random: SplitMix64,
    alternations: Vec<(u64, Alternation)>,
}

impl ReadLocal {
    /// Fresh state drawing from `seed`.
    pub fn new(seed: u64) -> ReadLocal {
        ReadLocal {
            random: SplitMix64::new(seed),
            alternations: Vec::new(),
        }
    }
}

/// The alternation of `reader` in a shard's list, added (forgetting the oldest) if missing.
fn alternation_of(alternations: &mut Vec<(u64, Alternation)>, reader: u64) -> &mut Alternation {
    let index = match alternations.iter().position(|(id, _)| *id == reader) {
        Some(index) => index,
        None => {
            if alternations.len() >= LOCAL_ALTERNATIONS {
                alternations.remove(0);
            }
            alternations.push((reader, Alternation::new()));
            alternations.len() - 1
        }
    };
    &mut alternations[index].1
}

/// The read side of one reader entry.
#[derive(Debug)]
pub struct ReadRouter {
    id: u64,
    primary: SocketAddr,
    router: Arc<ReplicaRouter>,
    settings: ReadSettings,
    routing: Routing,
    weights: Box<[u32]>,
    per_transaction_plb: bool,
    probe_login: Option<ProbeLogin>,
    view: ArcSwap<LsnView>,
    counters: ReadCounters,
    primary_fallbacks: AtomicU64,
    not_yet: AtomicU64,
    functions: FunctionCatalog,
    /// Which host writes go to, decided by the poller's rounds (kept across reloads with
    /// the reader, so a reload does not forget a failover).
    election: Mutex<PrimaryElection>,
    /// What the election decided, as the shards read it.
    elected: ArcSwap<ElectedPrimary>,
}

/// The host a reader entry's writes go to, as the shards read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectedPrimary {
    /// `None`: the primary was demoted and no host was promoted yet.
    pub addr: Option<SocketAddr>,
    /// Moves with every change of `addr`, so a shard sees a move it has not acted on.
    pub epoch: u64,
}

impl ReadRouter {
    /// The read side of `replicas` (which must have a primary) over `router`. `None` for a
    /// replica set without a primary.
    pub fn new(
        router: Arc<ReplicaRouter>,
        replicas: &ConfiguredReplicas,
        probe_login: Option<ProbeLogin>,
    ) -> Option<Arc<ReadRouter>> {
        let primary = replicas.primary?;
        if probe_login.is_none() {
            tracing::warn!(
                %primary,
                "a reader entry without a forced user and without health_check_user: no WAL \
                 positions are read, so reads after a write run on the primary and the lag \
                 cap sees no lag"
            );
        }
        let count = replicas.replicas.len().min(MAX_REPLICAS);
        let weights = match &replicas.routing {
            Routing::P2c { weights } => (0..count)
                .map(|i| weights.get(i).copied().unwrap_or(1))
                .collect(),
            _ => vec![1; count].into_boxed_slice(),
        };
        let per_transaction_plb =
            matches!(replicas.routing, Routing::Plb(_)) && replicas.reads.plb_per_transaction;
        Some(Arc::new(ReadRouter {
            id: NEXT_READER_ID.fetch_add(1, Ordering::Relaxed),
            primary,
            router,
            settings: replicas.reads.clone(),
            routing: replicas.routing.clone(),
            weights,
            per_transaction_plb,
            probe_login,
            view: ArcSwap::from_pointee(LsnView::empty(count)),
            counters: ReadCounters::new(count),
            primary_fallbacks: AtomicU64::new(0),
            not_yet: AtomicU64::new(0),
            functions: FunctionCatalog::default(),
            election: Mutex::new(PrimaryElection::new(count + 1, 0)),
            elected: ArcSwap::from_pointee(ElectedPrimary {
                addr: Some(primary),
                epoch: 0,
            }),
        }))
    }

    /// True when a reload may keep this reader for `replicas` over `router`: same router,
    /// primary, routing, read settings and login (its counters and LSN history carry over).
    pub(crate) fn same_setup(
        &self,
        router: &Arc<ReplicaRouter>,
        replicas: &ConfiguredReplicas,
        probe_login: &Option<ProbeLogin>,
    ) -> bool {
        Arc::ptr_eq(&self.router, router)
            && Some(self.primary) == replicas.primary
            && self.routing == replicas.routing
            && self.settings == replicas.reads
            && self.probe_login == *probe_login
    }

    /// Places one read (see the module rules). Never blocks.
    pub fn route(&self, ask: &ReadAsk, local: &mut ReadLocal) -> ReadPlacement {
        if ask.after.is_some() && self.probe_login.is_none() {
            // No LSN source: a target could never be reached on a replica.
            return self.fallback();
        }
        let view = self.view.load();
        let snapshot = self.router.snapshot_guard();
        let target = ask.after.map(|after| view.target_after(after));
        let leased = ask.leased.map(|addr| self.router.replica_id(addr));
        let mut candidates = [ReadCandidate {
            replica: ReplicaId(0),
            weight: 0,
            standing: ReadStanding::Down,
        }; MAX_REPLICAS];
        let mut count = 0;
        for (replica, role) in snapshot.table.iter().take(self.weights.len()) {
            let allowed = match leased {
                Some(leased) => leased == Some(replica),
                None => {
                    !self.per_transaction_plb || serves(role, self.router.policy().fit(ask.class))
                }
            };
            if !allowed
                || self
                    .replica_addr(replica)
                    .is_some_and(|addr| ask.avoid == Some(addr))
            {
                continue;
            }
            let index = replica.index();
            let standing = if role.is_down() {
                ReadStanding::Down
            } else if view.is_excluded(index) {
                ReadStanding::Excluded
            } else {
                match target {
                    None => ReadStanding::Ready,
                    Some(Some(lsn)) if view.is_ready(index, lsn) => ReadStanding::Ready,
                    Some(_) => ReadStanding::Behind,
                }
            };
            candidates[count] = ReadCandidate {
                replica,
                weight: self.weights[index],
                standing,
            };
            count += 1;
        }
        let ReadLocal {
            random,
            alternations,
        } = local;
        let choice = choose_read(
            &candidates[..count],
            alternation_of(alternations, self.id),
            random,
            |replica| self.counters.in_flight(replica),
        );
        match choice {
            ReadChoice::Replica(replica) => {
                let ticket = self
                    .replica_addr(replica)
                    .and_then(|addr| self.counters.start(replica, addr));
                match ticket {
                    Some(ticket) => ReadPlacement::Replica(ticket),
                    None => self.fallback(),
                }
            }
            ReadChoice::Primary => self.fallback(),
            ReadChoice::NotYet => {
                self.not_yet.fetch_add(1, Ordering::Relaxed);
                ReadPlacement::NotYet
            }
        }
    }

    fn fallback(&self) -> ReadPlacement {
        self.primary_fallbacks.fetch_add(1, Ordering::Relaxed);
        ReadPlacement::Primary
    }

    /// Publishes a new LSN view (the poller, after each round).
    pub fn publish(&self, view: LsnView) {
        self.view.store(Arc::new(view));
    }

    /// Applies one poll round's view of the hosts (host 0 the configured primary, host
    /// `i + 1` replica `i`); returns the host writes go to now. A move is logged and
    /// published to the shards, which close their servers on the old primary.
    pub fn on_poll_round(&self, roles: &[HostRole]) -> Option<usize> {
        let mut election = self.election.lock().unwrap_or_else(PoisonError::into_inner);
        let change = election.on_round(roles);
        let elected = election.elected();
        drop(election);
        let Some(change) = change else {
            return elected;
        };
        let addr = elected.and_then(|host| self.host_addr(host));
        match change {
            PrimaryMove::Elected { from, timeline, .. } => tracing::warn!(
                entry = %self.name(),
                from = ?from.and_then(|host| self.host_addr(host)),
                to = ?addr,
                timeline,
                "primary moved: a host was promoted on a newer timeline; writes go there now"
            ),
            PrimaryMove::Demoted { from } => tracing::warn!(
                entry = %self.name(),
                from = ?self.host_addr(from),
                "the primary is in recovery: no host takes writes until one is promoted"
            ),
        }
        let epoch = self.elected.load().epoch + 1;
        self.elected.store(Arc::new(ElectedPrimary { addr, epoch }));
        elected
    }

    /// Whether host `host` (numbered as in [`ReadRouter::on_poll_round`]) is fenced: seen
    /// read-write while another host is the primary, not seen in recovery since.
    pub fn is_fenced(&self, host: usize) -> bool {
        self.election
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_fenced(host)
    }

    /// The host writes go to now.
    pub fn elected_primary(&self) -> ElectedPrimary {
        **self.elected.load()
    }

    /// Address of host `host`: 0 the configured primary, `i + 1` replica `i`.
    pub fn host_addr(&self, host: usize) -> Option<SocketAddr> {
        match host.checked_sub(1) {
            None => Some(self.primary),
            Some(index) => ReplicaId::from_index(index).and_then(|r| self.replica_addr(r)),
        }
    }

    /// Hosts the election chooses among: the configured primary and the replicas.
    pub fn host_count(&self) -> usize {
        self.weights.len() + 1
    }

    // ---- read-only views ----

    /// The newest LSN view.
    pub fn view(&self) -> Arc<LsnView> {
        self.view.load_full()
    }

    /// The entry's replica router.
    pub fn router(&self) -> &Arc<ReplicaRouter> {
        &self.router
    }

    /// Label (the database entries served), the router's.
    pub fn name(&self) -> &str {
        self.router.name()
    }

    /// The configured primary's address (writes go to [`ReadRouter::elected_primary`]).
    pub fn primary(&self) -> SocketAddr {
        self.primary
    }

    /// Address of `replica`.
    pub fn replica_addr(&self, replica: ReplicaId) -> Option<SocketAddr> {
        self.router.replica_addr(replica)
    }

    /// Replicas in configured order.
    pub fn replica_count(&self) -> usize {
        self.weights.len()
    }

    /// The read settings of the entry.
    pub fn settings(&self) -> &ReadSettings {
        &self.settings
    }

    /// The lag cap the poller applies.
    pub fn lag_cap(&self) -> LagCap {
        LagCap::from_settings(&self.settings)
    }

    /// How the poller logs in (`None`: no polling).
    pub fn probe_login(&self) -> Option<&ProbeLogin> {
        self.probe_login.as_ref()
    }

    /// What the primary says of the functions reads call.
    pub fn functions(&self) -> &FunctionCatalog {
        &self.functions
    }

    /// In-flight and total reads per replica.
    pub fn counters(&self) -> &ReadCounters {
        &self.counters
    }

    /// Reads sent to the primary because no replica could ever serve them.
    pub fn primary_fallbacks(&self) -> u64 {
        self.primary_fallbacks.load(Ordering::Relaxed)
    }

    /// Times a read was told to ask again (no replica had replayed its target yet).
    pub fn not_yet(&self) -> u64 {
        self.not_yet.load(Ordering::Relaxed)
    }
}

/// Whether a replica with `role` serves reads of `class` under per-transaction PLB: its own
/// pool, a replica borrowed for it, or a Mixed one.
fn serves(role: RouteRole, class: Tier) -> bool {
    matches!(
        role,
        RouteRole::Class(Role::Mixed) | RouteRole::Tier(TierRole::Mixed)
    ) || role.serves() == Some(class)
}
