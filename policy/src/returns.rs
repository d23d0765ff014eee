//! Return of borrowed replicas (000 §III-D "Return") and the destination rule it shares with
//! failure canonicalization (001 §III).
//!
//! A replica borrowed for class c returns when (1) pressure on c has eased — some *other*
//! replica in c's routing pool is below `τ_c = ⌊α_c·θ_c⌋` — and (2) it hosts no session of c.
//! The replica itself is excluded from (1): it has no session of c by (2), so counting it would
//! make the pressure test vacuous. Because `τ_c ≤ θ_c`, the replica that proves the pressure
//! eased also has headroom, so the admission that follows never borrows straight back.

use crate::admission::AdmissionChanges;
use crate::load_view::class_load;
use crate::params::PlbParams;
use crate::replica::{ReplicaId, ReplicaLoad, ServiceClass};
use crate::role::{ChangeReason, Pool, Role, RoleChange};
use crate::signal::Loads;
use crate::table::RoleTable;

/// Where a replica borrowed for `borrower` goes when released: the opposite class's pool while
/// that pool is below its target (`|R_F| < K_F` for a borrowed-to-Premium replica,
/// `|R_P| < K_P` for a borrowed-to-Freemium one), Mixed otherwise. `opposite_pool` is the
/// current size of the opposite class's pool.
pub(crate) fn return_destination(
    borrower: ServiceClass,
    opposite_pool: usize,
    params: &PlbParams,
) -> (Role, ChangeReason) {
    let opposite = borrower.other();
    let target = match opposite {
        ServiceClass::Premium => params.premium_target,
        ServiceClass::Freemium => params.freemium_target,
    };
    if opposite_pool < target as usize {
        (
            Pool::of_class(opposite).role(),
            ChangeReason::ReturnToUnmetTarget,
        )
    } else {
        (Role::Mixed, ChangeReason::ReturnToMixed)
    }
}

/// Counts, per class, the routing-pool replicas whose class load is below `τ_c`.
struct Pressure {
    below_watermark: [usize; 2],
    watermark: [u64; 2],
}

fn slot(class: ServiceClass) -> usize {
    match class {
        ServiceClass::Premium => 0,
        ServiceClass::Freemium => 1,
    }
}

impl Pressure {
    fn measure(table: &RoleTable, loads: &[ReplicaLoad], params: &PlbParams) -> Pressure {
        let mut pressure = Pressure {
            below_watermark: [0; 2],
            watermark: ServiceClass::ALL.map(|c| u64::from(params.return_watermark(c))),
        };
        for (role, &load) in table.roles().iter().zip(loads) {
            for class in ServiceClass::ALL {
                if pressure.is_below(*role, load, class) {
                    pressure.below_watermark[slot(class)] += 1;
                }
            }
        }
        pressure
    }

    fn is_below(&self, role: Role, load: ReplicaLoad, class: ServiceClass) -> bool {
        class_load(role, load, class).is_some_and(|l| l < self.watermark[slot(class)])
    }

    /// Pressure on `class` has eased, not counting the candidate replica (`role`, `load`).
    fn eased_without(&self, role: Role, load: ReplicaLoad, class: ServiceClass) -> bool {
        let own = usize::from(self.is_below(role, load, class));
        self.below_watermark[slot(class)] > own
    }

    /// A replica with `load` changes role from `old` to `new`.
    fn replace(&mut self, old: Role, new: Role, load: ReplicaLoad) {
        for class in ServiceClass::ALL {
            let leaving = usize::from(self.is_below(old, load, class));
            let entering = usize::from(self.is_below(new, load, class));
            let count = &mut self.below_watermark[slot(class)];
            *count = (*count + entering).saturating_sub(leaving);
        }
    }
}

/// Plans every eligible return in index order, applying each to `view` so later destinations
/// see the pools as they will be. Appends the changes to `out`. O(K). Pressure is judged on
/// the decision signal; "no session of the borrower" on pinned sessions, whatever the signal.
pub(crate) fn plan_returns(
    view: &mut RoleTable,
    loads: Loads<'_>,
    params: &PlbParams,
    out: &mut AdmissionChanges,
) {
    let (signal, sessions) = (loads.signal, loads.sessions);
    if !view.roles().iter().any(|role| role.is_borrowed()) {
        return;
    }
    let mut pressure = Pressure::measure(view, signal, params);
    let mut pool_sizes = [
        view.owned(ServiceClass::Premium),
        view.owned(ServiceClass::Freemium),
    ];
    for (index, (&load, pinned)) in signal.iter().zip(sessions).enumerate().take(view.len()) {
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
        let opposite = slot(borrower.other());
        let (to, reason) = return_destination(borrower, pool_sizes[opposite], params);
        if to.owner().is_some() {
            pool_sizes[opposite] += 1;
        }
        pressure.replace(role, to, load);
        view.set(replica, to);
        let pushed = out.push(RoleChange {
            replica,
            from: role,
            to,
            reason,
        });
        debug_assert!(pushed.is_ok(), "at most K returns");
    }
}
