//! Operating the proxy: SIGHUP reload without dropping clients, graceful shutdown (SIGTERM
//! waits for clients, SIGINT waits for open transactions, a second signal is final), and
//! SIGUSR1/SIGUSR2 (PAUSE/RESUME).

use std::time::{Duration, Instant};

use pgtier_tests::config::toml_string;
use pgtier_tests::fixtures::{admin, server_and_proxy, sqlstate};
use pgtier_tests::{TempDir, rawwire, wait};

const SHORT: Duration = Duration::from_secs(10);

#[test]
fn sighup_adds_a_database_without_dropping_clients() {
    let (pg, mut proxy) = server_and_proxy(|config| config);
    admin(&pg, "CREATE DATABASE second");
    let mut existing = proxy.connect("postgres", "postgres").expect("connect");
    existing
        .batch_execute("BEGIN")
        .expect("an open transaction across the reload");
    let error = proxy.connect_error("second", "postgres");
    assert_eq!(sqlstate(&error).as_deref(), Some("3D000"));

    let config = proxy
        .config()
        .clone()
        .database("second", pg.port(), "second");
    proxy.rewrite_config(config).expect("rewrite");
    proxy.reload().expect("SIGHUP");
    let reached = wait::until(SHORT, Duration::from_millis(100), || {
        let mut client = proxy.connect("second", "postgres").ok()?;
        let row = client
            .query_typed_one("SELECT current_database()::text", &[])
            .ok()?;
        Some(row.get::<_, String>(0))
    });
    assert_eq!(
        reached.as_deref(),
        Some("second"),
        "new database not served after SIGHUP"
    );
    existing
        .batch_execute("SELECT 1")
        .expect("existing client survives the reload");
    existing.batch_execute("COMMIT").expect("commit");
}

#[test]
fn a_reload_that_moves_a_database_sends_its_next_transactions_to_the_new_one() {
    let (pg, mut proxy) = server_and_proxy(|config| config.pool_mode("transaction"));
    admin(&pg, "CREATE DATABASE moved_to");
    let config = proxy
        .config()
        .clone()
        .database("app", pg.port(), "postgres");
    proxy.rewrite_config(config).expect("rewrite");
    proxy.reload().expect("SIGHUP");
    let current = |client: &mut postgres::Client| -> String {
        client
            .query_one("SELECT current_database()::text", &[])
            .expect("query")
            .get(0)
    };
    let mut client = wait::until(SHORT, Duration::from_millis(100), || {
        proxy.connect("app", "postgres").ok()
    })
    .expect("app served");
    assert_eq!(current(&mut client), "postgres");
    let mut config = proxy.config().clone();
    for entry in &mut config.databases {
        if entry.name == "app" {
            entry.dbname = "moved_to".to_string();
        }
    }
    proxy.rewrite_config(config).expect("rewrite");
    proxy.reload().expect("SIGHUP");
    // The idle server of the old definition is closed: the same client's next
    // transaction, and a new client's, run on the new database (no server_lifetime wait).
    let moved = wait::until(SHORT, Duration::from_millis(100), || {
        (current(&mut client) == "moved_to").then_some(())
    });
    assert!(
        moved.is_some(),
        "still on the old database\n{}",
        proxy.log()
    );
    let mut fresh = proxy.connect("app", "postgres").expect("connect");
    assert_eq!(current(&mut fresh), "moved_to");
}

#[test]
fn sighup_changes_limits_and_a_bad_file_keeps_the_old_config() {
    let (_pg, mut proxy) = server_and_proxy(|config| config);
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    std::fs::write(proxy.config_path(), "[pgtier]\npool_mode = \"nonsense\"\n").expect("break");
    proxy.reload().expect("SIGHUP");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        proxy.try_exit_status().is_none(),
        "a bad reload must not stop the proxy"
    );
    client.batch_execute("SELECT 1").expect("still serving");
    proxy
        .connect("postgres", "postgres")
        .expect("new clients still served");
    let log = proxy.log();
    assert!(
        log.contains("pool_mode"),
        "the rejected reload should be logged with its key:\n{log}"
    );

    // A good file with a new max_client_conn takes effect.
    let mut config = proxy.config().clone();
    config.max_client_conn = 2;
    proxy.rewrite_config(config).expect("rewrite");
    proxy.reload().expect("SIGHUP");
    let limited = wait::until(SHORT, Duration::from_millis(100), || {
        let second = proxy.connect("postgres", "postgres").ok()?;
        match proxy.connect("postgres", "postgres") {
            Err(error) if sqlstate(&error).as_deref() == Some("53300") => Some(()),
            _ => {
                drop(second);
                None
            }
        }
    });
    assert!(
        limited.is_some(),
        "max_client_conn = 2 not applied by SIGHUP"
    );
    client
        .batch_execute("SELECT 1")
        .expect("existing client survives");
}

