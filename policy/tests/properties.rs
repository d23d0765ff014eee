//! Property tests over random sequences of admissions, releases, Down and Rejoin events
//! (K fixed), checking the invariants of 000 and 001 after every step.

mod common;

use common::*;
use pgtier_policy::{
    AdmissionRule, ChangeReason, Loads, Plb, PlbParams, ReplicaId, ReplicaLoad, Role, RoleTable,
    ServiceClass,
};
use proptest::prelude::*;

const K: usize = 6;

#[derive(Clone, Debug)]
enum Op {
    Open(ServiceClass),
    Close(usize),
    Down(u8),
    Rejoin(u8),
    /// Decide on a stale snapshot taken `age` steps ago (as a shard would), then apply.
    StaleOpen(ServiceClass, usize),
    /// Ask the recovery-tail drain about one session; move it (release, re-admit) if told.
    Drain(usize),
}

fn class() -> impl Strategy<Value = ServiceClass> {
    prop_oneof![Just(ServiceClass::Premium), Just(ServiceClass::Freemium)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => class().prop_map(Op::Open),
        5 => any::<usize>().prop_map(Op::Close),
        1 => (0..K as u8).prop_map(Op::Down),
        1 => (0..K as u8).prop_map(Op::Rejoin),
        2 => (class(), 1usize..4).prop_map(|(c, age)| Op::StaleOpen(c, age)),
        2 => any::<usize>().prop_map(Op::Drain),
    ]
}

fn params() -> impl Strategy<Value = PlbParams> {
    (
        2u32..7,
        2u32..7,
        0usize..4,
        0usize..4,
        0u32..3,
        0u32..3,
        0u32..3,
    )
        .prop_map(|(tp, tf, ap, af, floor, kp, kf)| {
            let alphas = [0.5, 0.6, 0.8, 1.0];
            PlbParams::PAPER
                .with_theta(P, tp)
                .with_theta(F, tf)
                .with_alpha(P, alphas[ap])
                .with_alpha(F, alphas[af])
                .with_floor(F, floor)
                .with_target(P, kp)
                .with_target(F, kf)
        })
}

struct World {
    plb: Plb,
    table: RoleTable,
    loads: Vec<ReplicaLoad>,
    sessions: Vec<(ReplicaId, ServiceClass)>,
    history: Vec<RoleTable>,
    /// Every rule and change reason met so far (coverage evidence).
    rules: Vec<AdmissionRule>,
    reasons: Vec<ChangeReason>,
}

impl World {
    fn new(params: PlbParams, drain: bool) -> World {
        let table = layout(K, &[0, 1], &[2, 3]);
        World {
            plb: Plb::new(params, &table)
                .expect("generated params are valid")
                .with_recovery_drain(drain),
            loads: vec![ReplicaLoad::default(); K],
            sessions: Vec::new(),
            history: vec![table.clone()],
            table,
            rules: Vec::new(),
            reasons: Vec::new(),
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Open(class) => self.open(class, 0)?,
            Op::StaleOpen(class, age) => self.open(class, age)?,
            Op::Close(pick) => self.close(pick)?,
            Op::Down(index) => self.down(r(index))?,
            Op::Rejoin(index) => self.rejoin(r(index))?,
            Op::Drain(pick) => self.drain(pick)?,
        }
        self.history.push(self.table.clone());
        self.check_invariants()
    }

