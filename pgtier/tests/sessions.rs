//! Session behaviour against a real PostgreSQL: auth, errors, parameters, session mode,
//! cancel, dirty servers, failures, bad input, reload and shutdown.

mod common;

use std::time::{Duration, Instant};

use common::raw::{RawClient, send_cancel};
use common::*;
use pgtier::ShutdownMode;

fn trust_proxy(pg: &LocalPg, mode: &str, pool_size: u32, extra: &str) -> pgtier::ProxyHandle {
    start_proxy(&config_text(
        pg.port(),
        &format!("auth_type = \"trust\"\n{extra}"),
        mode,
        pool_size,
    ))
}

#[test]
fn md5_and_scram_clients_against_a_scram_server() {
    let pg = start_pg(HbaAuth::Scram);
    pg.create_user("alice", "secret").expect("create user");
    let dir = tempdir();
    std::fs::write(dir.join("userlist.txt"), "\"alice\" \"secret\"\n").expect("userlist");
    for auth in ["md5", "scram-sha-256"] {
        let extra = format!("auth_type = \"{auth}\"\nauth_file = \"userlist.txt\"");
        let proxy = start_proxy_in(&dir, &config_text(pg.port(), &extra, "transaction", 2));
        let port = proxy.local_addr().port();
        let (ok, out, err) = psql(
            port,
            "alice",
            "postgres",
            "SELECT current_user",
            Some("secret"),
        );
        assert!(ok, "{auth}: {err}");
        assert_eq!(out, "alice");
        let (ok, _, err) = psql(port, "alice", "postgres", "SELECT 1", Some("wrong"));
        assert!(!ok);
        // PgBouncer's words: PostgreSQL's for md5, its own for a failed SCRAM exchange.
        let expected = match auth {
            "md5" => "password authentication failed",
            _ => "SASL authentication failed",
        };
        assert!(err.contains(expected), "{auth}: {err}");
        proxy.shutdown(ShutdownMode::Immediate);
        proxy.join().expect("exit");
    }
}

