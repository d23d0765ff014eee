//! The discrete-event engine: sessions arrive, are admitted through a `Router`, run their
//! queries on processor-sharing replicas (behind a bounded server pool per replica when the
//! run has one, where the queries beyond the bound wait), think, and leave; replicas fail and
//! rejoin on a schedule. Everything is a function of the run's configuration and seed.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use pgtier_pool::WaitOrder;

use super::pool::{ServerPool, WaitQueue, wait_class};
use super::rng::SimRng;
use super::router::{ReplicaIndex, Router};
use super::server::{PsServer, QueryId};
use super::workload::{Class, ClusterConfig, SessionEnd, WorkloadConfig};

/// A replica failing or coming back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Fail-stop: the replica's sessions and queries are lost.
    Down,
    /// The replica is reachable again, empty.
    Rejoin,
}

/// One scheduled failure event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultEvent {
    /// When it happens.
    pub at_s: f64,
    /// Which replica.
    pub replica: ReplicaIndex,
    /// What happens.
    pub action: FaultAction,
}

/// An observation interval over which metrics are reported.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Label for tables and plots ("pre", "one-down", ...).
    pub name: String,
    /// Inclusive start.
    pub start_s: f64,
    /// Exclusive end.
    pub end_s: f64,
}

/// Everything that defines one run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunConfig {
    /// The replicas.
    pub cluster: ClusterConfig,
    /// The clients.
    pub workload: WorkloadConfig,
    /// Failure schedule, in the order the router observes it.
    pub faults: Vec<FaultEvent>,
    /// Observation intervals.
    pub phases: Vec<Phase>,
    /// The simulation stops here.
    pub end_s: f64,
    /// Seed of every random stream of the run.
    pub seed: u64,
    /// The proxy's server pool in front of every replica; None: no bound, no waiting.
    pub pool: Option<ServerPool>,
}

/// Raw observations of one phase.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseObservations {
    /// The interval.
    pub phase: Phase,
    /// Latencies of queries completed in the phase, per class (index `Class::index`).
    pub latencies_s: [Vec<f64>; Class::MAX],
    /// Per replica: busy-core fraction over the phase, None if it was down at some point.
    pub busy_fraction: Vec<Option<f64>>,
    /// Sessions admitted in the phase, per class.
    pub admitted: [u64; Class::MAX],
    /// Sessions that could not be placed (no replica up), per class.
    pub rejected: [u64; Class::MAX],
    /// Sessions killed by a replica failure in the phase, per class.
    pub lost: [u64; Class::MAX],
    /// Observed lifetimes (arrival to close) of sessions closing normally in the phase.
    pub session_lifetimes_s: [Vec<f64>; Class::MAX],
}

/// Everything one run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunObservations {
    /// One entry per configured phase, in order.
    pub phases: Vec<PhaseObservations>,
    /// Sessions the router placed on a replica that was down (must stay 0).
    pub placements_on_down_replica: u64,
    /// Events processed (for performance reporting).
    pub events: u64,
    /// The router's role labels after each fault event and at each phase boundary.
    pub role_trace: Vec<(f64, Vec<String>)>,
    /// Sessions the recovery-tail drain moved to another replica between two queries.
    pub drain_moves: u64,
    /// Queries that waited in a replica's pool and then got a server.
    pub pool_served: u64,
    /// Of those, the ones served ahead of an earlier-parked waiter of the other class (the
    /// choices in which the pool's order differed from arrival order).
    pub pool_served_out_of_order: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EventKind {
    Fault(usize),
    Boundary(usize),
    Arrival,
    QueryDone {
        replica: ReplicaIndex,
        generation: u64,
    },
    ThinkDone(usize),
    LifetimeEnd(usize),
}

