//! The strategies compared by the simulator, as thin adapters from the engine's `Router`
//! trait onto `pgtier_policy`: the decisions are the policy crate's, the adapters only keep
//! the per-replica session counters and apply the role changes the policy returns, as the
//! proxy's control shard does. A strategy may also hold each replica to a server pool
//! ([`Strategy::server_pool`]), which the engine applies.

use pgtier_policy::{
    Admission, Dedicated, Draw, LoadSignal, Loads, P2c, Plb, PlbParams, ReplicaId, ReplicaLoad,
    RoleChange, RoleTable, ServiceClass, SplitMix64, Strategy as PolicyStrategy,
};
use pgtier_pool::WaitOrder;

use super::pool::ServerPool;
use super::router::{ReplicaIndex, Router};
use super::tiered::{TierSetup, TieredRouter};
use super::workload::{Class, ClusterConfig};

/// A routing strategy of the papers' comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// KPLB with the paper's configuration for K = 5.
    Plb,
    /// KPLB deciding on transactions in flight instead of open sessions (beyond the paper),
    /// with the cluster's `plb_in_flight` parameters.
    PlbTxSignal,
    /// KPLB with the recovery-tail drain (beyond 001): after a rejoin, sessions leave
    /// overloaded survivors between queries, and repair serves the needier class first.
    PlbDrain,
    /// KPLB with the classes of rank below `ranks` as premium and the rest as freemium (a
    /// tiered workload through the two-class policy; `Plb` is `ranks = 1`).
    PlbTop {
        /// How many of the most important ranks count as premium (at least 2).
        ranks: u8,
    },
    /// Tiered PLB (beyond the paper): one pool per class rank plus Mixed, with the cluster's
    /// `tiers` layout and parameters, and reclaim of Mixed on or off.
    PlbTiered {
        /// A more important rank may take back a Mixed replica a less important one holds.
        reclaim: bool,
    },
    /// KPLB with each replica's server pool held to [`ServerPool::LIVE_WAIT_SIZE`] servers
    /// (beyond the paper, `bench/plb-live.sh`'s `PLB+wait-*`): queries beyond the bound wait
    /// inside the proxy, in arrival order or premium first with freemium aged 20 ms.
    PlbWait {
        /// `waiter_policy = "class"` (default aging) rather than `"fifo"`.
        by_class: bool,
    },
    /// KPLB through the tiered policy with two ranks and reclaim on (beyond the paper):
    /// premium may take back a Mixed replica freemium holds once Mixed is empty.
    PlbReclaim,
    /// KRR: one shared round-robin pool.
    RoundRobin,
    /// rRR+fRR: `premium` replicas dedicated to premium, the next `freemium` to freemium.
    Dedicated {
        /// Premium replicas (the first ones).
        premium: usize,
        /// Freemium replicas (the following ones).
        freemium: usize,
    },
    /// Power of two choices on active sessions (equal weights); not in the papers.
    PowerOfTwoChoices,
    /// Fewest active sessions; not in the papers.
    LeastSessions,
}

impl Strategy {
    /// PLB, 5RR, 3RR+2RR and 4RR+1RR: the comparisons of the PLB paper.
    pub fn paper_set() -> Vec<Strategy> {
        vec![
            Strategy::Plb,
            Strategy::RoundRobin,
            Strategy::Dedicated {
                premium: 3,
                freemium: 2,
            },
            Strategy::Dedicated {
                premium: 4,
                freemium: 1,
            },
        ]
    }

    /// The paper's name for the strategy on `replicas` replicas ("5PLB", "5RR", "3RR+2RR").
    pub fn label(self, replicas: usize) -> String {
        match self {
            Strategy::Plb => format!("{replicas}PLB"),
            Strategy::PlbTxSignal => format!("{replicas}PLB+txsignal"),
            Strategy::PlbDrain => format!("{replicas}PLB+drain"),
            Strategy::PlbTop { ranks } => format!("{replicas}PLB/top{ranks}"),
            Strategy::PlbWait { by_class: false } => format!("{replicas}PLB+wait-fifo"),
            Strategy::PlbWait { by_class: true } => format!("{replicas}PLB+wait-class"),
            Strategy::PlbReclaim => format!("{replicas}PLB+reclaim"),
            Strategy::PlbTiered { reclaim: true } => format!("{replicas}PLB-tiered"),
            Strategy::PlbTiered { reclaim: false } => format!("{replicas}PLB-tiered/noreclaim"),
            Strategy::RoundRobin => format!("{replicas}RR"),
            Strategy::Dedicated { premium, freemium } => format!("{premium}RR+{freemium}RR"),
            Strategy::PowerOfTwoChoices => "p2c".to_string(),
            Strategy::LeastSessions => "least_sessions".to_string(),
        }
    }