#[test]
fn sigterm_waits_for_clients_then_exits() {
    let (pg, mut proxy) = server_and_proxy(|config| config);
    admin(&pg, "CREATE TABLE shutdown_log(v int)");
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client
        .batch_execute("BEGIN; INSERT INTO shutdown_log VALUES (1)")
        .expect("open transaction");
    proxy.signal(libc::SIGTERM).expect("SIGTERM");

    // New clients are refused, the proxy stays up while the client is connected.
    let refused = wait::until(SHORT, Duration::from_millis(100), || {
        proxy.connect("postgres", "postgres").err()
    });
    assert!(
        refused.is_some(),
        "new connections still accepted after SIGTERM"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        proxy.try_exit_status().is_none(),
        "exited while a client was connected"
    );
    client
        .batch_execute("INSERT INTO shutdown_log VALUES (2); COMMIT")
        .expect("finish the transaction");
    client
        .batch_execute("SELECT 1")
        .expect("a connected client is still served");
    drop(client);

    let status = proxy
        .wait_exit(SHORT)
        .expect("proxy did not exit after its last client left");
    assert!(status.success(), "{status}");
    assert_eq!(admin(&pg, "SELECT count(*) FROM shutdown_log"), "2");
}

#[test]
fn sigquit_closes_everything_at_once_and_exits_cleanly() {
    // A Unix socket and a log file, as a PgBouncer user runs it: both must be left tidy.
    let files = TempDir::new("sigquit").expect("tempdir");
    let logfile = files.path().join("pgtier.log");
    let (pg, mut proxy) = server_and_proxy(|config| {
        config
            .setting(
                "unix_socket_dir",
                &toml_string(&files.path().display().to_string()),
            )
            .setting("logfile", &toml_string(&logfile.display().to_string()))
    });
    let socket = files.path().join(format!(".s.PGSQL.{}", proxy.port()));
    assert!(
        socket.exists(),
        "the Unix socket file is there while it runs"
    );
    admin(&pg, "CREATE TABLE quit_log(v int)");
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client
        .batch_execute("BEGIN; INSERT INTO quit_log VALUES (1)")
        .expect("open transaction");
    proxy.signal(libc::SIGQUIT).expect("SIGQUIT");

    // PgBouncer 1.23+: an immediate shutdown, not death by the signal (status 131).
    let status = proxy
        .wait_exit(SHORT)
        .expect("proxy did not exit on SIGQUIT");
    assert!(status.success(), "{status}");
    assert!(
        client.batch_execute("SELECT 1").is_err(),
        "the client's connection was closed"
    );
    // Its open transaction was rolled back by the server, not committed.
    assert_eq!(admin(&pg, "SELECT count(*) FROM quit_log"), "0");
    assert!(!socket.exists(), "the Unix socket file is removed");
    // The log ends with the shutdown, whole lines only: PgBouncer's line for the signal,
    // then the client closed because of it.
    let log = std::fs::read_to_string(&logfile).expect("logfile");
    let signalled = log
        .find("got SIGQUIT, fast exit")
        .unwrap_or_else(|| panic!("no line for SIGQUIT:\n{log}"));
    assert!(
        log[signalled..].contains("closing because: pgtier is shutting down"),
        "the client's close after the signal is logged:\n{log}"
    );
    assert!(log.ends_with('\n'), "the last line is whole:\n{log}");
}

#[test]
fn sigint_waits_for_the_open_transaction_only() {
    // Raw sessions: the proxy may close right after COMMIT's ReadyForQuery (with a FATAL
    // 57P01), and what matters is that COMMIT's own result arrives before that.
    let (pg, mut proxy) = server_and_proxy(|config| config);
    admin(&pg, "CREATE TABLE sigint_log(v int)");
    let login = || rawwire::login(proxy.port(), "postgres", "postgres", SHORT);
    let mut busy = login().expect("busy");
    let mut idle = login().expect("idle");
    idle.simple_query("SELECT 1")
        .expect("idle client did a query");
    let opened = busy
        .simple_query("BEGIN; INSERT INTO sigint_log VALUES (1)")
        .expect("open transaction");
    assert_eq!(ready_status(&opened), Some(b'T'));
    proxy.signal(libc::SIGINT).expect("SIGINT");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        proxy.try_exit_status().is_none(),
        "exited with a transaction in flight"
    );

    let started = Instant::now();
    let committed = busy
        .simple_query("COMMIT")
        .expect("the in-flight transaction may finish");
    assert!(
        committed.iter().any(|m| m.tag == b'C') && ready_status(&committed) == Some(b'I'),
        "COMMIT's result did not arrive: {committed:?}"
    );
    let status = proxy
        .wait_exit(SHORT)
        .expect("no exit after the transaction finished");
    assert!(status.success(), "{status}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(admin(&pg, "SELECT count(*) FROM sigint_log"), "1");
    let (_, closed) = rawwire::read_until_closed(&mut idle.stream, SHORT);
    assert!(closed, "idle client still connected after exit");
}

