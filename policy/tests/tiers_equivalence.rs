//! The two-class vocabulary and the two-rank tiers agree: random sequences of admissions,
//! releases, failures and rejoins run through [`Plb`] (role table, named classes and reasons)
//! and through [`TieredPlb`] on the two-rank table, and every chosen replica, every rule,
//! every role change and every table after each step must agree. [`Plb`] is the two-rank
//! tiers, so this guards its translation; `two_rank_traces.rs` pins the outcomes themselves
//! to those of the paper's two-class implementation.

mod common;

use common::*;
use pgtier_policy::tiers::{Tier, TierLoad, TierRole, TierRule, TierTable, TieredPlb, tier_role};
use pgtier_policy::{
    AdmissionRule, Plb, PlbParams, ReplicaId, ReplicaLoad, RoleChange, RoleTable, ServiceClass,
};
use proptest::prelude::*;

const K: usize = 6;

#[derive(Clone, Debug)]
enum Op {
    Open(ServiceClass),
    Close(usize),
    Down(u8),
    Rejoin(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop_oneof![Just(P), Just(F)].prop_map(Op::Open),
        5 => any::<usize>().prop_map(Op::Close),
        1 => (0..K as u8).prop_map(Op::Down),
        1 => (0..K as u8).prop_map(Op::Rejoin),
    ]
}

fn params() -> impl Strategy<Value = PlbParams> {
    (
        1u32..7,
        1u32..7,
        0usize..4,
        0usize..4,
        0u32..3,
        0u32..3,
        0u32..3,
    )
        .prop_map(|(tp, tf, ap, af, floor, kp, kf)| {
            let alphas = [0.5, 0.6, 0.8, 1.0];
            PlbParams::PAPER
                .with_theta(P, tp.max(2))
                .with_theta(F, tf.max(2))
                .with_alpha(P, alphas[ap])
                .with_alpha(F, alphas[af])
                .with_floor(F, floor)
                .with_target(P, kp)
                .with_target(F, kf)
        })
}

fn tier_of(class: ServiceClass) -> Tier {
    match class {
        ServiceClass::Premium => Tier(0),
        ServiceClass::Freemium => Tier(1),
    }
}

fn same_rule(rule: AdmissionRule, tiered: TierRule) -> bool {
    matches!(
        (rule, tiered),
        (AdmissionRule::PoolHeadroom, TierRule::Headroom)
            | (AdmissionRule::BorrowMixed, TierRule::BorrowMixed)
            | (AdmissionRule::BorrowFreemium, TierRule::BorrowLower)
            | (AdmissionRule::BorrowPremium, TierRule::BorrowHigher)
            | (AdmissionRule::PoolFallback, TierRule::Fallback)
            | (AdmissionRule::LastResort, TierRule::LastResort)
    )
}

fn mapped(table: &RoleTable) -> Vec<TierRole> {
    table.roles().iter().map(|&role| tier_role(role)).collect()
}

fn mapped_changes(changes: &[RoleChange]) -> Vec<(ReplicaId, TierRole, TierRole)> {
    changes
        .iter()
        .map(|c| (c.replica, tier_role(c.from), tier_role(c.to)))
        .collect()
}

struct Twins {
    plb: Plb,
    tiered: TieredPlb,
    table: RoleTable,
    tiers: TierTable,
    loads: Vec<ReplicaLoad>,
    sessions: Vec<(ReplicaId, ServiceClass)>,
}

impl Twins {
    fn new(params: PlbParams, table: RoleTable) -> Twins {
        let tiers = TierTable::from_roles(&table);
        Twins {
            plb: Plb::new(params, &table).expect("valid"),
            tiered: TieredPlb::new(params, &tiers).expect("valid"),
            loads: vec![ReplicaLoad::default(); table.len()],
            sessions: Vec::new(),
            table,
            tiers,
        }
    }

