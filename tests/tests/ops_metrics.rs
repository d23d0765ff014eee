//! The operator's files in docs/ops/ against a live pgtier: every metric the Grafana dashboard
//! and the Prometheus alert rules query exists in a scrape of the metrics endpoint of a
//! pgtier in front of a real primary with two streaming replicas (a reader entry, so the lag
//! series exist, and a PLB replica set, so the role series exist), after traffic through
//! each; where promtool is installed, every query parses. And the condition of the "pool
//! exhausted by pinned clients" rule is what the endpoint shows when a pinned client holds the
//! only server of a pool and another waits.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{psql_through, start_proxy};
use pgtier_tests::process::pg_tool;
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig, free_port};

/// Bounded waits: replicas catching up, series appearing.
const WAIT: Duration = Duration::from_secs(30);

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// The body of `GET /metrics` (Prometheus text format).
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/plain\r\n\r\n")
        .expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// Every sample name in an exposition (`pgtier_x_bucket`, `pgtier_up`...).
fn sample_names(body: &str) -> BTreeSet<String> {
    body.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// One sample's value: `name{labels}` as printed, labels in the endpoint's order.
fn value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

/// The metric names a file of PromQL queries uses: every `pgtier_*` identifier, and any
/// other identifier written as a selector (`up{...}`), which must be one Prometheus makes.
fn queried_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut at = 0;
    while at < bytes.len() {
        if !is_ident(bytes[at]) || (at > 0 && is_ident(bytes[at - 1])) {
            at += 1;
            continue;
        }
        let start = at;
        while at < bytes.len() && is_ident(bytes[at]) {
            at += 1;
        }
        let word = &text[start..at];
        let selector = bytes.get(at) == Some(&b'{');
        if word.starts_with("pgtier_") || (selector && !word.starts_with('$')) {
            names.insert(word.to_string());
        }
    }
    names
}

/// Waits (bounded) until a scrape holds every name in `wanted`; the last scrape.
fn scrape_until_all(port: u16, wanted: &BTreeSet<String>) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = scrape(port);
        let names = sample_names(&body);
        let missing: Vec<&String> = wanted.iter().filter(|n| !names.contains(*n)).collect();
        if missing.is_empty() {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "queried by docs/ops but not in the scrape: {missing:?}\n{body}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The PromQL of every dashboard panel (`"expr": "..."`, JSON string escapes undone).
fn dashboard_queries(dashboard: &str) -> Vec<String> {
    dashboard
        .split("\"expr\": \"")
        .skip(1)
        .map(|rest| {
            let mut query = String::new();
            let mut chars = rest.chars();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => query.extend(chars.next()),
                    other => query.push(other),
                }
            }
            query
        })
        .collect()
}

/// promtool, when installed (Debian's `prometheus` package), parses the alert rules and every
/// dashboard query (as recording rules, Grafana's variables replaced by plain values).
fn check_with_promtool(dashboard: &str) {
    let Ok(version) = Command::new("promtool").arg("--version").output() else {
        eprintln!("promtool is not installed: the queries are not parsed");
        return;
    };
    assert!(version.status.success());
    let dir = pgtier_tests::TempDir::new("promtool").expect("tempdir");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (index, query) in dashboard_queries(dashboard).iter().enumerate() {
        let query = query
            .replace("$__rate_interval", "5m")
            .replace("$instance", ".*")
            .replace("$database", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:query{index}\n        expr: '{}'\n",
            query.replace('\'', "''")
        ));
    }
    let dashboard_rules = dir.path().join("dashboard.yml");
    std::fs::write(&dashboard_rules, rules).expect("rules");
    let checked = Command::new("promtool")
        .args(["check", "rules"])
        .arg(repo().join("docs/ops/pgtier-alerts.yml"))
        .arg(&dashboard_rules)
        .output()
        .expect("promtool runs");
    assert!(
        checked.status.success(),
        "promtool check rules:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
}

/// A primary with two streaming replicas, caught up.
fn cluster() -> (LocalPg, Vec<LocalPg>) {
    let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
    let replicas: Vec<LocalPg> = (0..2)
        .map(|_| LocalPg::start_replica(&primary).expect("replica"))
        .collect();
    for replica in &replicas {
        replica
            .wait_caught_up(&primary, WAIT)
            .expect("the replica catches up");
    }
    (primary, replicas)
}

fn proxy(primary: &LocalPg, replicas: &[LocalPg], metrics_port: u16) -> Pgtier {
    let ports: Vec<u16> = replicas.iter().map(LocalPg::port).collect();
    let list = ports
        .iter()
        .map(|port| format!("\"127.0.0.1:{port}\""))
        .collect::<Vec<_>>()
        .join(", ");
    let mut config = ProxyConfig::new(primary.port())
        .reader_database("app", primary.port(), &ports, "postgres")
        .database("analytics", 0, "postgres")
        .database_setting("replicas", &format!("[{list}]"))
        .database_setting("routing", "\"plb\"")
        .setting("health_check_user", "\"postgres\"")
        .setting("metrics_port", &metrics_port.to_string())
        .pool_size(1);
    config.raw_tables = format!(
        "\n[databases.analytics.plb]\npremium = [\"127.0.0.1:{}\"]\nfreemium = [\"127.0.0.1:{}\"]\n",
        ports[0], ports[1]
    );
    start_proxy(config)
}

