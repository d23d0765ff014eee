//! The service class of a session, decided once at login.
//!
//! The class comes from trusted configuration (the user's `[users.NAME] class`, else the
//! database entry's class, which is how an alias such as `analytics_premium` works). A client
//! may ask for a *lower* class with the startup option `-c pgtier.class=freemium` (or a rank
//! below it, `tier2`, `tier3`); asking for a higher one is refused, so a class can never be
//! raised by something the client sends.

use core::fmt;

use pgtier_core::class::ClassSetting;
use pgtier_core::config::{Config, DatabaseConfig};
use pgtier_policy::tiers::Tier;
use pgtier_wire::startup_options::{StartupOption, escape_option as escape, parse_options};

/// The setting name clients use in `options` (matched ASCII case-insensitively, as
/// PostgreSQL matches setting names).
pub(crate) const CLASS_OPTION: &str = "pgtier.class";

/// Why a client's class request was refused. The session answers with an ErrorResponse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClassRequestError {
    /// The value is no class name (SQLSTATE 22023).
    UnknownClass(String),
    /// `options` itself is malformed (SQLSTATE 08P01, as PostgreSQL reports it).
    MalformedOptions(String),
    /// The client asked for a class above its configured one (SQLSTATE 42501).
    RaiseRefused {
        /// Class from the configuration.
        configured: ClassSetting,
        /// Class the client asked for.
        requested: ClassSetting,
    },
}

impl ClassRequestError {
    /// SQLSTATE for the ErrorResponse: invalid_parameter_value or insufficient_privilege.
    pub const fn sqlstate(&self) -> &'static str {
        match self {
            ClassRequestError::UnknownClass(_) => "22023",
            ClassRequestError::MalformedOptions(_) => "08P01",
            ClassRequestError::RaiseRefused { .. } => "42501",
        }
    }
}

impl fmt::Display for ClassRequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassRequestError::UnknownClass(value) => write!(
                f,
                "invalid value for parameter \"{CLASS_OPTION}\": \"{value}\" (expected premium, freemium, tier2 or tier3)"
            ),
            ClassRequestError::MalformedOptions(reason) => {
                write!(f, "invalid startup option \"options\": {reason}")
            }
            ClassRequestError::RaiseRefused {
                configured,
                requested,
            } => write!(
                f,
                "permission denied to set parameter \"{CLASS_OPTION}\" to {requested}: \
                 this session's class is {configured}, and a class can only be lowered"
            ),
        }
    }
}

impl std::error::Error for ClassRequestError {}

/// The policy's rank for a configured class.
pub const fn tier(setting: ClassSetting) -> Tier {
    Tier(setting.rank())
}

/// The class of a session of `user` on `database`: configured class, lowered by the
/// `pgtier.class` startup option when present. `startup_options` is the raw `options`
/// startup parameter.
pub fn session_class(
    config: &Config,
    database: &DatabaseConfig,
    user: &str,
    startup_options: Option<&str>,
) -> Result<ClassSetting, ClassRequestError> {
    let configured = config.class(database, user);
    let requested = match startup_options {
        Some(options) => requested_class(options)?,
        None => None,
    };
    apply_request(configured, requested)
}

/// The lane a session of `setting` waits in for a server (`waiter_policy`). The pool has two
/// lanes: premium's, and the aged lane every other rank shares.
pub const fn wait_class(setting: ClassSetting) -> pgtier_pool::WaitClass {
    if setting.rank() == 0 {
        pgtier_pool::WaitClass::Premium
    } else {
        pgtier_pool::WaitClass::Freemium
    }
}

/// Lowers `configured` to `requested` if asked; refuses a raise.
pub(crate) fn apply_request(
    configured: ClassSetting,
    requested: Option<ClassSetting>,
) -> Result<ClassSetting, ClassRequestError> {
    match requested {
        None => Ok(configured),
        Some(requested) if configured.may_request(requested) => Ok(requested),
        Some(requested) => Err(ClassRequestError::RaiseRefused {
            configured,
            requested,
        }),
    }
}

/// Most arguments read from a client's `options` (PostgreSQL has no limit; a client is
/// untrusted, and no real client sends more than a handful).
pub(crate) const MAX_OPTION_ARGUMENTS: usize = 256;

/// The class requested in a startup `options` string, if any, split as PostgreSQL splits it
/// (see `pgtier_wire::startup_options`); the last setting wins.
pub(crate) fn requested_class(options: &str) -> Result<Option<ClassSetting>, ClassRequestError> {
    let parsed = parse_options(options, MAX_OPTION_ARGUMENTS)
        .map_err(|error| ClassRequestError::MalformedOptions(error.to_string()))?;
    requested_class_in(&parsed)
}

/// [`requested_class`] over options the session already parsed.
pub(crate) fn requested_class_in(
    options: &[StartupOption],
) -> Result<Option<ClassSetting>, ClassRequestError> {
    let value = options.iter().rev().find_map(|option| match option {
        StartupOption::Setting { name, value } if name.eq_ignore_ascii_case(CLASS_OPTION) => {
            Some(value)
        }
        _ => None,
    });
    match value {
        None => Ok(None),
        Some(value) => ClassSetting::parse(&value.to_ascii_lowercase())
            .map(Some)
            .ok_or_else(|| ClassRequestError::UnknownClass(value.clone())),
    }
}

