//! Reads that run again (`read_retries`) against a real primary and real streaming replicas:
//! `pgbench -S` through a reader entry and a replica-set entry sees no error when a replica
//! is stopped at once under it, a read whose replica backend is terminated returns its answer,
//! and a read inside a block or a write on a killed server still fails (and the write is never
//! sent again).

use std::time::Duration;

use pgtier_tests::fixtures::{admin, pgbench_init, start_proxy};
use pgtier_tests::process::{Finished, pg_tool, run};
use pgtier_tests::wait;
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

/// The one pg_sleep read of these tests, recognizable in pg_stat_activity.
const SLOW_READ: &str = "SELECT pg_sleep(3), 'read_retry'";

struct Cluster {
    primary: LocalPg,
    replicas: Vec<LocalPg>,
}

impl Cluster {
    /// A primary with pgbench's tables and `count` streaming replicas, caught up.
    fn start(count: usize) -> Cluster {
        let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
        pgbench_init(&primary, 1);
        admin(&primary, "CREATE TABLE retry_ledger (id int PRIMARY KEY)");
        let replicas: Vec<LocalPg> = (0..count)
            .map(|_| LocalPg::start_replica(&primary).expect("replica"))
            .collect();
        for replica in &replicas {
            replica
                .wait_caught_up(&primary, Duration::from_secs(60))
                .expect("replica catches up");
        }
        Cluster { primary, replicas }
    }

    fn replica_list(&self) -> String {
        let list: Vec<String> = self
            .replicas
            .iter()
            .map(|replica| format!("\"127.0.0.1:{}\"", replica.port()))
            .collect();
        format!("[{}]", list.join(", "))
    }
}

/// pgtier with a reader entry `app` (the primary and the replicas) and a replica-set entry
/// `set` (the replicas, round robin), both on database `postgres`. `pg_sleep` counts as
/// read-only, so a slow read can be sent to a replica.
fn proxy(cluster: &Cluster) -> Pgtier {
    let ports: Vec<u16> = cluster.replicas.iter().map(LocalPg::port).collect();
    let config = ProxyConfig::new(cluster.primary.port())
        .reader_database("app", cluster.primary.port(), &ports, "postgres")
        .database_setting("user", "\"postgres\"")
        .database("set", 0, "postgres")
        .database_setting("replicas", &cluster.replica_list())
        .database_setting("routing", "\"round_robin\"")
        .database_setting("user", "\"postgres\"")
        .setting("health_check_user", "\"postgres\"")
        .setting("admin_users", "[\"postgres\"]")
        .setting("read_only_functions", "[\"pg_sleep\"]")
        .setting("read_retries", "1")
        .pool_size(8);
    start_proxy(config)
}

/// `pgbench -S` for `seconds` through `dbname` with `protocol`, 4 clients.
fn pgbench_select_only(port: u16, dbname: &str, protocol: &str, seconds: u32) -> Finished {
    let mut command = pg_tool("pgbench");
    command
        .args(["-S", "-n", "-M", protocol, "-c", "4", "-j", "2", "-T"])
        .arg(seconds.to_string())
        .args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-U", "postgres", dbname]);
    run(&mut command, Duration::from_secs(120)).expect("pgbench")
}

/// Which of `servers` runs `text`, and its backend's pid, once one does (bounded wait).
fn backend_running<'a>(servers: &[&'a LocalPg], text: &str) -> Option<(&'a LocalPg, String)> {
    backend_running_within(servers, text, Duration::from_secs(20))
}

/// [`backend_running`], waiting at most `limit`.
fn backend_running_within<'a>(
    servers: &[&'a LocalPg],
    text: &str,
    limit: Duration,
) -> Option<(&'a LocalPg, String)> {
    let sql = format!(
        "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query = '{}'",
        text.replace('\'', "''")
    );
    wait::until(limit, Duration::from_millis(5), || {
        servers.iter().find_map(|server| {
            let pid = server.psql("postgres", &sql).ok()?;
            (!pid.is_empty()).then_some((*server, pid))
        })
    })
}

