//! The driver of a live run: starts each planned session on its own thread at its arrival
//! offset, caps how many are live, writes every attempt to the CSV as it arrives, and prints
//! progress and per-class totals to stderr.
//!
//! Per-class state is sized for the classes of the schedule (two to [`Class::MAX`], ranks
//! 0..n-1), and every progress line and the final totals show each of them.
//!
//! The driver makes no decisions about queries; it only keeps time. All timing waits happen
//! in one place: the event channel's receive timeout, set to the next arrival or progress
//! tick, so rows are written while the driver waits for the next session.

use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use postgres::config::SslMode;

use super::queries::Query;
use super::row::{CSV_HEADER, Outcome, Row};
use super::schedule::{Schedule, SessionPlan};
use super::session::{Event, SessionContext, run_session};
use crate::sim::stats::quantile;
use crate::sim::workload::Class;

/// Where to connect.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// Host name, address, or a Unix socket directory (starting with `/`).
    pub host: String,
    /// TCP ports, one per proxy: sessions go to them round robin in arrival order (across
    /// classes), as a load balancer in front of several proxies spreads connections. One
    /// port: every session goes there.
    pub ports: Vec<u16>,
    /// Database name.
    pub dbname: String,
    /// User per class in rank order (premium first), one per class of the schedule: the
    /// proxy tells the classes apart by user.
    pub users: Vec<String>,
    /// Password for every user, if the server asks for one.
    pub password: Option<String>,
}

/// How the driver behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// Most sessions live at once; arrivals beyond it are dropped and counted.
    pub max_sessions: usize,
    /// Seconds between progress lines.
    pub progress_s: f64,
    /// How long a session keeps retrying its connection before giving up (s).
    pub reconnect_timeout_s: f64,
}

/// What happened to one class over a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassTotals {
    /// Sessions in the schedule.
    pub planned: u64,
    /// Sessions whose thread started.
    pub started: u64,
    /// Arrivals turned away by the session cap (or a failed thread spawn).
    pub dropped: u64,
    /// Sessions that gave up reconnecting before their lifetime was over.
    pub abandoned: u64,
    /// Queries that completed without error.
    pub ok: u64,
    /// Queries that failed.
    pub errors: u64,
    /// Failed connection attempts.
    pub connect_errors: u64,
}

/// What happened over a run, per class (rank order, premium first).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunTotals {
    /// Per class of the run, indexed by rank.
    pub class: Vec<ClassTotals>,
    /// Session threads that panicked (a bug; their rows up to the panic are kept).
    pub panicked: u64,
}

/// Per class figures of the current progress interval.
#[derive(Debug)]
struct Interval {
    ok_latencies_ms: Vec<Vec<f64>>,
    errors: Vec<u64>,
}

impl Interval {
    fn new(classes: usize) -> Self {
        Self {
            ok_latencies_ms: vec![Vec::new(); classes],
            errors: vec![0; classes],
        }
    }

    fn add(&mut self, row: &Row) {
        let class = row.class.index();
        match row.outcome {
            Outcome::Ok => self.ok_latencies_ms[class].push(row.latency_ms),
            Outcome::Error(_) => self.errors[class] += 1,
        }
    }

    /// One progress line, one part per class; resets the interval.
    fn line(&mut self, elapsed_s: f64, live: usize, dropped: u64) -> String {
        let mut line = format!("pgtier-load: {elapsed_s:7.1} s, {live} live, {dropped} dropped");
        for class in Class::ranks(self.errors.len()) {
            let latencies = &mut self.ok_latencies_ms[class.index()];
            latencies.sort_by(f64::total_cmp);
            let p95 = quantile(latencies, 0.95);
            let p95 = if p95.is_finite() {
                format!("{p95:.1} ms")
            } else {
                "-".into()
            };
            line.push_str(&format!(
                " | {} {} ok {} err p95 {p95}",
                class.name(),
                latencies.len(),
                self.errors[class.index()]
            ));
        }
        *self = Self::new(self.errors.len());
        line
    }
}

