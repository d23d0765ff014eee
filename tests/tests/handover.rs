//! No state crosses from one client to the next. A client leaves every kind of session state
//! on its server (a plain SET, SQL and protocol prepared statements, a temp table, an
//! advisory lock, LISTEN, a WITH HOLD cursor, default_transaction_read_only) and then leaves
//! by each path a real client takes: idle, inside a transaction, inside a failed one, mid-COPY
//! in both directions, mid-pipeline with and without a Sync, while its query runs, and right
//! after sending a cancel. After each, every server of the pool is held at once and looked at
//! from the inside: each was reset or replaced, in session and in transaction mode.

use std::io::Write;
use std::time::Duration;

use pgtier_tests::fixtures::{LEFTOVER_STATE, assert_no_leftover_state, server_and_proxy};
use pgtier_tests::rawwire::{self, RawSession};
use pgtier_tests::{LocalPg, Pgtier};

const TIMEOUT: Duration = Duration::from_secs(20);
const POOL: usize = 2;

/// Leaves one of each kind of session state. Read-only comes last: it would refuse the
/// CREATE before it.
const DIRTY: &str = "SET work_mem = '7MB'; PREPARE leaked_sql AS SELECT 1; \
    CREATE TEMP TABLE leaked_temp(x int); SELECT pg_advisory_lock(pg_backend_pid()); \
    LISTEN leaked_channel; DECLARE leaked_cursor CURSOR WITH HOLD FOR SELECT 1; \
    SET default_transaction_read_only = on";

/// A way for a client to leave its server.
type Departure = fn(&mut RawSession);

fn departures() -> Vec<(&'static str, Departure)> {
    vec![
        ("idle", |_| {}),
        ("in a transaction", |session| {
            session.simple_query("BEGIN; SELECT 1").expect("begin");
        }),
        ("in a failed transaction", |session| {
            let messages = session.simple_query("BEGIN; SELECT 1/0").expect("begin");
            assert!(messages.iter().any(|m| m.tag == b'E'), "{messages:?}");
        }),
        ("mid COPY FROM STDIN", |session| {
            send(
                session,
                &rawwire::query_message("COPY leaked_temp FROM STDIN"),
            );
            session.read_until(b'G').expect("CopyInResponse");
            send(session, &rawwire::copy_data_message(b"1\n"));
        }),
        ("mid COPY TO STDOUT", |session| {
            let copy = "COPY (SELECT repeat('x', 100) FROM generate_series(1, 2000000)) TO STDOUT";
            send(session, &rawwire::query_message(copy));
            session.read_until(b'd').expect("first CopyData");
        }),
        ("mid pipeline, before its Sync", |session| {
            let mut bytes = rawwire::parse_message("", "SELECT 1");
            bytes.extend(rawwire::bind_message("", &[]));
            bytes.extend(rawwire::execute_message());
            bytes.extend(rawwire::flush_message());
            send(session, &bytes);
            session.read_until(b'C').expect("CommandComplete");
        }),
        ("mid pipeline, results still owed", |session| {
            let mut bytes = Vec::new();
            for _ in 0..3 {
                bytes.extend(rawwire::parse_message("", "SELECT pg_sleep(0.3)"));
                bytes.extend(rawwire::bind_message("", &[]));
                bytes.extend(rawwire::execute_message());
                bytes.extend(rawwire::sync_message());
            }
            send(session, &bytes);
            session.read_until(b'Z').expect("first ReadyForQuery");
        }),
        ("while its query runs", |session| {
            start_long_query(session);
        }),
        ("right after sending a cancel", |session| {
            start_long_query(session);
            let port = session.stream.peer_addr().map(|a| a.port()).unwrap_or(0);
            let mut cancel = rawwire::connect(port, TIMEOUT).expect("cancel connection");
            let request = rawwire::cancel_message(session.process_id, session.secret_key);
            cancel.write_all(&request).expect("cancel request");
        }),
    ]
}

fn send(session: &mut RawSession, bytes: &[u8]) {
    session.stream.write_all(bytes).expect("send");
}

/// Starts a 30 s query and returns once the server is surely running it: the NOTICE before
/// it is flushed to the client by PostgreSQL at once.
fn start_long_query(session: &mut RawSession) {
    let sql = "DO $$BEGIN RAISE NOTICE 'started'; END$$; SELECT pg_sleep(30)";
    send(session, &rawwire::query_message(sql));
    session.read_until(b'N').expect("notice before the sleep");
}

