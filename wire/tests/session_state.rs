//! The session-state scanner: the case table, Parse bodies, standard_conforming_strings off,
//! long dollar-quote tags, and properties: any split of any body gives exactly the effects of
//! the whole body (and never panics), whitespace and comments between tokens change nothing,
//! statements joined with `;` give the union of their effects.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod session_state_cases;

use pgtier_wire::session_state::{Effects, StateScanner, classify_parse, classify_query};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;
use session_state_cases::{LEXING, STATEMENTS};

/// Feeds `body` cut at `cuts` (any order, any values; clamped to the body).
fn chunked(mut scanner: StateScanner, body: &[u8], cuts: &[usize]) -> Effects {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut at = 0;
    for cut in cuts {
        scanner.feed(&body[at..cut]);
        at = cut;
    }
    scanner.feed(&body[at..]);
    scanner.finish()
}

fn bytewise(mut scanner: StateScanner, body: &[u8]) -> Effects {
    for b in body {
        scanner.feed(std::slice::from_ref(b));
    }
    scanner.finish()
}

fn parse_body(name: &[u8], sql: &[u8], tail: &[u8]) -> Vec<u8> {
    [name, b"\0", sql, b"\0", tail].concat()
}

fn scs_off(sql: &[u8]) -> Effects {
    let mut scanner = StateScanner::query().standard_conforming_strings(false);
    scanner.feed(sql);
    scanner.finish()
}

/// Every way of handing `sql` over must say `expected`: whole, byte by byte, as a Parse body
/// with and without a name (and parameter types after it).
fn check(sql: &[u8], expected: Effects, failures: &mut Vec<String>) {
    let shown = String::from_utf8_lossy(sql);
    let mut expect = |how: &str, got: Effects, want: Effects| {
        if got != want {
            failures.push(format!("{shown:?} ({how}): got {got:?}, want {want:?}"));
        }
    };
    expect("query", classify_query(sql), expected);
    expect("bytewise", bytewise(StateScanner::query(), sql), expected);
    let unnamed = parse_body(b"", sql, b"\0\x01\0\0\0\x17");
    expect("parse", classify_parse(&unnamed), expected);
    let named = parse_body(b"s1", sql, b"\0\0");
    let named_expected = expected | Effects::NAMED_STATEMENT;
    expect("named parse", classify_parse(&named), named_expected);
    expect(
        "named parse bytewise",
        bytewise(StateScanner::parse(), &named),
        named_expected,
    );
}

