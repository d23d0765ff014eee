//! N proxies sharing one load view and one PLB role table through a store (issue 27's
//! fleet), as a [`Router`].
//!
//! The model, in the terms of the proxy's own design (a shard decides on the published
//! snapshot; a decision that changes roles goes to the one authority, which re-decides):
//! - **Reports.** Every `report_interval_s` each proxy writes its own per-replica, per-class
//!   session counts to the store, proxy `q` at offset `q/N` of the interval (unaligned
//!   timers). A proxy's view of the load is its own counts, exact, plus the others' latest
//!   reports: the others' part is stale by up to one interval.
//! - **Decisions.** A proxy admits with PLB on the table it holds and that view. A decision
//!   without role changes is final. One with role changes (a return evaluated before the
//!   decision, a borrow) is a request to the leader, which re-decides on the authoritative
//!   table and the requester's view, applies the changes with the table's precondition check
//!   and publishes a new version; the requester holds it at once (it got the answer) and the
//!   session goes where the leader decided. The round trip to the store is not modelled: it
//!   is milliseconds against an interval of seconds.
//! - **Publication.** Every other proxy applies the new version after a delay drawn uniformly
//!   in `[0, staleness_s]` (NOTIFY lost, polled at the interval: stale by up to it). A proxy
//!   ignores a version older than the one it holds.
//! - **Failures** reach every proxy at once: each host probes the replicas itself, and a
//!   connection failure is seen by every proxy that had sessions there. The leader repairs
//!   its table on the sum and every proxy holds the result.
//!
//! A fleet of one is exactly the single proxy (the same table, the exact counts, the same
//! decisions): `tests::one_proxy_sharing_is_the_single_proxy` checks it run for run.
//!
//! This is not the design pgtier's fleet implements ([`super::leader`] models that one: hosts
//! decide on their own counts, the leader recomputes on a timer); it is the alternative the
//! experiment compares it with ("forwarding").

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use pgtier_policy::{Plb, PlbParams, ReplicaId, ReplicaLoad, RoleTable, ServiceClass};

use super::super::rng::SimRng;
use super::super::router::{ReplicaIndex, Router, SessionIndex};
use super::super::workload::Class;

/// How the fleet shares its view.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SharedConfig {
    /// Proxies in the fleet.
    pub proxies: usize,
    /// Seconds between two load reports of one proxy (`fleet_report_interval`).
    pub report_interval_s: f64,
    /// Longest delay before a proxy applies a version another proxy's request published.
    pub staleness_s: f64,
    /// Seed of the publication delays (the only randomness of the model).
    pub seed: u64,
}

/// What the sharing did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SharedStats {
    /// Versions the leader published (role changes requested by admissions, repairs).
    pub versions: u64,
    /// Admissions that carried role changes and went to the leader.
    pub requests: u64,
    /// Of those, the ones the leader decided differently (another replica or other changes),
    /// because the requester's table was stale.
    pub redecided: u64,
    /// Admissions decided without the leader on a table older than the leader's, placing the
    /// session on a replica whose role the leader's table has changed.
    pub stale_placements: u64,
    /// Seconds during which every proxy held the leader's latest version.
    pub agreed_s: f64,
    /// Seconds observed (the run's length as the router saw it).
    pub observed_s: f64,
    /// Role changes the leader's table refused (must stay 0: requests are serialized).
    pub refused: u64,
}

impl SharedStats {
    /// Share of the time in which every proxy held the same, latest version.
    pub fn agreement(&self) -> f64 {
        if self.observed_s > 0.0 {
            self.agreed_s / self.observed_s
        } else {
            1.0
        }
    }
}

/// One proxy's state.
#[derive(Debug, Clone)]
struct Proxy {
    /// The role table it routes with, and its version.
    table: RoleTable,
    version: u64,
    /// Its own sessions, exact.
    local: Vec<ReplicaLoad>,
    /// Its latest report, as the others see it.
    reported: Vec<ReplicaLoad>,
    next_report_s: f64,
}

