//! The control shard's side of a router: the authoritative role table and replica health, and
//! the one code path that changes them.
//!
//! Role changes are decided here against the authoritative table and the current counters,
//! applied with the policy's precondition check, numbered in the event log, and only then
//! published as a new snapshot. Because a single thread runs this code for a router, two
//! borrows decided on the same stale snapshot by two shards are serialized: the second is
//! re-decided, not applied twice. Health transitions (probe results, shard reports) feed the
//! policy's failure handling (repair to target) through the same path.

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::SystemTime;

use pgtier_policy::tiers::{Tier, TierChange, TierLoad, TieredPlb};
use pgtier_policy::{MAX_REPLICAS, ReplicaId, ReplicaLoad, RoleChange, Strategy};

use crate::admission_error::AdmissionError;
use crate::counters::{LoadArray, TierLoadArray};
use crate::events::{EventKind, HealthTransition};
use crate::health::{HealthConfig, HealthState, LastProbe, ProbeOutcome};
use crate::lease::SessionLease;
use crate::mailbox::{AdmissionReply, ControlRequest};
use crate::probe::ProbeReport;
use crate::route_table::RouteTable;
use crate::router::{ReplicaRouter, TABLE_MISMATCH};
use crate::router_config::RouterPolicy;

/// Most requests handled per router per control step, so one busy router cannot starve the
/// others or the probes.
const REQUESTS_PER_STEP: usize = 1024;

/// Health of one replica as the control shard knows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaHealth {
    /// State machine position.
    pub state: HealthState,
    /// Newest probe, if any ran.
    pub last_probe: Option<LastProbe>,
    /// When the replica last changed state (start time until then).
    pub since: SystemTime,
}

/// Authoritative state of one router; only the control shard mutates it.
#[derive(Debug)]
pub(crate) struct Authority {
    table: RouteTable,
    generation: u64,
    health: Vec<ReplicaHealth>,
}

