//! 001 §III failure handling: target role vector, canonicalization, repair loop, Down/Rejoin
//! events, and the baselines' behaviour under failures.

mod common;

use common::*;
use pgtier_policy::{
    ChangeReason, Dedicated, P2c, Plb, PlbParams, Pool, Role, RoleTable, RoleVector, Strategy,
};

fn vector(premium: usize, mixed: usize, freemium: usize) -> RoleVector {
    RoleVector {
        premium,
        mixed,
        freemium,
    }
}

fn plb_for(k: usize, premium: &[u8], freemium: &[u8], floor: u32) -> (Plb, RoleTable) {
    let table = layout(k, premium, freemium);
    let params = PlbParams::PAPER
        .with_floor(F, floor)
        .with_target(P, 1)
        .with_target(F, 1);
    (plb_with(params, &table), table)
}

#[test]
fn target_vector_explicit_small_cases() {
    let plb = paper_plb();
    assert_eq!(plb.target(0), vector(0, 0, 0));
    assert_eq!(plb.target(1), vector(0, 1, 0));
    assert_eq!(plb.target(2), vector(1, 0, 1));
    assert_eq!(plb.target(3), vector(2, 0, 1));
}

#[test]
fn target_vector_at_full_budget_is_the_reference_split() {
    let plb = paper_plb();
    assert_eq!(plb.reference(), vector(2, 1, 2));
    assert_eq!(plb.target(5), vector(2, 1, 2));
}

#[test]
fn target_vector_scales_to_nearest_integer() {
    // Reference (2, 1, 2) of 5: 4 survivors → round(1.6) = 2 each, Mixed gets the residual 0.
    assert_eq!(paper_plb().target(4), vector(2, 0, 2));
    // Reference (1, 3, 1) of 5: 4 survivors → round(0.8) = 1 each, Mixed 2.
    let (plb, _) = plb_for(5, &[0], &[4], 1);
    assert_eq!(plb.target(4), vector(1, 2, 1));
    // Reference (4, 2, 2) of 8: 6 survivors → 3, 1.5→2... premium round(3) = 3, freemium
    // round(1.5) = 2 (halves up), Mixed 1.
    let (plb, _) = plb_for(8, &[0, 1, 2, 3], &[4, 5], 1);
    assert_eq!(plb.target(6), vector(3, 1, 2));
}

#[test]
fn target_vector_budget_shrinks_freemium_first() {
    // Reference (3, 0, 3) of 6: 5 survivors → round(2.5) = 3 each = 6 > 5; Freemium gives one.
    let (plb, _) = plb_for(6, &[0, 1, 2], &[3, 4, 5], 1);
    assert_eq!(plb.target(5), vector(3, 0, 2));
}

#[test]
fn target_vector_respects_floors() {
    // Reference (6, 0, 1) of 7 with κ_F = 1: 4 survivors → premium round(3.43) = 3, freemium
    // round(0.57) = 1.
    let (plb, _) = plb_for(7, &[0, 1, 2, 3, 4, 5], &[6], 1);
    assert_eq!(plb.target(4), vector(3, 0, 1));
    // Reference (1, 6, 1) of 8 at 4 survivors: round(0.5) = 1 each (halves up).
    let (plb, _) = plb_for(8, &[0], &[7], 1);
    assert_eq!(plb.target(4), vector(1, 2, 1));
    // Reference (1, 2, 3) of 6 with κ_F = 3: 4 survivors → freemium floor 3, premium 1.
    let (plb, _) = plb_for(6, &[0], &[3, 4, 5], 3);
    assert_eq!(plb.target(4), vector(1, 0, 3));
}

