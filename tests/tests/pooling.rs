//! Pooling under pressure and faults: many clients over few servers, clients that vanish
//! mid-transaction or mid-query, servers that die, cancel requests, and session-mode pids.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{
    admin, server_and_proxy, server_connections, server_sessions, sqlstate,
};
use pgtier_tests::process::{pg_tool, raise_open_file_limit};
use pgtier_tests::{rawwire, wait};
use tokio_postgres::types::Type;

const SHORT: Duration = Duration::from_secs(10);

#[test]
fn a_thousand_clients_share_ten_servers() {
    thousand_clients_over_ten_servers(1);
}

/// The pool size is a limit across all shards: two workers must share the same ten servers,
/// and a server released on one shard must be able to serve a client waiting on the other.
#[test]
fn a_thousand_clients_share_ten_servers_across_two_workers() {
    thousand_clients_over_ten_servers(2);
}

fn thousand_clients_over_ten_servers(workers: usize) {
    const CLIENTS: usize = 1000;
    const POOL: u32 = 10;
    raise_open_file_limit(8192).expect("RLIMIT_NOFILE");
    // All clients finish in a few seconds when pooling works; 60 s bounds a failure.
    let (pg, proxy) = server_and_proxy(|config| {
        let mut config = config.pool_size(POOL).setting("query_wait_timeout", "60");
        config.max_client_conn = 1100;
        config.workers = workers;
        config
    });
    admin(&pg, "CREATE TABLE hits(client int)");
    let port = proxy.port();
    // Sample the server's view while the clients run: never more than POOL connections.
    let peak_servers = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop_sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak_servers.clone(), stop_sampling.clone());
        let server_port = pg.port();
        std::thread::spawn(move || {
            let mut admin_client = postgres::Config::new()
                .host("127.0.0.1")
                .port(server_port)
                .user("postgres")
                .dbname("template1")
                .connect(postgres::NoTls)
                .expect("admin connection");
            let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = 'postgres' \
                       AND backend_type = 'client backend'";
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(row) = admin_client.query_one(sql, &[]) {
                    let count = u64::try_from(row.get::<_, i64>(0)).unwrap_or(0);
                    peak.fetch_max(count, std::sync::atomic::Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let started = Instant::now();
    let outcome = runtime.block_on(async move {
        let mut tasks = Vec::with_capacity(CLIENTS);
        for client_number in 0..CLIENTS {
            tasks.push(tokio::spawn(async move {
                let config = format!(
                    "host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=60"
                );
                let (client, connection) =
                    tokio_postgres::connect(&config, tokio_postgres::NoTls).await?;
                tokio::spawn(connection);
                let number = i32::try_from(client_number).unwrap_or(-1);
                // A transaction that holds its server for a moment, so clients must queue.
                client
                    .batch_execute(&format!(
                        "BEGIN; INSERT INTO hits VALUES ({number}); SELECT pg_sleep(0.005); COMMIT"
                    ))
                    .await?;
                // Unnamed statements only: a named one prepared in one transaction may be
                // executed on another server in transaction mode.
                let row = client
                    .query_typed("SELECT $1::int + 1", &[(&number, Type::INT4)])
                    .await?
                    .remove(0);
                assert_eq!(row.get::<_, i32>(0), number + 1);
                Ok::<_, tokio_postgres::Error>(())
            }));
        }
        let mut failures = Vec::new();
        for task in tasks {
            match tokio::time::timeout(Duration::from_secs(120), task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(error))) => failures.push(format!("{error:?}")),
                Ok(Err(join_error)) => failures.push(join_error.to_string()),
                Err(_) => failures.push("timed out".to_string()),
            }
        }
        failures
    });
    eprintln!(
        "{CLIENTS} clients, {workers} workers: finished in {:?}",
        started.elapsed()
    );
    stop_sampling.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.join();
    let peak = peak_servers.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        outcome.is_empty(),
        "{} failures, first: {:?}",
        outcome.len(),
        outcome.first()
    );
    assert_eq!(
        admin(&pg, "SELECT count(DISTINCT client) FROM hits"),
        CLIENTS.to_string()
    );
    let servers = server_connections(&pg, "postgres");
    assert!(
        servers <= u64::from(POOL),
        "{servers} server connections for pool_size {POOL}"
    );
    assert!(
        peak <= u64::from(POOL),
        "peak of {peak} server connections for pool_size {POOL}"
    );
}

