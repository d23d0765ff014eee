//! Reader entries against a real primary and real streaming replicas: one entry with
//! `primary` and `replicas`, each transaction-mode transaction routed by what it does.
//!
//! Which server answered is read from the server itself: `SELECT setting FROM pg_settings
//! WHERE name = 'port'` is a plain read (no function call), so it is routed like any read
//! and returns the port of the server that ran it.

use std::time::Duration;

use pgtier_tests::fixtures::{admin, pgbench_init, start_proxy};
use pgtier_tests::process::{pg_tool, run};
use pgtier_tests::wait;
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

const WHICH_SERVER: &str = "SELECT setting FROM pg_settings WHERE name = 'port'";

struct Cluster {
    primary: LocalPg,
    replicas: Vec<LocalPg>,
}

impl Cluster {
    /// A primary and `count` streaming replicas, caught up.
    fn start(count: usize) -> Cluster {
        let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
        let replicas: Vec<LocalPg> = (0..count)
            .map(|_| LocalPg::start_replica(&primary).expect("replica"))
            .collect();
        let cluster = Cluster { primary, replicas };
        cluster.caught_up();
        cluster
    }

    fn caught_up(&self) {
        for replica in &self.replicas {
            replica
                .wait_caught_up(&self.primary, Duration::from_secs(30))
                .expect("replica catches up");
        }
    }

    fn replica_ports(&self) -> Vec<u16> {
        self.replicas.iter().map(LocalPg::port).collect()
    }

    /// Delays replay on replica `index` (PostgreSQL's own setting, reloaded).
    fn delay_replay(&self, index: usize, delay: &str) {
        let replica = &self.replicas[index];
        admin(
            replica,
            &format!("ALTER SYSTEM SET recovery_min_apply_delay = '{delay}'"),
        );
        admin(replica, "SELECT pg_reload_conf()");
    }
}

fn reader_proxy(cluster: &Cluster, entry: &[(&str, &str)], global: &[(&str, &str)]) -> Pgtier {
    let mut config = ProxyConfig::new(cluster.primary.port()).reader_database(
        "app",
        cluster.primary.port(),
        &cluster.replica_ports(),
        "postgres",
    );
    for (key, value) in entry {
        config = config.database_setting(key, value);
    }
    config = config
        .setting("health_check_user", "\"postgres\"")
        .setting("admin_users", "[\"postgres\"]");
    for (key, value) in global {
        config = config.setting(key, value);
    }
    start_proxy(config.pool_size(4))
}

fn port_of(client: &mut postgres::Client, sql: &str) -> u16 {
    let row = client.query_one(sql, &[]).expect("which server");
    let text: String = row.get(0);
    text.parse().expect("a port")
}

/// The SHOW REPLICAS rows as (address, excluded) for a reader entry's replicas.
fn excluded(proxy: &Pgtier) -> Vec<(String, String)> {
    let mut console = proxy.connect("pgtier", "postgres").expect("console");
    let rows = console
        .simple_query("SHOW REPLICAS")
        .expect("SHOW REPLICAS");
    let mut out = Vec::new();
    for message in rows {
        if let postgres::SimpleQueryMessage::Row(row) = message {
            let columns: Vec<String> = row.columns().iter().map(|c| c.name().to_string()).collect();
            let at = |name: &str| {
                columns
                    .iter()
                    .position(|c| c == name)
                    .and_then(|i| row.get(i))
                    .unwrap_or("")
                    .to_string()
            };
            out.push((at("replica"), at("excluded")));
        }
    }
    out
}

