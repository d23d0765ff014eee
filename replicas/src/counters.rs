//! Active-session counters per replica and per class (rank), shared by every shard of the
//! process.
//!
//! They exist because PLB decides from `load_P(r)` and `load_F(r)` across *all* sessions, while
//! sessions live on many shards. Each counter sits on its own cache line pair so that shards
//! admitting to different replicas, or different classes on one replica, never contend on a
//! line. Counters are only changed through `SessionCounters::try_claim` (compare-and-swap
//! from the value a decision saw) and [`SessionCounters::release`], which never goes below zero.

use std::sync::atomic::{AtomicU32, Ordering};

use pgtier_policy::tiers::{MAX_TIERS, Tier, TierLoad};
use pgtier_policy::{MAX_REPLICAS, ReplicaId, ReplicaLoad};

/// One counter alone on 128 bytes: two cache lines, because adjacent-line prefetch would
/// otherwise make neighbours share traffic.
#[repr(align(128))]
#[derive(Debug, Default)]
struct PaddedCounter(AtomicU32);

/// The class counters of one replica, one per rank (premium is rank 0, freemium rank 1; a
/// two-class router only ever counts those two).
#[derive(Debug, Default)]
struct ReplicaCounters {
    ranks: [PaddedCounter; MAX_TIERS],
}

impl ReplicaCounters {
    fn of(&self, class: Tier) -> Option<&AtomicU32> {
        self.ranks.get(class.index()).map(|counter| &counter.0)
    }

    fn rank(&self, rank: usize) -> u32 {
        self.ranks
            .get(rank)
            .map_or(0, |counter| counter.0.load(Ordering::SeqCst))
    }
}

/// Loads of all replicas of one database, read into a stack array for one decision.
pub(crate) type LoadArray = [ReplicaLoad; MAX_REPLICAS];

/// Ranked loads of all replicas, for tiered PLB's decisions.
pub(crate) type TierLoadArray = [TierLoad; MAX_REPLICAS];

/// Why a counter could not be changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterError {
    /// The replica is not in this set.
    UnknownReplica(ReplicaId),
    /// Another shard changed the counter since the decision read it.
    Changed {
        /// Value the decision saw.
        expected: u32,
        /// Value now.
        actual: u32,
    },
    /// `u32::MAX` sessions of one class on one replica.
    Overflow,
    /// A rank past [`MAX_TIERS`].
    UnknownClass(Tier),
    /// A release for a class with no active session (a double release: a bug in the caller).
    Underflow,
}

impl std::fmt::Display for CounterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CounterError::UnknownReplica(replica) => {
                write!(f, "replica {} is not in this set", replica.0)
            }
            CounterError::Changed { expected, actual } => {
                write!(
                    f,
                    "the count moved from {expected} to {actual} under the decision"
                )
            }
            CounterError::Overflow => f.write_str("too many sessions on one replica"),
            CounterError::UnknownClass(class) => write!(f, "no counter for {class}"),
            CounterError::Underflow => f.write_str("a session was released twice"),
        }
    }
}

/// Per-replica per-class active-session counters for one database's replicas.
#[derive(Debug)]
pub struct SessionCounters {
    replicas: Box<[ReplicaCounters]>,
}

impl SessionCounters {
    /// Zeroed counters for `replica_count` replicas (at most [`MAX_REPLICAS`]).
    pub fn new(replica_count: usize) -> SessionCounters {
        let count = replica_count.min(MAX_REPLICAS);
        SessionCounters {
            replicas: (0..count).map(|_| ReplicaCounters::default()).collect(),
        }
    }

    /// Number of replicas counted.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// True when no replica is counted.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// Current two-class load of one replica (zero for an unknown replica): premium is rank 0
    /// and freemium every rank below it.
    pub fn load(&self, replica: ReplicaId) -> ReplicaLoad {
        match self.replicas.get(replica.index()) {
            Some(counters) => ReplicaLoad {
                premium: counters.rank(0),
                freemium: (1..MAX_TIERS).map(|rank| counters.rank(rank)).sum(),
            },
            None => ReplicaLoad::default(),
        }
    }

    /// Current load of one replica by rank (zero for an unknown replica).
    pub fn tier_load(&self, replica: ReplicaId) -> TierLoad {
        let mut load = TierLoad::default();
        if let Some(counters) = self.replicas.get(replica.index()) {
            for (rank, slot) in load.sessions.iter_mut().enumerate() {
                *slot = counters.rank(rank);
            }
        }
        load
    }

