//! What every thread of one replica set shares beneath its router: the replicas' addresses,
//! the policy, the published snapshot, the session and in-flight counters, the epochs
//! sessions watch, the event log, the admission stats, and the control thread to wake.
//!
//! This is the layer a [`crate::lease::SessionLease`] holds on to: a lease releases its count,
//! reports its transactions and asks about the recovery-tail drain here, so a lease needs
//! nothing of the router above (admission, the control inbox, the authority). The router and
//! the authority are built on top of it; neither is visible from here.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;

use arc_swap::{ArcSwap, ArcSwapOption, Guard};
use pgtier_policy::tiers::{Tier, TierLoad};
use pgtier_policy::{
    Draw, LoadSignal, Loads, MAX_REPLICAS, PlbParams, ReplicaId, ReplicaLoad, ServiceClass,
    SplitMix64, Strategy, StrategyName,
};

use crate::counters::{CounterError, LoadArray, SessionCounters, TierLoadArray};
use crate::events::{ControlEvent, EventLog};
use crate::remote_load::RemoteLoad;
use crate::route_table::RouteTable;
use crate::router_config::RouterPolicy;
use crate::router_stats::{RouterCounters, RouterStats};
use crate::snapshot::RoutingSnapshot;

/// The shared state of one router, behind an `Arc` that the router and every lease hold.
pub struct RouterState {
    name: Arc<str>,
    replicas: Box<[SocketAddr]>,
    policy: RouterPolicy,
    snapshot: ArcSwap<RoutingSnapshot>,
    /// Generation of the newest published snapshot; read after a claim to detect a publish
    /// that raced with the decision.
    published_generation: AtomicU64,
    counters: SessionCounters,
    /// The load the rest of the fleet reported, added to every decision's counts.
    remote: ArcSwap<RemoteLoad>,
    /// `remote` is not empty: without a fleet a decision never loads it.
    has_remote: AtomicBool,
    /// Transactions in flight per replica and class; kept only when PLB decides on them.
    in_flight: SessionCounters,
    /// `load_signal = "in_flight"`: sessions report their transactions.
    counts_in_flight: bool,
    events: EventLog,
    /// Set by a session close while some replica is borrowed: returns may be due.
    loads_changed: AtomicBool,
    /// Bumped at every Down, so sessions between transactions can notice with one load.
    failure_epoch: AtomicU64,
    /// Bumped at every Rejoin under the recovery-tail drain: each session asks once per
    /// value whether it should leave its replica.
    drain_epoch: AtomicU64,
    /// The control plane's thread, woken by requests; replaced when a new plane takes over.
    control_thread: ArcSwapOption<Thread>,
    /// Serializes attach/detach of control threads (plane start and stop, never the data path).
    control_handover: Mutex<()>,
    /// The control plane has stopped: nothing will answer new requests.
    stopped: AtomicBool,
    tickets: [AtomicU64; 2],
    random_seed: AtomicU64,
    stats: RouterCounters,
}

impl fmt::Debug for RouterState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterState")
            .field("name", &self.name)
            .field("strategy", &self.policy.name())
            .field("table", &self.snapshot.load().table)
            .finish_non_exhaustive()
    }
}

impl RouterState {
    /// State for `replicas` under `policy`, with `snapshot` published.
    pub(crate) fn new(
        name: Arc<str>,
        replicas: Box<[SocketAddr]>,
        policy: RouterPolicy,
        snapshot: RoutingSnapshot,
        events_capacity: usize,
    ) -> RouterState {
        let count = replicas.len();
        RouterState {
            events: EventLog::new(Arc::clone(&name), events_capacity),
            name,
            replicas,
            policy,
            published_generation: AtomicU64::new(snapshot.generation),
            snapshot: ArcSwap::from_pointee(snapshot),
            counters: SessionCounters::new(count),
            remote: ArcSwap::from_pointee(RemoteLoad::default()),
            has_remote: AtomicBool::new(false),
            in_flight: SessionCounters::new(count),
            counts_in_flight: matches!(
                policy,
                RouterPolicy::Classes(Strategy::Plb(plb)) if plb.load_signal() == LoadSignal::InFlight
            ),
            loads_changed: AtomicBool::new(false),
            failure_epoch: AtomicU64::new(0),
            drain_epoch: AtomicU64::new(0),
            control_thread: ArcSwapOption::empty(),
            control_handover: Mutex::new(()),
            stopped: AtomicBool::new(false),
            tickets: [AtomicU64::new(0), AtomicU64::new(0)],
            random_seed: AtomicU64::new(0x5eed),
            stats: RouterCounters::default(),
        }
    }

