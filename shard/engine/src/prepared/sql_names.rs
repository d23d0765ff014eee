//! Finding the statement name in SQL that names a prepared statement: `DEALLOCATE [PREPARE]
//! name` and `EXECUTE name [(args)]`. A client's protocol-level statements have other names on
//! the server, and psycopg (with libpq before 17) deallocates them with SQL `DEALLOCATE name`,
//! so that name must be swapped for the server's. Only a text that is this one statement is
//! recognised; anything else is left as it is (the server then answers it as it would).

use std::ops::Range;

/// Which statement names a prepared statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NamingStatement {
    Deallocate,
    Execute,
}

/// A statement name found in SQL text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NameInSql {
    pub kind: NamingStatement,
    /// The name as PostgreSQL looks it up (unquoted: ASCII-lowercased; quoted: unescaped).
    pub name: Vec<u8>,
    /// Where the name's token stands in the text (to be replaced).
    pub token: Range<usize>,
}

/// PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes; longer ones are left alone.
const MAX_IDENTIFIER_BYTES: usize = 63;

/// Whether a text may be one (cheap test on its first bytes).
pub(crate) fn may_name_a_statement(sql: &[u8]) -> bool {
    let start = skip_space(sql, 0);
    let word = &sql[start..sql.len().min(start + 10)];
    word.len() >= 7
        && (word[..7].eq_ignore_ascii_case(b"EXECUTE")
            || (word.len() == 10 && word.eq_ignore_ascii_case(b"DEALLOCATE")))
}

/// The statement name `sql` refers to, if `sql` is a single DEALLOCATE or EXECUTE of one.
pub fn find(sql: &[u8]) -> Option<NameInSql> {
    let at = skip_space(sql, 0);
    let (kind, at) = if let Some(rest) = keyword(sql, at, b"DEALLOCATE") {
        let rest = skip_space(sql, rest);
        let rest = keyword(sql, rest, b"PREPARE").map_or(rest, |after| skip_space(sql, after));
        (NamingStatement::Deallocate, rest)
    } else if let Some(rest) = keyword(sql, at, b"EXECUTE") {
        (NamingStatement::Execute, skip_space(sql, rest))
    } else {
        return None;
    };
    let (name, end) = identifier(sql, at)?;
    if kind == NamingStatement::Deallocate && name.eq_ignore_ascii_case(b"all") && sql[at] != b'"' {
        return None;
    }
    let tail = &sql[end..];
    let single = match kind {
        NamingStatement::Deallocate => {
            let after = skip_space(sql, end);
            let after = if sql.get(after) == Some(&b';') {
                skip_space(sql, after + 1)
            } else {
                after
            };
            after == sql.len()
        }
        // Arguments may follow; a ';' anywhere in them could start a second statement (or
        // sit in a string): such texts are not touched.
        NamingStatement::Execute => !tail[..tail.len().saturating_sub(1)].contains(&b';'),
    };
    single.then_some(NameInSql {
        kind,
        name,
        token: at..end,
    })
}

fn skip_space(sql: &[u8], mut at: usize) -> usize {
    while sql.get(at).is_some_and(|byte| byte.is_ascii_whitespace()) {
        at += 1;
    }
    at
}

/// The position after `word` at `at`, if it is there as a whole word.
fn keyword(sql: &[u8], at: usize, word: &[u8]) -> Option<usize> {
    let end = at + word.len();
    let found = sql.get(at..end)?.eq_ignore_ascii_case(word);
    let whole = !sql.get(end).is_some_and(|&byte| is_identifier_byte(byte));
    (found && whole).then_some(end)
}

fn is_identifier_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_' || byte >= 0x80
}

fn is_identifier_byte(byte: u8) -> bool {
    is_identifier_start(byte) || byte.is_ascii_digit() || byte == b'$'
}

/// An identifier at `at`: its looked-up form and the position after it.
fn identifier(sql: &[u8], at: usize) -> Option<(Vec<u8>, usize)> {
    let first = *sql.get(at)?;
    let (name, end) = if first == b'"' {
        let mut name = Vec::new();
        let mut index = at + 1;
        loop {
            match *sql.get(index)? {
                b'"' if sql.get(index + 1) == Some(&b'"') => {
                    name.push(b'"');
                    index += 2;
                }
                b'"' => break,
                byte => {
                    name.push(byte);
                    index += 1;
                }
            }
        }
        (name, index + 1)
    } else if is_identifier_start(first) {
        let mut end = at;
        while sql.get(end).is_some_and(|&byte| is_identifier_byte(byte)) {
            end += 1;
        }
        (sql[at..end].to_ascii_lowercase(), end)
    } else {
        return None;
    };
    (!name.is_empty() && name.len() <= MAX_IDENTIFIER_BYTES).then_some((name, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(sql: &str) -> Option<(NamingStatement, String, String)> {
        find(sql.as_bytes()).map(|found| {
            (
                found.kind,
                String::from_utf8_lossy(&found.name).into_owned(),
                sql[found.token].to_string(),
            )
        })
    }

    #[test]
    fn deallocate_forms_are_recognised() {
        use NamingStatement::{Deallocate, Execute};
        let expect = |kind, name: &str, token: &str| Some((kind, name.into(), token.into()));
        assert_eq!(
            name("DEALLOCATE _pg3_0"),
            expect(Deallocate, "_pg3_0", "_pg3_0")
        );
        assert_eq!(
            name("  deallocate prepare S1 ;  "),
            expect(Deallocate, "s1", "S1")
        );
        assert_eq!(
            name("DEALLOCATE \"My\"\"S\""),
            expect(Deallocate, "My\"S", "\"My\"\"S\"")
        );
        assert_eq!(
            name("DEALLOCATE \"all\""),
            expect(Deallocate, "all", "\"all\"")
        );
        assert_eq!(name("EXECUTE s1(1, 'x')"), expect(Execute, "s1", "s1"));
        assert_eq!(name("execute s1;"), expect(Execute, "s1", "s1"));
    }

    #[test]
    fn anything_else_is_left_alone() {
        for sql in [
            "DEALLOCATE ALL",
            "DEALLOCATE PREPARE all;",
            "DEALLOCATE s1; SELECT 1",
            "EXECUTE s1; SELECT 1",
            "EXECUTE s1('a;b')",
            "DEALLOCATEX s1",
            "SELECT 1",
            "DEALLOCATE",
            "DEALLOCATE 1x",
            "DEALLOCATE \"unterminated",
            "EXPLAIN EXECUTE s1",
        ] {
            assert_eq!(name(sql), None, "{sql}");
        }
        let long = format!("DEALLOCATE {}", "a".repeat(64));
        assert_eq!(name(&long), None, "identifiers PostgreSQL would truncate");
    }

    #[test]
    fn the_cheap_test_lets_both_through_and_little_else() {
        assert!(may_name_a_statement(b" DEALLOCATE x"));
        assert!(may_name_a_statement(b"execute x"));
        assert!(!may_name_a_statement(b"SELECT 1"));
        assert!(!may_name_a_statement(b"DEALLOC"));
    }
}
