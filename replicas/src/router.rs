//! The replica router of one replica set: what a data shard calls at session login, close and
//! re-pin.
//!
//! Every shard shares one router per replica set. The common admission is decided on the
//! shard itself, with no lock and no message: read the published snapshot and the shared
//! counters, run the policy, claim the chosen counter with a compare-and-swap against the value
//! the decision used, and check that the snapshot generation did not move meanwhile. Only a
//! decision that needs a role change (a borrow, or a return planned before it) goes to the
//! control shard, the one place role changes are applied (see [`crate::authority`]).
//! The answer then comes back through the shard's [`ReplyMailbox`].
//!
//! Races, and why each is harmless:
//! - Two shards decide on the same counter: one compare-and-swap fails and that shard decides
//!   again (after `claim_attempts` lost races it asks the control shard, which serializes).
//! - The control shard publishes between a decision and its claim: the generation check after
//!   the claim sees it, undoes the claim and decides again. So every local placement was valid
//!   against the table that was published at the moment of its claim.
//! - The control shard decides a return from a zero count read just before a shard's claim on
//!   that replica lands (and that shard's generation check runs before the publish): the
//!   session stays where it was validly placed and the returned replica carries it as a
//!   residual session, which PLB already accounts for (total load on borrowed replicas,
//!   canonicalization on failure). Role changes never move sessions anyway.
//! - A replica goes Down between a placement and the connect: the connect fails, the shard
//!   reports it ([`ReplicaRouter::report_server_failure`]) and re-pins the session.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, ArcSwapOption};
use crossbeam_queue::ArrayQueue;
use pgtier_core::config::Routing;
use pgtier_policy::tiers::{Tier, TierLoad};
use pgtier_policy::{
    Draw, LoadSignal, Loads, MAX_REPLICAS, PlbParams, ReplicaId, ReplicaLoad, ServiceClass,
    SplitMix64, Strategy, StrategyName,
};

use crate::admission_error::AdmissionError;
use crate::authority::Authority;
use crate::counters::{CounterError, LoadArray, SessionCounters, TierLoadArray};
use crate::events::{ControlEvent, EventLog};
use crate::lease::SessionLease;
use crate::mailbox::{ControlRequest, ReplyMailbox, ReplyTo, ServerFailureCause};
use crate::probe::{ProbeLogin, ProbeReport};
use crate::route_table::{RouteRole, RouteTable};
use crate::router_config::{RouterConfig, RouterError, RouterPolicy, policy_and_table};
use crate::router_stats::{RouterCounters, RouterStats};
use crate::snapshot::RoutingSnapshot;

/// The outcome of [`ReplicaRouter::admit_session`].
#[derive(Debug)]
#[must_use]
pub enum Admission {
    /// Placed and counted on the shard: connect to `lease.replica()`.
    Placed(SessionLease),
    /// Sent to the control shard: an [`crate::AdmissionReply`] with the same
    /// `request_id` will arrive in the shard's mailbox.
    Pending,
    /// Refused; answer the client with `error.sqlstate()`.
    Refused(AdmissionError),
}

/// The published table is always in the vocabulary of the router's policy; a mismatch is a
/// bug, refused rather than routed.
pub(crate) const TABLE_MISMATCH: &str = "the role table does not match the routing policy";

/// Result of one local admission attempt.
enum LocalAttempt {
    Placed(ReplicaId),
    NeedsControl,
    Raced,
    Refused(AdmissionError),
}

/// The router of one replica set, shared by all shards through an `Arc`.
pub struct ReplicaRouter {
    name: Arc<str>,
    replicas: Box<[SocketAddr]>,
    policy: RouterPolicy,
    initial_table: RouteTable,
    snapshot: ArcSwap<RoutingSnapshot>,
    /// Generation of the newest published snapshot; read after a claim to detect a publish
    /// that raced with the decision.
    published_generation: AtomicU64,
    counters: SessionCounters,
    /// Transactions in flight per replica and class; kept only when PLB decides on them.
    in_flight: SessionCounters,
    /// `load_signal = "in_flight"`: sessions report their transactions.
    counts_in_flight: bool,
    pub(crate) events: EventLog,
    pub(crate) requests: ArrayQueue<ControlRequest>,
    pub(crate) probe_reports: ArrayQueue<ProbeReport>,
    /// The control plane's thread, woken by requests; replaced when a new plane takes over.
    control_thread: ArcSwapOption<Thread>,
    /// Serializes attach/detach of control threads (plane start and stop, never the data path).
    control_handover: Mutex<()>,
    /// The routing as configured, to recognize an unchanged replica set on reload.
    routing: Routing,
    /// Set by a session close while some replica is borrowed: returns may be due.
    pub(crate) loads_changed: AtomicBool,
    /// Bumped at every Down, so sessions between transactions can notice with one load.
    pub(crate) failure_epoch: AtomicU64,
    /// Bumped at every Rejoin under the recovery-tail drain: each session asks once per
    /// value whether it should leave its replica.
    pub(crate) drain_epoch: AtomicU64,
    /// Per replica: a failure report is queued and not yet handled.
    pub(crate) failure_reported: Box<[AtomicBool]>,
    /// The control plane has stopped: nothing will answer new requests.
    pub(crate) stopped: AtomicBool,
    tickets: [AtomicU64; 2],
    random_seed: AtomicU64,
    claim_attempts: u32,
    probe_login: Option<ProbeLogin>,
    stats: RouterCounters,
    pub(crate) authority: Mutex<Authority>,
}