#[test]
fn sigusr1_pauses_and_sigusr2_resumes() {
    let (_pg, mut proxy) = server_and_proxy(|config| config.pool_mode("transaction"));
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("SELECT 1").expect("before the pause");
    proxy.signal(libc::SIGUSR1).expect("SIGUSR1");
    let logged = wait::until(SHORT, Duration::from_millis(50), || {
        proxy
            .log()
            .contains("got SIGUSR1, pausing all activity")
            .then_some(())
    });
    assert!(logged.is_some(), "{}", proxy.log());
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let paused = std::thread::spawn(move || {
        let result = client.batch_execute("SELECT 2");
        let _ = done_tx.send(());
        result
    });
    assert!(
        done_rx.recv_timeout(Duration::from_millis(700)).is_err(),
        "a transaction ran while paused"
    );
    proxy.signal(libc::SIGUSR2).expect("SIGUSR2");
    assert!(
        done_rx.recv_timeout(SHORT).is_ok(),
        "not resumed by SIGUSR2"
    );
    paused
        .join()
        .expect("thread")
        .expect("the paused transaction ran after RESUME");
    assert!(proxy.log().contains("got SIGUSR2, continuing from PAUSE"));
    // During a shutdown SIGUSR2 is ignored, as PgBouncer does.
    let _idle = proxy.connect("postgres", "postgres").expect("connect");
    proxy.signal(libc::SIGTERM).expect("SIGTERM");
    std::thread::sleep(Duration::from_millis(300));
    proxy.signal(libc::SIGUSR2).expect("SIGUSR2");
    let ignored = wait::until(SHORT, Duration::from_millis(50), || {
        proxy
            .log()
            .contains("got SIGUSR2 while shutting down, ignoring")
            .then_some(())
    });
    assert!(ignored.is_some(), "{}", proxy.log());
    assert!(
        proxy.try_exit_status().is_none(),
        "SIGUSR2 does not end the process"
    );
}

/// The transaction status of the ReadyForQuery that ends `messages`.
fn ready_status(messages: &[rawwire::Message]) -> Option<u8> {
    messages
        .iter()
        .rev()
        .find(|m| m.tag == b'Z')
        .and_then(|m| m.body.first().copied())
}

#[test]
fn a_second_signal_exits_at_once() {
    let (_pg, mut proxy) = server_and_proxy(|config| config);
    let mut client = proxy.connect("postgres", "postgres").expect("connect");
    client.batch_execute("BEGIN").expect("open transaction");
    proxy.signal(libc::SIGTERM).expect("first SIGTERM");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        proxy.try_exit_status().is_none(),
        "first SIGTERM must wait for the client"
    );
    proxy.signal(libc::SIGTERM).expect("second SIGTERM");
    assert!(
        proxy.wait_exit(Duration::from_secs(2)).is_some(),
        "second signal did not exit at once"
    );
    assert!(client.batch_execute("SELECT 1").is_err());
}

/// A shard that panics must take the process down (non-zero exit) rather than leave its
/// listener in the port's SO_REUSEPORT group, where about one new connection in `workers`
/// would hang; every connected client sees its connection end. The panic comes from a hook
/// that only debug builds honour.
#[test]
fn a_panicking_shard_ends_the_process_and_no_client_hangs() {
    let (_pg, mut proxy) = server_and_proxy(|mut config| {
        config.workers = 2;
        config.env.push((
            "PGTIER_TEST_PANIC_AFTER_ACCEPTS".to_string(),
            "3".to_string(),
        ));
        config
    });
    if !proxy.log().contains("test hook armed") {
        eprintln!("skipped: this pgtier build ignores the panic hook (a release build)");
        return;
    }
    let mut sessions = Vec::new();
    for _ in 0..16 {
        match rawwire::login(proxy.port(), "postgres", "postgres", Duration::from_secs(5)) {
            Ok(session) => sessions.push(session),
            Err(_) => break,
        }
        if proxy.try_exit_status().is_some() {
            break;
        }
    }
    let status = proxy
        .wait_exit(Duration::from_secs(10))
        .expect("pgtier exited after a shard panicked");
    assert_eq!(status.code(), Some(70), "{status:?}");
    assert!(proxy.log().contains("a shard panicked"), "{}", proxy.log());
    for mut session in sessions {
        let (_, closed) = rawwire::read_until_closed(&mut session.stream, Duration::from_secs(5));
        assert!(closed, "a client of the dead process was left hanging");
    }
}
