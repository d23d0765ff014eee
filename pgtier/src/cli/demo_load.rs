//! `pgtier demo --load`: drives the premium and the freemium user through pgtier, kills one
//! premium replica after a third of the time and restarts it after two thirds, and prints
//! per-class throughput and latency, SHOW REPLICAS as it goes, and at the end the role and
//! failure events (SHOW ROLE_EVENTS and SHOW EVENTS) and a per-class summary.
//!
//! The load is the PostgreSQL installation's `pgbench`, one child process per class, run in
//! consecutive rounds of a few seconds. Rounds, because PLB places a *session* on a replica
//! when it connects, and pgbench aborts a client whose query fails (in PostgreSQL 15,
//! `--max-tries` retries only serialization and deadlock failures). One long run would lose
//! the clients hit by the failure for good, and would never open a session that could land on
//! the repaired or the rejoined replica. Each round connects every client again, so PLB admits
//! them against the roles of the moment, borrowing and returning replicas as the rounds come
//! and go, and the clients aborted by the failure are back in the next round. (`pgbench -C`
//! reconnects per transaction instead; that moves roles so often that the event log becomes
//! noise.) Each round's pgbench summary gives the per-class line of that round.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pgtier_core::localpg::{self, LocalPg};

use super::DemoOptions;
use super::demo::{
    self, ADMIN_USER, DEMO_DATABASE, DEMO_THETA, DemoCluster, FREEMIUM_USER, PREMIUM_USER,
};

/// Longest load round; shorter for short runs so that a few rounds surround the kill.
const MAX_ROUND_SECONDS: u32 = 5;
/// Shortest load round (pgbench's `-T` counts whole seconds).
const MIN_ROUND_SECONDS: u32 = 2;
/// How often SHOW REPLICAS is printed.
const TABLE_EVERY: Duration = Duration::from_secs(10);
/// SHOW REPLICAS is printed this long after the kill and after the restart: enough for the
/// health probes to mark the replica Down (about 1 s) or let it rejoin (about 0.75 s).
const TABLE_AFTER_EVENT: Duration = Duration::from_secs(2);
/// A periodic SHOW REPLICAS is skipped when one was printed less than this long ago.
const TABLE_MIN_GAP: Duration = Duration::from_secs(4);
/// A pgbench round still running this long after its `-T` is killed.
const ROUND_GRACE: Duration = Duration::from_secs(30);
/// Time limit of one admin console query.
const ADMIN_QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the load loop looks at its children, the clock and the stop flag.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// Most events printed at the end (the latest ones).
const MAX_EVENTS_SHOWN: usize = 80;
/// Freemium sessions per freemium replica, in units of θ: more than its pool holds, so
/// Freemium borrows and queues.
const FREEMIUM_OVERLOAD: u32 = 3;

/// One class of the load: who logs in and how many sessions it keeps open.
struct ClassLoad {
    name: &'static str,
    user: &'static str,
    clients: u32,
    totals: ClassTotals,
}

/// What one class did over the whole load.
#[derive(Default)]
struct ClassTotals {
    transactions: u64,
    /// Σ latency × transactions, for the transaction-weighted mean latency.
    latency_weight: f64,
    aborted: u32,
    failed_rounds: u32,
}

/// The timeline of the load, relative to its start.
struct Plan {
    total: Duration,
    round_seconds: u32,
    kill_at: Duration,
    restart_at: Duration,
}

impl Plan {
    fn new(load_seconds: u32) -> Plan {
        let total = Duration::from_secs(u64::from(load_seconds));
        Plan {
            total,
            round_seconds: (load_seconds / 4).clamp(MIN_ROUND_SECONDS, MAX_ROUND_SECONDS),
            kill_at: total / 3,
            restart_at: total * 2 / 3,
        }
    }
}

/// The replica killed and restarted midway, and where the load is with it.
struct Victim {
    index: usize,
    address: String,
    killed: bool,
    restarted: bool,
}

