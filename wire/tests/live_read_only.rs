//! The read-only classifier against a real primary and its streaming replica (PostgreSQL 15,
//! hot standby): every text of the table classified read-only runs on the replica without
//! any error; every text of `REFUSED_BY_STANDBY` (all classified as writes) fails there with
//! 25006, 0A000 or 55000, so the primary is needed for it; and a transaction opened read-only
//! refuses a write the same way on both servers.
//!
//! Texts with `$n` parameters go over the extended protocol (Parse/Bind/Execute/Sync, every
//! parameter bound to the text `1`), the others as one Query message.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;
mod read_only_cases;

use std::time::Duration;

use bytes::BytesMut;
use common::Conn;
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier_wire::auth::{AuthProgress, ClientAuth};
use pgtier_wire::messages::backend::ErrorResponse;
use pgtier_wire::messages::frontend::*;
use pgtier_wire::messages::{BackendMessage, Message};
use pgtier_wire::read_only::{Access, classify};
use read_only_cases::{FIXTURES, READ_ONLY, REFUSED_BY_STANDBY};

/// The first error of an exchange: SQLSTATE and message.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    code: String,
    message: String,
}

struct Session {
    conn: Conn,
}

impl Session {
    fn connect(pg: &LocalPg) -> Session {
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
        Session { conn }
    }

    /// Sends frames up to a Sync or Query; returns the first error and the final
    /// ReadyForQuery status. A COPY FROM STDIN is refused with CopyFail.
    fn exchange(&mut self, out: &BytesMut) -> (Option<Failure>, u8) {
        self.conn.send(out);
        let mut failure = None;
        loop {
            let frame = self.conn.read_frame();
            match frame.code() {
                b'E' => {
                    let BackendMessage::ErrorResponse(ErrorResponse { fields }) =
                        BackendMessage::decode(&frame.bytes).unwrap()
                    else {
                        unreachable!()
                    };
                    let text =
                        |v: Option<&[u8]>| String::from_utf8_lossy(v.unwrap_or(b"")).into_owned();
                    failure.get_or_insert(Failure {
                        code: text(fields.get(b'C')),
                        message: text(fields.message()),
                    });
                }
                b'G' => {
                    let mut fail = BytesMut::new();
                    CopyFail { reason: b"test" }.encode(&mut fail);
                    self.conn.send(&fail);
                }
                b'Z' => return (failure, frame.body()[0]),
                _ => {}
            }
        }
    }

    /// Runs a text (see the module doc), then ends any transaction it left open.
    fn run(&mut self, sql: &str) -> Option<Failure> {
        let mut out = BytesMut::new();
        let params = parameter_count(sql);
        if params == 0 {
            Query {
                sql: sql.as_bytes(),
            }
            .encode(&mut out);
        } else {
            let values: Vec<Option<&[u8]>> = vec![Some(b"1"); params];
            Parse::encode_parts(&mut out, b"", sql.as_bytes(), &[]);
            Bind::encode_parts(&mut out, b"", b"", &[], &values, &[]);
            Execute {
                portal: b"",
                max_rows: 0,
            }
            .encode(&mut out);
            Sync.encode(&mut out);
        }
        let (failure, status) = self.exchange(&out);
        if status != b'I' {
            let mut out = BytesMut::new();
            Query { sql: b"ROLLBACK" }.encode(&mut out);
            assert_eq!(self.exchange(&out), (None, b'I'));
        }
        failure
    }
}

/// The highest `$n` in a text (the cases use parameters only outside strings).
fn parameter_count(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    let mut max = 0;
    for (i, _) in sql.match_indices('$') {
        let digits: String = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .map(|&b| char::from(b))
            .collect();
        if let Ok(n) = digits.parse::<usize>() {
            max = max.max(n);
        }
    }
    max
}

fn standby_refusal(failure: &Failure) -> bool {
    ["25006", "0A000", "55000"].contains(&failure.code.as_str())
        || failure.message.contains("recovery")
        || failure.message.contains("hot standby")
}

struct Servers {
    primary: LocalPg,
    replica: LocalPg,
}

fn servers() -> Servers {
    let primary = LocalPg::start_primary(&PgOptions {
        auth: HbaAuth::Trust,
        ..PgOptions::default()
    })
    .unwrap();
    primary.psql("postgres", FIXTURES).unwrap();
    let replica = LocalPg::start_replica(&primary).unwrap();
    replica
        .wait_caught_up(&primary, Duration::from_secs(60))
        .unwrap();
    assert_eq!(
        replica
            .psql("postgres", "SELECT pg_is_in_recovery()")
            .unwrap(),
        "t"
    );
    Servers { primary, replica }
}

#[test]
fn read_only_texts_run_on_a_hot_standby_and_writes_need_the_primary() {
    let servers = servers();
    let mut replica = Session::connect(&servers.replica);
    let mut primary = Session::connect(&servers.primary);
    let mut complaints = Vec::new();
    for sql in READ_ONLY {
        assert_eq!(classify(sql.as_bytes()), Access::ReadOnly, "{sql:?}");
        if let Some(failure) = replica.run(sql) {
            complaints.push(format!(
                "READ-ONLY FAILED ON THE REPLICA: {sql:?}: {failure:?}"
            ));
        }
    }
    for sql in REFUSED_BY_STANDBY {
        assert_eq!(classify(sql.as_bytes()), Access::Write, "{sql:?}");
        match replica.run(sql) {
            Some(failure) if standby_refusal(&failure) => {}
            other => complaints.push(format!("NOT REFUSED BY THE REPLICA: {sql:?}: {other:?}")),
        }
        // The primary runs it (in a transaction rolled back, so the fixtures stay).
        let wrapped = format!("BEGIN; {sql}; ROLLBACK");
        let wrapped = if sql.starts_with("BEGIN") {
            sql.to_string()
        } else {
            wrapped
        };
        if let Some(failure) = primary.run(&wrapped).filter(standby_refusal) {
            complaints.push(format!("REFUSED BY THE PRIMARY TOO: {sql:?}: {failure:?}"));
        }
    }
    assert!(complaints.is_empty(), "\n{}", complaints.join("\n"));
}

/// A transaction opened read-only refuses a write with the same error on both servers: that
/// is why the whole transaction may go to a replica.
#[test]
fn a_read_only_transaction_refuses_writes_alike_on_both_servers() {
    let servers = servers();
    let mut replica = Session::connect(&servers.replica);
    let mut primary = Session::connect(&servers.primary);
    let openers = [
        "BEGIN READ ONLY",
        "START TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY",
        "BEGIN; SET TRANSACTION READ ONLY",
    ];
    for opener in openers {
        assert_eq!(classify(opener.as_bytes()), Access::ReadOnly);
        for write in [
            "INSERT INTO t VALUES (1)",
            "SELECT nextval('s')",
            "SELECT * FROM t FOR UPDATE",
        ] {
            let sql = format!("{opener}; {write}");
            let on_replica = replica.run(&sql).expect("refused on the replica");
            let on_primary = primary.run(&sql).expect("refused on the primary");
            assert_eq!(on_replica, on_primary, "{sql:?}");
            assert_eq!(on_replica.code, "25006", "{sql:?}");
        }
    }
}