impl EventKind {
    /// At equal times faults apply first (so a phase starting at a fault already sees the
    /// new survivor set), then boundaries snapshot, then client activity.
    fn priority(self) -> u8 {
        match self {
            EventKind::Fault(_) => 0,
            EventKind::Boundary(_) => 1,
            _ => 2,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Event {
    at_s: f64,
    seq: u64,
    kind: EventKind,
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    /// Reversed so that `BinaryHeap` pops the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .at_s
            .total_cmp(&self.at_s)
            .then(other.kind.priority().cmp(&self.kind.priority()))
            .then(other.seq.cmp(&self.seq))
    }
}

/// Where a session is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
enum SessionState {
    /// Between queries.
    Thinking,
    /// A query sent at `started_s` is running, or waiting for a server of the replica's pool;
    /// `expired` once the lifetime ran out.
    Running { started_s: f64, expired: bool },
    /// Gone (ended, or lost with its replica).
    Closed,
}

#[derive(Debug, Clone)]
struct Session {
    class: Class,
    replica: ReplicaIndex,
    arrived_s: f64,
    state: SessionState,
    /// Per-session stream for demands and think times, so strategies compared under the
    /// same seed see the same work (common random numbers).
    rng: SimRng,
    /// The router's drain epoch this session last asked about.
    drain_seen: u64,
}

/// A query waiting in a replica's pool.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Waiting {
    session: usize,
    /// Its service demand, drawn when it was sent.
    demand_s: f64,
}

/// Random stream identifiers.
const STREAM_ARRIVALS: u64 = 1;
const STREAM_SESSIONS: u64 = 2;

/// A run in progress.
struct Engine<'a> {
    config: &'a RunConfig,
    router: &'a mut dyn Router,
    now_s: f64,
    seq: u64,
    queue: BinaryHeap<Event>,
    servers: Vec<PsServer>,
    /// Per replica, the queries waiting for a server (empty without a pool).
    waiting: Vec<WaitQueue<Waiting>>,
    up: Vec<bool>,
    sessions: Vec<Session>,
    arrivals: SimRng,
    boundaries_s: Vec<f64>,
    busy_at_boundary: Vec<Vec<f64>>,
    out: RunObservations,
}

/// Runs one simulation to `config.end_s` with `router` deciding placements.
pub fn run(config: &RunConfig, router: &mut dyn Router) -> RunObservations {
    let mut engine = Engine::new(config, router);
    engine.schedule_initial();
    while let Some(event) = engine.queue.pop() {
        if event.at_s > config.end_s {
            break;
        }
        engine.now_s = event.at_s;
        engine.router.advance(event.at_s);
        engine.out.events += 1;
        engine.handle(event.kind);
    }
    engine.finish()
}

impl<'a> Engine<'a> {
    fn new(config: &'a RunConfig, router: &'a mut dyn Router) -> Self {
        let k = config.cluster.replicas;
        let mut boundaries_s: Vec<f64> = config
            .phases
            .iter()
            .flat_map(|p| [p.start_s, p.end_s])
            .collect();
        boundaries_s.sort_by(f64::total_cmp);
        boundaries_s.dedup();
        let phases = config
            .phases
            .iter()
            .map(|phase| PhaseObservations {
                phase: phase.clone(),
                latencies_s: std::array::from_fn(|_| Vec::new()),
                busy_fraction: vec![None; k],
                admitted: [0; Class::MAX],
                rejected: [0; Class::MAX],
                lost: [0; Class::MAX],
                session_lifetimes_s: std::array::from_fn(|_| Vec::new()),
            })
            .collect();
        Self {
            config,
            router,
            now_s: 0.0,
            seq: 0,
            queue: BinaryHeap::new(),
            servers: (0..k)
                .map(|_| {
                    PsServer::with_parallelism(
                        config.cluster.cores_per_replica,
                        config.cluster.query_parallelism,
                    )
                })
                .collect(),
            waiting: (0..k)
                .map(|_| WaitQueue::new(config.pool.map_or(WaitOrder::Fifo, |p| p.order)))
                .collect(),
            up: vec![true; k],
            sessions: Vec::new(),
            arrivals: SimRng::derive(config.seed, STREAM_ARRIVALS),
            busy_at_boundary: vec![Vec::new(); boundaries_s.len()],
            boundaries_s,
            out: RunObservations {
                phases,
                placements_on_down_replica: 0,
                events: 0,
                role_trace: Vec::new(),
                drain_moves: 0,
                pool_served: 0,
                pool_served_out_of_order: 0,
            },
        }
    }

    fn push(&mut self, at_s: f64, kind: EventKind) {
        self.seq += 1;
        self.queue.push(Event {
            at_s,
            seq: self.seq,
            kind,
        });
    }

    fn schedule_initial(&mut self) {
        for (i, fault) in self.config.faults.iter().enumerate() {
            self.push(fault.at_s, EventKind::Fault(i));
        }
        for i in 0..self.boundaries_s.len() {
            self.push(self.boundaries_s[i], EventKind::Boundary(i));
        }
        self.schedule_next_arrival();
    }

