//! The "least-loaded" scan every policy of this crate ranks replicas with (PLB's admission,
//! returns and repair, and the baselines), in one place so that ties always go the same way.
//! The load convention it is used with is `tiers::role::tier_load`.

use crate::replica::{ReplicaId, ReplicaLoad};
use crate::role::Role;
use crate::table::RoleTable;

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
