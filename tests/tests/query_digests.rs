//! Query digests end to end: pgbench's TPC-B transactions through pgtier in transaction mode
//! (two workers, so digests of two shards meet in one store), in the simple, extended and
//! prepared protocols, and `psql -d pgbouncer -c 'SHOW QUERIES'` shows its statements
//! normalized, each called once per transaction, the three protocols under the same texts;
//! the metrics endpoint exports them under the query ids the console shows.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use pgtier_tests::fixtures::{PGBENCH_TIMEOUT, PSQL_TIMEOUT, start_proxy};
use pgtier_tests::process::{Finished, pg_tool, run};
use pgtier_tests::shared_server::shared_server;
use pgtier_tests::{Pgtier, ProxyConfig, free_port, wait};

/// pgbench's built-in TPC-B script, as `SHOW QUERIES` shows it.
const TPCB: [&str; 7] = [
    "BEGIN",
    "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2",
    "SELECT abalance FROM pgbench_accounts WHERE aid = $1",
    "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2",
    "UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2",
    "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)",
    "END",
];

/// Transactions of one pgbench run: 2 clients × 50.
const TRANSACTIONS: u64 = 100;

fn run_or_fail(command: &mut std::process::Command, timeout: Duration) -> Finished {
    match run(command, timeout) {
        Ok(finished) => finished,
        Err(error) => panic!("running {command:?}: {error}"),
    }
}

fn pgbench(proxy: &Pgtier, args: &[&str]) {
    let mut command = pg_tool("pgbench");
    command
        .args(args)
        .args(["-h", "127.0.0.1", "-p"])
        .arg(proxy.port().to_string())
        .args(["-U", "postgres", "postgres"]);
    let finished = run_or_fail(&mut command, PGBENCH_TIMEOUT);
    assert!(
        finished.success() && !finished.stderr.contains("error"),
        "pgbench {args:?}: {finished:?}\n--- proxy log ---\n{}",
        proxy.log()
    );
}

/// One `SHOW QUERIES` row.
#[derive(Debug, Clone)]
struct Row {
    calls: u64,
    rows: u64,
    errors: u64,
    database: String,
    total_time: u64,
    p95: u64,
    query_id: String,
}

/// `SHOW QUERIES` through psql on the `pgbouncer` console, by query text.
fn show_queries(proxy: &Pgtier) -> HashMap<String, Row> {
    let mut command = pg_tool("psql");
    command
        .args(["-XAtq", "-F", "\t", "-d"])
        .arg(proxy.conninfo("pgbouncer", "postgres"))
        .args(["-c", "SHOW QUERIES"]);
    let finished = run_or_fail(&mut command, PSQL_TIMEOUT);
    assert!(finished.success(), "SHOW QUERIES: {finished:?}");
    let number = |field: &str| field.parse::<u64>().unwrap_or(u64::MAX);
    finished
        .stdout
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            let [
                query,
                calls,
                rows,
                total_time,
                _mean,
                _p50,
                p95,
                errors,
                database,
                id,
            ] = fields[..]
            else {
                return None;
            };
            let row = Row {
                calls: number(calls),
                rows: number(rows),
                errors: number(errors),
                database: database.to_string(),
                total_time: number(total_time),
                p95: number(p95),
                query_id: id.to_string(),
            };
            Some((query.to_string(), row))
        })
        .collect()
}

/// Waits (bounded) until every TPC-B statement shows `calls` calls: the console's own shard
/// folds before it answers, the other within a housekeeping period.
fn tpcb_calls_reach(proxy: &Pgtier, calls: u64) -> HashMap<String, Row> {
    let mut last = HashMap::new();
    let reached = wait::until(Duration::from_secs(10), Duration::from_millis(100), || {
        last = show_queries(proxy);
        TPCB.iter()
            .all(|text| last.get(*text).is_some_and(|row| row.calls >= calls))
            .then_some(())
    });
    assert!(
        reached.is_some(),
        "SHOW QUERIES never showed {calls} calls of each TPC-B statement: {last:#?}"
    );
    last
}

/// The metrics endpoint's text exposition.
fn scrape(port: u16) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("a read timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the response");
    response
}

#[test]
fn show_queries_counts_pgbench_statements_in_every_protocol() {
    let pg = shared_server();
    let metrics_port = free_port().expect("a free port");
    let mut config = ProxyConfig::new(pg.port())
        .setting("admin_users", "[\"postgres\"]")
        .setting("metrics_port", &metrics_port.to_string());
    config.workers = 2;
    config.listen_port = std::iter::repeat_with(|| free_port().expect("a free port"))
        .find(|port| *port != metrics_port)
        .unwrap_or_default();
    let proxy = start_proxy(config);
    // Created through pgtier, as an application would.
    pgbench(&proxy, &["-i", "-q", "-s", "1"]);
    for (round, protocol) in (1u64..).zip(["simple", "extended", "prepared"]) {
        pgbench(
            &proxy,
            &["-n", "-M", protocol, "-c", "2", "-j", "2", "-t", "50"],
        );
        let shown = tpcb_calls_reach(&proxy, round * TRANSACTIONS);
        for text in TPCB {
            let row = &shown[text];
            assert_eq!(
                row.calls,
                round * TRANSACTIONS,
                "{protocol}: {text} once per transaction, the protocols under one text"
            );
            assert_eq!(row.errors, 0, "{text}");
            assert_eq!(row.database, "postgres");
            assert!(row.p95 <= row.total_time, "{text}: {row:?}");
        }
        for text in &TPCB[1..6] {
            assert_eq!(
                shown[*text].rows, shown[*text].calls,
                "one row each: {text}"
            );
        }
    }
    // The endpoint exports the same digests: the calls under the query id, the text in
    // the info gauge.
    let shown = show_queries(&proxy);
    let begin = &shown["BEGIN"].query_id;
    let calls = format!(
        "pgtier_query_calls_total{{database=\"postgres\",query_id=\"{begin}\"}} {}",
        3 * TRANSACTIONS
    );
    let info = format!("pgtier_query_info{{query_id=\"{begin}\",query=\"BEGIN\"}} 1");
    let mut body = String::new();
    let exported = wait::until(Duration::from_secs(10), Duration::from_millis(100), || {
        body = scrape(metrics_port);
        (body.lines().any(|line| line == calls) && body.lines().any(|line| line == info))
            .then_some(())
    });
    assert!(exported.is_some(), "{calls} and {info} in:\n{body}");
}
