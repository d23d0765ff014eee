//! One entry point for every routing strategy, selected by its configuration name, so the
//! proxy and the simulator drive PLB and the baselines through the same calls.

use core::fmt;
use core::str::FromStr;

use crate::admission::{
    Admission, AdmissionRule, AdmitError, RepairChanges, empty_admission_changes,
    empty_repair_changes,
};
use crate::baseline::{Dedicated, P2c, least_sessions, round_robin};
use crate::plb::Plb;
use crate::replica::{ReplicaId, ReplicaLoad, ServiceClass};
use crate::role::{ChangeReason, Role, RoleChange};
use crate::signal::Loads;
use crate::table::RoleTable;
use crate::tiers::FailureError;

/// Configuration names of the strategies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrategyName {
    /// `plb`: priority-aware load balancing (000).
    Plb,
    /// `round_robin`: KRR.
    RoundRobin,
    /// `dedicated`: rRR+fRR.
    Dedicated,
    /// `p2c`: weighted power of two choices.
    P2c,
    /// `least_sessions`: fewest active sessions.
    LeastSessions,
}

impl StrategyName {
    /// Every strategy, in documentation order.
    pub const ALL: [StrategyName; 5] = [
        StrategyName::Plb,
        StrategyName::RoundRobin,
        StrategyName::Dedicated,
        StrategyName::P2c,
        StrategyName::LeastSessions,
    ];

    /// The configuration spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            StrategyName::Plb => "plb",
            StrategyName::RoundRobin => "round_robin",
            StrategyName::Dedicated => "dedicated",
            StrategyName::P2c => "p2c",
            StrategyName::LeastSessions => "least_sessions",
        }
    }
}

impl fmt::Display for StrategyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A routing name that is not one of [`StrategyName::ALL`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownStrategy(pub String);

impl fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown routing {:?}; expected one of plb, round_robin, dedicated, p2c, least_sessions",
            self.0
        )
    }
}

impl std::error::Error for UnknownStrategy {}

impl FromStr for StrategyName {
    type Err = UnknownStrategy;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        StrategyName::ALL
            .into_iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| UnknownStrategy(name.to_owned()))
    }
}

/// Caller-held inputs that make stateless strategies behave statefully yet deterministically.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Draw {
    /// Round-robin position: a counter the caller increments per admission (one per class
    /// for `dedicated`, one shared for `round_robin`).
    pub ticket: u64,
    /// Random bits for `p2c` (e.g. from [`crate::SplitMix64`]).
    pub random: u64,
}

/// A configured strategy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Strategy {
    /// PLB with its validated parameters.
    Plb(Plb),
    /// KRR over all healthy replicas.
    RoundRobin,
    /// rRR+fRR.
    Dedicated(Dedicated),
    /// Weighted power of two choices.
    P2c(P2c),
    /// Fewest active sessions.
    LeastSessions,
}

impl Strategy {
    /// The configuration name.
    pub const fn name(&self) -> StrategyName {
        match self {
            Strategy::Plb(_) => StrategyName::Plb,
            Strategy::RoundRobin => StrategyName::RoundRobin,
            Strategy::Dedicated(_) => StrategyName::Dedicated,
            Strategy::P2c(_) => StrategyName::P2c,
            Strategy::LeastSessions => StrategyName::LeastSessions,
        }
    }

    /// Routes one session of `class` on open-session counts. Only PLB returns role changes.
    /// Pure, O(K).
    pub fn route(
        &self,
        table: &RoleTable,
        loads: &[ReplicaLoad],
        class: ServiceClass,
        draw: Draw,
    ) -> Result<Admission, AdmitError> {
        self.route_loads(table, Loads::sessions(loads), class, draw)
    }

    /// [`Strategy::route`] with both counts: PLB decides on `loads.signal` (see
    /// [`crate::LoadSignal`]); the baselines balance open sessions.
    pub fn route_loads(
        &self,
        table: &RoleTable,
        loads: Loads<'_>,
        class: ServiceClass,
        draw: Draw,
    ) -> Result<Admission, AdmitError> {
        loads.check(table.len())?;
        let sessions = loads.sessions;
        let (replica, rule) = match self {
            Strategy::Plb(plb) => return plb.admit_loads(table, loads, class),
            Strategy::RoundRobin => (round_robin(table, draw.ticket), AdmissionRule::RoundRobin),
            Strategy::Dedicated(dedicated) => {
                let replica = dedicated.route(table, class, draw.ticket);
                let replica = replica.ok_or(AdmitError::NoReplicaForClass(class))?;
                (Some(replica), AdmissionRule::Dedicated)
            }
            Strategy::P2c(p2c) => (
                p2c.route(table, sessions, draw.random),
                AdmissionRule::PowerOfTwoChoices,
            ),
            Strategy::LeastSessions => (
                least_sessions(table, sessions),
                AdmissionRule::LeastSessions,
            ),
        };
        Ok(Admission {
            replica: replica.ok_or(AdmitError::NoReplicaUp)?,
            rule,
            role_changes: empty_admission_changes(),
        })
    }

    /// A Down event. PLB repairs its layout (001 §III); the others just stop using the replica.
    pub fn handle_down(
        &self,
        table: &mut RoleTable,
        replica: ReplicaId,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        match self {
            Strategy::Plb(plb) => plb.handle_down(table, replica, loads),
            _ => mark(table, replica, Role::Down, ChangeReason::Down),
        }
    }

    /// A Rejoin event. PLB re-enters the replica as Mixed and repairs; the others use it again.
    pub fn handle_rejoin(
        &self,
        table: &mut RoleTable,
        replica: ReplicaId,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        match self {
            Strategy::Plb(plb) => plb.handle_rejoin(table, replica, loads),
            _ => mark(table, replica, Role::Mixed, ChangeReason::Rejoin),
        }
    }
}

/// Baseline health change: flips between Down and Mixed, nothing else; repeated events are
/// no-ops.
fn mark(
    table: &mut RoleTable,
    replica: ReplicaId,
    to: Role,
    reason: ChangeReason,
) -> Result<RepairChanges, FailureError> {
    let from = table
        .role(replica)
        .ok_or(FailureError::UnknownReplica(replica))?;
    let mut changes = empty_repair_changes();
    if from.is_up() != to.is_up() {
        table.set(replica, to);
        let pushed = changes.push(RoleChange {
            replica,
            from,
            to,
            reason,
        });
        debug_assert!(pushed.is_ok(), "one change fits");
    }
    Ok(changes)
}