#[test]
fn a_client_killed_mid_transaction_leaves_no_transaction_or_lock() {
    let (pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    admin(&pg, "CREATE TABLE guarded(v int)");
    // A real psql, killed with SIGKILL while its transaction holds a lock and a write.
    let mut psql = pg_tool("psql")
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(proxy.conninfo("postgres", "postgres"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("psql");
    let mut input = psql.stdin.take().expect("stdin");
    input
        .write_all(
            b"BEGIN;\nINSERT INTO guarded VALUES (1);\nLOCK TABLE guarded IN ACCESS EXCLUSIVE MODE;\n\\echo locked\n",
        )
        .expect("send");
    input.flush().expect("flush");
    let locked = wait::until(SHORT, Duration::from_millis(20), || {
        let sql = "SELECT count(*) FROM pg_locks WHERE relation = 'guarded'::regclass AND mode = 'AccessExclusiveLock'";
        (admin(&pg, sql) == "1").then_some(())
    });
    assert!(
        locked.is_some(),
        "psql never took the lock through the proxy"
    );
    psql.kill().expect("kill psql");
    let _ = psql.wait();
    drop(input);

    // The next client gets the only server: no open transaction, no lock, no row.
    let mut next = proxy.connect("postgres", "postgres").expect("next client");
    let started = Instant::now();
    let row = wait::within(SHORT, move || {
        let row = next
            .query_one(
                "SELECT pg_current_xact_id_if_assigned() IS NULL, \
                 (SELECT count(*) FROM guarded), \
                 (SELECT count(*) FROM pg_locks WHERE relation = 'guarded'::regclass \
                  AND pid <> pg_backend_pid())",
                &[],
            )
            .map(|row| {
                (
                    row.get::<_, bool>(0),
                    row.get::<_, i64>(1),
                    row.get::<_, i64>(2),
                )
            });
        (row, next)
    })
    .expect("the next client was not served: the lock is still held?");
    let (row, mut next) = row;
    assert_eq!(row.expect("query"), (true, 0, 0), "dirty server reused");
    assert!(started.elapsed() < Duration::from_secs(5));
    next.batch_execute("BEGIN").expect("begin");
    next.batch_execute("INSERT INTO guarded VALUES (2)")
        .expect("insert");
    next.batch_execute("COMMIT").expect("commit");
    assert_eq!(server_sessions(&pg, "postgres", "idle in transaction"), 0);
}

#[test]
fn a_client_dropped_during_a_long_query_does_not_delay_the_next() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut dropped = rawwire::login(proxy.port(), "postgres", "postgres", SHORT).expect("login");
    dropped
        .stream
        .write_all(&rawwire::query_message("SELECT pg_sleep(30)"))
        .expect("send sleep");
    std::thread::sleep(Duration::from_millis(300));
    drop(dropped);

    let started = Instant::now();
    let served = wait::within(Duration::from_secs(10), {
        let config = proxy.pg_config("postgres", "postgres");
        move || -> Result<i32, postgres::Error> {
            let mut next = config.connect(postgres::NoTls)?;
            Ok(next.query_typed_one("SELECT 42", &[])?.get(0))
        }
    });
    let elapsed = started.elapsed();
    assert_eq!(
        served.map(|r| r.ok()),
        Some(Some(42)),
        "next client not served"
    );
    assert!(
        elapsed < Duration::from_secs(3),
        "next client waited {elapsed:?}"
    );
}

/// PgBouncer's `server_login_retry`: a client that needs a server while PostgreSQL is down
/// is not failed by the refused connect; it waits, the pool tries again after
/// `server_login_retry`, and it is served once PostgreSQL is back.
#[test]
fn a_client_waits_through_a_server_restart() {
    let (pg, proxy) = server_and_proxy(|config| config.setting("server_login_retry", "1"));
    pg.stop().expect("stop server");
    let config = proxy.pg_config("postgres", "postgres");
    let waiting = std::thread::spawn(move || {
        let started = Instant::now();
        let answer = config
            .connect(postgres::NoTls)
            .and_then(|mut c| c.query_typed_one("SELECT 7", &[]))
            .map(|row| row.get::<_, i32>(0));
        (answer, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(1500));
    pg.start().expect("restart server");
    let (answer, waited) = waiting.join().expect("client thread");
    assert_eq!(
        answer.ok(),
        Some(7),
        "the client was served once it was back"
    );
    assert!(waited >= Duration::from_millis(1000), "waited {waited:?}");
}

#[test]
fn a_killed_server_errors_its_clients_and_the_pool_recovers() {
    let (pg, proxy) = server_and_proxy(|config| {
        config
            .pool_size(2)
            .setting("server_login_retry", "0.5")
            .setting("server_connect_timeout", "2")
            // A client waits through refused connects (retried every server_login_retry)
            // until the server is back or this ends its wait.
            .setting("query_wait_timeout", "3")
    });
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    assert_eq!(
        client
            .query_typed_one("SELECT 1", &[])
            .expect("q")
            .get::<_, i32>(0),
        1
    );
    client.batch_execute("BEGIN").expect("begin");
    pg.stop_immediate().expect("kill server");

    let outcome = wait::within(SHORT, move || {
        client.query_typed_one("SELECT 1", &[]).map(|_| ())
    });
    let outcome = outcome.expect("the client hung instead of getting an error");
    assert!(outcome.is_err(), "a query on a dead server succeeded");

    // While the server is down, a new client gets an error (at once, or once
    // query_wait_timeout ends its wait) rather than hanging forever.
    let config = proxy.pg_config("postgres", "postgres");
    let down = wait::within(Duration::from_secs(30), move || {
        config
            .connect(postgres::NoTls)
            .and_then(|mut c| c.query_typed_one("SELECT 1", &[]).map(|_| ()))
    });
    assert!(
        matches!(down, Some(Err(_))),
        "expected an error while the server is down: {down:?}"
    );

    pg.start().expect("restart server");
    let recovered = wait::until(Duration::from_secs(20), Duration::from_millis(200), || {
        let mut client = proxy.connect("postgres", "postgres").ok()?;
        let row = client.query_typed_one("SELECT 7", &[]).ok()?;
        Some(row.get::<_, i32>(0))
    });
    assert_eq!(
        recovered,
        Some(7),
        "the pool did not recover after the server came back"
    );
}

#[test]
fn cancel_reaches_the_right_query_within_a_second() {
    for pool_mode in ["transaction", "session"] {
        let (_pg, proxy) = server_and_proxy(|config| config.pool_mode(pool_mode).pool_size(4));
        let mut victim = proxy.connect("postgres", "postgres").expect("victim");
        let mut bystander = proxy.connect("postgres", "postgres").expect("bystander");
        let token = victim.cancel_token();

        let bystander_run = std::thread::spawn(move || {
            let started = Instant::now();
            let result = bystander.query_typed_one("SELECT pg_sleep(2), 'done'::text", &[]);
            (result.map(|row| row.get::<_, String>(1)), started.elapsed())
        });
        let victim_run = std::thread::spawn(move || {
            let result = victim.batch_execute("SELECT pg_sleep(20)");
            let finished = Instant::now();
            let after = victim
                .query_typed_one("SELECT 5", &[])
                .map(|row| row.get::<_, i32>(0));
            (result, finished, after)
        });
        std::thread::sleep(Duration::from_millis(500));
        let cancelled_at = Instant::now();
        token.cancel_query(postgres::NoTls).expect("send cancel");

        let (result, finished, after) = victim_run.join().expect("victim thread");
        let error = result.expect_err("the sleep should be cancelled");
        assert_eq!(
            sqlstate(&error).as_deref(),
            Some("57014"),
            "{pool_mode}: {error:?}"
        );
        let latency = finished.duration_since(cancelled_at);
        assert!(
            latency < Duration::from_secs(1),
            "{pool_mode}: cancel took {latency:?}"
        );
        assert_eq!(after.expect("victim usable after cancel"), 5);

        let (bystander_result, took) = bystander_run.join().expect("bystander thread");
        assert_eq!(
            bystander_result.expect("bystander must not be cancelled"),
            "done",
            "{pool_mode}"
        );
        assert!(took >= Duration::from_secs(2));
    }
}

/// A query waiting for a server (the pool's only one is in another client's transaction)
/// is cancelled by a CancelRequest sent while it waits, as PostgreSQL would cancel it: the
/// cancel is held and follows the query to its server. PgBouncer drops it, and the query
/// runs in full once a server frees up (pgbouncer/pgbouncer#1222). Found by the
/// differential fuzzer (seed 46; docs/compatibility.md).
#[test]
fn a_cancel_sent_while_the_query_waits_for_a_server_cancels_it() {
    let (_pg, proxy) = server_and_proxy(|config| {
        config
            .pool_mode("transaction")
            .pool_size(1)
            .setting("admin_users", "[\"postgres\"]")
    });
    let mut holder = proxy.connect("postgres", "postgres").expect("holder");
    holder.batch_execute("BEGIN").expect("BEGIN");
    let mut victim = proxy.connect("postgres", "postgres").expect("victim");
    let token = victim.cancel_token();
    let victim_run = std::thread::spawn(move || {
        let result = victim.batch_execute("SELECT pg_sleep(30)");
        let after = victim
            .query_typed_one("SELECT 5", &[])
            .map(|row| row.get::<_, i32>(0));
        (result, after)
    });
    let mut console = proxy.connect("pgbouncer", "postgres").expect("console");
    let queued = wait::until(SHORT, Duration::from_millis(20), || {
        let pools = console.simple_query("SHOW POOLS").ok()?;
        pools.iter().find_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row)
                if row.get("database") == Some("postgres")
                    && row.get("cl_waiting") == Some("1") =>
            {
                Some(())
            }
            _ => None,
        })
    });
    assert!(queued.is_some(), "the victim never queued\n{}", proxy.log());
    token.cancel_query(postgres::NoTls).expect("send cancel");
    holder.batch_execute("COMMIT").expect("COMMIT");
    let (result, after) = victim_run.join().expect("victim thread");
    let error = result.expect_err("the queued query was cancelled");
    assert_eq!(
        sqlstate(&error).as_deref(),
        Some("57014"),
        "{error:?}\n{}",
        proxy.log()
    );
    assert_eq!(after.expect("the victim goes on"), 5);
}

#[test]
fn cancel_works_whichever_worker_receives_it() {
    // With two workers the CancelRequest connection lands on either shard (SO_REUSEPORT);
    // several rounds make it very likely that both paths are taken.
    let (_pg, proxy) = server_and_proxy(|config| {
        let mut config = config.pool_size(4);
        config.workers = 2;
        config
    });
    for round in 0..6 {
        let mut victim = proxy.connect("postgres", "postgres").expect("victim");
        let token = victim.cancel_token();
        let run = std::thread::spawn(move || {
            let result = victim.batch_execute("SELECT pg_sleep(20)");
            (result, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(300));
        let cancelled_at = Instant::now();
        token.cancel_query(postgres::NoTls).expect("send cancel");
        let (result, finished) = run.join().expect("victim thread");
        let error = result.expect_err("the sleep should be cancelled");
        assert_eq!(
            sqlstate(&error).as_deref(),
            Some("57014"),
            "round {round}: {error:?}"
        );
        let latency = finished.duration_since(cancelled_at);
        assert!(
            latency < Duration::from_secs(1),
            "round {round}: cancel took {latency:?}"
        );
    }
}

#[test]
fn a_stale_cancel_key_cannot_cancel_the_next_client() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let first = proxy.connect("postgres", "postgres").expect("first");
    let stale = first.cancel_token();
    drop(first);
    let mut second = proxy.connect("postgres", "postgres").expect("second");
    let run = std::thread::spawn(move || {
        second
            .query_typed_one("SELECT pg_sleep(1.5), 1", &[])
            .map(|r| r.get::<_, i32>(1))
    });
    std::thread::sleep(Duration::from_millis(300));
    stale
        .cancel_query(postgres::NoTls)
        .expect("stale cancel is sent (and must be ignored)");
    assert_eq!(
        run.join()
            .expect("thread")
            .expect("second client's query was cancelled"),
        1
    );
}

#[test]
fn session_mode_pid_is_the_server_backend_pid() {
    let (pg, proxy) = server_and_proxy(|config| config.pool_mode("session"));
    let mut session = rawwire::login(proxy.port(), "postgres", "postgres", SHORT).expect("login");
    let pid = session.process_id;
    let reply = session
        .simple_query("SELECT pg_backend_pid()")
        .expect("pid query");
    assert_eq!(
        rawwire::RawSession::first_value(&reply).as_deref(),
        Some(pid.to_string().as_str()),
        "BackendKeyData pid must be the server backend's"
    );
    // Another client (directly on the server) terminates it by that pid.
    assert_eq!(
        admin(&pg, &format!("SELECT pg_terminate_backend({pid})")),
        "t"
    );
    let (messages, closed) = rawwire::read_until_closed(&mut session.stream, SHORT);
    assert!(closed, "the terminated session stayed open");
    assert!(
        messages
            .iter()
            .any(|m| m.tag == b'E' && m.sqlstate().as_deref() == Some("57P01")),
        "expected the server's 57P01 FATAL, got {messages:?}"
    );
    // The proxy keeps serving.
    let mut client = proxy
        .connect("postgres", "postgres")
        .expect("after terminate");
    assert_eq!(
        client
            .query_typed_one("SELECT 1", &[])
            .expect("q")
            .get::<_, i32>(0),
        1
    );
}

#[test]
fn notify_names_the_senders_backend_pid_in_session_mode() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_mode("session"));
    let mut listener =
        rawwire::login(proxy.port(), "postgres", "postgres", SHORT).expect("listener");
    listener.simple_query("LISTEN e2e").expect("listen");
    let mut sender = rawwire::login(proxy.port(), "postgres", "postgres", SHORT).expect("sender");
    sender.simple_query("NOTIFY e2e, 'hi'").expect("notify");
    let reply = listener.simple_query("SELECT 1").expect("poll");
    let notification = reply
        .iter()
        .find(|m| m.tag == b'A')
        .expect("NotificationResponse");
    let pid = i32::from_be_bytes([
        notification.body[0],
        notification.body[1],
        notification.body[2],
        notification.body[3],
    ]);
    assert_eq!(pid, sender.process_id);
}

