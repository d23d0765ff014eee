//! Live tests of the client side against a real PostgreSQL 15 started by `localpg`:
//! SCRAM-SHA-256 and MD5 logins, and a session that exercises every backend message type,
//! decoding (and re-encoding byte for byte) everything the server sends.
//!
//! With `PGTIER_RECORD_FIXTURES=1` the session test rewrites the committed fixtures in
//! `tests/fixtures/` that `fixtures.rs` checks without a server.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use bytes::BytesMut;
use common::{Conn, codes};
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier_wire::auth::{AuthError, AuthProgress, ClientAuth};
use pgtier_wire::messages::backend::*;
use pgtier_wire::messages::frontend::*;
use pgtier_wire::messages::{BackendMessage, CopyData, CopyDone, Message};
use pgtier_wire::sqlstate;

fn start(auth: HbaAuth, password_encryption: &'static str) -> LocalPg {
    let pg = LocalPg::start_primary(&PgOptions {
        auth,
        password_encryption,
        ..PgOptions::default()
    })
    .expect("start PostgreSQL");
    pg.create_user("alice", "s3cret pw").expect("create user");
    pg
}

/// Sends the startup packet and authenticates; returns the first Authentication error.
fn login(
    conn: &mut Conn,
    version: ProtocolVersion,
    extra: &[(&str, &str)],
    password: &str,
) -> Result<(), String> {
    let mut out = BytesMut::new();
    let mut params = vec![("user", "alice"), ("database", "postgres")];
    params.extend_from_slice(extra);
    StartupMessage::encode_parts(&mut out, version, &params);
    conn.send(&out);
    let mut auth = ClientAuth::new(b"alice", password.as_bytes(), [5; 18]);
    loop {
        let frame = conn.read_frame();
        match frame.code() {
            b'v' => continue,
            b'R' => {
                let mut reply = BytesMut::new();
                let progress = auth
                    .handle_frame(&frame.bytes, &mut reply)
                    .map_err(|e: AuthError| e.to_string())?;
                conn.send(&reply);
                if progress == AuthProgress::Authenticated {
                    break;
                }
            }
            b'E' => {
                let error = ErrorResponse::decode_frame(&frame.bytes).unwrap();
                return Err(
                    String::from_utf8_lossy(error.fields.code().unwrap().as_bytes()).into_owned(),
                );
            }
            other => panic!(
                "unexpected message {:?} during authentication",
                other as char
            ),
        }
    }
    conn.read_until_ready();
    Ok(())
}

fn select_one(conn: &mut Conn) {
    let mut out = BytesMut::new();
    Query { sql: b"SELECT 1" }.encode(&mut out);
    conn.send(&out);
    let frames = conn.read_until_ready();
    assert_eq!(codes(&frames), "TDCZ");
    let row = DataRow::decode_frame(&frames[1].bytes).unwrap();
    assert_eq!(row.values.iter().collect::<Vec<_>>(), vec![Some(&b"1"[..])]);
}

#[test]
fn scram_client_logs_in_to_postgres() {
    let pg = start(HbaAuth::Scram, "scram-sha-256");
    let mut conn = Conn::connect(pg.port());
    login(&mut conn, ProtocolVersion::V3_0, &[], "s3cret pw").expect("login");
    select_one(&mut conn);
    let mut wrong = Conn::connect(pg.port());
    assert_eq!(
        login(&mut wrong, ProtocolVersion::V3_0, &[], "wrong").unwrap_err(),
        sqlstate::INVALID_PASSWORD.as_str()
    );
}

#[test]
fn md5_client_logs_in_to_md5_server() {
    let pg = start(HbaAuth::Md5, "md5");
    let stored = pg
        .psql(
            "postgres",
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'",
        )
        .unwrap();
    assert!(stored.trim().starts_with("md5"), "{stored}");
    let mut conn = Conn::connect(pg.port());
    login(&mut conn, ProtocolVersion::V3_0, &[], "s3cret pw").expect("login");
    select_one(&mut conn);
    let mut wrong = Conn::connect(pg.port());
    assert_eq!(
        login(&mut wrong, ProtocolVersion::V3_0, &[], "wrong").unwrap_err(),
        sqlstate::INVALID_PASSWORD.as_str()
    );
}

/// Every backend message type PostgreSQL 15 sends in an ordinary session.
const EXPECTED_BACKEND_CODES: &str = "vRSKZTDCIEANHdcG1t23snV";

#[test]
fn pg15_session_decodes_every_message() {
    let pg = start(HbaAuth::Scram, "scram-sha-256");
    let mut conn = Conn::connect(pg.port());
    login(
        &mut conn,
        ProtocolVersion::V3_2,
        &[("_pq_.pgtier_probe", "1")],
        "s3cret pw",
    )
    .expect("login");
    let negotiate = NegotiateProtocolVersion::decode_frame(&conn.received[0]).unwrap();
    assert_eq!(negotiate.newest_version, ProtocolVersion::V3_0.0);
    assert_eq!(
        negotiate.unrecognized().collect::<Vec<_>>(),
        vec![&b"_pq_.pgtier_probe"[..]]
    );
    run_session(&mut conn);

    let mut seen = String::new();
    for frame in &conn.received {
        let message = BackendMessage::decode(frame).unwrap_or_else(|e| panic!("{e}: {frame:?}"));
        let mut again = BytesMut::new();
        message.encode(&mut again);
        assert_eq!(
            &again[..],
            &frame[..],
            "re-encoding {:?}",
            message.code() as char
        );
        if !seen.contains(message.code() as char) {
            seen.push(message.code() as char);
        }
    }
    for code in EXPECTED_BACKEND_CODES.chars() {
        assert!(seen.contains(code), "never saw {code:?}; saw {seen}");
    }
    if std::env::var_os("PGTIER_RECORD_FIXTURES").is_some() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        std::fs::write(dir.join("pg15_frontend.bin"), &conn.sent).unwrap();
        std::fs::write(dir.join("pg15_backend.bin"), conn.received.concat()).unwrap();
    }
}

