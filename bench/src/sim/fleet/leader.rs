//! The fleet as pgtier builds it (issue 27, docs/fleet.md), as a [`Router`]: N hosts, each
//! the single proxy's PLB on its own sessions, plus a leader that recomputes the role table on
//! the hosts' summed reports every interval and publishes it.
//!
//! The model, step for step as the product's fleet thread does it:
//! - **Hosts** admit as a single proxy does, on the table they hold, and on their own session
//!   counts plus, with [`HostView::Fleet`], the other members' latest reports as they read
//!   them at their last round (h27fleet 0095e23: the remote load is an offset on the
//!   decision, never claimed). A borrow (or a return evaluated before an admission) a host
//!   decides is applied to its own table at once: local, until the next version replaces it.
//! - **Rounds.** Every `report_interval_s` each host writes its own counts and reads the
//!   others', host `q` at offset `q/N` of the interval (unaligned timers).
//! - **The leader** (host 0) recomputes right after its own report: on the sum of the latest
//!   reports and the table it last published, the returns due, then for each class the borrow
//!   Algorithm 1 would make for its next arrival ([`next_table`], what the product's
//!   `fleet::leader::next_table` does with the same policy code). A changed table is a new
//!   version.
//! - **Publication.** The leader holds a new version at once; every other host applies it
//!   after a delay drawn uniformly in `[0, staleness_s]` (NOTIFY, or the read each interval
//!   when a NOTIFY is missed), discarding its local changes; an older version is ignored.
//! - **Failures** reach every host at once (each probes the replicas itself): each repairs
//!   its own table, and the leader's table is repaired and published to all in the same
//!   instant (the product does it at the next interval; the simulator's failures are
//!   instantaneous anyway).
//!
//! With a report interval longer than the run, no version is ever published and the fleet is
//! N independent proxies, run for run (`tests::a_fleet_that_never_publishes_is_independent_proxies`).
//!
//! What the model shows of the first design ([`HostView::Own`]; docs/simulator.md, "Several
//! proxies"): a host's own admission evaluates returns on its own share, so a replica the
//! leader borrowed on the sum goes back to Mixed at the host's next admission (no borrower
//! session *of this host* on it, its own pool below τ), and since the leader publishes only
//! when its table changes, the host keeps its local table: the versions agree, the tables
//! do not (`tables_agreed_s`).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use pgtier_policy::{Plb, PlbParams, ReplicaId, ReplicaLoad, RoleTable, ServiceClass};

use super::super::rng::SimRng;
use super::super::router::{ReplicaIndex, Router, SessionIndex};
use super::super::strategies::PolicyRouter;
use super::super::workload::Class;

/// What a host's own admissions decide on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostView {
    /// Its own counts plus the other members' latest reports, read at each of its rounds
    /// (the product since h27fleet 0095e23).
    Fleet,
    /// Its own counts only (the first version of the fleet, h27fleet ff287c2).
    Own,
}

/// The classes whose borrow the leader's step evaluates each interval, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderBorrows {
    /// Premium's, then freemium's (the product's `next_table`).
    Both,
    /// Freemium's only.
    FreemiumOnly,
    /// Premium's only.
    PremiumOnly,
    /// None: the leader only returns; hosts borrow at their admissions.
    None,
}

impl LeaderBorrows {
    fn classes(self) -> &'static [ServiceClass] {
        match self {
            LeaderBorrows::Both => &[ServiceClass::Premium, ServiceClass::Freemium],
            LeaderBorrows::FreemiumOnly => &[ServiceClass::Freemium],
            LeaderBorrows::PremiumOnly => &[ServiceClass::Premium],
            LeaderBorrows::None => &[],
        }
    }
}

/// How the fleet shares its view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetConfig {
    /// Hosts in the fleet.
    pub hosts: usize,
    /// What hosts decide on.
    pub view: HostView,
    /// Which borrows the leader's step makes.
    pub borrows: LeaderBorrows,
    /// Seconds between two reports of one host, and between two recomputations by the leader
    /// (`fleet_report_interval`).
    pub report_interval_s: f64,
    /// Longest delay before a host applies a version the leader published.
    pub staleness_s: f64,
    /// Seed of the publication delays.
    pub seed: u64,
}

/// What the fleet did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FleetStats {
    /// Versions the leader published.
    pub versions: u64,
    /// Role changes hosts applied to their own tables between versions (borrows and returns
    /// decided at their admissions, on their own share of the load).
    pub local_changes: u64,
    /// Seconds during which every host held the leader's latest version.
    pub agreed_s: f64,
    /// Seconds during which every host routed with the leader's latest table (the version
    /// it holds, without local changes since).
    pub tables_agreed_s: f64,
    /// Seconds observed.
    pub observed_s: f64,
}