#[test]
fn target_vector_for_every_survivor_count_sums_and_respects_floors() {
    let layouts: [(usize, &[u8], &[u8], u32); 7] = [
        (5, &[0, 1], &[2, 3], 1),
        (5, &[0, 1, 2], &[3, 4], 1),
        (5, &[0], &[4], 1),
        (8, &[0, 1, 2], &[5, 6, 7], 2),
        (10, &[0, 1, 2, 3, 4, 5, 6], &[9], 1),
        (12, &[0, 1, 2, 3], &[8, 9, 10, 11], 4),
        (6, &[0, 1, 2], &[3, 4, 5], 0),
    ];
    for (k, premium, freemium, floor) in layouts {
        let (plb, table) = plb_for(k, premium, freemium, floor);
        for survivors in 0..=k {
            let t = plb.target(survivors);
            assert_eq!(t.total(), survivors, "K={k} {premium:?} K+={survivors}");
            if survivors >= 4 {
                assert!(t.premium >= 1, "premium floor K={k} K+={survivors}: {t}");
                let freemium_floor = (floor as usize).max(1).min(survivors - 1);
                assert!(
                    t.freemium >= freemium_floor,
                    "freemium floor K+={survivors}: {t}"
                );
            } else if survivors >= 2 {
                // Explicit cases: one replica per class at least, whatever κ_F.
                assert!(t.premium >= 1 && t.freemium >= 1, "K+={survivors}: {t}");
            }
        }
        if table.vector().freemium >= (floor as usize).max(1) && k >= 4 {
            assert_eq!(plb.target(k), table.vector(), "K={k} reference");
        }
    }
}

#[test]
fn canonicalize_mixed_sessions_to_mixed() {
    let plb = paper_plb();
    let mut table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToPremium { from: Pool::Mixed })],
    );
    // Replica 0 fails; replica 4 hosts both classes.
    let l = loads(&[(0, 0), (3, 0), (0, 2), (0, 2), (2, 3)]);
    let changes = plb.handle_down(&mut table, r(0), &l).unwrap();
    let canonical = changes.iter().find(|c| c.replica == r(4)).unwrap();
    assert_eq!(canonical.to, Role::Mixed);
    assert_eq!(canonical.reason, ChangeReason::CanonicalMixedSessions);
}

#[test]
fn canonicalize_premium_only_to_premium() {
    let plb = paper_plb();
    let mut table = with_roles(
        &paper_table(),
        &[(
            3,
            Role::BorrowedToPremium {
                from: Pool::Freemium,
            },
        )],
    );
    let l = loads(&[(1, 0), (1, 0), (0, 2), (4, 0), (0, 0)]);
    let changes = plb.handle_down(&mut table, r(4), &l).unwrap();
    let canonical = changes.iter().find(|c| c.replica == r(3)).unwrap();
    assert_eq!(canonical.to, Role::Premium);
    assert_eq!(canonical.reason, ChangeReason::CanonicalPremiumOnly);
}

#[test]
fn canonicalize_freemium_only_to_freemium() {
    let plb = paper_plb();
    let mut table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToPremium { from: Pool::Mixed })],
    );
    // Borrowed for premium, but only residual freemium sessions remain.
    let l = loads(&[(1, 0), (1, 0), (0, 2), (0, 2), (0, 5)]);
    let changes = plb.handle_down(&mut table, r(0), &l).unwrap();
    let canonical = changes.iter().find(|c| c.replica == r(4)).unwrap();
    assert_eq!(canonical.to, Role::Freemium);
    assert_eq!(canonical.reason, ChangeReason::CanonicalFreemiumOnly);
}

#[test]
fn canonicalize_idle_borrowed_replica_is_returned() {
    let plb = paper_plb();
    let mut table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToFreemium { from: Pool::Mixed })],
    );
    // Replica 0 (Premium) fails: |R_P| = 1 < K_P, so the idle borrowed-to-Freemium replica
    // returns to Premium.
    let l = loads(&[(0, 0), (1, 0), (0, 2), (0, 2), (0, 0)]);
    let changes = plb.handle_down(&mut table, r(0), &l).unwrap();
    let canonical = changes.iter().find(|c| c.replica == r(4)).unwrap();
    assert_eq!(canonical.to, Role::Premium);
    assert_eq!(canonical.reason, ChangeReason::CanonicalIdleReturn);
    assert!(table.iter().all(|(_, role)| !role.is_borrowed()));
}

