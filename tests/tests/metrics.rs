//! The metrics endpoint and PgBouncer's statistics commands, end to end: pgtier runs with
//! `metrics_port` set, pgbench runs a known number of transactions through it, then a plain
//! TCP client scrapes `/metrics` (the exposition is parsed and checked: HELP and TYPE of every
//! family, counters that moved by exactly what ran, cumulative histogram buckets whose `+Inf`
//! equals `_count`), a bad request gets a 4xx without stopping the endpoint, and
//! `SHOW STATS`, `SHOW STATS_TOTALS` and `SHOW STATS_AVERAGES` answer one row per database with
//! PgBouncer 1.25's columns and types.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use pgtier_tests::fixtures::{PSQL_TIMEOUT, server_and_proxy};
use pgtier_tests::process::{pg_tool, run};
use pgtier_tests::rawwire;
use pgtier_tests::wait::until;
use pgtier_tests::{TempDir, free_port};

/// Transactions pgbench runs (clients × transactions per client), one query each.
const CLIENTS: u32 = 2;
const PER_CLIENT: u32 = 50;

/// One HTTP exchange: (status code, Content-Type, body).
fn http(port: u16, request: &[u8]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(request).expect("send request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read response");
    let text = String::from_utf8(response).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("a header block");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("a status code");
    let content_type = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Type: "))
        .unwrap_or_default()
        .to_string();
    (status, content_type, body.to_string())
}

fn scrape(port: u16, accept: &str) -> (u16, String, String) {
    let request = format!("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {accept}\r\n\r\n");
    http(port, request.as_bytes())
}

/// A series' labels other than `le`, in order.
type Labels = Vec<(String, String)>;

/// One sample line: name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: families by name with their type, and every sample.
#[derive(Debug, Default)]
struct Exposition {
    types: BTreeMap<String, String>,
    helps: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("label key=\"value\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("unterminated label value") {
                (_, '\\') => match chars.next().expect("escape") {
                    (_, 'n') => value.push('\n'),
                    (_, other) => value.push(other),
                },
                (at, '"') => break at,
                (_, other) => value.push(other),
            }
        };
        labels.insert(key.trim_start_matches(',').to_string(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    labels
}

/// Parses the Prometheus text format (and the OpenMetrics subset pgtier writes), failing
/// the test on any line that is neither a comment, a HELP/TYPE/UNIT line nor a sample.
fn parse_exposition(text: &str) -> Exposition {
    let mut exposition = Exposition::default();
    for line in text.lines().filter(|line| !line.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            let known = [
                "counter",
                "gauge",
                "histogram",
                "summary",
                "untyped",
                "unknown",
            ];
            assert!(known.contains(&kind), "bad type in {line:?}");
            let previous = exposition.types.insert(name.to_string(), kind.to_string());
            assert!(previous.is_none(), "family {name} typed twice");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            exposition.helps.insert(name.to_string(), help.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample: series value");
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, labels)) => (
                name,
                parse_labels(labels.strip_suffix('}').expect("closing brace")),
            ),
            None => (series, BTreeMap::new()),
        };
        let valid_name = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
        assert!(
            valid_name && !name.is_empty(),
            "bad metric name in {line:?}"
        );
        exposition.samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    exposition
}

impl Exposition {
    /// The family a sample belongs to: its own name, or its name less a type suffix.
    fn family_of(&self, sample: &str) -> Option<&str> {
        if self.types.contains_key(sample) {
            return self
                .types
                .get_key_value(sample)
                .map(|(name, _)| name.as_str());
        }
        ["_bucket", "_sum", "_count", "_total"]
            .iter()
            .filter_map(|suffix| sample.strip_suffix(suffix))
            .find_map(|family| {
                self.types
                    .get_key_value(family)
                    .map(|(name, _)| name.as_str())
            })
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|sample| {
                sample.name == name
                    && labels.iter().all(|(key, value)| {
                        sample.labels.get(*key).map(String::as_str) == Some(*value)
                    })
            })
            .map(|sample| sample.value)
    }

    /// Every sample has a typed, documented family; every histogram's buckets are
    /// cumulative and end with `+Inf` equal to `_count`.
    fn check_consistent(&self) {
        for sample in &self.samples {
            let family = self
                .family_of(&sample.name)
                .unwrap_or_else(|| panic!("{} has no TYPE line", sample.name));
            assert!(self.helps.contains_key(family), "{family} has no HELP line");
        }
        for (family, kind) in &self.types {
            if kind != "histogram" {
                continue;
            }
            let bucket_name = format!("{family}_bucket");
            let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
            for sample in self.samples.iter().filter(|s| s.name == bucket_name) {
                let mut labels = sample.labels.clone();
                let le = labels.remove("le").expect("a bucket has le");
                let bound = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("numeric le")
                };
                series
                    .entry(labels.into_iter().collect())
                    .or_default()
                    .push((bound, sample.value));
            }
            for (labels, buckets) in series {
                let bounds: Vec<f64> = buckets.iter().map(|(bound, _)| *bound).collect();
                assert!(
                    bounds.windows(2).all(|w| w[0] < w[1]),
                    "{family}: le ascending"
                );
                assert!(
                    buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                    "{family}{labels:?}: buckets are cumulative: {buckets:?}"
                );
                let (last_bound, last_count) = buckets.last().copied().expect("buckets");
                assert_eq!(last_bound, f64::INFINITY, "{family}: +Inf bucket last");
                let label_refs: Vec<(&str, &str)> = labels
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                let count = self
                    .value(&format!("{family}_count"), &label_refs)
                    .expect("a _count");
                assert_eq!(
                    last_count, count,
                    "{family}{labels:?}: +Inf bucket = _count"
                );
                assert!(
                    self.value(&format!("{family}_sum"), &label_refs).is_some(),
                    "{family}: a _sum"
                );
            }
        }
    }
}

