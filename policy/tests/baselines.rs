//! Baseline strategies (KRR, rRR+fRR, P2C, least sessions), strategy selection by name, and
//! the seeded RNG.

mod common;

use common::*;
use pgtier_policy::{
    AdmissionRule, AdmitError, Dedicated, Draw, LayoutError, P2c, Role, RoleTable, SplitMix64,
    Strategy, StrategyName, least_sessions, round_robin,
};

fn all_up(k: usize) -> RoleTable {
    RoleTable::all_mixed(k).expect("valid budget")
}

#[test]
fn round_robin_cycles_over_all_replicas() {
    let table = all_up(5);
    let picks: Vec<u8> = (0..10).map(|t| round_robin(&table, t).unwrap().0).collect();
    assert_eq!(picks, [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]);
}

#[test]
fn round_robin_skips_down_replicas() {
    let table = with_roles(&all_up(5), &[(1, Role::Down), (3, Role::Down)]);
    let picks: Vec<u8> = (0..6).map(|t| round_robin(&table, t).unwrap().0).collect();
    assert_eq!(picks, [0, 2, 4, 0, 2, 4]);
    let dead = with_roles(&all_up(1), &[(0, Role::Down)]);
    assert_eq!(round_robin(&dead, 0), None);
}

#[test]
fn dedicated_round_robin_inside_each_subset() {
    let dedicated = Dedicated::new(5, &ids(&[0, 1, 2]), &ids(&[3, 4])).unwrap();
    let table = all_up(5);
    let premium: Vec<u8> = (0..6)
        .map(|t| dedicated.route(&table, P, t).unwrap().0)
        .collect();
    let freemium: Vec<u8> = (0..4)
        .map(|t| dedicated.route(&table, F, t).unwrap().0)
        .collect();
    assert_eq!(premium, [0, 1, 2, 0, 1, 2]);
    assert_eq!(freemium, [3, 4, 3, 4]);
}

#[test]
fn dedicated_has_no_replica_when_its_subset_is_down() {
    let dedicated = Dedicated::new(5, &ids(&[0, 1, 2]), &ids(&[3, 4])).unwrap();
    let table = with_roles(&all_up(5), &[(3, Role::Down), (4, Role::Down)]);
    assert_eq!(dedicated.route(&table, F, 0), None);
    let strategy = Strategy::Dedicated(dedicated);
    assert_eq!(
        strategy.route(&table, &loads(&[(0, 0); 5]), F, Draw::default()),
        Err(AdmitError::NoReplicaForClass(F))
    );
    // Premium is unaffected: isolation.
    assert!(
        strategy
            .route(&table, &loads(&[(0, 0); 5]), P, Draw::default())
            .is_ok()
    );
}

#[test]
fn dedicated_rejects_overlapping_or_empty_subsets() {
    assert_eq!(
        Dedicated::new(5, &ids(&[0, 1]), &ids(&[1, 2])),
        Err(LayoutError::Overlap { replica: r(1) })
    );
    assert_eq!(
        Dedicated::new(5, &ids(&[0, 1]), &[]),
        Err(LayoutError::EmptyPool { class: F })
    );
}

#[test]
fn least_sessions_picks_fewest_total_sessions() {
    let table = all_up(4);
    let l = loads(&[(3, 0), (1, 1), (0, 1), (2, 2)]);
    assert_eq!(least_sessions(&table, &l), Some(r(2)));
    let table = with_roles(&table, &[(2, Role::Down)]);
    assert_eq!(least_sessions(&table, &l), Some(r(1)));
}

#[test]
fn p2c_keeps_the_less_loaded_of_two_distinct_draws() {
    let table = all_up(3);
    let l = loads(&[(5, 0), (1, 0), (9, 0)]);
    // Low half picks index 0, high half picks 0 of the remaining → index 1 (after skipping 0).
    let random = 0u64;
    assert_eq!(P2c::uniform().route(&table, &l, random), Some(r(1)));
    // Low half picks 2, high half picks 1 of remaining {0, 1} → 1.
    let random = (1u64 << 32) | 2;
    assert_eq!(P2c::uniform().route(&table, &l, random), Some(r(1)));
    // Low 0, high 1 → remaining index 1 is replica 2: 0 (5) beats 2 (9).
    let random = 1u64 << 32;
    assert_eq!(P2c::uniform().route(&table, &l, random), Some(r(0)));
}

#[test]
fn p2c_two_draws_are_always_distinct() {
    let table = all_up(2);
    let l = loads(&[(0, 0), (7, 0)]);
    let mut rng = SplitMix64::new(7);
    for _ in 0..100 {
        assert_eq!(P2c::uniform().route(&table, &l, rng.next_u64()), Some(r(0)));
    }
}

#[test]
fn p2c_compares_sessions_per_unit_weight() {
    // Replica 0: 6 sessions, weight 3 (2 per unit); replica 1: 3 sessions, weight 1 (3 per unit).
    let table = all_up(2);
    let l = loads(&[(6, 0), (3, 0)]);
    let p2c = P2c::with_weights(&[3, 1]).unwrap();
    assert_eq!(p2c.route(&table, &l, 0), Some(r(0)));
}

#[test]
fn p2c_zero_weight_and_down_replicas_are_excluded() {
    let table = with_roles(&all_up(3), &[(2, Role::Down)]);
    let p2c = P2c::with_weights(&[0, 1, 1]).unwrap();
    let l = loads(&[(0, 0), (50, 0), (0, 0)]);
    let mut rng = SplitMix64::new(1);
    for _ in 0..50 {
        assert_eq!(p2c.route(&table, &l, rng.next_u64()), Some(r(1)));
    }
}

#[test]
fn strategy_names_round_trip() {
    for name in StrategyName::ALL {
        assert_eq!(name.as_str().parse::<StrategyName>(), Ok(name));
    }
    let err = "weighted".parse::<StrategyName>().unwrap_err();
    assert!(err.to_string().contains("least_sessions"));
}

#[test]
fn strategy_route_reports_its_rule() {
    let table = all_up(3);
    let l = loads(&[(0, 0); 3]);
    let cases = [
        (Strategy::RoundRobin, AdmissionRule::RoundRobin),
        (Strategy::LeastSessions, AdmissionRule::LeastSessions),
        (
            Strategy::P2c(P2c::uniform()),
            AdmissionRule::PowerOfTwoChoices,
        ),
    ];
    for (strategy, rule) in cases {
        let a = strategy.route(&table, &l, P, Draw::default()).unwrap();
        assert_eq!(a.rule, rule);
        assert!(a.role_changes.is_empty());
    }
    let plb = Strategy::Plb(paper_plb());
    assert_eq!(plb.name(), StrategyName::Plb);
    let a = plb
        .route(&paper_table(), &loads(&[(0, 0); 5]), P, Draw::default())
        .unwrap();
    assert_eq!(a.rule, AdmissionRule::PoolHeadroom);
}

#[test]
fn splitmix_is_deterministic_per_seed() {
    let mut a = SplitMix64::new(42);
    let mut b = SplitMix64::new(42);
    let mut c = SplitMix64::new(43);
    let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
    let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
    let zs: Vec<u64> = (0..8).map(|_| c.next_u64()).collect();
    assert_eq!(xs, ys);
    assert_ne!(xs, zs);
    let mut rng = SplitMix64::new(3);
    for _ in 0..1000 {
        assert!(rng.below(7) < 7);
        let x = rng.next_f64();
        assert!((0.0..1.0).contains(&x));
    }
    assert_eq!(rng.below(0), 0);
}
