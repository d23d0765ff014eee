//! `pgtier-soak`: a long mixed load through pgtier against a real primary and a streaming
//! replica, checking that pgtier's RSS, open fds, pools and servers stay flat.
//!
//! The load: persistent writers and readers (the readers through a reader entry, so on the
//! replica), client churn (connect, one query, disconnect), errors (division by zero, syntax
//! errors inside a transaction), cancels (a sleeping query cancelled mid-way), a RELOAD on the
//! admin console every 15 s, and one replica restart (immediate stop, start) at 25 % of the
//! run. Every 2 s it samples pgtier's RSS and fds (/proc) and counts SHOW POOLS, SHOW SERVERS
//! and SHOW CLIENTS rows. After the warm-up, a least-squares line through each series must
//! not grow more than the noise around it (`pgtier_tests::soak`), against time and against
//! connections served. Exit 1 on growth, a dead pgtier or a stalled load.
//!
//! Usage: pgtier-soak [--minutes 2] [--out FILE (a Markdown fragment)]
//! The pgtier binary: PGTIER_BIN, or this crate's pgtier-under-test (see tests/src/proxy.rs).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pgtier_tests::soak::{Series, Verdict};
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

const POOL_SIZE: u32 = 8;
const SAMPLE_EVERY: Duration = Duration::from_secs(2);
const RELOAD_EVERY: Duration = Duration::from_secs(15);
/// The replica restarts at this share of the run, and the judged window starts 20 s after it:
/// failover grows the primary's pools by a step (their idle servers stay until
/// `server_idle_timeout`), which a line through the whole run would read as growth. What is
/// judged is whether anything grows over the steady load that follows.
const RESTART_AT: f64 = 0.25;
const SETTLE: f64 = 20.0;

struct Options {
    minutes: f64,
    out: Option<String>,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        minutes: 2.0,
        out: None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value", pair[0]));
        };
        match flag.as_str() {
            "--minutes" => {
                options.minutes = value
                    .parse()
                    .ok()
                    .filter(|m: &f64| *m > 0.0)
                    .ok_or_else(|| format!("--minutes: bad number {value}"))?;
            }
            "--out" => options.out = Some(value.clone()),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(options)
}

/// What the load did, shared by its threads.
#[derive(Default)]
struct Counts {
    stop: AtomicBool,
    connections: AtomicU64,
    transactions: AtomicU64,
    errors_expected: AtomicU64,
    errors_other: AtomicU64,
    cancels: AtomicU64,
}

impl Counts {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

fn client_config(port: u16, database: &str) -> postgres::Config {
    let mut config = postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname(database)
        .connect_timeout(Duration::from_secs(10));
    config
}

/// A thread that runs `step` on a connection to `database`, reconnecting after an error
/// (a replica restart breaks its sessions), until the soak stops.
fn load_thread(
    port: u16,
    database: &'static str,
    counts: Arc<Counts>,
    step: fn(&mut postgres::Client, &Counts, u64) -> Result<(), postgres::Error>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut round = 0u64;
        while !counts.stopped() {
            let Ok(mut client) = client_config(port, database).connect(postgres::NoTls) else {
                Counts::add(&counts.errors_other);
                std::thread::sleep(Duration::from_millis(200));
                continue;
            };
            Counts::add(&counts.connections);
            while !counts.stopped() {
                round += 1;
                if step(&mut client, &counts, round).is_err() {
                    Counts::add(&counts.errors_other);
                    break;
                }
                Counts::add(&counts.transactions);
            }
        }
    })
}

fn write_step(
    client: &mut postgres::Client,
    _: &Counts,
    round: u64,
) -> Result<(), postgres::Error> {
    let row = (round % 100) as i32;
    let mut transaction = client.transaction()?;
    transaction.execute("UPDATE soak SET n = n + 1 WHERE id = $1", &[&row])?;
    transaction.commit()
}

fn read_step(client: &mut postgres::Client, _: &Counts, _: u64) -> Result<(), postgres::Error> {
    client.query_one("SELECT sum(n) FROM soak", &[]).map(|_| ())
}

