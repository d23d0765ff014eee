//! The in-flight load signal (beyond 000): decisions on transactions in flight, pinning guards
//! on open sessions. One test per rule that reads which count.

mod common;

use common::*;
use pgtier_policy::{
    AdmissionRule, Draw, LoadSignal, Loads, Plb, PlbParams, Pool, ReplicaLoad, Role, RoleTable,
    Strategy,
};

const BORROWED_P_FROM_M: Role = Role::BorrowedToPremium { from: Pool::Mixed };

/// The decision signal and the pinned sessions.
fn both<'a>(signal: &'a [ReplicaLoad], sessions: &'a [ReplicaLoad]) -> Loads<'a> {
    Loads { signal, sessions }
}

fn in_flight_plb() -> Plb {
    paper_plb().with_load_signal(LoadSignal::InFlight)
}

#[test]
fn the_signal_is_spelled_as_in_the_configuration() {
    for signal in LoadSignal::ALL {
        assert_eq!(LoadSignal::parse(signal.as_str()), Some(signal));
    }
    assert_eq!(LoadSignal::parse("queries"), None);
    assert_eq!(paper_plb().load_signal(), LoadSignal::Sessions);
    assert_eq!(in_flight_plb().load_signal(), LoadSignal::InFlight);
}

#[test]
fn on_sessions_both_entry_points_decide_alike() {
    let table = paper_table();
    let plb = paper_plb();
    for l in [
        loads(&[(10, 0), (10, 0), (0, 0), (0, 0), (0, 0)]),
        loads(&[(3, 1), (9, 0), (0, 10), (0, 10), (1, 1)]),
    ] {
        for class in [P, F] {
            assert_eq!(
                plb.admit(&table, &l, class),
                plb.admit_loads(&table, Loads::sessions(&l), class)
            );
        }
    }
}

#[test]
fn idle_sessions_do_not_use_up_headroom() {
    // Both premium replicas hold θ_P = 10 open sessions, but only 2 and 1 are inside a
    // transaction: on sessions premium must borrow, on in-flight counts replica 1 has room.
    let table = paper_table();
    let sessions = loads(&[(10, 0), (10, 0), (0, 0), (0, 0), (0, 0)]);
    let in_flight = loads(&[(2, 0), (1, 0), (0, 0), (0, 0), (0, 0)]);
    let on_sessions = paper_plb().admit(&table, &sessions, P).unwrap();
    assert_eq!(on_sessions.rule, AdmissionRule::BorrowMixed);
    let on_flight = in_flight_plb()
        .admit_loads(&table, both(&in_flight, &sessions), P)
        .unwrap();
    assert_eq!(on_flight.rule, AdmissionRule::PoolHeadroom);
    assert_eq!(on_flight.replica, r(1));
    assert!(on_flight.role_changes.is_empty());
}

#[test]
fn busy_transactions_borrow_even_when_few_sessions_are_open() {
    // θ_P = 2 in flight: both premium replicas run 2 transactions, so premium borrows Mixed
    // although a session count of 2 would be far from a session θ.
    let params = PlbParams::PAPER.with_theta(P, 2).with_alpha(P, 0.5);
    let plb = plb_with(params, &paper_table()).with_load_signal(LoadSignal::InFlight);
    let sessions = loads(&[(2, 0), (2, 0), (0, 0), (0, 0), (0, 0)]);
    let admission = plb
        .admit_loads(&paper_table(), both(&sessions, &sessions), P)
        .unwrap();
    assert_eq!(admission.rule, AdmissionRule::BorrowMixed);
    assert_eq!(admission.replica, r(4));
}

#[test]
fn a_return_still_needs_the_replica_free_of_pinned_borrower_sessions() {
    // Replica 4, borrowed for premium, runs no premium transaction, and pressure has eased;
    // but one idle premium session is still pinned there, so it is not returned.
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let in_flight = loads(&[(1, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let pinned = loads(&[(1, 0), (0, 0), (0, 0), (0, 0), (1, 0)]);
    let plb = in_flight_plb();
    let kept = plb
        .returns_loads(&table, both(&in_flight, &pinned))
        .unwrap();
    assert!(kept.is_empty());
    let none_pinned = loads(&[(1, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let returned = plb
        .returns_loads(&table, both(&in_flight, &none_pinned))
        .unwrap();
    assert_eq!(returned.len(), 1);
    assert_eq!(returned.as_slice()[0].replica, r(4));
}

#[test]
fn return_pressure_is_judged_on_the_signal() {
    // Premium replicas hold 9 open sessions each (no eased pressure on sessions, τ_P = 6), but
    // few are in flight: on the in-flight signal the idle borrowed replica returns.
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let pinned = loads(&[(9, 0), (9, 0), (0, 0), (0, 0), (0, 0)]);
    let in_flight = loads(&[(3, 0), (2, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(paper_plb().returns(&table, &pinned).unwrap().is_empty());
    let returned = in_flight_plb()
        .returns_loads(&table, both(&in_flight, &pinned))
        .unwrap();
    assert_eq!(returned.len(), 1);
}

#[test]
fn freemium_never_borrows_a_replica_with_idle_premium_sessions() {
    // Three premium replicas (K_P = 2, so one may lend). Replica 1 runs no premium transaction
    // but hosts an idle premium session; replica 2 hosts none. Freemium is saturated and Mixed
    // is gone, so freemium borrows from Premium: only replica 2 qualifies.
    let table = layout(5, &[0, 1, 2], &[3, 4]);
    let params = PlbParams::PAPER.with_target(P, 2).with_target(F, 2);
    let plb = plb_with(params, &table).with_load_signal(LoadSignal::InFlight);
    let pinned = loads(&[(4, 0), (1, 0), (0, 0), (0, 10), (0, 10)]);
    let in_flight = loads(&[(1, 0), (0, 0), (0, 3), (0, 10), (0, 10)]);
    let admission = plb
        .admit_loads(&table, both(&in_flight, &pinned), F)
        .unwrap();
    assert_eq!(admission.rule, AdmissionRule::BorrowPremium);
    assert_eq!(admission.replica, r(2));
}

#[test]
fn baselines_balance_open_sessions_whatever_the_signal() {
    let table = RoleTable::all_mixed(3).unwrap();
    let sessions = loads(&[(5, 0), (0, 0), (5, 0)]);
    let in_flight = loads(&[(0, 0), (9, 0), (0, 0)]);
    let admission = Strategy::LeastSessions
        .route_loads(&table, both(&in_flight, &sessions), P, Draw::default())
        .unwrap();
    assert_eq!(admission.replica, r(1));
}

#[test]
fn mismatched_count_slices_are_refused() {
    let table = paper_table();
    let sessions = loads(&[(0, 0); 5]);
    let short = loads(&[(0, 0); 4]);
    let refused = in_flight_plb().admit_loads(&table, both(&sessions, &short), P);
    assert!(refused.is_err());
}
