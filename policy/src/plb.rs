//! The paper's two-class PLB (000, 001) as the two-rank case of [`crate::tiers`]: premium is
//! rank 0, freemium rank 1, and every decision is [`TieredPlb`]'s.
//!
//! This module owns only the translation between the two vocabularies: the proxy's
//! [`RoleTable`], [`ReplicaLoad`] and [`RoleChange`] (named classes, named reasons) in, the
//! tiered table, loads and changes to the policy, and the result back. The translation is
//! O(K) on stack arrays, so admission stays allocation-free. `tests/two_rank_traces.rs` pins
//! the outcomes to those of the paper's two-class implementation this replaced.

use crate::admission::{
    Admission, AdmissionChanges, AdmissionRule, AdmitError, RepairChanges, empty_admission_changes,
    empty_repair_changes,
};
use crate::params::{ParamError, PlbParams};
use crate::replica::{MAX_REPLICAS, ReplicaId, ReplicaLoad, ServiceClass};
use crate::role::{ChangeReason, Role, RoleChange};
use crate::signal::{LoadSignal, Loads};
use crate::table::{RoleTable, RoleVector};
use crate::tiers::{
    FailureError, Tier, TierAdmitError, TierChange, TierLoad, TierReason, TierRepairChanges,
    TierRule, TierTable, TierVector, TieredPlb,
};

/// A validated PLB configuration: the parameters and the reference split (the initial layout,
/// used by failure repair), the load signal and the recovery drain. Small and `Copy`, so every
/// shard can hold one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plb {
    tiers: TieredPlb,
}

impl Plb {
    /// Validates `params` against the initial layout; `initial` also becomes the reference
    /// split for failure repair.
    pub fn new(params: PlbParams, initial: &RoleTable) -> Result<Plb, ParamError> {
        params.validate(initial)?;
        let reference = TierTable::from_roles(initial).vector();
        Ok(Plb {
            tiers: TieredPlb::validated(params, reference),
        })
    }

    /// The same policy with the recovery-tail drain on or off (see [`Plb::drain_move`]): after
    /// a rejoin, sessions leave overloaded survivors between transactions, and repair gives a
    /// rejoined replica to the needier class first.
    #[must_use]
    pub const fn with_recovery_drain(mut self, drain: bool) -> Plb {
        self.tiers = self.tiers.with_recovery_drain(drain);
        self
    }

    /// Whether the recovery-tail drain is on.
    pub const fn recovery_drain(&self) -> bool {
        self.tiers.recovery_drain()
    }

    /// The same policy deciding on `signal` (the caller passes the matching counts to
    /// [`Plb::admit_loads`]).
    #[must_use]
    pub const fn with_load_signal(mut self, signal: LoadSignal) -> Plb {
        self.tiers = self.tiers.with_load_signal(signal);
        self
    }

    /// What this policy decides on.
    pub const fn load_signal(&self) -> LoadSignal {
        self.tiers.load_signal()
    }

    /// The validated parameters.
    pub const fn params(&self) -> &PlbParams {
        self.tiers.params()
    }

    /// The reference split `(K_P, K_M, K_F)` of the full replica set (001 §III).
    pub fn reference(&self) -> RoleVector {
        role_vector(self.tiers.reference())
    }

    /// The target role vector `K^I(K⁺)` (001 §III). `K⁺ = 1`: one Mixed replica, reachable by
    /// both classes; `K⁺ = 2`: one per class; `K⁺ = 3`: the extra one to Premium. `K⁺ ≥ 4`:
    /// nearest-integer proportional scaling of the reference split, then floors (Premium ≥ 1,
    /// Freemium ≥ max(1, κ_F), Premium kept ≥ 1 when both cannot hold), then the budget
    /// (Freemium shrinks first, down to its floor), Mixed taking the residual.
    pub fn target(&self, survivors: usize) -> RoleVector {
        role_vector(self.tiers.target(survivors))
    }

    /// Algorithm 1 `AssignSessionToReplica`, preceded by return evaluation, deciding on open
    /// sessions (000). Pure: `table` is not modified; the returned changes must be applied by
    /// the table's owner. O(K), no allocation.
    pub fn admit(
        &self,
        table: &RoleTable,
        loads: &[ReplicaLoad],
        class: ServiceClass,
    ) -> Result<Admission, AdmitError> {
        self.admit_loads(table, Loads::sessions(loads), class)
    }