/// Errors a session survives: a failed statement, a failed transaction rolled back.
fn error_step(
    client: &mut postgres::Client,
    counts: &Counts,
    round: u64,
) -> Result<(), postgres::Error> {
    if client.simple_query("SELECT 1/0").is_err() {
        Counts::add(&counts.errors_expected);
    }
    let mut transaction = client.transaction()?;
    if transaction.batch_execute("SELEC broken").is_err() {
        Counts::add(&counts.errors_expected);
    }
    transaction.rollback()?;
    if round.is_multiple_of(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A sleeping query cancelled from another thread after 50 ms.
fn cancel_step(
    client: &mut postgres::Client,
    counts: &Counts,
    _: u64,
) -> Result<(), postgres::Error> {
    let token = client.cancel_token();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        token.cancel_query(postgres::NoTls)
    });
    match client.simple_query("SELECT pg_sleep(2)") {
        Err(error) if error.code() == Some(&postgres::error::SqlState::QUERY_CANCELED) => {
            Counts::add(&counts.cancels);
        }
        Err(error) => return Err(error),
        Ok(_) => {}
    }
    let _ = canceller.join();
    Ok(())
}

/// Churn: connect, one query, disconnect, alternating the plain and the reader entry.
fn churn_thread(port: u16, counts: Arc<Counts>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut round = 0u64;
        while !counts.stopped() {
            round += 1;
            let database = if round.is_multiple_of(2) {
                "app"
            } else {
                "postgres"
            };
            match client_config(port, database).connect(postgres::NoTls) {
                Ok(mut client) => {
                    Counts::add(&counts.connections);
                    match client.simple_query("SELECT 1") {
                        Ok(_) => Counts::add(&counts.transactions),
                        Err(_) => Counts::add(&counts.errors_other),
                    }
                }
                Err(_) => {
                    Counts::add(&counts.errors_other);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
    })
}

/// The admin console, reconnected when it breaks.
struct Console {
    port: u16,
    client: Option<postgres::Client>,
}

impl Console {
    fn run(&mut self, sql: &str) -> Option<usize> {
        if self.client.is_none() {
            self.client = client_config(self.port, "pgtier")
                .connect(postgres::NoTls)
                .ok();
        }
        let client = self.client.as_mut()?;
        match client.simple_query(sql) {
            Ok(messages) => Some(
                messages
                    .iter()
                    .filter(|m| matches!(m, postgres::SimpleQueryMessage::Row(_)))
                    .count(),
            ),
            Err(_) => {
                self.client = None;
                None
            }
        }
    }
}

fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn fd_count(pid: u32) -> Option<f64> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as f64)
}

/// One sample: seconds since the start, connections served, and the gauges.
struct Sample {
    at: f64,
    connections: f64,
    transactions: u64,
    rss: f64,
    fds: f64,
    pools: f64,
    servers: f64,
    clients: f64,
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("pgtier-soak: {error}");
            return ExitCode::from(2);
        }
    };
    match soak(&options) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("pgtier-soak: {error}");
            ExitCode::FAILURE
        }
    }
}

