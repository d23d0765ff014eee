//! The session parameters pgtier keeps in step between a client and whichever server it is
//! given (PgBouncer's tracked set): when they differ, a SET is sent before the client's query.

/// Parameters re-applied on a server handed to a client whose values differ.
pub const TRACKED: [&str; 6] = [
    "client_encoding",
    "DateStyle",
    "TimeZone",
    "IntervalStyle",
    "standard_conforming_strings",
    "application_name",
];

/// Index into `TRACKED`, matching names case-insensitively as PostgreSQL does.
pub fn tracked_index(name: &str) -> Option<usize> {
    TRACKED
        .iter()
        .position(|tracked| tracked.eq_ignore_ascii_case(name))
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

    /// Fills values this set lacks from `defaults`.
    pub fn fill_from(&mut self, defaults: &TrackedParams) {
        for (mine, theirs) in self.values.iter_mut().zip(&defaults.values) {
            if mine.is_none() {
                mine.clone_from(theirs);
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
    fn untracked_names_are_ignored() {
        let mut params = TrackedParams::default();
        assert!(!params.set("search_path", "x"));
    }
}