/// Terminates the backend of whichever of `servers` runs `text` (PostgreSQL's FATAL 57P01).
fn terminate(servers: &[&LocalPg], text: &str) {
    let (server, pid) = backend_running(servers, text).expect("the statement runs");
    admin(server, &format!("SELECT pg_terminate_backend({pid})"));
}

/// Runs `sql` (simple protocol) on a fresh session of `dbname` in a thread, after `setup`.
fn in_thread(
    proxy: &Pgtier,
    dbname: &str,
    setup: &'static str,
    sql: &'static str,
) -> std::thread::JoinHandle<Result<(), String>> {
    let mut client = proxy.connect(dbname, "postgres").expect("connect");
    if !setup.is_empty() {
        client.simple_query(setup).expect("setup");
    }
    std::thread::spawn(move || {
        client
            .simple_query(sql)
            .map(drop)
            .map_err(|error| error.to_string())
    })
}

#[test]
fn pgbench_sees_no_error_when_a_replica_is_stopped_under_it() {
    let cluster = Cluster::start(2);
    let proxy = proxy(&cluster);
    let port = proxy.port();
    let runs: Vec<_> = [("app", "simple"), ("app", "extended"), ("set", "simple")]
        .into_iter()
        .map(|(dbname, protocol)| {
            let handle = std::thread::spawn(move || pgbench_select_only(port, dbname, protocol, 6));
            (dbname, protocol, handle)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    // pgbench's reads are short, so none may be running on the replica at the moment it
    // stops: a slow read is made to run there first, so that one read surely dies under way
    // and runs again. Round robin over two replicas places one there within a few tries.
    let mut slow_reads = Vec::new();
    let on_stopped = [&cluster.replicas[0]];
    while backend_running_within(&on_stopped, SLOW_READ, Duration::from_millis(500)).is_none() {
        assert!(slow_reads.len() < 6, "no slow read ran on replica 0");
        slow_reads.push(in_thread(&proxy, "set", "", SLOW_READ));
    }
    cluster.replicas[0]
        .stop_immediate()
        .expect("pg_ctl stop -m immediate");
    for read in slow_reads {
        assert_eq!(read.join().expect("thread"), Ok(()), "{}", proxy.log());
    }
    for (dbname, protocol, handle) in runs {
        let finished = handle.join().expect("pgbench thread");
        let errors: Vec<&str> = finished
            .stderr
            .lines()
            .filter(|line| line.contains("error") || line.contains("aborted"))
            .collect();
        assert!(
            finished.success() && errors.is_empty(),
            "pgbench -S -M {protocol} through {dbname}: {errors:?}\n{}\n{}",
            finished.stdout,
            proxy.log()
        );
        assert!(finished.stdout.contains("number of failed transactions: 0"));
    }
    assert!(
        proxy.log().contains("running it again on another server"),
        "some read ran again: {}",
        proxy.log()
    );
}

#[test]
fn a_terminated_read_answers_and_a_read_in_a_block_or_a_write_still_fails() {
    let cluster = Cluster::start(2);
    let proxy = proxy(&cluster);
    // A read on a replica whose backend is terminated (FATAL 57P01 before any answer) runs
    // on the other replica: the client gets its answer.
    let replicas: Vec<&LocalPg> = cluster.replicas.iter().collect();
    let read = in_thread(&proxy, "app", "", SLOW_READ);
    terminate(&replicas, SLOW_READ);
    assert_eq!(read.join().expect("thread"), Ok(()), "{}", proxy.log());

    // Inside a block it is the client's to handle: 57P01, then the end of the connection.
    let in_block = in_thread(&proxy, "app", "BEGIN READ ONLY", SLOW_READ);
    terminate(&replicas, SLOW_READ);
    assert!(in_block.join().expect("thread").is_err(), "{}", proxy.log());

    // A write whose backend dies is never sent again: the row it inserted in the same
    // implicit transaction is rolled back and stays absent.
    const WRITE: &str = "INSERT INTO retry_ledger VALUES (1); SELECT pg_sleep(3), 'read_retry'";
    let write = in_thread(&proxy, "app", "", WRITE);
    terminate(&[&cluster.primary], WRITE);
    assert!(write.join().expect("thread").is_err());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        admin(&cluster.primary, "SELECT count(*) FROM retry_ledger"),
        "0"
    );
}