#[test]
fn unknown_database_fails_promptly_with_3d000() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 2, "");
    let port = proxy.local_addr().port();
    for db in ["nosuchdb", "notconfigured"] {
        let started = Instant::now();
        let error = RawClient::connect(port, "postgres", db, &[])
            .err()
            .expect("login fails");
        assert_eq!(error.0, "3D000", "{db}: {error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{db} took {:?}",
            started.elapsed()
        );
    }
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn startup_options_reach_the_server() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 2, "forward_startup_options = true");
    let port = proxy.local_addr().port();
    let mut client = RawClient::connect(
        port,
        "postgres",
        "postgres",
        &[
            ("options", "-c statement_timeout=1234"),
            ("search_path", "pg_catalog"),
        ],
    )
    .expect("login");
    assert_eq!(client.query_one("SHOW statement_timeout"), "1234ms");
    assert_eq!(client.query_one("SHOW search_path"), "pg_catalog");
    let mut plain = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    assert_eq!(
        plain.query_one("SHOW statement_timeout"),
        "0",
        "different startup options, different pool"
    );
    assert_eq!(
        client.params.get("client_encoding").map(String::as_str),
        Some("UTF8")
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn tracked_parameters_follow_the_client_across_servers() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 1, "");
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(
        port,
        "postgres",
        "postgres",
        &[("application_name", "alpha")],
    )
    .expect("a");
    let mut b = RawClient::connect(
        port,
        "postgres",
        "postgres",
        &[("application_name", "beta")],
    )
    .expect("b");
    for _ in 0..3 {
        assert_eq!(a.query_one("SHOW application_name"), "alpha");
        assert_eq!(b.query_one("SHOW application_name"), "beta");
    }
    a.query("SET TimeZone = 'Asia/Tokyo'").expect("set");
    assert_eq!(
        b.query_one("SHOW TimeZone"),
        pg.psql("postgres", "SHOW TimeZone").expect("tz").trim()
    );
    assert_eq!(a.query_one("SHOW TimeZone"), "Asia/Tokyo");
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn session_mode_gives_the_real_backend_pid_and_resets() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "session", 1, "");
    let port = proxy.local_addr().port();
    let mut client = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    let pid = client.query_one("SELECT pg_backend_pid()");
    assert_eq!(
        pid,
        client.key.0.to_string(),
        "BackendKeyData pid is the server's"
    );
    client.query("PREPARE p AS SELECT 42").expect("prepare");
    assert_eq!(client.query_one("EXECUTE p"), "42");
    drop(client);
    let mut next = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    assert_eq!(
        next.query_one("SELECT pg_backend_pid()"),
        pid,
        "same server reused"
    );
    assert!(
        next.query("EXECUTE p").is_err(),
        "DISCARD ALL ran between sessions"
    );
    let terminated = pg
        .psql(
            "postgres",
            &format!("SELECT pg_terminate_backend({})", next.key.0),
        )
        .expect("terminate");
    assert_eq!(terminated.trim(), "t");
    assert!(
        next.query("SELECT 1").is_err(),
        "the terminated session ends"
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn cancel_lands_on_the_right_query_within_a_second() {
    let pg = start_pg(HbaAuth::Trust);
    for mode in ["transaction", "session"] {
        let proxy = trust_proxy(&pg, mode, 4, "");
        let port = proxy.local_addr().port();
        let mut victim = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
        let mut bystander = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
        victim.send_query("SELECT pg_sleep(20)");
        bystander.send_query("SELECT pg_sleep(1.5)");
        std::thread::sleep(Duration::from_millis(300));
        let started = Instant::now();
        send_cancel(port, victim.key);
        let error = victim.read_result().expect_err("cancelled");
        assert_eq!(error.0, "57014", "{mode}: {error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{mode}: {:?}",
            started.elapsed()
        );
        assert!(
            bystander.read_result().is_ok(),
            "{mode}: bystander unaffected"
        );
        assert_eq!(victim.query_one("SELECT 1"), "1");
        proxy.shutdown(ShutdownMode::Immediate);
        proxy.join().expect("exit");
    }
}

#[test]
fn client_killed_mid_transaction_leaves_no_dirty_server() {
    let pg = start_pg(HbaAuth::Trust);
    pg.psql("postgres", "CREATE TABLE t(x int)").expect("table");
    let proxy = trust_proxy(&pg, "transaction", 1, "");
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    a.query("BEGIN").expect("begin");
    a.query("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
        .expect("lock");
    let pid_a = a.query_one("SELECT pg_backend_pid()");
    drop(a);
    let mut b = RawClient::connect(port, "postgres", "postgres", &[]).expect("b");
    b.stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
    assert_eq!(
        b.query_one("SELECT pg_backend_pid()"),
        pid_a,
        "same server, rolled back"
    );
    assert_eq!(
        b.query_one("SELECT pg_current_xact_id_if_assigned() IS NULL"),
        "t"
    );
    assert_eq!(
        b.query_one("SELECT count(*) FROM pg_locks WHERE relation = 't'::regclass"),
        "0"
    );
    assert_eq!(b.query_one("SELECT count(*) FROM t"), "0");
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn client_dropped_during_sleep_and_next_client_served_at_once() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 1, "");
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    a.send_query("SELECT pg_sleep(30)");
    std::thread::sleep(Duration::from_millis(200));
    drop(a);
    let started = Instant::now();
    let mut b = RawClient::connect(port, "postgres", "postgres", &[]).expect("b");
    assert_eq!(b.query_one("SELECT 1"), "1");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        started.elapsed()
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn server_killed_gives_an_error_and_the_pool_recovers() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "session", 2, "server_login_retry = 1");
    let port = proxy.local_addr().port();
    let mut a = RawClient::connect(port, "postgres", "postgres", &[]).expect("a");
    assert_eq!(a.query_one("SELECT 1"), "1");
    pg.psql("postgres", "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()").expect("kill");
    assert!(a.query("SELECT 1").is_err(), "the client sees the failure");
    let mut b = RawClient::connect(port, "postgres", "postgres", &[]).expect("pool recovers");
    assert_eq!(b.query_one("SELECT 2"), "2");
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn garbage_and_truncated_packets_close_only_that_client() {
    use std::io::{Read, Write};
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 2, "");
    let port = proxy.local_addr().port();
    let mut good = RawClient::connect(port, "postgres", "postgres", &[]).expect("good");
    let mut seed = 0x1234_5678u32;
    for round in 0..20 {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(3))).ok();
        let bytes: Vec<u8> = (0..64 + round * 13)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                seed as u8
            })
            .collect();
        let _ = stream.write_all(&bytes);
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply);
    }
    // A logged-in client that sends a message with a broken length.
    let mut bad = RawClient::connect(port, "postgres", "postgres", &[]).expect("bad");
    bad.stream.write_all(&[b'Q', 0, 0, 0, 1]).expect("write");
    let error = bad.read_result().expect_err("error");
    assert_eq!(error.0, "08P01");
    // A truncated startup packet followed by a close.
    let mut truncated = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    truncated.write_all(&[0, 0, 0, 40, 0, 3]).expect("write");
    drop(truncated);
    assert_eq!(good.query_one("SELECT 7"), "7");
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn reload_adds_a_database_without_dropping_clients() {
    let pg = start_pg(HbaAuth::Trust);
    let dir = tempdir();
    let text = config_text(pg.port(), "auth_type = \"trust\"", "transaction", 2);
    let proxy = start_proxy_in(&dir, &text);
    let port = proxy.local_addr().port();
    let mut client = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    assert!(RawClient::connect(port, "postgres", "added", &[]).is_err());
    let reloaded = text.replace("listen_port", "# listen_port")
        + &format!(
            "\n[databases.added]\nhost = \"127.0.0.1\"\nport = {}\ndbname = \"postgres\"\n",
            pg.port()
        );
    let reloaded = reloaded.replace("# listen_port", "listen_port");
    std::fs::write(dir.join("pgtier.toml"), &reloaded).expect("write");
    let config = pgtier_core::config::Config::load(dir.join("pgtier.toml")).expect("valid");
    proxy.reload(config).expect("reload");
    assert!(wait_until(Duration::from_secs(2), || RawClient::connect(
        port,
        "postgres",
        "added",
        &[]
    )
    .is_ok()));
    assert_eq!(client.query_one("SELECT 3"), "3", "existing client kept");
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn graceful_shutdown_waits_for_clients() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 2, "");
    let port = proxy.local_addr().port();
    let mut client = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    proxy.shutdown(ShutdownMode::WaitForClients);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!proxy.is_finished(), "still serving its client");
    assert_eq!(client.query_one("SELECT 5"), "5");
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
            || RawClient::connect(port, "postgres", "postgres", &[]).is_err()
    );
    drop(client);
    assert!(wait_until(Duration::from_secs(3), || proxy.is_finished()));
    proxy.join().expect("exit");
}