fn soak(options: &Options) -> Result<bool, String> {
    let duration = Duration::from_secs_f64(options.minutes * 60.0);
    let _ = pgtier_tests::process::raise_open_file_limit(4096);
    let primary =
        LocalPg::start_primary(&PgOptions::default()).map_err(|e| format!("primary: {e}"))?;
    primary
        .psql(
            "postgres",
            "CREATE TABLE soak (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0); \
             INSERT INTO soak (id) SELECT generate_series(0, 99)",
        )
        .map_err(|e| format!("schema: {e}"))?;
    let replica = LocalPg::start_replica(&primary).map_err(|e| format!("replica: {e}"))?;
    replica
        .wait_caught_up(&primary, Duration::from_secs(60))
        .map_err(|e| format!("replica catch-up: {e}"))?;
    let mut config = ProxyConfig::new(primary.port())
        .reader_database("app", primary.port(), &[replica.port()], "postgres")
        .setting("health_check_user", "\"postgres\"")
        .setting("admin_users", "[\"postgres\"]")
        .pool_size(POOL_SIZE);
    config.workers = 2;
    config.max_client_conn = 500;
    let mut proxy = Pgtier::start_with_watchdog(config, duration + Duration::from_secs(300))
        .map_err(|e| format!("pgtier: {e}"))?;
    let pid = proxy.pid();
    let port = proxy.port();
    eprintln!(
        "soak: {:.1} min, pgtier pid {pid} on {port}, primary {}, replica {}",
        options.minutes,
        primary.port(),
        replica.port()
    );

    let counts = Arc::new(Counts::default());
    let mut threads = vec![
        load_thread(port, "postgres", counts.clone(), write_step),
        load_thread(port, "postgres", counts.clone(), write_step),
        load_thread(port, "app", counts.clone(), read_step),
        load_thread(port, "app", counts.clone(), read_step),
        load_thread(port, "postgres", counts.clone(), error_step),
        load_thread(port, "postgres", counts.clone(), cancel_step),
    ];
    threads.push(churn_thread(port, counts.clone()));
    threads.push(churn_thread(port, counts.clone()));

    let mut console = Console { port, client: None };
    let start = Instant::now();
    let restart_at = start + duration.mul_f64(RESTART_AT);
    let mut restarted = false;
    let mut reloads = 0u32;
    let mut next_reload = start + RELOAD_EVERY;
    let mut samples: Vec<Sample> = Vec::new();
    let mut died = false;
    while start.elapsed() < duration {
        std::thread::sleep(SAMPLE_EVERY);
        if proxy.try_exit_status().is_some() {
            died = true;
            break;
        }
        let now = Instant::now();
        if now >= next_reload {
            if console.run("RELOAD").is_some() {
                reloads += 1;
            }
            next_reload = now + RELOAD_EVERY;
        }
        if !restarted && now >= restart_at {
            restarted = true;
            eprintln!("soak: restarting the replica");
            replica
                .stop_immediate()
                .map_err(|e| format!("replica stop: {e}"))?;
            std::thread::sleep(Duration::from_secs(2));
            replica.start().map_err(|e| format!("replica start: {e}"))?;
        }
        let (Some(rss), Some(fds)) = (rss_mib(pid), fd_count(pid)) else {
            died = true;
            break;
        };
        let pools = console.run("SHOW POOLS").unwrap_or(0) as f64;
        let servers = console.run("SHOW SERVERS").unwrap_or(0) as f64;
        let clients = console.run("SHOW CLIENTS").unwrap_or(0) as f64;
        eprintln!(
            "sample t={:.0}s connections={} rss={rss:.1}MiB fds={fds} pools={pools} servers={servers} clients={clients}",
            start.elapsed().as_secs_f64(),
            Counts::get(&counts.connections)
        );
        samples.push(Sample {
            at: start.elapsed().as_secs_f64(),
            connections: Counts::get(&counts.connections) as f64,
            transactions: Counts::get(&counts.transactions),
            rss,
            fds,
            pools,
            servers,
            clients,
        });
    }
    counts.stop.store(true, Ordering::Relaxed);
    for thread in threads {
        let _ = thread.join();
    }
    if died {
        eprintln!("soak: pgtier died; log:\n{}", proxy.log());
        return Ok(false);
    }

    // The warm-up: pools fill, allocator arenas settle, the replica restarts and recovers.
    let warm_up = duration.as_secs_f64() * RESTART_AT + SETTLE;
    let judged: Vec<&Sample> = samples.iter().filter(|s| s.at >= warm_up).collect();
    let series = |name, unit, floor, x: fn(&Sample) -> f64, y: fn(&Sample) -> f64| Series {
        name,
        unit,
        floor,
        points: judged.iter().map(|s| (x(s), y(s))).collect(),
    };
    let by_time = |s: &Sample| s.at;
    let by_connection = |s: &Sample| s.connections;
    // Floors: servers may step up by a pool's size (a burst opens one; they close after
    // `server_idle_timeout`), and fds with them; the fds no listed connection explains
    // (listeners, rings, probes, and any leak) get no such allowance.
    let pool = f64::from(POOL_SIZE);
    let unaccounted = |s: &Sample| s.fds - s.servers - s.clients;
    let verdicts: Vec<(&str, Verdict)> = vec![
        (
            "time",
            series("RSS", "MiB", 2.0, by_time, |s| s.rss).verdict(),
        ),
        (
            "time",
            series("fds", "fds", 4.0 + pool, by_time, |s| s.fds).verdict(),
        ),
        (
            "time",
            series("unlisted fds", "fds", 4.0, by_time, unaccounted).verdict(),
        ),
        (
            "time",
            series("pools", "pools", 1.0, by_time, |s| s.pools).verdict(),
        ),
        (
            "time",
            series("servers", "servers", pool, by_time, |s| s.servers).verdict(),
        ),
        (
            "time",
            series("clients", "clients", 4.0, by_time, |s| s.clients).verdict(),
        ),
        (
            "connections",
            series("RSS", "MiB", 2.0, by_connection, |s| s.rss).verdict(),
        ),
        (
            "connections",
            series("unlisted fds", "fds", 4.0, by_connection, unaccounted).verdict(),
        ),
    ];
    // A stalled load would be flat too: the last fifth of the run must have made progress.
    let tail_from = duration.as_secs_f64() * 0.8;
    let progressed = match (samples.iter().find(|s| s.at >= tail_from), samples.last()) {
        (Some(first), Some(last)) => last.transactions > first.transactions,
        _ => false,
    };
    let flat = verdicts.iter().all(|(_, verdict)| verdict.flat);
    let report = render(
        options, &samples, &verdicts, &counts, reloads, restarted, warm_up,
    );
    println!("{report}");
    if let Some(out) = &options.out {
        std::fs::write(out, &report).map_err(|e| format!("{out}: {e}"))?;
    }
    if !progressed {
        eprintln!("soak: the load stalled in the last fifth of the run");
    }
    Ok(flat && progressed && restarted)
}