    /// [`Plb::admit`] on a chosen signal: `loads.signal` drives headroom, ranking and return
    /// pressure, `loads.sessions` the pinning guards (see [`crate::LoadSignal`]).
    pub fn admit_loads(
        &self,
        table: &RoleTable,
        loads: Loads<'_>,
        class: ServiceClass,
    ) -> Result<Admission, AdmitError> {
        loads.check(table.len())?;
        let ranks = RankLoads::of(loads);
        let tiered = self
            .tiers
            .admit_loads(
                &TierTable::from_roles(table),
                ranks.loads(),
                Tier::from(class),
            )
            .map_err(|error| admit_error(error, class))?;
        Ok(Admission {
            replica: tiered.replica,
            rule: admission_rule(tiered.rule),
            role_changes: admission_changes(tiered.role_changes.as_slice()),
        })
    }

    /// Return evaluation alone (000 §III-D "Return"), for callers that want to release
    /// capacity outside admissions (e.g. on a timer). Pure, O(K).
    pub fn returns(
        &self,
        table: &RoleTable,
        loads: &[ReplicaLoad],
    ) -> Result<AdmissionChanges, AdmitError> {
        self.returns_loads(table, Loads::sessions(loads))
    }

    /// [`Plb::returns`] on a chosen signal.
    pub fn returns_loads(
        &self,
        table: &RoleTable,
        loads: Loads<'_>,
    ) -> Result<AdmissionChanges, AdmitError> {
        loads.check(table.len())?;
        let ranks = RankLoads::of(loads);
        let changes = self
            .tiers
            .returns_loads(&TierTable::from_roles(table), ranks.loads())
            .map_err(|error| admit_error(error, ServiceClass::Premium))?;
        Ok(admission_changes(changes.as_slice()))
    }

    /// Whether a `class` session pinned to `replica` should move now (the recovery-tail
    /// drain, see [`TieredPlb::drain_move`]). Always false unless the drain is on.
    pub fn drain_move(
        &self,
        table: &RoleTable,
        loads: Loads<'_>,
        replica: ReplicaId,
        class: ServiceClass,
    ) -> bool {
        loads.check(table.len()).is_ok() && {
            let ranks = RankLoads::of(loads);
            let tiers = TierTable::from_roles(table);
            self.tiers
                .drain_move(&tiers, ranks.loads(), replica, Tier::from(class))
        }
    }

    /// A Down event: the replica leaves the survivor set, then canonicalization and repair run.
    /// A Down for a replica already Down is a no-op (several shards may report one failure).
    /// Returns every change applied, the Down step first.
    pub fn handle_down(
        &self,
        table: &mut RoleTable,
        replica: ReplicaId,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        self.on_table(table, loads, |plb, tiers, loads| {
            plb.handle_down(tiers, replica, loads)
        })
    }

    /// A Rejoin event: the replica enters as Mixed (shared capacity), then canonicalization and
    /// repair run. A Rejoin for a replica that is not Down is a no-op.
    pub fn handle_rejoin(
        &self,
        table: &mut RoleTable,
        replica: ReplicaId,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        self.on_table(table, loads, |plb, tiers, loads| {
            plb.handle_rejoin(tiers, replica, loads)
        })
    }

    /// Canonicalization and repair toward the target of the current survivor set, without a
    /// survivor-set change (e.g. at startup, or to re-check a table).
    pub fn repair(
        &self,
        table: &mut RoleTable,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        self.on_table(table, loads, TieredPlb::repair)
    }

    /// Runs a failure step of the tiered policy on `table`'s two-rank image and writes the
    /// roles back.
    fn on_table(
        &self,
        table: &mut RoleTable,
        loads: &[ReplicaLoad],
        step: impl FnOnce(
            &TieredPlb,
            &mut TierTable,
            &[TierLoad],
        ) -> Result<TierRepairChanges, FailureError>,
    ) -> Result<RepairChanges, FailureError> {
        if loads.len() != table.len() {
            return Err(FailureError::LoadCount {
                replicas: table.len(),
                loads: loads.len(),
            });
        }
        let ranks = RankLoads::of(Loads::sessions(loads));
        let mut tiers = TierTable::from_roles(table);
        let changes = step(&self.tiers, &mut tiers, ranks.loads().sessions)?;
        *table = RoleTable::from_ranks(&tiers);
        let mut out = empty_repair_changes();
        for change in changes.iter() {
            let pushed = out.push(role_change(change));
            debug_assert!(pushed.is_ok(), "same capacity");
        }
        Ok(out)
    }
}

