//! Tiered admission: Algorithm 1 of 000 for any number of ordered classes.
//!
//! A session of tier c tries, in order (the paper's line numbers are for c = premium /
//! freemium):
//! 1. headroom in c's routing pool, least loaded (lines 3–5 / 23–25);
//! 2. a Mixed replica (lines 7–10 / 27–30); with `reclaim` (beyond the paper), then a Mixed
//!    replica that a tier c outranks has borrowed, the least important borrower first, below
//!    c's best load: Mixed is the shared buffer, and without this the first tier to saturate
//!    keeps it however much more important the next one is;
//! 3. a replica of a tier c outranks, the least important such tier first, within its floor
//!    κ and below c's best load (lines 12–19, premium from freemium);
//! 4. an empty replica of a tier that outranks c, the nearest such tier first, within its
//!    target K (lines 32–36, freemium from premium);
//! 5. the least-loaded replica of c's routing pool (lines 21 / 38), then any healthy replica.
//!
//! Returns are planned first, on a private copy of the table, because role changes happen
//! only at admission time and a released replica must not be borrowed again by the very
//! decision that released it. With two tiers every step is the paper's, and [`crate::Plb`]
//! is this policy on two ranks (`tests/two_rank_traces.rs` pins it to the paper's outcomes).

use super::returns::plan_returns;
pub use super::role::TierChanges;
use super::role::{TierChange, TierPool, TierReason, TierRole, empty_changes, tier_load};
use super::table::{TierTable, TierVector};
use super::tier::{Tier, TierLoad};
use crate::params::{PlbParams, TierParamError};
use crate::replica::ReplicaId;
use crate::signal::{LoadSignal, Loads};

/// Which step chose the replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TierRule {
    /// Step 1: headroom in the tier's routing pool.
    Headroom,
    /// Step 2: borrowed a Mixed replica.
    BorrowMixed,
    /// Step 2, with `reclaim`: took a Mixed replica back from a tier it outranks.
    Reclaim,
    /// Step 3: borrowed a replica of a tier it outranks.
    BorrowLower,
    /// Step 4: borrowed an empty replica of a tier that outranks it.
    BorrowHigher,
    /// Step 5: the least-loaded replica of its routing pool, saturated.
    Fallback,
    /// Its routing pool is empty (after failures): the least-loaded healthy replica.
    LastResort,
}

/// A tiered routing decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TierAdmission {
    /// The replica the session is pinned to.
    pub replica: ReplicaId,
    /// The step that chose it.
    pub rule: TierRule,
    /// Returns, then the borrow (if any), for the table's owner to apply.
    pub role_changes: TierChanges,
}

/// Why no replica could be chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TierAdmitError {
    /// The load slice does not have one entry per replica.
    LoadCount {
        /// Replicas in the table.
        replicas: usize,
        /// Entries given.
        loads: usize,
    },
    /// The tier is not one of the table's.
    UnknownTier(Tier),
    /// Every replica is Down.
    NoReplicaUp,
}

impl core::fmt::Display for TierAdmitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            TierAdmitError::LoadCount { replicas, loads } => {
                write!(f, "{loads} load entries given for {replicas} replicas")
            }
            TierAdmitError::UnknownTier(tier) => write!(f, "{tier} is not configured"),
            TierAdmitError::NoReplicaUp => f.write_str("every replica is down"),
        }
    }
}

impl std::error::Error for TierAdmitError {}

/// A validated tiered configuration: parameters, the reference split used by repair, the
/// load signal it decides on and whether the recovery-tail drain is on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TieredPlb {
    params: PlbParams,
    reference: TierVector,
    signal: LoadSignal,
    drain: bool,
}

struct Choice {
    replica: ReplicaId,
    rule: TierRule,
    borrow: Option<TierChange>,
}

impl Choice {
    fn route(replica: ReplicaId, rule: TierRule) -> Choice {
        Choice {
            replica,
            rule,
            borrow: None,
        }
    }

    fn borrow(replica: ReplicaId, from: TierPool, by: Tier) -> Choice {
        let (rule, reason) = match from {
            TierPool::Mixed => (TierRule::BorrowMixed, TierReason::BorrowMixed),
            TierPool::Tier(donor) if by.outranks(donor) => {
                (TierRule::BorrowLower, TierReason::BorrowLower)
            }
            TierPool::Tier(_) => (TierRule::BorrowHigher, TierReason::BorrowHigher),
        };
        Choice {
            replica,
            rule,
            borrow: Some(TierChange {
                replica,
                from: from.role(),
                to: TierRole::Borrowed { by, from },
                reason,
            }),
        }
    }
}

/// The replica minimising `key`; ties go to the lowest index.
pub(crate) fn least_by<K: Ord>(
    table: &TierTable,
    loads: &[TierLoad],
    key: impl FnMut(TierRole, TierLoad) -> Option<K>,
) -> Option<ReplicaId> {
    crate::load_view::least_of(table.roles(), loads, key)
}

