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
//! The router is built on its shared state ([`RouterState`]: addresses, policy, snapshot,
//! counters, epochs), which the leases it hands out hold; on top of that it owns admission,
//! the control shard's inbox (requests and probe reports) and the `Authority` behind a lock,
//! and runs the control step that feeds one to the other.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use pgtier_core::config::Routing;
use pgtier_policy::tiers::{Tier, TierLoad};
use pgtier_policy::{MAX_REPLICAS, ReplicaId, ReplicaLoad, ServiceClass, Strategy};

use crate::admission_error::AdmissionError;
use crate::authority::{Authority, ReplicaHealth, TABLE_MISMATCH};
use crate::counters::{LoadArray, TierLoadArray};
use crate::events::ControlEvent;
use crate::health::HealthConfig;
use crate::lease::SessionLease;
use crate::mailbox::{AdmissionReply, ControlRequest, ReplyMailbox, ReplyTo, ServerFailureCause};
use crate::probe::{ProbeLogin, ProbeReport};
use crate::route_table::{RouteRole, RouteTable};
use crate::router_config::{RouterConfig, RouterError, RouterPolicy, policy_and_table};
use crate::router_state::RouterState;
use crate::router_stats::RouterStats;
use crate::snapshot::RoutingSnapshot;

/// Most requests handled per router per control step, so one busy router cannot starve the
/// others or the probes.
const REQUESTS_PER_STEP: usize = 1024;

/// The outcome of [`ReplicaRouter::admit_session`].
#[derive(Debug)]
#[must_use]
pub enum Admission {
    /// Placed and counted on the shard: connect to `lease.replica()`.
    Placed(SessionLease),
    /// Sent to the control shard: an [`AdmissionReply`] with the same `request_id` will
    /// arrive in the shard's mailbox.
    Pending,
    /// Refused; answer the client with `error.sqlstate()`.
    Refused(AdmissionError),
}

/// What one control step did, for the control loop and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepReport {
    /// Requests handled (admissions and failure reports).
    pub requests: usize,
    /// Probe reports handled.
    pub probes: usize,
    /// Snapshots published.
    pub publishes: usize,
}

/// Result of one local admission attempt.
enum LocalAttempt {
    Placed(ReplicaId),
    NeedsControl,
    Raced,
    Refused(AdmissionError),
}

/// The router of one replica set, shared by all shards through an `Arc`.
pub struct ReplicaRouter {
    /// What the leases hold too: one `Arc` so a lease does not keep the rest alive through
    /// the router, and reaches its counts in one step.
    state: Arc<RouterState>,
    initial_table: RouteTable,
    /// The control shard's inbox: admissions that need it and failure reports from shards.
    requests: ArrayQueue<ControlRequest>,
    /// The control shard's inbox: probe results (newest kept when full).
    probe_reports: ArrayQueue<ProbeReport>,
    /// Per replica: a failure report is queued and not yet handled.
    failure_reported: Box<[AtomicBool]>,
    /// The routing as configured, to recognize an unchanged replica set on reload.
    routing: Routing,
    claim_attempts: u32,
    probe_login: Option<ProbeLogin>,
    authority: Mutex<Authority>,
}

impl fmt::Debug for ReplicaRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaRouter")
            .field("name", &self.state.name())
            .field("strategy", &self.state.policy().name())
            .field("table", &self.state.snapshot_guard().table)
            .finish_non_exhaustive()
    }
}

impl ReplicaRouter {
    /// Builds the router and publishes its initial snapshot (generation 1).
    pub fn new(config: RouterConfig) -> Result<Arc<ReplicaRouter>, RouterError> {
        let count = config.replicas.len();
        let (policy, table) = policy_and_table(count, &config.routing)?;
        let authority = Authority::new(table.clone(), count);
        let snapshot = RoutingSnapshot::new(authority.generation(), table.clone());
        let state = RouterState::new(
            Arc::from(config.name.as_str()),
            config.replicas.into_boxed_slice(),
            policy,
            snapshot,
            config.role_events_capacity,
        );
        Ok(Arc::new(ReplicaRouter {
            state: Arc::new(state),
            initial_table: table,
            requests: ArrayQueue::new(config.control_queue_capacity.max(1)),
            probe_reports: ArrayQueue::new(4 * count.max(1)),
            failure_reported: (0..count).map(|_| AtomicBool::new(false)).collect(),
            routing: config.routing.clone(),
            claim_attempts: config.claim_attempts.max(1),
            probe_login: config.probe_login,
            authority: Mutex::new(authority),
        }))
    }