#[test]
fn sigint_style_shutdown_waits_for_the_running_transaction() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 2, "");
    let port = proxy.local_addr().port();
    let mut busy = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    busy.query("BEGIN").expect("begin");
    proxy.shutdown(ShutdownMode::WaitForTransactions);
    std::thread::sleep(Duration::from_millis(400));
    assert!(!proxy.is_finished());
    assert_eq!(busy.query_one("SELECT 9"), "9", "the transaction goes on");
    let _ = busy.query("COMMIT");
    assert!(wait_until(Duration::from_secs(3), || proxy.is_finished()));
    proxy.join().expect("exit");
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "pgtier-shard-test-{}-{}",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::create_dir_all(&dir).expect("tempdir");
    dir
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[test]
fn cancel_reaches_the_owning_shard_from_any_shard() {
    let pg = start_pg(HbaAuth::Trust);
    let text = config_text(pg.port(), "auth_type = \"trust\"", "transaction", 8)
        .replace("workers = 1", "workers = 2");
    let proxy = start_proxy(&text);
    let port = proxy.local_addr().port();
    // SO_REUSEPORT spreads connections (and cancel connections) over both shards, so some
    // cancels arrive on the shard that does not own the client and go through its mailbox.
    for round in 0..6 {
        let mut victim = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
        victim.send_query("SELECT pg_sleep(20)");
        std::thread::sleep(Duration::from_millis(150));
        let started = Instant::now();
        send_cancel(port, victim.key);
        let error = victim.read_result().expect_err("cancelled");
        assert_eq!(error.0, "57014", "round {round}: {error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "round {round}: {:?}",
            started.elapsed()
        );
    }
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn timeouts_close_with_pgbouncer_names() {
    let pg = start_pg(HbaAuth::Trust);
    let extra = "query_wait_timeout = 1\nidle_transaction_timeout = 2\nclient_idle_timeout = 2";
    let proxy = trust_proxy(&pg, "transaction", 1, extra);
    let port = proxy.local_addr().port();
    // idle_transaction_timeout: a client sitting in BEGIN loses its connection.
    let mut idle_tx = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    idle_tx.query("BEGIN").expect("begin");
    // query_wait_timeout: with the only server held, a second client's query waits and fails.
    let mut waiter = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    let started = Instant::now();
    let error = waiter.query("SELECT 1").expect_err("wait timeout");
    assert!(error.1.contains("query_wait_timeout"), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(1600));
    assert!(
        idle_tx.query("SELECT 1").is_err(),
        "idle in transaction client was closed"
    );
    // The server held by that transaction was closed, not pooled dirty: a new client works.
    let mut fresh = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    assert_eq!(
        fresh.query_one("SELECT pg_current_xact_id_if_assigned() IS NULL"),
        "t"
    );
    // client_idle_timeout: an idle client is closed after 2 s.
    std::thread::sleep(Duration::from_millis(2600));
    assert!(fresh.query("SELECT 1").is_err(), "idle client was closed");
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn query_timeout_cancels_and_closes() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 1, "query_timeout = 1");
    let port = proxy.local_addr().port();
    let mut slow = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    let started = Instant::now();
    assert!(slow.query("SELECT pg_sleep(10)").is_err());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let mut next = RawClient::connect(port, "postgres", "postgres", &[]).expect("login");
    next.stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .ok();
    assert_eq!(
        next.query_one("SELECT 1"),
        "1",
        "the pool slot came back promptly"
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn pool_budget_moves_between_shards() {
    let pg = start_pg(HbaAuth::Trust);
    let text = config_text(
        pg.port(),
        "auth_type = \"trust\"\nquery_wait_timeout = 5",
        "transaction",
        1,
    )
    .replace("workers = 1", "workers = 2");
    let proxy = start_proxy(&text);
    let port = proxy.local_addr().port();
    // Clients land on both shards (SO_REUSEPORT); the single server slot must follow the
    // demand instead of sitting idle on the shard that used it last.
    let mut clients: Vec<RawClient> = (0..8)
        .map(|_| RawClient::connect(port, "postgres", "postgres", &[]).expect("login"))
        .collect();
    for round in 0..3 {
        for (index, client) in clients.iter_mut().enumerate() {
            let started = Instant::now();
            assert_eq!(
                client.query_one("SELECT 1"),
                "1",
                "round {round} client {index}"
            );
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "round {round} client {index} waited {:?}",
                started.elapsed()
            );
        }
    }
    let servers = pg
        .psql("postgres", "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
        .expect("psql");
    assert!(
        servers.trim().parse::<u32>().unwrap_or(99) <= 1,
        "budget exceeded: {servers}"
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}

#[test]
fn admin_console_answers_show_commands() {
    let pg = start_pg(HbaAuth::Trust);
    let proxy = trust_proxy(&pg, "transaction", 2, "admin_users = [\"postgres\"]");
    let port = proxy.local_addr().port();
    let (ok, out, err) = psql(port, "postgres", "pgtier", "SHOW VERSION", None);
    assert!(ok, "{err}");
    assert!(out.contains("pgtier"), "{out}");
    let (ok, _, err) = psql(port, "postgres", "postgres", "SELECT 1", None);
    assert!(ok, "{err}");
    let (ok, out, err) = psql(port, "postgres", "pgtier", "SHOW CLASS_STATS", None);
    assert!(ok, "{err}");
    assert!(!out.is_empty());
    let (ok, out, err) = psql(port, "postgres", "pgtier", "SHOW STATS", None);
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|line| line.starts_with("postgres|")),
        "{out}"
    );
    let (ok, _, err) = psql(port, "nobody", "pgtier", "SHOW VERSION", None);
    assert!(!ok);
    assert!(err.contains("not allowed"), "PgBouncer's refusal: {err}");
    let (ok, out, err) = psql(port, "postgres", "pgbouncer", "SHOW VERSION", None);
    assert!(
        ok && out.contains("pgtier"),
        "pgbouncer is the console: {err}"
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
}
