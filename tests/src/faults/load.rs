//! The load a fault scenario runs under, from the clients' namespace: readers doing
//! `pgbench -S`'s transaction (one primary-key SELECT) through the reader entry, writers
//! keeping the write ledger through the same entry (the first also reading each of its
//! acknowledged ids back, to check read-your-writes), and a console poller that notes when
//! pgtier marks a replica up or down. Everything runs on one thread (a current-thread tokio
//! runtime), so every socket is created in that thread's namespace; every operation has a
//! client-side deadline, so a scenario ends in bounded time whatever pgtier does.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tokio_postgres::SimpleQueryMessage;

use super::ledger::{Outcome, WriteRecord};
use super::netns::{Host, Lab};
use super::session::Session;

/// Rows of the `accounts` table the readers pick from.
pub const ACCOUNTS: u64 = 100_000;
/// The width of one throughput bucket.
pub const BUCKET: Duration = Duration::from_millis(100);

/// What load to run.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    pub pgtier: SocketAddr,
    pub database: String,
    pub readers: usize,
    pub writers: usize,
    /// Client-side deadline of each connect and statement.
    pub op_timeout: Duration,
    /// Ids of this load's writes start above this value.
    pub id_base: i64,
}

/// pgtier's view of one replica changed (SHOW REPLICAS's `state`).
#[derive(Clone, Debug)]
pub struct StateChange {
    pub at: Duration,
    pub replica: String,
    pub state: String,
}

/// What the load saw.
#[derive(Clone, Debug, Default)]
pub struct LoadReport {
    /// Completed reads per `BUCKET`.
    pub reads: Vec<u32>,
    /// Acknowledged writes per `BUCKET`.
    pub writes: Vec<u32>,
    pub read_errors: BTreeMap<String, u32>,
    pub write_errors: BTreeMap<String, u32>,
    pub ledger: Vec<WriteRecord>,
    pub states: Vec<StateChange>,
    /// Reads of a session's own acknowledged write, and how many did not see it.
    pub ryw_reads: u32,
    pub ryw_stale: u32,
}

/// A running load; `finish` stops it and returns what it saw.
pub struct Load {
    stop: Arc<AtomicBool>,
    start: Instant,
    handle: JoinHandle<io::Result<LoadReport>>,
}

impl std::fmt::Debug for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Load").field("start", &self.start).finish()
    }
}

impl Load {
    /// Starts the load in the clients' namespace.
    pub fn start(lab: &Lab, spec: LoadSpec) -> io::Result<Load> {
        let stop = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let ns = lab.ns(Host::Clients);
        let stopping = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            super::netns::enter_named(&ns)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let local = tokio::task::LocalSet::new();
            Ok(local.block_on(&runtime, run(spec, start, stopping)))
        });
        Ok(Load {
            stop,
            start,
            handle,
        })
    }

    /// Time since the load started (the origin of every `at` in its report).
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Stops the load (in-flight operations get their deadline) and returns its report.
    pub fn finish(self) -> io::Result<LoadReport> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .map_err(|_| io::Error::other("the load thread panicked"))?
    }
}

/// The load's shared state; one thread, so a RefCell.
struct Ctx {
    spec: LoadSpec,
    start: Instant,
    stop: Arc<AtomicBool>,
    report: RefCell<LoadReport>,
    /// Per writer: the id in flight and whether its COMMIT was sent.
    in_flight: RefCell<HashMap<usize, (i64, bool)>>,
}

impl Ctx {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn bucket(&self) -> usize {
        usize::try_from(self.now().as_millis() / BUCKET.as_millis()).unwrap_or(usize::MAX)
    }

    fn count(series: &mut Vec<u32>, bucket: usize) {
        if series.len() <= bucket {
            series.resize(bucket + 1, 0);
        }
        series[bucket] += 1;
    }

    fn read_done(&self) {
        let bucket = self.bucket();
        Ctx::count(&mut self.report.borrow_mut().reads, bucket);
    }

    fn read_error(&self, kind: String) {
        *self
            .report
            .borrow_mut()
            .read_errors
            .entry(kind)
            .or_default() += 1;
    }

