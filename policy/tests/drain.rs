//! The recovery-tail drain (beyond 001): which sessions leave an overloaded survivor after a
//! rejoin, and which class a rejoined replica is given first. One test per rule.

mod common;

use common::*;
use pgtier_policy::{Loads, Plb, PlbParams, Pool, Role};

/// The paper's layout with θ = 3 for both classes (τ_P = ⌊1.8⌋ = 1, τ_F = ⌊2.4⌋ = 2).
fn plb(drain: bool) -> Plb {
    let params = PlbParams::PAPER.with_theta(P, 3).with_theta(F, 3);
    plb_with(params, &paper_table()).with_recovery_drain(drain)
}

#[test]
fn the_drain_is_off_unless_asked_for() {
    let table = paper_table();
    let l = loads(&[(6, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(!plb(false).recovery_drain());
    assert!(!plb(false).drain_move(&table, Loads::sessions(&l), r(0), P));
    assert!(plb(true).drain_move(&table, Loads::sessions(&l), r(0), P));
}

#[test]
fn a_session_leaves_a_survivor_past_headroom_for_a_replica_with_room() {
    // Replica 0 carries 5 premium sessions (θ_P = 3: failure re-pins put them there); the
    // rejoined premium replica 1 is empty.
    let table = paper_table();
    let l = loads(&[(5, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let plb = plb(true);
    assert!(plb.drain_move(&table, Loads::sessions(&l), r(0), P));
    assert!(
        !plb.drain_move(&table, Loads::sessions(&l), r(1), P),
        "a session on the empty replica stays"
    );
}

#[test]
fn a_replica_at_headroom_is_not_overloaded() {
    let table = paper_table();
    let l = loads(&[(3, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(!plb(true).drain_move(&table, Loads::sessions(&l), r(0), P));
}

#[test]
fn under_overload_a_session_moves_to_a_less_loaded_replica_without_headroom() {
    // θ_P = 3: both premium replicas are past it (and Mixed carries 4); 8 against 4 still
    // moves (the rejoined replica fills to the others' level, not only to θ), 5 against 4
    // does not.
    let table = paper_table();
    let plb = plb(true);
    let l = loads(&[(8, 0), (4, 0), (0, 0), (0, 0), (0, 4)]);
    assert!(plb.drain_move(&table, Loads::sessions(&l), r(0), P));
    let l = loads(&[(5, 0), (4, 0), (0, 0), (0, 0), (0, 4)]);
    assert!(!plb.drain_move(&table, Loads::sessions(&l), r(0), P));
}

#[test]
fn a_mixed_replica_is_a_destination_with_its_total_load() {
    // Replica 4 rejoined as Mixed while both premium replicas are past θ_P: admission would
    // borrow it, so sessions may leave for it; once freemium fills it, they stay.
    let table = paper_table();
    let plb = plb(true);
    let l = loads(&[(5, 0), (5, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(plb.drain_move(&table, Loads::sessions(&l), r(0), P));
    let l = loads(&[(5, 0), (5, 0), (0, 0), (0, 0), (0, 4)]);
    assert!(!plb.drain_move(&table, Loads::sessions(&l), r(0), P));
}

#[test]
fn a_residual_session_stays_when_its_class_has_no_headroom() {
    let table = paper_table();
    let l = loads(&[(3, 0), (3, 0), (0, 0), (0, 0), (1, 0)]);
    assert!(!plb(true).drain_move(&table, Loads::sessions(&l), r(4), P));
}

#[test]
fn a_move_must_leave_the_destination_less_loaded_than_the_source() {
    // θ_P = 3: 4 against 2 moves (the destination has 3 after it), 4 against 3 does not (it
    // would only swap the loads), and the class load of a borrowed replica is its total.
    let table = paper_table();
    let plb = plb(true);
    let l = loads(&[(4, 0), (2, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(plb.drain_move(&table, Loads::sessions(&l), r(0), P));
    let borrowed = with_roles(
        &table,
        &[(4, Role::BorrowedToPremium { from: Pool::Mixed })],
    );
    let l = loads(&[(4, 0), (3, 0), (0, 0), (0, 0), (1, 2)]);
    assert!(
        !plb.drain_move(&borrowed, Loads::sessions(&l), r(0), P),
        "replica 4 counts 3 sessions"
    );
}

#[test]
fn a_residual_session_leaves_a_replica_that_no_longer_serves_its_class() {
    // Replica 4 went back to Mixed with a premium session on it; premium has room on 0.
    let table = paper_table();
    let l = loads(&[(1, 0), (3, 0), (0, 0), (0, 0), (1, 0)]);
    assert!(plb(true).drain_move(&table, Loads::sessions(&l), r(4), P));
}

#[test]
fn a_down_replica_is_left_to_failure_re_pinning() {
    let mut table = paper_table();
    let plb = plb(true);
    let l = loads(&[(0, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    plb.handle_down(&mut table, r(0), &l).expect("down");
    assert!(!plb.drain_move(&table, Loads::sessions(&l), r(0), P));
}

#[test]
fn the_decision_reads_the_signal_counts() {
    // On the in-flight signal, 5 open sessions of which 1 runs is no overload.
    let table = paper_table();
    let sessions = loads(&[(5, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let in_flight = loads(&[(1, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let view = Loads {
        signal: &in_flight,
        sessions: &sessions,
    };
    assert!(!plb(true).drain_move(&table, view, r(0), P));
}

#[test]
fn a_rejoined_replica_goes_to_the_class_under_more_pressure() {
    // Four replicas fail; the last survivor (Mixed, K+ = 1) ends up with 1 premium and 6
    // freemium sessions. When replica 0 rejoins, K+ = 2 needs one Premium and one Freemium
    // replica: 001 fills Premium first, so the empty rejoined replica goes to premium; with
    // the drain freemium, which lost more, gets it.
    for (drain, rejoined, survivor) in [
        (false, Role::Premium, Role::Freemium),
        (true, Role::Freemium, Role::Premium),
    ] {
        let plb = plb(drain);
        let mut table = paper_table();
        let mut l = loads(&[(0, 0); 5]);
        for index in 0..4 {
            plb.handle_down(&mut table, r(index), &l).expect("down");
        }
        assert_eq!(table.role(r(4)), Some(Role::Mixed));
        l[4] = loads(&[(1, 6)])[0];
        plb.handle_rejoin(&mut table, r(0), &l).expect("rejoin");
        assert_eq!(table.role(r(0)), Some(rejoined), "drain {drain}");
        assert_eq!(table.role(r(4)), Some(survivor), "drain {drain}");
    }
}
