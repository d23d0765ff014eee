//! The control shard's side of a router: the authoritative role table and replica health, and
//! the one code path that changes them.
//!
//! `Authority` works on the router's shared state ([`RouterState`]): it reads the counters,
//! counts the sessions it admits, records events and publishes snapshots there. The router
//! holds it behind a lock only the control step (and the admin view of health) takes, and
//! feeds it the requests and probe reports of its inbox.
//!
//! Role changes are decided here against the authoritative table and the current counters,
//! applied with the policy's precondition check, numbered in the event log, and only then
//! published as a new snapshot. Because a single thread runs this code for a router, two
//! borrows decided on the same stale snapshot by two shards are serialized: the second is
//! re-decided, not applied twice. Health transitions (probe results, shard reports) feed the
//! policy's failure handling (repair to target) through the same path.

use std::sync::Arc;
use std::time::SystemTime;

use pgtier_policy::tiers::{Tier, TierChange, TierLoad, TieredPlb};
use pgtier_policy::{MAX_REPLICAS, ReplicaId, ReplicaLoad, RoleChange, Strategy};

use crate::admission_error::AdmissionError;
use crate::counters::{LoadArray, TierLoadArray};
use crate::events::{EventKind, HealthTransition};
use crate::health::{HealthConfig, HealthState, LastProbe, ProbeOutcome};
use crate::lease::SessionLease;
use crate::probe::ProbeReport;
use crate::route_table::RouteTable;
use crate::router_config::RouterPolicy;
use crate::router_state::RouterState;

