//! Replica roles and role changes in the paper's two-class names: the vocabulary of the
//! proxy's role table and of its event log. PLB decides in ranks (`crate::tiers::role`);
//! `crate::plb` translates its two-rank roles and reasons into these.
//!
//! A role says which class a replica serves *now*; a borrowed role also remembers the pool it
//! was taken from, so an operator can see where capacity came from. A [`RoleChange`] carries the
//! role its decision saw (`from`), which lets the owner of the table refuse a stale change.

use core::fmt;

use crate::replica::{ReplicaId, ServiceClass};
use crate::tiers::{TierPool, TierRole};

/// A persistent pool of the partition `R_P`, `R_F`, `R_M`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// `R_P`: serves premium sessions by default.
    Premium,
    /// `R_F`: serves freemium sessions by default.
    Freemium,
    /// `R_M`: the buffer that lends capacity in either direction.
    Mixed,
}

impl Pool {
    /// The dedicated pool of `class`.
    pub(crate) const fn of_class(class: ServiceClass) -> Pool {
        match class {
            ServiceClass::Premium => Pool::Premium,
            ServiceClass::Freemium => Pool::Freemium,
        }
    }

    /// Admin-console spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            Pool::Premium => "premium",
            Pool::Freemium => "freemium",
            Pool::Mixed => "mixed",
        }
    }

    /// The role of a replica that belongs to this pool.
    pub const fn role(self) -> Role {
        match self {
            Pool::Premium => Role::Premium,
            Pool::Freemium => Role::Freemium,
            Pool::Mixed => Role::Mixed,
        }
    }
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The role of one replica. Exactly one per replica; `Down` is the only role of a failed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Member of `R_P`.
    Premium,
    /// Member of `R_F`.
    Freemium,
    /// Member of `R_M`: receives sessions only once borrowed.
    Mixed,
    /// Temporarily serving premium; `from` is `Mixed` or `Freemium`.
    BorrowedToPremium {
        /// Pool the replica was borrowed from.
        from: Pool,
    },
    /// Temporarily serving freemium; `from` is `Mixed` or `Premium`.
    BorrowedToFreemium {
        /// Pool the replica was borrowed from.
        from: Pool,
    },
    /// Failed: receives no session and belongs to no pool until it rejoins.
    Down,
}

impl Role {
    /// The role of a replica borrowed for `class` from `from`.
    pub const fn borrowed_for(class: ServiceClass, from: Pool) -> Role {
        match class {
            ServiceClass::Premium => Role::BorrowedToPremium { from },
            ServiceClass::Freemium => Role::BorrowedToFreemium { from },
        }
    }

    /// The two-class role of a rank role (inverse of [`crate::tiers::tier_role`]): rank 0 is
    /// premium, every other rank freemium.
    pub(crate) fn of_rank(role: TierRole) -> Role {
        let pool = |pool: TierPool| match pool {
            TierPool::Tier(tier) => Pool::of_class(tier.two_class()),
            TierPool::Mixed => Pool::Mixed,
        };
        match role {
            TierRole::Owned(tier) => Pool::of_class(tier.two_class()).role(),
            TierRole::Mixed => Role::Mixed,
            TierRole::Borrowed { by, from } => Role::borrowed_for(by.two_class(), pool(from)),
            TierRole::Down => Role::Down,
        }
    }

    /// The class whose dedicated pool this replica belongs to (`Premium`/`Freemium` roles).
    pub const fn owner(self) -> Option<ServiceClass> {
        match self {
            Role::Premium => Some(ServiceClass::Premium),
            Role::Freemium => Some(ServiceClass::Freemium),
            _ => None,
        }
    }

    /// The class this replica is borrowed for, if it is borrowed.
    pub const fn borrower(self) -> Option<ServiceClass> {
        match self {
            Role::BorrowedToPremium { .. } => Some(ServiceClass::Premium),
            Role::BorrowedToFreemium { .. } => Some(ServiceClass::Freemium),
            _ => None,
        }
    }

    /// The class new sessions may be routed to on this replica without a role change:
    /// the owner or the borrower. `None` for `Mixed` and `Down`.
    pub const fn serves(self) -> Option<ServiceClass> {
        match self.owner() {
            Some(class) => Some(class),
            None => self.borrower(),
        }
    }

    /// The pool a borrowed replica was taken from.
    pub const fn borrowed_from(self) -> Option<Pool> {
        match self {
            Role::BorrowedToPremium { from } | Role::BorrowedToFreemium { from } => Some(from),
            _ => None,
        }
    }

    /// The persistent pool of a non-borrowed, healthy replica.
    pub const fn pool(self) -> Option<Pool> {
        match self {
            Role::Premium => Some(Pool::Premium),
            Role::Freemium => Some(Pool::Freemium),
            Role::Mixed => Some(Pool::Mixed),
            _ => None,
        }
    }

    /// False only for `Down`.
    pub const fn is_up(self) -> bool {
        !matches!(self, Role::Down)
    }

    /// True for both borrowed roles.
    pub const fn is_borrowed(self) -> bool {
        self.borrower().is_some()
    }