impl fmt::Debug for ReplicaRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaRouter")
            .field("name", &self.name)
            .field("strategy", &self.policy.name())
            .field("table", &self.snapshot.load().table)
            .finish_non_exhaustive()
    }
}

impl ReplicaRouter {
    /// Builds the router and publishes its initial snapshot (generation 1).
    pub fn new(config: RouterConfig) -> Result<Arc<ReplicaRouter>, RouterError> {
        let count = config.replicas.len();
        let (policy, table) = policy_and_table(count, &config.routing)?;
        let name: Arc<str> = Arc::from(config.name.as_str());
        let authority = Authority::new(table.clone(), count);
        let snapshot = RoutingSnapshot::new(authority.generation(), table.clone());
        Ok(Arc::new(ReplicaRouter {
            events: EventLog::new(Arc::clone(&name), config.role_events_capacity),
            name,
            replicas: config.replicas.into_boxed_slice(),
            policy,
            initial_table: table,
            published_generation: AtomicU64::new(snapshot.generation),
            snapshot: ArcSwap::from_pointee(snapshot),
            counters: SessionCounters::new(count),
            in_flight: SessionCounters::new(count),
            counts_in_flight: matches!(
                policy,
                RouterPolicy::Classes(Strategy::Plb(plb)) if plb.load_signal() == LoadSignal::InFlight
            ),
            requests: ArrayQueue::new(config.control_queue_capacity.max(1)),
            probe_reports: ArrayQueue::new(4 * count.max(1)),
            control_thread: ArcSwapOption::empty(),
            control_handover: Mutex::new(()),
            routing: config.routing.clone(),
            loads_changed: AtomicBool::new(false),
            failure_epoch: AtomicU64::new(0),
            drain_epoch: AtomicU64::new(0),
            failure_reported: (0..count).map(|_| AtomicBool::new(false)).collect(),
            stopped: AtomicBool::new(false),
            tickets: [AtomicU64::new(0), AtomicU64::new(0)],
            random_seed: AtomicU64::new(0x5eed),
            claim_attempts: config.claim_attempts.max(1),
            probe_login: config.probe_login,
            stats: RouterCounters::default(),
            authority: Mutex::new(authority),
        }))
    }

    // ---- what a data shard calls ----

    /// Admits a session of `class` at login. `Placed` is the common case (decided here, no
    /// lock, no message). `Pending` means the decision needs a role change: the reply arrives
    /// in `mailbox` tagged with `request_id`. Never blocks. A rank below the router's last
    /// class is served as that class.
    pub fn admit_session(
        self: &Arc<Self>,
        class: impl Into<Tier>,
        mailbox: &Arc<ReplyMailbox>,
        request_id: u64,
    ) -> Admission {
        let class = self.policy.fit(class.into());
        for _ in 0..self.claim_attempts {
            match self.try_place_locally(class) {
                LocalAttempt::Placed(replica) => {
                    self.stats.local_admission();
                    return Admission::Placed(SessionLease::counted(
                        Arc::clone(self),
                        replica,
                        class,
                    ));
                }
                LocalAttempt::NeedsControl => break,
                LocalAttempt::Raced => self.stats.claim_race(),
                LocalAttempt::Refused(error) => return Admission::Refused(error),
            }
        }
        let reply_to = ReplyTo {
            mailbox: Arc::clone(mailbox),
            request_id,
        };
        self.send_to_control(ControlRequest::Admit { class, reply_to })
    }

    /// [`ReplicaRouter::admit_session`] that waits for the control shard's answer on the
    /// calling thread (tests, tools). Do not call it on a shard loop.
    pub fn admit_session_blocking(
        self: &Arc<Self>,
        class: impl Into<Tier>,
        timeout: Duration,
    ) -> Result<SessionLease, AdmissionError> {
        let caller = std::thread::current();
        let mailbox = ReplyMailbox::new(move || caller.unpark());
        match self.admit_session(class, &mailbox, 0) {
            Admission::Placed(lease) => Ok(lease),
            Admission::Refused(error) => Err(error),
            Admission::Pending => wait_for_reply(&mailbox, timeout),
        }
    }

