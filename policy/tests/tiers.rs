//! Tiered PLB with three and four tiers: the generalised rules on hand-built states, and
//! random event sequences that check the invariants after every step (every placement in the
//! tier's routing pool, borrows only under saturation and within guards, returns only when
//! pressure eased, repair to the target split, the reference restored after recovery).

mod common;

use common::{ids, r};
use pgtier_policy::PlbParams;
use pgtier_policy::ReplicaId;
use pgtier_policy::tiers::{
    MAX_TIERS, Tier, TierAdmission, TierChange, TierLoad, TierPool, TierReason, TierRole, TierRule,
    TierTable, TieredPlb,
};
use proptest::prelude::*;

const GOLD: Tier = Tier(0);
const SILVER: Tier = Tier(1);
const BRONZE: Tier = Tier(2);

/// Six replicas: gold {0, 1}, silver {2, 3}, bronze {4}, Mixed {5}.
fn three_tiers() -> TierTable {
    TierTable::new(6, 3, &[&ids(&[0, 1]), &ids(&[2, 3]), &ids(&[4])]).expect("valid layout")
}

fn policy(params: PlbParams, table: &TierTable) -> TieredPlb {
    TieredPlb::new(params, table).expect("valid parameters")
}

fn params3() -> PlbParams {
    PlbParams {
        floor: [0, 1, 0, 0],
        target: [2, 1, 1, 0],
        ..PlbParams::uniform(3, 2, 0.5)
    }
}

/// `sessions[t]` per replica.
fn loads(per_replica: &[[u32; 3]]) -> Vec<TierLoad> {
    per_replica
        .iter()
        .map(|s| {
            let mut sessions = [0; MAX_TIERS];
            sessions[..3].copy_from_slice(s);
            TierLoad { sessions }
        })
        .collect()
}

fn set(table: &TierTable, roles: &[(u8, TierRole)]) -> TierTable {
    let mut table = table.clone();
    let open = PlbParams {
        floor: [0; MAX_TIERS],
        target: [0; MAX_TIERS],
        ..params3()
    };
    for &(index, to) in roles {
        let from = table.role(r(index)).expect("replica exists");
        let change = TierChange {
            replica: r(index),
            from,
            to,
            reason: TierReason::RepairToTarget,
        };
        table.apply(&change, &open).expect("test roles apply");
    }
    table
}

fn borrow_of(admission: &TierAdmission) -> Option<TierChange> {
    admission
        .role_changes
        .as_slice()
        .last()
        .copied()
        .filter(|c| c.to.is_borrowed())
}

#[test]
fn each_tier_routes_to_its_own_pool_with_headroom() {
    let table = three_tiers();
    let plb = policy(params3(), &table);
    let l = loads(&[
        [1, 0, 0],
        [0, 0, 0],
        [0, 1, 0],
        [0, 0, 0],
        [0, 0, 1],
        [0, 0, 0],
    ]);
    for (tier, expected) in [(GOLD, 1), (SILVER, 3), (BRONZE, 4)] {
        let a = plb.admit(&table, &l, tier).expect("admits");
        assert_eq!((a.replica, a.rule), (r(expected), TierRule::Headroom));
        assert!(a.role_changes.is_empty());
    }
}

#[test]
fn a_saturated_middle_tier_borrows_mixed_first() {
    let table = three_tiers();
    let plb = policy(params3(), &table);
    let l = loads(&[[0; 3], [0; 3], [0, 2, 0], [0, 2, 0], [0; 3], [0; 3]]);
    let a = plb.admit(&table, &l, SILVER).expect("admits");
    assert_eq!((a.replica, a.rule), (r(5), TierRule::BorrowMixed));
    assert_eq!(
        borrow_of(&a).map(|c| c.to),
        Some(TierRole::Borrowed {
            by: SILVER,
            from: TierPool::Mixed
        })
    );
}