/// The connection settings of one class on one port.
fn class_config(
    target: &Target,
    port: u16,
    class: Class,
    options: &RunOptions,
) -> postgres::Config {
    let mut config = postgres::Config::new();
    config
        .host(&target.host)
        .port(port)
        .dbname(&target.dbname)
        .user(&target.users[class.index()])
        .application_name("pgtier-load")
        .ssl_mode(SslMode::Disable)
        // One attempt may not outlast the reconnect window, but gets at least a second.
        .connect_timeout(Duration::from_secs_f64(
            options.reconnect_timeout_s.clamp(1.0, 30.0),
        ));
    if let Some(password) = &target.password {
        config.password(password);
    }
    config
}

/// The state of a run in progress.
struct Driver {
    run_start: Instant,
    /// Per port (proxy), then per class indexed by rank, as are `live` and the totals.
    contexts: Vec<Vec<SessionContext>>,
    /// Where each session went, when asked: `class,session,proxy` lines.
    proxy_map: Option<BufWriter<File>>,
    options: RunOptions,
    events: Receiver<Event>,
    out: BufWriter<File>,
    out_name: String,
    live: Vec<usize>,
    threads: Vec<JoinHandle<()>>,
    totals: RunTotals,
    interval: Interval,
}

impl Driver {
    fn elapsed_s(&self) -> f64 {
        self.run_start.elapsed().as_secs_f64()
    }

    fn live_total(&self) -> usize {
        self.live.iter().sum()
    }

    fn write_err(&self, e: std::io::Error) -> String {
        format!("{}: {e}", self.out_name)
    }

    /// Starts the session at `position` in the schedule's arrival order.
    fn admit(&mut self, plan: &SessionPlan, position: usize) -> Result<(), String> {
        let class = plan.class.index();
        let proxy = position % self.contexts.len();
        if let Some(map) = &mut self.proxy_map {
            writeln!(map, "{},{},{proxy}", plan.class.name(), plan.index)
                .map_err(|e| format!("proxy map: {e}"))?;
        }
        if self.live_total() >= self.options.max_sessions {
            self.totals.class[class].dropped += 1;
            return Ok(());
        }
        let context = self.contexts[proxy][class].clone();
        let plan_for_thread = plan.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("{}-{}", plan.class.name(), plan.index))
            .spawn(move || run_session(&plan_for_thread, &context));
        match spawned {
            Ok(handle) => {
                self.threads.push(handle);
                self.live[class] += 1;
                self.totals.class[class].started += 1;
            }
            Err(e) => {
                // Out of threads or memory: the session is lost like one over the cap.
                eprintln!("pgtier-load: cannot start a session thread: {e}");
                self.totals.class[class].dropped += 1;
            }
        }
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Result<(), String> {
        match event {
            Event::Row(row) => {
                let totals = &mut self.totals.class[row.class.index()];
                match (&row.outcome, row.is_query()) {
                    (Outcome::Ok, _) => totals.ok += 1,
                    (Outcome::Error(_), true) => totals.errors += 1,
                    (Outcome::Error(_), false) => totals.connect_errors += 1,
                }
                if row.is_query() {
                    self.interval.add(&row);
                }
                writeln!(self.out, "{}", row.to_csv()).map_err(|e| self.write_err(e))
            }
            Event::Ended { class, abandoned } => {
                let live = &mut self.live[class.index()];
                *live = live.saturating_sub(1);
                if abandoned {
                    self.totals.class[class.index()].abandoned += 1;
                }
                Ok(())
            }
        }
    }

    /// Joins the threads that are done, counting panics.
    fn reap(&mut self, all: bool) {
        let (done, running): (Vec<_>, Vec<_>) = std::mem::take(&mut self.threads)
            .into_iter()
            .partition(|t| all || t.is_finished());
        self.threads = running;
        for thread in done {
            if thread.join().is_err() {
                self.totals.panicked += 1;
            }
        }
    }