    fn schedule_next_arrival(&mut self) {
        let rate = self.config.workload.arrival_rate_per_s();
        if rate <= 0.0 {
            return;
        }
        let at_s = self.now_s + self.arrivals.exponential(1.0 / rate);
        if at_s < self.config.workload.arrivals_until_s {
            self.push(at_s, EventKind::Arrival);
        }
    }

    fn handle(&mut self, kind: EventKind) {
        match kind {
            EventKind::Fault(i) => self.on_fault(i),
            EventKind::Boundary(i) => self.on_boundary(i),
            EventKind::Arrival => self.on_arrival(),
            EventKind::QueryDone {
                replica,
                generation,
            } => self.on_query_done(replica, generation),
            EventKind::ThinkDone(s) => self.on_think_done(s),
            EventKind::LifetimeEnd(s) => self.on_lifetime_end(s),
        }
    }

    /// Indices of the phases containing the current time.
    fn current_phases(&self) -> Vec<usize> {
        let now = self.now_s;
        self.config
            .phases
            .iter()
            .enumerate()
            .filter(|(_, p)| p.start_s <= now && now < p.end_s)
            .map(|(i, _)| i)
            .collect()
    }

    fn on_arrival(&mut self) {
        self.schedule_next_arrival();
        let workload = &self.config.workload;
        let class = if workload.class_shares.is_empty() {
            if self.arrivals.bernoulli(workload.premium_share) {
                Class::PREMIUM
            } else {
                Class::FREEMIUM
            }
        } else {
            workload.draw_class(self.arrivals.uniform(0.0, 1.0))
        };
        let (low, high) = workload.lifetime_range_s;
        let lifetime_s = self.arrivals.uniform(low, high);
        let session_seed = self.arrivals.next_u64();
        let id = self.sessions.len();
        let Some(replica) = self.router.admit_session(id, class) else {
            for p in self.current_phases() {
                self.out.phases[p].rejected[class.index()] += 1;
            }
            return;
        };
        if !self.up.get(replica).copied().unwrap_or(false) {
            self.out.placements_on_down_replica += 1;
            return;
        }
        for p in self.current_phases() {
            self.out.phases[p].admitted[class.index()] += 1;
        }
        let drain_seen = self.router.drain_epoch();
        self.sessions.push(Session {
            class,
            replica,
            arrived_s: self.now_s,
            state: SessionState::Thinking,
            rng: SimRng::derive(session_seed, STREAM_SESSIONS),
            drain_seen,
        });
        self.push(self.now_s + lifetime_s, EventKind::LifetimeEnd(id));
        self.start_query(id);
    }

    /// The session sends its next query: it runs at once if the replica's pool has a free
    /// server, else it waits in the pool. Its transaction is in flight from now on either way,
    /// as the proxy counts it.
    fn start_query(&mut self, id: usize) {
        let demand_s = {
            let session = &mut self.sessions[id];
            session.state = SessionState::Running {
                started_s: self.now_s,
                expired: false,
            };
            self.config.workload.demand.sample(&mut session.rng)
        };
        let (replica, class) = (self.sessions[id].replica, self.sessions[id].class);
        if !self.has_free_server(replica) {
            let waiting = Waiting {
                session: id,
                demand_s,
            };
            self.waiting[replica].park(waiting, wait_class(class), self.now_s);
            self.router.query_started(replica, class);
            return;
        }
        self.servers[replica].start(QueryId(id as u32), demand_s, self.now_s);
        self.router.query_started(replica, class);
        self.schedule_completion(replica);
    }

    /// Whether the replica's pool lets one more query run now.
    fn has_free_server(&self, replica: ReplicaIndex) -> bool {
        self.config
            .pool
            .is_none_or(|pool| pool.has_room(self.servers[replica].running()))
    }

    /// Servers came back on `replica`: they go to its waiters in the pool's order. The caller
    /// schedules the replica's next completion.
    fn serve_waiters(&mut self, replica: ReplicaIndex) {
        while self.has_free_server(replica) {
            let Some(parked) = self.waiting[replica].serve() else {
                return;
            };
            let Waiting { session, demand_s } = parked.item;
            self.servers[replica].start(QueryId(session as u32), demand_s, self.now_s);
        }
    }