    fn tier_loads(&self) -> Vec<TierLoad> {
        self.loads.iter().map(|&l| TierLoad::from(l)).collect()
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Open(class) => self.open(class)?,
            Op::Close(pick) => {
                if !self.sessions.is_empty() {
                    let (replica, class) = self.sessions.swap_remove(pick % self.sessions.len());
                    self.loads[replica.index()]
                        .released(class)
                        .map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
            Op::Down(index) => {
                let replica = r(index);
                self.sessions.retain(|&(at, _)| at != replica);
                self.loads[replica.index()] = ReplicaLoad::default();
                let tier_loads = self.tier_loads();
                let a = self
                    .plb
                    .handle_down(&mut self.table, replica, &self.loads)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let b = self
                    .tiered
                    .handle_down(&mut self.tiers, replica, &tier_loads)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let b: Vec<_> = b.iter().map(|c| (c.replica, c.from, c.to)).collect();
                prop_assert_eq!(mapped_changes(a.as_slice()), b);
            }
            Op::Rejoin(index) => {
                let replica = r(index);
                let tier_loads = self.tier_loads();
                let a = self
                    .plb
                    .handle_rejoin(&mut self.table, replica, &self.loads)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let b = self
                    .tiered
                    .handle_rejoin(&mut self.tiers, replica, &tier_loads)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                let b: Vec<_> = b.iter().map(|c| (c.replica, c.from, c.to)).collect();
                prop_assert_eq!(mapped_changes(a.as_slice()), b);
            }
        }
        prop_assert_eq!(mapped(&self.table), self.tiers.roles().to_vec());
        let up = self.table.up_count();
        let (a, b) = (self.plb.target(up), self.tiered.target(up));
        prop_assert_eq!(
            (a.premium, a.freemium, a.mixed),
            (b.owned[0], b.owned[1], b.mixed)
        );
        Ok(())
    }

    fn open(&mut self, class: ServiceClass) -> Result<(), TestCaseError> {
        let a = self.plb.admit(&self.table, &self.loads, class);
        let b = self
            .tiered
            .admit(&self.tiers, &self.tier_loads(), tier_of(class));
        let (a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(_), Err(_)) => return Ok(()),
            (a, b) => {
                return Err(TestCaseError::fail(format!("one refused: {a:?} / {b:?}")));
            }
        };
        prop_assert_eq!(a.replica, b.replica, "{} at {}", class, self.table);
        prop_assert!(same_rule(a.rule, b.rule), "{:?} vs {:?}", a.rule, b.rule);
        let changes: Vec<_> = b
            .role_changes
            .iter()
            .map(|c| (c.replica, c.from, c.to))
            .collect();
        prop_assert_eq!(mapped_changes(a.role_changes.as_slice()), changes);
        for change in a.role_changes.iter() {
            prop_assert!(self.table.apply(change, self.plb.params()).is_ok());
        }
        for change in b.role_changes.iter() {
            prop_assert!(self.tiers.apply(change, self.tiered.params()).is_ok());
        }
        self.loads[a.replica.index()]
            .admitted(class)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        self.sessions.push((a.replica, class));
        Ok(())
    }
}

fn layouts() -> impl Strategy<Value = RoleTable> {
    prop_oneof![
        Just(layout(K, &[0, 1], &[2, 3])),
        Just(layout(K, &[0], &[1, 2, 3])),
        Just(layout(K, &[0, 1, 2], &[3])),
        Just(layout(K, &[0, 1, 2], &[3, 4, 5])),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn two_tiers_decide_exactly_as_plb(
        params in params(),
        table in layouts(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        prop_assume!(Plb::new(params, &table).is_ok());
        let mut twins = Twins::new(params, table);
        for op in &ops {
            twins.step(op)?;
        }
    }
}

/// The paper's five-replica deployment under a long deterministic walk, as a fixed case
/// next to the random ones.
#[test]
fn the_paper_deployment_agrees_over_a_long_walk() {
    let mut twins = Twins::new(PlbParams::PAPER, paper_table());
    let mut rng = pgtier_policy::SplitMix64::new(14);
    for _ in 0..5_000 {
        let op = match rng.below(24) {
            0 => Op::Down(rng.below(5) as u8),
            1 => Op::Rejoin(rng.below(5) as u8),
            2..=12 => Op::Open(if rng.below(2) == 0 { P } else { F }),
            _ => Op::Close(rng.next_u64() as usize),
        };
        twins.step(&op).expect("tiered and paper PLB agree");
    }
}
