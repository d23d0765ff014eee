//! What real drivers do, and what they must see through pgtier: exactly what PostgreSQL
//! itself would show them. Each test replays a pattern a driver's own test suite caught
//! (psycopg 3, node-postgres): the bytes on the wire are the driver's, sent raw so the test
//! pins down every message the client gets back.

use std::io::Write;
use std::time::Duration;

use pgtier_tests::fixtures::{admin, assert_no_leftover_state, server_and_proxy, sqlstate};
use pgtier_tests::rawwire::{self, RawSession};

const TIMEOUT: Duration = Duration::from_secs(20);

fn login(port: u16) -> RawSession {
    rawwire::login(port, "postgres", "postgres", TIMEOUT).expect("login")
}

fn send(session: &mut RawSession, bytes: &[u8]) {
    session.stream.write_all(bytes).expect("send");
}

/// psycopg's `executemany` in a transaction: Parse/Bind/Describe/Execute per statement, one
/// Sync, then Flush; psycopg names its statements `_pg3_0`, `_pg3_1`... on every connection.
fn executemany(session: &mut RawSession) -> Vec<rawwire::Message> {
    let mut bytes = Vec::new();
    for (n, value) in ["1", "100000"].iter().enumerate() {
        bytes.extend(rawwire::parse_message(
            &format!("_pg3_{n}"),
            "SELECT $1::int",
        ));
        bytes.extend(rawwire::bind_message(&format!("_pg3_{n}"), &[value]));
        bytes.extend(rawwire::describe_portal_message());
        bytes.extend(rawwire::execute_message());
    }
    bytes.extend(rawwire::sync_message());
    bytes.extend(rawwire::flush_message());
    send(session, &bytes);
    session.read_until_ready().expect("executemany")
}

fn errors(messages: &[rawwire::Message]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.tag == b'E')
        .map(|m| format!("{:?} {:?}", m.sqlstate(), m.field(b'M')))
        .collect()
}

/// The next client of a server must be able to use the same statement names: the server
/// was reset (DISCARD ALL answered) before it was handed on, even though the previous client
/// left inside a transaction.
#[test]
fn a_pipelined_executemany_leaves_no_statement_for_the_next_client() {
    for pool_mode in ["session", "transaction"] {
        let (_pg, proxy) = server_and_proxy(|config| config.pool_mode(pool_mode).pool_size(1));
        for round in 0..3 {
            let mut session = login(proxy.port());
            session.simple_query("BEGIN").expect("begin");
            let messages = executemany(&mut session);
            assert_eq!(
                errors(&messages),
                Vec::<String>::new(),
                "{pool_mode} mode, client {round}"
            );
            send(&mut session, &rawwire::terminate_message());
        }
        assert_no_leftover_state(&proxy, 1, pool_mode);
    }
}

/// `pg_terminate_backend()` of a client's own server: the client gets the server's FATAL
/// 57P01 and then the end of the connection, and nothing of pgtier's own.
#[test]
fn a_terminated_backend_is_reported_as_postgres_reports_it() {
    for (pool_mode, in_transaction) in
        [("session", false), ("session", true), ("transaction", true)]
    {
        let (pg, proxy) = server_and_proxy(|config| config.pool_mode(pool_mode));
        let mut session = login(proxy.port());
        let sql = if in_transaction {
            "BEGIN; SELECT pg_backend_pid()"
        } else {
            "SELECT pg_backend_pid()"
        };
        let messages = session.simple_query(sql).expect("pid");
        let pid = RawSession::first_value(&messages).expect("pid");
        admin(&pg, &format!("SELECT pg_terminate_backend({pid})"));
        if in_transaction {
            // A driver finds out at its next query, as it would from PostgreSQL.
            let _ = session
                .stream
                .write_all(&rawwire::query_message("SELECT 1"));
        }
        let (messages, closed) = rawwire::read_until_closed(&mut session.stream, TIMEOUT);
        let context = format!("{pool_mode} mode, in a transaction: {in_transaction}");
        assert!(closed, "{context}: the connection stayed open");
        assert_eq!(
            messages
                .iter()
                .map(|m| (m.tag, m.field(b'V'), m.sqlstate()))
                .collect::<Vec<_>>(),
            [(b'E', Some("FATAL".to_string()), Some("57P01".to_string()))],
            "{context}: expected the server's FATAL alone, got {messages:?}"
        );
    }
}