#[test]
fn a_saturated_tier_reclaims_the_mixed_replica_an_outranked_tier_holds() {
    // Bronze saturated first and holds replica 5 (from Mixed) with one session; silver is
    // saturated now. With reclaim silver takes replica 5; without, it falls back.
    let table = set(
        &three_tiers(),
        &[(
            5,
            TierRole::Borrowed {
                by: BRONZE,
                from: TierPool::Mixed,
            },
        )],
    );
    let l = loads(&[[0; 3], [0; 3], [0, 2, 0], [0, 2, 0], [0, 0, 2], [0, 0, 1]]);
    let plb = policy(params3(), &three_tiers());
    let a = plb.admit(&table, &l, SILVER).expect("admits");
    assert_eq!((a.replica, a.rule), (r(5), TierRule::Reclaim));
    assert_eq!(
        borrow_of(&a).map(|c| (c.from, c.to)),
        Some((
            TierRole::Borrowed {
                by: BRONZE,
                from: TierPool::Mixed
            },
            TierRole::Borrowed {
                by: SILVER,
                from: TierPool::Mixed
            }
        ))
    );
    // Bronze never takes it back from silver, and gold takes it from either.
    let paper = policy(
        PlbParams {
            reclaim: false,
            ..params3()
        },
        &three_tiers(),
    );
    let a = paper.admit(&table, &l, SILVER).expect("admits");
    assert_eq!(a.rule, TierRule::Fallback);
    let silver_holds = set(
        &table,
        &[(
            5,
            TierRole::Borrowed {
                by: SILVER,
                from: TierPool::Mixed,
            },
        )],
    );
    let mut busy = l.clone();
    busy[4] = TierLoad {
        sessions: [0, 0, 3, 0],
    };
    busy[5] = TierLoad {
        sessions: [0, 1, 0, 0],
    };
    let a = plb.admit(&silver_holds, &busy, BRONZE).expect("admits");
    assert_ne!(a.rule, TierRule::Reclaim);
    let full_gold = loads(&[
        [2, 0, 0],
        [2, 0, 0],
        [0, 2, 0],
        [0, 2, 0],
        [0, 0, 2],
        [0, 1, 0],
    ]);
    let a = plb.admit(&silver_holds, &full_gold, GOLD).expect("admits");
    assert_eq!((a.replica, a.rule), (r(5), TierRule::Reclaim));
}

#[test]
fn without_mixed_a_middle_tier_borrows_below_before_above() {
    // Mixed is gone; bronze has two replicas (κ_bronze = 1 allows one to go); gold has three
    // (K_gold = 2 allows one to go). Silver takes from bronze first: the tier it outranks.
    let base = TierTable::new(7, 3, &[&ids(&[0, 1, 6]), &ids(&[2, 3]), &ids(&[4, 5])])
        .expect("valid layout");
    let params = PlbParams {
        floor: [0, 1, 1, 0],
        target: [2, 1, 1, 0],
        ..PlbParams::uniform(3, 2, 0.5)
    };
    let plb = policy(params, &base);
    let mut l = loads(&[
        [0; 3],
        [0; 3],
        [0, 2, 0],
        [0, 2, 0],
        [0, 0, 1],
        [0, 0, 0],
        [0; 3],
    ]);
    let a = plb.admit(&base, &l, SILVER).expect("admits");
    assert_eq!((a.replica, a.rule), (r(5), TierRule::BorrowLower));
    // Bronze at its floor: silver turns to gold, and only to a gold replica with no gold
    // session.
    let at_floor = set(&base, &[(5, TierRole::Owned(SILVER))]);
    l[5] = TierLoad {
        sessions: [0, 2, 0, 0],
    };
    l[0] = TierLoad {
        sessions: [1, 0, 0, 0],
    };
    let a = plb.admit(&at_floor, &l, SILVER).expect("admits");
    assert_eq!(a.rule, TierRule::BorrowHigher);
    assert_ne!(
        a.replica,
        r(0),
        "a gold replica hosting gold sessions is not lent"
    );
    assert_eq!(
        borrow_of(&a).map(|c| c.to),
        Some(TierRole::Borrowed {
            by: SILVER,
            from: TierPool::Tier(GOLD)
        })
    );
}