fn render(
    options: &Options,
    samples: &[Sample],
    verdicts: &[(&str, Verdict)],
    counts: &Counts,
    reloads: u32,
    restarted: bool,
    warm_up: f64,
) -> String {
    let mut text = String::new();
    let _ = writeln!(text, "## Soak\n");
    let _ = writeln!(
        text,
        "{:.0} minutes of mixed load through pgtier (2 workers, transaction mode) against a \
         primary and a streaming replica: 2 writers, 2 readers on the replica through a reader \
         entry, 2 churning clients (connect, one query, disconnect), 1 client making errors, \
         1 cancelling its own sleeps; a RELOAD every {} s ({reloads} in all), the replica \
         restarted once ({}). Samples every {} s; judged after a {warm_up:.0} s warm-up that \
         includes the restart and {SETTLE:.0} s of recovery (failover grows the primary's pools \
         by a step): a least-squares line through each series, its growth over the window against {} \
         residual standard deviations (or a floor: servers, and fds with them, may step up by \
         a pool's size, {POOL_SIZE}; unlisted fds, those no SHOW SERVERS or SHOW CLIENTS row \
         explains, may not).\n",
        options.minutes,
        RELOAD_EVERY.as_secs(),
        if restarted { "done" } else { "NOT done" },
        SAMPLE_EVERY.as_secs(),
        pgtier_tests::soak::NOISE_SIGMAS,
    );
    let _ = writeln!(
        text,
        "Served: {} connections, {} transactions, {} errors made on purpose, {} other \
         client errors (the replica restart breaks the sessions on it), {} cancels.\n",
        Counts::get(&counts.connections),
        Counts::get(&counts.transactions),
        Counts::get(&counts.errors_expected),
        Counts::get(&counts.errors_other),
        Counts::get(&counts.cancels),
    );
    let _ = writeln!(
        text,
        "| series | against | first | last | slope | growth over the window | allowed (noise or floor) | verdict |"
    );
    let _ = writeln!(text, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    let judged: Vec<&Sample> = samples.iter().filter(|s| s.at >= warm_up).collect();
    for (against, verdict) in verdicts {
        let pick = |s: &Sample| match verdict.name {
            "RSS" => s.rss,
            "fds" => s.fds,
            "pools" => s.pools,
            "servers" => s.servers,
            "unlisted fds" => s.fds - s.servers - s.clients,
            _ => s.clients,
        };
        let first = judged.first().map_or(0.0, |s| pick(s));
        let last = judged.last().map_or(0.0, |s| pick(s));
        let (slope, growth) = match verdict.fit {
            Some(fit) if *against == "time" => (
                format!("{:.4} {}/min", fit.slope * 60.0, verdict.unit),
                format!("{:.2}", fit.growth()),
            ),
            Some(fit) => (
                format!(
                    "{:.4} {}/1000 connections",
                    fit.slope * 1000.0,
                    verdict.unit
                ),
                format!("{:.2}", fit.growth()),
            ),
            None => ("-".into(), "-".into()),
        };
        let _ = writeln!(
            text,
            "| {} ({}) | {against} | {first:.1} | {last:.1} | {slope} | {growth} | {:.2} | {} |",
            verdict.name,
            verdict.unit,
            verdict.allowed,
            if verdict.flat { "flat" } else { "GROWS" }
        );
    }
    text
}