    // ---- what a data shard calls ----

    /// Admits a session of `class` at login. `Placed` is the common case (decided here, no
    /// lock, no message). `Pending` means the decision needs a role change: the reply arrives
    /// in `mailbox` tagged with `request_id`. Never blocks. A rank below the router's last
    /// class is served as that class.
    pub fn admit_session(
        &self,
        class: impl Into<Tier>,
        mailbox: &Arc<ReplyMailbox>,
        request_id: u64,
    ) -> Admission {
        let class = self.state.policy().fit(class.into());
        for _ in 0..self.claim_attempts {
            match self.try_place_locally(class) {
                LocalAttempt::Placed(replica) => {
                    self.state.stats_counters().local_admission();
                    return Admission::Placed(SessionLease::counted(
                        Arc::clone(&self.state),
                        replica,
                        class,
                    ));
                }
                LocalAttempt::NeedsControl => break,
                LocalAttempt::Raced => self.state.stats_counters().claim_race(),
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
        &self,
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
        &self,
        lease: SessionLease,
        mailbox: &Arc<ReplyMailbox>,
        request_id: u64,
    ) -> Admission {
        let (old, class) = (lease.replica(), lease.class());
        drop(lease);
        self.state.stats_counters().repin();
        let admission = self.admit_session(class, mailbox, request_id);
        if let Admission::Placed(new) = &admission {
            tracing::debug!(router = %self.name(), old = old.0, new = new.replica().0, %class, "session re-pinned");
        }
        admission
    }

    /// A shard saw a connection to `replica` refused or reset: the control shard marks it Down
    /// at once (no probe wait). Cheap and non-blocking. A flood of reports about one failure
    /// (every session on the replica sees it) queues one request: further reports are dropped
    /// while one is pending or once the replica is Down.
    pub fn report_server_failure(&self, replica: ReplicaId, cause: ServerFailureCause) {
        self.state.stats_counters().failure_report();
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
            tracing::warn!(router = %self.name(), replica = replica.0, "control queue full; failure report dropped (probes will notice)");
        }
        self.state.wake_control();
    }

    /// Changes at each rejoin while the recovery-tail drain is on (see
    /// [`RouterState::drain_epoch`]).
    pub fn drain_epoch(&self) -> u64 {
        self.state.drain_epoch()
    }

    /// True when `replica` is Down in the published snapshot.
    pub fn is_down(&self, replica: ReplicaId) -> bool {
        self.state.is_down(replica)
    }

    // ---- read-only views ----

    /// The shared state the router's leases hold.
    pub fn state(&self) -> &Arc<RouterState> {
        &self.state
    }

    /// Label of the router (the database entries it serves).
    pub fn name(&self) -> &str {
        self.state.name()
    }

    /// Replica budget `K`.
    pub fn replica_count(&self) -> usize {
        self.state.replicas().len()
    }

    /// Address of `replica`.
    pub fn replica_addr(&self, replica: ReplicaId) -> Option<SocketAddr> {
        self.state.replica_addr(replica)
    }

    /// The replica with address `addr`.
    pub(crate) fn replica_id(&self, addr: SocketAddr) -> Option<ReplicaId> {
        self.state.replica_id(addr)
    }

    /// The configured policy.
    pub fn policy(&self) -> &RouterPolicy {
        self.state.policy()
    }

    /// The admin name of `replica`'s `role` under this router's policy: PLB's roles, the
    /// fixed class of a `dedicated` replica, `shared` under the other baselines.
    pub fn role_name(&self, replica: ReplicaId, role: RouteRole) -> &'static str {
        match (self.state.policy(), role) {
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
        self.state.snapshot()
    }

    /// The newest published snapshot without touching its reference count (per-read paths).
    pub(crate) fn snapshot_guard(&self) -> arc_swap::Guard<Arc<RoutingSnapshot>> {
        self.state.snapshot_guard()
    }

    /// Active sessions of each class on `replica` (ranks below freemium counted as freemium).
    pub fn load(&self, replica: ReplicaId) -> ReplicaLoad {
        self.state.load(replica)
    }

    /// Active sessions of each rank on `replica`.
    pub fn tier_load(&self, replica: ReplicaId) -> TierLoad {
        self.state.tier_load(replica)
    }

    /// Active sessions on all replicas.
    pub fn total_sessions(&self) -> u64 {
        self.state.total_sessions()
    }

    /// Transactions in flight of each class on `replica` (zero unless PLB decides on them).
    pub fn in_flight(&self, replica: ReplicaId) -> ReplicaLoad {
        self.state.in_flight(replica)
    }

    /// Whether sessions report their transactions (`load_signal = "in_flight"`).
    pub fn counts_in_flight(&self) -> bool {
        self.state.counts_in_flight()
    }

    /// Kept events, oldest first.
    pub fn events(&self) -> Vec<ControlEvent> {
        self.state.events()
    }

    /// Number of events ever recorded.
    pub fn events_recorded(&self) -> u64 {
        self.state.events_recorded()
    }

    /// Borrows and returns ever recorded.
    pub fn role_events_recorded(&self) -> u64 {
        self.state.role_events_recorded()
    }

    /// How admissions were decided so far.
    pub fn stats(&self) -> RouterStats {
        self.state.stats()
    }

    /// How probes of this router log in.
    pub fn probe_login(&self) -> Option<&ProbeLogin> {
        self.probe_login.as_ref()
    }

    /// Health of every replica (for the admin console).
    pub fn replica_health(&self) -> Vec<ReplicaHealth> {
        self.authority().health().to_vec()
    }

    // ---- what the fleet calls ----

    /// Whether a fleet's leader decides this router's returns (fleet mode) or this host
    /// does (local mode).
    pub(crate) fn set_fleet_mode(&self, fleet: bool) {
        self.authority().set_fleet(fleet);
    }

    /// Adopts the role table a fleet's leader published (see `crate::fleet`).
    pub(crate) fn apply_fleet_table(&self, table: &RouteTable) {
        self.authority().apply_fleet_table(&self.state, table);
    }

    /// The table the control shard holds now (what a new fleet starts from).
    pub(crate) fn authority_table(&self) -> RouteTable {
        self.authority().table().clone()
    }

    // ---- what the control plane calls ----

    /// Runs everything pending for this router: health reports first (so no admission lands
    /// on a replica just found dead), then queued requests, then returns when a session close
    /// asked for them or `force_returns` (the periodic tick) is set. The control plane calls
    /// this; tests without a plane may call it directly.
    pub fn run_control_step(&self, health: &HealthConfig, force_returns: bool) -> StepReport {
        let mut report = StepReport::default();
        let mut authority = self.authority();
        while let Some(probe) = self.probe_reports.pop() {
            report.probes += 1;
            report.publishes += authority.on_probe(&self.state, probe, health);
        }
        while report.requests < REQUESTS_PER_STEP {
            let Some(request) = self.requests.pop() else {
                break;
            };
            report.requests += 1;
            report.publishes += self.on_request(&mut authority, request);
        }
        if self.state.take_loads_changed() || force_returns {
            report.publishes += authority.evaluate_returns(&self.state);
        }
        report
    }

    /// Queues a probe's result for the control step and wakes the control thread. A full
    /// queue means the control shard is far behind; the newest result matters most, so it
    /// displaces the oldest.
    pub(crate) fn report_probe(&self, report: ProbeReport) {
        let _displaced = self.probe_reports.force_push(report);
        self.state.wake_control();
    }

    /// Whether requests or probe reports wait for a control step.
    pub(crate) fn has_pending_control_work(&self) -> bool {
        !self.requests.is_empty() || !self.probe_reports.is_empty()
    }

    /// Marks the router stopped and answers every queued admission with
    /// [`AdmissionError::ControlStopped`] (shutdown). Later admissions that need the control
    /// shard are refused at once.
    pub(crate) fn refuse_pending(&self) {
        self.state.stop();
        while let Some(request) = self.requests.pop() {
            if let ControlRequest::Admit { reply_to, .. } = request {
                reply_to.mailbox.deliver(AdmissionReply {
                    request_id: reply_to.request_id,
                    result: Err(AdmissionError::ControlStopped),
                });
            }
        }
    }

    /// Makes `thread` the one requests wake, and accepts requests again.
    pub(crate) fn attach_control_thread(&self, thread: Thread) {
        self.state.attach_control_thread(thread);
    }

    /// Detaches `thread` if it is still the attached one (a newer plane may have taken over);
    /// returns whether it was.
    pub(crate) fn detach_control_thread(&self, thread: &Thread) -> bool {
        self.state.detach_control_thread(thread)
    }

    /// True when this router was built from the same replicas, routing and probe login, so a
    /// reload can keep it (with its sessions, roles and health).
    pub(crate) fn same_setup(&self, config: &RouterConfig) -> bool {
        *self.state.replicas() == *config.replicas
            && self.routing == config.routing
            && self.probe_login == config.probe_login
    }

    // ---- internals ----

    fn authority(&self) -> std::sync::MutexGuard<'_, Authority> {
        self.authority
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn on_request(&self, authority: &mut Authority, request: ControlRequest) -> usize {
        match request {
            ControlRequest::Admit { class, reply_to } => {
                let (result, published) = authority.admit(&self.state, class);
                reply_to.mailbox.deliver(AdmissionReply {
                    request_id: reply_to.request_id,
                    result,
                });
                published
            }
            ControlRequest::ServerFailure { replica, cause } => {
                if let Some(pending) = self.failure_reported.get(replica.index()) {
                    pending.store(false, Ordering::Release);
                }
                authority.on_reported_failure(&self.state, replica, cause.as_str())
            }
        }
    }

    fn try_place_locally(&self, class: Tier) -> LocalAttempt {
        let state = &self.state;
        let snapshot = state.snapshot_guard();
        let (replica, claimed) = match (state.policy(), &snapshot.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = state.read_loads(&mut sessions, &mut in_flight);
                let two_class = class.two_class();
                let decision =
                    match strategy.route_loads(table, view, two_class, state.draw(two_class)) {
                        Ok(decision) => decision,
                        Err(error) => return LocalAttempt::Refused(error.into()),
                    };
                if !decision.role_changes.is_empty() {
                    return LocalAttempt::NeedsControl;
                }
                let seen = view.sessions.get(decision.replica.index());
                let seen = seen.map_or(0, |load| load.of(two_class));
                let claimed = state.claim_for_decision(decision.replica, class, seen);
                (decision.replica, claimed)
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = state.read_tier_loads(&mut loads);
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
                let claimed = state.claim_tier(decision.replica, class, seen);
                (decision.replica, claimed)
            }
            _ => return LocalAttempt::Refused(AdmissionError::Internal(TABLE_MISMATCH.into())),
        };
        if claimed.is_err() {
            return LocalAttempt::Raced;
        }
        if state.published_generation() != snapshot.generation {
            state.undo_claim(replica, class);
            return LocalAttempt::Raced;
        }
        LocalAttempt::Placed(replica)
    }

    fn send_to_control(&self, request: ControlRequest) -> Admission {
        if self.state.is_stopped() {
            return Admission::Refused(AdmissionError::ControlStopped);
        }
        if self.requests.push(request).is_err() {
            return Admission::Refused(AdmissionError::ControlQueueFull);
        }
        self.state.stats_counters().control_admission();
        self.state.wake_control();
        Admission::Pending
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