#[test]
fn the_top_tier_takes_from_the_least_important_pool_first() {
    let base =
        TierTable::new(6, 3, &[&ids(&[0]), &ids(&[1, 2]), &ids(&[3, 4, 5])]).expect("valid layout");
    let params = PlbParams {
        floor: [0, 1, 1, 0],
        target: [1, 1, 1, 0],
        ..PlbParams::uniform(3, 2, 0.5)
    };
    let plb = policy(params, &base);
    let l = loads(&[[2, 0, 0], [0; 3], [0; 3], [0, 0, 1], [0, 0, 0], [0, 0, 1]]);
    let a = plb.admit(&base, &l, GOLD).expect("admits");
    assert_eq!((a.replica, a.rule), (r(4), TierRule::BorrowLower));
}

#[test]
fn a_lower_tier_never_borrows_a_replica_hosting_an_outranking_tier() {
    // Bronze saturated, no Mixed, silver's pool hosts gold residuals on both replicas... and
    // silver's pool may lend (K_silver = 0): bronze gets no silver replica, and gold's pool
    // is at its target, so bronze falls back to its own pool.
    let base =
        TierTable::new(5, 3, &[&ids(&[0, 1]), &ids(&[2, 3]), &ids(&[4])]).expect("valid layout");
    let params = PlbParams {
        floor: [0, 1, 1, 0],
        target: [2, 0, 1, 0],
        ..PlbParams::uniform(3, 2, 0.5)
    };
    let plb = policy(params, &base);
    let l = loads(&[[0; 3], [0; 3], [1, 0, 0], [1, 0, 0], [0, 0, 2]]);
    let a = plb.admit(&base, &l, BRONZE).expect("admits");
    assert_eq!((a.replica, a.rule), (r(4), TierRule::Fallback));
}

#[test]
fn a_returned_replica_goes_to_the_most_important_pool_below_target() {
    // Replica 5 was borrowed by bronze from Mixed; bronze's own replica has eased below τ.
    // Gold is at K_gold = 2, silver below K_silver = 3: silver gets it.
    let table = set(
        &three_tiers(),
        &[(
            5,
            TierRole::Borrowed {
                by: BRONZE,
                from: TierPool::Mixed,
            },
        )],
    );
    let params = PlbParams {
        target: [2, 3, 1, 0],
        ..params3()
    };
    let plb = policy(
        params,
        &TierTable::new(6, 3, &[&ids(&[0, 1]), &ids(&[2, 3, 5]), &ids(&[4])]).expect("layout"),
    );
    let l = loads(&[[0; 3], [0; 3], [0; 3], [0; 3], [0; 3], [0; 3]]);
    let changes = plb.returns(&table, &l).expect("returns");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes.as_slice()[0].to, TierRole::Owned(SILVER));
    assert_eq!(
        changes.as_slice()[0].reason,
        TierReason::ReturnToUnmetTarget
    );
}

#[test]
fn a_failure_repairs_to_the_target_and_recovery_restores_the_reference() {
    let mut table = three_tiers();
    let plb = policy(params3(), &table);
    let l = loads(&[[0; 3]; 6]);
    plb.handle_down(&mut table, r(0), &l).expect("down");
    assert_eq!(table.vector(), plb.target(5));
    plb.handle_down(&mut table, r(4), &l).expect("down");
    assert_eq!(table.vector(), plb.target(4));
    assert!(
        table.owned(BRONZE) >= 1,
        "every tier keeps a replica: {table}"
    );
    plb.handle_rejoin(&mut table, r(4), &l).expect("rejoin");
    plb.handle_rejoin(&mut table, r(0), &l).expect("rejoin");
    assert_eq!(table.vector(), plb.reference());
}

#[test]
fn small_survivor_sets_give_every_tier_a_replica_while_they_can() {
    let table = three_tiers();
    let plb = policy(params3(), &table);
    let t = |s| plb.target(s);
    assert_eq!((t(1).owned, t(1).mixed), ([0, 0, 0, 0], 1));
    assert_eq!(t(2).owned, [1, 1, 0, 0]);
    assert_eq!(t(3).owned, [1, 1, 1, 0]);
    assert_eq!(t(4).owned, [2, 1, 1, 0]);
    for s in 0..=6 {
        assert_eq!(plb.target(s).total(), s);
    }
}