    /// Parses a label as printed by `label` (case-insensitive, K must match `replicas`).
    pub fn parse(text: &str, replicas: usize) -> Option<Strategy> {
        let text = text.to_ascii_uppercase();
        if text == "PLB" || text == format!("{replicas}PLB") {
            return Some(Strategy::Plb);
        }
        if text == "PLB+TXSIGNAL" || text == format!("{replicas}PLB+TXSIGNAL") {
            return Some(Strategy::PlbTxSignal);
        }
        if text == "PLB+DRAIN" || text == format!("{replicas}PLB+DRAIN") {
            return Some(Strategy::PlbDrain);
        }
        if text == "PLB+WAIT-FIFO" || text == format!("{replicas}PLB+WAIT-FIFO") {
            return Some(Strategy::PlbWait { by_class: false });
        }
        if text == "PLB+WAIT-CLASS" || text == format!("{replicas}PLB+WAIT-CLASS") {
            return Some(Strategy::PlbWait { by_class: true });
        }
        if text == "PLB+RECLAIM" || text == format!("{replicas}PLB+RECLAIM") {
            return Some(Strategy::PlbReclaim);
        }
        if text == "PLB-TIERED" || text == format!("{replicas}PLB-TIERED") {
            return Some(Strategy::PlbTiered { reclaim: true });
        }
        if text == "PLB-TIERED/NORECLAIM" || text == format!("{replicas}PLB-TIERED/NORECLAIM") {
            return Some(Strategy::PlbTiered { reclaim: false });
        }
        let top = text
            .strip_prefix(&format!("{replicas}PLB/TOP"))
            .or_else(|| text.strip_prefix("PLB/TOP"));
        if let Some(ranks) = top.and_then(|n| n.parse::<u8>().ok()) {
            return (ranks >= 2).then_some(Strategy::PlbTop { ranks });
        }
        if text == "RR" || text == format!("{replicas}RR") {
            return Some(Strategy::RoundRobin);
        }
        if text == "P2C" {
            return Some(Strategy::PowerOfTwoChoices);
        }
        if text == "LEAST_SESSIONS" {
            return Some(Strategy::LeastSessions);
        }
        let (p, f) = text.split_once('+')?;
        let premium = p.strip_suffix("RR")?.parse().ok()?;
        let freemium = f.strip_suffix("RR")?.parse().ok()?;
        (premium + freemium == replicas).then_some(Strategy::Dedicated { premium, freemium })
    }

    /// The server pool the strategy holds every replica to; None (no bound, nothing waits in
    /// the proxy) for all but the `+wait` variants.
    pub fn server_pool(self) -> Option<ServerPool> {
        match self {
            Strategy::PlbWait { by_class } => Some(ServerPool::live(if by_class {
                WaitOrder::DEFAULT
            } else {
                WaitOrder::Fifo
            })),
            _ => None,
        }
    }
}

/// The papers' class of a session when the ranks below `premium_ranks` are premium (1 for
/// the papers' two classes: rank 0 premium, rank 1 freemium).
fn service_class(class: Class, premium_ranks: u8) -> ServiceClass {
    if class.0 < premium_ranks {
        ServiceClass::Premium
    } else {
        ServiceClass::Freemium
    }
}

fn replica_ids(range: std::ops::Range<usize>) -> Result<Vec<ReplicaId>, String> {
    range
        .map(|i| ReplicaId::from_index(i).ok_or_else(|| format!("replica {i} is out of range")))
        .collect()
}