    /// True when the role is well formed: a borrowed role never names the borrower's own pool.
    pub const fn is_valid(self) -> bool {
        !matches!(
            self,
            Role::BorrowedToPremium {
                from: Pool::Premium
            } | Role::BorrowedToFreemium {
                from: Pool::Freemium
            }
        )
    }

    /// Admin-console spelling of the role, without the donor pool.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Premium => "premium",
            Role::Freemium => "freemium",
            Role::Mixed => "mixed",
            Role::BorrowedToPremium { .. } => "borrowed_to_premium",
            Role::BorrowedToFreemium { .. } => "borrowed_to_freemium",
            Role::Down => "down",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.borrowed_from() {
            Some(from) => write!(f, "{}(from {from})", self.as_str()),
            None => f.write_str(self.as_str()),
        }
    }
}

/// Why a role changed; one variant per rule of the papers, for the event log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeReason {
    /// 000 Alg. 1 l. 7–10: premium saturated, a Mixed replica borrowed (`select_M→P`).
    BorrowMixedForPremium,
    /// 000 Alg. 1 l. 12–19: premium saturated, Mixed empty, a Freemium replica borrowed
    /// (`select_F→P`) while `|R_F| − 1 ≥ κ_F`.
    BorrowFreemiumForPremium,
    /// 000 Alg. 1 l. 27–30: freemium saturated, a Mixed replica borrowed (`select_M→F`).
    BorrowMixedForFreemium,
    /// 000 Alg. 1 l. 32–36: freemium saturated, a Premium-empty replica borrowed while
    /// `|R_P| − 1 ≥ K_P`.
    BorrowPremiumForFreemium,
    /// 000 §III-D Return: pressure eased, replica sent to the opposite pool, below its target.
    ReturnToUnmetTarget,
    /// 000 §III-D Return: pressure eased, replica sent to Mixed (the opposite pool has its target).
    ReturnToMixed,
    /// 001 §III: the replica failed (fail-stop Down event).
    Down,
    /// 001 §III: the replica is reachable again and enters as shared (Mixed) capacity.
    Rejoin,
    /// 001 §III canonicalization: a borrowed replica hosting both classes becomes Mixed.
    CanonicalMixedSessions,
    /// 001 §III canonicalization: a borrowed replica hosting only premium becomes Premium.
    CanonicalPremiumOnly,
    /// 001 §III canonicalization: a borrowed replica hosting only freemium becomes Freemium.
    CanonicalFreemiumOnly,
    /// 001 §III canonicalization: an idle borrowed replica is returned (by the 000 return rule).
    CanonicalIdleReturn,
    /// 001 §III repair loop: moved toward the target role vector of the survivor set.
    RepairToTarget,
}

impl ChangeReason {
    /// Stable snake_case name for logs and `SHOW ROLE_EVENTS`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ChangeReason::BorrowMixedForPremium => "borrow_mixed_for_premium",
            ChangeReason::BorrowFreemiumForPremium => "borrow_freemium_for_premium",
            ChangeReason::BorrowMixedForFreemium => "borrow_mixed_for_freemium",
            ChangeReason::BorrowPremiumForFreemium => "borrow_premium_for_freemium",
            ChangeReason::ReturnToUnmetTarget => "return_to_unmet_target",
            ChangeReason::ReturnToMixed => "return_to_mixed",
            ChangeReason::Down => "down",
            ChangeReason::Rejoin => "rejoin",
            ChangeReason::CanonicalMixedSessions => "canonical_mixed_sessions",
            ChangeReason::CanonicalPremiumOnly => "canonical_premium_only",
            ChangeReason::CanonicalFreemiumOnly => "canonical_freemium_only",
            ChangeReason::CanonicalIdleReturn => "canonical_idle_return",
            ChangeReason::RepairToTarget => "repair_to_target",
        }
    }

    /// True for the four borrow rules of Algorithm 1.
    pub const fn is_borrow(self) -> bool {
        matches!(
            self,
            ChangeReason::BorrowMixedForPremium
                | ChangeReason::BorrowFreemiumForPremium
                | ChangeReason::BorrowMixedForFreemium
                | ChangeReason::BorrowPremiumForFreemium
        )
    }
}

impl fmt::Display for ChangeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One role transition, decided against a view of the table in which `replica` had role `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoleChange {
    /// The replica whose role changes.
    pub replica: ReplicaId,
    /// The role the decision saw; applying fails if the table no longer has it.
    pub from: Role,
    /// The new role.
    pub to: Role,
    /// The rule that caused the change.
    pub reason: ChangeReason,
}

impl RoleChange {
    /// Fills unused slots of change lists; never observable.
    pub(crate) const FILLER: RoleChange = RoleChange {
        replica: ReplicaId(0),
        from: Role::Mixed,
        to: Role::Mixed,
        reason: ChangeReason::RepairToTarget,
    };
}

impl fmt::Display for RoleChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} -> {} ({})",
            self.replica, self.from, self.to, self.reason
        )
    }
}
