//! The fault scenarios: each starts pgtier in front of the lab's cluster, runs the load
//! undisturbed, injects one fault, heals it (where a heal exists), and checks the ledger on
//! the primary. Times are fixed per run (`Timing`), so every scenario is bounded.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::ledger::{self, LedgerCheck, Outcome};
use super::load::{BUCKET, Load, LoadReport, LoadSpec};
use super::netns::{self, Host, Lab};
use super::nodes::{Node, PG_PORT};
use super::proxy::{LabPgtier, Settings};
use super::relay::Relay;

/// The hosts every lab has: clients, pgtier, the relay, a primary and two replicas.
pub const HOSTS: [Host; 6] = [
    Host::Clients,
    Host::Pgtier,
    Host::Relay,
    Host::Node(0),
    Host::Node(1),
    Host::Node(2),
];

/// One fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    ReplicaPartition,
    PrimaryPartition,
    Delay,
    Loss,
    HungReplica,
    KilledReplica,
    Switchover,
    Failover,
}

impl Fault {
    pub const ALL: [Fault; 8] = [
        Fault::ReplicaPartition,
        Fault::PrimaryPartition,
        Fault::Delay,
        Fault::Loss,
        Fault::HungReplica,
        Fault::KilledReplica,
        Fault::Switchover,
        Fault::Failover,
    ];

    /// The name on the command line (`--only`).
    pub fn name(self) -> &'static str {
        match self {
            Fault::ReplicaPartition => "replica-partition",
            Fault::PrimaryPartition => "primary-partition",
            Fault::Delay => "delay-200ms",
            Fault::Loss => "loss-5pct",
            Fault::HungReplica => "hung-replica",
            Fault::KilledReplica => "killed-replica",
            Fault::Switchover => "switchover",
            Fault::Failover => "failover",
        }
    }

    /// The row title in docs/reliability.md.
    pub fn title(self) -> &'static str {
        match self {
            Fault::ReplicaPartition => "replica partition (nft drop, both ways)",
            Fault::PrimaryPartition => "primary partition (nft drop, both ways)",
            Fault::Delay => "200 ms delay to one replica (relay)",
            Fault::Loss => "5 % loss on every server link (nft numgen)",
            Fault::HungReplica => "hung replica (SIGSTOP)",
            Fault::KilledReplica => "killed replica (SIGKILL, restarted)",
            Fault::Switchover => "primary switchover (stop -m fast, promote)",
            Fault::Failover => "primary failover (SIGKILL, promote)",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|fault| fault.name() == name)
    }

    /// Whether the scenario changes which node is the primary (a fresh cluster after it).
    fn promotes(self) -> bool {
        matches!(self, Fault::Switchover | Fault::Failover)
    }

    /// The replica the fault hits, if it hits one.
    fn replica(self) -> Option<usize> {
        match self {
            Fault::ReplicaPartition | Fault::Delay | Fault::HungReplica | Fault::KilledReplica => {
                Some(1)
            }
            _ => None,
        }
    }
}

/// How long each phase of a scenario lasts.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub baseline: Duration,
    pub fault: Duration,
    pub after: Duration,
}

/// What one scenario measured.
#[derive(Clone, Debug)]
pub struct ScenarioResult {
    pub fault: Fault,
    /// Reads and acknowledged writes per second while the fault lasted, as a share of the
    /// undisturbed rate before it.
    pub reads_held: Option<f64>,
    pub writes_held: Option<f64>,
    pub read_errors: Vec<(String, u32)>,
    pub write_errors: Vec<(String, u32)>,
    pub ledger: LedgerCheck,
    /// From the fault until pgtier's SHOW REPLICAS marked the faulty replica down.
    pub detection: Option<Duration>,
    /// From the heal (or the fault, when nothing heals) until reads and writes held 80 % of
    /// the undisturbed rate for a second.
    pub recovery: Option<Duration>,
    /// The longest time without an acknowledged write, from the fault on.
    pub write_gap: Option<Duration>,
    /// Seconds of the phase `recovery` is searched in (for "not within").
    pub window: Duration,
    /// Reads of a session's own acknowledged write, and how many missed it.
    pub ryw_reads: u32,
    pub ryw_stale: u32,
}