#[test]
fn parameters_are_checked_against_the_table() {
    let table = three_tiers();
    let mut p = params3();
    p.tiers = 2;
    assert!(TieredPlb::new(p, &table).is_err(), "tier count mismatch");
    let mut p = params3();
    p.theta[2] = 0;
    assert!(TieredPlb::new(p, &table).is_err(), "theta zero");
    let mut p = params3();
    p.floor[2] = 2;
    assert!(TieredPlb::new(p, &table).is_err(), "floor above the pool");
    let mut p = params3();
    p.target = [3, 3, 1, 0];
    assert!(
        TieredPlb::new(p, &table).is_err(),
        "targets above the budget"
    );
    let p = params3();
    let plb = policy(p, &table);
    assert!(plb.admit(&table, &loads(&[[0; 3]; 6]), Tier(3)).is_err());
    assert!(plb.admit(&table, &loads(&[[0; 3]; 5]), GOLD).is_err());
}

// ---- random sequences -------------------------------------------------------------------

const K: usize = 7;

#[derive(Clone, Debug)]
enum Op {
    Open(u8),
    Close(usize),
    Down(u8),
    Rejoin(u8),
}

fn op(tiers: u8) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..tiers).prop_map(Op::Open),
        5 => any::<usize>().prop_map(Op::Close),
        1 => (0..K as u8).prop_map(Op::Down),
        1 => (0..K as u8).prop_map(Op::Rejoin),
    ]
}

/// A layout of K = 7 replicas over `tiers` tiers (one or two each, the rest Mixed) and
/// parameters that fit it.
fn world_setup() -> impl Strategy<Value = (TierTable, PlbParams)> {
    (
        3u8..=4,
        prop::array::uniform4(2u32..5),
        prop::array::uniform4(0u32..2),
        prop::array::uniform4(0u32..2),
        0usize..3,
        any::<bool>(),
    )
        .prop_map(|(tiers, theta, floor, target, alpha, reclaim)| {
            let pools: [&[ReplicaId]; 4] = if tiers == 3 {
                [
                    &[ReplicaId(0), ReplicaId(1)],
                    &[ReplicaId(2), ReplicaId(3)],
                    &[ReplicaId(4)],
                    &[],
                ]
            } else {
                [
                    &[ReplicaId(0), ReplicaId(1)],
                    &[ReplicaId(2)],
                    &[ReplicaId(3)],
                    &[ReplicaId(4)],
                ]
            };
            let table = TierTable::new(K, tiers, &pools[..usize::from(tiers)]).expect("layout");
            let params = PlbParams {
                tiers,
                theta,
                alpha: [[0.5, 0.8, 1.0][alpha]; MAX_TIERS],
                floor,
                target,
                reclaim,
            };
            (table, params)
        })
}

struct World {
    plb: TieredPlb,
    table: TierTable,
    loads: Vec<TierLoad>,
    sessions: Vec<(ReplicaId, Tier)>,
    rules: Vec<TierRule>,
    reasons: Vec<TierReason>,
}

