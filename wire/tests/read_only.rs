//! The read-only classifier offline: the case table, NULs, standard_conforming_strings off,
//! the bounds on depth and length, and properties: case and token separators change nothing,
//! read-only statements joined stay read-only, a write joined to anything is a write, and
//! arbitrary bytes never panic.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod read_only_cases;

use pgtier_wire::read_only::{Access, MAX_DEPTH, MAX_TEXT_BYTES, classify, classify_with};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use read_only_cases::{NUL_CASES, READ_ONLY, REFUSED_BY_STANDBY, WRITE};

fn check(cases: &[&str], expected: Access) -> Vec<String> {
    let mut wrong = Vec::new();
    for case in cases {
        for scs in [true, false] {
            // Backslashes matter only with standard_conforming_strings off.
            if !scs && case.contains('\\') {
                continue;
            }
            let got = classify_with(case.as_bytes(), scs);
            if got != expected {
                wrong.push(format!(
                    "{case:?} (scs {scs}): {got:?}, expected {expected:?}"
                ));
            }
        }
    }
    wrong
}

#[test]
fn the_table() {
    assert!(READ_ONLY.len() + WRITE.len() >= 150);
    let mut wrong = check(READ_ONLY, Access::ReadOnly);
    wrong.extend(check(WRITE, Access::Write));
    wrong.extend(check(REFUSED_BY_STANDBY, Access::Write));
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn the_text_ends_at_its_first_nul() {
    for (text, read_only) in NUL_CASES {
        let expected = if *read_only {
            Access::ReadOnly
        } else {
            Access::Write
        };
        assert_eq!(classify(text), expected, "{text:?}");
    }
    for case in READ_ONLY {
        let with_nul = format!("{case}\0");
        assert_eq!(classify(with_nul.as_bytes()), Access::ReadOnly, "{case:?}");
    }
}

#[test]
fn standard_conforming_strings_off() {
    // On: the string ends at the second quote and the INSERT runs. Off: it is all one string.
    let text = br"SELECT 'a\'; INSERT INTO t VALUES (1); --'";
    assert_eq!(classify_with(text, true), Access::Write);
    assert_eq!(classify_with(text, false), Access::ReadOnly);
    // On: the string ends at the second quote and nextval is called. Off: one string, then a
    // comment.
    let text = br"SELECT 'a\', nextval(' --'";
    assert_eq!(classify_with(text, true), Access::Write);
    assert_eq!(classify_with(text, false), Access::ReadOnly);
    // E'' strings read backslashes either way.
    let text = br"SELECT E'a\'; INSERT INTO t VALUES (1); --'";
    assert_eq!(classify_with(text, true), Access::ReadOnly);
    assert_eq!(classify_with(text, false), Access::ReadOnly);
}

#[test]
fn nesting_is_bounded() {
    let nested = |depth: usize| format!("SELECT {}1{}", "(".repeat(depth), ")".repeat(depth));
    let max = MAX_DEPTH as usize;
    assert_eq!(classify(nested(max).as_bytes()), Access::ReadOnly);
    assert_eq!(classify(nested(max + 1).as_bytes()), Access::Write);
    assert_eq!(classify(nested(100_000).as_bytes()), Access::Write);
    let ctes: Vec<String> = (0..100).map(|i| format!("x{i} AS (SELECT 1)")).collect();
    let ctes = format!("WITH {} SELECT 1", ctes.join(", "));
    assert_eq!(classify(ctes.as_bytes()), Access::ReadOnly);
}

#[test]
fn length_is_bounded() {
    let padded = |len: usize| {
        let mut text = b"SELECT 1".to_vec();
        text.resize(len, b' ');
        text
    };
    assert_eq!(classify(&padded(MAX_TEXT_BYTES)), Access::ReadOnly);
    assert_eq!(classify(&padded(MAX_TEXT_BYTES + 1)), Access::Write);
    let mut with_nul = padded(MAX_TEXT_BYTES);
    with_nul.push(0);
    assert_eq!(classify(&with_nul), Access::ReadOnly);
}

/// Read-only cases without transaction control, which any number of can be joined.
fn plain_reads() -> impl Iterator<Item = &'static str> {
    READ_ONLY.iter().copied().filter(|case| {
        let lower = case.to_ascii_lowercase();
        !["begin", "start transaction", "commit"]
            .iter()
            .any(|w| lower.contains(w))
    })
}