    fn progress(&mut self) -> Result<(), String> {
        let dropped = self.totals.class.iter().map(|c| c.dropped).sum();
        let line = self
            .interval
            .line(self.elapsed_s(), self.live_total(), dropped);
        eprintln!("{line}");
        self.out.flush().map_err(|e| self.write_err(e))?;
        self.reap(false);
        Ok(())
    }

    /// Waits for events until `wake_s` (run time), handling what arrives.
    fn wait_until(&mut self, wake_s: f64) -> Result<(), String> {
        let timeout = Duration::try_from_secs_f64((wake_s - self.elapsed_s()).max(0.0))
            .unwrap_or(Duration::ZERO);
        match self.events.recv_timeout(timeout) {
            Ok(event) => self.handle(event),
            // The driver holds a sender in its contexts, so the channel never disconnects.
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => Ok(()),
        }
    }

    fn drive(&mut self, sessions: &[SessionPlan]) -> Result<(), String> {
        let mut next = 0;
        let mut next_progress_s = self.options.progress_s;
        loop {
            let now_s = self.elapsed_s();
            while let Some(plan) = sessions.get(next).filter(|p| p.arrival_s <= now_s) {
                self.admit(plan, next)?;
                next += 1;
            }
            if now_s >= next_progress_s {
                self.progress()?;
                while next_progress_s <= now_s {
                    next_progress_s += self.options.progress_s;
                }
            }
            if next == sessions.len() && self.live_total() == 0 {
                return Ok(());
            }
            let next_arrival_s = sessions.get(next).map_or(f64::INFINITY, |p| p.arrival_s);
            self.wait_until(next_arrival_s.min(next_progress_s))?;
        }
    }
}

fn print_totals(totals: &RunTotals, elapsed_s: f64) {
    eprintln!("pgtier-load: done in {elapsed_s:.1} s");
    for class in Class::ranks(totals.class.len()) {
        let t = &totals.class[class.index()];
        eprintln!(
            "  {:<8} sessions: {} planned, {} started, {} dropped by the cap, {} abandoned; \
             queries: {} ok, {} errors; {} failed connects",
            class.name(),
            t.planned,
            t.started,
            t.dropped,
            t.abandoned,
            t.ok,
            t.errors,
            t.connect_errors
        );
    }
    if totals.panicked > 0 {
        eprintln!("  {} session threads panicked", totals.panicked);
    }
}