/// `options` without `pgtier.class` settings, re-escaped as PostgreSQL splits them (returned
/// as is when it has none); `None` when nothing is left. pgtier consumes the setting: PostgreSQL would accept it as a
/// placeholder GUC, but forwarding it would split one pool per requested class for nothing.
pub(crate) fn strip_class_option(options: &str) -> Option<String> {
    let Ok(parsed) = parse_options(options, MAX_OPTION_ARGUMENTS) else {
        return Some(options.to_string());
    };
    let mut kept = Vec::new();
    let mut consumed = false;
    for option in parsed {
        match option {
            StartupOption::Setting { name, .. } if name.eq_ignore_ascii_case(CLASS_OPTION) => {
                consumed = true;
            }
            StartupOption::Setting { name, value } => {
                kept.push(format!("-c {}", escape(&format!("{name}={value}"))));
            }
            StartupOption::Other(arg) => kept.push(escape(&arg)),
        }
    }
    if !consumed {
        // Untouched, so equal options keep sharing one pool key however they were spelled.
        return Some(options.to_string());
    }
    (!kept.is_empty()).then(|| kept.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: ClassSetting = ClassSetting::PREMIUM;
    const F: ClassSetting = ClassSetting::FREEMIUM;
    const T2: ClassSetting = ClassSetting::ALL[2];

    #[test]
    fn the_class_option_is_consumed_and_others_kept() {
        assert_eq!(strip_class_option("-c pgtier.class=freemium"), None);
        assert_eq!(
            strip_class_option("-c search_path=a\\ b --pgtier.class=freemium -c work_mem=64kB"),
            Some("-c search_path=a\\ b -c work_mem=64kB".to_string())
        );
        assert_eq!(strip_class_option("-cPGTIER.CLASS=premium"), None);
        assert_eq!(
            strip_class_option("--work-mem=64kB"),
            Some("--work-mem=64kB".to_string())
        );
    }

    #[test]
    fn every_option_spelling_is_understood() {
        for options in [
            "-c pgtier.class=freemium",
            "-cpgtier.class=freemium",
            "--pgtier.class=freemium",
            "-c statement_timeout=5 -c PGTIER.CLASS=Freemium",
        ] {
            assert_eq!(requested_class(options), Ok(Some(F)), "{options}");
        }
    }

    #[test]
    fn other_options_request_nothing() {
        assert_eq!(requested_class("-c search_path=a\\ b"), Ok(None));
        assert_eq!(requested_class(""), Ok(None));
        let error = requested_class("-c").expect_err("-c needs a value");
        assert_eq!(error.sqlstate(), "08P01");
    }

    #[test]
    fn last_request_wins() {
        let options = "-c pgtier.class=premium -c pgtier.class=freemium";
        assert_eq!(requested_class(options), Ok(Some(F)));
    }

    #[test]
    fn unknown_class_value_is_refused() {
        let error = requested_class("-c pgtier.class=gold").expect_err("gold");
        assert_eq!(error.sqlstate(), "22023");
    }

    #[test]
    fn premium_may_lower_to_freemium() {
        assert_eq!(apply_request(P, Some(F)), Ok(F));
        assert_eq!(apply_request(P, None), Ok(P));
        assert_eq!(apply_request(F, Some(F)), Ok(F));
    }

    #[test]
    fn freemium_may_not_raise_to_premium() {
        let error = apply_request(F, Some(P)).expect_err("raise");
        assert_eq!(error.sqlstate(), "42501");
    }

    #[test]
    fn a_rank_may_be_lowered_past_freemium_but_not_raised() {
        assert_eq!(requested_class("-c pgtier.class=tier2"), Ok(Some(T2)));
        assert_eq!(apply_request(F, Some(T2)), Ok(T2));
        assert_eq!(apply_request(P, Some(T2)), Ok(T2));
        let error = apply_request(T2, Some(F)).expect_err("raise");
        assert_eq!(error.sqlstate(), "42501");
        assert_eq!(wait_class(T2), pgtier_pool::WaitClass::Freemium);
    }

    #[test]
    fn configured_user_class_wins_over_entry_class() {
        let text = r#"
            [pgtier]
            auth_type = "trust"
            [databases.analytics]
            host = "127.0.0.1"
            class = "freemium"
            [users.alice]
            class = "premium"
        "#;
        let config = Config::from_str(text, "/tmp/pgtier-class-test.toml").expect("config");
        let database = config.database("analytics").expect("entry");
        assert_eq!(session_class(&config, database, "alice", None), Ok(P));
        assert_eq!(session_class(&config, database, "bob", None), Ok(F));
        assert_eq!(
            session_class(&config, database, "alice", Some("-c pgtier.class=freemium")),
            Ok(F)
        );
        assert!(session_class(&config, database, "bob", Some("--pgtier.class=premium")).is_err());
    }
}
