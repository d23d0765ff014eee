//! The session parameters pgtier keeps in step between a client and whichever server it is
//! given (PgBouncer's tracked set): when they differ, a SET is sent before the client's query.

use std::collections::HashMap;

/// Parameters re-applied on a server handed to a client whose values differ.
pub const TRACKED: [&str; 6] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
    "application_name",
];

/// Position of `standard_conforming_strings` in `TRACKED`.
const STANDARD_CONFORMING_STRINGS: usize = 4;

/// Index into `TRACKED`, matching names case-insensitively as PostgreSQL does.
pub fn tracked_index(name: &str) -> Option<usize> {
    TRACKED
        .iter()
        .position(|tracked| tracked.eq_ignore_ascii_case(name))
}

/// Client spellings a pool remembers unless `max_spellings_per_pool` says otherwise: past
/// the limit, logins with new spellings still get the server's own values, through a server
/// round trip each.
pub const MAX_SPELLINGS_PER_POOL: usize = 256;

/// What a pool's server made of values clients spelled at startup (`utf8` became `UTF8`,
/// `iso, dmy` became `ISO, DMY`), so a later login with the same spelling is welcomed from
/// the pool's cached parameters with the server's own values and no server round trip.
#[derive(Debug)]
pub struct Spellings {
    learned: HashMap<(usize, String), String>,
    /// Most spellings kept (`max_spellings_per_pool`).
    pub limit: usize,
}

impl Default for Spellings {
    fn default() -> Spellings {
        Spellings::with_limit(MAX_SPELLINGS_PER_POOL)
    }
}

impl Spellings {
    pub fn with_limit(limit: usize) -> Spellings {
        Spellings {
            learned: HashMap::new(),
            limit,
        }
    }

    /// Remembers that the server shows `spelled` (a value of parameter `index`) as
    /// `canonical`, while there is room.
    pub fn learn(&mut self, index: usize, spelled: &str, canonical: &str) {
        if self.learned.len() >= self.limit && !self.knows(index, spelled) {
            return;
        }
        self.learned
            .insert((index, spelled.to_string()), canonical.to_string());
    }

    fn knows(&self, index: usize, spelled: &str) -> bool {
        self.learned.contains_key(&(index, spelled.to_string()))
    }

    fn canonical(&self, index: usize, spelled: &str) -> Option<&str> {
        self.learned
            .get(&(index, spelled.to_string()))
            .map(String::as_str)
    }
}

/// Values of the tracked parameters; `None` = never reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackedParams {
    values: [Option<String>; 6],
}

impl TrackedParams {
    /// Records `value` for `name` if it is tracked; returns whether it was.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        let Some(index) = tracked_index(name) else {
            return false;
        };
        match &mut self.values[index] {
            Some(current) if current == value => {}
            slot => *slot = Some(value.to_string()),
        }
        true
    }

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
                Some(known) => *value = Some(known.to_string()),
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
            match wanted {
                Some(wanted) if shown == Some(wanted.as_str()) => continue,
                None if shown == defaults.get(index) => continue,
                Some(wanted) => {
                    sql.push_str("RESET ");
                    sql.push_str(TRACKED[index]);
                    sql.push_str("; SET ");
                    sql.push_str(TRACKED[index]);
                    sql.push_str(" = '");
                    sql.push_str(&wanted.replace('\'', "''"));
                    sql.push_str("';");
                }
                None => {
                    sql.push_str("RESET ");
                    sql.push_str(TRACKED[index]);
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
    /// Returns whether anything was needed.
    pub fn write_differences(&self, server: &TrackedParams, sql: &mut String) -> bool {
        let mut any = false;
        for (index, wanted) in self.values.iter().enumerate() {
            let Some(wanted) = wanted else { continue };
            if server.values[index].as_deref() == Some(wanted.as_str()) {
                continue;
            }
            sql.push_str("SET ");
            sql.push_str(TRACKED[index]);
            sql.push_str(" = '");
            sql.push_str(&wanted.replace('\'', "''"));
            sql.push_str("';");
            any = true;
        }
        any
    }
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
        assert!(client.write_differences(&server, &mut sql));
        assert_eq!(sql, "SET application_name = 'it''s';");
        server.set("application_name", "it's");
        sql.clear();
        assert!(!client.write_differences(&server, &mut sql));
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
        assert_eq!(spellings.learned.len(), MAX_SPELLINGS_PER_POOL);
    }

    #[test]
    fn the_spelling_limit_is_configurable() {
        let mut spellings = Spellings::with_limit(2);
        for n in 0..5 {
            spellings.learn(5, &format!("app{n}"), &format!("app{n}"));
        }
        assert_eq!(spellings.learned.len(), 2);
        spellings.learn(5, "app0", "APP0");
        assert_eq!(spellings.canonical(5, "app0"), Some("APP0"));
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
}