/// Builds the router of `strategy` for the cluster's replicas (PLB with the cluster's
/// parameters).
pub fn build_router(
    strategy: Strategy,
    cluster: &ClusterConfig,
) -> Result<Box<dyn Router>, String> {
    let router = match strategy {
        Strategy::Plb | Strategy::PlbWait { .. } => {
            PolicyRouter::plb(cluster.plb, cluster.replicas)?
        }
        Strategy::PlbTxSignal => PolicyRouter::plb_on(
            cluster.plb_in_flight,
            cluster.replicas,
            LoadSignal::InFlight,
        )?,
        Strategy::PlbDrain => PolicyRouter::plb(cluster.plb, cluster.replicas)?.with_drain(),
        Strategy::PlbTop { ranks } => {
            PolicyRouter::plb(cluster.plb, cluster.replicas)?.with_premium_ranks(ranks)
        }
        Strategy::PlbReclaim => {
            let setup = TierSetup::two_of(&cluster.plb, cluster.replicas, true);
            return Ok(Box::new(TieredRouter::new(&setup, cluster.replicas)?));
        }
        Strategy::PlbTiered { reclaim } => {
            let mut setup = cluster.tiers.clone();
            setup.params.reclaim = reclaim;
            return Ok(Box::new(TieredRouter::new(&setup, cluster.replicas)?));
        }
        _ => PolicyRouter::new(strategy, cluster.replicas)?,
    };
    Ok(Box::new(router))
}

/// A `pgtier_policy::Strategy` driven as the proxy drives it: this adapter owns the role
/// table and the per-replica session counters, applies the role changes each decision
/// returns, and keeps the round-robin tickets.
pub struct PolicyRouter {
    strategy: PolicyStrategy,
    table: RoleTable,
    loads: Vec<ReplicaLoad>,
    /// Queries running per replica and class (PLB's signal under `LoadSignal::InFlight`).
    in_flight: Vec<ReplicaLoad>,
    /// Bumped at each rejoin when PLB's recovery-tail drain is on.
    drain_epoch: u64,
    /// Round-robin positions: one shared (KRR) or one per class (rRR+fRR), as the policy
    /// crate asks.
    tickets: [u64; 2],
    per_class_tickets: bool,
    /// Ranks below this are premium (see [`service_class`]).
    premium_ranks: u8,
    /// Random bits for p2c, seeded per router so runs stay deterministic.
    random: SplitMix64,
    /// Role changes the table refused (must stay 0: decisions and applies are sequential).
    pub conflicts: u64,
    /// Role changes applied, by admissions and by failure handling.
    pub role_changes: u64,
    /// Other proxies' sessions, added to this one's counts when it admits (a fleet host's
    /// view of the others' reports); empty: its own counts only.
    others: Vec<ReplicaLoad>,
}

impl PolicyRouter {
    /// The router of `strategy` on `replicas` replicas. PLB uses the paper's layout
    /// generalised to K: R_P = the first ⌊2K/5⌋ replicas, R_F = the next ⌊2K/5⌋, Mixed the
    /// rest ((2, 2, 1) for K = 5), with `PlbParams::PAPER`. rRR+fRR dedicates the first r
    /// replicas to premium and the next f to freemium.
    pub fn new(strategy: Strategy, replicas: usize) -> Result<Self, String> {
        let (policy, table, per_class_tickets) = match strategy {
            Strategy::Plb | Strategy::PlbWait { .. } => {
                return Self::plb(PlbParams::PAPER, replicas);
            }
            Strategy::PlbTxSignal => {
                return Self::plb_on(PlbParams::PAPER, replicas, LoadSignal::InFlight);
            }
            Strategy::PlbDrain => return Ok(Self::plb(PlbParams::PAPER, replicas)?.with_drain()),
            Strategy::PlbTop { ranks } => {
                return Ok(Self::plb(PlbParams::PAPER, replicas)?.with_premium_ranks(ranks));
            }
            Strategy::PlbTiered { .. } | Strategy::PlbReclaim => {
                return Err(format!(
                    "{} is not a two-class policy: build it with build_router",
                    strategy.label(replicas)
                ));
            }
            Strategy::RoundRobin => (
                PolicyStrategy::RoundRobin,
                RoleTable::all_mixed(replicas).map_err(|e| e.to_string())?,
                false,
            ),
            Strategy::Dedicated { premium, freemium } => {
                if premium + freemium != replicas {
                    return Err(format!(
                        "{} needs exactly {replicas} replicas",
                        strategy.label(replicas)
                    ));
                }
                let premium_ids = replica_ids(0..premium)?;
                let freemium_ids = replica_ids(premium..replicas)?;
                let dedicated = Dedicated::new(replicas, &premium_ids, &freemium_ids)
                    .map_err(|e| e.to_string())?;
                (
                    PolicyStrategy::Dedicated(dedicated),
                    RoleTable::all_mixed(replicas).map_err(|e| e.to_string())?,
                    true,
                )
            }
            Strategy::PowerOfTwoChoices => (
                PolicyStrategy::P2c(P2c::uniform()),
                RoleTable::all_mixed(replicas).map_err(|e| e.to_string())?,
                false,
            ),
            Strategy::LeastSessions => (
                PolicyStrategy::LeastSessions,
                RoleTable::all_mixed(replicas).map_err(|e| e.to_string())?,
                false,
            ),
        };
        Ok(Self::with(policy, table, per_class_tickets))
    }