    // ---- identity and published state ----

    /// Label of the router (the database entries it serves).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The replicas' addresses, in the router's order.
    pub(crate) fn replicas(&self) -> &[SocketAddr] {
        &self.replicas
    }

    /// Address of `replica`.
    pub fn replica_addr(&self, replica: ReplicaId) -> Option<SocketAddr> {
        self.replicas.get(replica.index()).copied()
    }

    /// The replica with address `addr`.
    pub(crate) fn replica_id(&self, addr: SocketAddr) -> Option<ReplicaId> {
        let index = self.replicas.iter().position(|a| *a == addr)?;
        ReplicaId::from_index(index)
    }

    /// The configured policy.
    pub fn policy(&self) -> &RouterPolicy {
        &self.policy
    }

    /// PLB's parameters (the paper's for the other policies, which do not read them).
    pub(crate) fn plb_params(&self) -> PlbParams {
        match self.policy {
            RouterPolicy::Classes(Strategy::Plb(plb)) => *plb.params(),
            _ => PlbParams::PAPER,
        }
    }

    /// The newest published snapshot.
    pub fn snapshot(&self) -> Arc<RoutingSnapshot> {
        self.snapshot.load_full()
    }

    /// The newest published snapshot without touching its reference count (per-read paths).
    pub(crate) fn snapshot_guard(&self) -> Guard<Arc<RoutingSnapshot>> {
        self.snapshot.load()
    }

    /// Generation of the newest published snapshot, to check after a claim that no publish
    /// raced with the decision.
    pub(crate) fn published_generation(&self) -> u64 {
        self.published_generation.load(Ordering::SeqCst)
    }

    /// Publishes `table` as generation `generation`.
    pub(crate) fn publish(&self, generation: u64, table: &RouteTable) {
        self.snapshot
            .store(Arc::new(RoutingSnapshot::new(generation, table.clone())));
        self.published_generation
            .store(generation, Ordering::SeqCst);
    }

    /// True when `replica` is Down in the published snapshot.
    pub fn is_down(&self, replica: ReplicaId) -> bool {
        self.snapshot.load().is_down(replica)
    }

    // ---- the epochs sessions watch ----

    /// Changes each time some replica goes Down. A session between transactions compares it
    /// with the value it saw last and, when it moved, checks [`RouterState::is_down`] for its
    /// replica. One atomic load.
    pub(crate) fn failure_epoch(&self) -> u64 {
        self.failure_epoch.load(Ordering::Acquire)
    }

