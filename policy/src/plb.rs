//! PLB session admission (000 §III-D, Algorithm 1), as a pure decision over a role-table
//! snapshot and per-replica loads.
//!
//! Each function below is one block of Algorithm 1; the line numbers are in its doc. Returns
//! (000 §III-D "Return") are evaluated first, on a private copy of the table, because role
//! changes happen only at admission time and a released replica must not be borrowed again by
//! the very decision that released it.

use crate::admission::empty_admission_changes;
use crate::admission::{Admission, AdmissionChanges, AdmissionRule, AdmitError};
use crate::load_view::{class_load, least_by};
use crate::params::{ParamError, PlbParams};
use crate::replica::{ReplicaId, ReplicaLoad, ServiceClass};
use crate::returns::plan_returns;
use crate::role::{ChangeReason, Pool, Role, RoleChange};
use crate::signal::{LoadSignal, Loads};
use crate::table::{RoleTable, RoleVector};

/// A validated PLB configuration: the parameters and the reference split (the initial layout,
/// used by failure repair). Small and `Copy`, so every shard can hold one.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plb {
    params: PlbParams,
    reference: RoleVector,
    signal: LoadSignal,
    drain: bool,
}

/// The replica chosen by one block of Algorithm 1, and the borrow it implies.
struct Choice {
    replica: ReplicaId,
    rule: AdmissionRule,
    borrow: Option<RoleChange>,
}

impl Choice {
    fn route(replica: ReplicaId, rule: AdmissionRule) -> Choice {
        Choice {
            replica,
            rule,
            borrow: None,
        }
    }

    fn borrow(
        replica: ReplicaId,
        donor: Pool,
        class: ServiceClass,
        reason: ChangeReason,
    ) -> Choice {
        let rule = match donor {
            Pool::Mixed => AdmissionRule::BorrowMixed,
            Pool::Freemium => AdmissionRule::BorrowFreemium,
            Pool::Premium => AdmissionRule::BorrowPremium,
        };
        Choice {
            replica,
            rule,
            borrow: Some(RoleChange {
                replica,
                from: donor.role(),
                to: Role::borrowed_for(class, donor),
                reason,
            }),
        }
    }
}

impl Plb {
    /// Validates `params` against the initial layout; `initial` also becomes the reference
    /// split for failure repair.
    pub fn new(params: PlbParams, initial: &RoleTable) -> Result<Plb, ParamError> {
        params.validate(initial)?;
        Ok(Plb {
            params,
            reference: initial.vector(),
            signal: LoadSignal::Sessions,
            drain: false,
        })
    }

    /// The same policy with the recovery-tail drain on or off (see [`Plb::drain_move`]): after
    /// a rejoin, sessions leave overloaded survivors between transactions, and repair gives a
    /// rejoined replica to the needier class first.
    #[must_use]
    pub const fn with_recovery_drain(mut self, drain: bool) -> Plb {
        self.drain = drain;
        self
    }

    /// Whether the recovery-tail drain is on.
    pub const fn recovery_drain(&self) -> bool {
        self.drain
    }

    /// The same policy deciding on `signal` (the caller passes the matching counts to
    /// [`Plb::admit_loads`]).
    #[must_use]
    pub const fn with_load_signal(mut self, signal: LoadSignal) -> Plb {
        self.signal = signal;
        self
    }

    /// What this policy decides on.
    pub const fn load_signal(&self) -> LoadSignal {
        self.signal
    }

    /// The validated parameters.
    pub const fn params(&self) -> &PlbParams {
        &self.params
    }