impl FleetStats {
    /// Share of the time in which every host held the latest version.
    pub fn agreement(&self) -> f64 {
        if self.observed_s > 0.0 {
            self.agreed_s / self.observed_s
        } else {
            1.0
        }
    }
}

/// The leader's step: the next table from `table` and the fleet's `summed` sessions, as the
/// product's `fleet::leader::next_table` computes it for a two-class PLB router: the returns
/// due on the sum, then each class's borrow for its next arrival.
pub fn next_table(plb: &Plb, table: &RoleTable, summed: &[ReplicaLoad]) -> RoleTable {
    next_table_with(plb, table, summed, LeaderBorrows::Both)
}

/// [`next_table`] evaluating the borrows of `borrows` only.
pub fn next_table_with(
    plb: &Plb,
    table: &RoleTable,
    summed: &[ReplicaLoad],
    borrows: LeaderBorrows,
) -> RoleTable {
    let mut next = table.clone();
    let params = *plb.params();
    if let Ok(changes) = plb.returns(&next, summed) {
        for change in changes.iter() {
            let _ = next.apply(change, &params);
        }
    }
    for &class in borrows.classes() {
        if let Ok(admission) = plb.admit(&next, summed, class) {
            for change in admission.role_changes.iter() {
                let _ = next.apply(change, &params);
            }
        }
    }
    next
}

/// A version on its way to one host.
#[derive(Debug, Clone)]
struct Delivery {
    at_s: f64,
    seq: u64,
    host: usize,
    version: u64,
    table: RoleTable,
}