    /// [`SessionCounters::read_into`] by rank.
    pub(crate) fn read_tiers_into<'a>(&self, out: &'a mut TierLoadArray) -> &'a [TierLoad] {
        for (index, slot) in out.iter_mut().enumerate().take(self.replicas.len()) {
            *slot =
                ReplicaId::from_index(index).map_or_else(TierLoad::default, |r| self.tier_load(r));
        }
        &out[..self.replicas.len()]
    }

    /// Reads every replica's load into `out` and returns the filled prefix. The reads are not
    /// one atomic snapshot; decisions tolerate that because each placement is claimed with a
    /// compare-and-swap against the value it used.
    pub(crate) fn read_into<'a>(&self, out: &'a mut LoadArray) -> &'a [ReplicaLoad] {
        for (index, slot) in out.iter_mut().enumerate().take(self.replicas.len()) {
            *slot =
                ReplicaId::from_index(index).map_or_else(ReplicaLoad::default, |r| self.load(r));
        }
        &out[..self.replicas.len()]
    }

    /// Counts one more `class` session on `replica` if its counter still holds `expected`.
    pub(crate) fn try_claim(
        &self,
        replica: ReplicaId,
        class: impl Into<Tier>,
        expected: u32,
    ) -> Result<(), CounterError> {
        let counter = self.counter(replica, class)?;
        let next = expected.checked_add(1).ok_or(CounterError::Overflow)?;
        counter
            .compare_exchange(expected, next, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| ())
            .map_err(|actual| CounterError::Changed { expected, actual })
    }

    /// Counts one more `class` session on `replica` unconditionally (the control shard, which
    /// decided against the authoritative table, and re-pins use this).
    pub fn claim(&self, replica: ReplicaId, class: impl Into<Tier>) -> Result<(), CounterError> {
        let counter = self.counter(replica, class)?;
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_add(1))
            .map(|_| ())
            .map_err(|_| CounterError::Overflow)
    }

    /// Counts one `class` session fewer on `replica`; refuses to go below zero.
    pub fn release(&self, replica: ReplicaId, class: impl Into<Tier>) -> Result<(), CounterError> {
        let counter = self.counter(replica, class)?;
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .map(|_| ())
            .map_err(|_| CounterError::Underflow)
    }

    /// Sum of all counters (used by tests and the admin console to see leaks).
    pub fn total(&self) -> u64 {
        (0..self.replicas.len())
            .filter_map(ReplicaId::from_index)
            .map(|r| self.load(r).total())
            .sum()
    }

    fn counter(
        &self,
        replica: ReplicaId,
        class: impl Into<Tier>,
    ) -> Result<&AtomicU32, CounterError> {
        let class = class.into();
        self.replicas
            .get(replica.index())
            .ok_or(CounterError::UnknownReplica(replica))?
            .of(class)
            .ok_or(CounterError::UnknownClass(class))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_policy::ServiceClass;

    const R0: ReplicaId = ReplicaId(0);
    const R1: ReplicaId = ReplicaId(1);

    #[test]
    fn counters_are_on_separate_cache_lines() {
        assert!(std::mem::align_of::<PaddedCounter>() >= 128);
        assert!(std::mem::size_of::<ReplicaCounters>() >= 128 * MAX_TIERS);
    }

    #[test]
    fn lower_ranks_count_as_freemium_in_the_two_class_view() {
        let counters = SessionCounters::new(1);
        counters.claim(R0, Tier(0)).expect("claim");
        counters.claim(R0, Tier(2)).expect("claim");
        counters.claim(R0, Tier(3)).expect("claim");
        assert_eq!(
            counters.load(R0),
            ReplicaLoad {
                premium: 1,
                freemium: 2
            }
        );
        assert_eq!(counters.tier_load(R0).sessions, [1, 0, 1, 1]);
        assert_eq!(
            counters.claim(R0, Tier(4)),
            Err(CounterError::UnknownClass(Tier(4)))
        );
        assert_eq!(counters.total(), 3);
    }

    #[test]
    fn claim_from_stale_value_is_refused() {
        let counters = SessionCounters::new(2);
        counters
            .try_claim(R0, ServiceClass::Premium, 0)
            .expect("first claim");
        assert_eq!(
            counters.try_claim(R0, ServiceClass::Premium, 0),
            Err(CounterError::Changed {
                expected: 0,
                actual: 1
            })
        );
        assert_eq!(
            counters.load(R0),
            ReplicaLoad {
                premium: 1,
                freemium: 0
            }
        );
    }

    #[test]
    fn release_never_goes_below_zero() {
        let counters = SessionCounters::new(2);
        assert_eq!(
            counters.release(R1, ServiceClass::Freemium),
            Err(CounterError::Underflow)
        );
        counters.claim(R1, ServiceClass::Freemium).expect("claim");
        counters
            .release(R1, ServiceClass::Freemium)
            .expect("release");
        assert_eq!(counters.total(), 0);
    }

    #[test]
    fn unknown_replica_is_an_error() {
        let counters = SessionCounters::new(1);
        assert_eq!(
            counters.claim(R1, ServiceClass::Premium),
            Err(CounterError::UnknownReplica(R1))
        );
    }

    #[test]
    fn read_into_fills_the_configured_prefix() {
        let counters = SessionCounters::new(2);
        counters.claim(R1, ServiceClass::Premium).expect("claim");
        let mut loads = [ReplicaLoad::default(); MAX_REPLICAS];
        let view = counters.read_into(&mut loads);
        assert_eq!(view.len(), 2);
        assert_eq!(view[1].premium, 1);
    }
}