/// When the next SHOW REPLICAS is due.
struct TableSchedule {
    next_periodic: Duration,
    next_event: Option<Instant>,
    last_printed: Option<Instant>,
}

/// Runs the load against the demo cluster, then returns (the caller's drop of `cluster` stops
/// the proxy and the servers). Ctrl-C ends it early, killing the pgbench children.
pub(super) fn run(cluster: &mut DemoCluster, options: &DemoOptions) -> Result<(), String> {
    let (premium, freemium) = demo::plb_split(cluster.replicas.len())
        .ok_or("--load needs at least 2 replicas (one is killed midway)")?;
    let victim_index = premium.first().copied().unwrap_or(0);
    let victim_port = cluster
        .replicas
        .get(victim_index)
        .map(LocalPg::port)
        .ok_or("no replica to kill")?;
    let mut victim = Victim {
        index: victim_index,
        address: format!("127.0.0.1:{victim_port}"),
        killed: false,
        restarted: false,
    };
    let labels: Vec<String> = cluster
        .replicas
        .iter()
        .map(|replica| format!("127.0.0.1:{}", replica.port()))
        .collect();
    let script = write_script(&cluster.config_dir, options.pgbench_scale)?;
    let clients = |replicas: usize| DEMO_THETA * u32::try_from(replicas).unwrap_or(1).max(1);
    let mut classes = [
        ClassLoad {
            name: "premium",
            user: PREMIUM_USER,
            clients: clients(premium.len()),
            totals: ClassTotals::default(),
        },
        ClassLoad {
            name: "freemium",
            user: FREEMIUM_USER,
            clients: FREEMIUM_OVERLOAD * clients(freemium.len()),
            totals: ClassTotals::default(),
        },
    ];
    let plan = Plan::new(options.load_seconds);
    println!(
        "Load: {} premium and {} freemium sessions for {} s, in pgbench rounds of {} s \
         (PLB places sessions when they connect; each round reconnects).",
        classes[0].clients,
        classes[1].clients,
        plan.total.as_secs(),
        plan.round_seconds
    );
    println!(
        "Replica {} ({}, premium) is killed at t={}s and restarted at t={}s.",
        victim.index + 1,
        victim.address,
        plan.kill_at.as_secs(),
        plan.restart_at.as_secs()
    );
    println!();

    let started = Instant::now();
    let started_wall = SystemTime::now();
    let mut tables = TableSchedule {
        next_periodic: Duration::from_secs(u64::from(plan.round_seconds)) / 2,
        next_event: None,
        last_printed: None,
    };
    let ctx = LoadContext {
        port: options.listen_port,
        script: &script,
        labels: &labels,
        started,
    };
    loop {
        // Rounded, so that the rounds' small start-up delays do not cut the last one short.
        let remaining = plan.total.saturating_sub(started.elapsed());
        let seconds = u32::try_from((remaining.as_millis() + 500) / 1000)
            .unwrap_or(u32::MAX)
            .min(plan.round_seconds);
        if seconds == 0 {
            break;
        }
        let Some(results) = run_round(
            cluster,
            &ctx,
            &classes,
            seconds,
            &plan,
            &mut victim,
            &mut tables,
        )?
        else {
            eprintln!("pgtier demo: stopping");
            return Ok(());
        };
        print_round(ctx.elapsed(), &classes, &results);
        for (class, result) in classes.iter_mut().zip(&results) {
            class.totals.add(result);
        }
    }
    let load_time = started.elapsed();
    println!();
    print_replicas(&ctx, "at the end of the load");
    print_timeline(&ctx, started_wall);
    print_summary(&classes, load_time);
    eprintln!("pgtier demo: load done, stopping");
    Ok(())
}

/// What the helpers of one load need to know.
struct LoadContext<'a> {
    port: u16,
    script: &'a Path,
    labels: &'a [String],
    started: Instant,
}