    fn open(&mut self, class: ServiceClass, age: usize) -> Result<(), TestCaseError> {
        let snapshot = self.history[self.history.len().saturating_sub(1 + age)].clone();
        let Ok(admission) = self.plb.admit(&snapshot, &self.loads, class) else {
            prop_assert_eq!(snapshot.up_count(), 0);
            return Ok(());
        };
        // The session may use the replica under the snapshot's roles plus the decision's own
        // changes: that is the moment of placement the shard sees.
        let mut seen = snapshot.clone();
        for change in admission.role_changes.iter() {
            prop_assert!(seen.apply(change, self.plb.params()).is_ok(), "{change}");
        }
        self.check_placement(&seen, admission.replica, admission.rule, class)?;
        self.check_borrow(&snapshot, &admission, class)?;
        self.check_returns(&snapshot, &admission)?;
        self.rules.push(admission.rule);
        self.reasons
            .extend(admission.role_changes.iter().map(|c| c.reason));
        for change in admission.role_changes.iter() {
            // Fresh decisions always apply; stale ones may conflict, never corrupt.
            let applied = self.table.apply(change, self.plb.params());
            if age == 0 {
                prop_assert!(applied.is_ok(), "{change}: {applied:?}");
            }
            if applied.is_ok() {
                self.check_floor_after(change)?;
            }
        }
        if !self.table.is_up(admission.replica) {
            // A stale snapshot routed to a replica that has failed since: the proxy's connect
            // fails; nothing is counted.
            prop_assert!(age > 0);
            return Ok(());
        }
        self.loads[admission.replica.index()]
            .admitted(class)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.sessions.push((admission.replica, class));
        Ok(())
    }

    fn check_placement(
        &self,
        seen: &RoleTable,
        replica: ReplicaId,
        rule: AdmissionRule,
        class: ServiceClass,
    ) -> Result<(), TestCaseError> {
        let role = seen.role(replica).expect("replica in table");
        prop_assert!(role.is_up(), "placed on a Down replica");
        if rule == AdmissionRule::LastResort {
            let usable = seen.iter().any(|(_, role)| role.serves() == Some(class));
            prop_assert!(!usable, "last resort while the class had a replica");
        } else {
            prop_assert_eq!(role.serves(), Some(class), "{} on {}", class, role);
        }
        Ok(())
    }

    /// A borrow happens only when every replica of the class's pool is saturated, and respects
    /// the donor rules.
    fn check_borrow(
        &self,
        snapshot: &RoleTable,
        admission: &pgtier_policy::Admission,
        class: ServiceClass,
    ) -> Result<(), TestCaseError> {
        let Some(last) = admission.role_changes.as_slice().last() else {
            return Ok(());
        };
        if !last.reason.is_borrow() {
            return Ok(());
        }
        let mut after_returns = snapshot.clone();
        let changes = admission.role_changes.as_slice();
        for change in &changes[..changes.len() - 1] {
            after_returns
                .apply(change, self.plb.params())
                .expect("returns apply");
        }
        let theta = u64::from(self.plb.params().theta(class));
        for ((_, role), load) in after_returns.iter().zip(&self.loads) {
            let class_load = if role.owner() == Some(class) {
                Some(u64::from(load.of(class)))
            } else if role.borrower() == Some(class) {
                Some(load.total())
            } else {
                None
            };
            if let Some(l) = class_load {
                prop_assert!(
                    l >= theta,
                    "borrowed while {role} had headroom ({l} < {theta})"
                );
            }
        }
        let donor_load = self.loads[last.replica.index()];
        match last.reason {
            ChangeReason::BorrowPremiumForFreemium => {
                prop_assert_eq!(donor_load.premium, 0, "premium donor not premium-empty");
                prop_assert_eq!(after_returns.mixed(), 0, "crossed while Mixed available");
            }
            ChangeReason::BorrowFreemiumForPremium => {
                prop_assert_eq!(after_returns.mixed(), 0, "crossed while Mixed available");
            }
            _ => {}
        }
        Ok(())
    }

    /// A return needs no borrower sessions on the replica and some other replica of the
    /// borrower's pool below `τ_c`, both judged on the roles the decision saw.
    fn check_returns(
        &self,
        snapshot: &RoleTable,
        admission: &pgtier_policy::Admission,
    ) -> Result<(), TestCaseError> {
        let mut seen = snapshot.clone();
        for change in admission.role_changes.iter() {
            if matches!(
                change.reason,
                ChangeReason::ReturnToMixed | ChangeReason::ReturnToUnmetTarget
            ) {
                let borrower = change.from.borrower().expect("returns start borrowed");
                prop_assert_eq!(self.loads[change.replica.index()].of(borrower), 0);
                let tau = u64::from(self.plb.params().return_watermark(borrower));
                let eased = seen.iter().zip(&self.loads).any(|((r, role), load)| {
                    let class_load = if role.owner() == Some(borrower) {
                        Some(u64::from(load.of(borrower)))
                    } else if role.borrower() == Some(borrower) {
                        Some(load.total())
                    } else {
                        None
                    };
                    r != change.replica && class_load.is_some_and(|l| l < tau)
                });
                prop_assert!(eased, "returned {} under pressure", change.replica);
            }
            seen.apply(change, self.plb.params())
                .expect("decision applies to its own view");
        }
        Ok(())
    }

