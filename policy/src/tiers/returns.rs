//! Returns of borrowed replicas in a tiered table, and the destination rule repair shares.
//!
//! A replica borrowed by tier c returns (000 §III-D "Return") when (1) pressure on c has
//! eased — some *other* replica of c's routing pool is below `τ_c = ⌊α_c·θ_c⌋` — and (2) it
//! hosts no session of c. The replica itself is excluded from (1): it has no session of c by
//! (2), so counting it would make the pressure test vacuous. Because `τ_c ≤ θ_c`, the replica
//! that proves the pressure eased also has headroom, so the admission that follows never
//! borrows straight back.
//!
//! It goes to the most important other tier whose pool is below its target K_t, else to
//! Mixed: with two tiers "the other class's pool while below target", as in the paper. 001's
//! canonicalization of an idle borrowed replica uses the same rule.

use super::role::{TierChange, TierChanges, TierReason, TierRole, tier_load};
use super::table::TierTable;
use super::tier::{MAX_TIERS, Tier, TierLoad};
use crate::params::PlbParams;
use crate::replica::ReplicaId;
use crate::signal::Loads;

/// Where a replica released by `borrower` goes, given the current pool sizes.
pub(crate) fn return_destination(
    borrower: Tier,
    pools: &[usize; MAX_TIERS],
    params: &PlbParams,
) -> (TierRole, TierReason) {
    params
        .all()
        .filter(|&t| t != borrower)
        .find(|&t| pools[t.index()] < params.target(t) as usize)
        .map_or((TierRole::Mixed, TierReason::ReturnToMixed), |t| {
            (TierRole::Owned(t), TierReason::ReturnToUnmetTarget)
        })
}

/// Per tier, routing-pool replicas below τ_t.
struct Pressure {
    below: [usize; MAX_TIERS],
    watermark: [u64; MAX_TIERS],
    tiers: u8,
}

impl Pressure {
    fn measure(table: &TierTable, loads: &[TierLoad], params: &PlbParams) -> Pressure {
        let mut watermark = [0; MAX_TIERS];
        for tier in params.all() {
            watermark[tier.index()] = u64::from(params.return_watermark(tier));
        }
        let mut pressure = Pressure {
            below: [0; MAX_TIERS],
            watermark,
            tiers: params.tiers,
        };
        for (&role, &load) in table.roles().iter().zip(loads) {
            for tier in Tier::all(pressure.tiers) {
                if pressure.is_below(role, load, tier) {
                    pressure.below[tier.index()] += 1;
                }
            }
        }
        pressure
    }

    fn is_below(&self, role: TierRole, load: TierLoad, tier: Tier) -> bool {
        tier_load(role, load, tier).is_some_and(|l| l < self.watermark[tier.index()])
    }

    fn eased_without(&self, role: TierRole, load: TierLoad, tier: Tier) -> bool {
        self.below[tier.index()] > usize::from(self.is_below(role, load, tier))
    }

    fn replace(&mut self, old: TierRole, new: TierRole, load: TierLoad) {
        for tier in Tier::all(self.tiers) {
            let leaving = usize::from(self.is_below(old, load, tier));
            let entering = usize::from(self.is_below(new, load, tier));
            let count = &mut self.below[tier.index()];
            *count = (*count + entering).saturating_sub(leaving);
        }
    }
}

/// Plans every eligible return in index order, applying each to `view` so later destinations
/// see the pools as they will be; appends the changes to `out`. O(K · tiers). Pressure is
/// judged on the decision signal, "no session of the borrower" on pinned sessions, whatever
/// the signal.
pub(crate) fn plan_returns(
    view: &mut TierTable,
    loads: Loads<'_, TierLoad>,
    params: &PlbParams,
    out: &mut TierChanges,
) {
    if !view.roles().iter().any(|role| role.is_borrowed()) {
        return;
    }
    let mut pressure = Pressure::measure(view, loads.signal, params);
    let mut pools = view.vector().owned;
    let pairs = loads.signal.iter().zip(loads.sessions);
    for (index, (&load, pinned)) in pairs.enumerate().take(view.len()) {
        let Some(replica) = ReplicaId::from_index(index) else {
            break;
        };
        let Some(role) = view.role(replica) else {
            break;
        };
        let Some(borrower) = role.borrower() else {
            continue;
        };
        if pinned.of(borrower) != 0 || !pressure.eased_without(role, load, borrower) {
            continue;
        }
        let (to, reason) = return_destination(borrower, &pools, params);
        if let Some(owner) = to.owner() {
            pools[owner.index()] += 1;
        }
        pressure.replace(role, to, load);
        view.set(replica, to);
        let pushed = out.push(TierChange {
            replica,
            from: role,
            to,
            reason,
        });
        debug_assert!(pushed.is_ok(), "at most K returns");
    }
}
