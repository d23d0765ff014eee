//! Primary switchover and failover of a reader entry under a write load, with a ledger of
//! acknowledged writes.
//!
//! A real primary and two streaming replicas (synchronous: `ANY 2 (*)`, so a commit the
//! primary acknowledged is on both replicas, as an HA setup that promises no loss has it).
//! Writer threads insert unique ids through pgtier, one autocommit INSERT per id, and record
//! each outcome: acknowledged, failed with a definite error (PostgreSQL refused it: the row
//! cannot be there), or unknown (the connection died around it: 08xxx, 57P0x, no answer).
//! Then a replica is promoted and the old primary stopped (switchover) or SIGKILLed with its
//! backends (failover); the other replica is re-pointed at the new primary, as an HA manager
//! does. pgtier must find the new primary by itself (its poller sees `pg_is_in_recovery()`
//! false on a newer timeline). Checked: writes resume; every acknowledged id is on the new
//! primary exactly once; no definitely failed id is; reads go on; read-your-writes holds.
//! Then the old primary is started again as a standalone read-write server on its old
//! timeline (split brain): pgtier must never send it a write, even after RECONNECT replaced
//! every server.
//!
//! How long writes were unavailable is printed, not asserted (a loaded machine stretches
//! it): the longest gap between two acknowledged writes around the fault.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::start_proxy;
use pgtier_tests::wait;
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

const WRITERS: i64 = 4;
/// Ids written after the old primary came back start here.
const AFTER_RETURN: i64 = 1_000_000_000;
/// Ids of the read-your-writes sessions start here.
const RYW_IDS: i64 = 2_000_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Acked,
    /// PostgreSQL answered with an error that means the statement did not commit.
    Failed,
    /// The connection ended around it: it may or may not have committed.
    Unknown,
}

#[derive(Clone, Copy, Debug)]
struct Attempt {
    id: i64,
    outcome: Outcome,
    at: Instant,
}

type Ledger = Arc<Mutex<Vec<Attempt>>>;

fn record(ledger: &Ledger, attempt: Attempt) {
    ledger
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(attempt);
}

