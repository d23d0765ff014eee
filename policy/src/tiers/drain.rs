//! Recovery-tail drain (beyond 001): after a rejoin, a session pinned to an overloaded
//! survivor moves, between two of its transactions, to a replica of its tier with headroom.
//!
//! 001 repairs the role table at once but never moves a session, so after a rejoin the
//! rejoined replica fills only as new sessions arrive while the survivors stay overloaded
//! until their sessions end: the slow recovery tail 001 names as PLB's open limit. Under a
//! transaction pool a session holds no server between transactions, so it can move then at no
//! cost to its client. The rule here says *whether* one session should move; the caller asks
//! once per session per rejoin, at the session's next transaction, and re-admits it through
//! [`TieredPlb::admit_loads`] (which chooses *where*), so moves happen one at a time against current loads
//! and stop as soon as the overload is gone.

use super::admit::TieredPlb;
use super::role::TierRole;
use super::role::tier_load;
use super::table::TierTable;
use super::tier::{Tier, TierLoad};
use crate::replica::ReplicaId;
use crate::signal::Loads;

impl TieredPlb {
    /// Whether a `tier` session pinned to `replica` should move now. The destinations are
    /// the other replicas of the tier's routing pool and the Mixed replicas (with their total
    /// load). True when either
    /// - `replica` no longer serves `tier` (a residual session on a returned or
    ///   canonicalized replica) and some destination has headroom, or
    /// - `replica` is past headroom for the tier (`load > θ_t`, which only fallback and
    ///   failure re-pins produce) and some destination would stay less loaded than
    ///   `replica` after taking the session. Under overload every replica is past
    ///   θ_t, so this does not ask for headroom: the rejoined replica is filled to the level
    ///   of the others, not only to θ_t.
    ///
    /// Always false unless the drain is enabled ([`TieredPlb::with_recovery_drain`]) and for
    /// a replica that is Down (failure re-pinning handles those). Pure, O(K).
    pub fn drain_move(
        &self,
        table: &TierTable,
        loads: Loads<'_, TierLoad>,
        replica: ReplicaId,
        tier: Tier,
    ) -> bool {
        if !self.recovery_drain() || loads.miscounted(table.len()).is_some() {
            return false;
        }
        let Some(role) = table.role(replica) else {
            return false;
        };
        if !role.is_up() {
            return false;
        }
        let theta = u64::from(self.params().theta(tier));
        // A Mixed replica counts with its total load, as it would once borrowed: admission
        // borrows Mixed first when the pool has no headroom, and a replica rejoins as Mixed.
        let best_elsewhere = table
            .iter()
            .zip(loads.signal)
            .filter(|((other, _), _)| *other != replica)
            .filter_map(|((_, role), &load)| match role {
                TierRole::Mixed => Some(load.total()),
                _ => tier_load(role, load, tier),
            })
            .min();
        let Some(best) = best_elsewhere else {
            return false;
        };
        let here = loads
            .signal
            .get(replica.index())
            .and_then(|&load| tier_load(role, load, tier));
        match here {
            None => best < theta,
            Some(here) => here > theta && best + 1 < here,
        }
    }
}