#[test]
fn every_metric_the_dashboard_and_the_alert_rules_query_is_in_a_live_scrape() {
    let dashboard =
        std::fs::read_to_string(repo().join("docs/ops/pgtier-dashboard.json")).expect("dashboard");
    let rules = std::fs::read_to_string(repo().join("docs/ops/pgtier-alerts.yml")).expect("rules");
    assert!(
        dashboard_queries(&dashboard).len() > 20,
        "the dashboard's panels have queries"
    );
    check_with_promtool(&dashboard);
    let mut wanted = queried_metrics(&dashboard);
    wanted.extend(queried_metrics(&rules));
    // Prometheus's own series for a scrape target, not the endpoint's.
    let from_prometheus: BTreeSet<String> = ["up".to_string()].into();
    wanted.retain(|name| !from_prometheus.contains(name));
    assert!(
        wanted.iter().all(|name| name.starts_with("pgtier_")),
        "a query uses a metric neither pgtier nor Prometheus makes: {wanted:?}"
    );
    // Latency by class, roles, pools, replicas and lag: the dashboard's rows.
    for family in [
        "pgtier_class_query_duration_seconds_bucket",
        "pgtier_replica_role",
        "pgtier_pool_clients",
        "pgtier_replica_up",
        "pgtier_replica_lag_seconds",
        "pgtier_pool_pinned_clients",
    ] {
        assert!(wanted.contains(family), "docs/ops queries {family}");
    }

    let (primary, replicas) = cluster();
    let metrics_port = free_port().expect("a free port");
    let proxy = proxy(&primary, &replicas, metrics_port);
    let write = psql_through(&proxy, "app", "CREATE TABLE ops_probe AS SELECT 1 AS n");
    assert!(
        write.success(),
        "a write through the reader entry: {}",
        write.stderr
    );
    for (database, sql) in [
        ("app", "SELECT 1"),
        ("analytics", "SELECT 1"),
        ("postgres", "SELECT 1"),
    ] {
        let ran = psql_through(&proxy, database, sql);
        assert!(ran.success(), "{database}: {sql}: {}", ran.stderr);
    }
    scrape_until_all(metrics_port, &wanted);
}

#[test]
fn a_pinned_client_holding_the_only_server_while_another_waits_is_visible() {
    let pg = LocalPg::start_primary(&PgOptions::default()).expect("PostgreSQL");
    let metrics_port = free_port().expect("a free port");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .setting("metrics_port", &metrics_port.to_string())
            .pool_size(1),
    );
    // `SET` pins the session's server to it in transaction mode; pool_size 1 leaves nothing
    // for the next client.
    let mut pinned = proxy.connect("postgres", "postgres").expect("connect");
    pinned
        .batch_execute("SET work_mem = '8MB'")
        .expect("SET pins");
    let mut waiting = pg_tool("psql")
        .args(["-X", "-At", "-c", "SELECT 1"])
        .arg(proxy.conninfo("postgres", "postgres"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    let labels = "{database=\"postgres\",user=\"postgres\"";
    let deadline = Instant::now() + WAIT;
    loop {
        let body = scrape(metrics_port);
        let pinned_clients = value(&body, &format!("pgtier_pool_pinned_clients{labels}}}"));
        let waiting_clients = value(
            &body,
            &format!("pgtier_pool_clients{labels},state=\"waiting\"}}"),
        );
        let active_servers = value(
            &body,
            &format!("pgtier_pool_servers{labels},state=\"active\"}}"),
        );
        // The rule: clients wait, and pinned clients hold at least every active server.
        if pinned_clients == Some(1.0)
            && waiting_clients == Some(1.0)
            && active_servers == Some(1.0)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pinned {pinned_clients:?}, waiting {waiting_clients:?}, active {active_servers:?}\n{body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // DISCARD ALL ends the pin: the server goes to the waiting client.
    pinned.batch_execute("DISCARD ALL").expect("unpin");
    let deadline = Instant::now() + WAIT;
    while matches!(waiting.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = waiting.wait().expect("psql ends");
    assert!(
        status.success(),
        "the waiting client ran once the pin ended"
    );
    let deadline = Instant::now() + WAIT;
    let mut body = scrape(metrics_port);
    while value(&body, &format!("pgtier_pool_pinned_clients{labels}}}")) != Some(0.0) {
        assert!(Instant::now() < deadline, "the pin is gone:\n{body}");
        std::thread::sleep(Duration::from_millis(100));
        body = scrape(metrics_port);
    }
}