fn query(conn: &mut Conn, sql: &str) -> String {
    let mut out = BytesMut::new();
    Query {
        sql: sql.as_bytes(),
    }
    .encode(&mut out);
    conn.send(&out);
    codes(&conn.read_until_ready())
}

fn run_session(conn: &mut Conn) {
    assert_eq!(
        query(conn, "SELECT 1 AS one, NULL::text AS nothing"),
        "TDCZ"
    );
    assert_eq!(query(conn, ""), "IZ");
    assert_eq!(query(conn, "SELECT 1/0"), "EZ");
    assert_eq!(query(conn, "LISTEN ch; NOTIFY ch, 'payload'"), "CCAZ");
    assert_eq!(query(conn, "DO $$BEGIN RAISE NOTICE 'hello'; END$$"), "NCZ");
    assert_eq!(
        query(conn, "COPY (SELECT generate_series(1, 3)) TO STDOUT"),
        "HdddcCZ"
    );
    copy_in(conn);
    extended(conn);
    portal_suspended_and_no_data(conn);
    function_call(conn);
    let mut out = BytesMut::new();
    Terminate.encode(&mut out);
    conn.send(&out);
}

fn copy_in(conn: &mut Conn) {
    let mut out = BytesMut::new();
    Query {
        sql: b"CREATE TEMP TABLE t (a int); COPY t FROM STDIN",
    }
    .encode(&mut out);
    conn.send(&out);
    assert_eq!(conn.read_frame().code(), b'C');
    let frame = conn.read_frame();
    let response = CopyInResponse::decode_frame(&frame.bytes).unwrap();
    assert_eq!(response.0.column_formats.len(), 1);
    let mut out = BytesMut::new();
    CopyData { data: b"1\n2\n" }.encode(&mut out);
    CopyDone.encode(&mut out);
    conn.send(&out);
    let frames = conn.read_until_ready();
    assert_eq!(codes(&frames), "CZ");
    assert_eq!(
        CommandComplete::decode_frame(&frames[0].bytes)
            .unwrap()
            .rows(),
        Some(2)
    );
}

fn extended(conn: &mut Conn) {
    let mut out = BytesMut::new();
    Parse::encode_parts(&mut out, b"s1", b"SELECT $1::int + 1 AS answer", &[23]);
    Describe {
        target: Target::Statement,
        name: b"s1",
    }
    .encode(&mut out);
    Bind::encode_parts(&mut out, b"p1", b"s1", &[0], &[Some(b"41")], &[0]);
    Describe {
        target: Target::Portal,
        name: b"p1",
    }
    .encode(&mut out);
    Execute {
        portal: b"p1",
        max_rows: 0,
    }
    .encode(&mut out);
    Close {
        target: Target::Statement,
        name: b"s1",
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    conn.send(&out);
    let frames = conn.read_until_ready();
    assert_eq!(codes(&frames), "1tT2TDC3Z");
    let description = RowDescription::decode_frame(&frames[2].bytes).unwrap();
    let field = description.fields().next().unwrap();
    assert_eq!((field.name, field.type_oid), (&b"answer"[..], 23));
    let row = DataRow::decode_frame(&frames[5].bytes).unwrap();
    assert_eq!(row.values.iter().next(), Some(Some(&b"42"[..])));
}

fn portal_suspended_and_no_data(conn: &mut Conn) {
    let mut out = BytesMut::new();
    Parse::encode_parts(&mut out, b"", b"SELECT generate_series(1, 3)", &[]);
    Bind::encode_parts(&mut out, b"", b"", &[], &[], &[]);
    Execute {
        portal: b"",
        max_rows: 1,
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    Parse::encode_parts(&mut out, b"", b"SET application_name = 'pgtier-test'", &[]);
    Describe {
        target: Target::Statement,
        name: b"",
    }
    .encode(&mut out);
    Bind::encode_parts(&mut out, b"", b"", &[], &[], &[]);
    Execute {
        portal: b"",
        max_rows: 0,
    }
    .encode(&mut out);
    Sync.encode(&mut out);
    conn.send(&out);
    assert_eq!(codes(&conn.read_until_ready()), "12DsZ");
    assert_eq!(codes(&conn.read_until_ready()), "1tn2CSZ");
}

fn function_call(conn: &mut Conn) {
    // int4pl(int4, int4), OID 177, with binary arguments and result.
    let mut out = BytesMut::new();
    FunctionCall::encode_parts(
        &mut out,
        177,
        &[1],
        &[Some(&40i32.to_be_bytes()), Some(&2i32.to_be_bytes())],
        1,
    );
    conn.send(&out);
    let frames = conn.read_until_ready();
    assert_eq!(codes(&frames), "VZ");
    let response = FunctionCallResponse::decode_frame(&frames[0].bytes).unwrap();
    assert_eq!(response.result, Some(&42i32.to_be_bytes()[..]));
}