impl World {
    fn new(table: TierTable, params: PlbParams) -> World {
        World {
            plb: TieredPlb::new(params, &table).expect("generated parameters are valid"),
            loads: vec![TierLoad::default(); table.len()],
            sessions: Vec::new(),
            table,
            rules: Vec::new(),
            reasons: Vec::new(),
        }
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Open(tier) => self.open(Tier(tier))?,
            Op::Close(pick) => {
                if !self.sessions.is_empty() {
                    let (replica, tier) = self.sessions.swap_remove(pick % self.sessions.len());
                    prop_assert!(self.loads[replica.index()].released(tier));
                }
            }
            Op::Down(index) => {
                let replica = r(index);
                let was_up = self.table.role(replica).is_some_and(TierRole::is_up);
                self.sessions.retain(|&(at, _)| at != replica);
                self.loads[replica.index()] = TierLoad::default();
                let changes = self
                    .plb
                    .handle_down(&mut self.table, replica, &self.loads)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                self.reasons.extend(changes.iter().map(|c| c.reason));
                if was_up {
                    self.check_repaired()?;
                } else {
                    prop_assert!(changes.is_empty(), "a repeated Down changed roles");
                }
            }
            Op::Rejoin(index) => {
                let was_down = self.table.role(r(index)) == Some(TierRole::Down);
                let changes = self
                    .plb
                    .handle_rejoin(&mut self.table, r(index), &self.loads)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                self.reasons.extend(changes.iter().map(|c| c.reason));
                if was_down {
                    prop_assert_eq!(changes.as_slice()[0].to, TierRole::Mixed);
                    self.check_repaired()?;
                } else {
                    prop_assert!(changes.is_empty(), "a repeated Rejoin changed roles");
                }
            }
        }
        self.check_partition()
    }

    fn open(&mut self, tier: Tier) -> Result<(), TestCaseError> {
        let Ok(admission) = self.plb.admit(&self.table, &self.loads, tier) else {
            prop_assert_eq!(self.table.up_count(), 0);
            return Ok(());
        };
        let params = *self.plb.params();
        let mut after_returns = self.table.clone();
        for change in admission.role_changes.iter() {
            if change.to.is_borrowed() {
                self.check_borrow(&after_returns, change, tier)?;
            } else {
                self.check_return(&after_returns, change)?;
            }
            prop_assert!(after_returns.apply(change, &params).is_ok(), "{change}");
        }
        let role = after_returns.role(admission.replica).expect("in table");
        prop_assert!(role.is_up());
        if admission.rule == TierRule::LastResort {
            prop_assert!(
                !after_returns
                    .roles()
                    .iter()
                    .any(|r| r.serves() == Some(tier))
            );
        } else {
            prop_assert_eq!(role.serves(), Some(tier), "{} placed on {}", tier, role);
        }
        self.table = after_returns;
        self.rules.push(admission.rule);
        self.reasons
            .extend(admission.role_changes.iter().map(|c| c.reason));
        prop_assert!(self.loads[admission.replica.index()].admitted(tier));
        self.sessions.push((admission.replica, tier));
        Ok(())
    }

    /// A borrow only when the tier's routing pool is saturated; across pools only without
    /// Mixed, within the donor pool's guard, and never of a replica hosting sessions of a tier
    /// that outranks the borrower.
    fn check_borrow(
        &self,
        seen: &TierTable,
        change: &TierChange,
        tier: Tier,
    ) -> Result<(), TestCaseError> {
        let params = self.plb.params();
        let theta = u64::from(params.theta(tier));
        for (&role, &load) in seen.roles().iter().zip(&self.loads) {
            let seen_load = if role.owner() == Some(tier) {
                Some(u64::from(load.of(tier)))
            } else if role.borrower() == Some(tier) {
                Some(load.total())
            } else {
                None
            };
            prop_assert!(
                seen_load.is_none_or(|l| l >= theta),
                "borrowed with headroom"
            );
        }
        if let TierRole::Borrowed { by: holder, from } = change.from {
            prop_assert!(params.reclaim, "reclaimed with reclaim off");
            prop_assert_eq!(from, TierPool::Mixed, "only Mixed replicas are reclaimed");
            prop_assert!(tier.outranks(holder), "{} reclaimed from {}", tier, holder);
            prop_assert_eq!(
                seen.count(TierRole::Mixed),
                0,
                "reclaimed while Mixed had one"
            );
        }
        if let TierRole::Owned(donor) = change.from {
            prop_assert_eq!(
                seen.count(TierRole::Mixed),
                0,
                "crossed while Mixed had one"
            );
            let guard = if tier.outranks(donor) {
                params.floor(donor)
            } else {
                params.target(donor)
            };
            prop_assert!(
                seen.owned(donor) > guard as usize,
                "guard of {} broken",
                donor
            );
            if donor.outranks(tier) {
                prop_assert_eq!(self.loads[change.replica.index()].above(tier), 0);
            }
        }
        Ok(())
    }

    fn check_return(&self, seen: &TierTable, change: &TierChange) -> Result<(), TestCaseError> {
        let borrower = change.from.borrower().expect("returns start borrowed");
        prop_assert_eq!(self.loads[change.replica.index()].of(borrower), 0);
        let tau = u64::from(self.plb.params().return_watermark(borrower));
        let eased = seen.iter().zip(&self.loads).any(|((at, role), load)| {
            let l = if role.owner() == Some(borrower) {
                Some(u64::from(load.of(borrower)))
            } else if role.borrower() == Some(borrower) {
                Some(load.total())
            } else {
                None
            };
            at != change.replica && l.is_some_and(|l| l < tau)
        });
        prop_assert!(eased, "returned under pressure");
        Ok(())
    }

    fn check_repaired(&self) -> Result<(), TestCaseError> {
        prop_assert!(!self.table.roles().iter().any(|r| r.is_borrowed()));
        prop_assert_eq!(self.table.vector(), self.plb.target(self.table.up_count()));
        Ok(())
    }

    fn check_partition(&self) -> Result<(), TestCaseError> {
        let mut recount = vec![TierLoad::default(); K];
        for &(replica, tier) in &self.sessions {
            recount[replica.index()].admitted(tier);
        }
        prop_assert_eq!(&recount, &self.loads);
        for (&role, load) in self.table.roles().iter().zip(&self.loads) {
            prop_assert!(role.is_valid());
            prop_assert!(role.serves().is_none_or(|t| t.0 < self.table.tiers()));
            if role == TierRole::Down {
                prop_assert_eq!(load.total(), 0);
            }
        }
        Ok(())
    }
}