    /// The reference split `(K_P, K_M, K_F)` of the full replica set (001 §III).
    pub const fn reference(&self) -> RoleVector {
        self.reference
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
        let mut view = table.clone();
        let mut role_changes = empty_admission_changes();
        plan_returns(&mut view, loads, &self.params, &mut role_changes);
        let signal = loads.signal;
        let choice = match class {
            ServiceClass::Premium => self.admit_premium(&view, signal),
            ServiceClass::Freemium => self.admit_freemium(&view, loads),
        }
        .or_else(|| last_resort(&view, signal))
        .ok_or(AdmitError::NoReplicaUp)?;
        if let Some(borrow) = choice.borrow {
            let overflow = role_changes.push(borrow);
            debug_assert!(
                overflow.is_ok(),
                "returns and one borrow fit in K + 1 slots"
            );
        }
        Ok(Admission {
            replica: choice.replica,
            rule: choice.rule,
            role_changes,
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
        let mut view = table.clone();
        let mut changes = empty_admission_changes();
        plan_returns(&mut view, loads, &self.params, &mut changes);
        Ok(changes)
    }

    /// Lines 2–21: premium admission.
    fn admit_premium(&self, view: &RoleTable, loads: &[ReplicaLoad]) -> Option<Choice> {
        let class = ServiceClass::Premium;
        headroom_choice(view, loads, class, &self.params)
            .or_else(|| borrow_mixed_for_premium(view, loads))
            .or_else(|| self.borrow_freemium_for_premium(view, loads))
            .or_else(|| pool_fallback(view, loads, class))
    }

    /// Lines 22–38: freemium admission.
    fn admit_freemium(&self, view: &RoleTable, loads: Loads<'_>) -> Option<Choice> {
        let class = ServiceClass::Freemium;
        let signal = loads.signal;
        headroom_choice(view, signal, class, &self.params)
            .or_else(|| borrow_mixed_for_freemium(view, signal))
            .or_else(|| self.borrow_premium_for_freemium(view, loads))
            .or_else(|| pool_fallback(view, signal, class))
    }

    /// Lines 12–19: while `|R_F| − 1 ≥ κ_F`, a Freemium donor whose load (total, as it would
    /// count once borrowed) is below `m_P`, the load of the least-loaded premium replica.
    /// `select_F→P` prefers donors whose freemium load is below `τ_F`, then the least loaded.
    /// With no premium replica at all `m_P` is unbounded: any donor beats having none.
    fn borrow_freemium_for_premium(
        &self,
        view: &RoleTable,
        loads: &[ReplicaLoad],
    ) -> Option<Choice> {
        let freemium_pool = view.owned(ServiceClass::Freemium);
        if freemium_pool < self.params.freemium_floor as usize + 1 {
            return None;
        }
        let m_p = min_class_load(view, loads, ServiceClass::Premium).unwrap_or(u64::MAX);
        let watermark = self.params.return_watermark(ServiceClass::Freemium);
        let donor = least_by(view, loads, |role, load| {
            let eligible = role == Role::Freemium && load.total() < m_p;
            eligible.then_some((load.freemium >= watermark, load.total()))
        })?;
        Some(Choice::borrow(
            donor,
            Pool::Freemium,
            ServiceClass::Premium,
            ChangeReason::BorrowFreemiumForPremium,
        ))
    }

    /// Lines 32–36: a Premium-empty Premium replica, least loaded, while `|R_P| − 1 ≥ K_P`.
    /// "Premium-empty" counts pinned sessions whatever the signal: an idle premium session
    /// returns to its replica at its next transaction.
    fn borrow_premium_for_freemium(&self, view: &RoleTable, loads: Loads<'_>) -> Option<Choice> {
        let premium_pool = view.owned(ServiceClass::Premium);
        if premium_pool < self.params.premium_target as usize + 1 {
            return None;
        }
        let mut pinned = loads.sessions.iter();
        let donor = least_by(view, loads.signal, |role, load| {
            let premium_empty = pinned.next().is_some_and(|s| s.premium == 0);
            (role == Role::Premium && premium_empty).then_some(load.total())
        })?;
        Some(Choice::borrow(
            donor,
            Pool::Premium,
            ServiceClass::Freemium,
            ChangeReason::BorrowPremiumForFreemium,
        ))
    }
}

/// Load of the least-loaded replica of `class`'s routing pool under the load convention.
fn min_class_load(view: &RoleTable, loads: &[ReplicaLoad], class: ServiceClass) -> Option<u64> {
    view.roles()
        .iter()
        .zip(loads)
        .filter_map(|(&role, &load)| class_load(role, load, class))
        .min()
}

/// Lines 3–5 / 23–25: least-loaded replica of the class's routing pool whose class load is
/// below `θ_c`. Headroom and ranking use the same load convention, so a borrowed replica still
/// full of the donor's sessions is not mistaken for free capacity.
fn headroom_choice(
    view: &RoleTable,
    loads: &[ReplicaLoad],
    class: ServiceClass,
    params: &PlbParams,
) -> Option<Choice> {
    let theta = u64::from(params.theta(class));
    let replica = least_by(view, loads, |role, load| {
        class_load(role, load, class).filter(|&l| l < theta)
    })?;
    Some(Choice::route(replica, AdmissionRule::PoolHeadroom))
}

/// Lines 7–10, `select_M→P`: Mixed replicas without premium sessions first (spreading premium
/// over more replicas), then the smallest freemium load.
fn borrow_mixed_for_premium(view: &RoleTable, loads: &[ReplicaLoad]) -> Option<Choice> {
    let donor = least_by(view, loads, |role, load| {
        (role == Role::Mixed).then_some((load.premium > 0, load.freemium))
    })?;
    Some(Choice::borrow(
        donor,
        Pool::Mixed,
        ServiceClass::Premium,
        ChangeReason::BorrowMixedForPremium,
    ))
}

/// Lines 27–30, `select_M→F`: fewest premium sessions, then the smallest freemium load.
fn borrow_mixed_for_freemium(view: &RoleTable, loads: &[ReplicaLoad]) -> Option<Choice> {
    let donor = least_by(view, loads, |role, load| {
        (role == Role::Mixed).then_some((load.premium, load.freemium))
    })?;
    Some(Choice::borrow(
        donor,
        Pool::Mixed,
        ServiceClass::Freemium,
        ChangeReason::BorrowMixedForFreemium,
    ))
}

/// Lines 21 / 38: least-loaded replica of the class's routing pool, saturated or not.
fn pool_fallback(view: &RoleTable, loads: &[ReplicaLoad], class: ServiceClass) -> Option<Choice> {
    let replica = least_by(view, loads, |role, load| class_load(role, load, class))?;
    Some(Choice::route(replica, AdmissionRule::PoolFallback))
}

/// Beyond Algorithm 1: the class's routing pool is empty (only after failures shrink the
/// survivor set, e.g. one survivor already borrowed by the other class). Serving the session
/// on the least-loaded healthy replica beats refusing it; no role changes.
fn last_resort(view: &RoleTable, loads: &[ReplicaLoad]) -> Option<Choice> {
    let replica = least_by(view, loads, |role, load| {
        role.is_up().then_some(load.total())
    })?;
    Some(Choice::route(replica, AdmissionRule::LastResort))
}
