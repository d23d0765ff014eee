//! One test per rule and branch of 000 Algorithm 1 (admission), named after the rule.

mod common;

use common::*;
use pgtier_policy::{AdmissionRule, AdmitError, ChangeReason, PlbParams, Pool, Role, RoleChange};

fn only_change(admission: &pgtier_policy::Admission) -> RoleChange {
    assert_eq!(admission.role_changes.len(), 1, "{admission:?}");
    admission.role_changes.as_slice()[0]
}

#[test]
fn premium_routes_to_least_loaded_premium_replica_with_headroom() {
    let plb = paper_plb();
    let l = loads(&[(3, 0), (1, 0), (0, 0), (0, 0), (0, 0)]);
    let a = plb.admit(&paper_table(), &l, P).unwrap();
    assert_eq!(a.replica, r(1));
    assert_eq!(a.rule, AdmissionRule::PoolHeadroom);
    assert!(a.role_changes.is_empty());
}

#[test]
fn headroom_uses_class_load_on_owned_replicas() {
    // Replica 0 hosts 50 residual freemium sessions but only 9 premium ones: headroom by
    // load_P < θ_P; replica 1 is saturated.
    let plb = paper_plb();
    let l = loads(&[(9, 50), (10, 0), (0, 0), (0, 0), (0, 0)]);
    let a = plb.admit(&paper_table(), &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(0), AdmissionRule::PoolHeadroom));
}

#[test]
fn least_loaded_choice_uses_class_load_on_owned_replicas() {
    // Replica 0: load_P = 2 (total 30); replica 1: load_P = 3. Owned replicas rank by load_P.
    let plb = paper_plb();
    let l = loads(&[(2, 28), (3, 0), (0, 0), (0, 0), (0, 0)]);
    assert_eq!(plb.admit(&paper_table(), &l, P).unwrap().replica, r(0));
}

#[test]
fn ties_go_to_the_lowest_index() {
    let plb = paper_plb();
    let l = loads(&[(4, 0), (4, 0), (0, 0), (0, 0), (0, 0)]);
    assert_eq!(plb.admit(&paper_table(), &l, P).unwrap().replica, r(0));
}

#[test]
fn premium_borrows_from_mixed_first() {
    // Premium saturated; idle Freemium replicas exist but Mixed is tried first.
    let plb = paper_plb();
    let l = loads(&[(10, 0), (12, 0), (0, 0), (0, 0), (0, 3)]);
    let a = plb.admit(&paper_table(), &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::BorrowMixed));
    let change = only_change(&a);
    assert_eq!(change.from, Role::Mixed);
    assert_eq!(change.to, Role::BorrowedToPremium { from: Pool::Mixed });
    assert_eq!(change.reason, ChangeReason::BorrowMixedForPremium);
}

#[test]
fn premium_does_not_borrow_while_any_premium_replica_has_headroom() {
    let plb = paper_plb();
    let l = loads(&[(10, 0), (9, 0), (0, 0), (0, 0), (0, 0)]);
    let a = plb.admit(&paper_table(), &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(1), AdmissionRule::PoolHeadroom));
}

#[test]
fn select_mixed_for_premium_prefers_replicas_without_premium_sessions() {
    let table = layout(6, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(10, 0), (10, 0), (0, 0), (0, 0), (1, 0), (0, 5)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(5), AdmissionRule::BorrowMixed));
}

#[test]
fn select_mixed_for_premium_then_smallest_freemium_load() {
    let table = layout(6, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(10, 0), (10, 0), (0, 0), (0, 0), (0, 5), (0, 2)]);
    assert_eq!(plb.admit(&table, &l, P).unwrap().replica, r(5));
}

#[test]
fn premium_borrows_from_freemium_when_mixed_is_empty() {
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(10, 0), (11, 0), (0, 4), (0, 2)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(3), AdmissionRule::BorrowFreemium));
    let change = only_change(&a);
    assert_eq!(change.from, Role::Freemium);
    assert_eq!(
        change.to,
        Role::BorrowedToPremium {
            from: Pool::Freemium
        }
    );
    assert_eq!(change.reason, ChangeReason::BorrowFreemiumForPremium);
}

#[test]
fn premium_borrow_from_freemium_requires_floor() {
    // |R_F| − 1 = 1 < κ_F = 2: no borrow, fallback to the least-loaded premium replica.
    let table = layout(4, &[0, 1], &[2, 3]);
    let params = PlbParams::PAPER.with_floor(F, 2);
    let plb = plb_with(params, &table);
    let l = loads(&[(12, 0), (11, 0), (0, 0), (0, 0)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(1), AdmissionRule::PoolFallback));
    assert!(a.role_changes.is_empty());
}

