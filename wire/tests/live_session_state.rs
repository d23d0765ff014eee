//! The session-state scanner against a real PostgreSQL 15: every case of the shared table is
//! run on a live session, then the session's state is read back (settings whose source is
//! "session", listened channels, temporary relations and functions, advisory locks, open
//! cursors, prepared statements, role). Whatever state the server really kept must have been
//! reported as pinning (or as `SET_TRACKED` for the parameters the pooler re-applies); and
//! for statements that succeed, "pins" must be exact except for the few documented
//! conservative cases. Between cases the session is reset with DISCARD ALL.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;
mod session_state_cases;

use bytes::BytesMut;
use common::Conn;
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier_wire::auth::{AuthProgress, ClientAuth};
use pgtier_wire::messages::backend::DataRow;
use pgtier_wire::messages::frontend::*;
use pgtier_wire::messages::{BackendMessage, Message};
use pgtier_wire::session_state::{Effects, StateScanner, classify_parse, classify_query};
use session_state_cases::{LEXING, STATEMENTS};

/// The parameters the pooler re-applies (pg_settings names, lowercased).
const TRACKED: &[&str] = &[
    "client_encoding",
    "datestyle",
    "timezone",
    "intervalstyle",
    "standard_conforming_strings",
    "application_name",
];

/// One line of session state; see `observe`. transaction_isolation, transaction_read_only and
/// transaction_deferrable can show source "session" but are set afresh by every transaction.
/// Placeholder (extension) parameters are not in pg_settings: the ones the cases set are
/// probed by name (after DISCARD ALL they read as '', never set as NULL).
const SNAPSHOT: &str = "SELECT concat_ws('|', \
    coalesce((SELECT string_agg(lower(name), ' ' ORDER BY name) FROM pg_settings \
              WHERE source = 'session' AND name NOT LIKE 'transaction\\_%'), ''), \
    (SELECT count(*) FROM pg_listening_channels()), \
    (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()) \
      + (SELECT count(*) FROM pg_proc WHERE pronamespace = pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
    (SELECT count(*) FROM pg_cursors), \
    (SELECT count(*) FROM pg_prepared_statements), \
    (current_user <> 'postgres' OR session_user <> 'postgres'), \
    (SELECT count(*) FROM unnest(ARRAY['myapp.tenant', 'local.x', 'session.x', 'transaction.x', \
       'application_name.x', 'x.y', 'a.b']) AS p(name) \
     WHERE coalesce(current_setting(p.name, true), '') <> ''))";

const FIXTURES: &str = "DROP SCHEMA IF EXISTS public CASCADE; CREATE SCHEMA public; \
    CREATE TABLE t (x int); CREATE TABLE x (x int)";

/// Cases reported as pinning although a successful run keeps no state we can see: `LOAD`
/// (a loaded library is not visible in the catalogs), `set_config(..., true)` (is_local), a
/// `U&"..."` identifier (uncertain by design), and SETs that happen to restore what the
/// session already had (to the default, or back to the superuser we log in as).
const CONSERVATIVE: &[&str] = &[
    "LOAD 'auto_explain'",
    "SELECT set_config('a.b', '1', true)",
    "SELECT 1 AS U&\"a\"",
    "set work_mem to default",
    "SET ROLE NONE",
    "SET SESSION AUTHORIZATION DEFAULT",
];

/// What the server kept after a statement.
#[derive(Debug, Default)]
struct Observed {
    untracked_settings: Vec<String>,
    tracked_settings: Vec<String>,
    other: Vec<&'static str>,
}

impl Observed {
    fn pins(&self) -> bool {
        !self.untracked_settings.is_empty() || !self.other.is_empty()
    }
}

struct Session {
    _pg: LocalPg,
    conn: Conn,
}