    fn schedule_completion(&mut self, replica: ReplicaIndex) {
        let server = &self.servers[replica];
        if let Some(at_s) = server.next_completion_s() {
            let generation = server.generation();
            self.push(
                at_s,
                EventKind::QueryDone {
                    replica,
                    generation,
                },
            );
        }
    }

    fn on_query_done(&mut self, replica: ReplicaIndex, generation: u64) {
        if self.servers[replica].generation() != generation {
            return; // the running set changed since this completion was computed
        }
        let Some(QueryId(id)) = self.servers[replica].complete_next(self.now_s) else {
            return;
        };
        self.serve_waiters(replica);
        self.schedule_completion(replica);
        let id = id as usize;
        let SessionState::Running { started_s, expired } = self.sessions[id].state else {
            return;
        };
        let class = self.sessions[id].class;
        self.router.query_done(replica, class);
        for p in self.current_phases() {
            self.out.phases[p].latencies_s[class.index()].push(self.now_s - started_s);
        }
        if expired {
            self.close(id);
            return;
        }
        self.sessions[id].state = SessionState::Thinking;
        let think_mean_s = self.config.workload.think_mean_s;
        let think_s = self.sessions[id].rng.exponential(think_mean_s);
        self.push(self.now_s + think_s, EventKind::ThinkDone(id));
    }

    fn on_think_done(&mut self, id: usize) {
        if self.sessions[id].state == SessionState::Thinking {
            self.drain(id);
        }
        if self.sessions[id].state == SessionState::Thinking {
            self.start_query(id);
        }
    }

    /// Between two queries, once per drain epoch: the session moves if the router says so
    /// (as a transaction pool can move a session that holds no server).
    fn drain(&mut self, id: usize) {
        let epoch = self.router.drain_epoch();
        let session = &mut self.sessions[id];
        if session.drain_seen == epoch {
            return;
        }
        session.drain_seen = epoch;
        let (replica, class) = (session.replica, session.class);
        if !self.router.should_move(replica, class) {
            return;
        }
        self.router.release_session(id, replica, class);
        match self.router.admit_session(id, class) {
            Some(new) if self.up.get(new).copied().unwrap_or(false) => {
                self.sessions[id].replica = new;
                self.out.drain_moves += 1;
            }
            // Released and not placed (cannot happen while its replica is up): it ends here,
            // without a second release.
            placed => {
                if let Some(new) = placed {
                    self.router.release_session(id, new, class);
                    self.out.placements_on_down_replica += 1;
                }
                self.sessions[id].state = SessionState::Closed;
            }
        }
    }

    fn on_lifetime_end(&mut self, id: usize) {
        match self.sessions[id].state {
            SessionState::Thinking => self.close(id),
            SessionState::Running { started_s, .. } => match self.config.workload.session_end {
                SessionEnd::AfterRunningQuery => {
                    self.sessions[id].state = SessionState::Running {
                        started_s,
                        expired: true,
                    };
                }
                SessionEnd::AtLifetime => self.abandon_running_query(id),
            },
            SessionState::Closed => {}
        }
    }

    /// Closes a session whose lifetime ended mid-query, dropping the query unmeasured (from
    /// the pool's waiters if it had no server yet).
    fn abandon_running_query(&mut self, id: usize) {
        let (replica, class) = (self.sessions[id].replica, self.sessions[id].class);
        let was_waiting = self.waiting[replica]
            .remove(|waiting| waiting.session == id)
            .is_some();
        if !was_waiting {
            self.servers[replica].remove(QueryId(id as u32), self.now_s);
            self.serve_waiters(replica);
        }
        self.router.query_done(replica, class);
        if !was_waiting {
            self.schedule_completion(replica);
        }
        self.close(id);
    }

    fn close(&mut self, id: usize) {
        let session = &mut self.sessions[id];
        session.state = SessionState::Closed;
        let (class, replica, lifetime_s) = (
            session.class,
            session.replica,
            self.now_s - session.arrived_s,
        );
        self.router.release_session(id, replica, class);
        for p in self.current_phases() {
            self.out.phases[p].session_lifetimes_s[class.index()].push(lifetime_s);
        }
    }