    /// A replica went Down; called after the publish, so a session that sees the new epoch
    /// finds its replica Down.
    pub(crate) fn bump_failure_epoch(&self) {
        self.failure_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Changes at each rejoin while the recovery-tail drain is on; a session compares it with
    /// the value it saw last and, when it moved, asks `RouterState::should_drain`.
    pub fn drain_epoch(&self) -> u64 {
        self.drain_epoch.load(Ordering::Acquire)
    }

    /// A replica rejoined under the recovery-tail drain; called after the publish, so sessions
    /// that ask see the rejoined replica's new role.
    pub(crate) fn bump_drain_epoch(&self) {
        self.drain_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a `class` session on `replica`, between transactions, should move (PLB's
    /// recovery-tail drain on the published roles and the current counts).
    pub(crate) fn should_drain(&self, replica: ReplicaId, class: Tier) -> bool {
        let RouterPolicy::Classes(Strategy::Plb(plb)) = self.policy else {
            return false;
        };
        let snapshot = self.snapshot.load();
        let Some(table) = snapshot.table.classes() else {
            return false;
        };
        let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
        let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
        let view = self.read_loads(&mut sessions, &mut in_flight);
        let moves = plb.drain_move(table, view, replica, class.two_class());
        if moves {
            self.stats.drain_move();
        }
        moves
    }

    // ---- counts ----

    /// The session counters (claimed by admissions, released by leases).
    pub(crate) fn counters(&self) -> &SessionCounters {
        &self.counters
    }

    /// Active sessions of each class on `replica` (ranks below freemium counted as freemium).
    pub fn load(&self, replica: ReplicaId) -> ReplicaLoad {
        self.counters.load(replica)
    }

    /// Active sessions of each rank on `replica`.
    pub fn tier_load(&self, replica: ReplicaId) -> TierLoad {
        self.counters.tier_load(replica)
    }

    /// Active sessions on all replicas.
    pub fn total_sessions(&self) -> u64 {
        self.counters.total()
    }

    /// Transactions in flight of each class on `replica` (zero unless PLB decides on them).
    pub fn in_flight(&self, replica: ReplicaId) -> ReplicaLoad {
        self.in_flight.load(replica)
    }

    /// Transactions in flight of each rank on `replica` (zero unless PLB decides on them).
    pub(crate) fn in_flight_tiers(&self, replica: ReplicaId) -> TierLoad {
        self.in_flight.tier_load(replica)
    }

    /// Whether sessions report their transactions (`load_signal = "in_flight"`).
    pub fn counts_in_flight(&self) -> bool {
        self.counts_in_flight
    }

    /// The counts one decision reads: open sessions, and the in-flight counts as the signal
    /// when PLB decides on them.
    pub(crate) fn read_loads<'a>(
        &self,
        sessions: &'a mut LoadArray,
        in_flight: &'a mut LoadArray,
    ) -> Loads<'a> {
        let remote = self.remote();
        let len = self.counters.read_into(sessions).len();
        if let Some(remote) = &remote {
            remote.add_sessions(&mut sessions[..len]);
        }
        if self.counts_in_flight {
            let flights = self.in_flight.read_into(in_flight).len();
            if let Some(remote) = &remote {
                remote.add_in_flight(&mut in_flight[..flights]);
            }
            Loads {
                signal: &in_flight[..flights],
                sessions: &sessions[..len],
            }
        } else {
            Loads::sessions(&sessions[..len])
        }
    }

    /// Sessions per replica and rank, the fleet's others included (tiered PLB's decisions).
    pub(crate) fn read_tier_loads<'a>(&self, out: &'a mut TierLoadArray) -> &'a [TierLoad] {
        let len = self.counters.read_tiers_into(out).len();
        if let Some(remote) = self.remote() {
            remote.add_tier_sessions(&mut out[..len]);
        }
        &out[..len]
    }

    /// The rest of the fleet's load, when there is any to add. A guard, not a clone: every
    /// shard reads it at every decision, and a reference count would be one cache line all
    /// of them write.
    fn remote(&self) -> Option<Guard<Arc<RemoteLoad>>> {
        self.has_remote
            .load(Ordering::Acquire)
            .then(|| self.remote.load())
    }

    /// Replaces the rest of the fleet's load (the fleet thread, each round; empty in local
    /// mode).
    pub(crate) fn set_remote(&self, remote: RemoteLoad) {
        let empty = remote.is_empty();
        self.remote.store(Arc::new(remote));
        self.has_remote.store(!empty, Ordering::Release);
    }

    /// A tiered decision's claim on `replica` for `class`, conditional on this host's own
    /// count: `seen` included the others' sessions, which are taken off first.
    pub(crate) fn claim_tier(
        &self,
        replica: ReplicaId,
        class: Tier,
        seen: u32,
    ) -> Result<(), CounterError> {
        let remote = self
            .remote()
            .map_or(0, |remote| remote.tier_sessions(replica.index(), class));
        self.counters
            .try_claim(replica, class, seen.saturating_sub(remote))
    }

    /// PLB's thresholds depend on the exact session count, so its claims are conditional on
    /// the value the decision read (`seen`); the baselines do not look at thresholds, and an
    /// in-flight signal moves with every transaction, so a compare-and-swap on it would only
    /// spin.
    pub(crate) fn claim_for_decision(
        &self,
        replica: ReplicaId,
        class: Tier,
        seen: u32,
    ) -> Result<(), CounterError> {
        match self.policy {
            RouterPolicy::Classes(Strategy::Plb(_)) if !self.counts_in_flight => {
                // `seen` included the fleet's others, which are no part of this counter.
                let remote = self
                    .remote()
                    .map_or(0, |remote| remote.class_sessions(replica.index(), class));
                self.counters
                    .try_claim(replica, class, seen.saturating_sub(remote))
            }
            _ => self.counters.claim(replica, class),
        }
    }

    /// Takes back a claim whose decision lost a race with a publish.
    pub(crate) fn undo_claim(&self, replica: ReplicaId, class: Tier) {
        if let Err(error) = self.counters.release(replica, class) {
            tracing::error!(router = %self.name, replica = replica.0, %error, "undo of a claim failed");
        }
    }

    /// Releases a lease's count; a close while something is borrowed may enable a return, so
    /// the control shard is told (once until it looks).
    pub(crate) fn release_count(&self, replica: ReplicaId, class: Tier) {
        if let Err(error) = self.counters.release(replica, class) {
            tracing::error!(router = %self.name, replica = replica.0, %error, "session count release failed");
            return;
        }
        self.note_load_change();
    }

    /// Counts one transaction of `class` in flight on `replica`; false if it could not be
    /// counted (then it is not released either).
    pub(crate) fn transaction_started(&self, replica: ReplicaId, class: Tier) -> bool {
        match self.in_flight.claim(replica, class) {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(router = %self.name, replica = replica.0, %error, "in-flight count failed");
                false
            }
        }
    }

    /// A counted transaction ended. Less load may let a borrowed replica return, as a session
    /// close may.
    pub(crate) fn transaction_ended(&self, replica: ReplicaId, class: Tier) {
        if let Err(error) = self.in_flight.release(replica, class) {
            tracing::error!(router = %self.name, replica = replica.0, %error, "in-flight release failed");
            return;
        }
        self.note_load_change();
    }

    /// Tells the control shard (once until it looks) that loads fell while something is
    /// borrowed, so returns may be due.
    fn note_load_change(&self) {
        if self.snapshot.load().has_borrowed
            && !self.loads_changed.load(Ordering::Relaxed)
            && !self.loads_changed.swap(true, Ordering::AcqRel)
        {
            self.wake_control();
        }
    }

    /// Whether loads fell since the control shard last looked; looking clears it.
    pub(crate) fn take_loads_changed(&self) -> bool {
        self.loads_changed.swap(false, Ordering::AcqRel)
    }

    /// The draw a baseline decides with (PLB and least-sessions draw nothing): one ticket of
    /// the class's round-robin and a fresh random number.
    pub(crate) fn draw(&self, class: ServiceClass) -> Draw {
        if matches!(
            self.policy,
            RouterPolicy::Tiers(_)
                | RouterPolicy::Classes(Strategy::Plb(_) | Strategy::LeastSessions)
        ) {
            return Draw::default();
        }
        let slot = match (self.policy.name(), class) {
            (StrategyName::Dedicated, ServiceClass::Freemium) => 1,
            _ => 0,
        };
        let seed = self.random_seed.fetch_add(1, Ordering::Relaxed);
        Draw {
            ticket: self.tickets[slot].fetch_add(1, Ordering::Relaxed),
            random: SplitMix64::new(seed).next_u64(),
        }
    }

    // ---- records ----

    /// The event log the control shard writes.
    pub(crate) fn event_log(&self) -> &EventLog {
        &self.events
    }

    /// Kept events, oldest first.
    pub fn events(&self) -> Vec<ControlEvent> {
        self.events.events()
    }

    /// Number of events ever recorded.
    pub fn events_recorded(&self) -> u64 {
        self.events.recorded()
    }

    /// Borrows and returns ever recorded.
    pub fn role_events_recorded(&self) -> u64 {
        self.events.role_events_recorded()
    }

    /// The admission counters.
    pub(crate) fn stats_counters(&self) -> &RouterCounters {
        &self.stats
    }

    /// How admissions were decided so far.
    pub fn stats(&self) -> RouterStats {
        self.stats.snapshot()
    }

    // ---- the control thread ----

    /// Makes `thread` the one requests wake, and accepts requests again.
    pub(crate) fn attach_control_thread(&self, thread: Thread) {
        let _handover = self
            .control_handover
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.control_thread.store(Some(Arc::new(thread)));
        self.stopped.store(false, Ordering::Release);
    }

    /// Detaches `thread` if it is still the attached one (a newer plane may have taken over);
    /// returns whether it was.
    pub(crate) fn detach_control_thread(&self, thread: &Thread) -> bool {
        let _handover = self
            .control_handover
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let attached = self
            .control_thread
            .load()
            .as_ref()
            .is_some_and(|current| current.id() == thread.id());
        if attached {
            self.control_thread.store(None);
        }
        attached
    }

    /// Wakes the attached control thread, if any.
    pub(crate) fn wake_control(&self) {
        if let Some(thread) = self.control_thread.load().as_ref() {
            thread.unpark();
        }
    }

    /// Nothing will answer new requests (the plane stopped).
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Whether the control plane has stopped.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}
