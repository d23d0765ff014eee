//! The session parameters pgtier keeps in step between a client and whichever server it is
//! given (PgBouncer's tracked set), and what a pool remembers of its servers' logins so a new
//! client can be welcomed without a server round trip: the first login's ParameterStatus set
//! ([`Welcome`]) and what servers made of clients' spellings ([`Spellings`]).
//!
//! The tracked set is also what [`StartupProfile`](crate::StartupProfile) leaves out of a
//! pool's key: a server is shared by clients that differ only there, because the proxy
//! re-applies these with SET when a client gets a server whose values differ.

use std::collections::HashMap;
use std::sync::Arc;

/// The tracked parameters, in PostgreSQL's spelling (used as is in the SETs the proxy
/// writes). Names are compared case-insensitively, as PostgreSQL does.
pub(crate) const TRACKED_PARAMETERS: [&str; 6] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
    "application_name",
];

/// Position of `standard_conforming_strings` in [`TRACKED_PARAMETERS`].
const STANDARD_CONFORMING_STRINGS: usize = 4;

/// Index of `name` in [`TRACKED_PARAMETERS`] (case-insensitive).
pub fn tracked_index(name: &str) -> Option<usize> {
    TRACKED_PARAMETERS
        .iter()
        .position(|tracked| tracked.eq_ignore_ascii_case(name))
}

/// Whether `name` is in [`TRACKED_PARAMETERS`] (case-insensitive).
pub(crate) fn is_tracked_parameter(name: &str) -> bool {
    tracked_index(name).is_some()
}

/// Client spellings a pool remembers unless `max_spellings_per_pool` says otherwise: past
/// the limit, logins with new spellings still get the server's own values, through a server
/// round trip each.
pub(crate) const MAX_SPELLINGS_PER_POOL: usize = 256;

/// What a pool's first server login reported, replayed to clients that join the pool.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Welcome {
    /// Every ParameterStatus of the first server login of this pool, in order.
    pub params: Vec<(String, String)>,
    /// Its tracked subset.
    pub tracked: TrackedParams,
}

impl Welcome {
    /// The welcome of a login that reported `params`.
    pub(crate) fn from_params(params: &[(String, String)]) -> Welcome {
        let mut tracked = TrackedParams::default();
        for (name, value) in params {
            tracked.set(name, value);
        }
        Welcome {
            params: params.to_vec(),
            tracked,
        }
    }
}

type SpellingMap = HashMap<Box<str>, Box<str>, ahash::RandomState>;

/// What a pool's server made of values clients spelled at startup (`utf8` became `UTF8`,
/// `iso, dmy` became `ISO, DMY`), so a later login with the same spelling is welcomed from
/// the pool's cached parameters with the server's own values and no server round trip.
/// One map per tracked parameter, so a lookup borrows the client's spelling instead of
/// copying it.
#[derive(Debug)]
pub struct Spellings {
    /// Per index of [`TRACKED_PARAMETERS`]: client spelling -> the server's.
    learned: [SpellingMap; 6],
    /// Spellings held over all parameters.
    len: usize,
    /// Most spellings kept (`max_spellings_per_pool`).
    pub limit: usize,
}

impl Default for Spellings {
    fn default() -> Spellings {
        Spellings::with_limit(MAX_SPELLINGS_PER_POOL)
    }
}

impl Spellings {
    /// No spellings yet; at most `limit` will be kept.
    pub(crate) fn with_limit(limit: usize) -> Spellings {
        Spellings {
            learned: std::array::from_fn(|_| SpellingMap::default()),
            len: 0,
            limit,
        }
    }

    /// Remembers that the server shows `spelled` (a value of parameter `index`) as
    /// `canonical`, while there is room (a known spelling is updated even when full).
    pub fn learn(&mut self, index: usize, spelled: &str, canonical: &str) {
        let full = self.len >= self.limit;
        let Some(map) = self.learned.get_mut(index) else {
            return;
        };
        if let Some(known) = map.get_mut(spelled) {
            *known = canonical.into();
            return;
        }
        if full {
            return;
        }
        map.insert(spelled.into(), canonical.into());
        self.len += 1;
    }

    /// Spellings held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no spelling is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn canonical(&self, index: usize, spelled: &str) -> Option<&str> {
        self.learned.get(index)?.get(spelled).map(AsRef::as_ref)
    }
}

/// Values of the tracked parameters; `None` = never reported. Values are shared (`Arc`):
/// every client of a pool starts from the same server values, and copying a client's
/// parameters from a server's, as each welcome and link does, allocates nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackedParams {
    values: [Option<Arc<str>>; 6],
}

