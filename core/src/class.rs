//! The service class as written in the configuration. The routing crate owns the real
//! `ServiceClass`; core must not depend on it, so the proxy maps this enum onto it.

use serde::Deserialize;
use std::fmt;

/// Number of service classes; sizes per-class arrays in metrics.
pub const CLASS_COUNT: usize = 2;

/// A configured service class (`class = "premium"` / `"freemium"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClassSetting {
    Premium,
    Freemium,
}

impl ClassSetting {
    /// Both classes, in index order.
    pub const ALL: [ClassSetting; CLASS_COUNT] = [ClassSetting::Premium, ClassSetting::Freemium];

    /// Stable index for per-class arrays: Premium = 0, Freemium = 1.
    pub const fn index(self) -> usize {
        match self {
            ClassSetting::Premium => 0,
            ClassSetting::Freemium => 1,
        }
    }

    /// The spelling used in the config file and in admin output.
    pub const fn as_str(self) -> &'static str {
        match self {
            ClassSetting::Premium => "premium",
            ClassSetting::Freemium => "freemium",
        }
    }

    /// Parses the config spelling; used for the `pgtier.class` startup option.
    pub fn parse(text: &str) -> Option<ClassSetting> {
        match text {
            "premium" => Some(ClassSetting::Premium),
            "freemium" => Some(ClassSetting::Freemium),
            _ => None,
        }
    }

    /// A client may lower its class, never raise it: Premium may become Freemium only.
    pub fn may_request(self, requested: ClassSetting) -> bool {
        self == requested || requested == ClassSetting::Freemium
    }
}

impl fmt::Display for ClassSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_matches_all_order() {
        for (position, class) in ClassSetting::ALL.iter().enumerate() {
            assert_eq!(class.index(), position);
        }
    }

    #[test]
    fn parse_round_trips_display() {
        for class in ClassSetting::ALL {
            assert_eq!(ClassSetting::parse(&class.to_string()), Some(class));
        }
        assert_eq!(ClassSetting::parse("gold"), None);
    }

    #[test]
    fn client_may_lower_but_not_raise_class() {
        assert!(ClassSetting::Premium.may_request(ClassSetting::Freemium));
        assert!(ClassSetting::Premium.may_request(ClassSetting::Premium));
        assert!(ClassSetting::Freemium.may_request(ClassSetting::Freemium));
        assert!(!ClassSetting::Freemium.may_request(ClassSetting::Premium));
    }
}
