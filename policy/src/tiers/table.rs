//! The tiered role table: one role per replica, a tier count, and the one place changes are
//! applied, refusing stale ones and cross-pool borrows that would break a floor or target.

use core::fmt;

use super::role::{TierChange, TierPool, TierRole};
use super::tier::{MAX_TIERS, Tier};
use crate::params::PlbParams;
use crate::replica::{MAX_REPLICAS, ReplicaId, ReplicaSet};
use crate::role::Role;
use crate::table::{LayoutError, RoleTable};

/// Role of every replica, indexed by [`ReplicaId`]; a fixed array, cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TierTable {
    roles: [TierRole; MAX_REPLICAS],
    len: usize,
    tiers: u8,
}

/// Sizes of the persistent pools: one per tier, and Mixed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TierVector {
    /// `|R_t|` per tier.
    pub owned: [usize; MAX_TIERS],
    /// `|R_M|`.
    pub mixed: usize,
}

impl TierVector {
    /// Size of one pool.
    pub fn of(&self, pool: TierPool) -> usize {
        match pool {
            TierPool::Tier(tier) => self.owned.get(tier.index()).copied().unwrap_or(0),
            TierPool::Mixed => self.mixed,
        }
    }

    /// Every pool's size added up.
    pub fn total(&self) -> usize {
        self.owned.iter().sum::<usize>() + self.mixed
    }
}

impl fmt::Display for TierVector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, n) in self.owned.iter().enumerate().filter(|(_, n)| **n > 0) {
            write!(f, "t{i}={n}, ")?;
        }
        write!(f, "M={})", self.mixed)
    }
}

/// Why [`TierTable::apply`] refused a change; the table is untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierConflict {
    /// The replica is not in the table.
    UnknownReplica(ReplicaId),
    /// The replica's role is no longer the one the decision saw.
    Stale {
        /// Replica of the change.
        replica: ReplicaId,
        /// Role the decision saw.
        expected: TierRole,
        /// Role now.
        actual: TierRole,
    },
    /// Malformed target role, or a tier the table does not have.
    InvalidRole(TierRole),
    /// Taking this replica would leave its pool below the floor or target that guards it.
    PoolGuard {
        /// The pool that would shrink.
        pool: Tier,
        /// Its size now.
        size: usize,
        /// The guard (κ or K) it must keep.
        guard: u32,
    },
}

impl fmt::Display for TierConflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TierConflict::UnknownReplica(replica) => {
                write!(f, "{replica} is not in the role table")
            }
            TierConflict::Stale {
                replica,
                expected,
                actual,
            } => write!(
                f,
                "{replica} has role {actual}, the change expected {expected}"
            ),
            TierConflict::InvalidRole(role) => write!(f, "malformed role {role}"),
            TierConflict::PoolGuard { pool, size, guard } => write!(
                f,
                "borrowing from the {pool} pool of {size} would leave it below its guard of {guard}"
            ),
        }
    }
}

impl std::error::Error for TierConflict {}

/// The two-class table as tiers: what two-class callers hand to the tiered checks.
impl From<&RoleTable> for TierTable {
    fn from(table: &RoleTable) -> TierTable {
        TierTable::from_roles(table)
    }
}

impl TierTable {
    /// `replica_count` replicas and `tiers` tiers; `pools[t]` lists the initial members of
    /// `R_t`, every other replica starts Mixed.
    pub fn new(
        replica_count: usize,
        tiers: u8,
        pools: &[&[ReplicaId]],
    ) -> Result<TierTable, LayoutError> {
        if replica_count == 0 {
            return Err(LayoutError::NoReplicas);
        }
        if replica_count > MAX_REPLICAS {
            return Err(LayoutError::TooManyReplicas {
                count: replica_count,
            });
        }
        let mut table = TierTable {
            roles: [TierRole::Mixed; MAX_REPLICAS],
            len: replica_count,
            tiers: tiers.min(MAX_TIERS as u8),
        };
        let mut seen = ReplicaSet::EMPTY;
        for (tier, members) in Tier::all(table.tiers).zip(pools) {
            for &replica in *members {
                if replica.index() >= replica_count {
                    return Err(LayoutError::UnknownReplica {
                        replica,
                        count: replica_count,
                    });
                }
                if seen.contains(replica) {
                    return Err(LayoutError::Overlap { replica });
                }
                seen = seen.with(replica);
                table.roles[replica.index()] = TierRole::Owned(tier);
            }
        }
        Ok(table)
    }

    /// A table of `tiers` tiers with exactly these roles, as another owner computed it (a
    /// fleet's leader): `None` when the list is empty or too long, or a role is malformed
    /// or names a tier past `tiers`.
    pub fn with_roles(tiers: u8, roles: &[TierRole]) -> Option<TierTable> {
        let tiers = tiers.min(MAX_TIERS as u8);
        if roles.is_empty() || roles.len() > MAX_REPLICAS {
            return None;
        }
        let known = |tier: Tier| tier.0 < tiers;
        let fits = |role: &TierRole| match *role {
            TierRole::Owned(tier) => known(tier),
            TierRole::Borrowed { by, from } => {
                role.is_valid()
                    && known(by)
                    && match from {
                        TierPool::Tier(tier) => known(tier),
                        TierPool::Mixed => true,
                    }
            }
            TierRole::Mixed | TierRole::Down => true,
        };
        if !roles.iter().all(fits) {
            return None;
        }
        let mut table = TierTable {
            roles: [TierRole::Mixed; MAX_REPLICAS],
            len: roles.len(),
            tiers,
        };
        table.roles[..roles.len()].copy_from_slice(roles);
        Some(table)
    }