impl TrackedParams {
    /// Records `value` for `name` if it is tracked; returns whether it was.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        let Some(index) = tracked_index(name) else {
            return false;
        };
        match &mut self.values[index] {
            Some(current) if &**current == value => {}
            slot => *slot = Some(value.into()),
        }
        true
    }

    /// The value of parameter `index` of [`TRACKED_PARAMETERS`], if reported.
    pub fn get(&self, index: usize) -> Option<&str> {
        self.values.get(index)?.as_deref()
    }

    /// Whether plain string literals are standard-conforming (backslash is an ordinary
    /// character): the server default unless the session reported `off`.
    pub fn standard_conforming_strings(&self) -> bool {
        self.values[STANDARD_CONFORMING_STRINGS].as_deref() != Some("off")
    }

    /// Fills values this set lacks from `defaults`.
    pub fn fill_from(&mut self, defaults: &TrackedParams) {
        for (mine, theirs) in self.values.iter_mut().zip(&defaults.values) {
            if mine.is_none() {
                mine.clone_from(theirs);
            }
        }
    }

    /// Replaces each value (a client's startup spelling) with the server's own: the pool's
    /// default when equal to it, else what `spellings` learned. Returns false, changing
    /// nothing, when some spelling is unknown (the login must ask a server).
    pub fn canonicalize(&mut self, defaults: &TrackedParams, spellings: &Spellings) -> bool {
        let mut canonical = self.values.clone();
        for (index, value) in canonical.iter_mut().enumerate() {
            let Some(spelled) = value.as_deref() else {
                continue;
            };
            if defaults.get(index) == Some(spelled) {
                continue;
            }
            match spellings.canonical(index, spelled) {
                Some(known) => *value = Some(known.into()),
                None => return false,
            }
        }
        self.values = canonical;
        true
    }

    /// Appends to `sql` what a login applies on a server (`self` = the client's startup
    /// values): each value the server does not already show is set on top of the session
    /// default, as PostgreSQL applies startup values (`DateStyle = 'dmy'` keeps the default
    /// output format); every other tracked parameter a previous client changed is reset.
    /// Returns whether anything was needed.
    pub fn write_login_sets(
        &self,
        defaults: &TrackedParams,
        server: &TrackedParams,
        sql: &mut String,
    ) -> bool {
        let mut any = false;
        for (index, wanted) in self.values.iter().enumerate() {
            let shown = server.values[index].as_deref();
            let name = TRACKED_PARAMETERS[index];
            match wanted {
                Some(wanted) if shown == Some(&**wanted) => continue,
                None if shown == defaults.get(index) => continue,
                Some(wanted) => {
                    sql.push_str("RESET ");
                    sql.push_str(name);
                    sql.push_str("; ");
                    push_set(sql, name, wanted);
                }
                None => {
                    sql.push_str("RESET ");
                    sql.push_str(name);
                    sql.push(';');
                }
            }
            any = true;
        }
        any
    }

    /// Records in `spellings` what the server (now showing `server`) made of each of the
    /// client's startup values in `self`.
    pub fn learn_spellings(&self, server: &TrackedParams, spellings: &mut Spellings) {
        for (index, spelled) in self.values.iter().enumerate() {
            if let (Some(spelled), Some(canonical)) = (spelled, server.get(index)) {
                spellings.learn(index, spelled, canonical);
            }
        }
    }

    /// Appends to `sql` the SETs that make a server with `server` values match `self`.
    /// Returns whether anything was needed. A value found equal by its text is shared from
    /// then on, so the next link of the two finds it by pointer: this runs at every
    /// transaction's link.
    pub fn write_differences(&self, server: &mut TrackedParams, sql: &mut String) -> bool {
        let mut any = false;
        for (index, wanted) in self.values.iter().enumerate() {
            let Some(wanted) = wanted else { continue };
            let same = match &mut server.values[index] {
                // The same shared value (the usual case): no string comparison at all.
                Some(shown) if Arc::ptr_eq(shown, wanted) => true,
                Some(shown) if **shown == **wanted => {
                    *shown = Arc::clone(wanted);
                    true
                }
                _ => false,
            };
            if same {
                continue;
            }
            push_set(sql, TRACKED_PARAMETERS[index], wanted);
            any = true;
        }
        any
    }
}