fn attempts(ledger: &Ledger) -> Vec<Attempt> {
    ledger
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// What an error says of a statement's fate: a server error outside the connection and
/// shutdown classes is definite; anything else (no SQLSTATE, 08xxx, 57P01-57P03) is not.
fn outcome_of(error: &postgres::Error) -> Outcome {
    match error.code().map(|code| code.code()) {
        Some(code) if !code.starts_with("08") && !code.starts_with("57P") => Outcome::Failed,
        _ => Outcome::Unknown,
    }
}

fn client_config(port: u16) -> postgres::Config {
    let mut config = postgres::Config::new();
    config
        .host("127.0.0.1")
        .port(port)
        .dbname("app")
        .user("postgres")
        .connect_timeout(Duration::from_secs(2));
    config
}

/// Writer `index`: ids `base + index`, `base + index + WRITERS`, ... until `stop`.
fn writer(port: u16, index: i64, base: i64, stop: Arc<AtomicBool>, ledger: Ledger) {
    let mut next = base + index;
    let mut client: Option<postgres::Client> = None;
    while !stop.load(Ordering::Acquire) {
        let Some(connected) = client.as_mut() else {
            match client_config(port).connect(postgres::NoTls) {
                Ok(connected) => client = Some(connected),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
            continue;
        };
        let id = next;
        next += WRITERS;
        let result = connected.simple_query(&format!("INSERT INTO ledger VALUES ({id})"));
        let outcome = match &result {
            Ok(_) => Outcome::Acked,
            Err(error) => outcome_of(error),
        };
        record(
            &ledger,
            Attempt {
                id,
                outcome,
                at: Instant::now(),
            },
        );
        if result.is_err() {
            client = None;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Reads in a loop until `stop`, counting answered and failed reads.
fn reader(port: u16, stop: Arc<AtomicBool>, answered: Arc<AtomicU64>, failed: Arc<AtomicU64>) {
    let mut client: Option<postgres::Client> = None;
    while !stop.load(Ordering::Acquire) {
        let Some(connected) = client.as_mut() else {
            match client_config(port).connect(postgres::NoTls) {
                Ok(connected) => client = Some(connected),
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
            continue;
        };
        match connected.simple_query("SELECT count(*) FROM ledger") {
            Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
            Err(_) => {
                client = None;
                failed.fetch_add(1, Ordering::Relaxed)
            }
        };
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A write load and a read load through pgtier.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    ledger: Ledger,
    reads: Arc<AtomicU64>,
    read_errors: Arc<AtomicU64>,
}

impl Load {
    fn start(port: u16, base: i64) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let ledger: Ledger = Arc::default();
        let reads = Arc::new(AtomicU64::new(0));
        let read_errors = Arc::new(AtomicU64::new(0));
        let mut threads = Vec::new();
        for index in 0..WRITERS {
            let (stop, ledger) = (Arc::clone(&stop), Arc::clone(&ledger));
            threads.push(std::thread::spawn(move || {
                writer(port, index, base, stop, ledger)
            }));
        }
        let (stop2, answered, failed) = (
            Arc::clone(&stop),
            Arc::clone(&reads),
            Arc::clone(&read_errors),
        );
        threads.push(std::thread::spawn(move || {
            reader(port, stop2, answered, failed)
        }));
        Load {
            stop,
            threads,
            ledger,
            reads,
            read_errors,
        }
    }

    fn acked_after(&self, after: Instant) -> usize {
        attempts(&self.ledger)
            .iter()
            .filter(|a| a.outcome == Outcome::Acked && a.at > after)
            .count()
    }

    fn finish(self) -> (Vec<Attempt>, u64, u64) {
        self.stop.store(true, Ordering::Release);
        for thread in self.threads {
            thread.join().expect("load thread");
        }
        (
            attempts(&self.ledger),
            self.reads.load(Ordering::Relaxed),
            self.read_errors.load(Ordering::Relaxed),
        )
    }
}

/// One PostgreSQL server and where it listens.
struct Node {
    pg: LocalPg,
    host: String,
    port: u16,
}

impl Node {
    fn sql(&self, sql: &str) -> String {
        let conninfo = format!(
            "host={} port={} user=postgres dbname=postgres",
            self.host, self.port
        );
        self.pg
            .psql_conninfo(&conninfo, sql)
            .unwrap_or_else(|error| panic!("{sql} on {}:{}: {error}", self.host, self.port))
    }

    fn wait_caught_up(&self, primary: &Node) {
        let target = primary.sql("SELECT pg_current_wal_lsn()");
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        let caught_up = wait::until(Duration::from_secs(30), Duration::from_millis(20), || {
            (self.sql(&sql) == "t").then_some(())
        });
        assert!(
            caught_up.is_some(),
            "replica {}:{} catches up",
            self.host,
            self.port
        );
    }
}

/// How pgtier is told about the three servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// A reader entry: `primary` and `replicas`, each server on its own port.
    Reader,
    /// PgBouncer's host list on one port (`host = "127.0.0.1,127.0.0.2,127.0.0.3"`), each
    /// server on its own loopback address, with `target_session_attrs = "read-write"`.
    HostList,
}

struct Cluster {
    shape: Shape,
    old_primary: Node,
    promoted: Node,
    other: Node,
}

impl Cluster {
    /// A primary, two synchronous streaming replicas, and the ledger table.
    fn start(shape: Shape) -> Cluster {
        let pg = LocalPg::start_primary(&PgOptions::default()).expect("primary");
        let port = pg.port();
        let primary = Node {
            pg,
            host: "127.0.0.1".to_string(),
            port,
        };
        let replica = |address: &str| {
            let pg = LocalPg::start_replica(&primary.pg).expect("replica");
            match shape {
                Shape::Reader => {
                    let port = pg.port();
                    Node {
                        pg,
                        host: "127.0.0.1".to_string(),
                        port,
                    }
                }
                Shape::HostList => {
                    // The same port as the primary, on another loopback address.
                    pg.stop().expect("stop the new replica");
                    let conf = pg.data_dir().join("postgresql.conf");
                    let mut text = std::fs::read_to_string(&conf).expect("read postgresql.conf");
                    text.push_str(&format!(
                        "\nlisten_addresses = '{address}'\nport = {}\n",
                        primary.port
                    ));
                    std::fs::write(&conf, text).expect("write postgresql.conf");
                    // pg_basebackup copied the primary's socket lock file (its socket
                    // directory is its data directory): on the same port it would stop us.
                    let lock = pg
                        .data_dir()
                        .join(format!(".s.PGSQL.{}.lock", primary.port));
                    let _ = std::fs::remove_file(lock);
                    if let Err(error) = pg.start() {
                        let log = std::fs::read_to_string(pg.log_path()).unwrap_or_default();
                        let tail: Vec<&str> = log.lines().rev().take(8).collect();
                        panic!(
                            "restart the replica on {address}: {error}\n{}",
                            tail.join("\n")
                        );
                    }
                    Node {
                        pg,
                        host: address.to_string(),
                        port: primary.port,
                    }
                }
            }
        };
        let promoted = replica("127.0.0.2");
        let other = replica("127.0.0.3");
        // Set after the clones, so the replicas (promoted later) do not inherit it.
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = 'ANY 2 (*)'");
        // localpg turns synchronous_commit off for speed; a commit must wait for the standbys.
        primary.sql("ALTER SYSTEM SET synchronous_commit = on");
        primary.sql("SELECT pg_reload_conf()");
        primary.sql("CREATE TABLE ledger (id bigint PRIMARY KEY)");
        promoted.wait_caught_up(&primary);
        other.wait_caught_up(&primary);
        Cluster {
            shape,
            old_primary: primary,
            promoted,
            other,
        }
    }

    fn proxy(&self) -> Pgtier {
        let mut config = ProxyConfig::new(self.old_primary.port);
        match self.shape {
            Shape::Reader => {
                config = config
                    .reader_database(
                        "app",
                        self.old_primary.port,
                        &[self.promoted.port, self.other.port],
                        "postgres",
                    )
                    .database_setting("read_your_writes_timeout", "0.5");
            }
            Shape::HostList => {
                config.raw_tables = format!(
                    "\n[databases.app]\nhost = \"{},{},{}\"\nport = {}\ndbname = \"postgres\"\n\
                     target_session_attrs = \"read-write\"\n",
                    self.old_primary.host,
                    self.promoted.host,
                    self.other.host,
                    self.old_primary.port
                );
            }
        }
        let config = config
            .setting("health_check_user", "\"postgres\"")
            .setting("admin_users", "[\"postgres\"]")
            .pool_size(8);
        start_proxy(config)
    }

    /// Promotes the replica, then points the other one at it (an HA manager's steps).
    /// Returns when `pg_ctl promote` returned.
    fn promote(&self) -> Instant {
        self.promoted.pg.promote().expect("pg_ctl promote");
        let promoted = Instant::now();
        self.other.sql(&format!(
            "ALTER SYSTEM SET primary_conninfo = 'host={} port={} user=postgres'",
            self.promoted.host, self.promoted.port
        ));
        self.other.sql("SELECT pg_reload_conf()");
        promoted
    }
}

/// SIGKILLs the postmaster and every backend of `node`, as a machine crash ends them. The
/// postmaster is stopped first so it forks nothing the kill would miss (a backend left
/// alive would keep the shared memory and stop the restart).
fn kill_hard(node: &Node) {
    let postmaster = node.pg.postmaster_pid().expect("postmaster pid");
    // SAFETY: plain kill(2) of processes this test's server started.
    unsafe { libc::kill(postmaster, libc::SIGSTOP) };
    let children = children_of(postmaster);
    for child in &children {
        // SAFETY: as above.
        unsafe { libc::kill(*child, libc::SIGKILL) };
    }
    // SAFETY: as above.
    unsafe { libc::kill(postmaster, libc::SIGKILL) };
    let gone = wait::until(Duration::from_secs(10), Duration::from_millis(5), || {
        std::iter::once(postmaster)
            .chain(children.iter().copied())
            .all(is_gone)
            .then_some(())
    });
    assert!(gone.is_some(), "the killed server's processes are gone");
}

/// Whether `pid` exited (gone, or a zombie not reaped yet).
fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The fields after the parenthesised command: state, then the parent.
                    let rest = &stat[stat.rfind(')')? + 1..];
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}

/// Ids in `pg`'s ledger.
fn ledger_ids(node: &Node) -> std::collections::BTreeSet<i64> {
    node.sql("SELECT id FROM ledger ORDER BY id")
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

/// The longest pause between two acknowledged writes after `from`.
fn longest_write_gap(attempts: &[Attempt], from: Instant) -> Duration {
    let mut acks: Vec<Instant> = attempts
        .iter()
        .filter(|a| a.outcome == Outcome::Acked)
        .map(|a| a.at)
        .collect();
    acks.sort();
    let start = acks.iter().rposition(|at| *at <= from).unwrap_or(0);
    acks[start..]
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or_default()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// `pg_ctl stop -m fast` of the old primary, then the promotion.
    Switchover,
    /// SIGKILL of the old primary and its backends, then the promotion.
    Failover,
}

fn run(shape: Shape, fault: Fault) {
    let t0 = Instant::now();
    let step = |what: &str| eprintln!("[{:>6} ms] {what}", t0.elapsed().as_millis());
    let cluster = Cluster::start(shape);
    step("cluster up");
    let proxy = cluster.proxy();
    step("pgtier up");
    let load = Load::start(proxy.port(), 0);
    let warm = wait::until(Duration::from_secs(30), Duration::from_millis(20), || {
        (load.acked_after(Instant::now() - Duration::from_secs(60)) >= 200).then_some(())
    });
    assert!(warm.is_some(), "writes are acknowledged before the fault");

    let fault_at = Instant::now();
    step("warm");
    match fault {
        Fault::Switchover => cluster.old_primary.pg.stop().expect("stop the old primary"),
        Fault::Failover => kill_hard(&cluster.old_primary),
    }
    let stopped_at = Instant::now();
    let promote_returned = cluster.promote();
    let promoted_at = Instant::now();
    let resumed = wait::until(Duration::from_secs(30), Duration::from_millis(5), || {
        (load.acked_after(promoted_at) > 0).then_some(())
    });
    assert!(resumed.is_some(), "writes resumed on the promoted replica");
    // Some more writes on the new primary, and reads meanwhile.
    std::thread::sleep(Duration::from_secs(1));
    let (ledger, reads, read_errors) = load.finish();
    step("load finished");

    let gap = longest_write_gap(&ledger, fault_at);
    // pgtier's own share: the first write acknowledged once the old primary was gone (so
    // on the new one), against the moment pg_ctl promote returned (it polls the server
    // every 100 ms, so this can be negative).
    let first_after = ledger
        .iter()
        .filter(|a| a.outcome == Outcome::Acked && a.at > stopped_at)
        .map(|a| a.at)
        .min();
    let after_promote_ms = first_after.map_or(i128::MAX, |at| {
        if at >= promote_returned {
            (at - promote_returned).as_millis() as i128
        } else {
            -((promote_returned - at).as_millis() as i128)
        }
    });
    println!(
        "{shape:?} {fault:?}: first write acknowledged {after_promote_ms} ms after pg_ctl \
         promote returned"
    );
    let acked = ledger
        .iter()
        .filter(|a| a.outcome == Outcome::Acked)
        .count();
    let failed: Vec<i64> = ledger
        .iter()
        .filter(|a| a.outcome == Outcome::Failed)
        .map(|a| a.id)
        .collect();
    let unknown = ledger
        .iter()
        .filter(|a| a.outcome == Outcome::Unknown)
        .count();
    println!(
        "{shape:?} {fault:?}: writes unavailable for {} ms (longest gap between acknowledged writes; \
         stopping (or killing) the old primary took {} ms, pg_ctl promote and re-pointing the other \
         replica {} ms); {acked} acknowledged, {} failed definitely, {unknown} unknown; \
         reads {reads} answered, {read_errors} failed",
        gap.as_millis(),
        (stopped_at - fault_at).as_millis(),
        (promoted_at - stopped_at).as_millis(),
        failed.len(),
    );

    // The ledger on the new primary: every acknowledged id, none refused.
    let on_new = ledger_ids(&cluster.promoted);
    let lost: Vec<i64> = ledger
        .iter()
        .filter(|a| a.outcome == Outcome::Acked && !on_new.contains(&a.id))
        .map(|a| a.id)
        .collect();
    println!(
        "{shape:?} {fault:?}: acknowledged writes lost: {}",
        lost.len()
    );
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    let present_failed: Vec<&i64> = failed.iter().filter(|id| on_new.contains(id)).collect();
    assert!(
        present_failed.is_empty(),
        "writes that failed definitely are present: {present_failed:?}"
    );
    // Exactly once: ids are the primary key, and every row is an id a writer tried once.
    let tried: std::collections::BTreeSet<i64> = ledger.iter().map(|a| a.id).collect();
    assert!(
        on_new.iter().all(|id| tried.contains(id)),
        "a row nobody wrote"
    );
    assert_eq!(
        cluster
            .promoted
            .sql("SELECT count(*) - count(DISTINCT id) FROM ledger"),
        "0"
    );

    step("ledger checked");
    if shape == Shape::Reader {
        let mut console = proxy.connect("pgtier", "postgres").expect("console");
        let rows = console.simple_query("SHOW READERS").expect("SHOW READERS");
        let primary = rows.iter().find_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get("primary").map(str::to_string),
            _ => None,
        });
        assert_eq!(
            primary,
            Some(format!(
                "{}:{}",
                cluster.promoted.host, cluster.promoted.port
            )),
            "SHOW READERS names the new primary"
        );
    }

    // Reads go on and read-your-writes holds against the new primary.
    let mut client = proxy.connect("app", "postgres").expect("connect");
    client
        .simple_query("SELECT count(*) FROM ledger")
        .expect("a read after the switch");
    for n in 0..20 {
        let id = RYW_IDS + n;
        let mut session = proxy.connect("app", "postgres").expect("connect");
        session
            .simple_query(&format!("INSERT INTO ledger VALUES ({id})"))
            .expect("a write after the switch");
        let row = session
            .query_one(&format!("SELECT count(*) FROM ledger WHERE id = {id}"), &[])
            .expect("read after write");
        assert_eq!(row.get::<_, i64>(0), 1, "session {n} did not see its write");
    }

    step("ryw checked");
    // The old primary comes back as a standalone primary on its old timeline.
    if fault == Fault::Failover {
        // A killed postmaster's pid counts as running (to PostgreSQL's lock file check)
        // until its zombie is reaped, which can take a moment here.
        if let Ok(pid) = cluster.old_primary.pg.postmaster_pid() {
            let reaped = wait::until(Duration::from_secs(30), Duration::from_millis(20), || {
                (!std::path::Path::new(&format!("/proc/{pid}")).exists()).then_some(())
            });
            assert!(reaped.is_some(), "the killed postmaster was never reaped");
        }
    }
    if let Err(error) = cluster.old_primary.pg.start() {
        let log = std::fs::read_to_string(cluster.old_primary.pg.log_path()).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        panic!("restart the old primary: {error}\n{}", tail.join("\n"));
    }
    assert_eq!(cluster.old_primary.sql("SELECT pg_is_in_recovery()"), "f");
    let before = ledger_ids(&cluster.old_primary).len();
    // Let the poller see it, then make every server new: none may go to the old primary.
    std::thread::sleep(Duration::from_millis(500));
    let mut console = proxy.connect("pgtier", "postgres").expect("console");
    console.simple_query("RECONNECT app").expect("RECONNECT");
    let load = Load::start(proxy.port(), AFTER_RETURN);
    step("old primary back, reconnected");
    let more = wait::until(Duration::from_secs(30), Duration::from_millis(20), || {
        (load.acked_after(Instant::now() - Duration::from_secs(60)) >= 200).then_some(())
    });
    assert!(more.is_some(), "writes go on with the old primary back");
    let (ledger, _, _) = load.finish();
    let on_old = ledger_ids(&cluster.old_primary);
    assert_eq!(
        on_old.len(),
        before,
        "the old primary took writes after it came back (split brain)"
    );
    let on_new = ledger_ids(&cluster.promoted);
    let lost = ledger
        .iter()
        .filter(|a| a.outcome == Outcome::Acked && !on_new.contains(&a.id))
        .count();
    assert_eq!(lost, 0, "acknowledged writes missing on the new primary");
    println!(
        "{shape:?} {fault:?}: old primary back read-write on its old timeline: {} writes after it, 0 on it",
        ledger
            .iter()
            .filter(|a| a.outcome == Outcome::Acked)
            .count()
    );
    assert!(
        proxy.log().contains("primary moved"),
        "the move is logged:\n{}",
        proxy.log()
    );
}

#[test]
fn switchover_moves_writes_to_the_promoted_replica_without_losing_any() {
    run(Shape::Reader, Fault::Switchover);
}

#[test]
fn failover_after_a_killed_primary_loses_no_acknowledged_write() {
    run(Shape::Reader, Fault::Failover);
}

#[test]
fn a_read_write_host_list_follows_a_switchover() {
    run(Shape::HostList, Fault::Switchover);
}

#[test]
fn a_read_write_host_list_follows_a_failover() {
    run(Shape::HostList, Fault::Failover);
}