/// The published table is always in the vocabulary of the router's policy; a mismatch is a
/// bug, refused rather than routed.
pub(crate) const TABLE_MISMATCH: &str = "the role table does not match the routing policy";

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
    /// The table comes from a fleet's leader (see `crate::fleet`): returns are the
    /// leader's, decided on the fleet's summed load, not on this host's share of it.
    fleet: bool,
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
            fleet: false,
        }
    }

    /// Whether a fleet's leader decides this router's returns.
    pub(crate) fn set_fleet(&mut self, fleet: bool) {
        self.fleet = fleet;
    }

    /// The table the control shard holds now.
    pub(crate) fn table(&self) -> &RouteTable {
        &self.table
    }

    /// Adopts a table the fleet's leader computed. A replica this host's own probes see Down
    /// stays Down here (with the local repair around it) until the fleet agrees; a table of
    /// another vocabulary (a leader with another configuration) is refused. Returns the
    /// snapshots published.
    pub(crate) fn apply_fleet_table(&mut self, state: &RouterState, fleet: &RouteTable) -> usize {
        let same_shape = match (&self.table, fleet) {
            (RouteTable::Classes(mine), RouteTable::Classes(theirs)) => mine.len() == theirs.len(),
            (RouteTable::Tiers(mine), RouteTable::Tiers(theirs)) => {
                mine.len() == theirs.len() && mine.tiers() == theirs.tiers()
            }
            _ => false,
        };
        if !same_shape {
            tracing::warn!(router = %state.name(), "the fleet's table does not fit this router's configuration; kept the local one");
            return 0;
        }
        let was_down: Vec<bool> = (0..self.health.len())
            .map(|index| ReplicaId::from_index(index).is_none_or(|r| self.is_table_down(r)))
            .collect();
        self.table = fleet.clone();
        for index in 0..self.health.len() {
            let Some(replica) = ReplicaId::from_index(index) else {
                break;
            };
            if !self.health[index].state.is_up() && !self.is_table_down(replica) {
                self.repair_down(state, replica);
            }
        }
        let newly_down = (0..self.health.len()).any(|index| {
            ReplicaId::from_index(index).is_some_and(|r| self.is_table_down(r) && !was_down[index])
        });
        self.publish(state);
        if newly_down {
            state.bump_failure_epoch();
        }
        1
    }

    fn is_table_down(&self, replica: ReplicaId) -> bool {
        self.table.role(replica).is_none_or(|role| role.is_down())
    }

    /// Marks `replica` Down in the table with the policy's repair, without an event (the
    /// health transition that caused it was recorded when it happened).
    fn repair_down(&mut self, state: &RouterState, replica: ReplicaId) {
        let repaired = match (*state.policy(), &mut self.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut loads: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = state.counters().read_into(&mut loads);
                strategy.handle_down(table, replica, view).map(|_| ())
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = state.counters().read_tiers_into(&mut loads);
                plb.handle_down(table, replica, view).map(|_| ())
            }
            _ => Ok(()),
        };
        if let Err(error) = repaired {
            tracing::error!(router = %state.name(), %error, "failure handling refused");
        }
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Health of every replica.
    pub(crate) fn health(&self) -> &[ReplicaHealth] {
        &self.health
    }

    /// A data shard saw a connection to `replica` fail: Down at once (no probe wait).
    /// Returns the snapshots published.
    pub(crate) fn on_reported_failure(
        &mut self,
        state: &RouterState,
        replica: ReplicaId,
        cause: &str,
    ) -> usize {
        let Some(health) = self.health.get_mut(replica.index()) else {
            tracing::warn!(router = %state.name(), replica = replica.0, "failure report for an unknown replica");
            return 0;
        };
        match health.state.on_reported_failure() {
            Some(transition) => self.on_transition(state, replica, transition, cause),
            None => 0,
        }
    }

    /// Decides against the authoritative table, applies the implied role changes, counts the
    /// session, then publishes. The count comes before the publish so that no shard sees the
    /// new table without the session that caused it. Returns the lease (or why not) and the
    /// snapshots published.
    pub(crate) fn admit(
        &mut self,
        state: &Arc<RouterState>,
        class: Tier,
    ) -> (Result<SessionLease, AdmissionError>, usize) {
        let decided = match (*state.policy(), &self.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = state.read_loads(&mut sessions, &mut in_flight);
                let two_class = class.two_class();
                strategy
                    .route_loads(table, view, two_class, state.draw(two_class))
                    .map_err(AdmissionError::from)
                    .map(|decision| {
                        let applied = self.apply_changes(state, decision.role_changes.as_slice());
                        (decision.replica, applied)
                    })
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = state.read_tier_loads(&mut loads);
                plb.admit(table, view, class)
                    .map_err(AdmissionError::from)
                    .map(|decision| {
                        let applied =
                            self.apply_tier_changes(state, &plb, decision.role_changes.as_slice());
                        (decision.replica, applied)
                    })
            }
            _ => Err(AdmissionError::Internal(TABLE_MISMATCH.into())),
        };
        let (replica, applied) = match decided {
            Ok(decided) => decided,
            Err(error) => return (Err(error), 0),
        };
        let counted = state.counters().claim(replica, class);
        let published = usize::from(applied.applied > 0);
        if published > 0 {
            self.publish(state);
        }
        let result = match (applied.conflict, counted) {
            (Some(conflict), Ok(())) => {
                // The session is counted; a refused change is a bug, so refuse the session
                // rather than route it against a table the policy did not expect.
                drop(SessionLease::counted(Arc::clone(state), replica, class));
                Err(AdmissionError::Internal(conflict))
            }
            (_, Err(error)) => Err(error.into()),
            (None, Ok(())) => Ok(SessionLease::counted(Arc::clone(state), replica, class)),
        };
        (result, published)
    }

    /// Applies the returns the policy finds due on the current counts. Returns the snapshots
    /// published.
    pub(crate) fn evaluate_returns(&mut self, state: &RouterState) -> usize {
        if self.fleet {
            return 0;
        }
        let applied = match (*state.policy(), &self.table) {
            (RouterPolicy::Classes(Strategy::Plb(plb)), RouteTable::Classes(table)) => {
                let mut sessions: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let mut in_flight: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = state.read_loads(&mut sessions, &mut in_flight);
                match plb.returns_loads(table, view) {
                    Ok(changes) => self.apply_changes(state, changes.as_slice()),
                    Err(error) => {
                        tracing::error!(router = %state.name(), %error, "return evaluation failed");
                        return 0;
                    }
                }
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = state.counters().read_tiers_into(&mut loads);
                match plb.returns(table, view) {
                    Ok(changes) => self.apply_tier_changes(state, &plb, changes.as_slice()),
                    Err(error) => {
                        tracing::error!(router = %state.name(), %error, "return evaluation failed");
                        return 0;
                    }
                }
            }
            _ => return 0,
        };
        if applied.applied == 0 {
            return 0;
        }
        self.publish(state);
        1
    }

    /// Applies `changes` in order with the precondition check; stops at the first conflict.
    fn apply_changes(&mut self, state: &RouterState, changes: &[RoleChange]) -> Applied {
        let params = state.plb_params();
        let mut applied = Applied::default();
        let RouteTable::Classes(table) = &mut self.table else {
            applied.conflict = Some(TABLE_MISMATCH.into());
            return applied;
        };
        for change in changes {
            if let Err(conflict) = table.apply(change, &params) {
                tracing::error!(router = %state.name(), %change, %conflict, "role change refused");
                applied.conflict = Some(format!("{change}: {conflict}"));
                break;
            }
            record_role_change(state, change);
            applied.applied += 1;
        }
        applied
    }

    /// [`Authority::apply_changes`] for tiered PLB.
    fn apply_tier_changes(
        &mut self,
        state: &RouterState,
        plb: &TieredPlb,
        changes: &[TierChange],
    ) -> Applied {
        let mut applied = Applied::default();
        let RouteTable::Tiers(table) = &mut self.table else {
            applied.conflict = Some(TABLE_MISMATCH.into());
            return applied;
        };
        for change in changes {
            if let Err(conflict) = table.apply(change, plb.params()) {
                tracing::error!(router = %state.name(), %change, %conflict, "role change refused");
                applied.conflict = Some(format!("{change}: {conflict}"));
                break;
            }
            record_tier_change(state, change);
            applied.applied += 1;
        }
        applied
    }

    /// A probe's result: feeds the replica's health state machine. Returns the snapshots
    /// published.
    pub(crate) fn on_probe(
        &mut self,
        state: &RouterState,
        probe: ProbeReport,
        config: &HealthConfig,
    ) -> usize {
        let Some(health) = self.health.get_mut(probe.replica.index()) else {
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
            Some(transition) => self.on_transition(state, probe.replica, transition, &cause),
            None => 0,
        }
    }

    /// A Down or Rejoin: record it, let the strategy repair the table, publish.
    fn on_transition(
        &mut self,
        state: &RouterState,
        replica: ReplicaId,
        transition: HealthTransition,
        cause: &str,
    ) -> usize {
        let now = SystemTime::now();
        if let Some(health) = self.health.get_mut(replica.index()) {
            health.since = now;
        }
        state.event_log().record(
            now,
            EventKind::Health {
                replica,
                transition,
                cause: cause.to_string(),
            },
        );
        let repaired = match (*state.policy(), &mut self.table) {
            (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
                let mut loads: LoadArray = [ReplicaLoad::default(); MAX_REPLICAS];
                let view = state.counters().read_into(&mut loads);
                let repaired = match transition {
                    HealthTransition::Down => strategy.handle_down(table, replica, view),
                    HealthTransition::Rejoin => strategy.handle_rejoin(table, replica, view),
                };
                repaired.map(|changes| {
                    changes
                        .iter()
                        .for_each(|change| record_role_change(state, change))
                })
            }
            (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
                let mut loads: TierLoadArray = [TierLoad::default(); MAX_REPLICAS];
                let view = state.counters().read_tiers_into(&mut loads);
                let repaired = match transition {
                    HealthTransition::Down => plb.handle_down(table, replica, view),
                    HealthTransition::Rejoin => plb.handle_rejoin(table, replica, view),
                };
                repaired.map(|changes| {
                    changes
                        .iter()
                        .for_each(|change| record_tier_change(state, change))
                })
            }
            _ => {
                tracing::error!(router = %state.name(), "{TABLE_MISMATCH}");
                Ok(())
            }
        };
        if let Err(error) = repaired {
            tracing::error!(router = %state.name(), %error, "failure handling refused");
        }
        self.publish(state);
        // After the publish: a session that sees the new epoch must find its replica Down.
        if transition == HealthTransition::Down {
            state.bump_failure_epoch();
        }
        // After the publish too: sessions that ask see the rejoined replica's new role.
        if transition == HealthTransition::Rejoin
            && matches!(state.policy(), RouterPolicy::Classes(Strategy::Plb(plb)) if plb.recovery_drain())
        {
            state.bump_drain_epoch();
        }
        1
    }

    /// Publishes the authoritative table as the next generation.
    fn publish(&mut self, state: &RouterState) {
        self.generation += 1;
        state.publish(self.generation, &self.table);
    }
}

fn record_role_change(state: &RouterState, change: &RoleChange) {
    let class = change.to.borrower().or(change.from.borrower());
    state.event_log().record(
        SystemTime::now(),
        EventKind::Role {
            change: *change,
            class,
        },
    );
}

fn record_tier_change(state: &RouterState, change: &TierChange) {
    state
        .event_log()
        .record(SystemTime::now(), EventKind::TierRole { change: *change });
}

/// Outcome of [`Authority::apply_changes`].
#[derive(Default)]
struct Applied {
    applied: usize,
    conflict: Option<String>,
}