    fn on_fault(&mut self, i: usize) {
        let fault = self.config.faults[i];
        let r = fault.replica;
        match fault.action {
            FaultAction::Down => {
                if !self.up[r] {
                    return;
                }
                self.up[r] = false;
                self.servers[r].abort_all(self.now_s);
                self.waiting[r].clear();
                let lost = self.kill_sessions_on(r);
                self.router.replica_down(r, &lost);
            }
            FaultAction::Rejoin => {
                if self.up[r] {
                    return;
                }
                self.servers[r].advance(self.now_s);
                self.up[r] = true;
                self.router.replica_up(r);
            }
        }
        self.out
            .role_trace
            .push((self.now_s, self.router.role_labels()));
    }

    /// Terminates every open session on replica `r`; returns their classes.
    fn kill_sessions_on(&mut self, r: ReplicaIndex) -> Vec<Class> {
        let phases = self.current_phases();
        let mut lost = Vec::new();
        for session in self.sessions.iter_mut() {
            if session.replica == r && session.state != SessionState::Closed {
                session.state = SessionState::Closed;
                lost.push(session.class);
                for &p in &phases {
                    self.out.phases[p].lost[session.class.index()] += 1;
                }
            }
        }
        lost
    }

    fn on_boundary(&mut self, i: usize) {
        let now_s = self.now_s;
        self.out.role_trace.push((now_s, self.router.role_labels()));
        for server in self.servers.iter_mut() {
            server.advance(now_s);
        }
        self.busy_at_boundary[i] = self.servers.iter().map(PsServer::busy_core_s).collect();
    }

    fn finish(mut self) -> RunObservations {
        for queue in &self.waiting {
            let (served, out_of_order) = queue.served();
            self.out.pool_served += served;
            self.out.pool_served_out_of_order += out_of_order;
        }
        let cores = self.config.cluster.cores_per_replica;
        for p in 0..self.out.phases.len() {
            let phase = self.out.phases[p].phase.clone();
            let (Some(a), Some(b)) = (
                self.boundary_index(phase.start_s),
                self.boundary_index(phase.end_s),
            ) else {
                continue;
            };
            let (start, end) = (&self.busy_at_boundary[a], &self.busy_at_boundary[b]);
            if start.is_empty() || end.is_empty() {
                continue; // the phase lies beyond the end of the run
            }
            let span = (phase.end_s - phase.start_s) * cores;
            for r in 0..self.servers.len() {
                if alive_throughout(&self.config.faults, r, phase.start_s, phase.end_s) {
                    self.out.phases[p].busy_fraction[r] = Some((end[r] - start[r]) / span);
                }
            }
        }
        self.out
    }

    fn boundary_index(&self, t: f64) -> Option<usize> {
        self.boundaries_s.iter().position(|&b| b == t)
    }
}

