//! The outcome of routing one session: which replica, by which rule, and which role changes
//! the decision implies. Shared by PLB and the baselines so callers handle one shape.

use core::fmt;

use crate::bounded::BoundedList;
use crate::replica::{MAX_REPLICAS, ReplicaId, ServiceClass};
use crate::role::RoleChange;

/// Capacity of [`AdmissionChanges`]: every borrowed replica may return (at most K) plus one
/// borrow.
pub(crate) const ADMISSION_CHANGES: usize = MAX_REPLICAS + 1;

/// Role changes implied by one admission, in the order they must be applied.
pub type AdmissionChanges = BoundedList<RoleChange, ADMISSION_CHANGES>;

/// Capacity of [`RepairChanges`]: one Down/Rejoin step, at most K canonicalization steps and
/// at most K repair steps.
pub(crate) const REPAIR_CHANGES: usize = 2 * MAX_REPLICAS + 2;

/// Role changes implied by a change of the survivor set, in the order they were applied.
pub type RepairChanges = BoundedList<RoleChange, REPAIR_CHANGES>;

pub(crate) fn empty_admission_changes() -> AdmissionChanges {
    BoundedList::new(RoleChange::FILLER)
}

pub(crate) fn empty_repair_changes() -> RepairChanges {
    BoundedList::new(RoleChange::FILLER)
}

/// Which rule chose the replica (000 Algorithm 1 line numbers in the variant docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AdmissionRule {
    /// Lines 3–5 / 23–25: least-loaded replica of the class's pool with headroom.
    PoolHeadroom,
    /// Lines 7–10 / 27–30: borrowed a Mixed replica.
    BorrowMixed,
    /// Lines 12–19: premium borrowed a Freemium replica.
    BorrowFreemium,
    /// Lines 32–36: freemium borrowed a Premium-empty Premium replica.
    BorrowPremium,
    /// Lines 21 / 38: no headroom and no eligible donor: least-loaded replica of the pool.
    PoolFallback,
    /// Beyond the paper: the class has no replica at all (possible only after failures, e.g.
    /// a single survivor already borrowed by the other class): least-loaded healthy replica.
    LastResort,
    /// Baseline: round-robin over healthy replicas.
    RoundRobin,
    /// Baseline: round-robin inside the class's dedicated subset.
    Dedicated,
    /// Baseline: weighted power of two choices.
    PowerOfTwoChoices,
    /// Baseline: fewest active sessions.
    LeastSessions,
}

impl AdmissionRule {
    /// Stable snake_case name for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            AdmissionRule::PoolHeadroom => "pool_headroom",
            AdmissionRule::BorrowMixed => "borrow_mixed",
            AdmissionRule::BorrowFreemium => "borrow_freemium",
            AdmissionRule::BorrowPremium => "borrow_premium",
            AdmissionRule::PoolFallback => "pool_fallback",
            AdmissionRule::LastResort => "last_resort",
            AdmissionRule::RoundRobin => "round_robin",
            AdmissionRule::Dedicated => "dedicated",
            AdmissionRule::PowerOfTwoChoices => "p2c",
            AdmissionRule::LeastSessions => "least_sessions",
        }
    }
}

impl fmt::Display for AdmissionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A routing decision. The session goes to `replica` now; `role_changes` are handed to the
/// owner of the role table, which applies them in order with [`crate::RoleTable::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    /// Replica the session is pinned to for its lifetime.
    pub replica: ReplicaId,
    /// Rule that chose it.
    pub rule: AdmissionRule,
    /// Returns evaluated before the decision, then the borrow it made (if any).
    pub role_changes: AdmissionChanges,
}

/// Why no replica could be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmitError {
    /// The load slice does not have one entry per replica of the table.
    LoadCount {
        /// Replicas in the table.
        replicas: usize,
        /// Entries in the load slice.
        loads: usize,
    },
    /// Every replica is Down.
    NoReplicaUp,
    /// Every replica the class may use is Down (dedicated partitions only).
    NoReplicaForClass(ServiceClass),
}

impl fmt::Display for AdmitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            AdmitError::LoadCount { replicas, loads } => {
                write!(f, "{loads} load entries given for {replicas} replicas")
            }
            AdmitError::NoReplicaUp => f.write_str("no replica is up"),
            AdmitError::NoReplicaForClass(class) => {
                write!(f, "no replica of the {class} partition is up")
            }
        }
    }
}

impl std::error::Error for AdmitError {}