impl LoadContext<'_> {
    fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// `#N 127.0.0.1:PORT` for a replica address the console printed.
    fn label(&self, address: &str) -> String {
        match self.labels.iter().position(|label| label == address) {
            Some(index) => format!("#{} {address}", index + 1),
            None => address.to_string(),
        }
    }
}

/// One pgbench round of both classes; meanwhile kills or restarts the victim and prints SHOW
/// REPLICAS when due. `None` when Ctrl-C arrived (the children are killed on return).
fn run_round(
    cluster: &mut DemoCluster,
    ctx: &LoadContext<'_>,
    classes: &[ClassLoad; 2],
    seconds: u32,
    plan: &Plan,
    victim: &mut Victim,
    tables: &mut TableSchedule,
) -> Result<Option<[RoundResult; 2]>, String> {
    let mut benches = [
        Captured::spawn(&mut pgbench_command(ctx, &classes[0], seconds))?,
        Captured::spawn(&mut pgbench_command(ctx, &classes[1], seconds))?,
    ];
    let deadline = Instant::now() + Duration::from_secs(u64::from(seconds)) + ROUND_GRACE;
    loop {
        if demo::stop_requested() {
            return Ok(None);
        }
        demo::check_proxy_alive(cluster)?;
        step_victim(cluster, ctx, plan, victim, tables)?;
        if tables.due(ctx.elapsed()) {
            print_replicas(ctx, &format!("at t={}s", ctx.elapsed().as_secs()));
            tables.printed();
        }
        let mut running = false;
        for bench in &mut benches {
            running |= !bench.exited()?;
        }
        if !running || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    let [premium, freemium] = benches;
    Ok(Some([premium.finish().parse(), freemium.finish().parse()]))
}

/// Kills the victim once its time has come, and restarts it later.
fn step_victim(
    cluster: &DemoCluster,
    ctx: &LoadContext<'_>,
    plan: &Plan,
    victim: &mut Victim,
    tables: &mut TableSchedule,
) -> Result<(), String> {
    let elapsed = ctx.elapsed();
    let Some(replica) = cluster.replicas.get(victim.index) else {
        return Ok(());
    };
    if !victim.killed && elapsed >= plan.kill_at {
        replica
            .stop_immediate()
            .map_err(|e| format!("killing replica {}: {e}", victim.index + 1))?;
        victim.killed = true;
        println!(
            "t={:>3}s  killed replica {} ({}): pg_ctl stop -m immediate",
            ctx.elapsed().as_secs(),
            victim.index + 1,
            victim.address
        );
        tables.after_event();
    } else if victim.killed && !victim.restarted && elapsed >= plan.restart_at {
        replica
            .start()
            .map_err(|e| format!("restarting replica {}: {e}", victim.index + 1))?;
        victim.restarted = true;
        println!(
            "t={:>3}s  restarted replica {} ({})",
            ctx.elapsed().as_secs(),
            victim.index + 1,
            victim.address
        );
        tables.after_event();
    }
    Ok(())
}

impl TableSchedule {
    /// True when a table is due now; consumes the slot. A periodic slot that falls close to
    /// another table (printed, or pending after an event) is skipped.
    fn due(&mut self, elapsed: Duration) -> bool {
        let now = Instant::now();
        if self.next_event.is_some_and(|at| now >= at) {
            self.next_event = None;
            return true;
        }
        if elapsed < self.next_periodic {
            return false;
        }
        self.next_periodic += TABLE_EVERY;
        let recent = self
            .last_printed
            .is_some_and(|at| now.duration_since(at) < TABLE_MIN_GAP);
        !recent && self.next_event.is_none()
    }

    fn printed(&mut self) {
        self.last_printed = Some(Instant::now());
    }

    fn after_event(&mut self) {
        self.next_event = Some(Instant::now() + TABLE_AFTER_EVENT);
    }
}

fn pgbench_command(ctx: &LoadContext<'_>, class: &ClassLoad, seconds: u32) -> Command {
    let mut command = Command::new(localpg::pg_bindir().join("pgbench"));
    command
        .args(["-n", "-f"])
        .arg(ctx.script)
        .args(["-c", &class.clients.to_string()])
        .args(["-j", &class.clients.clamp(1, 2).to_string()])
        .args(["-T", &seconds.to_string()])
        .args(["-h", "127.0.0.1", "-p", &ctx.port.to_string()])
        .args(["-U", class.user, DEMO_DATABASE]);
    command
}

/// The read-only transaction of the load: a short index range scan plus 5 ms of sleep. The
/// sleep stands in for a heavier query without using the CPU: all the demo's servers share
/// one machine, so CPU-bound queries would make every replica equally slow; sleeping keeps
/// each replica's capacity its own (its few server connections), which is what PLB balances.
fn write_script(dir: &Path, scale: u32) -> Result<PathBuf, String> {
    let accounts = 100_000u64 * u64::from(scale);
    let text = format!(
        "\\set aid random(1, {accounts})\n\
         SELECT sum(abalance), pg_sleep(0.005) FROM pgbench_accounts \
         WHERE aid BETWEEN :aid AND :aid + 99;\n"
    );
    let path = dir.join("demo-load.sql");
    std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// A child process whose stdout and stderr are read to the end by two threads (so a full pipe
/// never blocks it). Killed and reaped on drop unless it has exited.
struct Captured {
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
    status: Option<ExitStatus>,
}

/// What a finished (or killed) child printed.
struct Output {
    status: Option<ExitStatus>,
    stdout: String,
    stderr: String,
}

impl Captured {
    fn spawn(command: &mut Command) -> Result<Captured, String> {
        let program = command.get_program().to_string_lossy().into_owned();
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("running {program}: {e}"))?;
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Ok(Captured {
            child,
            stdout,
            stderr,
            status: None,
        })
    }

    fn exited(&mut self) -> Result<bool, String> {
        if self.status.is_none() {
            self.status = self
                .child
                .try_wait()
                .map_err(|e| format!("watching a child: {e}"))?;
        }
        Ok(self.status.is_some())
    }

    /// Kills the child if it still runs, reaps it and collects its output.
    fn finish(mut self) -> Output {
        self.reap();
        let join = |handle: Option<JoinHandle<String>>| {
            handle
                .and_then(|handle| handle.join().ok())
                .unwrap_or_default()
        };
        Output {
            status: self.status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }

    fn reap(&mut self) {
        if self.status.is_none() {
            if let Ok(Some(status)) = self.child.try_wait() {
                self.status = Some(status);
                return;
            }
            let _ = self.child.kill();
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        self.reap();
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Runs one child to the end, killing it after `timeout`.
fn run_with_timeout(command: &mut Command, timeout: Duration) -> Result<Output, String> {
    let mut child = Captured::spawn(command)?;
    let deadline = Instant::now() + timeout;
    while !child.exited()? && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(child.finish())
}

/// One class's pgbench round, from its summary.
#[derive(Debug, Default, PartialEq)]
struct RoundResult {
    transactions: u64,
    tps: Option<f64>,
    latency_ms: Option<f64>,
    /// Clients pgbench aborted because a query failed (the killed replica).
    aborted: u32,
    /// Why there is no summary: pgbench's last error line.
    error: Option<String>,
}

impl Output {
    fn parse(self) -> RoundResult {
        let mut result = parse_pgbench(&self.stdout, &self.stderr);
        if result.error.is_none() && result.tps.is_none() {
            result.error = Some(match self.status {
                Some(status) => format!("pgbench printed no summary ({status})"),
                None => "pgbench printed no summary".to_string(),
            });
        }
        result
    }
}

/// Reads pgbench's end-of-run summary (stdout) and counts the clients it aborted (stderr).
fn parse_pgbench(stdout: &str, stderr: &str) -> RoundResult {
    let mut result = RoundResult::default();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("number of transactions actually processed: ") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            result.transactions = digits.parse().unwrap_or(0);
        } else if let Some(rest) = line.strip_prefix("latency average = ") {
            result.latency_ms = leading_number(rest);
        } else if let Some(rest) = line.strip_prefix("tps = ") {
            result.tps = leading_number(rest);
        }
    }
    result.aborted = stderr
        .lines()
        .filter(|line| line.contains("client ") && line.contains(" aborted"))
        .count()
        .try_into()
        .unwrap_or(u32::MAX);
    if result.tps.is_none() {
        result.error = stderr
            .lines()
            .rev()
            .map(str::trim)
            .find(|line| !line.is_empty())
            .map(str::to_string);
    }
    result
}

fn leading_number(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

impl ClassTotals {
    fn add(&mut self, round: &RoundResult) {
        self.transactions += round.transactions;
        if let Some(latency) = round.latency_ms {
            #[allow(clippy::cast_precision_loss)]
            let weight = round.transactions as f64;
            self.latency_weight += latency * weight;
        }
        self.aborted = self.aborted.saturating_add(round.aborted);
        if round.error.is_some() {
            self.failed_rounds += 1;
        }
    }
}

fn print_round(elapsed: Duration, classes: &[ClassLoad; 2], results: &[RoundResult; 2]) {
    let describe = |class: &ClassLoad, result: &RoundResult| match (result.tps, result.latency_ms) {
        (Some(tps), Some(latency)) => {
            format!("{}: {tps:5.0} tps, lat {latency:6.1} ms", class.name)
        }
        _ => format!(
            "{}: no result ({})",
            class.name,
            result.error.as_deref().unwrap_or("pgbench failed")
        ),
    };
    let mut line = format!(
        "t={:>3}s  {} | {}",
        elapsed.as_secs(),
        describe(&classes[0], &results[0]),
        describe(&classes[1], &results[1])
    );
    let aborted: Vec<String> = classes
        .iter()
        .zip(results)
        .filter(|(_, result)| result.aborted > 0)
        .map(|(class, result)| {
            format!(
                "{} {} clients aborted by the failure",
                result.aborted, class.name
            )
        })
        .collect();
    if !aborted.is_empty() {
        line.push_str(&format!("  ({})", aborted.join(", ")));
    }
    println!("{line}");
}

/// A result set of the admin console, as text.
struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn value<'a>(&self, row: &'a [String], column: &str) -> &'a str {
        self.columns
            .iter()
            .position(|name| name == column)
            .and_then(|index| row.get(index))
            .map_or("", String::as_str)
    }
}

/// Field separator of psql's unaligned output: a character no value contains.
const FIELD_SEPARATOR: char = '\u{1f}';

/// Runs one admin console command (as `postgres` on the virtual database `pgbouncer`).
fn admin_query(port: u16, command: &str) -> Result<Table, String> {
    let mut psql = Command::new(localpg::pg_bindir().join("psql"));
    psql.args(["-X", "-A", "-q", "-P", "footer=off", "-F"])
        .arg(FIELD_SEPARATOR.to_string())
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-U", ADMIN_USER, "-c", command, "pgbouncer"])
        .env("PGCONNECT_TIMEOUT", "5");
    let output = run_with_timeout(&mut psql, ADMIN_QUERY_TIMEOUT)?;
    if !output.status.is_some_and(|status| status.success()) {
        let error = output.stderr.trim();
        return Err(if error.is_empty() {
            "psql failed".to_string()
        } else {
            error.to_string()
        });
    }
    let mut lines = output.stdout.lines();
    let split = |line: &str| {
        line.split(FIELD_SEPARATOR)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let columns = lines.next().map(split).unwrap_or_default();
    let rows = lines.filter(|line| !line.is_empty()).map(split).collect();
    Ok(Table { columns, rows })
}

/// Prints the role, sessions and health columns of SHOW REPLICAS.
fn print_replicas(ctx: &LoadContext<'_>, when: &str) {
    let table = match admin_query(ctx.port, "SHOW REPLICAS") {
        Ok(table) => table,
        Err(error) => {
            println!("SHOW REPLICAS {when}: failed: {error}");
            return;
        }
    };
    let header = [
        "replica",
        "role",
        "borrowed_from",
        "premium_sessions",
        "freemium_sessions",
        "state",
    ];
    let mut lines = vec![header.map(str::to_string).to_vec()];
    for row in &table.rows {
        let mut line: Vec<String> = header
            .iter()
            .map(|column| table.value(row, column).to_string())
            .collect();
        line[0] = ctx.label(&line[0]);
        lines.push(line);
    }
    println!("SHOW REPLICAS {when}:");
    print_aligned(&lines, &[false, false, false, true, true, false]);
}

/// Prints rows with columns padded to their widest cell; `right` aligns numbers.
fn print_aligned(lines: &[Vec<String>], right: &[bool]) {
    let columns = lines.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|column| {
            lines
                .iter()
                .filter_map(|line| line.get(column))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for line in lines {
        let cells: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(column, (cell, &width))| {
                if right.get(column).copied().unwrap_or(false) {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        println!("  {}", cells.join("  ").trim_end());
    }
}

/// One line of the event timeline.
struct Event {
    seq: u64,
    time: String,
    replica: String,
    what: String,
    change: String,
    detail: String,
}

/// SHOW ROLE_EVENTS (borrows and returns) and SHOW EVENTS (Down, Rejoin and the repairs they
/// cause) merged into one timeline by sequence number.
fn print_timeline(ctx: &LoadContext<'_>, started_wall: SystemTime) {
    let mut events = Vec::new();
    for command in ["SHOW ROLE_EVENTS", "SHOW EVENTS"] {
        let table = match admin_query(ctx.port, command) {
            Ok(table) => table,
            Err(error) => {
                println!("{command}: failed: {error}");
                continue;
            }
        };
        for row in &table.rows {
            let from = table.value(row, "from");
            let to = table.value(row, "to");
            let (what, detail) = if command == "SHOW EVENTS" {
                (table.value(row, "event"), table.value(row, "cause"))
            } else {
                (table.value(row, "reason"), table.value(row, "class"))
            };
            events.push(Event {
                seq: table.value(row, "seq").parse().unwrap_or(u64::MAX),
                time: relative_time(table.value(row, "time"), started_wall),
                replica: ctx.label(table.value(row, "replica")),
                what: what.to_string(),
                change: if from.is_empty() && to.is_empty() {
                    String::new()
                } else {
                    format!("{from} -> {to}")
                },
                detail: detail.to_string(),
            });
        }
    }
    events.sort_by_key(|event| event.seq);
    println!();
    println!("Role and failure events (SHOW ROLE_EVENTS + SHOW EVENTS, oldest first):");
    if events.is_empty() {
        println!("  (none)");
        return;
    }
    let hidden = events.len().saturating_sub(MAX_EVENTS_SHOWN);
    if hidden > 0 {
        println!("  ({hidden} earlier events not shown)");
    }
    let mut lines = vec![
        ["time", "replica", "event", "role change", "class / cause"]
            .map(str::to_string)
            .to_vec(),
    ];
    lines.extend(events.into_iter().skip(hidden).map(|event| {
        vec![
            event.time,
            event.replica,
            event.what,
            event.change,
            event.detail,
        ]
    }));
    print_aligned(&lines, &[true]);
}

/// `t=+12.3s` from the console's `YYYY-MM-DD HH:MM:SS.mmm UTC`, relative to the load start
/// (the console's text as is when it does not parse).
fn relative_time(timestamp: &str, started_wall: SystemTime) -> String {
    let Some(event_of_day) = seconds_of_day(timestamp) else {
        return timestamp.to_string();
    };
    let since_epoch = started_wall
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    let start_of_day = since_epoch % 86_400.0;
    let mut relative = event_of_day - start_of_day;
    // Across midnight UTC.
    if relative < -43_200.0 {
        relative += 86_400.0;
    } else if relative > 43_200.0 {
        relative -= 86_400.0;
    }
    format!("t={relative:+.1}s")
}

fn seconds_of_day(timestamp: &str) -> Option<f64> {
    let clock = timestamp.split_whitespace().nth(1)?;
    let mut parts = clock.split(':');
    let hours: f64 = parts.next()?.parse().ok()?;
    let minutes: f64 = parts.next()?.parse().ok()?;
    let seconds: f64 = parts.next()?.parse().ok()?;
    Some(hours * 3600.0 + minutes * 60.0 + seconds)
}

fn print_summary(classes: &[ClassLoad; 2], load_time: Duration) {
    println!();
    println!(
        "Summary over {:.0} s (mean tps over the whole load, latency weighted by transactions):",
        load_time.as_secs_f64()
    );
    for class in classes {
        let totals = &class.totals;
        #[allow(clippy::cast_precision_loss)]
        let transactions = totals.transactions as f64;
        let tps = transactions / load_time.as_secs_f64().max(f64::EPSILON);
        let latency = if totals.transactions == 0 {
            "-".to_string()
        } else {
            format!("{:.1} ms", totals.latency_weight / transactions)
        };
        let mut line = format!(
            "  {:<8}  {} sessions  {tps:5.0} tps  mean latency {latency}  {} transactions",
            class.name, class.clients, totals.transactions
        );
        if totals.aborted > 0 {
            line.push_str(&format!(", {} clients aborted", totals.aborted));
        }
        if totals.failed_rounds > 0 {
            line.push_str(&format!(
                ", {} rounds without a result",
                totals.failed_rounds
            ));
        }
        println!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_summary_is_parsed() {
        let stdout = "transaction type: /tmp/demo-load.sql\n\
                      scaling factor: 1\n\
                      query mode: simple\n\
                      number of clients: 4\n\
                      number of threads: 2\n\
                      maximum number of tries: 1\n\
                      duration: 5 s\n\
                      number of transactions actually processed: 3210\n\
                      number of failed transactions: 0 (0.000%)\n\
                      latency average = 6.215 ms\n\
                      initial connection time = 4.120 ms\n\
                      tps = 643.601337 (without initial connection time)\n";
        let stderr = "pgbench: error: client 1 script 0 aborted in command 1 query 0: \
                      server closed the connection unexpectedly\n\
                      pgbench: error: Run was aborted; the above results are incomplete.\n";
        assert_eq!(
            parse_pgbench(stdout, stderr),
            RoundResult {
                transactions: 3210,
                tps: Some(643.601337),
                latency_ms: Some(6.215),
                aborted: 1,
                error: None,
            }
        );
        let failed = parse_pgbench(
            "",
            "pgbench: error: connection to server at \"127.0.0.1\", port 6432 failed\n",
        );
        assert_eq!(failed.tps, None);
        assert!(failed.error.is_some_and(|e| e.contains("connection")));
    }

    #[test]
    fn plan_puts_kill_and_restart_at_thirds() {
        let plan = Plan::new(45);
        assert_eq!(plan.round_seconds, 5);
        assert_eq!(plan.kill_at, Duration::from_secs(15));
        assert_eq!(plan.restart_at, Duration::from_secs(30));
        assert_eq!(Plan::new(12).round_seconds, 3);
        assert_eq!(Plan::new(6).round_seconds, 2);
    }

    #[test]
    fn console_times_become_relative() {
        let start = UNIX_EPOCH + Duration::from_secs(86_400 * 10 + 3600);
        assert_eq!(
            relative_time("1970-01-11 01:00:12.500 UTC", start),
            "t=+12.5s"
        );
        assert_eq!(relative_time("garbage", start), "garbage");
        let before_midnight = UNIX_EPOCH + Duration::from_secs(86_400 * 11 - 1);
        assert_eq!(
            relative_time("1970-01-12 00:00:01.000 UTC", before_midnight),
            "t=+2.0s"
        );
    }
}
