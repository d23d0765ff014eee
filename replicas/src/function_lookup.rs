//! The look-up of function names on a reader entry's primary: one query per batch of names,
//! and what its rows say about each name.
//!
//! A name is read-only when every function of that name is STABLE or IMMUTABLE
//! (`pg_proc.provolatile` `s` or `i`), counting every overload **in every schema**: an
//! unqualified call resolves through the session's search_path, which pgtier does not know
//! (a role's or database's setting, or a `SET` of the session), so it does not assume one; a
//! volatile function of that name anywhere makes the name a write. `pg_catalog.name` counts
//! only the functions in `pg_catalog`. A name that no function has is a write (the call will
//! fail; let it fail on the primary). Two stable built-ins that tell a standby from the
//! primary, as `SHOW transaction_read_only` would, are writes without a look-up.

use crate::functions::Wanted;
use crate::pg_link::Row;
use pgtier_wire::read_only::CalleeSchema;

/// Names per query at most.
pub(crate) const MAX_NAMES_PER_QUERY: usize = 64;

/// Stable functions whose answer differs on a standby in a way a client may act on:
/// `current_setting('transaction_read_only')`, `'in_hot_standby'`, and the settings view's
/// function.
const STANDBY_TELLING: &[&[u8]] = &[b"current_setting", b"pg_show_all_settings"];

/// The query for `names` (the name, whether all its functions are read-only, and whether
/// those in `pg_catalog` are, NULL if it has none there), or `None` when no name needs one.
pub fn query(names: &[Wanted]) -> Option<String> {
    let mut list = String::new();
    for (_, name) in names.iter().filter(|(_, name)| needs_query(name)) {
        let Ok(name) = std::str::from_utf8(name) else {
            continue;
        };
        if !list.is_empty() {
            list.push_str(", ");
        }
        // E'...' escapes the same way whatever standard_conforming_strings is.
        list.push_str("E'");
        for c in name.chars() {
            match c {
                '\'' => list.push_str("''"),
                '\\' => list.push_str("\\\\"),
                c => list.push(c),
            }
        }
        list.push('\'');
    }
    if list.is_empty() {
        return None;
    }
    Some(format!(
        "SELECT p.proname, bool_and(p.provolatile IN ('s', 'i')), \
         bool_and(p.provolatile IN ('s', 'i')) FILTER (WHERE n.nspname = 'pg_catalog') \
         FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
         WHERE p.proname IN ({list}) GROUP BY p.proname"
    ))
}

fn needs_query(name: &[u8]) -> bool {
    !STANDBY_TELLING.contains(&name) && std::str::from_utf8(name).is_ok()
}

/// What `rows` (of [`query`]) say about each of `names`.
pub fn answers(names: Vec<Wanted>, rows: &[Row]) -> Vec<(Wanted, bool)> {
    names
        .into_iter()
        .map(|(schema, name)| {
            let row = rows
                .iter()
                .find(|row| row.first().and_then(Option::as_deref) == Some(&name[..]));
            let column = match schema {
                CalleeSchema::Unqualified => 1,
                CalleeSchema::PgCatalog => 2,
            };
            let read_only = needs_query(&name)
                && row
                    .and_then(|row| row.get(column))
                    .and_then(Option::as_deref)
                    == Some(b"t");
            ((schema, name), read_only)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(schema: CalleeSchema, name: &str) -> Wanted {
        (schema, name.as_bytes().into())
    }

    fn row(values: &[Option<&str>]) -> Row {
        values
            .iter()
            .map(|v| v.map(|v| v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn names_are_quoted_and_standby_telling_ones_not_asked() {
        let names = [
            wanted(CalleeSchema::Unqualified, "o'k\\"),
            wanted(CalleeSchema::Unqualified, "current_setting"),
        ];
        let Some(sql) = query(&names) else {
            panic!("no query");
        };
        assert!(sql.contains("IN (E'o''k\\\\')"), "{sql}");
        assert_eq!(query(&names[1..]), None);
    }

    #[test]
    fn every_overload_must_be_stable_and_missing_names_are_writes() {
        use CalleeSchema::{PgCatalog, Unqualified};
        let rows = [
            row(&[Some("stable_fn"), Some("t"), None]),
            row(&[Some("mixed"), Some("f"), Some("t")]),
            row(&[Some("inet_server_port"), Some("t"), Some("t")]),
        ];
        let names = vec![
            wanted(Unqualified, "stable_fn"),
            wanted(PgCatalog, "stable_fn"),
            wanted(Unqualified, "mixed"),
            wanted(PgCatalog, "mixed"),
            wanted(Unqualified, "inet_server_port"),
            wanted(Unqualified, "missing"),
            wanted(Unqualified, "current_setting"),
        ];
        let got: Vec<bool> = answers(names, &rows)
            .into_iter()
            .map(|(_, ro)| ro)
            .collect();
        assert_eq!(got, [true, false, false, true, true, false, false]);
    }
}
