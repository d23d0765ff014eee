//! The `options` startup parameter of an ordinary login, read as PgBouncer reads it: only
//! `-c name=value` and `--name=value` settings; a tracked parameter (`DateStyle`,
//! `TimeZone`...) joins the client's tracked values, so its pool is shared and the value is
//! re-applied with SET like a top-level one; a setting `ignore_startup_parameters` names (or
//! any untracked one, when it names `options`) is dropped; a setting
//! `track_extra_parameters` names, or any other when `forward_startup_options` is on, goes
//! into the server's startup packet (its pool keyed by it: pgtier does not re-apply these
//! with SET); any other setting is refused, as PgBouncer refuses it. pgtier's own `pgtier.class` is kept for the
//! replica routing, which consumes it.

use pgtier_pool::tracked_index;
use pgtier_wire::startup_options::{StartupOption, escape_option as escape, parse_options};

use crate::class::{CLASS_OPTION, MAX_OPTION_ARGUMENTS};

/// PgBouncer's refusal of anything but settings in `options`.
pub(crate) const ONLY_SETTINGS: &str =
    "unsupported options startup parameter: only '-c config=val' and '--config=val' are allowed";

/// What an ordinary login's `options` comes to.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LoginOptions {
    /// Tracked settings, in order (a later one wins).
    pub tracked: Vec<(String, String)>,
    /// What is left for the server's startup packet, re-escaped; `None` when nothing is.
    pub forwarded: Option<String>,
}

/// How untracked settings are treated.
pub(crate) struct OptionsPolicy<'a> {
    /// Whether `ignore_startup_parameters` names this setting (or `options`).
    pub ignored: &'a dyn Fn(&str) -> bool,
    /// Whether `track_extra_parameters` names this setting.
    pub extra: &'a dyn Fn(&str) -> bool,
    /// `forward_startup_options`: untracked settings go to the server instead of being refused.
    pub forward_untracked: bool,
}

/// Reads `options`; `Err` is the message of the FATAL that refuses the login.
pub(crate) fn read_login_options(
    options: &str,
    policy: &OptionsPolicy<'_>,
) -> Result<LoginOptions, String> {
    let parsed =
        parse_options(options, MAX_OPTION_ARGUMENTS).map_err(|_| ONLY_SETTINGS.to_string())?;
    let mut read = LoginOptions::default();
    let mut kept = Vec::new();
    for option in parsed {
        let (name, value) = match option {
            StartupOption::Setting { name, value } => (name, value),
            StartupOption::Other(_) => return Err(ONLY_SETTINGS.to_string()),
        };
        if tracked_index(&name).is_some() {
            read.tracked.push((name, value));
        } else if name.eq_ignore_ascii_case(CLASS_OPTION)
            || policy.forward_untracked
            || (policy.extra)(&name)
        {
            kept.push(format!("-c {}", escape(&format!("{name}={value}"))));
        } else if !(policy.ignored)(&name) {
            return Err(format!("unsupported startup parameter in options: {name}"));
        }
    }
    read.forwarded = (!kept.is_empty()).then(|| kept.join(" "));
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(options: &str, ignore: &[&str], forward: bool) -> Result<LoginOptions, String> {
        let ignored = |name: &str| {
            ignore
                .iter()
                .any(|i| i.eq_ignore_ascii_case(name) || i.eq_ignore_ascii_case("options"))
        };
        let extra = |name: &str| name.eq_ignore_ascii_case("search_path");
        read_login_options(
            options,
            &OptionsPolicy {
                ignored: &ignored,
                extra: &extra,
                forward_untracked: forward,
            },
        )
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tracked_settings_are_taken_in_every_spelling() {
        let read_fn = read;
        let read = read(
            "-c timezone=Europe/Lisbon  -c    datestyle=German,\\ YMD --application-name=x",
            &[],
            false,
        )
        .unwrap();
        assert_eq!(
            read.tracked,
            pairs(&[
                ("timezone", "Europe/Lisbon"),
                ("datestyle", "German, YMD"),
                ("application_name", "x")
            ])
        );
        assert_eq!(read.forwarded, None);
        let escaped = read_fn("-c t\\imezone=\\E\\u\\r\\o\\pe/Lisbon", &[], false).unwrap();
        assert_eq!(escaped.tracked, pairs(&[("timezone", "Europe/Lisbon")]));
    }

    #[test]
    fn ignored_settings_are_dropped_however_long() {
        let long = "1".repeat(10_000);
        let read = read(
            &format!("-c extra_float_digits={long} -c timezone=UTC"),
            &["extra_float_digits"],
            false,
        )
        .unwrap();
        assert_eq!(read.tracked, pairs(&[("timezone", "UTC")]));
        assert_eq!(read.forwarded, None);
    }

    #[test]
    fn untracked_settings_are_refused_unless_ignored_or_forwarded() {
        assert_eq!(
            read("-c enable_seqscan=false", &[], false),
            Err("unsupported startup parameter in options: enable_seqscan".to_string())
        );
        assert_eq!(
            read("-c enable_seqscan=false", &["options"], false),
            Ok(LoginOptions::default())
        );
        let forwarded = read("-c enable_seqscan=false -c search_path=a\\ b", &[], true).unwrap();
        assert_eq!(
            forwarded.forwarded.as_deref(),
            Some("-c enable_seqscan=false -c search_path=a\\ b")
        );
    }

    #[test]
    fn extra_tracked_settings_are_forwarded() {
        let read = read(
            "-c SEARCH_PATH=malicious,public -c timezone=UTC",
            &[],
            false,
        )
        .unwrap();
        assert_eq!(read.tracked, pairs(&[("timezone", "UTC")]));
        assert_eq!(
            read.forwarded.as_deref(),
            Some("-c SEARCH_PATH=malicious,public")
        );
    }

    #[test]
    fn anything_but_settings_is_refused() {
        for options in ["-d", "-c timezone", "-d 5 -c timezone=UTC", "--timezone"] {
            assert_eq!(
                read(options, &[], true),
                Err(ONLY_SETTINGS.to_string()),
                "{options}"
            );
        }
    }

    #[test]
    fn the_class_setting_is_kept_for_the_routing() {
        let read = read("-c pgtier.class=freemium -c timezone=UTC", &[], false).unwrap();
        assert_eq!(read.forwarded.as_deref(), Some("-c pgtier.class=freemium"));
    }
}
