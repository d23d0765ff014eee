//! Roles of a tiered role table and the changes between them: the two-class vocabulary of
//! `crate::role` with the class a parameter instead of a name.
//!
//! A replica is in one tier's pool, in Mixed, borrowed by one tier (remembering the pool it
//! came from), or Down. With two tiers these are exactly the paper's six roles.

use core::fmt;

use super::tier::{Tier, TierLoad};
use crate::bounded::BoundedList;
use crate::replica::{MAX_REPLICAS, ReplicaId};

/// A persistent pool: one tier's dedicated pool `R_t`, or the shared buffer `R_M`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TierPool {
    /// `R_t`: serves tier t by default.
    Tier(Tier),
    /// `R_M`: lends capacity to any tier.
    Mixed,
}

impl TierPool {
    /// The role of a replica that belongs to this pool.
    pub const fn role(self) -> TierRole {
        match self {
            TierPool::Tier(tier) => TierRole::Owned(tier),
            TierPool::Mixed => TierRole::Mixed,
        }
    }
}

impl fmt::Display for TierPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TierPool::Tier(tier) => tier.fmt(f),
            TierPool::Mixed => f.write_str("mixed"),
        }
    }
}

/// The role of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TierRole {
    /// Member of `R_t`.
    Owned(Tier),
    /// Member of `R_M`: receives sessions only once borrowed.
    Mixed,
    /// Temporarily serving tier `by`, taken from `from` (never `by`'s own pool).
    Borrowed {
        /// The tier it serves now.
        by: Tier,
        /// The pool it was taken from.
        from: TierPool,
    },
    /// Failed: no sessions, no pool, until it rejoins.
    Down,
}

impl TierRole {
    /// The tier whose pool this replica belongs to.
    pub const fn owner(self) -> Option<Tier> {
        match self {
            TierRole::Owned(tier) => Some(tier),
            _ => None,
        }
    }

    /// The tier this replica is borrowed by.
    pub const fn borrower(self) -> Option<Tier> {
        match self {
            TierRole::Borrowed { by, .. } => Some(by),
            _ => None,
        }
    }

    /// The tier new sessions may go to without a role change.
    pub const fn serves(self) -> Option<Tier> {
        match self {
            TierRole::Owned(tier) | TierRole::Borrowed { by: tier, .. } => Some(tier),
            TierRole::Mixed | TierRole::Down => None,
        }
    }

    /// The persistent pool of an owned or Mixed replica.
    pub const fn pool(self) -> Option<TierPool> {
        match self {
            TierRole::Owned(tier) => Some(TierPool::Tier(tier)),
            TierRole::Mixed => Some(TierPool::Mixed),
            TierRole::Borrowed { .. } | TierRole::Down => None,
        }
    }

    /// Not Down.
    pub const fn is_up(self) -> bool {
        !matches!(self, TierRole::Down)
    }

    /// Borrowed by some tier.
    pub const fn is_borrowed(self) -> bool {
        matches!(self, TierRole::Borrowed { .. })
    }

    /// A borrow from the borrower's own pool is meaningless, so it is malformed.
    pub fn is_valid(self) -> bool {
        match self {
            TierRole::Borrowed { by, from } => from != TierPool::Tier(by),
            _ => true,
        }
    }
}

impl fmt::Display for TierRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TierRole::Owned(tier) => tier.fmt(f),
            TierRole::Mixed => f.write_str("mixed"),
            TierRole::Borrowed { by, from } => write!(f, "borrowed_by_{by}_from_{from}"),
            TierRole::Down => f.write_str("down"),
        }
    }
}

/// Why a role changed; the event log's cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TierReason {
    /// A saturated tier took a Mixed replica.
    BorrowMixed,
    /// A saturated tier took back a Mixed replica borrowed by a tier it outranks.
    ReclaimMixed,
    /// A saturated tier took a replica of a tier it outranks (within that tier's floor).
    BorrowLower,
    /// A saturated tier took an empty replica of a tier that outranks it (within its target).
    BorrowHigher,
    /// Returned to a pool below its target.
    ReturnToUnmetTarget,
    /// Returned to Mixed.
    ReturnToMixed,
    /// The replica failed.
    Down,
    /// The replica is reachable again and enters as Mixed.
    Rejoin,
    /// Canonicalization: sessions of several tiers, so Mixed.
    CanonicalMixedSessions,
    /// Canonicalization: sessions of one tier only, so that tier's pool.
    CanonicalSingleTier,
    /// Canonicalization: no sessions, so the return rule decides.
    CanonicalIdleReturn,
    /// Repair toward the target split of the survivors.
    RepairToTarget,
}

impl TierReason {
    /// Stable snake_case name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            TierReason::BorrowMixed => "borrow_mixed",
            TierReason::ReclaimMixed => "reclaim_mixed",
            TierReason::BorrowLower => "borrow_lower",
            TierReason::BorrowHigher => "borrow_higher",
            TierReason::ReturnToUnmetTarget => "return_to_unmet_target",
            TierReason::ReturnToMixed => "return_to_mixed",
            TierReason::Down => "down",
            TierReason::Rejoin => "rejoin",
            TierReason::CanonicalMixedSessions => "canonical_mixed_sessions",
            TierReason::CanonicalSingleTier => "canonical_single_tier",
            TierReason::CanonicalIdleReturn => "canonical_idle_return",
            TierReason::RepairToTarget => "repair_to_target",
        }
    }
}

/// One role change, with the role the decision saw so a stale change can be refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TierChange {
    /// The replica.
    pub replica: ReplicaId,
    /// Its role when the decision was made.
    pub from: TierRole,
    /// Its new role.
    pub to: TierRole,
    /// Why.
    pub reason: TierReason,
}

impl fmt::Display for TierChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} -> {} ({})",
            self.replica,
            self.from,
            self.to,
            self.reason.as_str()
        )
    }
}

/// Capacity of [`TierChanges`]: every borrowed replica may return, plus one borrow.
pub(crate) const TIER_ADMISSION_CHANGES: usize = MAX_REPLICAS + 1;

/// Role changes of one admission, in the order they must be applied.
pub type TierChanges = BoundedList<TierChange, TIER_ADMISSION_CHANGES>;

pub(crate) fn empty_changes() -> TierChanges {
    BoundedList::new(TierChange {
        replica: ReplicaId(0),
        from: TierRole::Mixed,
        to: TierRole::Mixed,
        reason: TierReason::ReturnToMixed,
    })
}

/// Load of a replica as tier `tier` sees it (000's load convention): its own sessions on its
/// own pool, the total on replicas borrowed by it (residual sessions of the donor count,
/// 000 §III-D), `None` outside the tier's routing pool.
///
/// A tier's routing pool is its own pool plus the replicas currently borrowed for it. 000 says
/// a borrowed donor "is moved into the borrower's pool and counted there until it is
/// released", and its load convention speaks of selecting among "replicas currently borrowed
/// for class c". Were a borrowed replica not routable, it would receive only the session that
/// triggered the borrow and every later session would borrow again, draining Mixed within K
/// admissions.
pub(crate) fn tier_load(role: TierRole, load: TierLoad, tier: Tier) -> Option<u64> {
    if role.owner() == Some(tier) {
        Some(u64::from(load.of(tier)))
    } else if role.borrower() == Some(tier) {
        Some(load.total())
    } else {
        None
    }
}