    fn check_floor_after(&self, change: &pgtier_policy::RoleChange) -> Result<(), TestCaseError> {
        let p = self.plb.params();
        match change.reason {
            ChangeReason::BorrowFreemiumForPremium => prop_assert!(
                self.table.owned(ServiceClass::Freemium)
                    >= p.floor(ServiceClass::Freemium) as usize,
                "κ_F broken"
            ),
            ChangeReason::BorrowPremiumForFreemium => prop_assert!(
                self.table.owned(ServiceClass::Premium) >= p.target(ServiceClass::Premium) as usize,
                "K_P broken"
            ),
            _ => {}
        }
        Ok(())
    }

    fn close(&mut self, pick: usize) -> Result<(), TestCaseError> {
        if self.sessions.is_empty() {
            return Ok(());
        }
        let (replica, class) = self.sessions.swap_remove(pick % self.sessions.len());
        self.loads[replica.index()]
            .released(class)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        Ok(())
    }

    fn drain(&mut self, pick: usize) -> Result<(), TestCaseError> {
        if self.sessions.is_empty() {
            return Ok(());
        }
        let index = pick % self.sessions.len();
        let (replica, class) = self.sessions[index];
        let moves = self
            .plb
            .drain_move(&self.table, Loads::sessions(&self.loads), replica, class);
        if !self.plb.recovery_drain() {
            prop_assert!(!moves, "the drain moved a session while off");
        }
        if moves {
            self.close(index)?;
            self.open(class, 0)?;
        }
        Ok(())
    }

    fn down(&mut self, replica: ReplicaId) -> Result<(), TestCaseError> {
        let was_up = self.table.is_up(replica);
        // Sessions on the failed replica die with it.
        self.sessions.retain(|&(r, _)| r != replica);
        self.loads[replica.index()] = ReplicaLoad::default();
        let changes = self
            .plb
            .handle_down(&mut self.table, replica, &self.loads)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.reasons.extend(changes.iter().map(|c| c.reason));
        if !was_up {
            prop_assert!(changes.is_empty(), "duplicate Down changed roles");
            return Ok(());
        }
        self.check_repaired()
    }

    fn rejoin(&mut self, replica: ReplicaId) -> Result<(), TestCaseError> {
        let was_down = self.table.role(replica) == Some(Role::Down);
        let changes = self
            .plb
            .handle_rejoin(&mut self.table, replica, &self.loads)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.reasons.extend(changes.iter().map(|c| c.reason));
        if !was_down {
            prop_assert!(changes.is_empty(), "duplicate Rejoin changed roles");
            return Ok(());
        }
        prop_assert_eq!(changes.as_slice()[0].to, Role::Mixed);
        self.check_repaired()
    }