/// Logs a client in, leaves every kind of state on its server, and checks it is there.
fn dirty_client(proxy: &Pgtier) -> RawSession {
    let mut session = rawwire::login(proxy.port(), "postgres", "postgres", TIMEOUT).expect("login");
    let messages = session.simple_query(DIRTY).expect("dirty state");
    assert!(
        messages.iter().all(|m| m.tag != b'E'),
        "setting up state failed: {messages:?}"
    );
    // After the state above, which pins the client in transaction mode: a named statement
    // is prepared on the server the client holds. (Before a pin it would be prepared on
    // each server only when used, as `pg_prepared_statements` would then show.)
    let mut bytes = rawwire::parse_message("leaked_statement", "SELECT 2");
    bytes.extend(rawwire::sync_message());
    send(&mut session, &bytes);
    session.read_until_ready().expect("named Parse");
    let messages = session.simple_query(LEFTOVER_STATE).expect("state check");
    assert_eq!(
        RawSession::first_value(&messages).as_deref(),
        Some(
            "prepared=2 settings=[default_transaction_read_only,work_mem] temp=1 locks=1 \
             listening=1 cursors=1"
        ),
        "the client's own state must stay with it for as long as it is connected"
    );
    session
}

fn every_departure_leaves_clean_servers(pool_mode: &str) {
    let (pg, proxy) = server_and_proxy(|config| {
        config
            .pool_mode(pool_mode)
            .pool_size(POOL as u32)
            .setting("query_wait_timeout", "30")
    });
    for (path, depart) in departures() {
        let mut session = dirty_client(&proxy);
        depart(&mut session);
        drop(session);
        assert_no_leftover_state(&proxy, POOL, &format!("{pool_mode} mode, left {path}"));
    }
    assert_no_stray_backends(&pg);
}

/// Nothing is left running on the server: the cancelled sleeps ended.
fn assert_no_stray_backends(pg: &LocalPg) {
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(30)%' \
               AND state = 'active' AND pid <> pg_backend_pid()";
    let stray = pgtier_tests::wait::until(TIMEOUT, Duration::from_millis(100), || {
        (pg.psql("postgres", sql).ok()?.trim() == "0").then_some(())
    });
    assert!(
        stray.is_some(),
        "a query of a departed client is still running"
    );
}

#[test]
fn no_state_crosses_between_clients_in_session_mode() {
    every_departure_leaves_clean_servers("session");
}

#[test]
fn no_state_crosses_between_clients_in_transaction_mode() {
    every_departure_leaves_clean_servers("transaction");
}

/// A reset that fails leaves the server dirty: it must be closed, never pooled.
#[test]
fn a_server_whose_reset_fails_is_closed_not_reused() {
    let (pg, proxy) = server_and_proxy(|config| {
        config
            .pool_mode("session")
            .pool_size(1)
            .setting("server_reset_query", "'SELECT 1/0'")
    });
    let mut first = rawwire::login(proxy.port(), "postgres", "postgres", TIMEOUT).expect("login");
    let messages = first
        .simple_query("SET work_mem = '7MB'; SELECT pg_backend_pid()")
        .expect("query");
    let first_pid = RawSession::first_value(&messages).expect("pid");
    drop(first);
    let mut second = rawwire::login(proxy.port(), "postgres", "postgres", TIMEOUT).expect("login");
    let messages = second
        .simple_query("SELECT pg_backend_pid()::text || ' ' || current_setting('work_mem')")
        .expect("query");
    let seen = RawSession::first_value(&messages).expect("pid and work_mem");
    assert!(
        !seen.starts_with(&format!("{first_pid} ")),
        "the server whose reset failed was handed on: {seen}"
    );
    assert!(seen.ends_with(" 4MB"), "work_mem leaked: {seen}");
    let gone = format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {first_pid}");
    let closed = pgtier_tests::wait::until(TIMEOUT, Duration::from_millis(100), || {
        (pg.psql("postgres", &gone).ok()?.trim() == "0").then_some(())
    });
    assert!(
        closed.is_some(),
        "the server whose reset failed is still open"
    );
}

/// A pool made smaller by a reload closes the servers it no longer wants as they come back,
/// and those it keeps were reset.
#[test]
fn a_shrinking_pool_keeps_only_reset_servers() {
    let (pg, mut proxy) = server_and_proxy(|config| config.pool_mode("session").pool_size(3));
    let sessions: Vec<RawSession> = (0..3).map(|_| dirty_client(&proxy)).collect();
    let smaller = proxy.config().clone().pool_size(1);
    proxy.rewrite_config(smaller).expect("rewrite config");
    proxy.reload().expect("reload");
    std::thread::sleep(Duration::from_millis(500));
    drop(sessions);
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = 'postgres' \
               AND backend_type = 'client backend' AND pid <> pg_backend_pid()";
    let shrunk = pgtier_tests::wait::until(TIMEOUT, Duration::from_millis(100), || {
        (pg.psql("postgres", sql).ok()?.trim() == "1").then_some(())
    });
    assert!(shrunk.is_some(), "the pool did not shrink to one server");
    assert_no_leftover_state(&proxy, 1, "after the pool shrank");
}
