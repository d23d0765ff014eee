//! A simulated session's service class, by rank.

/// A session's service class, by rank: 0 is the most important. The papers' two classes are
/// [`Class::PREMIUM`] and [`Class::FREEMIUM`]; tiered runs use up to [`Class::MAX`] ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Class(pub u8);

impl Class {
    /// The protected class (rank 0).
    pub const PREMIUM: Class = Class(0);
    /// The best-effort class of two-class runs (rank 1).
    pub const FREEMIUM: Class = Class(1);
    /// Both classes of the papers, premium first (index order of per-class arrays).
    pub const ALL: [Class; 2] = [Class::PREMIUM, Class::FREEMIUM];
    /// Most classes a run can have (the tiered policy's limit); sizes per-class arrays.
    pub const MAX: usize = pgtier_policy::tiers::MAX_TIERS;

    /// Index into per-class arrays.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// Lower-case name for CSV and logs: the papers' names for ranks 0 and 1, `tierN` after.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "premium",
            1 => "freemium",
            2 => "tier2",
            _ => "tier3",
        }
    }

    /// The first `n` ranks, most important first (at most [`Class::MAX`]).
    pub fn ranks(n: usize) -> impl Iterator<Item = Class> {
        // MAX is far below 256, so every rank fits the u8.
        (0..n.min(Class::MAX)).map(|rank| Class(rank as u8))
    }

    /// The class called `name` by [`Class::name`], among the [`Class::MAX`] ranks.
    pub fn from_name(name: &str) -> Option<Class> {
        Class::ranks(Class::MAX).find(|class| class.name() == name)
    }
}