impl TieredPlb {
    /// Validates `params` against the initial table, which becomes the reference split.
    pub fn new(params: PlbParams, initial: &TierTable) -> Result<TieredPlb, TierParamError> {
        params.validate_tiers(initial)?;
        Ok(TieredPlb::validated(params, initial.vector()))
    }

    /// A configuration whose parameters were validated against a table of split `reference`.
    pub(crate) const fn validated(params: PlbParams, reference: TierVector) -> TieredPlb {
        TieredPlb {
            params,
            reference,
            signal: LoadSignal::Sessions,
            drain: false,
        }
    }

    /// The same policy with the recovery-tail drain on or off (see
    /// [`TieredPlb::drain_move`]): after a rejoin, sessions leave overloaded survivors between
    /// transactions, and repair gives a rejoined replica to the needier tier first.
    #[must_use]
    pub const fn with_recovery_drain(mut self, drain: bool) -> TieredPlb {
        self.drain = drain;
        self
    }

    /// Whether the recovery-tail drain is on.
    pub const fn recovery_drain(&self) -> bool {
        self.drain
    }

    /// The same policy deciding on `signal` (the caller passes the matching counts to
    /// [`TieredPlb::admit_loads`]).
    #[must_use]
    pub const fn with_load_signal(mut self, signal: LoadSignal) -> TieredPlb {
        self.signal = signal;
        self
    }

    /// What this policy decides on.
    pub const fn load_signal(&self) -> LoadSignal {
        self.signal
    }

    /// The validated parameters.
    pub const fn params(&self) -> &PlbParams {
        &self.params
    }

    /// The reference split of the full replica set.
    pub const fn reference(&self) -> TierVector {
        self.reference
    }

    /// Admission of one session of `tier`, preceded by returns, deciding on open sessions.
    /// Pure: `table` is not modified. O(K · tiers), no allocation.
    pub fn admit(
        &self,
        table: &TierTable,
        loads: &[TierLoad],
        tier: Tier,
    ) -> Result<TierAdmission, TierAdmitError> {
        self.admit_loads(table, Loads::sessions(loads), tier)
    }

    /// [`TieredPlb::admit`] on a chosen signal: `loads.signal` drives headroom, ranking and
    /// return pressure, `loads.sessions` the pinning guards (see [`crate::LoadSignal`]).
    pub fn admit_loads(
        &self,
        table: &TierTable,
        loads: Loads<'_, TierLoad>,
        tier: Tier,
    ) -> Result<TierAdmission, TierAdmitError> {
        check(table, loads)?;
        if tier.0 >= self.params.tiers {
            return Err(TierAdmitError::UnknownTier(tier));
        }
        let mut view = table.clone();
        let mut role_changes = empty_changes();
        plan_returns(&mut view, loads, &self.params, &mut role_changes);
        let signal = loads.signal;
        let choice = self
            .headroom(&view, signal, tier)
            .or_else(|| borrow_mixed(&view, signal, tier))
            .or_else(|| self.reclaim(&view, signal, tier))
            .or_else(|| self.borrow_lower(&view, signal, tier))
            .or_else(|| self.borrow_higher(&view, loads, tier))
            .or_else(|| fallback(&view, signal, tier))
            .or_else(|| last_resort(&view, signal))
            .ok_or(TierAdmitError::NoReplicaUp)?;
        if let Some(borrow) = choice.borrow {
            let pushed = role_changes.push(borrow);
            debug_assert!(pushed.is_ok(), "returns and one borrow fit in K + 1 slots");
        }
        Ok(TierAdmission {
            replica: choice.replica,
            rule: choice.rule,
            role_changes,
        })
    }

    /// Returns alone (000 §III-D "Return"), for callers that release capacity outside
    /// admissions (e.g. on a timer). Pure, O(K · tiers).
    pub fn returns(
        &self,
        table: &TierTable,
        loads: &[TierLoad],
    ) -> Result<TierChanges, TierAdmitError> {
        self.returns_loads(table, Loads::sessions(loads))
    }

    /// [`TieredPlb::returns`] on a chosen signal.
    pub fn returns_loads(
        &self,
        table: &TierTable,
        loads: Loads<'_, TierLoad>,
    ) -> Result<TierChanges, TierAdmitError> {
        check(table, loads)?;
        let mut view = table.clone();
        let mut changes = empty_changes();
        plan_returns(&mut view, loads, &self.params, &mut changes);
        Ok(changes)
    }

    fn headroom(&self, view: &TierTable, loads: &[TierLoad], tier: Tier) -> Option<Choice> {
        let theta = u64::from(self.params.theta(tier));
        let replica = least_by(view, loads, |role, load| {
            tier_load(role, load, tier).filter(|&l| l < theta)
        })?;
        Some(Choice::route(replica, TierRule::Headroom))
    }