proptest! {
    #[test]
    fn random_event_sequences_keep_every_invariant(
        (table, params) in world_setup(),
        ops in prop::collection::vec(op(4), 1..400),
    ) {
        let tiers = params.tiers;
        let mut world = World::new(table, params);
        for op in &ops {
            let op = match *op { Op::Open(t) => Op::Open(t % tiers), ref other => other.clone() };
            world.step(&op)?;
        }
    }

    #[test]
    fn every_down_then_rejoin_returns_to_the_reference_split(
        (table, params) in world_setup(),
        order in Just((0..K as u8).collect::<Vec<_>>()).prop_shuffle(),
        cut in 1..K,
    ) {
        let tiers = params.tiers;
        let mut world = World::new(table, params);
        for i in 0..40u8 {
            world.step(&Op::Open(i % tiers))?;
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

/// The random walks reach every rule and reason with three tiers, so the invariants are
/// checked on every branch.
#[test]
fn random_walks_reach_every_rule_and_reason() {
    let mut rng = pgtier_policy::SplitMix64::new(2026);
    let (mut rules, mut reasons) = (Vec::new(), Vec::new());
    for seed in 0..40u64 {
        let table =
            TierTable::new(K, 3, &[&ids(&[0, 1]), &ids(&[2, 3]), &ids(&[4])]).expect("layout");
        let params = PlbParams {
            floor: [0, (seed % 2) as u32, (seed / 2 % 2) as u32, 0],
            target: [(seed % 3) as u32, (seed / 3 % 2) as u32, 1, 0],
            ..PlbParams::uniform(3, 2 + (seed % 3) as u32, 0.5)
        };
        let mut world = World::new(table, params);
        for _ in 0..600 {
            let op = match rng.below(20) {
                0 => Op::Down(rng.below(K as u64) as u8),
                1 => Op::Rejoin(rng.below(K as u64) as u8),
                2..=11 => Op::Open(rng.below(3) as u8),
                _ => Op::Close(rng.next_u64() as usize),
            };
            world.step(&op).expect("invariants hold");
        }
        rules.extend(world.rules);
        reasons.extend(world.reasons);
    }
    for rule in [
        TierRule::Headroom,
        TierRule::BorrowMixed,
        TierRule::Reclaim,
        TierRule::BorrowLower,
        TierRule::BorrowHigher,
        TierRule::Fallback,
        TierRule::LastResort,
    ] {
        assert!(rules.contains(&rule), "never reached {rule:?}");
    }
    for reason in [
        TierReason::BorrowMixed,
        TierReason::ReclaimMixed,
        TierReason::BorrowLower,
        TierReason::BorrowHigher,
        TierReason::ReturnToUnmetTarget,
        TierReason::ReturnToMixed,
        TierReason::Down,
        TierReason::Rejoin,
        TierReason::CanonicalMixedSessions,
        TierReason::CanonicalSingleTier,
        TierReason::CanonicalIdleReturn,
        TierReason::RepairToTarget,
    ] {
        assert!(reasons.contains(&reason), "never reached {reason:?}");
    }
}