/// Both load slices as ranks, on the stack.
struct RankLoads {
    signal: [TierLoad; MAX_REPLICAS],
    sessions: [TierLoad; MAX_REPLICAS],
    len: usize,
}

impl RankLoads {
    fn of(loads: Loads<'_>) -> RankLoads {
        let mut ranks = RankLoads {
            signal: [TierLoad::default(); MAX_REPLICAS],
            sessions: [TierLoad::default(); MAX_REPLICAS],
            len: loads.signal.len().min(MAX_REPLICAS),
        };
        for (out, input) in [
            (&mut ranks.signal, loads.signal),
            (&mut ranks.sessions, loads.sessions),
        ] {
            for (slot, &load) in out.iter_mut().zip(input) {
                *slot = TierLoad::from(load);
            }
        }
        ranks
    }

    fn loads(&self) -> Loads<'_, TierLoad> {
        Loads {
            signal: &self.signal[..self.len],
            sessions: &self.sessions[..self.len],
        }
    }
}

fn admit_error(error: TierAdmitError, class: ServiceClass) -> AdmitError {
    match error {
        TierAdmitError::LoadCount { replicas, loads } => AdmitError::LoadCount { replicas, loads },
        TierAdmitError::NoReplicaUp => AdmitError::NoReplicaUp,
        // Both classes are ranks of a two-rank policy.
        TierAdmitError::UnknownTier(_) => AdmitError::NoReplicaForClass(class),
    }
}

fn admission_rule(rule: TierRule) -> AdmissionRule {
    match rule {
        TierRule::Headroom => AdmissionRule::PoolHeadroom,
        // Reclaim is off for two ranks; it would be a Mixed borrow.
        TierRule::BorrowMixed | TierRule::Reclaim => AdmissionRule::BorrowMixed,
        TierRule::BorrowLower => AdmissionRule::BorrowFreemium,
        TierRule::BorrowHigher => AdmissionRule::BorrowPremium,
        TierRule::Fallback => AdmissionRule::PoolFallback,
        TierRule::LastResort => AdmissionRule::LastResort,
    }
}

fn admission_changes(changes: &[TierChange]) -> AdmissionChanges {
    let mut out = empty_admission_changes();
    for change in changes {
        let pushed = out.push(role_change(change));
        debug_assert!(pushed.is_ok(), "same capacity");
    }
    out
}

fn role_vector(vector: TierVector) -> RoleVector {
    RoleVector {
        premium: vector.owned[0],
        mixed: vector.mixed,
        freemium: vector.owned[1],
    }
}

/// A two-rank change with the paper's name for its rule.
fn role_change(change: &TierChange) -> RoleChange {
    let (from, to) = (Role::of_rank(change.from), Role::of_rank(change.to));
    let premium_borrow = to.borrower() == Some(ServiceClass::Premium);
    let reason = match change.reason {
        TierReason::BorrowMixed | TierReason::ReclaimMixed if premium_borrow => {
            ChangeReason::BorrowMixedForPremium
        }
        TierReason::BorrowMixed | TierReason::ReclaimMixed => ChangeReason::BorrowMixedForFreemium,
        TierReason::BorrowLower => ChangeReason::BorrowFreemiumForPremium,
        TierReason::BorrowHigher => ChangeReason::BorrowPremiumForFreemium,
        TierReason::ReturnToUnmetTarget => ChangeReason::ReturnToUnmetTarget,
        TierReason::ReturnToMixed => ChangeReason::ReturnToMixed,
        TierReason::Down => ChangeReason::Down,
        TierReason::Rejoin => ChangeReason::Rejoin,
        TierReason::CanonicalMixedSessions => ChangeReason::CanonicalMixedSessions,
        TierReason::CanonicalSingleTier if to == Role::Premium => {
            ChangeReason::CanonicalPremiumOnly
        }
        TierReason::CanonicalSingleTier => ChangeReason::CanonicalFreemiumOnly,
        TierReason::CanonicalIdleReturn => ChangeReason::CanonicalIdleReturn,
        TierReason::RepairToTarget => ChangeReason::RepairToTarget,
    };
    RoleChange {
        replica: change.replica,
        from,
        to,
        reason,
    }
}
