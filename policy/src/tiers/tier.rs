//! The ordered service classes of tiered PLB and the per-replica session counts by class.
//!
//! A [`Tier`] is a rank: tier 0 is the most important class, a larger number is less
//! important. Ranks, not names, carry the policy, so that "more important than" is a
//! comparison and every rule of the two-class paper reads the same for any pair of tiers.

use core::fmt;

/// Most classes a tiered table can hold. Small, so loads and parameters stay inline arrays.
pub const MAX_TIERS: usize = 4;

/// A service class by rank: `Tier(0)` is the most important.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tier(pub u8);

impl Tier {
    /// The most important class.
    pub const TOP: Tier = Tier(0);

    /// Index into per-tier arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// True when `self` outranks `other` (is more important).
    pub const fn outranks(self, other: Tier) -> bool {
        self.0 < other.0
    }

    /// The tiers `0..count`, most important first.
    pub fn all(count: u8) -> impl DoubleEndedIterator<Item = Tier> + Clone {
        (0..count).map(Tier)
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "tier{}", self.0)
    }
}

/// Active sessions of each tier on one replica (`load_t(r)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TierLoad {
    /// Sessions per tier, indexed by [`Tier::index`]; entries past the table's tier count
    /// stay zero.
    pub sessions: [u32; MAX_TIERS],
}

impl TierLoad {
    /// Load of one tier; zero for a tier outside `0..MAX_TIERS`.
    pub fn of(self, tier: Tier) -> u32 {
        self.sessions.get(tier.index()).copied().unwrap_or(0)
    }

    /// Total load, widened so it cannot overflow.
    pub fn total(self) -> u64 {
        self.sessions.iter().map(|&n| u64::from(n)).sum()
    }

    /// Sessions of tiers that outrank `tier`.
    pub fn above(self, tier: Tier) -> u64 {
        self.sessions
            .iter()
            .take(tier.index())
            .map(|&n| u64::from(n))
            .sum()
    }

    /// Sessions of tiers that `tier` outranks.
    pub fn below(self, tier: Tier) -> u64 {
        self.sessions
            .iter()
            .skip(tier.index() + 1)
            .map(|&n| u64::from(n))
            .sum()
    }

    /// Number of tiers with at least one session here.
    pub(crate) fn tiers_present(self) -> usize {
        self.sessions.iter().filter(|&&n| n > 0).count()
    }

    /// The only tier with sessions here, if exactly one has any.
    pub(crate) fn single_tier(self) -> Option<Tier> {
        let mut present = self
            .sessions
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, _)| i);
        let first = present.next()?;
        if present.next().is_some() {
            return None;
        }
        u8::try_from(first).ok().map(Tier)
    }

    /// Counts one more session of `tier`; false (and no change) on overflow or an unknown tier.
    pub fn admitted(&mut self, tier: Tier) -> bool {
        match self.sessions.get_mut(tier.index()) {
            Some(n) => match n.checked_add(1) {
                Some(next) => {
                    *n = next;
                    true
                }
                None => false,
            },
            None => false,
        }
    }

    /// Counts one session of `tier` fewer; false (and no change) when it has none.
    pub fn released(&mut self, tier: Tier) -> bool {
        match self.sessions.get_mut(tier.index()) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    }
}

impl From<crate::ReplicaLoad> for TierLoad {
    /// The two-class load: premium is tier 0, freemium tier 1.
    fn from(load: crate::ReplicaLoad) -> TierLoad {
        let mut sessions = [0; MAX_TIERS];
        sessions[0] = load.premium;
        sessions[1] = load.freemium;
        TierLoad { sessions }
    }
}

impl From<crate::ServiceClass> for Tier {
    /// The two-class vocabulary as ranks: premium is tier 0, freemium tier 1.
    fn from(class: crate::ServiceClass) -> Tier {
        match class {
            crate::ServiceClass::Premium => Tier(0),
            crate::ServiceClass::Freemium => Tier(1),
        }
    }
}

impl Tier {
    /// The two-class class that serves this rank: tier 0 is premium, every rank below it is
    /// served as freemium (a two-class table has no lower pool to give it).
    pub const fn two_class(self) -> crate::ServiceClass {
        if self.0 == 0 {
            crate::ServiceClass::Premium
        } else {
            crate::ServiceClass::Freemium
        }
    }
}