#[test]
fn statements_table() {
    let mut failures = Vec::new();
    for (sql, expected) in STATEMENTS {
        check(sql.as_bytes(), *expected, &mut failures);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn lexing_table() {
    let mut failures = Vec::new();
    for (sql, expected) in LEXING {
        check(sql, *expected, &mut failures);
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn parse_bodies() {
    assert_eq!(classify_parse(b"\0SELECT 1\0\0\0"), Effects::NONE);
    assert_eq!(
        classify_parse(b"s1\0SELECT 1\0\0\0"),
        Effects::NAMED_STATEMENT
    );
    assert_eq!(
        classify_parse(b"\0SET work_mem = 1\0\0\x01\0\0\0\x17"),
        Effects::SET
    );
    // The name is not SQL, and nothing after the SQL's NUL is.
    assert_eq!(
        classify_parse(b"SET x = 1\0SELECT 1\0"),
        Effects::NAMED_STATEMENT
    );
    assert_eq!(
        classify_parse(b"\0SELECT 1\0\0\x02LISTEN x; SET y = 1\0'$$/*"),
        Effects::NONE
    );
    assert_eq!(classify_parse(b""), Effects::NONE);
    assert_eq!(classify_parse(b"\0"), Effects::NONE);
    assert_eq!(classify_parse(b"abc"), Effects::NAMED_STATEMENT);
    assert_eq!(classify_parse(b"\0LISTEN a"), Effects::LISTEN);
    // A Query body is SQL from its first byte: a Parse body read as a Query stops at the name.
    assert_eq!(classify_query(b"s1\0SET x = 1\0"), Effects::NONE);
}

#[test]
fn standard_conforming_strings_off() {
    // On (the default), a backslash is an ordinary byte in a plain string; off, it escapes.
    let hides = b"SELECT '\\'; SET work_mem = 1";
    assert_eq!(classify_query(hides), Effects::SET);
    assert_eq!(scs_off(hides), Effects::NONE);
    let reveals = b"SELECT '\\''; SET work_mem = 1; SELECT ''''";
    assert_eq!(classify_query(reveals), Effects::NONE);
    assert_eq!(scs_off(reveals), Effects::SET);
    assert_eq!(
        scs_off(b"SELECT 'a'\n'\\''; SET work_mem = 1; SELECT ''''"),
        Effects::SET
    );
    // Bit strings never take backslash escapes; N'' follows the plain rules; E'' always escapes.
    assert_eq!(scs_off(b"SELECT B'\\'; LISTEN a"), Effects::LISTEN);
    assert_eq!(scs_off(b"SELECT X'\\'; LISTEN a"), Effects::LISTEN);
    assert_eq!(scs_off(b"SELECT N'\\'; LISTEN a'"), Effects::NONE);
    assert_eq!(scs_off(b"SELECT E'\\''; LISTEN a"), Effects::LISTEN);
    assert_eq!(classify_query(b"SELECT N'\\'; LISTEN a'"), Effects::LISTEN);
}

fn dollar_quoted(tag: &[u8], body: &[u8]) -> Vec<u8> {
    [b"SELECT $", tag, b"$", body, b"$", tag, b"$; LISTEN a"].concat()
}

#[test]
fn dollar_tags_up_to_64_bytes_are_exact() {
    for len in [1, 63, 64] {
        let tag = vec![b'q'; len];
        let near_misses = [
            b" $".as_slice(),
            &tag[1..],
            b"$ $",
            &tag,
            b"q$ ; SET x = 1 ",
        ]
        .concat();
        let sql = dollar_quoted(&tag, &near_misses);
        assert_eq!(classify_query(&sql), Effects::LISTEN, "tag of {len} bytes");
        assert_eq!(bytewise(StateScanner::query(), &sql), Effects::LISTEN);
    }
}

#[test]
fn longer_dollar_tags_are_uncertain() {
    let tag = vec![b'q'; 100];
    let near_misses = [
        b" $".as_slice(),
        &tag[1..],
        b"$ $",
        &tag,
        b"q$ ; SET x = 1 ",
    ]
    .concat();
    let sql = dollar_quoted(&tag, &near_misses);
    assert_eq!(classify_query(&sql), Effects::LISTEN | Effects::UNCERTAIN);
    assert_eq!(
        bytewise(StateScanner::query(), &sql),
        Effects::LISTEN | Effects::UNCERTAIN
    );
    // Same length, same first 64 bytes, different tail: closes early. Documented, and pins.
    let mut other = tag.clone();
    other[99] = b'r';
    let sql = [
        b"SELECT $".as_slice(),
        &tag,
        b"$ $",
        &other,
        b"$ SET x = 1 $",
        &tag,
        b"$",
    ]
    .concat();
    assert!(classify_query(&sql).contains(Effects::UNCERTAIN));
    // A long `$word` that opens nothing is just a word.
    let sql = [b"SELECT $".as_slice(), &tag, b" ; LISTEN x"].concat();
    assert_eq!(classify_query(&sql), Effects::LISTEN);
}

#[test]
fn deeply_nested_comments() {
    let depth = 10_000;
    let sql = [
        b"SELECT 1 ".to_vec(),
        b"/*".repeat(depth),
        b" ; SET x = 1 ".to_vec(),
        b"*/".repeat(depth - 1),
        b" ; SET y = 1 */; LISTEN a".to_vec(),
    ]
    .concat();
    assert_eq!(classify_query(&sql), Effects::LISTEN);
}

/// Bodies for the scanner's short cuts: a statement's first word, and the stretches of a body
/// where only a few words matter, which it skips without a keyword lookup. Words that only
/// look like keywords (after digits or `$`, longer, quoted, with another first byte), string
/// prefixes inside a body, and the words that do count there in any case. Checked every way
/// `check` does, and cut at every byte.
#[test]
fn skipped_stretches_lose_nothing() {
    let pg_temp_64 = format!("SELECT pg_temp_{}.t", "7".repeat(56));
    let pg_temp_65 = format!("SELECT pg_temp_{}.t", "7".repeat(57));
    let cases: &[(&[u8], Effects)] = &[
        // After digits (symbols) a word starts; after a letter the digits are the word's.
        (b"SELECT 1pg_temp.t", Effects::TEMP),
        (b"SELECT a1pg_temp.t", Effects::NONE),
        (b"SELECT 12e'\\''; LISTEN a", Effects::LISTEN),
        (b"SELECT x12e'\\''; LISTEN a", Effects::NONE),
        (b"SELECT e'\\''; LISTEN a", Effects::LISTEN),
        (b"SELECT ae'\\''; LISTEN a", Effects::NONE),
        (b"UPDATE t SET c = N'\\''; LISTEN a", Effects::NONE),
        (b"SELECT u&'\\''; LISTEN a", Effects::NONE),
        (
            b"SELECT 1 FROM t WHERE x = U&\"pg_temp\".y",
            Effects::TEMP.union(Effects::UNCERTAIN),
        ),
        (b"select 1 into TEMPORARY t", Effects::TEMP),
        (b"SELECT 1 INTO Temp t", Effects::TEMP),
        (b"SELECT 1 INTO \"temp\" t", Effects::NONE),
        (b"select * from PG_TEMP.t", Effects::TEMP),
        (b"SELECT Set_Config('a', 'b', false)", Effects::SET_CONFIG),
        (
            b"select pg_try_advisory_lock_shared(1)",
            Effects::ADVISORY_LOCK,
        ),
        (b"SELECT a;UPDATE b;SET x=1", Effects::SET),
        (b"SELECT a; ;; SET x=1", Effects::SET),
        (b"SELECT set, reset, listen FROM t", Effects::NONE),
        (b"WITH t AS (SELECT 1) SELECT * FROM t", Effects::NONE),
        (b"CREATE OR REPLACE TEMP VIEW v AS SELECT 1", Effects::TEMP),
        (
            b"DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            Effects::HOLD_CURSOR,
        ),
        (b"SELECT $1, $2 FROM t WHERE a = $3", Effects::NONE),
        (b"SELECT a-b, a/b, a--b\n; LISTEN x", Effects::LISTEN),
        (b"SELECT 'it''s' ; LISTEN x", Effects::LISTEN),
        (b"SELECT 'a'\n'b' ; LISTEN x", Effects::LISTEN),
        (pg_temp_64.as_bytes(), Effects::TEMP),
        (pg_temp_65.as_bytes(), Effects::NONE),
        (
            b"SELECT \xc3\xa9t\xc3\xa9, pg_temp\xc3\xa9 FROM t",
            Effects::NONE,
        ),
        (b"SELECT a$pg_temp FROM t", Effects::NONE),
        (b"SELECT 1e5, 0x1F FROM t", Effects::NONE),
    ];
    let mut failures = Vec::new();
    for &(sql, expected) in cases {
        check(sql, expected, &mut failures);
        for cut in 0..=sql.len() {
            let got = chunked(StateScanner::query(), sql, &[cut]);
            if got != expected {
                let shown = String::from_utf8_lossy(sql);
                failures.push(format!(
                    "{shown:?} cut at {cut}: got {got:?}, want {expected:?}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// Pieces of SQL that drive the lexer through all its states when shuffled.
const FRAGMENTS: &[&[u8]] = &[
    b"'",
    b"''",
    b"\"",
    b"\"\"",
    b"$",
    b"$$",
    b"$a$",
    b"$ab$",
    b"$1",
    b"$_",
    b"/*",
    b"*/",
    b"*",
    b"/",
    b"-",
    b"--",
    b"\n",
    b"\r",
    b" ",
    b"\\",
    b"E'",
    b"e'",
    b"B'",
    b"X'",
    b"N'",
    b"U&",
    b"U&'",
    b"U&\"",
    b"u",
    b"&",
    b";",
    b"SET",
    b"set",
    b"LOCAL",
    b"SESSION",
    b"TIME",
    b"ZONE",
    b"NAMES",
    b"TimeZone",
    b"work_mem",
    b"=",
    b"TO",
    b"FROM",
    b".",
    b"LISTEN",
    b"RESET",
    b"ALL",
    b"DISCARD",
    b"TEMP",
    b"CREATE",
    b"INTO",
    b"pg_temp",
    b"DECLARE",
    b"WITH",
    b"HOLD",
    b"PREPARE",
    b"TRANSACTION",
    b"DEALLOCATE",
    b"UNLISTEN",
    b"CLOSE",
    b"LOAD",
    b"set_config",
    b"pg_advisory_lock",
    b"pg_advisory_unlock_all",
    b"x",
    b"1",
    b"(",
    b")",
    b"\0",
    b"\xff",
    b"\xc3\xa9",
];

fn sql_like() -> impl Strategy<Value = Vec<u8>> {
    vec((select(FRAGMENTS), any::<bool>()), 0..60).prop_map(|parts| {
        let mut sql = Vec::new();
        for (fragment, space) in parts {
            sql.extend_from_slice(fragment);
            if space {
                sql.push(b' ');
            }
        }
        sql
    })
}

/// Whitespace and comments a space between tokens may become.
const PADS: &[&str] = &[
    " ",
    "  ",
    "\n",
    "\t",
    "\r\n",
    "\x0c",
    "/* c */",
    "/**/",
    "/* /* nested */ */",
    "/* ; SET x = 1 */",
    "-- ; LISTEN x\n",
];

fn padded(sql: &str, pads: &[usize]) -> String {
    let mut pads = pads.iter().cycle().map(|&i| PADS[i % PADS.len()]);
    let mut out = String::new();
    out.push_str(pads.next().unwrap_or(""));
    for (i, part) in sql.split(' ').enumerate() {
        if i > 0 {
            out.push_str(pads.next().unwrap_or(" "));
        }
        out.push_str(part);
    }
    out.push_str(pads.next().unwrap_or(""));
    out
}

fn assert_split_invariant(body: &[u8], cuts: &[usize]) -> Result<(), TestCaseError> {
    let scanners = [
        StateScanner::query(),
        StateScanner::parse(),
        StateScanner::query().standard_conforming_strings(false),
    ];
    for scanner in scanners {
        let mut whole = scanner.clone();
        whole.feed(body);
        let whole = whole.finish();
        prop_assert_eq!(chunked(scanner.clone(), body, cuts), whole);
        prop_assert_eq!(bytewise(scanner, body), whole);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    #[test]
    fn any_split_of_any_bytes(body in vec(any::<u8>(), 0..400), cuts in vec(any::<usize>(), 0..8)) {
        assert_split_invariant(&body, &cuts)?;
    }

    #[test]
    fn any_split_of_sql_like_bytes(body in sql_like(), cuts in vec(any::<usize>(), 0..8)) {
        assert_split_invariant(&body, &cuts)?;
    }

    #[test]
    fn parse_is_query_after_the_name(
        name in vec(1u8..=255, 0..20),
        sql in prop_oneof![sql_like(), vec(any::<u8>(), 0..100)],
        tail in vec(any::<u8>(), 0..20),
    ) {
        let mut expected = classify_query(&sql);
        if !name.is_empty() {
            expected |= Effects::NAMED_STATEMENT;
        }
        prop_assert_eq!(classify_parse(&parse_body(&name, &sql, &tail)), expected);
    }

    #[test]
    fn padding_between_tokens_changes_nothing(
        index in 0..STATEMENTS.len(),
        pads in vec(0..PADS.len(), 1..40),
        cuts in vec(any::<usize>(), 0..4),
    ) {
        let (sql, expected) = STATEMENTS[index];
        let sql = padded(sql, &pads);
        prop_assert_eq!(classify_query(sql.as_bytes()), expected, "{:?}", sql);
        prop_assert_eq!(chunked(StateScanner::query(), sql.as_bytes(), &cuts), expected);
    }

    #[test]
    fn joined_statements_give_the_union(
        indices in vec(0..STATEMENTS.len(), 1..6),
        pads in vec(0..PADS.len(), 1..40),
    ) {
        let mut sql = String::new();
        let mut expected = Effects::NONE;
        for (n, &i) in indices.iter().enumerate() {
            if n > 0 {
                sql.push(';');
            }
            sql.push_str(&padded(STATEMENTS[i].0, &pads[n % pads.len()..]));
            expected |= STATEMENTS[i].1;
        }
        prop_assert_eq!(classify_query(sql.as_bytes()), expected, "{:?}", sql);
    }
}