impl Authority {
    pub(crate) fn new(table: RouteTable, replica_count: usize) -> Authority {
        let now = SystemTime::now();
        Authority {
            table,
            generation: 1,
            health: (0..replica_count)
                .map(|_| ReplicaHealth {
                    state: HealthState::INITIAL,
                    last_probe: None,
                    since: now,
                })
                .collect(),
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }
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

impl ReplicaRouter {
    /// Runs everything pending for this router: health reports first (so no admission lands
    /// on a replica just found dead), then queued requests, then returns when a session close
    /// asked for them or `force_returns` (the periodic tick) is set. The control plane calls
    /// this; tests without a plane may call it directly.
    pub fn run_control_step(
        self: &Arc<Self>,
        health: &HealthConfig,
        force_returns: bool,
    ) -> StepReport {
        let mut report = StepReport::default();
        let mut authority = self
            .authority
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        while let Some(probe) = self.probe_reports.pop() {
            report.probes += 1;
            report.publishes += self.on_probe(&mut authority, probe, health);
        }
        while report.requests < REQUESTS_PER_STEP {
            let Some(request) = self.requests.pop() else {
                break;
            };
            report.requests += 1;
            report.publishes += self.on_request(&mut authority, request);
        }
        let asked = self.loads_changed.swap(false, Ordering::AcqRel);
        if asked || force_returns {
            report.publishes += self.evaluate_returns(&mut authority);
        }
        report
    }

    /// Health of every replica (for the admin console).
    pub fn replica_health(&self) -> Vec<ReplicaHealth> {
        let authority = self
            .authority
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        authority.health.clone()
    }

    /// Marks the router stopped and answers every queued admission with
    /// [`AdmissionError::ControlStopped`] (shutdown). Later admissions that need the control
    /// shard are refused at once.
    pub(crate) fn refuse_pending(&self) {
        self.stopped.store(true, Ordering::Release);
        while let Some(request) = self.requests.pop() {
            if let ControlRequest::Admit { reply_to, .. } = request {
                reply_to.mailbox.deliver(AdmissionReply {
                    request_id: reply_to.request_id,
                    result: Err(AdmissionError::ControlStopped),
                });
            }
        }
    }

    fn on_request(self: &Arc<Self>, authority: &mut Authority, request: ControlRequest) -> usize {
        match request {
            ControlRequest::Admit { class, reply_to } => {
                let (result, published) = self.admit_on_control(authority, class);
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
                let Some(health) = authority.health.get_mut(replica.index()) else {
                    tracing::warn!(router = %self.name(), replica = replica.0, "failure report for an unknown replica");
                    return 0;
                };
                match health.state.on_reported_failure() {
                    Some(transition) => {
                        self.on_transition(authority, replica, transition, cause.as_str())
                    }
                    None => 0,
                }
            }
        }
    }

    /// Decides against the authoritative table, applies the implied role changes, counts the
    /// session, then publishes. The count comes before the publish so that no shard sees the
    /// new table without the session that caused it.
    fn admit_on_control(
        self: &Arc<Self>,
        authority: &mut Authority,
        class: Tier,
    ) -> (Result<SessionLease, AdmissionError>, usize) {
        let decided = match (*self.policy(), &authority.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = self.read_loads(&mut sessions, &mut in_flight);
                let two_class = class.two_class();
                strategy
                    .route_loads(table, view, two_class, self.draw(two_class))
                    .map_err(AdmissionError::from)
                    .map(|decision| {
                        let applied =
                            self.apply_changes(authority, decision.role_changes.as_slice());
                        (decision.replica, applied)
                    })
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = self.counters().read_tiers_into(&mut loads);
                plb.admit(table, view, class)
                    .map_err(AdmissionError::from)
                    .map(|decision| {
                        let applied = self.apply_tier_changes(
                            authority,
                            &plb,
                            decision.role_changes.as_slice(),
                        );
                        (decision.replica, applied)
                    })
            }
            _ => Err(AdmissionError::Internal(TABLE_MISMATCH.into())),
        };
        let (replica, applied) = match decided {
            Ok(decided) => decided,
            Err(error) => return (Err(error), 0),
        };
        let counted = self.counters().claim(replica, class);
        let published = usize::from(applied.applied > 0);
        if published > 0 {
            self.publish_authority(authority);
        }
        let result = match (applied.conflict, counted) {
            (Some(conflict), Ok(())) => {
                // The session is counted; a refused change is a bug, so refuse the session
                // rather than route it against a table the policy did not expect.
                drop(SessionLease::counted(Arc::clone(self), replica, class));
                Err(AdmissionError::Internal(conflict))
            }
            (_, Err(error)) => Err(error.into()),
            (None, Ok(())) => Ok(SessionLease::counted(Arc::clone(self), replica, class)),
        };
        (result, published)
    }

    fn evaluate_returns(&self, authority: &mut Authority) -> usize {
        let applied = match (*self.policy(), &authority.table) {
            (RouterPolicy::Classes(Strategy::Plb(plb)), RouteTable::Classes(table)) => {
                let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = self.read_loads(&mut sessions, &mut in_flight);
                match plb.returns_loads(table, view) {
                    Ok(changes) => self.apply_changes(authority, changes.as_slice()),
                    Err(error) => {
                        tracing::error!(router = %self.name(), %error, "return evaluation failed");
                        return 0;
                    }
                }
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = self.counters().read_tiers_into(&mut loads);
                match plb.returns(table, view) {
                    Ok(changes) => self.apply_tier_changes(authority, &plb, changes.as_slice()),
                    Err(error) => {
                        tracing::error!(router = %self.name(), %error, "return evaluation failed");
                        return 0;
                    }
                }
            }
            _ => return 0,
        };
        if applied.applied == 0 {
            return 0;
        }
        self.publish_authority(authority);
        1
    }

    /// Applies `changes` in order with the precondition check; stops at the first conflict.
    fn apply_changes(&self, authority: &mut Authority, changes: &[RoleChange]) -> Applied {
        let params = self.plb_params();
        let mut applied = Applied::default();
        let RouteTable::Classes(table) = &mut authority.table else {
            applied.conflict = Some(TABLE_MISMATCH.into());
            return applied;
        };
        for change in changes {
            if let Err(conflict) = table.apply(change, &params) {
                tracing::error!(router = %self.name(), %change, %conflict, "role change refused");
                applied.conflict = Some(format!("{change}: {conflict}"));
                break;
            }
            self.record_role_change(change);
            applied.applied += 1;
        }
        applied
    }

    /// [`ReplicaRouter::apply_changes`] for tiered PLB.
    fn apply_tier_changes(
        &self,
        authority: &mut Authority,
        plb: &TieredPlb,
        changes: &[TierChange],
    ) -> Applied {
        let mut applied = Applied::default();
        let RouteTable::Tiers(table) = &mut authority.table else {
            applied.conflict = Some(TABLE_MISMATCH.into());
            return applied;
        };
        for change in changes {
            if let Err(conflict) = table.apply(change, plb.params()) {
                tracing::error!(router = %self.name(), %change, %conflict, "role change refused");
                applied.conflict = Some(format!("{change}: {conflict}"));
                break;
            }
            self.record_tier_change(change);
            applied.applied += 1;
        }
        applied
    }

    fn on_probe(
        &self,
        authority: &mut Authority,
        probe: ProbeReport,
        config: &HealthConfig,
    ) -> usize {
        let Some(health) = authority.health.get_mut(probe.replica.index()) else {
            return 0;
        };
        let transition = health.state.on_probe(probe.outcome.is_healthy(), config);
        let cause = match &probe.outcome {
            ProbeOutcome::Healthy { .. } => "probes succeeded".to_string(),
            ProbeOutcome::Failed { cause } => format!("probe failed: {cause}"),
        };
        health.last_probe = Some(LastProbe {
            at: probe.at,
            outcome: probe.outcome,
        });
        match transition {
            Some(transition) => self.on_transition(authority, probe.replica, transition, &cause),
            None => 0,
        }
    }

    /// A Down or Rejoin: record it, let the strategy repair the table, publish.
    fn on_transition(
        &self,
        authority: &mut Authority,
        replica: ReplicaId,
        transition: HealthTransition,
        cause: &str,
    ) -> usize {
        let now = SystemTime::now();
        if let Some(health) = authority.health.get_mut(replica.index()) {
            health.since = now;
        }
        self.events.record(
            now,
            EventKind::Health {
                replica,
                transition,
                cause: cause.to_string(),
            },
        );
        let repaired = match (*self.policy(), &mut authority.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut loads: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = self.counters().read_into(&mut loads);
                let repaired = match transition {
                    HealthTransition::Down => strategy.handle_down(table, replica, view),
                    HealthTransition::Rejoin => strategy.handle_rejoin(table, replica, view),
                };
                repaired.map(|changes| {
                    changes
                        .iter()
                        .for_each(|change| self.record_role_change(change))
                })
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = self.counters().read_tiers_into(&mut loads);
                let repaired = match transition {
                    HealthTransition::Down => plb.handle_down(table, replica, view),
                    HealthTransition::Rejoin => plb.handle_rejoin(table, replica, view),
                };
                repaired.map(|changes| {
                    changes
                        .iter()
                        .for_each(|change| self.record_tier_change(change))
                })
            }
            _ => {
                tracing::error!(router = %self.name(), "{TABLE_MISMATCH}");
                Ok(())
            }
        };
        if let Err(error) = repaired {
            tracing::error!(router = %self.name(), %error, "failure handling refused");
        }
        self.publish_authority(authority);
        // After the publish: a session that sees the new epoch must find its replica Down.
        if transition == HealthTransition::Down {
            self.failure_epoch.fetch_add(1, Ordering::AcqRel);
        }
        // After the publish too: sessions that ask see the rejoined replica's new role.
        if transition == HealthTransition::Rejoin
            && matches!(self.policy(), RouterPolicy::Classes(Strategy::Plb(plb)) if plb.recovery_drain())
        {
            self.drain_epoch.fetch_add(1, Ordering::AcqRel);
        }
        1
    }

    fn record_role_change(&self, change: &RoleChange) {
        let class = change.to.borrower().or(change.from.borrower());
        self.events.record(
            SystemTime::now(),
            EventKind::Role {
                change: *change,
                class,
            },
        );
    }

    fn record_tier_change(&self, change: &TierChange) {
        self.events
            .record(SystemTime::now(), EventKind::TierRole { change: *change });
    }

    fn publish_authority(&self, authority: &mut Authority) {
        authority.generation += 1;
        self.publish(authority.generation, &authority.table);
    }
}

/// Outcome of [`ReplicaRouter::apply_changes`].
#[derive(Default)]
struct Applied {
    applied: usize,
    conflict: Option<String>,
}
