//! Failure handling for tiered PLB (001 §III): Down and Rejoin events, canonicalization of
//! borrowed states, the target split for K⁺ survivors and the repair loop, with one pool per
//! tier.
//!
//! Every change of the survivor set runs the same three steps (canonicalize, compute the
//! target, repair), so a single fault, a cascade and a partial recovery share one code path.
//! Unlike admission these run on the table owner's side and mutate the table directly.
//!
//! The target for K⁺ survivors generalises 001's small cases: one survivor is Mixed (all
//! tiers reach it); up to one more than the tier count, each of the most important tiers
//! gets one and any extra goes to the top tier; beyond that, the reference split scaled to
//! the survivors, with floors (one for the top tier, `max(1, κ_t)` below it), shrinking the
//! least important tiers first. With two tiers these are exactly 001's cases.

use core::fmt;

use super::admit::{TieredPlb, least_by};
use super::returns::return_destination;
use super::role::tier_load;
use super::role::{TierChange, TierPool, TierReason, TierRole};
use super::table::{TierTable, TierVector};
use super::tier::{MAX_TIERS, Tier, TierLoad};
use crate::bounded::BoundedList;
use crate::replica::{MAX_REPLICAS, ReplicaId};

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

/// Capacity of [`TierRepairChanges`]: the event, K canonical steps and K repair steps.
pub(crate) const TIER_REPAIR_CHANGES: usize = 2 * MAX_REPLICAS + 2;

/// Role changes of one survivor-set change, in the order applied.
pub type TierRepairChanges = BoundedList<TierChange, TIER_REPAIR_CHANGES>;

fn empty_repair() -> TierRepairChanges {
    BoundedList::new(TierChange {
        replica: ReplicaId(0),
        from: TierRole::Mixed,
        to: TierRole::Mixed,
        reason: TierReason::RepairToTarget,
    })
}

impl TieredPlb {
    /// A Down event, then canonicalization and repair. A repeated Down is a no-op.
    pub fn handle_down(
        &self,
        table: &mut TierTable,
        replica: ReplicaId,
        loads: &[TierLoad],
    ) -> Result<TierRepairChanges, FailureError> {
        let role = check_event(table, replica, loads)?;
        let mut changes = empty_repair();
        if role == TierRole::Down {
            return Ok(changes);
        }
        record(
            table,
            &mut changes,
            replica,
            TierRole::Down,
            TierReason::Down,
        );
        self.canonicalize_and_repair(table, loads, &mut changes);
        Ok(changes)
    }

    /// A Rejoin event: the replica enters as Mixed, then canonicalization and repair. A
    /// Rejoin of a replica that is not Down is a no-op.
    pub fn handle_rejoin(
        &self,
        table: &mut TierTable,
        replica: ReplicaId,
        loads: &[TierLoad],
    ) -> Result<TierRepairChanges, FailureError> {
        let role = check_event(table, replica, loads)?;
        let mut changes = empty_repair();
        if role != TierRole::Down {
            return Ok(changes);
        }
        record(
            table,
            &mut changes,
            replica,
            TierRole::Mixed,
            TierReason::Rejoin,
        );
        self.canonicalize_and_repair(table, loads, &mut changes);
        Ok(changes)
    }

    /// Canonicalization and repair toward the target of the current survivor set, without a
    /// survivor-set change (e.g. at startup, or to re-check a table).
    pub fn repair(
        &self,
        table: &mut TierTable,
        loads: &[TierLoad],
    ) -> Result<TierRepairChanges, FailureError> {
        if loads.len() != table.len() {
            return Err(FailureError::LoadCount {
                replicas: table.len(),
                loads: loads.len(),
            });
        }
        let mut changes = empty_repair();
        self.canonicalize_and_repair(table, loads, &mut changes);
        Ok(changes)
    }

    /// The target split `K^I(K⁺)` for `survivors` healthy replicas (001 §III).
    pub fn target(&self, survivors: usize) -> TierVector {
        let tiers = usize::from(self.params().tiers);
        let mut target = TierVector::default();
        match survivors {
            0 => {}
            1 => target.mixed = 1,
            s if s <= tiers + 1 => {
                for slot in target.owned.iter_mut().take(s.min(tiers)) {
                    *slot = 1;
                }
                target.owned[0] += s.saturating_sub(tiers);
            }
            s => target = self.scaled_target(s),
        }
        target
    }

    fn scaled_target(&self, survivors: usize) -> TierVector {
        let full = self.reference().total().max(1);
        let scale = |size: usize| (2 * survivors * size + full) / (2 * full);
        let mut owned = [0usize; MAX_TIERS];
        let floors = self.floors(survivors);
        for tier in self.params().all() {
            let i = tier.index();
            owned[i] = scale(self.reference().owned[i]).max(floors[i]);
        }
        let tiers = self.params().all();
        while owned.iter().sum::<usize>() > survivors {
            let shrink = tiers
                .clone()
                .rev()
                .find(|t| owned[t.index()] > floors[t.index()])
                .or_else(|| tiers.clone().rev().find(|t| owned[t.index()] > 0));
            let Some(tier) = shrink else { break };
            owned[tier.index()] -= 1;
        }
        let mixed = survivors.saturating_sub(owned.iter().sum());
        TierVector { owned, mixed }
    }

    /// Pool floors for `survivors ≥ 2`: one for the top tier, `max(1, κ_t)` below it, never
    /// more than `survivors − 1`.
    fn floors(&self, survivors: usize) -> [usize; MAX_TIERS] {
        let mut floors = [0; MAX_TIERS];
        for tier in self.params().all() {
            floors[tier.index()] = if tier == Tier::TOP {
                1
            } else {
                (self.params().floor(tier) as usize)
                    .max(1)
                    .min(survivors.saturating_sub(1))
            };
        }
        floors
    }