    /// PLB with other parameters on the paper's layout (for sensitivity studies).
    pub fn plb(params: PlbParams, replicas: usize) -> Result<Self, String> {
        Self::plb_on(params, replicas, LoadSignal::Sessions)
    }

    /// PLB deciding on `signal`.
    pub fn plb_on(params: PlbParams, replicas: usize, signal: LoadSignal) -> Result<Self, String> {
        let pool = (2 * replicas / 5).max(1);
        let premium = replica_ids(0..pool)?;
        let freemium = replica_ids(pool..(2 * pool).min(replicas))?;
        let table = RoleTable::new(replicas, &premium, &freemium).map_err(|e| e.to_string())?;
        let plb = Plb::new(params, &table)
            .map_err(|e| e.to_string())?
            .with_load_signal(signal);
        Ok(Self::with(PolicyStrategy::Plb(plb), table, false))
    }

    fn with(strategy: PolicyStrategy, table: RoleTable, per_class_tickets: bool) -> Self {
        let replicas = table.len();
        Self {
            strategy,
            table,
            loads: vec![ReplicaLoad::default(); replicas],
            in_flight: vec![ReplicaLoad::default(); replicas],
            drain_epoch: 0,
            tickets: [0; 2],
            per_class_tickets,
            premium_ranks: 1,
            random: SplitMix64::new(0x9C2),
            conflicts: 0,
            role_changes: 0,
            others: Vec::new(),
        }
    }

    /// Sets the other proxies' sessions that this router's admissions add to its own counts
    /// (as a fleet host adds the other members' reported load); empty to decide alone.
    pub fn set_others(&mut self, others: Vec<ReplicaLoad>) {
        self.others = others;
    }

    fn apply(&mut self, changes: &[RoleChange]) {
        let PolicyStrategy::Plb(plb) = &self.strategy else {
            return; // only PLB returns role changes
        };
        let params = *plb.params();
        for change in changes {
            match self.table.apply(change, &params) {
                Ok(()) => self.role_changes += 1,
                Err(_) => self.conflicts += 1,
            }
        }
    }

    fn next_draw(&mut self, class: ServiceClass) -> Draw {
        let slot = match (self.per_class_tickets, class) {
            (true, ServiceClass::Freemium) => 1,
            _ => 0,
        };
        let ticket = self.tickets[slot];
        self.tickets[slot] += 1;
        Draw {
            ticket,
            random: self.random.next_u64(),
        }
    }

    /// The counts a decision reads: in-flight queries as the signal when PLB decides on them,
    /// open sessions always as the pinning guard.
    fn decision_loads(&self) -> Loads<'_> {
        match &self.strategy {
            PolicyStrategy::Plb(plb) if plb.load_signal() == LoadSignal::InFlight => Loads {
                signal: &self.in_flight,
                sessions: &self.loads,
            },
            _ => Loads::sessions(&self.loads),
        }
    }

    /// The same router counting the ranks below `ranks` as premium.
    pub fn with_premium_ranks(mut self, ranks: u8) -> Self {
        self.premium_ranks = ranks.max(1);
        self
    }

    fn class(&self, class: Class) -> ServiceClass {
        service_class(class, self.premium_ranks)
    }

    /// The same router with PLB's recovery-tail drain on (no effect on the baselines).
    pub fn with_drain(mut self) -> Self {
        if let PolicyStrategy::Plb(plb) = self.strategy {
            self.strategy = PolicyStrategy::Plb(plb.with_recovery_drain(true));
        }
        self
    }

    fn plb_drains(&self) -> Option<&Plb> {
        match &self.strategy {
            PolicyStrategy::Plb(plb) if plb.recovery_drain() => Some(plb),
            _ => None,
        }
    }

    /// Queries running per replica as the in-flight signal sees them.
    pub fn in_flight(&self) -> &[ReplicaLoad] {
        &self.in_flight
    }

    /// The role table now.
    pub fn table(&self) -> &RoleTable {
        &self.table
    }

    /// Replaces the role table (a fleet's host adopting the table its leader published); the
    /// session counters stay, as the proxy's do.
    pub fn set_table(&mut self, table: RoleTable) {
        self.table = table;
    }

    /// Active sessions per replica as the policy sees them.
    pub fn loads(&self) -> &[ReplicaLoad] {
        &self.loads
    }
}