#[test]
fn down_event_comes_first_and_names_its_cause() {
    let plb = paper_plb();
    let mut table = paper_table();
    let changes = plb
        .handle_down(&mut table, r(2), &loads(&[(0, 0); 5]))
        .unwrap();
    let first = changes.as_slice()[0];
    assert_eq!(
        (first.replica, first.from, first.to),
        (r(2), Role::Freemium, Role::Down)
    );
    assert_eq!(first.reason, ChangeReason::Down);
    assert_eq!(table.role(r(2)), Some(Role::Down));
}

#[test]
fn repair_takes_mixed_donors_first() {
    // Premium replica 0 fails: target(4) = (2, 0, 2); Premium is short one, Mixed replica 4
    // gives it (not a Freemium replica).
    let plb = paper_plb();
    let mut table = paper_table();
    let changes = plb
        .handle_down(&mut table, r(0), &loads(&[(0, 0); 5]))
        .unwrap();
    let repair: Vec<_> = changes
        .iter()
        .filter(|c| c.reason == ChangeReason::RepairToTarget)
        .collect();
    assert_eq!(repair.len(), 1);
    assert_eq!(
        (repair[0].replica, repair[0].from, repair[0].to),
        (r(4), Role::Mixed, Role::Premium)
    );
    assert_eq!(table.vector(), vector(2, 0, 2));
}

#[test]
fn repair_crosses_the_premium_freemium_boundary_when_mixed_is_exhausted() {
    // Cascade: 0 then 1 fail. target(3) = (2, 0, 1): after the first repair Mixed is empty, so
    // the least-loaded Freemium replica moves to Premium; Freemium keeps its floor of 1.
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(0, 0), (2, 0), (0, 6), (0, 3), (1, 0)]);
    plb.handle_down(&mut table, r(0), &l).unwrap();
    let changes = plb.handle_down(&mut table, r(1), &l).unwrap();
    let repair: Vec<_> = changes
        .iter()
        .filter(|c| c.reason == ChangeReason::RepairToTarget)
        .collect();
    assert_eq!(repair.len(), 1);
    assert_eq!((repair[0].replica, repair[0].to), (r(3), Role::Premium));
    assert_eq!(table.vector(), vector(2, 0, 1));
}

#[test]
fn repair_never_crosses_below_the_freemium_floor() {
    // κ_F = 2 with a (1, 0, 3) reference: losing the Premium replica leaves K⁺ = 3 → (2, 0, 1)
    // explicit; with K⁺ = 5 of 6 the scaled target keeps Freemium at its floor.
    let table = layout(6, &[0, 1], &[2, 3, 4, 5]);
    let params = PlbParams::PAPER
        .with_floor(F, 2)
        .with_target(P, 1)
        .with_target(F, 2);
    let plb = plb_with(params, &table);
    let mut table = table;
    let l = loads(&[(0, 0); 6]);
    plb.handle_down(&mut table, r(0), &l).unwrap();
    assert!(table.vector().freemium >= 2, "{}", table.vector());
    assert_eq!(table.vector(), plb.target(5));
}

#[test]
fn repair_picks_the_least_loaded_donor() {
    let table = layout(6, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let mut table = table;
    // Reference (2, 2, 2) of 6; replica 0 fails: target(5) = round(1.67)=2, 2 → (2, 1, 2).
    // Premium is short; Mixed donors 4 (load 7) and 5 (load 2): 5 moves.
    let l = loads(&[(0, 0), (1, 0), (0, 1), (0, 1), (3, 4), (1, 1)]);
    let changes = plb.handle_down(&mut table, r(0), &l).unwrap();
    let repair = changes
        .iter()
        .find(|c| c.reason == ChangeReason::RepairToTarget)
        .unwrap();
    assert_eq!((repair.replica, repair.to), (r(5), Role::Premium));
}

#[test]
fn rejoin_enters_as_mixed_then_repairs() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(0, 0); 5]);
    plb.handle_down(&mut table, r(0), &l).unwrap();
    let changes = plb.handle_rejoin(&mut table, r(0), &l).unwrap();
    let first = changes.as_slice()[0];
    assert_eq!(
        (first.replica, first.from, first.to),
        (r(0), Role::Down, Role::Mixed)
    );
    assert_eq!(first.reason, ChangeReason::Rejoin);
    // Back to K⁺ = 5: target (2, 1, 2) is already met with 0 as the Mixed replica.
    assert_eq!(changes.len(), 1);
    assert_eq!(table.vector(), vector(2, 1, 2));
    assert_eq!(table.role(r(0)), Some(Role::Mixed));
}