    fn canonicalize_and_repair(
        &self,
        table: &mut TierTable,
        loads: &[TierLoad],
        changes: &mut TierRepairChanges,
    ) {
        self.canonicalize(table, loads, changes);
        let target = self.target(table.up_count());
        self.repair_to(table, loads, target, changes);
    }

    /// Removes every borrowed state: sessions of several tiers → Mixed, of one tier → that
    /// tier's pool, none → the return rule.
    fn canonicalize(
        &self,
        table: &mut TierTable,
        loads: &[TierLoad],
        changes: &mut TierRepairChanges,
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
            let (to, reason) = match (load.tiers_present(), load.single_tier()) {
                (0, _) => {
                    let pools = table.vector().owned;
                    let (to, _) = return_destination(borrower, &pools, self.params());
                    (to, TierReason::CanonicalIdleReturn)
                }
                (_, Some(tier)) if tier.0 < self.params().tiers => {
                    (TierRole::Owned(tier), TierReason::CanonicalSingleTier)
                }
                _ => (TierRole::Mixed, TierReason::CanonicalMixedSessions),
            };
            record(table, changes, replica, to, reason);
        }
    }

    /// While a pool is below target (in [`TieredPlb::repair_order`]), move the least-loaded
    /// replica of an over-target donor into it: Mixed first, a tier's pool only above its
    /// floor. Each step shrinks the deficit, so at most K steps run.
    fn repair_to(
        &self,
        table: &mut TierTable,
        loads: &[TierLoad],
        target: TierVector,
        changes: &mut TierRepairChanges,
    ) {
        let floors = self.floors(table.up_count());
        for _ in 0..table.len() {
            let current = table.vector();
            let (order, pools) = self.repair_order(table, loads);
            let Some(needy) = order
                .into_iter()
                .take(pools)
                .find(|&pool| current.of(pool) < target.of(pool))
            else {
                return;
            };
            let floor = |pool: TierPool| match pool {
                TierPool::Tier(t) => floors[t.index()].min(target.of(pool)),
                TierPool::Mixed => 0,
            };
            let eligible = |pool: TierPool| {
                pool != needy
                    && current.of(pool) > target.of(pool)
                    && current.of(pool) > floor(pool)
            };
            let donor = if eligible(TierPool::Mixed) {
                least_by(table, loads, |role, load| {
                    (role == TierRole::Mixed).then_some(load.total())
                })
            } else {
                least_by(table, loads, |role, load| {
                    role.pool().is_some_and(eligible).then_some(load.total())
                })
            };
            let Some(donor) = donor else { return };
            record(
                table,
                changes,
                donor,
                needy.role(),
                TierReason::RepairToTarget,
            );
        }
    }
}

impl TieredPlb {
    /// Which deficit repair fills first: the tiers in rank order, then Mixed (001); the first
    /// `.1` entries of `.0` are the order. With the recovery-tail drain, the tiers under more
    /// pressure first, so the least-loaded donor (after a rejoin, the rejoined replica) goes
    /// to the tier that lost the most. Pressure is the tier's sessions on healthy replicas
    /// over the headroom of its routing pool, `θ_t · max(1, |pool|)`; ties keep rank order.
    fn repair_order(
        &self,
        table: &TierTable,
        loads: &[TierLoad],
    ) -> ([TierPool; MAX_TIERS + 1], usize) {
        let tiers = usize::from(self.params().tiers).min(MAX_TIERS);
        let mut order = [TierPool::Mixed; MAX_TIERS + 1];
        for (slot, tier) in order.iter_mut().zip(self.params().all()) {
            *slot = TierPool::Tier(tier);
        }
        if self.recovery_drain() {
            let pressure = |pool: TierPool| {
                let TierPool::Tier(tier) = pool else {
                    return (0, 1);
                };
                let (mut sessions, mut routable) = (0u64, 0u64);
                for (&role, &load) in table.roles().iter().zip(loads) {
                    if role.is_up() {
                        sessions += u64::from(load.of(tier));
                    }
                    if tier_load(role, load, tier).is_some() {
                        routable += 1;
                    }
                }
                let headroom = routable.max(1) * u64::from(self.params().theta(tier));
                (sessions, headroom)
            };
            // a.0 / a.1 > b.0 / b.1 without division (θ ≥ 1, so both denominators are
            // positive); a stable insertion sort keeps rank order between equals.
            let needier = |a: (u64, u64), b: (u64, u64)| {
                u128::from(a.0) * u128::from(b.1) > u128::from(b.0) * u128::from(a.1)
            };
            for i in 1..tiers {
                let mut j = i;
                while j > 0 && needier(pressure(order[j]), pressure(order[j - 1])) {
                    order.swap(j, j - 1);
                    j -= 1;
                }
            }
        }
        (order, tiers + 1)
    }
}

fn check_event(
    table: &TierTable,
    replica: ReplicaId,
    loads: &[TierLoad],
) -> Result<TierRole, FailureError> {
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
    table: &mut TierTable,
    changes: &mut TierRepairChanges,
    replica: ReplicaId,
    to: TierRole,
    reason: TierReason,
) {
    let Some(from) = table.role(replica) else {
        return;
    };
    table.set(replica, to);
    let pushed = changes.push(TierChange {
        replica,
        from,
        to,
        reason,
    });
    debug_assert!(
        pushed.is_ok(),
        "one event, K canonical and K repair steps fit"
    );
}