#[test]
fn every_read_after_a_write_sees_it_and_reads_still_use_replicas() {
    let cluster = Cluster::start(2);
    admin(
        &cluster.primary,
        "CREATE TABLE ryw (id int PRIMARY KEY, v text)",
    );
    cluster.caught_up();
    cluster.delay_replay(1, "2s");
    let proxy = reader_proxy(&cluster, &[("read_your_writes_timeout", "5")], &[]);
    let (primary, delayed) = (cluster.primary.port(), cluster.replicas[1].port());
    let mut on_replica_after_write = 0;
    for id in 0..100 {
        let mut client = proxy.connect("app", "postgres").expect("connect");
        client
            .execute("INSERT INTO ryw VALUES ($1, 'x')", &[&id])
            .expect("insert");
        let rows = client
            .query("SELECT v FROM ryw WHERE id = $1", &[&id])
            .expect("read after write");
        assert_eq!(rows.len(), 1, "session {id} did not see its own write");
        let served_by = port_of(&mut client, WHICH_SERVER);
        assert_ne!(served_by, delayed, "a read went to the replica 2 s behind");
        if served_by != primary {
            on_replica_after_write += 1;
        }
    }
    // Once both replicas have replayed everything, reads without a write reach them.
    cluster.caught_up();
    std::thread::sleep(Duration::from_millis(2500));
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let mut client = proxy.connect("app", "postgres").expect("connect");
        seen.insert(port_of(&mut client, WHICH_SERVER));
    }
    assert!(
        !seen.contains(&primary),
        "plain reads ran on the primary: {seen:?}"
    );
    assert_eq!(seen.len(), 2, "reads spread over both replicas: {seen:?}");
    eprintln!(
        "reads after a write that ran on the caught-up replica: {on_replica_after_write}/100"
    );
}

#[test]
fn writes_reach_only_the_primary_and_selects_spread_by_weight() {
    let cluster = Cluster::start(2);
    pgbench_init(&cluster.primary, 1);
    cluster.caught_up();
    let proxy = reader_proxy(
        &cluster,
        &[("routing", "\"p2c\""), ("weights", "[1, 3]")],
        &[],
    );
    // A write and two reads per transaction, in autocommit (each its own transaction).
    let dir = proxy.dir().to_path_buf();
    let script = dir.join("mixed.sql");
    std::fs::write(
        &script,
        "\\set aid random(1, 100000)\n\
         \\set delta random(-5000, 5000)\n\
         UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n\
         SELECT abalance FROM pgbench_accounts WHERE aid = :aid + 1;\n",
    )
    .expect("script");
    let scans = |pg: &LocalPg| -> i64 {
        admin(
            pg,
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_tables \
             WHERE relname = 'pgbench_accounts'",
        )
        .parse()
        .unwrap_or(0)
    };
    let before: Vec<i64> = cluster.replicas.iter().map(scans).collect();
    let mut command = pg_tool("pgbench");
    command
        .args(["-n", "-c", "4", "-j", "2", "-t", "300", "-f"])
        .arg(&script)
        .arg(proxy.conninfo("app", "postgres"));
    let finished = run(&mut command, Duration::from_secs(120)).expect("pgbench");
    assert!(finished.success(), "pgbench failed: {}", finished.stderr);
    assert!(
        finished
            .stdout
            .contains("number of failed transactions: 0 "),
        "{}",
        finished.stdout
    );
    // Servers leave their statistics when they exit.
    drop(proxy);
    let counts = wait::until(Duration::from_secs(20), Duration::from_millis(200), || {
        let after: Vec<i64> = cluster.replicas.iter().map(scans).collect();
        let delta: Vec<i64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        (delta.iter().sum::<i64>() >= 2400).then_some(delta)
    })
    .expect("the replicas ran the selects");
    let share = counts[1] as f64 / (counts[0] + counts[1]) as f64;
    eprintln!("selects per replica: {counts:?} (share of the weight-3 replica {share:.2})");
    assert!(
        (0.6..=0.9).contains(&share),
        "selects did not follow the weights 1:3: {counts:?}"
    );
}