    /// Step 2b (beyond the paper, with `reclaim`): a replica borrowed from Mixed by a tier
    /// `tier` outranks, the least important borrower first, whose total load is below
    /// `tier`'s best load; the least loaded. The borrower's sessions stay pinned there, as a
    /// donor's residual sessions do under every borrow.
    fn reclaim(&self, view: &TierTable, loads: &[TierLoad], tier: Tier) -> Option<Choice> {
        if !self.params.reclaim {
            return None;
        }
        let best = min_tier_load(view, loads, tier).unwrap_or(u64::MAX);
        self.params
            .all()
            .rev()
            .take_while(|&holder| tier.outranks(holder))
            .find_map(|holder| {
                let held = TierRole::Borrowed {
                    by: holder,
                    from: TierPool::Mixed,
                };
                let replica = least_by(view, loads, |role, load| {
                    (role == held && load.total() < best).then_some(load.total())
                })?;
                Some(Choice {
                    replica,
                    rule: TierRule::Reclaim,
                    borrow: Some(TierChange {
                        replica,
                        from: held,
                        to: TierRole::Borrowed {
                            by: tier,
                            from: TierPool::Mixed,
                        },
                        reason: TierReason::ReclaimMixed,
                    }),
                })
            })
    }

    /// Step 3: pools of tiers `tier` outranks, least important first, each only while it
    /// keeps κ; donors whose total load is below `tier`'s best load, those below their own
    /// tier's watermark first, then the least loaded.
    fn borrow_lower(&self, view: &TierTable, loads: &[TierLoad], tier: Tier) -> Option<Choice> {
        let best = min_tier_load(view, loads, tier).unwrap_or(u64::MAX);
        self.params
            .all()
            .rev()
            .take_while(|&donor| tier.outranks(donor))
            .find_map(|donor| {
                if view.owned(donor) < self.params.floor(donor) as usize + 1 {
                    return None;
                }
                let watermark = self.params.return_watermark(donor);
                let replica = least_by(view, loads, |role, load| {
                    let eligible = role == TierRole::Owned(donor) && load.total() < best;
                    eligible.then_some((load.of(donor) >= watermark, load.total()))
                })?;
                Some(Choice::borrow(replica, TierPool::Tier(donor), tier))
            })
    }

    /// Step 4: pools of tiers that outrank `tier`, nearest first, each only while it keeps K;
    /// donors with no session of any tier that outranks `tier`, the least loaded. "No
    /// session" counts pinned sessions whatever the signal: an idle session returns to its
    /// replica at its next transaction.
    fn borrow_higher(
        &self,
        view: &TierTable,
        loads: Loads<'_, TierLoad>,
        tier: Tier,
    ) -> Option<Choice> {
        Tier::all(tier.0).rev().find_map(|donor| {
            if view.owned(donor) < self.params.target(donor) as usize + 1 {
                return None;
            }
            let mut pinned = loads.sessions.iter();
            let replica = least_by(view, loads.signal, |role, load| {
                let empty = pinned.next().is_some_and(|s| s.above(tier) == 0);
                (role == TierRole::Owned(donor) && empty).then_some(load.total())
            })?;
            Some(Choice::borrow(replica, TierPool::Tier(donor), tier))
        })
    }
}

/// Both load slices have one entry per replica of `table`.
fn check(table: &TierTable, loads: Loads<'_, TierLoad>) -> Result<(), TierAdmitError> {
    match loads.miscounted(table.len()) {
        Some(count) => Err(TierAdmitError::LoadCount {
            replicas: table.len(),
            loads: count,
        }),
        None => Ok(()),
    }
}

/// Least load of `tier`'s routing pool.
fn min_tier_load(view: &TierTable, loads: &[TierLoad], tier: Tier) -> Option<u64> {
    view.roles()
        .iter()
        .zip(loads)
        .filter_map(|(&role, &load)| tier_load(role, load, tier))
        .min()
}

/// Step 2: Mixed replicas with the fewest sessions of tiers that outrank `tier` first, then
/// those without `tier`'s own sessions (spreading it over more replicas), then the least
/// other load. For the top tier the last key leaves its own sessions out, as the paper's
/// `select_M→P` does; for the bottom tier it is its own load, as `select_M→F` is.
fn borrow_mixed(view: &TierTable, loads: &[TierLoad], tier: Tier) -> Option<Choice> {
    let replica = least_by(view, loads, |role, load| {
        let own = u64::from(load.of(tier));
        let rest = load.below(tier) + if tier == Tier::TOP { 0 } else { own };
        (role == TierRole::Mixed).then_some((load.above(tier), own > 0, rest))
    })?;
    Some(Choice::borrow(replica, TierPool::Mixed, tier))
}

fn fallback(view: &TierTable, loads: &[TierLoad], tier: Tier) -> Option<Choice> {
    let replica = least_by(view, loads, |role, load| tier_load(role, load, tier))?;
    Some(Choice::route(replica, TierRule::Fallback))
}

fn last_resort(view: &TierTable, loads: &[TierLoad]) -> Option<Choice> {
    let replica = least_by(view, loads, |role, load| {
        role.is_up().then_some(load.total())
    })?;
    Some(Choice::route(replica, TierRule::LastResort))
}