    fn write_error(&self, kind: String) {
        *self
            .report
            .borrow_mut()
            .write_errors
            .entry(kind)
            .or_default() += 1;
    }

    fn write_outcome(&self, id: i64, outcome: Outcome) {
        let at = self.now();
        let mut report = self.report.borrow_mut();
        match &outcome {
            Outcome::Acknowledged => {
                let bucket = self.bucket();
                Ctx::count(&mut report.writes, bucket);
            }
            Outcome::Failed { kind } | Outcome::Unknown { kind } => {
                *report.write_errors.entry(kind.clone()).or_default() += 1;
            }
        }
        report.ledger.push(WriteRecord { id, at, outcome });
    }

    async fn connect(&self, database: &str) -> Result<Session, String> {
        let mut config = tokio_postgres::Config::new();
        config
            .host(self.spec.pgtier.ip().to_string())
            .port(self.spec.pgtier.port())
            .user("postgres")
            .dbname(database)
            .connect_timeout(self.spec.op_timeout);
        Session::connect(&config, self.spec.op_timeout).await
    }
}

async fn run(spec: LoadSpec, start: Instant, stop: Arc<AtomicBool>) -> LoadReport {
    let op_timeout = spec.op_timeout;
    let ctx = Rc::new(Ctx {
        spec,
        start,
        stop,
        report: RefCell::new(LoadReport::default()),
        in_flight: RefCell::new(HashMap::new()),
    });
    let mut tasks = Vec::new();
    for index in 0..ctx.spec.readers {
        tasks.push(tokio::task::spawn_local(reader(Rc::clone(&ctx), index)));
    }
    for index in 0..ctx.spec.writers {
        tasks.push(tokio::task::spawn_local(writer(Rc::clone(&ctx), index)));
    }
    tasks.push(tokio::task::spawn_local(console_poller(Rc::clone(&ctx))));
    while !ctx.stopped() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Every operation ends within its deadline; allow that, then abandon what is left.
    let all = futures_join(tasks);
    let _ = tokio::time::timeout(op_timeout * 2 + Duration::from_secs(1), all).await;
    // Writes cut off by the end of the load: before COMMIT they cannot commit (the
    // connection is dropped with the runtime); after it their outcome is unknown.
    let in_flight: Vec<(i64, bool)> = ctx.in_flight.borrow().values().copied().collect();
    for (id, commit_sent) in in_flight {
        let kind = "abandoned at the end".to_string();
        let outcome = if commit_sent {
            Outcome::Unknown { kind }
        } else {
            Outcome::Failed { kind }
        };
        ctx.write_outcome(id, outcome);
    }
    ctx.report.take()
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        let _ = task.await;
    }
}