    fn check_repaired(&self) -> Result<(), TestCaseError> {
        prop_assert!(self.table.iter().all(|(_, role)| !role.is_borrowed()));
        let target = self.plb.target(self.table.up_count());
        prop_assert_eq!(self.table.vector(), target);
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.table.len(), K);
        let mut recount = vec![ReplicaLoad::default(); K];
        for &(replica, class) in &self.sessions {
            recount[replica.index()]
                .admitted(class)
                .expect("small counts");
        }
        prop_assert_eq!(&recount, &self.loads, "loads drifted from sessions");
        let v = self.table.vector();
        let borrowed = self
            .table
            .iter()
            .filter(|(_, role)| role.is_borrowed())
            .count();
        let down = self.table.count(Role::Down);
        prop_assert_eq!(v.total() + borrowed + down, K, "roles are not a partition");
        prop_assert_eq!(self.table.up_count(), K - down);
        for ((_, role), load) in self.table.iter().zip(&self.loads) {
            prop_assert!(role.is_valid(), "malformed {role}");
            if role == Role::Down {
                prop_assert!(load.is_idle(), "sessions on a Down replica");
            }
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn random_event_sequences_keep_every_invariant(
        params in params(),
        drain in any::<bool>(),
        ops in prop::collection::vec(op(), 1..400),
    ) {
        let mut world = World::new(params, drain);
        for op in &ops {
            world.step(op)?;
        }
    }

    #[test]
    fn every_down_then_rejoin_returns_to_the_reference_split(
        params in params(),
        order in Just((0..K as u8).collect::<Vec<_>>()).prop_shuffle(),
        cut in 1..K,
        drain in any::<bool>(),
    ) {
        let mut world = World::new(params, drain);
        for _ in 0..30 {
            world.step(&Op::Open(ServiceClass::Premium))?;
            world.step(&Op::Open(ServiceClass::Freemium))?;
        }
        for &index in &order[..cut] {
            world.step(&Op::Down(index))?;
        }
        for &index in order[..cut].iter().rev() {
            world.step(&Op::Rejoin(index))?;
        }
        prop_assert_eq!(world.table.vector(), world.plb.reference());
    }
}

/// The random walk used by the properties reaches every admission rule and every change
/// reason, so the invariants above are checked on all branches, not just the easy ones.
#[test]
fn random_walks_reach_every_rule_and_reason() {
    let mut rng = pgtier_policy::SplitMix64::new(2026);
    let mut rules = Vec::new();
    let mut reasons = Vec::new();
    for seed in 0..40u64 {
        let params = PlbParams::PAPER
            .with_theta(P, 2 + (seed % 4) as u32)
            .with_theta(F, 2 + (seed / 4 % 4) as u32)
            .with_floor(F, (seed % 2) as u32)
            .with_target(P, (seed % 3) as u32)
            .with_target(F, (seed / 3 % 3) as u32);
        let mut world = World::new(params, seed % 2 == 1);
        for _ in 0..600 {
            let class = if rng.below(2) == 0 {
                ServiceClass::Premium
            } else {
                ServiceClass::Freemium
            };
            let op = match rng.below(20) {
                0 => Op::Down(rng.below(K as u64) as u8),
                1 => Op::Rejoin(rng.below(K as u64) as u8),
                2..=3 => Op::StaleOpen(class, 1 + rng.below(3) as usize),
                4..=11 => Op::Open(class),
                12 => Op::Drain(rng.next_u64() as usize),
                _ => Op::Close(rng.next_u64() as usize),
            };
            world.step(&op).expect("invariants hold");
        }
        rules.extend(world.rules);
        reasons.extend(world.reasons);
    }
    for rule in [
        AdmissionRule::PoolHeadroom,
        AdmissionRule::BorrowMixed,
        AdmissionRule::BorrowFreemium,
        AdmissionRule::BorrowPremium,
        AdmissionRule::PoolFallback,
        AdmissionRule::LastResort,
    ] {
        assert!(rules.contains(&rule), "never reached {rule}");
    }
    for reason in [
        ChangeReason::BorrowMixedForPremium,
        ChangeReason::BorrowFreemiumForPremium,
        ChangeReason::BorrowMixedForFreemium,
        ChangeReason::BorrowPremiumForFreemium,
        ChangeReason::ReturnToUnmetTarget,
        ChangeReason::ReturnToMixed,
        ChangeReason::Down,
        ChangeReason::Rejoin,
        ChangeReason::CanonicalMixedSessions,
        ChangeReason::CanonicalPremiumOnly,
        ChangeReason::CanonicalFreemiumOnly,
        ChangeReason::CanonicalIdleReturn,
        ChangeReason::RepairToTarget,
    ] {
        assert!(reasons.contains(&reason), "never reached {reason}");
    }
}