/// The lab's PostgreSQL cluster.
pub struct Cluster {
    nodes: Vec<Node>,
    primary: usize,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("primary", &self.primary)
            .finish()
    }
}

impl Cluster {
    /// A primary with the ledger and accounts tables, and two caught-up replicas.
    pub fn start(lab: &Lab, root: &Path) -> io::Result<Cluster> {
        let primary = Node::start_primary(lab, Host::Node(0), root)?;
        primary.psql(&format!(
            "CREATE TABLE ledger(id bigint NOT NULL, writer int NOT NULL, \
               at timestamptz NOT NULL DEFAULT clock_timestamp()); \
             CREATE INDEX ledger_id ON ledger(id); \
             CREATE TABLE accounts(aid int PRIMARY KEY, abalance int NOT NULL DEFAULT 0); \
             INSERT INTO accounts(aid) SELECT g FROM generate_series(1, {}) g",
            super::load::ACCOUNTS
        ))?;
        primary.psql("VACUUM ANALYZE accounts")?;
        let mut nodes = vec![primary];
        for n in 1..=2 {
            let replica = Node::start_replica(lab, Host::Node(n), &nodes[0], root)?;
            nodes.push(replica);
        }
        let cluster = Cluster { nodes, primary: 0 };
        cluster.caught_up(Duration::from_secs(60))?;
        cluster.nodes[0].require_one_standby()?;
        Ok(cluster)
    }

    fn caught_up(&self, timeout: Duration) -> io::Result<()> {
        let primary = &self.nodes[self.primary];
        for (index, node) in self.nodes.iter().enumerate() {
            if index != self.primary {
                node.wait_caught_up(primary, timeout)?;
            }
        }
        Ok(())
    }

    pub fn primary(&self) -> &Node {
        &self.nodes[self.primary]
    }

    /// The id counts of the ledger table on the primary, for ids in `range`.
    pub fn ledger_counts(&self, low: i64, high: i64) -> io::Result<HashMap<i64, u64>> {
        let text = self.primary().psql(&format!(
            "SELECT id, count(*) FROM ledger WHERE id > {low} AND id <= {high} GROUP BY id"
        ))?;
        ledger::parse_counts(&text).map_err(io::Error::other)
    }

    /// Promotes the standby that has received the most WAL, as an operator would.
    fn promote_most_advanced(&mut self) -> io::Result<usize> {
        let mut best: Option<(f64, usize)> = None;
        for (index, node) in self.nodes.iter().enumerate() {
            if index == self.primary {
                continue;
            }
            let Ok(position) = node.wal_position() else {
                continue;
            };
            let position: f64 = position.parse().unwrap_or(0.0);
            if best.is_none_or(|(top, _)| position > top) {
                best = Some((position, index));
            }
        }
        let (_, index) = best.ok_or_else(|| io::Error::other("no standby to promote"))?;
        self.nodes[index].promote()?;
        self.primary = index;
        Ok(index)
    }
}

/// Where the harness keeps its data directories and pgtier's files.
pub fn work_dir() -> PathBuf {
    std::env::temp_dir().join(format!("pgtier-faults-{}", std::process::id()))
}

/// Runs `faults` in order; a promoting scenario gets a fresh cluster, as does the one after
/// it. `on_result` sees each result as it comes (for progress output).
pub fn run_all(
    lab: &Lab,
    faults: &[Fault],
    timing: Timing,
    settings: &Settings,
    mut on_result: impl FnMut(&ScenarioResult),
) -> io::Result<Vec<ScenarioResult>> {
    let root = work_dir();
    let mut cluster: Option<Cluster> = None;
    let mut results = Vec::new();
    for (index, &fault) in faults.iter().enumerate() {
        let needs_fresh = fault.promotes() || cluster.as_ref().is_some_and(|c| c.primary != 0);
        if needs_fresh || cluster.is_none() {
            // Drop the old one first: the new one reuses the namespaces and the port.
            drop(cluster.take());
            eprintln!("faults: starting a primary and two replicas");
            cluster = Some(Cluster::start(lab, &root)?);
        }
        let Some(current) = cluster.as_mut() else {
            return Err(io::Error::other("no cluster"));
        };
        eprintln!("faults: scenario {}", fault.name());
        let id_base = (index as i64 + 1) * 1_000_000_000;
        let result = run_one(
            lab,
            current,
            fault,
            timing,
            settings,
            id_base,
            &root.join(fault.name()),
        )?;
        on_result(&result);
        results.push(result);
        if !fault.promotes() {
            current.caught_up(Duration::from_secs(60))?;
        }
    }
    Ok(results)
}

