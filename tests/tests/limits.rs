//! Timeouts and limits with PgBouncer's names: each one configured small, then observed from
//! a client and from the server's pg_stat_activity.

use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{server_and_proxy, server_connections};
use pgtier_tests::wait;

const SHORT: Duration = Duration::from_secs(10);

#[test]
fn query_timeout_cancels_a_long_query() {
    let (_pg, proxy) = server_and_proxy(|config| config.setting("query_timeout", "1"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    let started = Instant::now();
    let outcome = wait::within(SHORT, move || client.batch_execute("SELECT pg_sleep(8)"));
    let elapsed = started.elapsed();
    assert!(
        matches!(outcome, Some(Err(_))),
        "query_timeout did not stop the query: {outcome:?}"
    );
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
}

#[test]
fn idle_transaction_timeout_ends_an_idle_transaction() {
    let (pg, proxy) =
        server_and_proxy(|config| config.pool_size(1).setting("idle_transaction_timeout", "1"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("BEGIN").expect("begin");
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        client.batch_execute("SELECT 1").is_err(),
        "the idle transaction outlived idle_transaction_timeout"
    );
    // The only server is usable again, with no transaction left open.
    let mut next = proxy.connect("postgres", "postgres").expect("next");
    let row = next
        .query_typed_one("SELECT pg_current_xact_id_if_assigned() IS NULL", &[])
        .expect("query");
    assert!(row.get::<_, bool>(0));
    assert_eq!(
        pgtier_tests::fixtures::server_sessions(&pg, "postgres", "idle in transaction"),
        0
    );
}

#[test]
fn client_idle_timeout_closes_idle_clients() {
    let (_pg, proxy) = server_and_proxy(|config| config.setting("client_idle_timeout", "1"));
    let mut idle = proxy.connect("postgres", "postgres").expect("connect");
    idle.batch_execute("SELECT 1").expect("first query");
    let mut busy = proxy.connect("postgres", "postgres").expect("connect");
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(500));
        busy.batch_execute("SELECT 1")
            .expect("an active client is not idle");
    }
    assert!(
        idle.batch_execute("SELECT 1").is_err(),
        "idle client survived client_idle_timeout"
    );
}

#[test]
fn server_idle_timeout_closes_unused_servers() {
    let (pg, proxy) = server_and_proxy(|config| config.setting("server_idle_timeout", "1"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("SELECT 1").expect("query");
    assert!(server_connections(&pg, "postgres") >= 1);
    let closed = wait::until(SHORT, Duration::from_millis(200), || {
        (server_connections(&pg, "postgres") == 0).then_some(())
    });
    assert!(
        closed.is_some(),
        "idle server not closed after server_idle_timeout"
    );
    client
        .batch_execute("SELECT 1")
        .expect("a new server is opened on demand");
}

#[test]
fn server_lifetime_retires_servers_between_transactions() {
    let (pg, proxy) =
        server_and_proxy(|config| config.pool_size(1).setting("server_lifetime", "1"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    let first: i32 = client
        .query_typed_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    let replaced = wait::until(SHORT, Duration::from_millis(300), || {
        let pid: i32 = client
            .query_typed_one("SELECT pg_backend_pid()", &[])
            .ok()?
            .get(0);
        (pid != first).then_some(pid)
    });
    assert!(
        replaced.is_some(),
        "server {first} was never retired by server_lifetime"
    );
    assert!(server_connections(&pg, "postgres") <= 1);
}

#[test]
fn min_pool_size_keeps_servers_open() {
    let (pg, proxy) = server_and_proxy(|config| config.setting("min_pool_size", "3"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client
        .batch_execute("SELECT 1")
        .expect("query creates the pool");
    let filled = wait::until(SHORT, Duration::from_millis(200), || {
        (server_connections(&pg, "postgres") >= 3).then_some(())
    });
    assert!(filled.is_some(), "pool not filled to min_pool_size");
}

#[test]
fn session_mode_resets_a_server_before_the_next_client() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_mode("session").pool_size(1));
    let mut first = proxy.connect("postgres", "postgres").expect("first");
    first
        .batch_execute(
            "SET search_path = pg_catalog; CREATE TEMP TABLE scratch(v int); \
             PREPARE leftover AS SELECT 1",
        )
        .expect("dirty the session");
    let first_pid: i32 = first
        .query_typed_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0);
    drop(first);
    let mut second = proxy.connect("postgres", "postgres").expect("second");
    let row = second
        .query_typed_one(
            "SELECT pg_backend_pid(), current_setting('search_path'), \
             (SELECT count(*) FROM pg_prepared_statements), \
             (SELECT count(*) FROM pg_class WHERE relname = 'scratch' AND relpersistence = 't')",
            &[],
        )
        .expect("inspect");
    let (pid, search_path, prepared, temp_tables): (i32, String, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        pid, first_pid,
        "pool_size 1: the idle server should be reused"
    );
    assert_eq!(search_path, "\"$user\", public", "search_path not reset");
    assert_eq!(
        prepared, 0,
        "prepared statement survived server_reset_query"
    );
    assert_eq!(temp_tables, 0, "temp table survived server_reset_query");
}

#[test]
fn transaction_timeout_ends_a_transaction_with_pgbouncers_words() {
    let (pg, proxy) =
        server_and_proxy(|config| config.pool_size(1).setting("transaction_timeout", "1"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("BEGIN").expect("begin");
    client.batch_execute("SELECT 1").expect("in time");
    std::thread::sleep(Duration::from_millis(1700));
    let error = client
        .batch_execute("SELECT 1")
        .expect_err("the transaction outlived transaction_timeout");
    let message = error
        .as_db_error()
        .map(|db| (db.code().code().to_string(), db.message().to_string()));
    assert_eq!(
        message,
        Some(("08P01".to_string(), "transaction timeout".to_string()))
    );
    // Its server holds no transaction any more; a session outside one is not affected.
    let mut next = proxy.connect("postgres", "postgres").expect("next");
    next.batch_execute("SELECT 1").expect("query");
    std::thread::sleep(Duration::from_millis(1700));
    next.batch_execute("SELECT 1")
        .expect("no transaction, no transaction_timeout");
    assert_eq!(
        pgtier_tests::fixtures::server_sessions(&pg, "postgres", "idle in transaction"),
        0
    );
}