#[test]
fn duplicate_down_and_rejoin_events_are_no_ops() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(0, 0); 5]);
    assert!(plb.handle_rejoin(&mut table, r(1), &l).unwrap().is_empty());
    plb.handle_down(&mut table, r(1), &l).unwrap();
    let snapshot = table.clone();
    assert!(plb.handle_down(&mut table, r(1), &l).unwrap().is_empty());
    assert_eq!(table, snapshot);
}

#[test]
fn failure_events_reject_unknown_replicas() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(0, 0); 5]);
    assert!(plb.handle_down(&mut table, r(7), &l).is_err());
    assert!(plb.handle_down(&mut table, r(0), &l[..3]).is_err());
    assert_eq!(table, paper_table());
}

#[test]
fn cascade_then_recovery_returns_to_the_reference_split() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(0, 0), (3, 1), (0, 4), (1, 2), (0, 0)]);
    plb.handle_down(&mut table, r(0), &l).unwrap();
    assert_eq!(table.vector(), plb.target(4));
    plb.handle_down(&mut table, r(1), &l).unwrap();
    assert_eq!(table.vector(), plb.target(3));
    plb.handle_rejoin(&mut table, r(0), &l).unwrap();
    assert_eq!(table.vector(), plb.target(4));
    plb.handle_rejoin(&mut table, r(1), &l).unwrap();
    assert_eq!(table.vector(), plb.reference());
    assert_eq!(table.up_count(), 5);
}

#[test]
fn every_survivor_count_is_repaired_to_its_target() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(1, 0), (0, 1), (2, 2), (0, 0), (1, 1)]);
    for down in [3u8, 0, 4, 1, 2] {
        plb.handle_down(&mut table, r(down), &l).unwrap();
        assert_eq!(
            table.vector(),
            plb.target(table.up_count()),
            "after {down} down"
        );
    }
    for up in [2u8, 1, 4, 0, 3] {
        plb.handle_rejoin(&mut table, r(up), &l).unwrap();
        assert_eq!(
            table.vector(),
            plb.target(table.up_count()),
            "after {up} rejoin"
        );
    }
    assert_eq!(table.vector(), plb.reference());
}

#[test]
fn repair_does_not_touch_sessions() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(4, 0), (3, 1), (0, 4), (1, 2), (2, 2)]);
    let before = l.clone();
    plb.handle_down(&mut table, r(0), &l).unwrap();
    assert_eq!(l, before);
}

#[test]
fn baselines_drop_the_failed_replica() {
    let l = loads(&[(0, 0); 5]);
    let dedicated = Dedicated::new(5, &ids(&[0, 1, 2]), &ids(&[3, 4])).unwrap();
    for strategy in [
        Strategy::RoundRobin,
        Strategy::LeastSessions,
        Strategy::P2c(P2c::uniform()),
        Strategy::Dedicated(dedicated),
    ] {
        let mut table = RoleTable::all_mixed(5).unwrap();
        let changes = strategy.handle_down(&mut table, r(2), &l).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(table.role(r(2)), Some(Role::Down));
        assert_eq!(table.up_count(), 4);
        for ticket in 0..20 {
            let draw = pgtier_policy::Draw {
                ticket,
                random: ticket.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            };
            let a = strategy.route(&table, &l, P, draw).unwrap();
            assert_ne!(a.replica, r(2), "{}", strategy.name());
        }
        strategy.handle_rejoin(&mut table, r(2), &l).unwrap();
        assert!(table.is_up(r(2)));
    }
}

#[test]
fn plb_strategy_repairs_instead_of_dropping() {
    let strategy = Strategy::Plb(paper_plb());
    let mut table = paper_table();
    let changes = strategy
        .handle_down(&mut table, r(0), &loads(&[(0, 0); 5]))
        .unwrap();
    assert!(
        changes
            .iter()
            .any(|c| c.reason == ChangeReason::RepairToTarget)
    );
}