/// A version on its way to one proxy.
#[derive(Debug, Clone)]
struct Delivery {
    at_s: f64,
    seq: u64,
    proxy: usize,
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

/// The fleet with a shared view.
pub struct SharedView {
    config: SharedConfig,
    plb: Plb,
    /// The leader's authoritative table and its version.
    leader: RoleTable,
    version: u64,
    proxies: Vec<Proxy>,
    pending: BinaryHeap<Delivery>,
    seq: u64,
    delays: SimRng,
    now_s: f64,
    stats: SharedStats,
}

fn service_class(class: Class) -> ServiceClass {
    if class.0 == 0 {
        ServiceClass::Premium
    } else {
        ServiceClass::Freemium
    }
}

impl SharedView {
    /// A fleet running PLB with `params` on `replicas` replicas, from the paper's layout
    /// (the single proxy's: R_P the first ⌊2K/5⌋, R_F the next, Mixed the rest).
    pub fn new(config: SharedConfig, params: PlbParams, replicas: usize) -> Result<Self, String> {
        if config.proxies == 0 {
            return Err("a fleet needs at least one proxy".into());
        }
        let interval_ok = config.report_interval_s.is_finite() && config.report_interval_s > 0.0;
        let staleness_ok = config.staleness_s.is_finite() && config.staleness_s >= 0.0;
        if !interval_ok || !staleness_ok {
            return Err("the report interval must be positive, the staleness not negative".into());
        }
        let pool = (2 * replicas / 5).max(1);
        let ids = |range: std::ops::Range<usize>| -> Result<Vec<ReplicaId>, String> {
            range
                .map(|i| ReplicaId::from_index(i).ok_or(format!("replica {i} is out of range")))
                .collect()
        };
        let table = RoleTable::new(
            replicas,
            &ids(0..pool)?,
            &ids(pool..(2 * pool).min(replicas))?,
        )
        .map_err(|e| e.to_string())?;
        let plb = Plb::new(params, &table).map_err(|e| e.to_string())?;
        let n = config.proxies;
        let proxies = (0..n)
            .map(|q| Proxy {
                table: table.clone(),
                version: 1,
                local: vec![ReplicaLoad::default(); replicas],
                reported: vec![ReplicaLoad::default(); replicas],
                next_report_s: config.report_interval_s * q as f64 / n as f64,
            })
            .collect();
        Ok(Self {
            config,
            plb,
            leader: table,
            version: 1,
            proxies,
            pending: BinaryHeap::new(),
            seq: 0,
            delays: SimRng::derive(config.seed, 0xF1EE7),
            now_s: 0.0,
            stats: SharedStats::default(),
        })
    }

    /// What the sharing did so far.
    pub fn stats(&self) -> SharedStats {
        self.stats
    }

    /// The leader's table.
    pub fn leader_table(&self) -> &RoleTable {
        &self.leader
    }

    /// The version each proxy holds.
    pub fn versions(&self) -> Vec<u64> {
        self.proxies.iter().map(|p| p.version).collect()
    }

    fn proxy_of(&self, session: SessionIndex) -> usize {
        session % self.proxies.len()
    }

    fn all_agree(&self) -> bool {
        self.proxies.iter().all(|p| p.version == self.version)
    }

    /// Time moves to `now_s` under the current agreement state.
    fn account(&mut self, now_s: f64) {
        let span = (now_s - self.now_s).max(0.0);
        self.stats.observed_s += span;
        if self.all_agree() {
            self.stats.agreed_s += span;
        }
        self.now_s = now_s.max(self.now_s);
    }

    /// Proxy `p`'s view: its own counts plus the others' latest reports.
    pub(super) fn view(&self, p: usize) -> Vec<ReplicaLoad> {
        let mut view = self.proxies[p].local.clone();
        for (q, other) in self.proxies.iter().enumerate() {
            if q == p {
                continue;
            }
            for (sum, load) in view.iter_mut().zip(&other.reported) {
                sum.premium += load.premium;
                sum.freemium += load.freemium;
            }
        }
        view
    }

    /// The sum of every proxy's exact counts (what the leader sees when it repairs).
    fn exact_sum(&self) -> Vec<ReplicaLoad> {
        let mut sum = vec![ReplicaLoad::default(); self.leader.len()];
        for proxy in &self.proxies {
            for (s, load) in sum.iter_mut().zip(&proxy.local) {
                s.premium += load.premium;
                s.freemium += load.freemium;
            }
        }
        sum
    }

    /// The leader published a new version: `holder` (if any) holds it now, every other proxy
    /// after its delay.
    fn publish(&mut self, holder: Option<usize>) {
        self.version += 1;
        self.stats.versions += 1;
        for q in 0..self.proxies.len() {
            let delay_s = if Some(q) == holder || self.config.staleness_s == 0.0 {
                0.0
            } else {
                self.delays.uniform(0.0, self.config.staleness_s)
            };
            if delay_s == 0.0 {
                self.proxies[q].table = self.leader.clone();
                self.proxies[q].version = self.version;
            } else {
                self.seq += 1;
                self.pending.push(Delivery {
                    at_s: self.now_s + delay_s,
                    seq: self.seq,
                    proxy: q,
                    version: self.version,
                    table: self.leader.clone(),
                });
            }
        }
    }