#[test]
fn premium_borrow_from_freemium_allowed_exactly_at_floor() {
    // |R_F| − 1 = 1 = κ_F: allowed.
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(12, 0), (11, 0), (0, 0), (0, 0)]);
    assert_eq!(
        plb.admit(&table, &l, P).unwrap().rule,
        AdmissionRule::BorrowFreemium
    );
}

#[test]
fn premium_borrow_from_freemium_requires_donor_below_best_premium_load() {
    // m_P = 10 (least-loaded premium replica); donors carry 10 and 11 sessions: none below.
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(10, 0), (12, 0), (0, 10), (0, 11)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(0), AdmissionRule::PoolFallback));
}

#[test]
fn premium_borrow_from_freemium_compares_donor_total_load() {
    // Donor 2 has load_F = 3 but total 13 ≥ m_P = 12 (it would count total once borrowed);
    // donor 3 has total 11 < 12.
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(12, 0), (13, 0), (10, 3), (0, 11)]);
    assert_eq!(plb.admit(&table, &l, P).unwrap().replica, r(3));
}

#[test]
fn select_freemium_for_premium_prefers_donors_below_freemium_watermark() {
    // τ_F = 8. Donor 2: load_F = 7 (< τ_F), total 11. Donor 3: load_F = 9, total 9.
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(15, 0), (20, 0), (4, 7), (0, 9)]);
    assert_eq!(plb.admit(&table, &l, P).unwrap().replica, r(2));
}

#[test]
fn select_freemium_for_premium_then_least_loaded() {
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(15, 0), (20, 0), (0, 5), (0, 3)]);
    assert_eq!(plb.admit(&table, &l, P).unwrap().replica, r(3));
}

#[test]
fn premium_fallback_to_least_loaded_premium_replica() {
    // No headroom, no Mixed, Freemium donors all too loaded.
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(14, 0), (12, 0), (0, 30), (0, 30)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(1), AdmissionRule::PoolFallback));
}

#[test]
fn freemium_routes_to_least_loaded_freemium_replica_with_headroom() {
    let plb = paper_plb();
    let l = loads(&[(0, 0), (0, 0), (0, 5), (3, 4), (0, 0)]);
    let a = plb.admit(&paper_table(), &l, F).unwrap();
    assert_eq!((a.replica, a.rule), (r(3), AdmissionRule::PoolHeadroom));
}

#[test]
fn freemium_borrows_from_mixed_first() {
    let plb = paper_plb();
    let l = loads(&[(0, 0), (0, 0), (0, 10), (0, 10), (0, 0)]);
    let a = plb.admit(&paper_table(), &l, F).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::BorrowMixed));
    let change = only_change(&a);
    assert_eq!(change.to, Role::BorrowedToFreemium { from: Pool::Mixed });
    assert_eq!(change.reason, ChangeReason::BorrowMixedForFreemium);
}

#[test]
fn select_mixed_for_freemium_prefers_fewest_premium_sessions() {
    let table = layout(6, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(0, 0), (0, 0), (0, 10), (0, 10), (2, 0), (1, 9)]);
    assert_eq!(plb.admit(&table, &l, F).unwrap().replica, r(5));
}

#[test]
fn select_mixed_for_freemium_then_smallest_freemium_load() {
    let table = layout(6, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(0, 0), (0, 0), (0, 10), (0, 10), (1, 9), (1, 3)]);
    assert_eq!(plb.admit(&table, &l, F).unwrap().replica, r(5));
}

#[test]
fn freemium_borrows_only_premium_empty_replicas() {
    // |R_P| = 3, K_P = 2. Replicas 0 and 2 host premium sessions; replica 1 is Premium-empty
    // even though it carries residual freemium sessions.
    let table = layout(5, &[0, 1, 2], &[3, 4]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(1, 0), (0, 4), (2, 0), (0, 10), (0, 10)]);
    let a = plb.admit(&table, &l, F).unwrap();
    assert_eq!((a.replica, a.rule), (r(1), AdmissionRule::BorrowPremium));
    let change = only_change(&a);
    assert_eq!(change.from, Role::Premium);
    assert_eq!(
        change.to,
        Role::BorrowedToFreemium {
            from: Pool::Premium
        }
    );
    assert_eq!(change.reason, ChangeReason::BorrowPremiumForFreemium);
}

#[test]
fn freemium_borrow_from_premium_picks_least_loaded_premium_empty_replica() {
    let table = layout(5, &[0, 1, 2], &[3, 4]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(1, 0), (0, 4), (0, 2), (0, 10), (0, 10)]);
    assert_eq!(plb.admit(&table, &l, F).unwrap().replica, r(2));
}

