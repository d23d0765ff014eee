//! Failure handling for PLB (001 §III): Down and Rejoin events, canonicalization of borrowed
//! states, the target role vector for `K⁺` survivors, and the repair loop.
//!
//! Every change of the survivor set runs the same three steps (canonicalize, compute the
//! target, repair), so a single fault, a cascade and a partial recovery share one code path.
//! Unlike admission these run on the table owner's side and mutate the table directly.

use core::fmt;

use crate::admission::{RepairChanges, empty_repair_changes};
use crate::load_view::class_load;
use crate::plb::Plb;
use crate::replica::{ReplicaId, ReplicaLoad, ServiceClass};
use crate::returns::return_destination;
use crate::role::{ChangeReason, Pool, Role, RoleChange};
use crate::table::{RoleTable, RoleVector};

/// Why a failure event could not be handled. The table is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureError {
    /// The event names a replica outside `0..K`.
    UnknownReplica(ReplicaId),
    /// The load slice does not have one entry per replica.
    LoadCount {
        /// Replicas in the table.
        replicas: usize,
        /// Entries in the load slice.
        loads: usize,
    },
}

impl fmt::Display for FailureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FailureError::UnknownReplica(replica) => {
                write!(f, "{replica} is not in the role table")
            }
            FailureError::LoadCount { replicas, loads } => {
                write!(f, "{loads} load entries given for {replicas} replicas")
            }
        }
    }
}

impl std::error::Error for FailureError {}

impl Plb {
    /// A Down event: the replica leaves the survivor set, then canonicalization and repair run.
    /// A Down for a replica already Down is a no-op (several shards may report one failure).
    /// Returns every change applied, the Down step first.
    pub fn handle_down(
        &self,
        table: &mut RoleTable,
        replica: ReplicaId,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        let role = check_event(table, replica, loads)?;
        let mut changes = empty_repair_changes();
        if role == Role::Down {
            return Ok(changes);
        }
        record(table, &mut changes, replica, Role::Down, ChangeReason::Down);
        self.canonicalize_and_repair(table, loads, &mut changes);
        Ok(changes)
    }

    /// A Rejoin event: the replica enters as Mixed (shared capacity), then canonicalization and
    /// repair run. A Rejoin for a replica that is not Down is a no-op.
    pub fn handle_rejoin(
        &self,
        table: &mut RoleTable,
        replica: ReplicaId,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        let role = check_event(table, replica, loads)?;
        let mut changes = empty_repair_changes();
        if role != Role::Down {
            return Ok(changes);
        }
        record(
            table,
            &mut changes,
            replica,
            Role::Mixed,
            ChangeReason::Rejoin,
        );
        self.canonicalize_and_repair(table, loads, &mut changes);
        Ok(changes)
    }

    /// Canonicalization and repair toward the target of the current survivor set, without a
    /// survivor-set change (e.g. at startup, or to re-check a table).
    pub fn repair(
        &self,
        table: &mut RoleTable,
        loads: &[ReplicaLoad],
    ) -> Result<RepairChanges, FailureError> {
        if loads.len() != table.len() {
            return Err(FailureError::LoadCount {
                replicas: table.len(),
                loads: loads.len(),
            });
        }
        let mut changes = empty_repair_changes();
        self.canonicalize_and_repair(table, loads, &mut changes);
        Ok(changes)
    }

    /// The target role vector `K^I(K⁺)` (001 §III). `K⁺ = 1`: one Mixed replica, reachable by
    /// both classes; `K⁺ = 2`: one per class; `K⁺ = 3`: the extra one to Premium. `K⁺ ≥ 4`:
    /// nearest-integer proportional scaling of the reference split, then floors (Premium ≥ 1,
    /// Freemium ≥ max(1, κ_F), Premium kept ≥ 1 when both cannot hold), then the budget
    /// (Freemium shrinks first, down to its floor), Mixed taking the residual.
    pub fn target(&self, survivors: usize) -> RoleVector {
        let vector = |premium, mixed, freemium| RoleVector {
            premium,
            mixed,
            freemium,
        };
        match survivors {
            0 => vector(0, 0, 0),
            1 => vector(0, 1, 0),
            2 => vector(1, 0, 1),
            3 => vector(2, 0, 1),
            _ => self.scaled_target(survivors),
        }
    }

    fn scaled_target(&self, survivors: usize) -> RoleVector {
        let full = self.reference().total().max(1);
        let scale = |size: usize| (2 * survivors * size + full) / (2 * full);
        let (floor_premium, floor_freemium) = self.floors(survivors);
        let mut premium = scale(self.reference().premium).max(floor_premium);
        let mut freemium = scale(self.reference().freemium).max(floor_freemium);
        while premium + freemium > survivors {
            if freemium > floor_freemium {
                freemium -= 1;
            } else {
                premium -= 1;
            }
        }
        RoleVector {
            premium,
            mixed: survivors - premium - freemium,
            freemium,
        }
    }

    /// Role floors for `K⁺ ≥ 2` survivors: Premium keeps one replica, Freemium keeps
    /// `max(1, κ_F)` but never so many that Premium would lose its last one.
    fn floors(&self, survivors: usize) -> (usize, usize) {
        let freemium = (self.params().freemium_floor as usize)
            .max(1)
            .min(survivors.saturating_sub(1));
        (1, freemium)
    }

    fn canonicalize_and_repair(
        &self,
        table: &mut RoleTable,
        loads: &[ReplicaLoad],
        changes: &mut RepairChanges,
    ) {
        self.canonicalize(table, loads, changes);
        let target = self.target(table.up_count());
        self.repair_to(table, loads, target, changes);
    }