impl Session {
    fn start() -> Session {
        let pg = LocalPg::start_primary(&PgOptions {
            auth: HbaAuth::Trust,
            ..PgOptions::default()
        })
        .unwrap();
        pg.psql("postgres", "CREATE ROLE r").unwrap();
        let mut conn = Conn::connect(pg.port());
        let mut out = BytesMut::new();
        StartupMessage::encode_parts(
            &mut out,
            ProtocolVersion::V3_0,
            &[("user", "postgres"), ("database", "postgres")],
        );
        conn.send(&out);
        let mut auth = ClientAuth::new(b"postgres", b"", [1; 18]);
        loop {
            let frame = conn.read_frame();
            let mut reply = BytesMut::new();
            if auth.handle_frame(&frame.bytes, &mut reply).unwrap() == AuthProgress::Authenticated {
                break;
            }
            conn.send(&reply);
        }
        conn.read_until_ready();
        let mut session = Session { _pg: pg, conn };
        session.simple(FIXTURES);
        session
    }

    /// Sends raw frames; returns (any ErrorResponse, the final ReadyForQuery status, DataRow
    /// first columns).
    fn exchange(&mut self, out: &BytesMut) -> (bool, u8, Vec<String>) {
        self.conn.send(out);
        let mut failed = false;
        let mut rows = Vec::new();
        loop {
            let frame = self.conn.read_frame();
            match frame.code() {
                b'E' => failed = true,
                b'D' => {
                    let BackendMessage::DataRow(DataRow { values }) =
                        BackendMessage::decode(&frame.bytes).unwrap()
                    else {
                        unreachable!()
                    };
                    let first = values.iter().next().flatten().unwrap_or(b"");
                    rows.push(String::from_utf8_lossy(first).into_owned());
                }
                b'Z' => return (failed, frame.body()[0], rows),
                _ => {}
            }
        }
    }

    fn simple(&mut self, sql: &str) -> (bool, u8, Vec<String>) {
        self.simple_bytes(sql.as_bytes())
    }

    fn simple_bytes(&mut self, sql: &[u8]) -> (bool, u8, Vec<String>) {
        let mut out = BytesMut::new();
        Query { sql }.encode(&mut out);
        self.exchange(&out)
    }

    /// Ends any transaction the case left open (commit keeps what a commit would keep), then
    /// reads back the session's state.
    fn observe(&mut self, status: u8) -> Observed {
        match status {
            b'T' => assert!(!self.simple("COMMIT").0),
            b'E' => assert!(!self.simple("ROLLBACK").0),
            _ => {}
        }
        let (failed, _, rows) = self.simple(SNAPSHOT);
        assert!(!failed && rows.len() == 1, "snapshot failed");
        let fields: Vec<&str> = rows[0].split('|').collect();
        let mut observed = Observed::default();
        for name in fields[0].split_whitespace() {
            if TRACKED.contains(&name) {
                observed.tracked_settings.push(name.to_owned());
            } else {
                observed.untracked_settings.push(name.to_owned());
            }
        }
        let labels = ["listen", "temp", "advisory", "cursors", "prepared"];
        for (label, count) in labels.iter().zip(&fields[1..6]) {
            if *count != "0" {
                observed.other.push(label);
            }
        }
        if fields[6] == "t" {
            observed.other.push("role");
        }
        if fields[7] != "0" {
            observed.other.push("placeholder settings");
        }
        observed
    }

    fn reset(&mut self) {
        assert!(!self.simple("DISCARD ALL").0);
        assert!(!self.simple(FIXTURES).0);
    }
}

/// Checks one case; returns a complaint.
fn judge(sql: &[u8], classified: Effects, failed: bool, observed: &Observed) -> Option<String> {
    let shown = String::from_utf8_lossy(sql);
    if observed.pins() && !classified.pins() {
        return Some(format!(
            "MISSED: {shown:?} classified {classified:?} but the server kept {observed:?}"
        ));
    }
    if !observed.tracked_settings.is_empty()
        && !classified.pins()
        && !classified.contains(Effects::SET_TRACKED)
    {
        return Some(format!(
            "MISSED TRACKED: {shown:?} classified {classified:?}, server kept {observed:?}"
        ));
    }
    let conservative = CONSERVATIVE.iter().any(|c| c.as_bytes() == sql);
    if !failed && !conservative && classified.pins() && !observed.pins() {
        return Some(format!(
            "NOT EXACT: {shown:?} classified {classified:?} but succeeded keeping nothing"
        ));
    }
    None
}

