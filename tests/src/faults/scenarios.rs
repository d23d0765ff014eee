//! The fault scenarios: each starts pgtier in front of the lab's cluster, runs the load
//! undisturbed, injects one fault, heals it (where a heal exists), and checks the ledger on
//! the primary. Times are fixed per run (`Timing`), so every scenario is bounded.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cluster::Cluster;
pub use super::fault::Fault;
use super::ledger::{self, Outcome};
use super::load::{Load, LoadSpec};
use super::measure::{Phases, ScenarioResult, measure};
use super::netem::{Netem, QueueRules};
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

/// How long each phase of a scenario lasts.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub baseline: Duration,
    pub fault: Duration,
    pub after: Duration,
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
        let needs_fresh =
            fault.promotes() || cluster.as_ref().is_some_and(|c| c.primary_index() != 0);
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
    let endpoints: Vec<String> = cluster.nodes().iter().map(Node::endpoint).collect();
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
        if index == cluster.primary_index() {
            continue;
        }
        match (&relay, index) {
            (Some(relay), 1) => replicas.push(relay.listen().to_string()),
            _ => replicas.push(endpoint.clone()),
        }
    }
    let target = fault.replica().map(|index| replicas[index - 1].clone());
    // The netem listens for the whole scenario; its rules route the replica's packets to it
    // only while the fault lasts.
    let netem_host = Host::Node(fault.replica().map_or(1, |index| index as u8));
    let netem_ns = lab.ns(netem_host);
    let netem = match fault.netem() {
        Some(spec) => Some(Netem::start(
            Some(netem_ns.clone()),
            NETEM_QUEUE,
            spec,
            id_base as u64,
        )?),
        None => None,
    };
    let mut rules = QueueRules::new(Some(netem_ns));
    let pgtier = LabPgtier::start(
        lab,
        dir,
        &endpoints[cluster.primary_index()],
        &replicas,
        settings,
    )?;
    let load = Load::start(lab, spec(pgtier.addr(), timing, id_base))?;
    sleep_until(&load, timing.baseline);
    let fault_at = load.elapsed();
    inject(lab, cluster, fault, relay.as_ref(), &mut rules)?;
    sleep_until(&load, fault_at + timing.fault);
    let heal_at = load.elapsed();
    heal(lab, cluster, fault, relay.as_ref(), &mut rules)?;
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
    rules.clear()?;
    let netem = netem.map(Netem::stop).transpose()?;
    let recovery_from = if fault.promotes() { fault_at } else { heal_at };
    let mut result = measure(
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
    );
    result.netem = netem;
    Ok(result)
}

/// The NFQUEUE number of the netem (queues are per namespace).
const NETEM_QUEUE: u16 = 0;

/// Sends every packet on the netem host's link, both ways, to the netem's queue.
fn queue_link(rules: &mut QueueRules) -> io::Result<()> {
    rules.add("INPUT", &["-i", "eth0"], NETEM_QUEUE)?;
    rules.add("OUTPUT", &["-o", "eth0"], NETEM_QUEUE)
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

fn inject(
    lab: &Lab,
    cluster: &mut Cluster,
    fault: Fault,
    relay: Option<&Relay>,
    rules: &mut QueueRules,
) -> io::Result<()> {
    match fault {
        Fault::PacketDelay | Fault::Jitter | Fault::Reordering => queue_link(rules),
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
        Fault::HungReplica => cluster.nodes()[1].signal_all(libc::SIGSTOP),
        Fault::KilledReplica => cluster.nodes()[1].signal_all(libc::SIGKILL),
        Fault::Switchover => {
            cluster.nodes()[cluster.primary_index()].stop_fast()?;
            cluster.promote_most_advanced().map(|_| ())
        }
        Fault::Failover => {
            cluster.nodes()[cluster.primary_index()].signal_all(libc::SIGKILL)?;
            cluster.promote_most_advanced().map(|_| ())
        }
    }
}

fn heal(
    lab: &Lab,
    cluster: &mut Cluster,
    fault: Fault,
    relay: Option<&Relay>,
    rules: &mut QueueRules,
) -> io::Result<()> {
    match fault {
        // Packets already held still leave at their time.
        Fault::PacketDelay | Fault::Jitter | Fault::Reordering => rules.clear(),
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
        Fault::HungReplica => cluster.nodes()[1].signal_all(libc::SIGCONT),
        Fault::KilledReplica => cluster.nodes()[1].start(),
        // The old primary stays down: nothing to heal.
        Fault::Switchover | Fault::Failover => Ok(()),
    }
}

/// The self-check: a short undisturbed write load, then the ledger check must catch one
/// acknowledged id deleted on the primary and one id inserted twice. Returns what it saw.
pub fn self_check(lab: &Lab) -> io::Result<String> {
    let root = work_dir();
    let cluster = Cluster::start(lab, &root)?;
    let endpoints: Vec<String> = cluster.nodes().iter().map(Node::endpoint).collect();
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