#[test]
fn read_only_statements_joined_stay_read_only() {
    let mut wrong = Vec::new();
    for a in plain_reads() {
        for b in plain_reads() {
            let joined = format!("{a}\n;{b}");
            if classify(joined.as_bytes()) != Access::ReadOnly {
                wrong.push(joined);
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn a_write_joined_to_anything_is_a_write() {
    let writes = [
        "INSERT INTO t VALUES (1)",
        "SELECT nextval('s')",
        "SELECT * FROM t FOR UPDATE",
        "SET work_mem = '1MB'",
        "BEGIN",
        "LISTEN c",
    ];
    let mut wrong = Vec::new();
    for case in READ_ONLY {
        for write in writes {
            for joined in [format!("{case}\n;{write}"), format!("{write};{case}")] {
                if classify(joined.as_bytes()) != Access::Write {
                    wrong.push(joined);
                }
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

#[test]
fn case_and_separators_change_nothing() {
    let mut wrong = Vec::new();
    for (cases, expected) in [(READ_ONLY, Access::ReadOnly), (WRITE, Access::Write)] {
        for case in cases {
            let mut variants = vec![
                case.to_ascii_uppercase(),
                case.to_ascii_lowercase(),
                case.replace(' ', "\t"),
                case.replace(' ', "/**/"),
                case.replace(' ', " /* x /* y */ */ "),
            ];
            if !case.contains("--") {
                variants.push(case.replace(' ', "\n  -- x\n"));
            }
            for variant in variants {
                if classify(variant.as_bytes()) != expected {
                    wrong.push(format!("{variant:?}: expected {expected:?}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// Pieces of SQL to build texts from: the fuzzing of `classify` at the token level.
const PIECES: &[&str] = &[
    "SELECT",
    "select",
    "VALUES",
    "TABLE",
    "WITH",
    "RECURSIVE",
    "AS",
    "MATERIALIZED",
    "NOT",
    "FROM",
    "WHERE",
    "IN",
    "EXISTS",
    "ANY",
    "JOIN",
    "LEFT",
    "BY",
    "ORDER",
    "GROUP",
    "FOR",
    "UPDATE",
    "SHARE",
    "KEY",
    "NO",
    "INTO",
    "INSERT",
    "BEGIN",
    "START",
    "TRANSACTION",
    "READ",
    "ONLY",
    "WRITE",
    "ISOLATION",
    "LEVEL",
    "SERIALIZABLE",
    "REPEATABLE",
    "COMMITTED",
    "SET",
    "COMMIT",
    "ROLLBACK",
    "TO",
    "SAVEPOINT",
    "AND",
    "CHAIN",
    "SHOW",
    "EXPLAIN",
    "ANALYZE",
    "VERBOSE",
    "COPY",
    "STDOUT",
    "t",
    "x",
    "lower",
    "count",
    "nextval",
    "f",
    "over",
    "pg_catalog",
    "numeric",
    "varchar",
    "(",
    ")",
    ",",
    ";",
    ".",
    "::",
    "*",
    "=",
    "$1",
    "1",
    "1.5",
    "'s'",
    "E'\\''",
    "$$ x $$",
    "$q$",
    "\"q\"",
    "--",
    "/*",
    "*/",
    "\n",
    "U&",
    "\0",
    "'",
    "\"",
    "$",
    "\\",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_bytes_never_panic(text in vec(any::<u8>(), 0..300), scs: bool) {
        classify_with(&text, scs);
    }

    #[test]
    fn a_read_only_text_is_closed(pieces in vec(select(PIECES), 0..24), scs: bool) {
        let text = pieces.join(" ");
        let text = text.split('\0').next().unwrap_or("");
        if classify_with(text.as_bytes(), scs) == Access::ReadOnly {
            // Nothing was left open: a statement appended is read as a statement.
            for write in ["INSERT INTO t VALUES (1)", "SELECT nextval('s')"] {
                let joined = format!("{text}\n;{write}");
                prop_assert_eq!(classify_with(joined.as_bytes(), scs), Access::Write, "{}", joined);
            }
        }
    }
}