/// The same through a real driver: rust-postgres reports exactly what it reports when its
/// backend is terminated under a direct connection.
#[test]
fn a_driver_sees_what_it_sees_directly_when_its_backend_is_terminated() {
    let (pg, proxy) = server_and_proxy(|config| config.pool_mode("session"));
    let outcome = |port: u16| {
        let mut client = postgres::Config::new()
            .host("127.0.0.1")
            .port(port)
            .user("postgres")
            .dbname("postgres")
            .connect(postgres::NoTls)
            .expect("connect");
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .expect("pid")
            .get(0);
        admin(&pg, &format!("SELECT pg_terminate_backend({pid})"));
        std::thread::sleep(Duration::from_millis(200));
        let error = client
            .batch_execute("BEGIN")
            .expect_err("the backend is gone");
        (sqlstate(&error), error.to_string(), client.is_closed())
    };
    let direct = outcome(pg.port());
    let through = outcome(proxy.port());
    assert_eq!(through, direct, "through pgtier vs direct");
}

/// Between transactions a transaction-mode client holds no server: terminating the one it
/// used last does not touch it.
#[test]
fn a_terminated_idle_server_is_invisible_in_transaction_mode() {
    let (pg, proxy) = server_and_proxy(|config| config.pool_mode("transaction"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("SELECT 1").expect("first");
    admin(
        &pg,
        // The timeout makes the call wait until the backend has exited: its FATAL and the
        // end of the connection are then in pgtier's socket before the client's next query.
        // Without it the backend may still be idle when that query reaches it, and then
        // the client meets the FATAL, through pgtier as through PgBouncer.
        "SELECT pg_terminate_backend(pid, 20000) FROM pg_stat_activity \
         WHERE datname = 'postgres' AND pid <> pg_backend_pid() AND backend_type = 'client backend'",
    );
    let row = client.query_one("SELECT 2", &[]).expect("next transaction");
    assert_eq!(row.get::<_, i32>(0), 2);
}

/// node-postgres' quick-disconnect test sends Terminate before any startup packet; the
/// postmaster closes such a connection without a reply ("invalid length of startup
/// packet"), and pgtier must neither answer nor log a Rust debug string.
#[test]
fn terminate_before_startup_is_closed_without_a_reply() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut stream = rawwire::connect(proxy.port(), TIMEOUT).expect("connect");
    stream
        .write_all(&rawwire::terminate_message())
        .expect("terminate");
    let (messages, closed) = rawwire::read_until_closed(&mut stream, TIMEOUT);
    assert!(closed, "the connection stayed open");
    assert!(messages.is_empty(), "expected no reply, got {messages:?}");
    let log = proxy.log();
    assert!(
        !log.contains("LengthTooLong") && !log.contains("{ code"),
        "a debug string reached the log: {log}"
    );
}

/// An old protocol version is refused as PostgreSQL refuses it: 0A000.
#[test]
fn an_unsupported_protocol_version_gets_feature_not_supported() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut stream = rawwire::connect(proxy.port(), TIMEOUT).expect("connect");
    let mut packet = 16u32.to_be_bytes().to_vec();
    packet.extend_from_slice(&(2i32 << 16).to_be_bytes());
    packet.extend_from_slice(b"user\0x\0\0\0");
    packet.truncate(16);
    stream.write_all(&packet).expect("startup");
    let (messages, closed) = rawwire::read_until_closed(&mut stream, TIMEOUT);
    assert!(closed, "the connection stayed open");
    assert_eq!(
        messages.iter().map(|m| m.sqlstate()).collect::<Vec<_>>(),
        [Some("0A000".to_string())],
        "{messages:?}"
    );
}

/// psycopg's `conn.read_only = True` outside a transaction in transaction mode: the SET
/// must neither leak to other clients (every later client of that server failed "cannot
/// execute CREATE TABLE in a read-only transaction") nor be lost for the client that made
/// it. The client keeps its server until it leaves; the server is reset then.
#[test]
fn a_set_outside_a_transaction_stays_with_its_client_in_transaction_mode() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_mode("transaction").pool_size(2));
    let mut setter = proxy.connect("postgres", "postgres").expect("connect");
    setter
        .batch_execute("SET default_transaction_read_only TO on")
        .expect("set");
    for round in 0..4 {
        let mut other = proxy.connect("postgres", "postgres").expect("connect");
        other
            .batch_execute(&format!(
                "CREATE TABLE IF NOT EXISTS written_{round}(x int); DROP TABLE written_{round}"
            ))
            .expect("another client's write must not be read-only");
        let shown: String = setter
            .query_one("SHOW default_transaction_read_only", &[])
            .expect("show")
            .get(0);
        assert_eq!(shown, "on", "the client's own SET was lost");
    }
    drop(setter);
    assert_no_leftover_state(&proxy, 2, "after the client that ran SET left");
}