impl PartialEq for Delivery {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Delivery {}

impl PartialOrd for Delivery {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Delivery {
    /// Reversed so that `BinaryHeap` pops the earliest delivery first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at_s
            .total_cmp(&self.at_s)
            .then(other.seq.cmp(&self.seq))
    }
}

/// One host: the single proxy's router, the version it holds, its latest report.
struct Host {
    router: PolicyRouter,
    version: u64,
    reported: Vec<ReplicaLoad>,
    next_report_s: f64,
}

/// The fleet: hosts, the leader's published table, versions in flight.
pub struct LeaderFleet {
    config: FleetConfig,
    plb: Plb,
    /// The table the leader last published, and its version.
    published: RoleTable,
    version: u64,
    hosts: Vec<Host>,
    pending: BinaryHeap<Delivery>,
    seq: u64,
    delays: SimRng,
    now_s: f64,
    stats: FleetStats,
}

impl LeaderFleet {
    /// A fleet of hosts running PLB with `params` on `replicas` replicas, from the single
    /// proxy's layout.
    pub fn new(config: FleetConfig, params: PlbParams, replicas: usize) -> Result<Self, String> {
        if config.hosts == 0 {
            return Err("a fleet needs at least one host".into());
        }
        let interval_ok = config.report_interval_s.is_finite() && config.report_interval_s > 0.0;
        let staleness_ok = config.staleness_s.is_finite() && config.staleness_s >= 0.0;
        if !interval_ok || !staleness_ok {
            return Err("the report interval must be positive, the staleness not negative".into());
        }
        let n = config.hosts;
        let hosts = (0..n)
            .map(|q| {
                Ok(Host {
                    router: PolicyRouter::plb(params, replicas)?,
                    version: 1,
                    reported: vec![ReplicaLoad::default(); replicas],
                    next_report_s: config.report_interval_s * q as f64 / n as f64,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let published = hosts[0].router.table().clone();
        let plb = Plb::new(params, &published).map_err(|e| e.to_string())?;
        Ok(Self {
            config,
            plb,
            published,
            version: 1,
            hosts,
            pending: BinaryHeap::new(),
            seq: 0,
            delays: SimRng::derive(config.seed, 0x1EAD),
            now_s: 0.0,
            stats: FleetStats::default(),
        })
    }

    /// What the fleet did so far (local changes counted up to now).
    pub fn stats(&self) -> FleetStats {
        FleetStats {
            local_changes: self.hosts.iter().map(|h| h.router.role_changes).sum(),
            ..self.stats
        }
    }

    /// The table the leader last published.
    pub fn published(&self) -> &RoleTable {
        &self.published
    }

    /// The version each host holds.
    pub fn versions(&self) -> Vec<u64> {
        self.hosts.iter().map(|h| h.version).collect()
    }

    /// Host `q`'s router (its table, its counts).
    pub fn host(&self, q: usize) -> &PolicyRouter {
        &self.hosts[q].router
    }

    fn host_of(&self, session: SessionIndex) -> usize {
        session % self.hosts.len()
    }

    fn account(&mut self, now_s: f64) {
        let span = (now_s - self.now_s).max(0.0);
        self.stats.observed_s += span;
        if self.hosts.iter().all(|h| h.version == self.version) {
            self.stats.agreed_s += span;
            if self
                .hosts
                .iter()
                .all(|h| h.router.table() == &self.published)
            {
                self.stats.tables_agreed_s += span;
            }
        }
        self.now_s = now_s.max(self.now_s);
    }

    fn summed_reports(&self) -> Vec<ReplicaLoad> {
        let mut sum = vec![ReplicaLoad::default(); self.published.len()];
        for host in &self.hosts {
            for (s, load) in sum.iter_mut().zip(&host.reported) {
                s.premium += load.premium;
                s.freemium += load.freemium;
            }
        }
        sum
    }

    fn adopt(host: &mut Host, version: u64, table: RoleTable) {
        if version > host.version {
            host.router.set_table(table);
            host.version = version;
        }
    }

    /// A new version: the leader holds it now, every other host after its delay (or now,
    /// with `to_all`).
    fn publish(&mut self, to_all: bool) {
        self.version += 1;
        self.stats.versions += 1;
        for q in 0..self.hosts.len() {
            let delay_s = if q == 0 || to_all || self.config.staleness_s == 0.0 {
                0.0
            } else {
                self.delays.uniform(0.0, self.config.staleness_s)
            };
            if delay_s == 0.0 {
                Self::adopt(&mut self.hosts[q], self.version, self.published.clone());
            } else {
                self.seq += 1;
                self.pending.push(Delivery {
                    at_s: self.now_s + delay_s,
                    seq: self.seq,
                    host: q,
                    version: self.version,
                    table: self.published.clone(),
                });
            }
        }
    }

    /// Host `q`'s round: it reports, reads the others' latest reports (with
    /// [`HostView::Fleet`]), and, when it leads (host 0), recomputes.
    fn report(&mut self, q: usize) {
        let host = &mut self.hosts[q];
        host.reported = host.router.loads().to_vec();
        host.next_report_s += self.config.report_interval_s;
        if self.config.view == HostView::Fleet {
            let mut others = vec![ReplicaLoad::default(); self.published.len()];
            for (_, other) in self.hosts.iter().enumerate().filter(|&(p, _)| p != q) {
                for (sum, load) in others.iter_mut().zip(&other.reported) {
                    sum.premium += load.premium;
                    sum.freemium += load.freemium;
                }
            }
            self.hosts[q].router.set_others(others);
        }
        if q == 0 {
            let next = next_table_with(
                &self.plb,
                &self.published,
                &self.summed_reports(),
                self.config.borrows,
            );
            if next != self.published {
                self.published = next;
                self.publish(false);
            }
        }
    }
}

impl Router for LeaderFleet {
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex> {
        self.admit_session(0, class)
    }

    fn release(&mut self, replica: ReplicaIndex, class: Class) {
        self.release_session(0, replica, class);
    }

    fn advance(&mut self, now_s: f64) {
        loop {
            let next_delivery = self.pending.peek().map_or(f64::INFINITY, |d| d.at_s);
            let (reporter, next_report) = self
                .hosts
                .iter()
                .enumerate()
                .map(|(q, h)| (q, h.next_report_s))
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .unwrap_or((0, f64::INFINITY));
            let at_s = next_delivery.min(next_report);
            if at_s > now_s {
                break;
            }
            self.account(at_s);
            if next_delivery <= next_report {
                let Some(delivery) = self.pending.pop() else {
                    break;
                };
                Self::adopt(
                    &mut self.hosts[delivery.host],
                    delivery.version,
                    delivery.table,
                );
            } else {
                self.report(reporter);
            }
        }
        self.account(now_s);
    }

    fn admit_session(&mut self, session: SessionIndex, class: Class) -> Option<ReplicaIndex> {
        let q = self.host_of(session);
        self.hosts[q].router.admit(class)
    }

    fn release_session(&mut self, session: SessionIndex, replica: ReplicaIndex, class: Class) {
        let q = self.host_of(session);
        self.hosts[q].router.release(replica, class);
    }

    fn replica_down(&mut self, replica: ReplicaIndex, lost: &[Class]) {
        for host in &mut self.hosts {
            host.router.replica_down(replica, lost);
            if let Some(load) = host.reported.get_mut(replica) {
                *load = ReplicaLoad::default();
            }
        }
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        let summed = self.summed_reports();
        if self
            .plb
            .handle_down(&mut self.published, id, &summed)
            .is_ok()
        {
            self.publish(true);
        }
    }

    fn replica_up(&mut self, replica: ReplicaIndex) {
        for host in &mut self.hosts {
            host.router.replica_up(replica);
        }
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        let summed = self.summed_reports();
        if self
            .plb
            .handle_rejoin(&mut self.published, id, &summed)
            .is_ok()
        {
            self.publish(true);
        }
    }

    fn role_labels(&self) -> Vec<String> {
        self.published
            .roles()
            .iter()
            .map(|r| r.to_string())
            .collect()
    }

    fn refused_role_changes(&self) -> u64 {
        self.hosts
            .iter()
            .map(|h| h.router.refused_role_changes())
            .sum()
    }
}