/// Whether `replica` is up during the whole of [start_s, end_s) under `faults`.
pub fn alive_throughout(
    faults: &[FaultEvent],
    replica: ReplicaIndex,
    start_s: f64,
    end_s: f64,
) -> bool {
    let mut up = true;
    for fault in faults.iter().filter(|f| f.replica == replica) {
        if fault.at_s <= start_s {
            up = fault.action == FaultAction::Rejoin;
        } else if fault.at_s < end_s {
            return false;
        }
    }
    up
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::workload::DemandModel;

    /// Test fixture (not a strategy of the papers): every session on the least-numbered
    /// replica that is up, counting what it is told.
    struct FirstUp {
        up: Vec<bool>,
        active: Vec<i64>,
        lost: usize,
    }

    impl FirstUp {
        fn new(k: usize) -> Self {
            Self {
                up: vec![true; k],
                active: vec![0; k],
                lost: 0,
            }
        }
    }

    impl Router for FirstUp {
        fn admit(&mut self, _class: Class) -> Option<ReplicaIndex> {
            let r = self.up.iter().position(|&u| u)?;
            self.active[r] += 1;
            Some(r)
        }
        fn release(&mut self, replica: ReplicaIndex, _class: Class) {
            self.active[replica] -= 1;
            assert!(self.active[replica] >= 0);
        }
        fn replica_down(&mut self, replica: ReplicaIndex, lost: &[Class]) {
            self.up[replica] = false;
            self.lost += lost.len();
            self.active[replica] = 0;
        }
        fn replica_up(&mut self, replica: ReplicaIndex) {
            self.up[replica] = true;
        }
        fn role_labels(&self) -> Vec<String> {
            Vec::new()
        }
    }

    fn config(terminals: f64, end_s: f64, seed: u64) -> RunConfig {
        let mut workload = WorkloadConfig::paper(terminals, 0.5);
        workload.arrivals_until_s = end_s;
        RunConfig {
            cluster: ClusterConfig {
                replicas: 2,
                cores_per_replica: 4.0,
                query_parallelism: 1.0,
                ..ClusterConfig::default()
            },
            workload,
            faults: Vec::new(),
            phases: vec![Phase {
                name: "all".into(),
                start_s: 0.0,
                end_s,
            }],
            end_s,
            seed,
            pool: None,
        }
    }

    #[test]
    fn poisson_arrival_count_matches_rate() {
        // λ = 900 / 180 = 5 per second over 400 s: 2000 expected, σ ≈ 45.
        let cfg = config(900.0, 400.0, 11);
        let obs = run(&cfg, &mut FirstUp::new(2));
        let admitted: u64 = obs.phases[0].admitted.iter().sum();
        assert!((1850..=2150).contains(&admitted), "{admitted} arrivals");
        // Premium share 0.5.
        let premium = obs.phases[0].admitted[0] as f64 / admitted as f64;
        assert!((premium - 0.5).abs() < 0.05, "premium share {premium}");
    }

    #[test]
    fn same_seed_same_run_different_seed_different_run() {
        let a = run(&config(300.0, 120.0, 5), &mut FirstUp::new(2));
        let b = run(&config(300.0, 120.0, 5), &mut FirstUp::new(2));
        let c = run(&config(300.0, 120.0, 6), &mut FirstUp::new(2));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    /// A few sessions, no think time, a single template of demand 2 s without variation, on
    /// a replica with spare cores: every query takes exactly 2 s.
    #[test]
    fn unloaded_latency_equals_demand() {
        let mut cfg = config(0.0, 60.0, 1);
        cfg.workload.terminals = 1.0;
        cfg.workload.arrival_period_s = 1.0; // one arrival per second on average
        cfg.workload.arrivals_until_s = 5.0;
        cfg.workload.think_mean_s = 0.0;
        cfg.cluster.cores_per_replica = 100.0;
        cfg.workload.demand = DemandModel {
            relative_medians: vec![1.0],
            sigma: 0.0,
            mean_demand_s: 2.0,
        };
        let obs = run(&cfg, &mut FirstUp::new(2));
        let latencies = &obs.phases[0].latencies_s;
        let all: Vec<f64> = latencies.iter().flatten().copied().collect();
        assert!(!all.is_empty());
        for l in all {
            assert!((l - 2.0).abs() < 1e-9, "{l}");
        }
    }

    #[test]
    fn failure_kills_sessions_and_survivors_exclude_the_dead_replica() {
        let mut cfg = config(600.0, 100.0, 3);
        cfg.faults = vec![
            FaultEvent {
                at_s: 40.0,
                replica: 0,
                action: FaultAction::Down,
            },
            FaultEvent {
                at_s: 70.0,
                replica: 0,
                action: FaultAction::Rejoin,
            },
        ];
        cfg.phases = vec![
            Phase {
                name: "pre".into(),
                start_s: 20.0,
                end_s: 40.0,
            },
            Phase {
                name: "down".into(),
                start_s: 40.0,
                end_s: 70.0,
            },
            Phase {
                name: "after".into(),
                start_s: 70.0,
                end_s: 100.0,
            },
        ];
        let mut router = FirstUp::new(2);
        let obs = run(&cfg, &mut router);
        assert!(router.lost > 0);
        assert_eq!(obs.placements_on_down_replica, 0);
        let down = &obs.phases[1];
        assert_eq!(down.lost.iter().sum::<u64>() as usize, router.lost);
        assert!(down.busy_fraction[0].is_none());
        assert!(down.busy_fraction[1].unwrap() > 0.0);
        // Before the failure everything ran on replica 0.
        assert!(obs.phases[0].busy_fraction[0].unwrap() > 0.0);
        assert_eq!(obs.phases[0].busy_fraction[1], Some(0.0));
    }

    #[test]
    fn alive_throughout_reads_the_schedule() {
        let faults = [
            FaultEvent {
                at_s: 10.0,
                replica: 1,
                action: FaultAction::Down,
            },
            FaultEvent {
                at_s: 20.0,
                replica: 1,
                action: FaultAction::Rejoin,
            },
        ];
        assert!(alive_throughout(&faults, 0, 0.0, 30.0));
        assert!(alive_throughout(&faults, 1, 0.0, 10.0));
        assert!(!alive_throughout(&faults, 1, 0.0, 15.0));
        assert!(!alive_throughout(&faults, 1, 10.0, 20.0));
        assert!(alive_throughout(&faults, 1, 20.0, 30.0));
    }

    // The server pool (sim/pool.rs) in the engine.

    /// One replica in use (FirstUp), queries of exactly 1 s that run at full speed alone,
    /// no arrivals of its own (the tests send the sessions), and a think time so long that a
    /// session sends one query only.
    fn pooled(pool: ServerPool) -> RunConfig {
        let mut cfg = config(0.0, 100.0, 1);
        cfg.cluster.cores_per_replica = 100.0;
        cfg.workload.think_mean_s = 1e9;
        cfg.workload.demand = DemandModel {
            relative_medians: vec![1.0],
            sigma: 0.0,
            mean_demand_s: 1.0,
        };
        cfg.pool = Some(pool);
        cfg
    }

    /// Handles every event up to `until_s`.
    fn advance(engine: &mut Engine<'_>, until_s: f64) {
        while let Some(event) = engine.queue.peek().copied() {
            if event.at_s > until_s {
                break;
            }
            engine.queue.pop();
            engine.now_s = event.at_s;
            engine.handle(event.kind);
        }
    }

    /// Opens a `class` session at `at_s` living `lifetime_s`, which sends its query at once.
    fn send(engine: &mut Engine<'_>, class: Class, at_s: f64, lifetime_s: f64) {
        advance(engine, at_s);
        engine.now_s = at_s;
        let replica = engine.router.admit(class).expect("a replica is up");
        let id = engine.sessions.len();
        engine.sessions.push(Session {
            class,
            replica,
            arrived_s: at_s,
            state: SessionState::Thinking,
            rng: SimRng::new(id as u64),
            drain_seen: 0,
        });
        engine.push(at_s + lifetime_s, EventKind::LifetimeEnd(id));
        engine.start_query(id);
    }

    /// Runs `cfg` with the sessions `sends` (class, time, lifetime) and returns each class's
    /// latencies in completion order, and the observations.
    fn run_sends(cfg: &RunConfig, sends: &[(Class, f64, f64)]) -> ([Vec<f64>; 2], RunObservations) {
        let mut router = FirstUp::new(2);
        let mut engine = Engine::new(cfg, &mut router);
        engine.schedule_initial();
        for &(class, at_s, lifetime_s) in sends {
            send(&mut engine, class, at_s, lifetime_s);
        }
        advance(&mut engine, cfg.end_s);
        let out = engine.finish();
        let latencies = [0, 1].map(|c| out.phases[0].latencies_s[c].clone());
        (latencies, out)
    }

    fn assert_close(got: &[f64], expected: &[f64]) {
        assert_eq!(got.len(), expected.len(), "{got:?} vs {expected:?}");
        for (g, e) in got.iter().zip(expected) {
            assert!((g - e).abs() < 1e-9, "{got:?} vs {expected:?}");
        }
    }

    #[test]
    fn a_bounded_pool_never_runs_more_than_its_size() {
        let mut cfg = config(600.0, 100.0, 3);
        cfg.pool = Some(ServerPool::live(WaitOrder::DEFAULT));
        let mut router = FirstUp::new(2);
        let mut engine = Engine::new(&cfg, &mut router);
        engine.schedule_initial();
        let mut most_waiting = 0;
        while let Some(event) = engine.queue.pop() {
            if event.at_s > cfg.end_s {
                break;
            }
            engine.now_s = event.at_s;
            engine.handle(event.kind);
            for (server, waiting) in engine.servers.iter().zip(&engine.waiting) {
                assert!(server.running() <= 2, "{} running", server.running());
                assert!(
                    waiting.is_empty() || server.running() == 2,
                    "idle server, waiters"
                );
                most_waiting = most_waiting.max(waiting.len());
            }
        }
        let out = engine.finish();
        assert!(
            most_waiting > 10,
            "the load makes queries wait ({most_waiting})"
        );
        assert!(out.pool_served > 0);
    }

    #[test]
    fn waiting_for_a_server_counts_in_the_latency() {
        // Pool of 1: the premium query runs 0 → 1 s; the freemium one, sent at 0.5 s, waits
        // until 1 s and runs 1 → 2 s: 1.5 s from the client's point of view.
        let cfg = pooled(ServerPool {
            size: 1,
            order: WaitOrder::Fifo,
        });
        let sends = [(Class::PREMIUM, 0.0, 50.0), (Class::FREEMIUM, 0.5, 50.0)];
        let ([premium, freemium], out) = run_sends(&cfg, &sends);
        assert_close(&premium, &[1.0]);
        assert_close(&freemium, &[1.5]);
        assert_eq!(out.pool_served, 1);
        // Unbounded, both run at once at full speed (100 cores): 1 s each.
        let cfg = pooled(ServerPool::unbounded());
        let ([premium, freemium], out) = run_sends(&cfg, &sends);
        assert_close(&premium, &[1.0]);
        assert_close(&freemium, &[1.0]);
        assert_eq!(out.pool_served, 0);
    }

    /// The proxy's rule with 20 ms aging on a pool of 1 held by a query from 0 to 1 s: F1
    /// parks at 100 ms, P1 at 110 ms (within F1's aging: ahead of it), P2 at 500 ms (after
    /// F1 aged: behind it). Class order serves P1, F1, P2; FIFO serves F1, P1, P2; each runs
    /// 1 s.
    #[test]
    fn waiters_are_served_in_the_proxys_order() {
        let sends = [
            (Class::FREEMIUM, 0.0, 50.0),
            (Class::FREEMIUM, 0.100, 50.0),
            (Class::PREMIUM, 0.110, 50.0),
            (Class::PREMIUM, 0.500, 50.0),
        ];
        let pool = |order| ServerPool { size: 1, order };
        let ([premium, freemium], out) = run_sends(&pooled(pool(WaitOrder::DEFAULT)), &sends);
        assert_close(&premium, &[2.0 - 0.110, 4.0 - 0.500]);
        assert_close(&freemium, &[1.0, 3.0 - 0.100]);
        assert_eq!((out.pool_served, out.pool_served_out_of_order), (3, 1));
        let ([premium, freemium], out) = run_sends(&pooled(pool(WaitOrder::Fifo)), &sends);
        assert_close(&premium, &[3.0 - 0.110, 4.0 - 0.500]);
        assert_close(&freemium, &[1.0, 2.0 - 0.100]);
        assert_eq!((out.pool_served, out.pool_served_out_of_order), (3, 0));
    }

    #[test]
    fn a_lifetime_ending_in_the_pool_drops_the_waiting_query() {
        // AtLifetime: the second session's lifetime ends while its query waits (0.1 → 0.3 s):
        // it leaves the pool unmeasured and the third query gets the server at 1 s.
        let mut cfg = pooled(ServerPool {
            size: 1,
            order: WaitOrder::DEFAULT,
        });
        cfg.workload.session_end = SessionEnd::AtLifetime;
        let sends = [
            (Class::PREMIUM, 0.0, 50.0),
            (Class::PREMIUM, 0.1, 0.2),
            (Class::FREEMIUM, 0.4, 50.0),
        ];
        let ([premium, freemium], out) = run_sends(&cfg, &sends);
        assert_close(&premium, &[1.0]);
        assert_close(&freemium, &[2.0 - 0.4]);
        assert_eq!(out.pool_served, 1);
    }

    #[test]
    fn a_failure_empties_the_replicas_pool() {
        let mut cfg = pooled(ServerPool {
            size: 1,
            order: WaitOrder::DEFAULT,
        });
        cfg.faults = vec![FaultEvent {
            at_s: 0.5,
            replica: 0,
            action: FaultAction::Down,
        }];
        let sends = [(Class::PREMIUM, 0.0, 50.0), (Class::FREEMIUM, 0.2, 50.0)];
        let ([premium, freemium], out) = run_sends(&cfg, &sends);
        assert!(premium.is_empty() && freemium.is_empty(), "both lost");
        assert_eq!(out.phases[0].lost, {
            let mut lost = [0; Class::MAX];
            lost[0] = 1;
            lost[1] = 1;
            lost
        });
        assert_eq!(out.pool_served, 0);
    }
}