    /// Moves a session off its replica (typically one that went Down) between transactions:
    /// releases the old count and admits the session again for its class. The old replica is
    /// excluded by the policy because it is Down; same contract as `admit_session`.
    pub fn repin(
        self: &Arc<Self>,
        lease: SessionLease,
        mailbox: &Arc<ReplyMailbox>,
        request_id: u64,
    ) -> Admission {
        let (old, class) = (lease.replica(), lease.class());
        drop(lease);
        self.stats.repin();
        let admission = self.admit_session(class, mailbox, request_id);
        if let Admission::Placed(new) = &admission {
            tracing::debug!(router = %self.name, old = old.0, new = new.replica().0, %class, "session re-pinned");
        }
        admission
    }

    /// A shard saw a connection to `replica` refused or reset: the control shard marks it Down
    /// at once (no probe wait). Cheap and non-blocking. A flood of reports about one failure
    /// (every session on the replica sees it) queues one request: further reports are dropped
    /// while one is pending or once the replica is Down.
    pub fn report_server_failure(&self, replica: ReplicaId, cause: ServerFailureCause) {
        self.stats.failure_report();
        let Some(pending) = self.failure_reported.get(replica.index()) else {
            return;
        };
        if self.is_down(replica) || pending.swap(true, Ordering::AcqRel) {
            return;
        }
        if self
            .requests
            .push(ControlRequest::ServerFailure { replica, cause })
            .is_err()
        {
            pending.store(false, Ordering::Release);
            tracing::warn!(router = %self.name, replica = replica.0, "control queue full; failure report dropped (probes will notice)");
        }
        self.wake_control();
    }

    /// Changes each time some replica goes Down. A session between transactions compares it
    /// with the value it saw last and, when it moved, checks [`ReplicaRouter::is_down`] for its
    /// replica. One atomic load.
    pub(crate) fn failure_epoch(&self) -> u64 {
        self.failure_epoch.load(Ordering::Acquire)
    }

