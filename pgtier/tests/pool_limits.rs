//! PgBouncer's server limits and checks against a real PostgreSQL: `max_db_connections`,
//! `max_user_connections`, the reserve pool, `server_reset_query_always`, the idle-server
//! check, and startup values PostgreSQL itself refuses.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::raw::RawClient;
use common::*;

/// Client backends PostgreSQL sees that match `filter`, besides the counting ones: each
/// count is a new psql, and the backend of the previous one may still be exiting when the
/// next looks, so they all carry an application_name that the count leaves out.
fn backends(pg: &LocalPg, filter: &str) -> u32 {
    let sql = format!(
        "SET application_name = 'pgtier-test-counter'; \
         SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' \
         AND pid <> pg_backend_pid() AND application_name <> 'pgtier-test-counter' \
         AND {filter}"
    );
    let out = pg.psql("postgres", &sql).expect("psql");
    out.trim().parse().unwrap_or(u32::MAX)
}

/// Runs one psql per (user, database) at once, each sending `sql`; returns whether all
/// succeeded and the most backends matching `filter` seen meanwhile.
fn run_concurrently(
    pg: &LocalPg,
    port: u16,
    clients: &[(&str, &str)],
    sql: &str,
    filter: &str,
) -> (bool, u32) {
    let failures = Arc::new(AtomicU32::new(0));
    let handles: Vec<_> = clients
        .iter()
        .map(|(user, db)| {
            let (user, db, sql) = (user.to_string(), db.to_string(), sql.to_string());
            let failures = failures.clone();
            std::thread::spawn(move || {
                let (ok, _, err) = psql(port, &user, &db, &sql, None);
                if !ok {
                    eprintln!("client {user}@{db} failed: {err}");
                    failures.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut most = 0;
    while handles.iter().any(|h| !h.is_finished()) {
        most = most.max(backends(pg, filter));
        std::thread::sleep(Duration::from_millis(30));
    }
    for handle in handles {
        handle.join().expect("client thread");
    }
    (failures.load(Ordering::Relaxed) == 0, most)
}

fn two_workers(text: String) -> String {
    text.replace("workers = 1", "workers = 2")
}

#[test]
fn max_db_connections_caps_servers_across_users_and_shards() {
    let pg = start_pg(HbaAuth::Trust);
    pg.create_user("alice", "secret").expect("alice");
    let text = two_workers(config_text(
        pg.port(),
        "auth_type = \"trust\"\nmax_db_connections = 2\nquery_wait_timeout = 30",
        "transaction",
        10,
    ));
    let proxy = start_proxy(&text);
    let port = proxy.local_addr().port();
    let clients = [
        ("postgres", "postgres"),
        ("alice", "postgres"),
        ("postgres", "postgres"),
        ("alice", "postgres"),
        ("postgres", "postgres"),
        ("alice", "postgres"),
    ];
    let filter = "datname = 'postgres' AND usename IN ('postgres', 'alice')";
    let (ok, most) = run_concurrently(&pg, port, &clients, "SELECT pg_sleep(0.4)", filter);
    assert!(ok, "every client finishes");
    assert!(
        most <= 2,
        "PostgreSQL saw {most} backends over max_db_connections = 2"
    );
    assert!(most >= 1, "the clients ran");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn max_user_connections_caps_servers_across_databases() {
    let pg = start_pg(HbaAuth::Trust);
    pg.create_user("alice", "secret").expect("alice");
    let mut text = two_workers(config_text(
        pg.port(),
        "auth_type = \"trust\"\nquery_wait_timeout = 30",
        "session",
        10,
    ));
    text.push_str(&format!(
        "\n[databases.second]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\n\
         \n[users.alice]\nmax_user_connections = 2\n",
        pg.port()
    ));
    let proxy = start_proxy(&text);
    let port = proxy.local_addr().port();
    let clients = [
        ("alice", "postgres"),
        ("alice", "second"),
        ("alice", "postgres"),
        ("alice", "second"),
        ("alice", "postgres"),
        ("alice", "second"),
    ];
    let (ok, most) = run_concurrently(
        &pg,
        port,
        &clients,
        "SELECT pg_sleep(0.4)",
        "usename = 'alice'",
    );
    assert!(ok, "every client finishes");
    assert!(
        most <= 2,
        "PostgreSQL saw {most} backends over max_user_connections = 2"
    );
    assert!(most >= 1, "the clients ran");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn reserve_pool_opens_extra_servers_for_clients_that_waited() {
    let pg = start_pg(HbaAuth::Trust);
    pg.create_user("alice", "secret").expect("alice");
    let extra = "auth_type = \"trust\"\nreserve_pool_size = 1\nreserve_pool_timeout = 0.2";
    let proxy = start_proxy(&config_text(pg.port(), extra, "transaction", 1));
    let port = proxy.local_addr().port();
    let clients = [("alice", "postgres"); 3];
    let started = Instant::now();
    let (ok, most) = run_concurrently(
        &pg,
        port,
        &clients,
        "SELECT pg_sleep(1.5)",
        "usename = 'alice'",
    );
    let elapsed = started.elapsed();
    assert!(ok, "every client finishes");
    assert_eq!(most, 2, "pool size 1 plus a reserve of 1");
    // One server alone would take three sleeps (4.5 s).
    assert!(elapsed < Duration::from_millis(4200), "took {elapsed:?}");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

fn search_path_seen_by_next_client(reset_always: bool) -> String {
    let pg = start_pg(HbaAuth::Trust);
    let extra = format!("auth_type = \"trust\"\nserver_reset_query_always = {reset_always}");
    let proxy = start_proxy(&config_text(pg.port(), &extra, "transaction", 1));
    let port = proxy.local_addr().port();
    let mut first = RawClient::connect(port, "postgres", "postgres", &[]).expect("first");
    first.query("SET search_path = pg_catalog").expect("set");
    drop(first);
    let mut second = RawClient::connect(port, "postgres", "postgres", &[]).expect("second");
    let seen = second.query_one("SHOW search_path");
    drop(second);
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
    seen
}

#[test]
fn server_reset_query_always_resets_in_transaction_mode() {
    assert_eq!(search_path_seen_by_next_client(true), "\"$user\", public");
    // Without it the client that ran a plain SET kept its server until it left (pinned), and
    // the server was reset then: the setting never reaches the next client either way.
    assert_eq!(search_path_seen_by_next_client(false), "\"$user\", public");
}

#[test]
fn a_server_killed_while_idle_is_replaced_before_a_client_uses_it() {
    let pg = start_pg(HbaAuth::Trust);
    pg.create_user("alice", "secret").expect("alice");
    let extra = "auth_type = \"trust\"\nserver_check_delay = 0";
    let proxy = start_proxy(&config_text(pg.port(), extra, "transaction", 1));
    let port = proxy.local_addr().port();
    let (ok, pid, err) = psql(port, "alice", "postgres", "SELECT pg_backend_pid()", None);
    assert!(ok, "{err}");
    let killed = pg
        .psql(
            "postgres",
            &format!("SELECT pg_terminate_backend({pid}, 5000)"),
        )
        .expect("terminate");
    assert_eq!(killed.trim(), "t");
    let (ok, next_pid, err) = psql(port, "alice", "postgres", "SELECT pg_backend_pid()", None);
    assert!(ok, "the next client gets a live server: {err}");
    assert_ne!(next_pid, pid);
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn a_server_failing_its_check_is_closed_and_replaced() {
    let pg = start_pg(HbaAuth::Trust);
    pg.create_user("alice", "secret").expect("alice");
    let pid_twice = |check_query: &str| {
        let extra = format!(
            "auth_type = \"trust\"\nserver_check_delay = 0\nserver_check_query = \"{check_query}\""
        );
        let proxy = start_proxy(&config_text(pg.port(), &extra, "transaction", 1));
        let port = proxy.local_addr().port();
        let (ok, first, err) = psql(port, "alice", "postgres", "SELECT pg_backend_pid()", None);
        assert!(ok, "{err}");
        let (ok, second, err) = psql(port, "alice", "postgres", "SELECT pg_backend_pid()", None);
        assert!(ok, "{err}");
        proxy.shutdown(pgtier::ShutdownMode::Immediate);
        proxy.join().expect("clean exit");
        (first, second)
    };
    let (first, second) = pid_twice("select 1");
    assert_eq!(first, second, "a server that passes its check is reused");
    let (first, second) = pid_twice("select 1/0");
    assert_ne!(first, second, "a server that fails its check is replaced");
}

#[test]
fn an_invalid_tracked_startup_value_is_refused_with_the_server_error() {
    let pg = start_pg(HbaAuth::Trust);
    for mode in ["transaction", "session"] {
        let proxy = start_proxy(&config_text(pg.port(), "auth_type = \"trust\"", mode, 2));
        let port = proxy.local_addr().port();
        for (name, value) in [("client_encoding", "foo"), ("DateStyle", "bogus")] {
            let refused = RawClient::connect(port, "postgres", "postgres", &[(name, value)]);
            let Err((code, message)) = refused else {
                panic!("{mode}: {name}={value} was welcomed");
            };
            assert_eq!(code, "22023", "{mode}: {message}");
            assert!(message.contains(name), "{message}");
        }
        let bindir = localpg::pg_bindir();
        let output = std::process::Command::new(bindir.join("psql"))
            .args(["-XAtq", "-h", "127.0.0.1", "-p", &port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-c", "SELECT 1"])
            .env("PGCLIENTENCODING", "foo")
            .output()
            .expect("psql runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{mode}: psql was welcomed");
        assert!(stderr.contains("FATAL"), "{mode}: {stderr}");
        // The server that answered is still good for the next client.
        let (ok, out, err) = psql(port, "postgres", "postgres", "SELECT 1", None);
        assert!(ok && out == "1", "{mode}: {err}");
        proxy.shutdown(pgtier::ShutdownMode::Immediate);
        proxy.join().expect("clean exit");
    }
}

#[test]
fn a_server_message_over_max_server_message_bytes_fails_the_client_not_the_proxy() {
    let pg = start_pg(HbaAuth::Trust);
    let extra = "auth_type = \"trust\"\nmax_server_message_bytes = 16384";
    let proxy = start_proxy(&config_text(pg.port(), extra, "transaction", 1));
    let port = proxy.local_addr().port();
    let mut client = RawClient::connect(port, "postgres", "postgres", &[]).expect("connect");
    assert_eq!(client.query_one("SELECT length(repeat('x', 1000))"), "1000");
    let Err((code, message)) = client.query("SELECT repeat('x', 100000)") else {
        panic!("a 100 kB row passed a 16 KiB limit");
    };
    assert_eq!(code, "54000", "{message}");
    assert!(message.contains("max_server_message_bytes"), "{message}");
    // The pool replaces the closed server for the next client.
    let (ok, out, err) = psql(port, "postgres", "postgres", "SELECT 2", None);
    assert!(ok && out == "2", "{err}");
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}

#[test]
fn max_db_connections_holds_under_sustained_load_on_two_workers() {
    let pg = start_pg(HbaAuth::Trust);
    let (ok, out) = pgbench(pg.port(), &["-i", "-s", "1", "-q"]);
    assert!(ok, "pgbench -i: {out}");
    let text = two_workers(config_text(
        pg.port(),
        "auth_type = \"trust\"\nmax_db_connections = 2\nquery_wait_timeout = 20",
        "transaction",
        10,
    ));
    let proxy = start_proxy(&text);
    let port = proxy.local_addr().port();
    let bench =
        std::thread::spawn(move || pgbench(port, &["-S", "-n", "-c", "8", "-j", "2", "-t", "300"]));
    let mut most = 0;
    while !bench.is_finished() {
        most = most.max(backends(
            &pg,
            "datname = 'postgres' AND usename = 'postgres'",
        ));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, out) = bench.join().expect("pgbench thread");
    assert!(ok, "pgbench: {out}");
    assert!(
        out.contains("number of transactions actually processed: 2400/2400"),
        "{out}"
    );
    assert!(
        most <= 2,
        "PostgreSQL saw {most} backends over max_db_connections = 2"
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean exit");
}
