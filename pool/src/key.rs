//! What makes two server connections interchangeable. A server may be reused by a client only
//! when it was opened for the same database entry, as the same server user, to the same replica,
//! with the same startup parameters that change server behaviour and that the proxy does not
//! re-apply per checkout. The key matches exactly; nothing is "close enough".
//!
//! Startup parameters split in three:
//! - `user` and `database` are key fields of their own.
//! - The tracked set ([`TRACKED_PARAMETERS`](crate::TRACKED_PARAMETERS): client_encoding,
//!   DateStyle, TimeZone, IntervalStyle, standard_conforming_strings, application_name, one
//!   list shared with the welcome cache) is re-applied by the proxy with SET when a client
//!   gets a server whose values differ, so it is left out of the key and servers are shared
//!   across clients that differ only there.
//! - Everything else (`options`, `replication`, `search_path`, `statement_timeout`, any GUC a
//!   client passes) is part of the key: the server was started with it, and it would otherwise
//!   leak to a client that never asked for it.
//!
//! Parameters the operator listed in `ignore_startup_parameters` are dropped by the caller
//! before the key is built (they are neither forwarded nor keyed).

use crate::welcome::is_tracked_parameter;
use std::net::SocketAddr;
use std::sync::Arc;

/// Whether `name` is a key field of its own rather than a profile parameter.
fn is_identity_parameter(name: &str) -> bool {
    name.eq_ignore_ascii_case("user") || name.eq_ignore_ascii_case("database")
}

/// The untracked startup parameters a server was opened with: names lower-cased, sorted by
/// name, values exactly as sent. Cheap to clone (shared).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StartupProfile {
    parameters: Arc<[(Box<str>, Box<str>)]>,
}

impl StartupProfile {
    /// The profile of a client's startup parameters: drops `user`, `database` and the tracked
    /// set; a later duplicate name replaces an earlier one, as in PostgreSQL.
    pub fn from_parameters<'a>(
        parameters: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> StartupProfile {
        StartupProfile::keeping(parameters, |name| !is_tracked_parameter(name))
    }

    /// The profile of a replication connection: every parameter but `user` and `database`,
    /// tracked ones too, since its server takes them at login and no SET afterwards.
    pub fn of_replication<'a>(
        parameters: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> StartupProfile {
        StartupProfile::keeping(parameters, |_| true)
    }

    fn keeping<'a>(
        parameters: impl IntoIterator<Item = (&'a str, &'a str)>,
        keep: impl Fn(&str) -> bool,
    ) -> StartupProfile {
        let mut kept: Vec<(Box<str>, Box<str>)> = Vec::new();
        for (name, value) in parameters {
            if is_identity_parameter(name) || !keep(name) {
                continue;
            }
            let name = name.to_ascii_lowercase().into_boxed_str();
            kept.retain(|(existing, _)| *existing != name);
            kept.push((name, value.into()));
        }
        kept.sort_by(|left, right| left.0.cmp(&right.0));
        StartupProfile {
            parameters: kept.into(),
        }
    }

    /// The parameters, sorted by (lower-case) name.
    pub fn parameters(&self) -> impl Iterator<Item = (&str, &str)> {
        self.parameters
            .iter()
            .map(|(name, value)| (name.as_ref(), value.as_ref()))
    }

    /// Whether this is the profile of a replication connection (only those keep the
    /// `replication` parameter: `replication=false` is dropped at login).
    pub fn is_replication(&self) -> bool {
        self.parameters().any(|(name, _)| name == "replication")
    }

    /// Whether there are no untracked parameters (the common case).
    pub fn is_empty(&self) -> bool {
        self.parameters.is_empty()
    }
}

/// Which server of a database entry.
///
/// A replica is keyed by its address alone, not by its index in the entry's replica list:
/// the address is what makes two servers interchangeable, and a reload that reorders or
/// extends the list must not split (or, worse, merge) pools of unchanged replicas. The engine
/// knows the router's replica id of a session from the session's replica lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerTarget {
    /// The entry's single `host`.
    Primary,
    /// One replica of the entry's replica set.
    Replica(SocketAddr),
}

/// The exact-match key of a pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The database entry name clients connect to.
    pub database: Arc<str>,
    /// The user the server connection logs in as.
    pub server_user: Arc<str>,
    /// Which server.
    pub target: ServerTarget,
    /// Untracked startup parameters.
    pub profile: StartupProfile,
}

impl PoolKey {
    /// A key from its parts.
    pub fn new(
        database: Arc<str>,
        server_user: Arc<str>,
        target: ServerTarget,
        profile: StartupProfile,
    ) -> PoolKey {
        PoolKey {
            database,
            server_user,
            target,
            profile,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracked_and_identity_parameters_are_not_keyed() {
        let profile = StartupProfile::from_parameters([
            ("user", "alice"),
            ("database", "postgres"),
            ("DateStyle", "ISO, MDY"),
            ("application_name", "psql"),
            ("client_encoding", "UTF8"),
        ]);
        assert!(profile.is_empty());
    }

    #[test]
    fn untracked_parameters_are_keyed_sorted_and_lower_cased() {
        let profile = StartupProfile::from_parameters([
            ("statement_timeout", "5s"),
            ("options", "-c search_path=x"),
            ("Search_Path", "public"),
        ]);
        let names: Vec<_> = profile.parameters().map(|(name, _)| name).collect();
        assert_eq!(names, ["options", "search_path", "statement_timeout"]);
    }

    #[test]
    fn parameter_order_does_not_change_the_key() {
        let left = StartupProfile::from_parameters([("a", "1"), ("b", "2")]);
        let right = StartupProfile::from_parameters([("b", "2"), ("a", "1")]);
        assert_eq!(left, right);
    }

    #[test]
    fn different_values_make_different_keys() {
        let make = |timeout| {
            PoolKey::new(
                "db".into(),
                "alice".into(),
                ServerTarget::Primary,
                StartupProfile::from_parameters([("statement_timeout", timeout)]),
            )
        };
        assert_ne!(make("1s"), make("2s"));
        assert_eq!(make("1s"), make("1s"));
    }

    #[test]
    fn later_duplicate_replaces_earlier() {
        let profile = StartupProfile::from_parameters([("work_mem", "1MB"), ("WORK_MEM", "2MB")]);
        let parameters: Vec<_> = profile.parameters().collect();
        assert_eq!(parameters, [("work_mem", "2MB")]);
    }
}