    /// Removes every borrowed state: sessions of both classes → Mixed, only premium →
    /// Premium, only freemium → Freemium, none → the 000 return rule.
    fn canonicalize(
        &self,
        table: &mut RoleTable,
        loads: &[ReplicaLoad],
        changes: &mut RepairChanges,
    ) {
        for (index, &load) in loads.iter().enumerate() {
            let Some(replica) = ReplicaId::from_index(index) else {
                break;
            };
            let Some(role) = table.role(replica) else {
                break;
            };
            let Some(borrower) = role.borrower() else {
                continue;
            };
            let (to, reason) = match (load.premium > 0, load.freemium > 0) {
                (true, true) => (Role::Mixed, ChangeReason::CanonicalMixedSessions),
                (true, false) => (Role::Premium, ChangeReason::CanonicalPremiumOnly),
                (false, true) => (Role::Freemium, ChangeReason::CanonicalFreemiumOnly),
                (false, false) => {
                    let opposite_pool = table.owned(borrower.other());
                    let (to, _) = return_destination(borrower, opposite_pool, self.params());
                    (to, ChangeReason::CanonicalIdleReturn)
                }
            };
            record(table, changes, replica, to, reason);
        }
    }

    /// The repair loop: while a pool is below its target (Premium first, then Freemium, then
    /// Mixed), move the least-loaded replica of an over-target donor pool into it. Mixed donors
    /// first; a Premium/Freemium donor only while its pool stays at or above its floor. Each
    /// step shrinks the total deficit by one, so at most K steps run.
    fn repair_to(
        &self,
        table: &mut RoleTable,
        loads: &[ReplicaLoad],
        target: RoleVector,
        changes: &mut RepairChanges,
    ) {
        for _ in 0..table.len() {
            let current = table.vector();
            let Some(needy) = self
                .repair_order(table, loads)
                .into_iter()
                .find(|&pool| current.of(pool) < target.of(pool))
            else {
                return;
            };
            let Some(donor) = self.repair_donor(table, loads, current, target, needy) else {
                return;
            };
            record(
                table,
                changes,
                donor,
                needy.role(),
                ChangeReason::RepairToTarget,
            );
        }
    }

    /// Which deficit repair fills first: Premium, then Freemium, then Mixed (001). With the
    /// recovery-tail drain, the class under more pressure first, so the least-loaded donor
    /// (after a rejoin, the rejoined replica) goes to the class that lost the most. Pressure is
    /// the class's sessions on healthy replicas over the headroom of its routing pool,
    /// `θ_c · max(1, |pool|)`. Ties keep 001's order.
    fn repair_order(&self, table: &RoleTable, loads: &[ReplicaLoad]) -> [Pool; 3] {
        let default = [Pool::Premium, Pool::Freemium, Pool::Mixed];
        if !self.recovery_drain() {
            return default;
        }
        let pressure = |class: ServiceClass| {
            let (mut sessions, mut pool) = (0u64, 0u64);
            for (&role, &load) in table.roles().iter().zip(loads) {
                if role.is_up() {
                    sessions += u64::from(load.of(class));
                }
                if class_load(role, load, class).is_some() {
                    pool += 1;
                }
            }
            (
                sessions,
                pool.max(1) * u64::from(self.params().theta(class)),
            )
        };
        let (premium, freemium) = (
            pressure(ServiceClass::Premium),
            pressure(ServiceClass::Freemium),
        );
        // premium.0 / premium.1 < freemium.0 / freemium.1 without division (θ ≥ 1, so both
        // denominators are positive).
        let freemium_needier = u128::from(premium.0) * u128::from(freemium.1)
            < u128::from(freemium.0) * u128::from(premium.1);
        if freemium_needier {
            [Pool::Freemium, Pool::Premium, Pool::Mixed]
        } else {
            default
        }
    }

    /// Least-loaded replica of the preferred eligible donor pool for `needy`.
    fn repair_donor(
        &self,
        table: &RoleTable,
        loads: &[ReplicaLoad],
        current: RoleVector,
        target: RoleVector,
        needy: Pool,
    ) -> Option<ReplicaId> {
        let floor = |pool: Pool| match pool {
            Pool::Premium => self.floors(table.up_count()).0.min(target.premium),
            Pool::Freemium => self.floors(table.up_count()).1.min(target.freemium),
            Pool::Mixed => 0,
        };
        let eligible = |pool: Pool| {
            pool != needy && current.of(pool) > target.of(pool) && current.of(pool) > floor(pool)
        };
        if eligible(Pool::Mixed) {
            return least_loaded_in(table, loads, |role| role == Role::Mixed);
        }
        least_loaded_in(table, loads, |role| role.pool().is_some_and(eligible))
    }
}

fn least_loaded_in(
    table: &RoleTable,
    loads: &[ReplicaLoad],
    member: impl Fn(Role) -> bool,
) -> Option<ReplicaId> {
    crate::load_view::least_by(table, loads, |role, load| {
        member(role).then_some(load.total())
    })
}

fn check_event(
    table: &RoleTable,
    replica: ReplicaId,
    loads: &[ReplicaLoad],
) -> Result<Role, FailureError> {
    if loads.len() != table.len() {
        return Err(FailureError::LoadCount {
            replicas: table.len(),
            loads: loads.len(),
        });
    }
    table
        .role(replica)
        .ok_or(FailureError::UnknownReplica(replica))
}

fn record(
    table: &mut RoleTable,
    changes: &mut RepairChanges,
    replica: ReplicaId,
    to: Role,
    reason: ChangeReason,
) {
    let Some(from) = table.role(replica) else {
        return;
    };
    table.set(replica, to);
    let pushed = changes.push(RoleChange {
        replica,
        from,
        to,
        reason,
    });
    debug_assert!(
        pushed.is_ok(),
        "one event, K canonical steps and K repair steps fit"
    );
}