impl Router for PolicyRouter {
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex> {
        let class = self.class(class);
        let draw = self.next_draw(class);
        let fleet_view: Vec<ReplicaLoad>;
        let loads = if self.others.len() == self.loads.len() {
            fleet_view = self
                .loads
                .iter()
                .zip(&self.others)
                .map(|(own, other)| ReplicaLoad {
                    premium: own.premium.saturating_add(other.premium),
                    freemium: own.freemium.saturating_add(other.freemium),
                })
                .collect();
            Loads::sessions(&fleet_view)
        } else {
            self.decision_loads()
        };
        let Admission {
            replica,
            role_changes,
            ..
        } = self
            .strategy
            .route_loads(&self.table, loads, class, draw)
            .ok()?;
        self.apply(role_changes.as_slice());
        self.loads.get_mut(replica.index())?.admitted(class).ok()?;
        Some(replica.index())
    }

    fn release(&mut self, replica: ReplicaIndex, class: Class) {
        if let Some(load) = self.loads.get_mut(replica) {
            let released = load.released(service_class(class, self.premium_ranks));
            debug_assert!(
                released.is_ok(),
                "released a session the policy never counted"
            );
        }
    }

    fn drain_epoch(&self) -> u64 {
        self.drain_epoch
    }

    fn should_move(&mut self, replica: ReplicaIndex, class: Class) -> bool {
        let (Some(plb), Some(id)) = (self.plb_drains(), ReplicaId::from_index(replica)) else {
            return false;
        };
        plb.drain_move(&self.table, self.decision_loads(), id, self.class(class))
    }

    fn query_started(&mut self, replica: ReplicaIndex, class: Class) {
        if let Some(load) = self.in_flight.get_mut(replica) {
            let counted = load.admitted(service_class(class, self.premium_ranks));
            debug_assert!(counted.is_ok(), "in-flight counter overflow");
        }
    }

    fn query_done(&mut self, replica: ReplicaIndex, class: Class) {
        if let Some(load) = self.in_flight.get_mut(replica) {
            let released = load.released(service_class(class, self.premium_ranks));
            debug_assert!(released.is_ok(), "a query finished that never started");
        }
    }

    fn replica_down(&mut self, replica: ReplicaIndex, _lost: &[Class]) {
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        // The lost sessions are gone: the replica's counters drop to zero with them, before
        // repair looks at the loads.
        if let Some(load) = self.loads.get_mut(replica) {
            *load = ReplicaLoad::default();
        }
        if let Some(load) = self.in_flight.get_mut(replica) {
            *load = ReplicaLoad::default();
        }
        if let Ok(changes) = self.strategy.handle_down(&mut self.table, id, &self.loads) {
            self.role_changes += changes.len() as u64;
        }
    }

    fn replica_up(&mut self, replica: ReplicaIndex) {
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        if let Ok(changes) = self
            .strategy
            .handle_rejoin(&mut self.table, id, &self.loads)
        {
            self.role_changes += changes.len() as u64;
        }
        if self.plb_drains().is_some() {
            self.drain_epoch += 1;
        }
    }

    fn role_labels(&self) -> Vec<String> {
        self.table.roles().iter().map(|r| r.to_string()).collect()
    }