/// Runs `schedule` against `target`, writing one CSV row per attempt to `out`, and, with
/// `proxy_map`, which of the target's ports each session went to (`class,session,proxy`).
pub fn run(
    target: &Target,
    options: &RunOptions,
    schedule: &Schedule,
    queries: Vec<Query>,
    out: &Path,
    proxy_map: Option<&Path>,
) -> Result<RunTotals, String> {
    if target.ports.is_empty() {
        return Err("no port to connect to".into());
    }
    if options.max_sessions == 0 {
        return Err("the session cap must be at least 1".into());
    }
    if !(options.progress_s.is_finite() && options.progress_s > 0.0) {
        return Err("the progress interval must be positive".into());
    }
    if !(options.reconnect_timeout_s.is_finite() && options.reconnect_timeout_s >= 0.0) {
        return Err("the reconnect timeout must be non-negative".into());
    }
    let classes = schedule.class_count;
    if classes > Class::MAX {
        return Err(format!(
            "{classes} classes: a run has at most {}",
            Class::MAX
        ));
    }
    if target.users.len() != classes {
        return Err(format!(
            "{} users for {classes} classes: one user per class",
            target.users.len()
        ));
    }
    // Per-class state is indexed by rank, so a session beyond the classes would be a bug.
    if schedule.sessions.iter().any(|p| p.class.index() >= classes) {
        return Err(format!(
            "the schedule has a session outside its {classes} classes"
        ));
    }
    let out_name = out.display().to_string();
    let file = File::create(out).map_err(|e| format!("{out_name}: {e}"))?;
    let mut writer = BufWriter::new(file);
    writeln!(writer, "{CSV_HEADER}").map_err(|e| format!("{out_name}: {e}"))?;

    let (sender, events) = mpsc::channel();
    let run_start = Instant::now();
    let queries = Arc::new(queries);
    let picker = Arc::new(schedule.picker.clone());
    let context = |port: u16, class: Class| SessionContext {
        run_start,
        config: class_config(target, port, class, options),
        reconnect_timeout: Duration::try_from_secs_f64(options.reconnect_timeout_s)
            .unwrap_or(Duration::ZERO),
        queries: Arc::clone(&queries),
        picker: Arc::clone(&picker),
        events: sender.clone(),
    };
    let mut totals = RunTotals {
        class: vec![ClassTotals::default(); classes],
        panicked: 0,
    };
    for plan in &schedule.sessions {
        totals.class[plan.class.index()].planned += 1;
    }
    let mut driver = Driver {
        run_start,
        contexts: target
            .ports
            .iter()
            .map(|&port| Class::ranks(classes).map(|c| context(port, c)).collect())
            .collect(),
        proxy_map: match proxy_map {
            Some(path) => {
                let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let mut map = BufWriter::new(file);
                writeln!(map, "class,session,proxy").map_err(|e| format!("proxy map: {e}"))?;
                Some(map)
            }
            None => None,
        },
        options: options.clone(),
        events,
        out: writer,
        out_name,
        live: vec![0; classes],
        threads: Vec::new(),
        totals,
        interval: Interval::new(classes),
    };
    driver.drive(&schedule.sessions)?;
    // Every session has sent Ended after its rows, so nothing is left in the channel;
    // drain anyway in case a late row raced the final check.
    while let Ok(event) = driver.events.try_recv() {
        driver.handle(event)?;
    }
    driver.reap(true);
    driver.out.flush().map_err(|e| driver.write_err(e))?;
    if let Some(map) = &mut driver.proxy_map {
        map.flush().map_err(|e| format!("proxy map: {e}"))?;
    }
    print_totals(&driver.totals, driver.elapsed_s());
    Ok(driver.totals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::schedule::{ScheduleParams, plan};

    /// A loopback port nothing listens on (bound, then released).
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address").port()
    }

    #[test]
    fn sessions_go_to_the_ports_round_robin_in_arrival_order() {
        let schedule = plan(
            7,
            &ScheduleParams {
                rate_per_s: vec![20.0, 40.0],
                duration_s: 0.5,
                lifetime_s: (0.05, 0.1),
                think_mean_s: 0.0,
                query_weights: vec![1.0],
            },
        )
        .expect("schedule");
        assert!(
            schedule.sessions.len() > 6,
            "enough sessions to see the rotation"
        );
        let dir = std::env::temp_dir().join(format!("pgtier-load-rr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let target = Target {
            host: "127.0.0.1".into(),
            ports: vec![closed_port(), closed_port(), closed_port()],
            dbname: "d".into(),
            users: vec!["p".into(), "f".into()],
            password: None,
        };
        let options = RunOptions {
            max_sessions: 400,
            progress_s: 60.0,
            reconnect_timeout_s: 0.0,
        };
        let query = Query {
            name: "q".into(),
            weight: 1.0,
            sql: "SELECT 1".into(),
        };
        let (out, map) = (dir.join("rows.csv"), dir.join("map.csv"));
        let totals = run(&target, &options, &schedule, vec![query], &out, Some(&map)).expect("run");
        let connects: u64 = totals.class.iter().map(|c| c.connect_errors).sum();
        assert!(
            connects > 0,
            "nothing listens: every session fails to connect"
        );
        let text = std::fs::read_to_string(&map).expect("map");
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some("class,session,proxy"));
        let expected: Vec<String> = schedule
            .sessions
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{},{},{}", p.class.name(), p.index, i % 3))
            .collect();
        assert_eq!(lines.map(String::from).collect::<Vec<_>>(), expected);
        assert!(
            expected.iter().any(|l| l.starts_with("premium"))
                && expected.iter().any(|l| l.starts_with("freemium")),
            "both classes share the rotation"
        );
        std::fs::remove_dir_all(&dir).ok();
    }
}