/// `SET name = 'value';`, the value quoted as a string literal.
fn push_set(sql: &mut String, name: &str, value: &str) {
    sql.push_str("SET ");
    sql.push_str(name);
    sql.push_str(" = '");
    sql.push_str(&value.replace('\'', "''"));
    sql.push_str("';");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_become_sets() {
        let mut client = TrackedParams::default();
        client.set("application_name", "it's");
        client.set("TimeZone", "UTC");
        let mut server = TrackedParams::default();
        server.set("timezone", "UTC");
        let mut sql = String::new();
        assert!(client.write_differences(&mut server, &mut sql));
        assert_eq!(sql, "SET application_name = 'it''s';");
        server.set("application_name", "it's");
        sql.clear();
        assert!(!client.write_differences(&mut server, &mut sql));
        // Equal values are shared from then on.
        let index = tracked_index("application_name").unwrap_or_default();
        assert!(matches!(
            (&client.values[index], &server.values[index]),
            (Some(a), Some(b)) if Arc::ptr_eq(a, b)
        ));
        assert!(!client.write_differences(&mut server, &mut sql));
    }

    #[test]
    fn login_sets_apply_startup_values_over_the_defaults() {
        let mut defaults = TrackedParams::default();
        defaults.set("client_encoding", "UTF8");
        defaults.set("DateStyle", "ISO, MDY");
        defaults.set("application_name", "");
        let mut server = defaults.clone();
        server.set("application_name", "previous client");
        let mut client = TrackedParams::default();
        client.set("client_encoding", "UTF8");
        client.set("DateStyle", "dmy");
        let mut sql = String::new();
        assert!(client.write_login_sets(&defaults, &server, &mut sql));
        assert_eq!(
            sql,
            "RESET DateStyle; SET DateStyle = 'dmy';RESET application_name;"
        );
        sql.clear();
        assert!(!client.write_login_sets(&defaults, &defaults_with(&client, &defaults), &mut sql));
    }

    fn defaults_with(client: &TrackedParams, defaults: &TrackedParams) -> TrackedParams {
        let mut shown = client.clone();
        shown.fill_from(defaults);
        shown
    }

    #[test]
    fn learned_spellings_canonicalize_later_logins() {
        let mut defaults = TrackedParams::default();
        defaults.set("client_encoding", "UTF8");
        defaults.set("DateStyle", "ISO, MDY");
        let mut first = TrackedParams::default();
        first.set("client_encoding", "utf8");
        first.set("DateStyle", "iso, dmy");
        let mut spellings = Spellings::default();
        assert!(!first.clone().canonicalize(&defaults, &spellings));
        let mut server = defaults.clone();
        server.set("DateStyle", "ISO, DMY");
        first.learn_spellings(&server, &mut spellings);
        let mut later = first.clone();
        assert!(later.canonicalize(&defaults, &spellings));
        assert_eq!(later.get(0), Some("UTF8"));
        assert_eq!(later.get(1), Some("ISO, DMY"));
        let mut unknown = TrackedParams::default();
        unknown.set("DateStyle", "german");
        let before = unknown.clone();
        assert!(!unknown.canonicalize(&defaults, &spellings));
        assert_eq!(unknown, before);
    }

    #[test]
    fn spellings_are_bounded() {
        let mut spellings = Spellings::default();
        for n in 0..MAX_SPELLINGS_PER_POOL + 10 {
            spellings.learn(5, &format!("app{n}"), &format!("app{n}"));
        }
        assert_eq!(spellings.len(), MAX_SPELLINGS_PER_POOL);
    }

    #[test]
    fn the_spelling_limit_is_configurable() {
        let mut spellings = Spellings::with_limit(2);
        for n in 0..5 {
            spellings.learn(5, &format!("app{n}"), &format!("app{n}"));
        }
        assert_eq!(spellings.len(), 2);
        spellings.learn(5, "app0", "APP0");
        assert_eq!(spellings.canonical(5, "app0"), Some("APP0"));
    }

    #[test]
    fn the_spelling_limit_spans_all_parameters() {
        let mut spellings = Spellings::with_limit(2);
        spellings.learn(0, "utf8", "UTF8");
        spellings.learn(1, "iso", "ISO, MDY");
        spellings.learn(2, "utc", "UTC");
        assert_eq!(spellings.len(), 2);
        assert_eq!(spellings.canonical(2, "utc"), None);
        assert_eq!(spellings.canonical(0, "utf8"), Some("UTF8"));
    }

    #[test]
    fn a_spelling_of_an_untracked_index_is_ignored() {
        let mut spellings = Spellings::default();
        spellings.learn(TRACKED_PARAMETERS.len(), "x", "y");
        assert!(spellings.is_empty());
    }

    #[test]
    fn standard_conforming_strings_is_found_by_name() {
        assert_eq!(
            tracked_index("standard_conforming_strings"),
            Some(STANDARD_CONFORMING_STRINGS)
        );
        let mut params = TrackedParams::default();
        assert!(params.standard_conforming_strings());
        params.set("standard_conforming_strings", "off");
        assert!(!params.standard_conforming_strings());
    }

    #[test]
    fn untracked_names_are_ignored() {
        let mut params = TrackedParams::default();
        assert!(!params.set("search_path", "x"));
    }

    #[test]
    fn tracked_names_match_in_any_case() {
        for name in [
            "datestyle",
            "DATESTYLE",
            "DateStyle",
            "timezone",
            "IntervalStyle",
        ] {
            assert!(is_tracked_parameter(name), "{name}");
        }
        assert!(!is_tracked_parameter("search_path"));
    }

    #[test]
    fn welcome_keeps_every_parameter_and_its_tracked_subset() {
        let params = vec![
            ("server_version".to_string(), "17.2".to_string()),
            ("DateStyle".to_string(), "ISO, MDY".to_string()),
            ("TimeZone".to_string(), "UTC".to_string()),
        ];
        let welcome = Welcome::from_params(&params);
        assert_eq!(welcome.params, params);
        assert_eq!(welcome.tracked.get(1), Some("ISO, MDY"));
        assert_eq!(welcome.tracked.get(2), Some("UTC"));
        assert_eq!(welcome.tracked.get(0), None);
    }
}