    fn refused_role_changes(&self) -> u64 {
        self.conflicts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip() {
        let extra = [
            Strategy::PowerOfTwoChoices,
            Strategy::LeastSessions,
            Strategy::PlbTxSignal,
            Strategy::PlbDrain,
            Strategy::PlbTop { ranks: 2 },
            Strategy::PlbTiered { reclaim: true },
            Strategy::PlbTiered { reclaim: false },
            Strategy::PlbReclaim,
            Strategy::PlbWait { by_class: false },
            Strategy::PlbWait { by_class: true },
        ];
        for s in Strategy::paper_set().into_iter().chain(extra) {
            assert_eq!(Strategy::parse(&s.label(5), 5), Some(s));
            let pooled = matches!(s, Strategy::PlbWait { .. });
            assert_eq!(s.server_pool().is_some(), pooled, "{s:?}");
        }
        assert_eq!(
            Strategy::PlbWait { by_class: true }.label(5),
            "5PLB+wait-class"
        );
        assert_eq!(
            Strategy::parse("5PLB+wait-fifo", 5),
            Some(Strategy::PlbWait { by_class: false })
        );
        assert_eq!(Strategy::parse("2RR+2RR", 5), None);
    }

    #[test]
    fn plb_starts_from_the_papers_layout_and_counts_sessions() {
        let mut router = PolicyRouter::new(Strategy::Plb, 5).expect("router");
        assert_eq!(router.table().vector().premium, 2);
        assert_eq!(router.table().vector().freemium, 2);
        assert_eq!(router.table().vector().mixed, 1);
        let r = router.admit(Class::PREMIUM).expect("placed");
        assert!(r < 2, "premium goes to R_P first");
        assert_eq!(router.loads()[r].premium, 1);
        router.release(r, Class::PREMIUM);
        assert_eq!(router.loads()[r].premium, 0);
    }

    #[test]
    fn plb_on_the_in_flight_signal_counts_running_queries_not_sessions() {
        let mut router =
            build_router(Strategy::PlbTxSignal, &ClusterConfig::live()).expect("router");
        // θ = 2 transactions: idle sessions all fit on replica 0.
        let idle: Vec<_> = (0..4)
            .filter_map(|_| router.admit(Class::PREMIUM))
            .collect();
        assert_eq!(idle, [0, 0, 0, 0]);
        router.query_started(0, Class::PREMIUM);
        router.query_started(0, Class::PREMIUM);
        assert_eq!(
            router.admit(Class::PREMIUM),
            Some(1),
            "replica 0 is full of queries"
        );
        router.query_done(0, Class::PREMIUM);
        router.query_started(1, Class::PREMIUM);
        router.query_started(1, Class::PREMIUM);
        assert_eq!(
            router.admit(Class::PREMIUM),
            Some(0),
            "a finished query frees headroom"
        );
        router.query_done(1, Class::PREMIUM);
        router.query_done(1, Class::PREMIUM);
    }

    #[test]
    fn a_failure_drops_the_replicas_running_queries_with_its_sessions() {
        let mut router =
            PolicyRouter::plb_on(PlbParams::PAPER, 5, LoadSignal::InFlight).expect("router");
        let r = router.admit(Class::PREMIUM).expect("placed");
        router.query_started(r, Class::PREMIUM);
        assert_eq!(router.in_flight()[r].premium, 1);
        router.replica_down(r, &[Class::PREMIUM]);
        assert_eq!(router.in_flight()[r], ReplicaLoad::default());
        assert_eq!(router.loads()[r], ReplicaLoad::default());
    }

    #[test]
    fn baselines_skip_a_down_replica() {
        for strategy in [
            Strategy::RoundRobin,
            Strategy::Dedicated {
                premium: 3,
                freemium: 2,
            },
        ] {
            let mut router = PolicyRouter::new(strategy, 5).expect("router");
            router.replica_down(0, &[]);
            for _ in 0..20 {
                for class in Class::ALL {
                    assert_ne!(router.admit(class), Some(0));
                }
            }
            router.replica_up(0);
            let placed: Vec<_> = (0..10)
                .filter_map(|_| router.admit(Class::PREMIUM))
                .collect();
            assert!(
                placed.contains(&0),
                "{strategy:?} uses the rejoined replica"
            );
        }
    }

    #[test]
    fn dedicated_keeps_classes_apart() {
        let mut router = PolicyRouter::new(
            Strategy::Dedicated {
                premium: 4,
                freemium: 1,
            },
            5,
        )
        .expect("router");
        for _ in 0..10 {
            assert!(router.admit(Class::PREMIUM).expect("placed") < 4);
            assert_eq!(router.admit(Class::FREEMIUM), Some(4));
        }
    }
}
