//! The two-class role table: the role of each of the K replicas, and the one place role
//! changes are applied. PLB decides on its two-rank image (`crate::tiers::TierTable`); the
//! baselines decide on it directly.
//!
//! It is a small fixed array so the proxy can clone it into an immutable snapshot for every
//! shard. [`RoleTable::apply`] checks each change's precondition (the role its decision saw, and
//! the pool floor a borrow relies on), so a single owner applying decisions made concurrently
//! against older snapshots never applies a change twice, never loses one silently, and never
//! lets two concurrent borrows break `κ_F` or `K_P`.

use core::fmt;

use crate::params::PlbParams;
use crate::replica::{MAX_REPLICAS, ReplicaId, ServiceClass};
use crate::role::{Pool, Role, RoleChange};
use crate::tiers::TierTable;

/// Role of every replica, indexed by [`ReplicaId`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RoleTable {
    roles: [Role; MAX_REPLICAS],
    len: usize,
}

/// Sizes of the three persistent pools (a role vector `(K_P, K_M, K_F)` in 001's notation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RoleVector {
    /// Premium replicas.
    pub premium: usize,
    /// Mixed replicas.
    pub mixed: usize,
    /// Freemium replicas.
    pub freemium: usize,
}

impl RoleVector {
    /// `premium + mixed + freemium`.
    pub const fn total(self) -> usize {
        self.premium + self.mixed + self.freemium
    }

    /// Size of one pool.
    pub const fn of(self, pool: Pool) -> usize {
        match pool {
            Pool::Premium => self.premium,
            Pool::Mixed => self.mixed,
            Pool::Freemium => self.freemium,
        }
    }
}

impl fmt::Display for RoleVector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(P={}, M={}, F={})",
            self.premium, self.mixed, self.freemium
        )
    }
}

/// Why an initial layout was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayoutError {
    /// No replica at all.
    NoReplicas,
    /// More replicas than [`MAX_REPLICAS`].
    TooManyReplicas {
        /// Requested budget.
        count: usize,
    },
    /// A pool names a replica outside `0..K`.
    UnknownReplica {
        /// Offending replica.
        replica: ReplicaId,
        /// Replica budget `K`.
        count: usize,
    },
    /// A replica listed in both the premium and the freemium pool, or twice in one.
    Overlap {
        /// Offending replica.
        replica: ReplicaId,
    },
    /// A dedicated partition gives a class no replica.
    EmptyPool {
        /// Class left without replicas.
        class: ServiceClass,
    },
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LayoutError::NoReplicas => f.write_str("at least one replica is required"),
            LayoutError::TooManyReplicas { count } => {
                write!(
                    f,
                    "{count} replicas configured, at most {MAX_REPLICAS} are supported"
                )
            }
            LayoutError::UnknownReplica { replica, count } => {
                write!(f, "{replica} is not one of the {count} configured replicas")
            }
            LayoutError::Overlap { replica } => {
                write!(
                    f,
                    "{replica} is listed more than once across the premium and freemium pools"
                )
            }
            LayoutError::EmptyPool { class } => {
                write!(f, "the {class} partition has no replica")
            }
        }
    }
}

impl std::error::Error for LayoutError {}

/// Why [`RoleTable::apply`] refused a change. Refusal leaves the table untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conflict {
    /// The change names a replica outside `0..K`.
    UnknownReplica(ReplicaId),
    /// The replica no longer has the role the decision saw (another change won the race).
    Stale {
        /// Replica of the change.
        replica: ReplicaId,
        /// Role the decision saw.
        expected: Role,
        /// Role in the table now.
        actual: Role,
    },
    /// The target role is malformed (borrowed from the borrower's own pool).
    InvalidRole(Role),
    /// Premium borrowing this Freemium replica would leave fewer than `κ_F` in `R_F`.
    FreemiumFloor {
        /// Current `|R_F|`.
        freemium_pool: usize,
        /// `κ_F`.
        floor: u32,
    },
    /// Freemium borrowing this Premium replica would leave fewer than `K_P` in `R_P`.
    PremiumTarget {
        /// Current `|R_P|`.
        premium_pool: usize,
        /// `K_P`.
        target: u32,
    },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Conflict::UnknownReplica(replica) => write!(f, "{replica} is not in the role table"),
            Conflict::Stale {
                replica,
                expected,
                actual,
            } => write!(
                f,
                "{replica} has role {actual}, the change expected {expected}"
            ),
            Conflict::InvalidRole(role) => write!(f, "malformed role {role}"),
            Conflict::FreemiumFloor {
                freemium_pool,
                floor,
            } => write!(
                f,
                "borrowing from a freemium pool of {freemium_pool} would break freemium_floor = {floor}"
            ),
            Conflict::PremiumTarget {
                premium_pool,
                target,
            } => write!(
                f,
                "borrowing from a premium pool of {premium_pool} would break premium_target = {target}"
            ),
        }
    }
}

impl std::error::Error for Conflict {}