    /// The two-class table as tiers (premium is tier 0, freemium tier 1).
    pub fn from_roles(table: &RoleTable) -> TierTable {
        let mut tiers = TierTable {
            roles: [TierRole::Mixed; MAX_REPLICAS],
            len: table.len(),
            tiers: 2,
        };
        for (slot, &role) in tiers.roles.iter_mut().zip(table.roles()) {
            *slot = tier_role(role);
        }
        tiers
    }

    /// Replica budget K (failed replicas included).
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Always false: a table has at least one replica.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of tiers.
    pub const fn tiers(&self) -> u8 {
        self.tiers
    }

    /// Role of `replica`.
    pub fn role(&self, replica: ReplicaId) -> Option<TierRole> {
        self.roles().get(replica.index()).copied()
    }

    /// Roles of all K replicas.
    pub fn roles(&self) -> &[TierRole] {
        &self.roles[..self.len]
    }

    /// `(replica, role)` in index order.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, TierRole)> + '_ {
        self.roles()
            .iter()
            .enumerate()
            .filter_map(|(i, &role)| ReplicaId::from_index(i).map(|r| (r, role)))
    }

    /// K⁺: replicas not Down.
    pub fn up_count(&self) -> usize {
        self.roles().iter().filter(|role| role.is_up()).count()
    }

    /// `|R_t|` (replicas borrowed *by* t are not counted: guards protect the partition).
    pub fn owned(&self, tier: Tier) -> usize {
        self.count(TierRole::Owned(tier))
    }

    /// Replicas with exactly `role`.
    pub fn count(&self, role: TierRole) -> usize {
        self.roles().iter().filter(|&&r| r == role).count()
    }

    /// Sizes of the persistent pools.
    pub fn vector(&self) -> TierVector {
        let mut vector = TierVector::default();
        for role in self.roles() {
            match role {
                TierRole::Owned(tier) => {
                    if let Some(n) = vector.owned.get_mut(tier.index()) {
                        *n += 1;
                    }
                }
                TierRole::Mixed => vector.mixed += 1,
                TierRole::Borrowed { .. } | TierRole::Down => {}
            }
        }
        vector
    }

    /// Applies `change` if the replica still has `change.from`, the new role is well formed
    /// for this table, and a borrow out of a tier's pool still leaves that pool its guard:
    /// κ when the borrower outranks the pool's tier, K when the pool's tier outranks it.
    pub fn apply(&mut self, change: &TierChange, params: &PlbParams) -> Result<(), TierConflict> {
        let actual = self
            .role(change.replica)
            .ok_or(TierConflict::UnknownReplica(change.replica))?;
        if actual != change.from {
            return Err(TierConflict::Stale {
                replica: change.replica,
                expected: change.from,
                actual,
            });
        }
        if !change.to.is_valid() || !self.knows(change.to) {
            return Err(TierConflict::InvalidRole(change.to));
        }
        if let (TierRole::Owned(pool), TierRole::Borrowed { by, .. }) = (change.from, change.to) {
            let guard = params.guard(pool, by);
            let size = self.owned(pool);
            if size < guard as usize + 1 {
                return Err(TierConflict::PoolGuard { pool, size, guard });
            }
        }
        self.set(change.replica, change.to);
        Ok(())
    }

    fn knows(&self, role: TierRole) -> bool {
        let known = |tier: Tier| tier.0 < self.tiers;
        match role {
            TierRole::Owned(tier) => known(tier),
            TierRole::Borrowed { by, from } => {
                known(by) && !matches!(from, TierPool::Tier(t) if !known(t))
            }
            TierRole::Mixed | TierRole::Down => true,
        }
    }

    /// Sets a role without checks; for decisions computed and applied on the same table.
    pub(crate) fn set(&mut self, replica: ReplicaId, role: TierRole) {
        if let Some(slot) = self.roles[..self.len].get_mut(replica.index()) {
            *slot = role;
        }
    }
}

/// The two-class role as a tier role (premium is tier 0, freemium tier 1).
pub fn tier_role(role: Role) -> TierRole {
    let pool = |pool: crate::Pool| match pool {
        crate::Pool::Premium => TierPool::Tier(Tier(0)),
        crate::Pool::Freemium => TierPool::Tier(Tier(1)),
        crate::Pool::Mixed => TierPool::Mixed,
    };
    match role {
        Role::Premium => TierRole::Owned(Tier(0)),
        Role::Freemium => TierRole::Owned(Tier(1)),
        Role::Mixed => TierRole::Mixed,
        Role::BorrowedToPremium { from } => TierRole::Borrowed {
            by: Tier(0),
            from: pool(from),
        },
        Role::BorrowedToFreemium { from } => TierRole::Borrowed {
            by: Tier(1),
            from: pool(from),
        },
        Role::Down => TierRole::Down,
    }
}

impl fmt::Debug for TierTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.roles()).finish()
    }
}

impl fmt::Display for TierTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, role) in self.roles().iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{i}:{role}")?;
        }
        Ok(())
    }
}
