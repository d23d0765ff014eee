//! Role-agnostic strategies: the paper's baselines (KRR, rRR+fRR) and two common balancers
//! (weighted power of two choices, least sessions). All skip Down replicas; a failed replica
//! is simply dropped (001 §IV baselines). State such as a round-robin position is a `ticket`
//! the caller keeps (e.g. an atomic counter), which keeps these functions pure.

use crate::load_view::least_by;
use crate::replica::{MAX_REPLICAS, ReplicaId, ReplicaLoad, ReplicaSet, ServiceClass};
use crate::table::{LayoutError, RoleTable};

/// The `n`-th healthy replica accepted by `member`, counting from zero in index order.
fn nth_up(table: &RoleTable, member: impl Fn(ReplicaId) -> bool, n: u64) -> Option<ReplicaId> {
    table
        .iter()
        .filter(|&(r, role)| role.is_up() && member(r))
        .nth(usize::try_from(n).ok()?)
        .map(|(r, _)| r)
}

fn count_up(table: &RoleTable, member: impl Fn(ReplicaId) -> bool) -> u64 {
    table
        .iter()
        .filter(|&(r, role)| role.is_up() && member(r))
        .count() as u64
}

/// Round-robin over the healthy replicas a `member` filter accepts.
fn round_robin_in(
    table: &RoleTable,
    member: impl Fn(ReplicaId) -> bool + Copy,
    ticket: u64,
) -> Option<ReplicaId> {
    let up = count_up(table, member);
    if up == 0 {
        return None;
    }
    nth_up(table, member, ticket % up)
}

/// KRR: the `ticket`-th healthy replica in cyclic index order. The caller increments `ticket`
/// once per admission (one counter shared by both classes).
pub fn round_robin(table: &RoleTable, ticket: u64) -> Option<ReplicaId> {
    round_robin_in(table, |_| true, ticket)
}

/// Fewest active sessions (total load) among healthy replicas; ties to the lowest index.
pub fn least_sessions(table: &RoleTable, loads: &[ReplicaLoad]) -> Option<ReplicaId> {
    least_by(table, loads, |role, load| {
        role.is_up().then_some(load.total())
    })
}

/// rRR+fRR: fixed premium and freemium subsets, round-robin inside each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dedicated {
    premium: ReplicaSet,
    freemium: ReplicaSet,
}

impl Dedicated {
    /// Premium sessions go to `premium`, freemium sessions to `freemium`; the subsets must be
    /// disjoint, non-empty, and inside `0..replica_count`.
    pub fn new(
        replica_count: usize,
        premium: &[ReplicaId],
        freemium: &[ReplicaId],
    ) -> Result<Dedicated, LayoutError> {
        // Reuses the role-table layout checks (range, overlap, duplicates).
        RoleTable::new(replica_count, premium, freemium)?;
        for (class, members) in [
            (ServiceClass::Premium, premium),
            (ServiceClass::Freemium, freemium),
        ] {
            if members.is_empty() {
                return Err(LayoutError::EmptyPool { class });
            }
        }
        Ok(Dedicated {
            premium: ReplicaSet::of(premium),
            freemium: ReplicaSet::of(freemium),
        })
    }

    /// The subset serving `class`.
    pub const fn subset(&self, class: ServiceClass) -> ReplicaSet {
        match class {
            ServiceClass::Premium => self.premium,
            ServiceClass::Freemium => self.freemium,
        }
    }

    /// The `ticket`-th healthy replica of the class's subset. Keep one ticket counter per
    /// class so each subset is a true round-robin. `None` when the whole subset is Down.
    pub fn route(&self, table: &RoleTable, class: ServiceClass, ticket: u64) -> Option<ReplicaId> {
        let subset = self.subset(class);
        round_robin_in(table, |r| subset.contains(r), ticket)
    }
}

/// Weighted power of two choices: draw two distinct healthy replicas, keep the one with the
/// smaller `sessions / weight`. A weight of 0 takes a replica out of rotation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2c {
    weights: [u32; MAX_REPLICAS],
}

impl Default for P2c {
    fn default() -> Self {
        P2c::uniform()
    }
}

impl P2c {
    /// Every replica weighs 1.
    pub const fn uniform() -> P2c {
        P2c {
            weights: [1; MAX_REPLICAS],
        }
    }

    /// Per-replica weights, indexed by replica; replicas beyond the slice weigh 1.
    pub fn with_weights(weights: &[u32]) -> Result<P2c, LayoutError> {
        if weights.len() > MAX_REPLICAS {
            return Err(LayoutError::TooManyReplicas {
                count: weights.len(),
            });
        }
        let mut p2c = P2c::uniform();
        p2c.weights[..weights.len()].copy_from_slice(weights);
        Ok(p2c)
    }

    /// Weight of `replica`.
    pub fn weight(&self, replica: ReplicaId) -> u32 {
        self.weights.get(replica.index()).copied().unwrap_or(0)
    }

    /// Picks two distinct candidates from the low and high halves of `random` and keeps the
    /// less loaded per unit of weight (ties to the lower index). With one candidate, that one.
    pub fn route(
        &self,
        table: &RoleTable,
        loads: &[ReplicaLoad],
        random: u64,
    ) -> Option<ReplicaId> {
        let member = |r: ReplicaId| self.weight(r) > 0;
        let candidates = count_up(table, member);
        if candidates == 0 {
            return None;
        }
        let first_pick = (random & 0xffff_ffff) % candidates;
        let first = nth_up(table, member, first_pick)?;
        if candidates == 1 {
            return Some(first);
        }
        let mut second_pick = (random >> 32) % (candidates - 1);
        if second_pick >= first_pick {
            second_pick += 1;
        }
        let second = nth_up(table, member, second_pick)?;
        Some(self.lighter(loads, first, second))
    }

    /// Compares `load(a)/w(a)` with `load(b)/w(b)` by cross-multiplication (exact, no floats).
    fn lighter(&self, loads: &[ReplicaLoad], a: ReplicaId, b: ReplicaId) -> ReplicaId {
        let load = |r: ReplicaId| loads.get(r.index()).map_or(0, |l| u128::from(l.total()));
        let scaled_a = load(a) * u128::from(self.weight(b));
        let scaled_b = load(b) * u128::from(self.weight(a));
        if scaled_b < scaled_a || (scaled_b == scaled_a && b < a) {
            b
        } else {
            a
        }
    }
}