fn body_text_format(port: u16) -> String {
    let (status, _, body) = scrape(port, "text/plain");
    assert_eq!(status, 200);
    body
}

/// `promtool check metrics` (Prometheus's own parser and linter) on a text exposition, when
/// promtool is installed; it reads the Prometheus text format only.
fn lint_with_promtool(body: &str) {
    let spawned = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = spawned else {
        eprintln!("promtool not installed: the exposition is checked by this test's parser only");
        return;
    };
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(body.as_bytes()).expect("feed promtool");
    }
    let output = child.wait_with_output().expect("promtool finishes");
    assert!(
        output.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// pgbench's custom script: one `SELECT 1` per transaction, no tables needed.
fn pgbench_select_one(port: u16, dir: &TempDir) {
    let script = dir.path().join("select1.sql");
    std::fs::write(&script, "SELECT 1;\n").expect("write the pgbench script");
    let mut command = pg_tool("pgbench");
    command
        .args(["-n", "-c", &CLIENTS.to_string(), "-j", "2", "-t"])
        .arg(PER_CLIENT.to_string())
        .arg("-f")
        .arg(&script)
        .args(["-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-U", "postgres", "postgres"]);
    let finished = run(&mut command, Duration::from_secs(60)).expect("pgbench runs");
    assert!(finished.success(), "pgbench failed: {finished:?}");
}

/// `psql -XA` (with the header) on the admin console: the header and the rows, split on `|`.
fn console(port: u16, sql: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut command = pg_tool("psql");
    command
        .args(["-XAq", "-P", "footer=off", "-h", "127.0.0.1", "-p"])
        .arg(port.to_string())
        .args(["-U", "postgres", "-d", "pgtier", "-c", sql]);
    let finished = run(&mut command, PSQL_TIMEOUT).expect("psql runs");
    assert!(finished.success(), "{sql}: {finished:?}");
    let mut lines = finished
        .stdout
        .lines()
        .map(|line| line.split('|').map(str::to_string).collect::<Vec<String>>());
    let header = lines.next().unwrap_or_default();
    (header, lines.collect())
}

/// Column names and type OIDs of `sql`'s RowDescription on the admin console.
fn column_types(port: u16, sql: &str) -> Vec<(String, u32)> {
    let mut session =
        rawwire::login(port, "postgres", "pgtier", Duration::from_secs(10)).expect("login");
    let messages = session.simple_query(sql).expect("query");
    let description = messages
        .iter()
        .find(|message| message.tag == b'T')
        .expect("a RowDescription");
    let body = &description.body;
    let count = u16::from_be_bytes([body[0], body[1]]);
    let mut at = 2;
    let mut columns = Vec::new();
    for _ in 0..count {
        let end = at + body[at..].iter().position(|b| *b == 0).expect("name");
        let name = String::from_utf8_lossy(&body[at..end]).into_owned();
        let oid_at = end + 1 + 4 + 2;
        let oid = u32::from_be_bytes(body[oid_at..oid_at + 4].try_into().expect("oid"));
        columns.push((name, oid));
        at = end + 1 + 18;
    }
    columns
}

#[test]
fn metrics_endpoint_and_show_stats_follow_the_traffic() {
    let metrics_port = free_port().expect("a free port");
    let (_pg, mut proxy) = server_and_proxy(|config| {
        let mut config = config
            .setting("metrics_port", &metrics_port.to_string())
            .setting("admin_users", "[\"postgres\"]")
            .setting("stats_period", "1");
        config.workers = 2;
        // Two free_port() calls in a row may return the same port: the proxy's own port
        // must not be the metrics port.
        config.listen_port = std::iter::repeat_with(|| free_port().expect("a free port"))
            .find(|port| *port != metrics_port)
            .unwrap_or_default();
        config
    });
    let dir = TempDir::new("metrics").expect("temp dir");
    // The client port accepts from its bind on, which comes before the metrics endpoint
    // starts: wait for the endpoint too (a loaded machine shows the gap).
    let endpoint_up = until(Duration::from_secs(30), Duration::from_millis(20), || {
        TcpStream::connect(("127.0.0.1", metrics_port)).ok()
    });
    assert!(endpoint_up.is_some(), "the metrics endpoint did not listen");

    // Before any traffic: valid, and the process is up.
    let (status, content_type, body) = scrape(metrics_port, "text/plain");
    assert_eq!(status, 200, "{body}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let before = parse_exposition(&body);
    before.check_consistent();
    assert_eq!(before.value("pgtier_up", &[]), Some(1.0));
    let db = [("database", "postgres")];
    let queries_before = before
        .value("pgtier_database_queries_total", &db)
        .unwrap_or(0.0);

    pgbench_select_one(proxy.port(), &dir);
    let ran = f64::from(CLIENTS * PER_CLIENT);

    // Shards fold at housekeeping (every 250 ms): wait, bounded, for all of it to show.
    let after = until(Duration::from_secs(10), Duration::from_millis(100), || {
        let (status, _, body) = scrape(metrics_port, "text/plain");
        let exposition = parse_exposition(&body);
        let queries = exposition.value("pgtier_database_queries_total", &db)?;
        (status == 200 && queries >= queries_before + ran).then_some(exposition)
    })
    .expect("the queries pgbench ran show up in pgtier_database_queries_total");
    after.check_consistent();
    let value = |name: &str| after.value(name, &db).unwrap_or(0.0);
    assert_eq!(value("pgtier_database_queries_total"), queries_before + ran);
    assert_eq!(value("pgtier_database_transactions_total"), ran);
    assert_eq!(value("pgtier_database_query_duration_seconds_count"), ran);
    assert_eq!(
        value("pgtier_database_transaction_duration_seconds_count"),
        ran
    );
    assert!(value("pgtier_database_query_duration_seconds_sum") > 0.0);
    assert!(value("pgtier_database_received_bytes_total") > 0.0);
    assert!(value("pgtier_database_sent_bytes_total") > 0.0);
    for family in [
        "pgtier_pool_clients",
        "pgtier_pool_servers",
        "pgtier_pool_max_wait_seconds",
        "pgtier_class_query_duration_seconds",
        "pgtier_clients",
        "pgtier_version_info",
        "pgtier_replica_up",
        "pgtier_role_events_total",
    ] {
        assert!(after.types.contains_key(family), "{family} is exposed");
    }
    let pool = [("database", "postgres"), ("user", "postgres")];
    let idle = after.value(
        "pgtier_pool_servers",
        &[pool[0], pool[1], ("state", "idle")],
    );
    assert!(
        idle.is_some_and(|idle| idle >= 1.0),
        "pgbench's servers idle: {idle:?}"
    );
    let by_class: f64 = ["premium", "freemium"]
        .iter()
        .filter_map(|class| {
            after.value(
                "pgtier_class_query_duration_seconds_count",
                &[("class", class)],
            )
        })
        .sum();
    assert!(
        by_class >= ran,
        "the class histograms counted the queries: {by_class}"
    );

    // OpenMetrics on request.
    let (status, content_type, body) = scrape(
        metrics_port,
        "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
    );
    assert_eq!(status, 200);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert_eq!(body.lines().last(), Some("# EOF"));
    parse_exposition(&body).check_consistent();

    // promtool's linter, when installed (Debian's `prometheus` package).
    lint_with_promtool(&body_text_format(metrics_port));

    // curl, as an operator would run it (when installed).
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "--fail", "--max-time", "10"])
        .arg(format!("http://127.0.0.1:{metrics_port}/metrics"));
    match run(&mut curl, Duration::from_secs(20)) {
        Ok(finished) => {
            assert!(finished.success(), "curl: {finished:?}");
            let exposition = parse_exposition(&finished.stdout);
            exposition.check_consistent();
            assert_eq!(exposition.value("pgtier_up", &[]), Some(1.0));
        }
        Err(error) => eprintln!("curl not run ({error}); the raw TCP scrapes above stand"),
    }

    // Bad requests get a 4xx, and the endpoint keeps serving.
    let (status, _, _) = http(metrics_port, b"BLAH\r\n\r\n");
    assert_eq!(status, 400);
    let (status, _, _) = http(metrics_port, b"GET /nope HTTP/1.1\r\n\r\n");
    assert_eq!(status, 404);
    let (status, _, _) = http(metrics_port, b"DELETE /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 405);
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let (status, _, _) = http(metrics_port, huge.as_bytes());
    assert_eq!(status, 431);
    let (status, _, body) = scrape(metrics_port, "*/*");
    assert_eq!(status, 200);
    assert!(body.contains("pgtier_up 1"));

    // PgBouncer 1.25's statistics commands: its columns, in its order, one row per database.
    let (header, rows) = console(proxy.port(), "SHOW STATS");
    assert_eq!(
        header,
        [
            "database",
            "total_server_assignment_count",
            "total_xact_count",
            "total_query_count",
            "total_received",
            "total_sent",
            "total_xact_time",
            "total_query_time",
            "total_wait_time",
            "total_client_parse_count",
            "total_server_parse_count",
            "total_bind_count",
            "total_client_login_count",
            "avg_server_assignment_count",
            "avg_xact_count",
            "avg_query_count",
            "avg_recv",
            "avg_sent",
            "avg_xact_time",
            "avg_query_time",
            "avg_wait_time",
            "avg_client_parse_count",
            "avg_server_parse_count",
            "avg_bind_count",
            "avg_client_login_count",
            // pgtier's addition after PgBouncer's columns, for Debian's exporter.
            "total_requests",
        ]
    );
    let names: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    assert_eq!(names, ["pgtier", "postgres"], "one row per database");
    let postgres = &rows[1];
    assert!(
        postgres[1].parse::<u64>().expect("number") > 0,
        "total_server_assignment_count"
    );
    assert_eq!(postgres[2], ran.to_string(), "total_xact_count");
    assert_eq!(
        postgres[3],
        (queries_before + ran).to_string(),
        "total_query_count"
    );
    assert!(
        postgres[4].parse::<u64>().expect("number") > 0,
        "total_received"
    );
    assert!(
        postgres[7].parse::<u64>().expect("number") > 0,
        "total_query_time"
    );
    assert!(
        postgres[12].parse::<u64>().expect("number") > 0,
        "total_client_login_count"
    );
    assert_eq!(
        postgres[25], postgres[3],
        "total_requests is the query count"
    );
    let totals = [
        "database",
        "server_assignment_count",
        "xact_count",
        "query_count",
        "bytes_received",
        "bytes_sent",
        "xact_time",
        "query_time",
        "wait_time",
        "client_parse_count",
        "server_parse_count",
        "bind_count",
        "client_login_count",
    ];
    let (header, rows) = console(proxy.port(), "SHOW STATS_TOTALS");
    assert_eq!(header, totals);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1][3], (queries_before + ran).to_string());
    // An interval closes every second (stats_period = 1): wait for one that saw traffic.
    let (header, _) = console(proxy.port(), "SHOW STATS_AVERAGES");
    let mut averages = totals;
    for name in &mut averages[9..] {
        // PgBouncer prefixes only the figures 1.21 added.
        *name = match *name {
            "client_parse_count" => "avg_client_parse_count",
            "server_parse_count" => "avg_server_parse_count",
            "bind_count" => "avg_bind_count",
            _ => "avg_client_login_count",
        };
    }
    assert_eq!(header, averages);
    pgbench_select_one(proxy.port(), &dir);
    let moved = until(Duration::from_secs(10), Duration::from_millis(200), || {
        let (_, rows) = console(proxy.port(), "SHOW STATS_AVERAGES");
        let row = rows.iter().find(|row| row[0] == "postgres")?;
        let query_count: u64 = row[3].parse().ok()?;
        (query_count > 0).then_some(())
    });
    assert!(moved.is_some(), "avg query count moved after traffic");
    let types = column_types(proxy.port(), "SHOW STATS_TOTALS");
    assert_eq!(types[0], ("database".to_string(), 25), "text");
    assert!(
        types[1..].iter().all(|(_, oid)| *oid == 1700),
        "numeric figures, as PgBouncer: {types:?}"
    );

    // A reload that changes metrics_port moves the endpoint.
    let moved_port = free_port().expect("a free port");
    let mut config = proxy.config().clone();
    config
        .extra
        .retain(|(key, _)| key.as_str() != "metrics_port");
    config = config.setting("metrics_port", &moved_port.to_string());
    proxy.rewrite_config(config).expect("rewrite the config");
    proxy.reload().expect("SIGHUP");
    let serving = until(Duration::from_secs(10), Duration::from_millis(100), || {
        let stream = TcpStream::connect(("127.0.0.1", moved_port)).ok()?;
        drop(stream);
        Some(())
    });
    assert!(serving.is_some(), "the endpoint listens on the new port");
    let (status, _, body) = scrape(moved_port, "text/plain");
    assert_eq!(status, 200);
    parse_exposition(&body).check_consistent();
    assert!(
        TcpStream::connect(("127.0.0.1", metrics_port)).is_err(),
        "the old port is closed"
    );
}