#[test]
fn a_replica_past_the_lag_cap_gets_no_reads_until_it_catches_up() {
    let cluster = Cluster::start(2);
    admin(&cluster.primary, "CREATE TABLE ticks (at timestamptz)");
    cluster.caught_up();
    let proxy = reader_proxy(
        &cluster,
        &[
            ("max_replica_lag_seconds", "1"),
            ("read_your_writes", "false"),
        ],
        &[],
    );
    let behind = cluster.replicas[1].port();
    cluster.delay_replay(1, "3s");
    // Writes keep coming, so the delayed replica stays about 3 s behind.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = std::sync::Arc::clone(&stop);
        let port = cluster.primary.port();
        std::thread::spawn(move || {
            let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
            let mut client = postgres::Client::connect(&conninfo, postgres::NoTls).expect("writer");
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = client.execute("INSERT INTO ticks VALUES (now())", &[]);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let excluded_now = wait::until(Duration::from_secs(15), Duration::from_millis(100), || {
        excluded(&proxy)
            .into_iter()
            .any(|(replica, excluded)| replica.ends_with(&format!(":{behind}")) && excluded == "t")
            .then_some(())
    });
    assert!(
        excluded_now.is_some(),
        "SHOW REPLICAS: {:?}",
        excluded(&proxy)
    );
    for _ in 0..30 {
        let mut client = proxy.connect("app", "postgres").expect("connect");
        assert_ne!(
            port_of(&mut client, WHICH_SERVER),
            behind,
            "a read reached the replica past the lag cap"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = writer.join();
    let back = wait::until(Duration::from_secs(20), Duration::from_millis(200), || {
        let mut client = proxy.connect("app", "postgres").ok()?;
        (port_of(&mut client, WHICH_SERVER) == behind).then_some(())
    });
    assert!(
        back.is_some(),
        "the replica never got reads again after catching up"
    );
}

#[test]
fn session_mode_and_pinned_sessions_stay_on_the_primary() {
    let cluster = Cluster::start(1);
    let proxy = reader_proxy(&cluster, &[("pool_mode", "\"session\"")], &[]);
    let mut client = proxy.connect("app", "postgres").expect("connect");
    assert_eq!(port_of(&mut client, WHICH_SERVER), cluster.primary.port());
    drop(client);
    drop(proxy);
    let proxy = reader_proxy(&cluster, &[], &[]);
    let mut client = proxy.connect("app", "postgres").expect("connect");
    assert_eq!(
        port_of(&mut client, WHICH_SERVER),
        cluster.replicas[0].port()
    );
    client
        .batch_execute("SET search_path = public")
        .expect("SET pins");
    assert_eq!(
        port_of(&mut client, WHICH_SERVER),
        cluster.primary.port(),
        "a pinned session runs on the primary"
    );
}

#[test]
fn begin_read_only_runs_on_a_replica_and_a_write_in_it_fails_as_on_the_primary() {
    let cluster = Cluster::start(1);
    admin(&cluster.primary, "CREATE TABLE ro (a int)");
    cluster.caught_up();
    // The replica itself must list the table before the test reads it there (a parallel run
    // once saw 42P01 on the replica after its replay LSN had passed the CREATE).
    let visible = wait::until(Duration::from_secs(20), Duration::from_millis(50), || {
        (admin(&cluster.replicas[0], "SELECT to_regclass('ro') IS NOT NULL") == "t").then_some(())
    });
    assert!(visible.is_some(), "the replica never showed table ro");
    let proxy = reader_proxy(&cluster, &[], &[]);
    let mut client = proxy.connect("app", "postgres").expect("connect");
    let mut txn = client
        .build_transaction()
        .read_only(true)
        .start()
        .expect("BEGIN READ ONLY");
    let row = txn.query_one(WHICH_SERVER, &[]).expect("read");
    let port: String = row.get(0);
    assert_eq!(port, cluster.replicas[0].port().to_string());
    let error = txn
        .execute("INSERT INTO ro VALUES (1)", &[])
        .expect_err("a write in a read-only transaction");
    eprintln!("the write failed with: {error:?}");
    assert_eq!(
        error.code().map(|c| c.code().to_string()),
        Some("25006".to_string()),
        "PostgreSQL's own read-only error, as on the primary"
    );
    drop(txn);
    // The session goes on, and its writes run on the primary.
    client
        .execute("INSERT INTO ro VALUES (2)", &[])
        .expect("write");
    assert_eq!(admin(&cluster.primary, "SELECT count(*) FROM ro"), "1");
}