#[test]
fn freemium_borrow_from_premium_requires_premium_target() {
    // |R_P| − 1 = 1 < K_P = 2: no borrow; fallback to the least-loaded freemium replica.
    let table = layout(4, &[0, 1], &[2, 3]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(0, 0), (0, 0), (0, 12), (0, 11)]);
    let a = plb.admit(&table, &l, F).unwrap();
    assert_eq!((a.replica, a.rule), (r(3), AdmissionRule::PoolFallback));
}

#[test]
fn freemium_never_borrows_a_replica_hosting_premium_sessions() {
    let table = layout(5, &[0, 1, 2], &[3, 4]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let l = loads(&[(1, 0), (1, 0), (1, 0), (0, 12), (0, 11)]);
    let a = plb.admit(&table, &l, F).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::PoolFallback));
}

#[test]
fn borrowed_replica_joins_the_borrowing_class_pool() {
    // After borrowing Mixed replica 4, the next premium session uses it (headroom) instead of
    // borrowing again.
    let table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToPremium { from: Pool::Mixed })],
    );
    let plb = paper_plb();
    let l = loads(&[(10, 0), (10, 0), (0, 0), (0, 0), (1, 0)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::PoolHeadroom));
    assert!(a.role_changes.is_empty());
}

#[test]
fn borrowed_replica_headroom_counts_total_load() {
    // Borrowed replica 4 hosts 2 premium + 9 residual freemium sessions: total 11 ≥ θ_P, so no
    // headroom; premium saturated everywhere and Mixed empty -> Freemium donor (load < m_P).
    let table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToPremium { from: Pool::Mixed })],
    );
    let plb = paper_plb();
    let l = loads(&[(10, 0), (10, 0), (0, 3), (0, 1), (2, 9)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(3), AdmissionRule::BorrowFreemium));
    // With only 7 residual sessions (total 9 < θ_P) the borrowed replica has headroom.
    let l = loads(&[(10, 0), (10, 0), (0, 3), (0, 1), (2, 7)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::PoolHeadroom));
}

#[test]
fn least_loaded_choice_uses_total_load_on_borrowed_replicas() {
    // Owned replica 0: load_P = 5. Borrowed replica 4: load_P = 3 but total 6. 0 wins.
    let table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToPremium { from: Pool::Mixed })],
    );
    let plb = paper_plb();
    let l = loads(&[(5, 0), (10, 0), (0, 0), (0, 0), (3, 3)]);
    assert_eq!(plb.admit(&table, &l, P).unwrap().replica, r(0));
}

#[test]
fn premium_is_never_routed_to_a_replica_borrowed_by_freemium() {
    let table = with_roles(
        &paper_table(),
        &[(4, Role::BorrowedToFreemium { from: Pool::Mixed })],
    );
    let plb = paper_plb();
    let l = loads(&[(10, 0), (10, 0), (0, 40), (0, 40), (0, 1)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(0), AdmissionRule::PoolFallback));
}

#[test]
fn down_replicas_are_skipped_by_admission() {
    let table = with_roles(&paper_table(), &[(1, Role::Down)]);
    let plb = paper_plb();
    let l = loads(&[(5, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    assert_eq!(plb.admit(&table, &l, P).unwrap().replica, r(0));
}

#[test]
fn last_resort_when_the_class_has_no_usable_replica() {
    // One survivor, borrowed by premium: freemium still gets served there.
    let table = with_roles(
        &paper_table(),
        &[
            (0, Role::Down),
            (1, Role::Down),
            (2, Role::Down),
            (3, Role::Down),
            (4, Role::BorrowedToPremium { from: Pool::Mixed }),
        ],
    );
    let plb = paper_plb();
    let l = loads(&[(0, 0), (0, 0), (0, 0), (0, 0), (3, 0)]);
    let a = plb.admit(&table, &l, F).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::LastResort));
    assert!(a.role_changes.is_empty());
}

#[test]
fn no_replica_up_is_an_error() {
    let down: Vec<(u8, Role)> = (0..5).map(|i| (i, Role::Down)).collect();
    let table = with_roles(&paper_table(), &down);
    let l = loads(&[(0, 0); 5]);
    assert_eq!(
        paper_plb().admit(&table, &l, P),
        Err(AdmitError::NoReplicaUp)
    );
}

#[test]
fn load_slice_must_match_the_table() {
    let l = loads(&[(0, 0); 4]);
    assert_eq!(
        paper_plb().admit(&paper_table(), &l, P),
        Err(AdmitError::LoadCount {
            replicas: 5,
            loads: 4
        })
    );
}

#[test]
fn admission_is_pure_and_deterministic() {
    let plb = paper_plb();
    let table = paper_table();
    let before = table.clone();
    let l = loads(&[(10, 0), (12, 0), (0, 0), (0, 0), (0, 3)]);
    let first = plb.admit(&table, &l, P).unwrap();
    let second = plb.admit(&table, &l, P).unwrap();
    assert_eq!(first, second);
    assert_eq!(table, before);
}