    /// Changes at each rejoin while the recovery-tail drain is on; a session compares it with
    /// the value it saw last and, when it moved, asks `ReplicaRouter::should_drain`.
    pub fn drain_epoch(&self) -> u64 {
        self.drain_epoch.load(Ordering::Acquire)
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

    /// True when `replica` is Down in the published snapshot.
    pub fn is_down(&self, replica: ReplicaId) -> bool {
        self.snapshot.load().is_down(replica)
    }

    // ---- read-only views ----

    /// Label of the router (the database entries it serves).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Replica budget `K`.
    pub fn replica_count(&self) -> usize {
        self.replicas.len()
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

    /// The admin name of `replica`'s `role` under this router's policy: PLB's roles, the
    /// fixed class of a `dedicated` replica, `shared` under the other baselines.
    pub fn role_name(&self, replica: ReplicaId, role: RouteRole) -> &'static str {
        match (&self.policy, role) {
            (_, role) if role.is_down() => "down",
            (RouterPolicy::Tiers(_) | RouterPolicy::Classes(Strategy::Plb(_)), role) => {
                role.as_str()
            }
            (RouterPolicy::Classes(Strategy::Dedicated(split)), _) => {
                if split.subset(ServiceClass::Premium).contains(replica) {
                    "premium"
                } else if split.subset(ServiceClass::Freemium).contains(replica) {
                    "freemium"
                } else {
                    "unused"
                }
            }
            _ => "shared",
        }
    }

    /// The layout the router started from (what replaying the event log starts from).
    pub fn initial_table(&self) -> &RouteTable {
        &self.initial_table
    }

    /// The newest published snapshot.
    pub fn snapshot(&self) -> Arc<RoutingSnapshot> {
        self.snapshot.load_full()
    }

    /// The newest published snapshot without touching its reference count (per-read paths).
    pub(crate) fn snapshot_guard(&self) -> arc_swap::Guard<Arc<RoutingSnapshot>> {
        self.snapshot.load()
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

    /// Whether sessions report their transactions (`load_signal = "in_flight"`).
    pub fn counts_in_flight(&self) -> bool {
        self.counts_in_flight
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

    /// The counts one decision reads: open sessions, and the in-flight counts as the signal
    /// when PLB decides on them.
    pub(crate) fn read_loads<'a>(
        &self,
        sessions: &'a mut LoadArray,
        in_flight: &'a mut LoadArray,
    ) -> Loads<'a> {
        let sessions = self.counters.read_into(sessions);
        if self.counts_in_flight {
            Loads {
                signal: self.in_flight.read_into(in_flight),
                sessions,
            }
        } else {
            Loads::sessions(sessions)
        }
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

    /// How admissions were decided so far.
    pub fn stats(&self) -> RouterStats {
        self.stats.snapshot()
    }

    /// How probes of this router log in.
    pub fn probe_login(&self) -> Option<&ProbeLogin> {
        self.probe_login.as_ref()
    }

    // ---- internals shared with the control side ----

    fn try_place_locally(&self, class: Tier) -> LocalAttempt {
        let snapshot = self.snapshot.load();
        let (replica, claimed) = match (&self.policy, &snapshot.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = self.read_loads(&mut sessions, &mut in_flight);
                let two_class = class.two_class();
                let decision =
                    match strategy.route_loads(table, view, two_class, self.draw(two_class)) {
                        Ok(decision) => decision,
                        Err(error) => return LocalAttempt::Refused(error.into()),
                    };
                if !decision.role_changes.is_empty() {
                    return LocalAttempt::NeedsControl;
                }
                let seen = view.sessions.get(decision.replica.index());
                let seen = seen.map_or(0, |load| load.of(two_class));
                let claimed = self.claim_for_decision(decision.replica, class, seen);
                (decision.replica, claimed)
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = self.counters.read_tiers_into(&mut loads);
                let decision = match plb.admit(table, view, class) {
                    Ok(decision) => decision,
                    Err(error) => return LocalAttempt::Refused(error.into()),
                };
                if !decision.role_changes.is_empty() {
                    return LocalAttempt::NeedsControl;
                }
                let seen = view
                    .get(decision.replica.index())
                    .map_or(0, |l| l.of(class));
                let claimed = self.counters.try_claim(decision.replica, class, seen);
                (decision.replica, claimed)
            }
            _ => return LocalAttempt::Refused(AdmissionError::Internal(TABLE_MISMATCH.into())),
        };
        if claimed.is_err() {
            return LocalAttempt::Raced;
        }
        if self.published_generation.load(Ordering::SeqCst) != snapshot.generation {
            self.undo_claim(replica, class);
            return LocalAttempt::Raced;
        }
        LocalAttempt::Placed(replica)
    }

    /// PLB's thresholds depend on the exact session count, so its claims are conditional on
    /// the value the decision read (`seen`); the baselines do not look at thresholds, and an
    /// in-flight signal moves with every transaction, so a compare-and-swap on it would only
    /// spin.
    fn claim_for_decision(
        &self,
        replica: ReplicaId,
        class: Tier,
        seen: u32,
    ) -> Result<(), CounterError> {
        match self.policy {
            RouterPolicy::Classes(Strategy::Plb(_)) if !self.counts_in_flight => {
                self.counters.try_claim(replica, class, seen)
            }
            _ => self.counters.claim(replica, class),
        }
    }

    fn undo_claim(&self, replica: ReplicaId, class: Tier) {
        if let Err(error) = self.counters.release(replica, class) {
            tracing::error!(router = %self.name, replica = replica.0, %error, "undo of a claim failed");
        }
    }

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

    fn send_to_control(&self, request: ControlRequest) -> Admission {
        if self.stopped.load(Ordering::Acquire) {
            return Admission::Refused(AdmissionError::ControlStopped);
        }
        if self.requests.push(request).is_err() {
            return Admission::Refused(AdmissionError::ControlQueueFull);
        }
        self.stats.control_admission();
        self.wake_control();
        Admission::Pending
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

    pub(crate) fn counters(&self) -> &SessionCounters {
        &self.counters
    }

    /// Publishes `table` as generation `generation`.
    pub(crate) fn publish(&self, generation: u64, table: &RouteTable) {
        self.snapshot
            .store(Arc::new(RoutingSnapshot::new(generation, table.clone())));
        self.published_generation
            .store(generation, Ordering::SeqCst);
    }

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

    pub(crate) fn wake_control(&self) {
        if let Some(thread) = self.control_thread.load().as_ref() {
            thread.unpark();
        }
    }

    /// True when this router was built from the same replicas, routing and probe login, so a
    /// reload can keep it (with its sessions, roles and health).
    pub(crate) fn same_setup(&self, config: &RouterConfig) -> bool {
        *self.replicas == *config.replicas
            && self.routing == config.routing
            && self.probe_login == config.probe_login
    }

    pub(crate) fn plb_params(&self) -> PlbParams {
        match self.policy {
            RouterPolicy::Classes(Strategy::Plb(plb)) => *plb.params(),
            _ => PlbParams::PAPER,
        }
    }
}

fn wait_for_reply(
    mailbox: &Arc<ReplyMailbox>,
    timeout: Duration,
) -> Result<SessionLease, AdmissionError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(reply) = mailbox.poll_reply() {
            return reply.result;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(AdmissionError::Timeout);
        }
        std::thread::park_timeout(deadline - now);
    }
}
