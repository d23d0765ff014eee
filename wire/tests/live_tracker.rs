//! The response tracker against a real PostgreSQL 15: every message the test sends and
//! receives is fed to `ResponseTracker` in wire order, and the tracker must say "idle" exactly
//! when the server has answered everything outside a transaction — including pipelined
//! extended sequences with an error in the middle, Flush-only sequences, and COPY FROM STDIN
//! issued through the extended protocol (where the server ignores Sync during copy-in).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use bytes::BytesMut;
use common::{Conn, codes};
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier_wire::FrameLimits;
use pgtier_wire::auth::{AuthProgress, ClientAuth};
use pgtier_wire::framing::{Frame, split_message};
use pgtier_wire::messages::backend::TransactionStatus;
use pgtier_wire::messages::frontend::*;
use pgtier_wire::messages::{CopyData, CopyDone, Message};
use pgtier_wire::tracker::{CopyState, ResponseTracker, ServerPhase};

struct Tracked {
    conn: Conn,
    tracker: ResponseTracker,
}

impl Tracked {
    fn send(&mut self, out: &BytesMut) {
        let mut copy = out.clone();
        while let Some(frame) = split_message(&mut copy, &FrameLimits::default()).unwrap() {
            self.tracker.handle_frontend(frame.code()).unwrap();
        }
        self.conn.send(out);
    }

    fn read(&mut self) -> Frame {
        let frame = self.conn.read_frame();
        self.tracker
            .handle_backend(frame.code(), frame.body())
            .unwrap();
        frame
    }

    fn read_until(&mut self, last: u8) -> String {
        let mut seen = String::new();
        loop {
            let frame = self.read();
            seen.push(frame.code() as char);
            if frame.code() == last {
                return seen;
            }
        }
    }

    fn phase(&self) -> ServerPhase {
        self.tracker.phase()
    }
}

fn connect() -> (LocalPg, Tracked) {
    let pg = LocalPg::start_primary(&PgOptions {
        auth: HbaAuth::Scram,
        ..PgOptions::default()
    })
    .unwrap();
    pg.create_user("alice", "pw").unwrap();
    let mut conn = Conn::connect(pg.port());
    let mut out = BytesMut::new();
    StartupMessage::encode_parts(
        &mut out,
        ProtocolVersion::V3_0,
        &[("user", "alice"), ("database", "postgres")],
    );
    conn.send(&out);
    let mut auth = ClientAuth::new(b"alice", b"pw", [1; 18]);
    loop {
        let frame = conn.read_frame();
        let mut reply = BytesMut::new();
        if auth.handle_frame(&frame.bytes, &mut reply).unwrap() == AuthProgress::Authenticated {
            break;
        }
        conn.send(&reply);
    }
    assert!(codes(&conn.read_until_ready()).ends_with('Z'));
    (
        pg,
        Tracked {
            conn,
            tracker: ResponseTracker::new(),
        },
    )
}

fn query(t: &mut Tracked, sql: &str) {
    let mut out = BytesMut::new();
    Query {
        sql: sql.as_bytes(),
    }
    .encode(&mut out);
    t.send(&out);
}

#[test]
fn tracker_follows_a_real_server() {
    let (_pg, mut t) = connect();

    // Pipelined extended sequences, the first failing at Parse: the server skips to its Sync.
    let mut out = BytesMut::new();
    Parse::encode_parts(&mut out, b"", b"SELEC broken", &[]);
    Bind::encode_parts(&mut out, b"", b"", &[], &[], &[]);
    Execute {
        portal: b"",
        max_rows: 0,
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    Parse::encode_parts(&mut out, b"", b"SELECT 1", &[]);
    Bind::encode_parts(&mut out, b"", b"", &[], &[], &[]);
    Execute {
        portal: b"",
        max_rows: 0,
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    t.send(&out);
    assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 2 });
    assert_eq!(t.read_until(b'Z'), "EZ");
    assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
    assert_eq!(t.read_until(b'Z'), "12DCZ");
    assert!(t.tracker.is_idle());

    // Transaction blocks, including a failed one.
    query(&mut t, "BEGIN; SELECT 1");
    t.read_until(b'Z');
    assert_eq!(
        t.phase(),
        ServerPhase::InTransaction(TransactionStatus::InTransaction)
    );
    query(&mut t, "SELECT 1/0");
    t.read_until(b'Z');
    assert_eq!(
        t.phase(),
        ServerPhase::InTransaction(TransactionStatus::Failed)
    );
    query(&mut t, "ROLLBACK");
    t.read_until(b'Z');
    assert!(t.tracker.is_idle());

    // Flush without Sync: answers arrive, but the sequence is still open.
    let mut out = BytesMut::new();
    Parse::encode_parts(&mut out, b"s", b"SELECT $1::int", &[]);
    Describe {
        target: Target::Statement,
        name: b"s",
    }
    .encode(&mut out);
    Flush.encode(&mut out);
    t.send(&out);
    assert_eq!(t.read_until(b'T'), "1tT");
    assert_eq!(t.phase(), ServerPhase::Unsynced);
    let mut out = BytesMut::new();
    Sync.encode(&mut out);
    t.send(&out);
    t.read_until(b'Z');
    assert!(t.tracker.is_idle());

    // COPY FROM STDIN through the extended protocol, as libpq's PQexecParams does it.
    query(&mut t, "CREATE TEMP TABLE t (a int)");
    t.read_until(b'Z');
    let mut out = BytesMut::new();
    Parse::encode_parts(&mut out, b"", b"COPY t FROM STDIN", &[]);
    Bind::encode_parts(&mut out, b"", b"", &[], &[], &[]);
    Describe {
        target: Target::Portal,
        name: b"",
    }
    .encode(&mut out);
    Execute {
        portal: b"",
        max_rows: 0,
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    t.send(&out);
    assert_eq!(t.read_until(b'G'), "12nG");
    assert_eq!(t.phase(), ServerPhase::Copy(CopyState::In));
    let mut out = BytesMut::new();
    CopyData { data: b"1\n" }.encode(&mut out);
    Sync.encode(&mut out); // ignored by the server in copy-in mode
    CopyDone.encode(&mut out);
    t.send(&out);
    assert_eq!(t.phase(), ServerPhase::Unsynced);
    let mut out = BytesMut::new();
    Sync.encode(&mut out);
    t.send(&out);
    assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
    assert_eq!(t.read_until(b'Z'), "CZ");
    assert!(t.tracker.is_idle());

    // COPY TO STDOUT, simple protocol.
    query(&mut t, "COPY (SELECT 1) TO STDOUT");
    assert_eq!(t.read_until(b'H'), "H");
    assert_eq!(t.phase(), ServerPhase::Copy(CopyState::Out));
    assert_eq!(t.read_until(b'Z'), "dcCZ");
    assert!(t.tracker.is_idle());

    // Nothing more may arrive: the server owes nothing.
    t.conn
        .stream
        .set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let mut probe = [0u8; 1];
    let pending = std::io::Read::read(&mut t.conn.stream, &mut probe);
    assert!(
        pending.is_err(),
        "server sent more than the tracker expected"
    );
}
