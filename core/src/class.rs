//! The service class as written in the configuration: a rank, most important first. The
//! routing crate owns the policy's own class types; core must not depend on it, so the proxy
//! maps this rank onto them.
//!
//! Two classes are the paper's premium (rank 0) and freemium (rank 1). A database routed
//! with `tiers = 3` or `4` also serves ranks 2 and 3, spelled `tier2` and `tier3`; every rank
//! also has the spelling `tierN`, so `tier0` is premium and `tier1` freemium.

use serde::{Deserialize, Deserializer};
use std::fmt;

/// Number of service classes (ranks) there can be; sizes per-class arrays in metrics.
pub const CLASS_COUNT: usize = 4;

/// A configured service class (`class = "premium"` / `"freemium"` / `"tier2"` / `"tier3"`).
/// A lower rank is more important.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClassSetting(u8);

impl ClassSetting {
    /// Rank 0, the paper's premium.
    pub const PREMIUM: ClassSetting = ClassSetting(0);
    /// Rank 1, the paper's freemium (the bottom rank of a two-class database).
    pub const FREEMIUM: ClassSetting = ClassSetting(1);

    /// Every class, in rank order.
    pub const ALL: [ClassSetting; CLASS_COUNT] = [
        ClassSetting(0),
        ClassSetting(1),
        ClassSetting(2),
        ClassSetting(3),
    ];

    /// The class of `rank`, if there is one.
    pub const fn from_rank(rank: u8) -> Option<ClassSetting> {
        if (rank as usize) < CLASS_COUNT {
            Some(ClassSetting(rank))
        } else {
            None
        }
    }

    /// The rank: 0 is the most important.
    pub const fn rank(self) -> u8 {
        self.0
    }

    /// Stable index for per-class arrays: the rank.
    pub const fn index(self) -> usize {
        self.0 as usize
    }

    /// The spelling used in the config file and in admin output.
    pub const fn as_str(self) -> &'static str {
        match self.0 {
            0 => "premium",
            1 => "freemium",
            2 => "tier2",
            _ => "tier3",
        }
    }

    /// Parses the config spelling; used for the `pgtier.class` startup option too.
    pub fn parse(text: &str) -> Option<ClassSetting> {
        match text {
            "premium" | "tier0" => Some(ClassSetting(0)),
            "freemium" | "tier1" => Some(ClassSetting(1)),
            "tier2" => Some(ClassSetting(2)),
            "tier3" => Some(ClassSetting(3)),
            _ => None,
        }
    }

    /// A client may lower its class, never raise it: it may ask for its own rank or a less
    /// important one.
    pub fn may_request(self, requested: ClassSetting) -> bool {
        requested.0 >= self.0
    }

    /// Premium and freemium are always reported; ranks 2 and 3 only once they served
    /// something, so a two-class deployment's output keeps its two rows.
    pub const fn always_reported(self) -> bool {
        self.0 < 2
    }
}

impl fmt::Display for ClassSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ClassSetting {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ClassSetting::parse(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown class {text:?}; expected premium, freemium, tier2 or tier3"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_matches_all_order() {
        for (position, class) in ClassSetting::ALL.iter().enumerate() {
            assert_eq!(class.index(), position);
            assert_eq!(ClassSetting::from_rank(class.rank()), Some(*class));
        }
        assert_eq!(ClassSetting::from_rank(4), None);
    }

    #[test]
    fn parse_round_trips_display() {
        for class in ClassSetting::ALL {
            assert_eq!(ClassSetting::parse(&class.to_string()), Some(class));
            assert_eq!(
                ClassSetting::parse(&format!("tier{}", class.rank())),
                Some(class)
            );
        }
        assert_eq!(ClassSetting::parse("gold"), None);
        assert_eq!(ClassSetting::parse("tier4"), None);
    }

    #[test]
    fn client_may_lower_but_not_raise_class() {
        assert!(ClassSetting::PREMIUM.may_request(ClassSetting::FREEMIUM));
        assert!(ClassSetting::PREMIUM.may_request(ClassSetting::PREMIUM));
        assert!(ClassSetting::FREEMIUM.may_request(ClassSetting::FREEMIUM));
        assert!(!ClassSetting::FREEMIUM.may_request(ClassSetting::PREMIUM));
        let tier2 = ClassSetting::ALL[2];
        assert!(ClassSetting::FREEMIUM.may_request(tier2));
        assert!(!tier2.may_request(ClassSetting::FREEMIUM));
    }
}
