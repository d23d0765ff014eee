//! Replication connections through pgtier, as PgBouncer 1.23 passes them: a client that
//! logs in with `replication=database` or `replication=true` gets a server of its own,
//! logged in with the same parameters (no SET of pgtier's: a walsender takes none), kept
//! for its whole life whatever the pool mode, and closed when it leaves, never pooled.
//! Checked with psql's replication commands, `pg_basebackup` streaming a whole cluster
//! through pgtier, and the walsenders PostgreSQL shows.

use std::time::Duration;

use pgtier_tests::fixtures::{admin, server_and_proxy};
use pgtier_tests::process::{Finished, pg_tool, run};
use pgtier_tests::wait::until;
use pgtier_tests::{Pgtier, TempDir};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// psql through pgtier with extra conninfo words (`replication=database ...`).
fn psql(proxy: &Pgtier, extra: &str, sql: &str) -> Finished {
    let mut command = pg_tool("psql");
    command
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(format!(
            "{} {extra}",
            proxy.conninfo("postgres", "postgres")
        ))
        .args(["-c", sql]);
    run(&mut command, CLIENT_TIMEOUT).expect("psql")
}

fn psql_ok(proxy: &Pgtier, extra: &str, sql: &str) -> String {
    let finished = psql(proxy, extra, sql);
    assert!(finished.success(), "{extra} {sql}: {finished:?}");
    finished.stdout.trim().to_string()
}

#[test]
fn logical_replication_connections_pass_through_with_their_parameters() {
    // Transaction pooling: replication connections keep their server anyway.
    let (pg, proxy) = server_and_proxy(|config| config);
    let logical = "replication=database application_name=abc options='-c enable_seqscan=off'";
    let system = psql_ok(&proxy, logical, "IDENTIFY_SYSTEM");
    let system_id = admin(&pg, "SELECT system_identifier FROM pg_control_system()");
    assert!(system.starts_with(&format!("{system_id}|")), "{system}");
    // Its parameters reached its walsender at login.
    assert_eq!(psql_ok(&proxy, logical, "SHOW application_name"), "abc");
    assert_eq!(psql_ok(&proxy, logical, "SHOW enable_seqscan"), "off");
    assert_eq!(
        psql_ok(
            &proxy,
            logical,
            "SELECT backend_type FROM pg_stat_activity WHERE pid = pg_backend_pid()"
        ),
        "walsender"
    );
    // An ordinary client of the same database and user gets an ordinary backend, and
    // replication=false is an ordinary client.
    for extra in ["", "replication=false"] {
        assert_eq!(
            psql_ok(
                &proxy,
                extra,
                "SELECT backend_type FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ),
            "client backend",
            "{extra}"
        );
    }
    // No walsender outlives its client: none was pooled.
    let walsenders = || {
        admin(
            &pg,
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'",
        )
    };
    let gone = until(Duration::from_secs(30), Duration::from_millis(50), || {
        (walsenders() == "0").then_some(())
    });
    assert!(gone.is_some(), "walsenders left: {}", walsenders());
    // A value PostgreSQL does not take is refused with its error.
    let bad = psql(&proxy, "replication=maybe", "SELECT 1");
    assert!(!bad.success(), "{bad:?}");
    assert!(
        bad.stderr
            .contains("invalid value for parameter \"replication\": \"maybe\""),
        "{bad:?}"
    );
}

#[test]
fn pg_basebackup_streams_a_cluster_through_pgtier() {
    // A physical replication client names no database: libpq sends `replication`, and, as
    // with PgBouncer, an entry of that name says which server it reaches.
    let (pg, proxy) = server_and_proxy(|config| {
        let port = config.databases[0].port;
        config.database("replication", port, "postgres")
    });
    admin(&pg, "CREATE TABLE copied AS SELECT 42 AS answer");
    let dir = TempDir::new("basebackup").expect("tempdir");
    let target = dir.path().join("backup");
    let mut backup = pg_tool("pg_basebackup");
    backup
        .args(["-h", "127.0.0.1", "-p"])
        .arg(proxy.port().to_string())
        .args([
            "-U",
            "postgres",
            "-X",
            "stream",
            "-c",
            "fast",
            "--no-sync",
            "-D",
        ])
        .arg(&target);
    let finished = run(&mut backup, CLIENT_TIMEOUT).expect("pg_basebackup");
    assert!(finished.success(), "{finished:?}");
    // A whole data directory, with the WAL streamed beside it over a second connection.
    assert!(target.join("PG_VERSION").exists(), "no PG_VERSION");
    assert!(target.join("backup_label").exists(), "no backup_label");
    let wal_files = std::fs::read_dir(target.join("pg_wal"))
        .expect("pg_wal")
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().len() == 24)
        .count();
    assert!(wal_files > 0, "no WAL streamed");
}

#[test]
fn a_replication_client_evicts_an_idle_server_of_its_full_pool() {
    // PgBouncer counts replication servers in the pool of their database and user: with
    // pool_size 1 and an ordinary client's server idle in it, a replication client gets
    // its room, and the idle server is closed ("evicted").
    let (pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let pid = psql_ok(&proxy, "", "SELECT pg_backend_pid()");
    let system = psql_ok(&proxy, "replication=database", "IDENTIFY_SYSTEM");
    let system_id = admin(&pg, "SELECT system_identifier FROM pg_control_system()");
    assert!(system.starts_with(&format!("{system_id}|")), "{system}");
    let alive = || {
        admin(
            &pg,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE pid = {pid}"),
        )
    };
    let gone = until(Duration::from_secs(30), Duration::from_millis(50), || {
        (alive() == "0").then_some(())
    });
    assert!(gone.is_some(), "the idle server {pid} is still open");
    let log = proxy.log();
    assert!(log.contains("closing because: evicted"), "{log}");
}
