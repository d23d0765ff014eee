//! The role table a router publishes, in either vocabulary: the paper's two classes
//! ([`RoleTable`]) or ranked classes ([`TierTable`], `tiers = [...]` in the PLB section).
//!
//! Deciding stays with the policy's own types; this enum exists so that what only reads the
//! table (the admin console, the metrics endpoint, the reader pool, down checks) has one
//! view of a replica's role, and names it the same way for both: a two-rank tier table reads
//! exactly like the two-class one (`premium`, `borrowed_to_freemium`, ...).

use pgtier_core::class::ClassSetting;
use pgtier_policy::tiers::{Tier, TierPool, TierRole, TierTable};
use pgtier_policy::{ReplicaId, Role, RoleTable};

/// A router's published table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteTable {
    /// Premium / Freemium / Mixed (every strategy but tiered PLB).
    Classes(RoleTable),
    /// One pool per rank plus Mixed (tiered PLB).
    Tiers(TierTable),
}

/// One replica's role in either vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteRole {
    /// A two-class role.
    Class(Role),
    /// A ranked role.
    Tier(TierRole),
}

impl RouteTable {
    /// The role of `replica`, `None` when it is not in the set.
    pub fn role(&self, replica: ReplicaId) -> Option<RouteRole> {
        match self {
            RouteTable::Classes(table) => table.role(replica).map(RouteRole::Class),
            RouteTable::Tiers(table) => table.role(replica).map(RouteRole::Tier),
        }
    }

    /// Every replica with its role, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, RouteRole)> + '_ {
        let (classes, tiers) = match self {
            RouteTable::Classes(table) => (Some(table), None),
            RouteTable::Tiers(table) => (None, Some(table)),
        };
        let classes = classes
            .into_iter()
            .flat_map(|table| table.iter().map(|(r, role)| (r, RouteRole::Class(role))));
        let tiers = tiers
            .into_iter()
            .flat_map(|table| table.iter().map(|(r, role)| (r, RouteRole::Tier(role))));
        classes.chain(tiers)
    }

    /// Replicas not Down.
    pub fn up_count(&self) -> usize {
        match self {
            RouteTable::Classes(table) => table.up_count(),
            RouteTable::Tiers(table) => table.up_count(),
        }
    }

    /// True when some replica is borrowed.
    pub(crate) fn has_borrowed(&self) -> bool {
        self.iter().any(|(_, role)| role.is_borrowed())
    }

    /// The two-class table, for the strategies that decide on one.
    pub fn classes(&self) -> Option<&RoleTable> {
        match self {
            RouteTable::Classes(table) => Some(table),
            RouteTable::Tiers(_) => None,
        }
    }
}

impl RouteRole {
    /// Failed.
    pub fn is_down(self) -> bool {
        matches!(
            self,
            RouteRole::Class(Role::Down) | RouteRole::Tier(TierRole::Down)
        )
    }

    /// Borrowed by some class.
    pub fn is_borrowed(self) -> bool {
        match self {
            RouteRole::Class(role) => role.is_borrowed(),
            RouteRole::Tier(role) => role.is_borrowed(),
        }
    }

    /// The rank new sessions may go to without a role change (owner or borrower).
    pub fn serves(self) -> Option<Tier> {
        match self {
            RouteRole::Class(role) => role.serves().map(Tier::from),
            RouteRole::Tier(role) => role.serves(),
        }
    }

    /// Admin spelling of the role, the two-class names extended with the class names of
    /// ranks 2 and 3.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteRole::Class(role) => role.as_str(),
            RouteRole::Tier(TierRole::Owned(tier)) => class_name(tier),
            RouteRole::Tier(TierRole::Mixed) => "mixed",
            RouteRole::Tier(TierRole::Down) => "down",
            RouteRole::Tier(TierRole::Borrowed { by, .. }) => match by.0 {
                0 => "borrowed_to_premium",
                1 => "borrowed_to_freemium",
                2 => "borrowed_to_tier2",
                _ => "borrowed_to_tier3",
            },
        }
    }

    /// The pool a borrowed replica came from.
    pub fn borrowed_from(self) -> Option<&'static str> {
        match self {
            RouteRole::Class(role) => role.borrowed_from().map(|pool| pool.as_str()),
            RouteRole::Tier(TierRole::Borrowed { from, .. }) => Some(pool_name(from)),
            RouteRole::Tier(_) => None,
        }
    }
}

/// The configured class name of a rank (`premium`, `freemium`, `tier2`, `tier3`).
pub fn class_name(tier: Tier) -> &'static str {
    ClassSetting::from_rank(tier.0).map_or("tier3", ClassSetting::as_str)
}

/// A pool's name: its rank's class, or `mixed`.
pub(crate) fn pool_name(pool: TierPool) -> &'static str {
    match pool {
        TierPool::Tier(tier) => class_name(tier),
        TierPool::Mixed => "mixed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_policy::tiers::tier_role;

    /// Two ranks read exactly as the paper's two classes, so output does not depend on the
    /// vocabulary a router decides in.
    #[test]
    fn a_two_rank_role_has_the_two_class_name() {
        use pgtier_policy::Pool;
        let roles = [
            Role::Premium,
            Role::Freemium,
            Role::Mixed,
            Role::Down,
            Role::BorrowedToPremium { from: Pool::Mixed },
            Role::BorrowedToPremium {
                from: Pool::Freemium,
            },
            Role::BorrowedToFreemium { from: Pool::Mixed },
            Role::BorrowedToFreemium {
                from: Pool::Premium,
            },
        ];
        for role in roles {
            let class = RouteRole::Class(role);
            let tier = RouteRole::Tier(tier_role(role));
            assert_eq!(class.as_str(), tier.as_str(), "{role:?}");
            assert_eq!(class.borrowed_from(), tier.borrowed_from(), "{role:?}");
            assert_eq!(class.serves(), tier.serves(), "{role:?}");
            assert_eq!(class.is_down(), tier.is_down(), "{role:?}");
        }
    }

    #[test]
    fn lower_ranks_are_named_by_their_class() {
        let borrowed = RouteRole::Tier(TierRole::Borrowed {
            by: Tier(2),
            from: TierPool::Tier(Tier(1)),
        });
        assert_eq!(borrowed.as_str(), "borrowed_to_tier2");
        assert_eq!(borrowed.borrowed_from(), Some("freemium"));
        assert_eq!(RouteRole::Tier(TierRole::Owned(Tier(3))).as_str(), "tier3");
    }
}