#[test]
fn session_state_matches_a_real_server() {
    let mut session = Session::start();
    let mut complaints = Vec::new();
    let mut ran = 0;
    let mut succeeded = 0;
    let cases = STATEMENTS
        .iter()
        .map(|(sql, _)| sql.as_bytes())
        .chain(LEXING.iter().map(|(sql, _)| *sql));
    for sql in cases {
        // The server reads the Query string up to its first NUL and wants nothing after it.
        let text = sql.split(|&b| b == 0).next().unwrap_or(b"");
        let classified = classify_query(sql);
        let (failed, status, _) = session.simple_bytes(text);
        let observed = session.observe(status);
        ran += 1;
        succeeded += usize::from(!failed);
        complaints.extend(judge(sql, classified, failed, &observed));
        session.reset();
    }
    eprintln!("{ran} cases, {succeeded} succeeded on the server");
    assert!(complaints.is_empty(), "\n{}", complaints.join("\n"));
}

#[test]
fn standard_conforming_strings_off_on_a_real_server() {
    let mut session = Session::start();
    let cases: &[(&[u8], Effects)] = &[
        (
            b"SELECT '\\'; SET work_mem = 1; SELECT 1 -- '",
            Effects::NONE,
        ),
        (
            b"SELECT '\\''; SET work_mem = '2MB'; SELECT ''''",
            Effects::SET,
        ),
        (
            b"SELECT 'a'\n'\\''; SET work_mem = '2MB'; SELECT ''''",
            Effects::SET,
        ),
        (
            b"SELECT B'1', '\\'; SET work_mem = '2MB'; SELECT '';",
            Effects::NONE,
        ),
    ];
    let mut complaints = Vec::new();
    for &(sql, expected) in cases {
        assert!(!session.simple("SET standard_conforming_strings = off").0);
        let mut scanner = StateScanner::query().standard_conforming_strings(false);
        scanner.feed(sql);
        let classified = scanner.finish();
        assert_eq!(classified, expected, "{:?}", String::from_utf8_lossy(sql));
        let (failed, status, _) = session.simple_bytes(sql);
        let mut observed = session.observe(status);
        observed.tracked_settings.clear(); // our own SET above
        complaints.extend(judge(sql, classified, failed, &observed));
        session.reset();
    }
    assert!(complaints.is_empty(), "\n{}", complaints.join("\n"));
}

#[test]
fn extended_protocol_on_a_real_server() {
    let mut session = Session::start();
    let mut complaints = Vec::new();
    let cases: &[(&[u8], &[u8])] = &[
        (b"s1", b"SELECT 1"),
        (b"", b"SELECT 1"),
        (b"", b"SET work_mem = '2MB'"),
        (b"", b"SET LOCAL work_mem = '2MB'"),
        (b"", b"SELECT pg_advisory_lock(1)"),
        (b"", b"LISTEN chan"),
        (b"", b"SET TimeZone = 'UTC'"),
    ];
    for (name, sql) in cases {
        let mut out = BytesMut::new();
        Parse::encode_parts(&mut out, name, sql, &[]);
        let classified = classify_parse(&out[5..]);
        Bind::encode_parts(&mut out, b"", name, &[], &[], &[]);
        Execute {
            portal: b"",
            max_rows: 0,
        }
        .encode(&mut out);
        Sync.encode(&mut out);
        let (failed, status, _) = session.exchange(&out);
        let observed = session.observe(status);
        complaints.extend(judge(sql, classified, failed, &observed));
        session.reset();
    }
    assert!(complaints.is_empty(), "\n{}", complaints.join("\n"));
}