/// The load of every scenario.
fn spec(pgtier: SocketAddr, timing: Timing, id_base: i64) -> LoadSpec {
    LoadSpec {
        pgtier,
        database: "app".to_string(),
        readers: 4,
        writers: 2,
        // Longer than any fault, so a client waits a fault out rather than giving up.
        op_timeout: timing.fault + Duration::from_secs(5),
        id_base,
    }
}

fn run_one(
    lab: &Lab,
    cluster: &mut Cluster,
    fault: Fault,
    timing: Timing,
    settings: &Settings,
    id_base: i64,
    dir: &Path,
) -> io::Result<ScenarioResult> {
    let endpoints: Vec<String> = cluster.nodes.iter().map(Node::endpoint).collect();
    // The delayed replica is reached through the relay for the whole scenario, so its
    // undisturbed rate includes the relay's own cost.
    let relay = if fault == Fault::Delay {
        let listen = SocketAddr::new(parse_ip(&lab.addr(Host::Relay))?, PG_PORT + 10);
        let upstream = SocketAddr::new(parse_ip(&lab.addr(Host::Node(1)))?, PG_PORT);
        Some(Relay::start(lab, listen, upstream)?)
    } else {
        None
    };
    let mut replicas: Vec<String> = Vec::new();
    for (index, endpoint) in endpoints.iter().enumerate() {
        if index == cluster.primary {
            continue;
        }
        match (&relay, index) {
            (Some(relay), 1) => replicas.push(relay.listen().to_string()),
            _ => replicas.push(endpoint.clone()),
        }
    }
    let target = fault.replica().map(|index| replicas[index - 1].clone());
    let pgtier = LabPgtier::start(lab, dir, &endpoints[cluster.primary], &replicas, settings)?;
    let load = Load::start(lab, spec(pgtier.addr(), timing, id_base))?;
    sleep_until(&load, timing.baseline);
    let fault_at = load.elapsed();
    inject(lab, cluster, fault, relay.as_ref())?;
    sleep_until(&load, fault_at + timing.fault);
    let heal_at = load.elapsed();
    heal(lab, cluster, fault, relay.as_ref())?;
    sleep_until(&load, heal_at + timing.after);
    let end = load.elapsed();
    let report = load.finish()?;
    let counts = cluster.ledger_counts(id_base, id_base + 999_999_999)?;
    let checked = ledger::check(&report.ledger, &counts);
    if !checked.holds() {
        eprintln!(
            "faults: {} ledger check FAILED: {}\npgtier log tail:\n{}",
            fault.name(),
            checked.summary(),
            pgtier.log_tail(30)
        );
    }
    drop(pgtier);
    drop(relay);
    let recovery_from = if fault.promotes() { fault_at } else { heal_at };
    Ok(measure(
        fault,
        &report,
        checked,
        Phases {
            fault_at,
            heal_at,
            recovery_from,
            end,
        },
        target.as_deref(),
    ))
}

fn parse_ip(text: &str) -> io::Result<std::net::IpAddr> {
    text.parse()
        .map_err(|_| io::Error::other(format!("bad address {text}")))
}

fn sleep_until(load: &Load, at: Duration) {
    let now = load.elapsed();
    if at > now {
        std::thread::sleep(at - now);
    }
}

