//! Recovery-tail drain (beyond 001): after a rejoin, a session pinned to an overloaded
//! survivor moves, between two of its transactions, to a replica of its class with headroom.
//!
//! 001 repairs the role table at once but never moves a session, so after a rejoin the
//! rejoined replica fills only as new sessions arrive while the survivors stay overloaded
//! until their sessions end: the slow recovery tail 001 names as PLB's open limit. Under a
//! transaction pool a session holds no server between transactions, so it can move then at no
//! cost to its client. The rule here says *whether* one session should move; the caller asks
//! once per session per rejoin, at the session's next transaction, and re-admits it through
//! [`Plb::admit`] (which chooses *where*), so moves happen one at a time against current loads
//! and stop as soon as the overload is gone.

use crate::load_view::class_load;
use crate::plb::Plb;
use crate::replica::{ReplicaId, ServiceClass};
use crate::role::Role;
use crate::signal::Loads;
use crate::table::RoleTable;

impl Plb {
    /// Whether a `class` session pinned to `replica` should move now. The destinations are
    /// the other replicas of the class's routing pool and the Mixed replicas (with their total
    /// load). True when either
    /// - `replica` no longer serves `class` (a residual session on a returned or
    ///   canonicalized replica) and some destination has headroom, or
    /// - `replica` is past headroom for the class (`load > θ_c`, which only fallback and
    ///   failure re-pins produce) and some destination would stay less loaded than
    ///   `replica` after taking the session. Under overload every replica is past
    ///   θ_c, so this does not ask for headroom: the rejoined replica is filled to the level
    ///   of the others, not only to θ_c.
    ///
    /// Always false unless the drain is enabled ([`Plb::with_recovery_drain`]) and for a
    /// replica that is Down (failure re-pinning handles those). Pure, O(K).
    pub fn drain_move(
        &self,
        table: &RoleTable,
        loads: Loads<'_>,
        replica: ReplicaId,
        class: ServiceClass,
    ) -> bool {
        if !self.recovery_drain() || loads.check(table.len()).is_err() {
            return false;
        }
        let Some(role) = table.role(replica) else {
            return false;
        };
        if !role.is_up() {
            return false;
        }
        let theta = u64::from(self.params().theta(class));
        // A Mixed replica counts with its total load, as it would once borrowed: admission
        // borrows Mixed first when the pool has no headroom, and a replica rejoins as Mixed.
        let best_elsewhere = table
            .iter()
            .zip(loads.signal)
            .filter(|((other, _), _)| *other != replica)
            .filter_map(|((_, role), &load)| match role {
                Role::Mixed => Some(load.total()),
                _ => class_load(role, load, class),
            })
            .min();
        let Some(best) = best_elsewhere else {
            return false;
        };
        let here = loads
            .signal
            .get(replica.index())
            .and_then(|&load| class_load(role, load, class));
        match here {
            None => best < theta,
            Some(here) => here > theta && best + 1 < here,
        }
    }
}