    /// Failures reach every proxy at once: the leader's repaired table, held by all.
    fn publish_to_all(&mut self) {
        self.version += 1;
        self.stats.versions += 1;
        for proxy in &mut self.proxies {
            proxy.table = self.leader.clone();
            proxy.version = self.version;
        }
    }
}

impl Router for SharedView {
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex> {
        self.admit_session(0, class)
    }

    fn release(&mut self, replica: ReplicaIndex, class: Class) {
        self.release_session(0, replica, class);
    }

    fn advance(&mut self, now_s: f64) {
        // Deliveries and reports due by now, in time order; both are copies of state that
        // only events change, so a report due at t < now copies the state of t.
        loop {
            let next_delivery = self.pending.peek().map_or(f64::INFINITY, |d| d.at_s);
            let (reporter, next_report) = self
                .proxies
                .iter()
                .enumerate()
                .map(|(q, p)| (q, p.next_report_s))
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
                let proxy = &mut self.proxies[delivery.proxy];
                if delivery.version > proxy.version {
                    proxy.table = delivery.table;
                    proxy.version = delivery.version;
                }
            } else {
                let proxy = &mut self.proxies[reporter];
                proxy.reported = proxy.local.clone();
                proxy.next_report_s += self.config.report_interval_s;
            }
        }
        self.account(now_s);
    }

    fn admit_session(&mut self, session: SessionIndex, class: Class) -> Option<ReplicaIndex> {
        let p = self.proxy_of(session);
        let class = service_class(class);
        let view = self.view(p);
        let local = self.plb.admit(&self.proxies[p].table, &view, class).ok()?;
        let replica = if local.role_changes.as_slice().is_empty() {
            let stale = self.proxies[p].version != self.version
                && self.proxies[p].table.role(local.replica) != self.leader.role(local.replica);
            if stale {
                self.stats.stale_placements += 1;
            }
            local.replica
        } else {
            // A request to the leader, which re-decides on the authoritative table.
            self.stats.requests += 1;
            let decided = self.plb.admit(&self.leader, &view, class).ok()?;
            if decided.replica != local.replica
                || decided.role_changes.as_slice() != local.role_changes.as_slice()
            {
                self.stats.redecided += 1;
            }
            if !decided.role_changes.as_slice().is_empty() {
                let params = *self.plb.params();
                for change in decided.role_changes.iter() {
                    if self.leader.apply(change, &params).is_err() {
                        self.stats.refused += 1;
                    }
                }
                self.publish(Some(p));
            } else {
                // Nothing to change after all: the requester catches up with the leader.
                self.proxies[p].table = self.leader.clone();
                self.proxies[p].version = self.version;
            }
            decided.replica
        };
        self.proxies[p]
            .local
            .get_mut(replica.index())?
            .admitted(class)
            .ok()?;
        Some(replica.index())
    }

    fn release_session(&mut self, session: SessionIndex, replica: ReplicaIndex, class: Class) {
        let p = self.proxy_of(session);
        if let Some(load) = self.proxies[p].local.get_mut(replica) {
            let released = load.released(service_class(class));
            debug_assert!(
                released.is_ok(),
                "released a session the proxy never counted"
            );
        }
    }

    fn replica_down(&mut self, replica: ReplicaIndex, _lost: &[Class]) {
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        for proxy in &mut self.proxies {
            if let Some(load) = proxy.local.get_mut(replica) {
                *load = ReplicaLoad::default();
            }
            if let Some(load) = proxy.reported.get_mut(replica) {
                *load = ReplicaLoad::default();
            }
        }
        let loads = self.exact_sum();
        if self.plb.handle_down(&mut self.leader, id, &loads).is_ok() {
            self.publish_to_all();
        }
    }

    fn replica_up(&mut self, replica: ReplicaIndex) {
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        let loads = self.exact_sum();
        if self.plb.handle_rejoin(&mut self.leader, id, &loads).is_ok() {
            self.publish_to_all();
        }
    }

    fn role_labels(&self) -> Vec<String> {
        self.leader.roles().iter().map(|r| r.to_string()).collect()
    }

    fn refused_role_changes(&self) -> u64 {
        self.stats.refused
    }
}