fn inject(lab: &Lab, cluster: &mut Cluster, fault: Fault, relay: Option<&Relay>) -> io::Result<()> {
    match fault {
        Fault::ReplicaPartition => lab.nft_load(Host::Node(1), &netns::partition_ruleset()),
        Fault::PrimaryPartition => lab.nft_load(Host::Node(0), &netns::partition_ruleset()),
        Fault::Delay => {
            if let Some(relay) = relay {
                relay.set_delay(Duration::from_millis(200));
            }
            Ok(())
        }
        Fault::Loss => {
            for n in 0..3 {
                lab.nft_load(Host::Node(n), &netns::loss_ruleset(5))?;
            }
            Ok(())
        }
        Fault::HungReplica => cluster.nodes[1].signal_all(libc::SIGSTOP),
        Fault::KilledReplica => cluster.nodes[1].signal_all(libc::SIGKILL),
        Fault::Switchover => {
            cluster.nodes[cluster.primary].stop_fast()?;
            cluster.promote_most_advanced().map(|_| ())
        }
        Fault::Failover => {
            cluster.nodes[cluster.primary].signal_all(libc::SIGKILL)?;
            cluster.promote_most_advanced().map(|_| ())
        }
    }
}

fn heal(lab: &Lab, cluster: &mut Cluster, fault: Fault, relay: Option<&Relay>) -> io::Result<()> {
    match fault {
        Fault::ReplicaPartition => lab.nft_flush(Host::Node(1)),
        Fault::PrimaryPartition => lab.nft_flush(Host::Node(0)),
        Fault::Delay => {
            if let Some(relay) = relay {
                relay.set_delay(Duration::ZERO);
            }
            Ok(())
        }
        Fault::Loss => {
            for n in 0..3 {
                lab.nft_flush(Host::Node(n))?;
            }
            Ok(())
        }
        Fault::HungReplica => cluster.nodes[1].signal_all(libc::SIGCONT),
        Fault::KilledReplica => cluster.nodes[1].start(),
        // The old primary stays down: nothing to heal.
        Fault::Switchover | Fault::Failover => Ok(()),
    }
}

/// The moments of a scenario, from the start of its load.
#[derive(Clone, Copy, Debug)]
struct Phases {
    fault_at: Duration,
    heal_at: Duration,
    recovery_from: Duration,
    end: Duration,
}

/// Undisturbed rates skip the first second (connections opening).
const WARMUP: Duration = Duration::from_secs(1);
/// Recovered: both rates at this share of undisturbed, over `HOLD`.
const RECOVERED_SHARE: f64 = 0.8;
const HOLD: Duration = Duration::from_secs(1);

fn measure(
    fault: Fault,
    report: &LoadReport,
    ledger: LedgerCheck,
    phases: Phases,
    target: Option<&str>,
) -> ScenarioResult {
    let base_reads = rate(&report.reads, WARMUP, phases.fault_at);
    let base_writes = rate(&report.writes, WARMUP, phases.fault_at);
    let share = |series: &[u32], base: f64| {
        (base > 0.0).then(|| rate(series, phases.fault_at, phases.heal_at) / base)
    };
    let detection = target.and_then(|target| {
        report
            .states
            .iter()
            .find(|change| {
                change.at >= phases.fault_at && change.replica == target && change.state != "up"
            })
            .map(|change| change.at - phases.fault_at)
    });
    let recovery = recovered_at(report, base_reads, base_writes, phases)
        .map(|at| at.saturating_sub(phases.recovery_from));
    ScenarioResult {
        fault,
        reads_held: share(&report.reads, base_reads),
        writes_held: share(&report.writes, base_writes),
        read_errors: sorted(&report.read_errors),
        write_errors: sorted(&report.write_errors),
        ledger,
        detection,
        recovery,
        write_gap: write_gap(report, phases),
        window: phases.end.saturating_sub(phases.recovery_from),
        ryw_reads: report.ryw_reads,
        ryw_stale: report.ryw_stale,
    }
}

fn sorted(errors: &std::collections::BTreeMap<String, u32>) -> Vec<(String, u32)> {
    let mut list: Vec<(String, u32)> = errors.iter().map(|(k, v)| (k.clone(), *v)).collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    list
}

fn bucket_of(at: Duration) -> usize {
    usize::try_from(at.as_millis() / BUCKET.as_millis()).unwrap_or(usize::MAX)
}

/// Events per second in `[from, to)`.
fn rate(series: &[u32], from: Duration, to: Duration) -> f64 {
    let (first, last) = (bucket_of(from), bucket_of(to));
    if last <= first {
        return 0.0;
    }
    let total: u64 = (first..last)
        .map(|b| u64::from(series.get(b).copied().unwrap_or(0)))
        .sum();
    total as f64 / ((last - first) as f64 * BUCKET.as_secs_f64())
}