#[test]
fn waiting_clients_time_out_with_query_wait_timeout() {
    let (_pg, proxy) =
        server_and_proxy(|config| config.pool_size(1).setting("query_wait_timeout", "1"));
    let mut holder = proxy.connect("postgres", "postgres").expect("holder");
    holder
        .batch_execute("BEGIN")
        .expect("begin holds the only server");
    // A raw waiter: rust-postgres' sync client may report the close that follows the
    // FATAL as a bare "connection closed"; the bytes on the wire are what is specified.
    let mut waiter = rawwire::login(proxy.port(), "postgres", "postgres", SHORT).expect("login");
    let started = Instant::now();
    waiter
        .stream
        .write_all(&rawwire::query_message("SELECT 1"))
        .expect("send");
    let (messages, closed) = rawwire::read_until_closed(&mut waiter.stream, SHORT);
    let elapsed = started.elapsed();
    assert!(
        closed,
        "waiter not closed after query_wait_timeout: {messages:?}"
    );
    let error = messages.iter().find(|m| m.tag == b'E');
    assert_eq!(
        error.and_then(|e| e.sqlstate()).as_deref(),
        Some("08P01"),
        "{messages:?}"
    );
    assert!(
        error
            .and_then(|e| e.field(b'M'))
            .is_some_and(|message| message.contains("query_wait_timeout")),
        "{messages:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    holder.batch_execute("COMMIT").expect("holder still fine");
}

#[test]
fn pooled_servers_reapply_client_parameters() {
    // Two clients with different TimeZone on one server in transaction mode each see their own.
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut utc = proxy.connect("postgres", "postgres").expect("utc");
    utc.batch_execute("SET TimeZone = 'UTC'").expect("set");
    let mut tokyo = proxy.connect("postgres", "postgres").expect("tokyo");
    tokyo
        .batch_execute("SET TimeZone = 'Asia/Tokyo'")
        .expect("set");
    for _ in 0..3 {
        let shown = utc.query_typed_one("SHOW TimeZone", &[]).expect("show");
        assert_eq!(shown.get::<_, String>(0), "UTC");
        let shown = tokyo.query_typed_one("SHOW TimeZone", &[]).expect("show");
        assert_eq!(shown.get::<_, String>(0), "Asia/Tokyo");
    }
}