impl RoleTable {
    /// The initial split of `replica_count` replicas: `premium` form `R_P`, `freemium` form
    /// `R_F`, every other replica starts Mixed.
    pub fn new(
        replica_count: usize,
        premium: &[ReplicaId],
        freemium: &[ReplicaId],
    ) -> Result<RoleTable, LayoutError> {
        let ranks = TierTable::new(replica_count, 2, &[premium, freemium])?;
        Ok(RoleTable::from_ranks(&ranks))
    }

    /// `replica_count` replicas, all Mixed (the layout used by role-agnostic strategies).
    pub fn all_mixed(replica_count: usize) -> Result<RoleTable, LayoutError> {
        RoleTable::new(replica_count, &[], &[])
    }

    /// The two-class table of a two-rank table (rank 0 premium, every other rank freemium).
    pub fn from_ranks(ranks: &TierTable) -> RoleTable {
        let mut table = RoleTable {
            roles: [Role::Mixed; MAX_REPLICAS],
            len: ranks.len(),
        };
        for (slot, &role) in table.roles.iter_mut().zip(ranks.roles()) {
            *slot = Role::of_rank(role);
        }
        table
    }

    /// Replica budget `K` (failed replicas included).
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Always false: a table has at least one replica.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Role of `replica`, or `None` outside `0..K`.
    pub fn role(&self, replica: ReplicaId) -> Option<Role> {
        self.roles().get(replica.index()).copied()
    }

    /// Roles of all K replicas, indexed by replica.
    pub fn roles(&self) -> &[Role] {
        &self.roles[..self.len]
    }

    /// `(replica, role)` for every replica in index order.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, Role)> + '_ {
        self.roles()
            .iter()
            .enumerate()
            .filter_map(|(i, &role)| ReplicaId::from_index(i).map(|r| (r, role)))
    }

    /// True when `replica` exists and is not Down.
    pub fn is_up(&self, replica: ReplicaId) -> bool {
        self.role(replica).is_some_and(Role::is_up)
    }

    /// `K⁺`: replicas not Down.
    pub fn up_count(&self) -> usize {
        self.roles().iter().filter(|role| role.is_up()).count()
    }

    /// `|R_P|` or `|R_F|`: replicas whose role is the class's own pool. Replicas borrowed *for*
    /// the class are not counted: floors and targets protect the persistent partition.
    pub fn owned(&self, class: ServiceClass) -> usize {
        self.count(Pool::of_class(class).role())
    }

    /// `|R_M|`.
    pub fn mixed(&self) -> usize {
        self.count(Role::Mixed)
    }

    /// Number of replicas with exactly `role`.
    pub fn count(&self, role: Role) -> usize {
        self.roles().iter().filter(|&&r| r == role).count()
    }

    /// Sizes of the persistent pools (borrowed and Down replicas are in none of them).
    pub fn vector(&self) -> RoleVector {
        RoleVector {
            premium: self.count(Role::Premium),
            mixed: self.count(Role::Mixed),
            freemium: self.count(Role::Freemium),
        }
    }

    /// Applies `change` if its precondition still holds: the replica has role `change.from`,
    /// `change.to` is well formed, and a borrow across the Premium/Freemium boundary still
    /// respects `κ_F` (premium taking a Freemium replica) or `K_P` (freemium taking a Premium
    /// replica). On error nothing changes.
    pub fn apply(&mut self, change: &RoleChange, params: &PlbParams) -> Result<(), Conflict> {
        let actual = self
            .role(change.replica)
            .ok_or(Conflict::UnknownReplica(change.replica))?;
        if actual != change.from {
            return Err(Conflict::Stale {
                replica: change.replica,
                expected: change.from,
                actual,
            });
        }
        if !change.to.is_valid() {
            return Err(Conflict::InvalidRole(change.to));
        }
        self.check_cross_borrow(change, params)?;
        self.set(change.replica, change.to);
        Ok(())
    }

    /// A borrow across pools must leave the donor pool its guard ([`PlbParams::guard`]): `κ_F`
    /// when premium takes a Freemium replica, `K_P` when freemium takes a Premium one.
    fn check_cross_borrow(&self, change: &RoleChange, params: &PlbParams) -> Result<(), Conflict> {
        let (Some(pool), Some(by)) = (change.from.owner(), change.to.borrower()) else {
            return Ok(());
        };
        let size = self.owned(pool);
        let guard = params.guard(pool.into(), by.into());
        if pool == by || size > guard as usize {
            return Ok(());
        }
        Err(match pool {
            ServiceClass::Freemium => Conflict::FreemiumFloor {
                freemium_pool: size,
                floor: guard,
            },
            ServiceClass::Premium => Conflict::PremiumTarget {
                premium_pool: size,
                target: guard,
            },
        })
    }

    /// Sets a role without checks; for decisions computed and applied on the same table.
    pub(crate) fn set(&mut self, replica: ReplicaId, role: Role) {
        if let Some(slot) = self.roles[..self.len].get_mut(replica.index()) {
            *slot = role;
        }
    }
}

impl fmt::Debug for RoleTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.roles()).finish()
    }
}

impl fmt::Display for RoleTable {
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
