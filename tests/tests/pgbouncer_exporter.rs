//! Debian's `prometheus-pgbouncer-exporter` pointed at pgtier's admin console, unchanged: it
//! logs in to the database `pgbouncer` as a stats user, reads SHOW STATS, POOLS, DATABASES and
//! LISTS with psycopg2, and serves them on /metrics.
//!
//! Two tests: the exporter's own collectors for POOLS, DATABASES and LISTS (run from its
//! package, each on its own), and the whole exporter process, whose first act is to read SHOW
//! STATS with the columns of PgBouncer before 1.8 (`total_requests`...). The package is
//! installed by `scripts/install-deps.sh`; without it the tests say so and stop, except under
//! CI (`CI` set), where its absence is a failure.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::start_proxy;
use pgtier_tests::process::run;
use pgtier_tests::shared_server::shared_server;
use pgtier_tests::{Pgtier, ProxyConfig, TempDir, free_port};

const EXPORTER: &str = "/usr/bin/prometheus-pgbouncer-exporter";
/// The exporter's interpreter: the Debian one, where the package's modules are.
const PYTHON: &str = "/usr/bin/python3";
/// Bounded wait for the exporter to serve its first page.
const EXPORTER_START: Duration = Duration::from_secs(20);

/// False (after saying why) when the package is missing outside CI.
fn exporter_installed() -> bool {
    if Path::new(EXPORTER).exists() {
        return true;
    }
    let message = format!(
        "{EXPORTER} is missing: `apt-get install prometheus-pgbouncer-exporter` \
         (scripts/install-deps.sh does)"
    );
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("SKIPPED: {message}");
    false
}

/// pgtier with a stats user for the exporter and one pooled client that ran a query.
fn proxy_with_a_pool() -> (Pgtier, postgres::Client) {
    let pg = shared_server();
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .user("exporter", "")
            .setting("stats_users", "[\"exporter\"]"),
    );
    let mut client = proxy
        .connect("postgres", "postgres")
        .expect("a pooled client");
    client.simple_query("SELECT 1").expect("a query");
    (proxy, client)
}

#[test]
fn the_exporters_collectors_read_pools_databases_and_lists() {
    if !exporter_installed() {
        return;
    }
    let (proxy, _client) = proxy_with_a_pool();
    let script = format!(
        r#"
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_pgbouncer_exporter.utils import get_connection
from prometheus_pgbouncer_exporter.collectors import PoolsCollector, DatabasesCollector, ListsCollector
connection = get_connection("exporter", {port}, "127.0.0.1")
registry = CollectorRegistry()
registry.register(PoolsCollector(connection=connection, databases=None))
registry.register(DatabasesCollector(connection=connection, databases=None))
registry.register(ListsCollector(connection=connection))
print(generate_latest(registry).decode())
"#,
        port = proxy.port()
    );
    let out = run(
        Command::new(PYTHON).args(["-c", &script]),
        Duration::from_secs(30),
    )
    .expect("python3");
    assert!(out.success(), "collectors failed:\n{}", out.stderr);
    for metric in [
        "pgbouncer_active_clients{database=\"postgres\",user=\"postgres\"} 1.0",
        "pgbouncer_waiting_clients{database=\"postgres\",user=\"postgres\"} 0.0",
        "pgbouncer_pool_size{database=\"postgres\"} 10.0",
        "pgbouncer_reserve_pool{database=\"postgres\"} 0.0",
        "pgbouncer_databases 2.0",
        "pgbouncer_pools 2.0",
        "pgbouncer_used_clients ",
        "pgbouncer_dns_pending 0.0",
    ] {
        assert!(
            out.stdout.contains(metric),
            "{metric} missing in:\n{}",
            out.stdout
        );
    }
}

#[test]
fn the_exporter_serves_pool_and_stats_metrics_with_no_errors() {
    if !exporter_installed() {
        return;
    }
    let (proxy, _client) = proxy_with_a_pool();
    let dir = TempDir::new("exporter").expect("temp dir");
    let port = free_port().expect("a free port");
    let config = dir.path().join("exporter.conf");
    std::fs::write(
        &config,
        format!(
            "host = 127.0.0.1\nport = {port}\npgbouncer-host = 127.0.0.1\n\
             pgbouncer-port = {}\npgbouncer-user = exporter\n",
            proxy.port()
        ),
    )
    .expect("exporter config");
    let log_path = dir.path().join("exporter.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut exporter = Command::new(EXPORTER)
        .arg("--config")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("starting the exporter");
    let deadline = Instant::now() + EXPORTER_START;
    let metrics = loop {
        if let Some(page) = http_get(port, "/metrics") {
            break Some(page);
        }
        if exporter.try_wait().ok().flatten().is_some() || Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = exporter.kill();
    let _ = exporter.wait();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    let Some(metrics) = metrics else {
        panic!(
            "the exporter served no /metrics (a KeyError on SHOW STATS means the STATS \
             columns it reads are missing: total_requests, total_received, total_sent, \
             total_query_time); its log:\n{log}"
        );
    };
    for metric in [
        "pgbouncer_active_clients{database=\"postgres\",user=\"postgres\"}",
        "pgbouncer_waiting_clients{database=\"postgres\",user=\"postgres\"}",
        "pgbouncer_pool_size{database=\"postgres\"}",
        "pgbouncer_databases ",
        "pgbouncer_requests_total{database=\"postgres\"}",
        "pgbouncer_received_bytes_total{database=\"postgres\"}",
        "pgbouncer_sent_bytes_total{database=\"postgres\"}",
        "pgbouncer_query_microseconds_total{database=\"postgres\"}",
    ] {
        assert!(
            metrics.contains(metric),
            "{metric} missing in:\n{metrics}\nlog:\n{log}"
        );
    }
    for bad in ["Traceback", "ERROR", "Exception"] {
        assert!(!log.contains(bad), "the exporter's log has {bad}:\n{log}");
    }
}

/// The body of `GET path` on 127.0.0.1:`port`, if it answered 200.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}