/// The first moment after `recovery_from` from which both rates hold `RECOVERED_SHARE` of
/// undisturbed for `HOLD`.
fn recovered_at(
    report: &LoadReport,
    base_reads: f64,
    base_writes: f64,
    phases: Phases,
) -> Option<Duration> {
    let hold = bucket_of(HOLD);
    let (first, last) = (bucket_of(phases.recovery_from), bucket_of(phases.end));
    (first..last.saturating_sub(hold)).find_map(|b| {
        let from = BUCKET * u32::try_from(b).ok()?;
        let to = from + HOLD;
        let reads_ok = rate(&report.reads, from, to) >= RECOVERED_SHARE * base_reads;
        let writes_ok = rate(&report.writes, from, to) >= RECOVERED_SHARE * base_writes;
        (reads_ok && writes_ok).then_some(from)
    })
}

/// The longest stretch without an acknowledged write from the fault to the end.
fn write_gap(report: &LoadReport, phases: Phases) -> Option<Duration> {
    let mut acks: Vec<Duration> = report
        .ledger
        .iter()
        .filter(|r| r.outcome == Outcome::Acknowledged)
        .map(|r| r.at)
        .collect();
    acks.sort_unstable();
    let mut previous = acks
        .iter()
        .rev()
        .find(|&&at| at < phases.fault_at)
        .copied()?;
    let mut longest = Duration::ZERO;
    for &at in acks.iter().filter(|&&at| at >= phases.fault_at) {
        longest = longest.max(at - previous);
        previous = at;
    }
    Some(longest.max(phases.end.saturating_sub(previous)))
}

/// The self-check: a short undisturbed write load, then the ledger check must catch one
/// acknowledged id deleted on the primary and one id inserted twice. Returns what it saw.
pub fn self_check(lab: &Lab) -> io::Result<String> {
    let root = work_dir();
    let cluster = Cluster::start(lab, &root)?;
    let endpoints: Vec<String> = cluster.nodes.iter().map(Node::endpoint).collect();
    let pgtier = LabPgtier::start(
        lab,
        &root.join("self-check"),
        &endpoints[0],
        &endpoints[1..],
        &Settings::default(),
    )?;
    let timing = Timing {
        baseline: Duration::from_secs(2),
        fault: Duration::from_secs(1),
        after: Duration::ZERO,
    };
    let id_base = 0;
    let load = Load::start(lab, spec(pgtier.addr(), timing, id_base))?;
    let started = Instant::now();
    std::thread::sleep(timing.baseline);
    let report = load.finish()?;
    let high = id_base + 999_999_999;
    let clean = ledger::check(&report.ledger, &cluster.ledger_counts(id_base, high)?);
    if !clean.holds() || clean.acknowledged < 2 {
        return Err(io::Error::other(format!(
            "the undisturbed ledger does not hold: {}",
            clean.summary()
        )));
    }
    let acked: Vec<i64> = report
        .ledger
        .iter()
        .filter(|r| r.outcome == Outcome::Acknowledged)
        .map(|r| r.id)
        .collect();
    let (deleted, doubled) = (acked[0], acked[1]);
    let primary = cluster.primary();
    primary.psql(&format!("DELETE FROM ledger WHERE id = {deleted}"))?;
    primary.psql(&format!(
        "INSERT INTO ledger(id, writer) VALUES ({doubled}, -1)"
    ))?;
    let broken = ledger::check(&report.ledger, &cluster.ledger_counts(id_base, high)?);
    if broken.holds() || broken.lost != vec![deleted] || broken.duplicated != vec![doubled] {
        return Err(io::Error::other(format!(
            "the check missed the damage (deleted {deleted}, doubled {doubled}): {}",
            broken.summary()
        )));
    }
    Ok(format!(
        "ledger self-check: {} writes in {:.1} s; deleting acknowledged id {deleted} was \
         reported lost and a second copy of {doubled} duplicated",
        report.ledger.len(),
        started.elapsed().as_secs_f64()
    ))
}
