//! The paper's load convention and the "least-loaded" scan, in one place so that admission,
//! returns and repair cannot disagree about which replicas a class may use or how loaded they
//! are.
//!
//! A class's routing pool is its own pool plus the replicas currently borrowed for it. 000 says
//! a borrowed donor "is moved into the borrower's pool and counted there until it is released",
//! and its load convention speaks of selecting among "replicas currently borrowed for class c".
//! Were a borrowed replica not routable, it would receive only the session that triggered the
//! borrow and every later session would borrow again, draining Mixed within K admissions.

use crate::replica::{ReplicaId, ReplicaLoad, ServiceClass};
use crate::role::Role;
use crate::table::RoleTable;

/// Load of `replica` as seen by `class`, or `None` when the replica is not in the class's
/// routing pool: `load_c(r)` on the class's own replicas, total `load(r)` on replicas borrowed
/// for it (so residual sessions of the donor's class are counted, 000 §III-D).
pub(crate) fn class_load(role: Role, load: ReplicaLoad, class: ServiceClass) -> Option<u64> {
    if role.owner() == Some(class) {
        Some(u64::from(load.of(class)))
    } else if role.borrower() == Some(class) {
        Some(load.total())
    } else {
        None
    }
}

/// The replica minimising `key` among those for which it is `Some`; ties go to the lowest
/// index, which keeps every decision deterministic. One pass, no allocation.
pub(crate) fn least_by<K: Ord>(
    table: &RoleTable,
    loads: &[ReplicaLoad],
    key: impl FnMut(Role, ReplicaLoad) -> Option<K>,
) -> Option<ReplicaId> {
    least_of(table.roles(), loads, key)
}

/// [`least_by`] over any role and load vocabulary (the tiered table's too), one entry per
/// replica in index order.
pub(crate) fn least_of<R: Copy, L: Copy, K: Ord>(
    roles: &[R],
    loads: &[L],
    mut key: impl FnMut(R, L) -> Option<K>,
) -> Option<ReplicaId> {
    let mut best: Option<(K, usize)> = None;
    for (index, (&role, &load)) in roles.iter().zip(loads).enumerate() {
        let Some(k) = key(role, load) else { continue };
        if best.as_ref().is_none_or(|(best_key, _)| k < *best_key) {
            best = Some((k, index));
        }
    }
    best.and_then(|(_, index)| ReplicaId::from_index(index))
}