async fn reader(ctx: Rc<Ctx>, index: usize) {
    let mut rng =
        0x9E37_79B9_7F4A_7C15_u64 ^ (index as u64 + 1).wrapping_mul(0xD1B5_4A32_D192_ED03);
    let mut client: Option<Session> = None;
    while !ctx.stopped() {
        let current = match client.take() {
            Some(current) => current,
            None => match ctx.connect(&ctx.spec.database).await {
                Ok(current) => current,
                Err(kind) => {
                    ctx.read_error(kind);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let aid = 1 + rng % ACCOUNTS;
        let sql = format!("SELECT abalance FROM accounts WHERE aid = {aid}");
        match tokio::time::timeout(ctx.spec.op_timeout, current.client().simple_query(&sql)).await {
            Ok(Ok(_)) => {
                ctx.read_done();
                client = Some(current);
            }
            Ok(Err(error)) => {
                let failure = current.failure(&error);
                ctx.read_error(failure.kind);
                if !failure.died {
                    client = Some(current);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => ctx.read_error("client timeout".to_string()),
        }
    }
}

async fn writer(ctx: Rc<Ctx>, index: usize) {
    let mut client: Option<Session> = None;
    let mut sequence: i64 = 0;
    while !ctx.stopped() {
        let current = match client.take() {
            Some(current) => current,
            None => match ctx.connect(&ctx.spec.database).await {
                Ok(current) => current,
                Err(kind) => {
                    ctx.write_error(kind);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        sequence += 1;
        let id = ctx.spec.id_base + (index as i64) * 10_000_000 + sequence;
        let (outcome, mut keep) = write_once(&ctx, &current, index, id).await;
        ctx.in_flight.borrow_mut().remove(&index);
        let failed = !matches!(outcome, Outcome::Acknowledged);
        ctx.write_outcome(id, outcome);
        if keep && index == 0 {
            keep = read_own_write(&ctx, &current, id).await;
        }
        if keep {
            client = Some(current);
        }
        if failed {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// One ledger write: BEGIN, INSERT, COMMIT, each a round trip. Returns the outcome and
/// whether the connection may be used again.
async fn write_once(ctx: &Ctx, session: &Session, index: usize, id: i64) -> (Outcome, bool) {
    let insert = format!("INSERT INTO ledger(id, writer) VALUES ({id}, {index})");
    let steps = [("BEGIN", false), (insert.as_str(), false), ("COMMIT", true)];
    for (sql, is_commit) in steps {
        ctx.in_flight.borrow_mut().insert(index, (id, is_commit));
        match tokio::time::timeout(ctx.spec.op_timeout, session.client().simple_query(sql)).await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                let failure = session.failure(&error);
                let kind = failure.kind;
                // An ERROR inside the block leaves it aborted: the connection is dropped
                // rather than rolled back, which aborts it all the same. A COMMIT never
                // sent (the connection had ended before it) did not commit.
                let outcome = if is_commit && failure.died && failure.sent {
                    Outcome::Unknown { kind }
                } else {
                    Outcome::Failed { kind }
                };
                return (outcome, false);
            }
            Err(_) => {
                let kind = "client timeout".to_string();
                let outcome = if is_commit {
                    Outcome::Unknown { kind }
                } else {
                    Outcome::Failed { kind }
                };
                return (outcome, false);
            }
        }
    }
    (Outcome::Acknowledged, true)
}

/// Reads `id` back in a new transaction of the same session: the reader entry must route it
/// to a server that has the write. Returns whether the connection may be used again.
async fn read_own_write(ctx: &Ctx, session: &Session, id: i64) -> bool {
    let sql = format!("SELECT count(*) FROM ledger WHERE id = {id}");
    match tokio::time::timeout(ctx.spec.op_timeout, session.client().simple_query(&sql)).await {
        Ok(Ok(messages)) => {
            let seen = messages.iter().any(|message| {
                matches!(message, SimpleQueryMessage::Row(row) if row.get(0) == Some("1"))
            });
            let mut report = ctx.report.borrow_mut();
            report.ryw_reads += 1;
            if !seen {
                report.ryw_stale += 1;
            }
            true
        }
        Ok(Err(error)) => {
            let failure = session.failure(&error);
            ctx.write_error(format!("read own write: {}", failure.kind));
            !failure.died
        }
        Err(_) => {
            ctx.write_error("read own write: client timeout".to_string());
            false
        }
    }
}

/// Polls SHOW REPLICAS every 100 ms and notes each change of a replica's state.
async fn console_poller(ctx: Rc<Ctx>) {
    let mut last: HashMap<String, String> = HashMap::new();
    let mut console: Option<Session> = None;
    while !ctx.stopped() {
        let current = match console.take() {
            Some(current) => current,
            None => match ctx.connect("pgtier").await {
                Ok(current) => current,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            },
        };
        let answer = tokio::time::timeout(
            Duration::from_secs(2),
            current.client().simple_query("SHOW REPLICAS"),
        )
        .await;
        if let Ok(Ok(messages)) = answer {
            for message in messages {
                let SimpleQueryMessage::Row(row) = message else {
                    continue;
                };
                let (Some(replica), Some(state)) = (row.get("replica"), row.get("state")) else {
                    continue;
                };
                if last.get(replica).map(String::as_str) != Some(state) {
                    last.insert(replica.to_string(), state.to_string());
                    ctx.report.borrow_mut().states.push(StateChange {
                        at: ctx.now(),
                        replica: replica.to_string(),
                        state: state.to_string(),
                    });
                }
            }
            console = Some(current);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
