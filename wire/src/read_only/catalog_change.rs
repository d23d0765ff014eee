//! Which commands may change what a function name means, told from the server's
//! CommandComplete tag: a cache of function volatilities (see [`super::Functions`]) must be
//! dropped after one of them commits.
//!
//! The tag, not the query text: it names only statements that ran (in any text, a
//! multi-statement Query or a function body's `EXECUTE` alike), and reading it costs one
//! byte comparison for almost every other command. A `DO` block or a function that runs the
//! DDL itself reports its own tag (`DO`, `SELECT`) and is not seen.

/// Tags after which a function name may resolve to another function, or to one with another
/// volatility: functions, procedures, routines and aggregates created, replaced, altered
/// (`ALTER FUNCTION ... STABLE`, `SET SCHEMA`, `RENAME`) or dropped; extensions and schemas
/// (which bring or take functions with them); `DROP OWNED`. Sorted.
const TAGS: &[&[u8]] = &[
    b"ALTER AGGREGATE",
    b"ALTER EXTENSION",
    b"ALTER FUNCTION",
    b"ALTER PROCEDURE",
    b"ALTER ROUTINE",
    b"ALTER SCHEMA",
    b"CREATE AGGREGATE",
    b"CREATE EXTENSION",
    b"CREATE FUNCTION",
    b"CREATE PROCEDURE",
    b"DROP AGGREGATE",
    b"DROP EXTENSION",
    b"DROP FUNCTION",
    b"DROP OWNED",
    b"DROP PROCEDURE",
    b"DROP ROUTINE",
    b"DROP SCHEMA",
];

/// Whether a CommandComplete tag (without its NUL) may have changed what a function name
/// means.
pub fn changes_functions(tag: &[u8]) -> bool {
    // Every listed tag starts with A, C or D and is longer than any short tag sharing that
    // letter (`COPY 3`, `DELETE 1`): one comparison for SELECT, INSERT, UPDATE, BEGIN...
    match tag.first() {
        Some(b'A' | b'C' | b'D') => TAGS.binary_search(&tag).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_sorted() {
        assert!(TAGS.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn function_ddl_is_seen_and_other_commands_are_not() {
        for tag in [
            "CREATE FUNCTION",
            "CREATE PROCEDURE",
            "ALTER FUNCTION",
            "DROP FUNCTION",
            "DROP ROUTINE",
            "DROP SCHEMA",
            "CREATE EXTENSION",
            "DROP OWNED",
        ] {
            assert!(changes_functions(tag.as_bytes()), "{tag}");
        }
        for tag in [
            "SELECT 1",
            "COPY 3",
            "DELETE 0",
            "CREATE TABLE",
            "CREATE SCHEMA",
            "DROP TABLE",
            "ALTER TABLE",
            "COMMIT",
            "DO",
            "",
        ] {
            assert!(!changes_functions(tag.as_bytes()), "{tag}");
        }
    }
}
