//! 000 §III-D "Return" rules, role-change application (`RoleTable::apply`) and parameter
//! validation, one test per rule.

mod common;

use common::*;
use pgtier_policy::{
    AdmissionRule, ChangeReason, Conflict, LayoutError, MAX_REPLICAS, ParamError, Plb, PlbParams,
    Pool, Role, RoleChange, RoleTable,
};

const BORROWED_P_FROM_M: Role = Role::BorrowedToPremium { from: Pool::Mixed };
const BORROWED_P_FROM_F: Role = Role::BorrowedToPremium {
    from: Pool::Freemium,
};
const BORROWED_F_FROM_M: Role = Role::BorrowedToFreemium { from: Pool::Mixed };
const BORROWED_F_FROM_P: Role = Role::BorrowedToFreemium {
    from: Pool::Premium,
};

#[test]
fn return_requires_no_sessions_of_the_borrowing_class() {
    // Pressure eased (replica 0 below τ_P = 6) but borrowed replica 4 still hosts a premium
    // session: no return.
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let l = loads(&[(1, 0), (0, 0), (0, 0), (0, 0), (1, 0)]);
    assert!(paper_plb().returns(&table, &l).unwrap().is_empty());
}

#[test]
fn return_requires_pressure_eased_below_watermark() {
    // τ_P = ⌊0.6·10⌋ = 6: premium replicas at 6 and 7 are not below it.
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let plb = paper_plb();
    let l = loads(&[(6, 0), (7, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(plb.returns(&table, &l).unwrap().is_empty());
    let l = loads(&[(5, 0), (7, 0), (0, 0), (0, 0), (0, 0)]);
    assert_eq!(plb.returns(&table, &l).unwrap().len(), 1);
}

#[test]
fn return_pressure_ignores_the_candidate_itself() {
    // The idle borrowed replica is trivially below τ_P; only the other premium replicas count.
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let l = loads(&[(9, 0), (9, 0), (0, 0), (0, 0), (0, 0)]);
    assert!(paper_plb().returns(&table, &l).unwrap().is_empty());
}

#[test]
fn return_pressure_counts_other_borrowed_replicas_with_total_load() {
    // Premium pool saturated; borrowed replica 3 has total load 2 < τ_P: pressure eased, so
    // idle borrowed replica 4 can return. Replica 3 keeps its premium session and stays.
    let table = with_roles(
        &paper_table(),
        &[(3, BORROWED_P_FROM_F), (4, BORROWED_P_FROM_M)],
    );
    let l = loads(&[(10, 0), (10, 0), (0, 0), (1, 1), (0, 0)]);
    let changes = paper_plb().returns(&table, &l).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes.as_slice()[0].replica, r(4));
}

#[test]
fn return_goes_to_freemium_when_below_target() {
    // Replica 3 was borrowed from Freemium: |R_F| = 1 < K_F = 2, so it goes back to Freemium.
    let table = with_roles(&paper_table(), &[(3, BORROWED_P_FROM_F)]);
    let l = loads(&[(2, 0), (0, 0), (0, 0), (0, 4), (0, 0)]);
    let changes = paper_plb().returns(&table, &l).unwrap();
    assert_eq!(
        changes.as_slice(),
        &[RoleChange {
            replica: r(3),
            from: BORROWED_P_FROM_F,
            to: Role::Freemium,
            reason: ChangeReason::ReturnToUnmetTarget,
        }]
    );
}

#[test]
fn return_goes_to_freemium_below_target_even_when_borrowed_from_mixed() {
    // The destination follows the pool targets, not the donor: |R_F| = 1 < K_F.
    let table = with_roles(&paper_table(), &[(2, Role::Down), (4, BORROWED_P_FROM_M)]);
    let l = loads(&[(2, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let changes = paper_plb().returns(&table, &l).unwrap();
    assert_eq!(changes.as_slice()[0].to, Role::Freemium);
}

#[test]
fn return_goes_to_mixed_when_freemium_target_met() {
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let l = loads(&[(2, 0), (0, 0), (0, 0), (0, 0), (0, 3)]);
    let changes = paper_plb().returns(&table, &l).unwrap();
    assert_eq!(changes.as_slice()[0].to, Role::Mixed);
    assert_eq!(changes.as_slice()[0].reason, ChangeReason::ReturnToMixed);
}

#[test]
fn return_goes_to_premium_when_below_target() {
    let table = layout(5, &[0, 1, 2], &[3, 4]);
    let table = with_roles(&table, &[(2, BORROWED_F_FROM_P), (1, Role::Down)]);
    let plb = plb_with(PlbParams::PAPER, &layout(5, &[0, 1, 2], &[3, 4]));
    // |R_P| = 1 < K_P = 2; freemium replica 3 below τ_F = 8.
    let l = loads(&[(1, 0), (0, 0), (0, 0), (0, 7), (0, 9)]);
    let changes = plb.returns(&table, &l).unwrap();
    assert_eq!(changes.as_slice()[0].to, Role::Premium);
    assert_eq!(
        changes.as_slice()[0].reason,
        ChangeReason::ReturnToUnmetTarget
    );
}

#[test]
fn return_of_freemium_borrow_goes_to_mixed_when_premium_target_met() {
    let table = with_roles(&paper_table(), &[(4, BORROWED_F_FROM_M)]);
    let l = loads(&[(1, 0), (1, 0), (0, 3), (0, 9), (2, 0)]);
    let changes = paper_plb().returns(&table, &l).unwrap();
    assert_eq!(changes.as_slice()[0].to, Role::Mixed);
}

#[test]
fn freemium_return_uses_freemium_watermark() {
    // τ_F = 8: freemium replicas at 8 and 9 do not ease pressure; 7 does.
    let table = with_roles(&paper_table(), &[(4, BORROWED_F_FROM_M)]);
    let plb = paper_plb();
    let l = loads(&[(0, 0), (0, 0), (0, 8), (0, 9), (0, 0)]);
    assert!(plb.returns(&table, &l).unwrap().is_empty());
    let l = loads(&[(0, 0), (0, 0), (0, 7), (0, 9), (0, 0)]);
    assert_eq!(plb.returns(&table, &l).unwrap().len(), 1);
}

#[test]
fn returned_replica_keeps_its_residual_sessions() {
    // A replica borrowed from Freemium by premium, now hosting only freemium sessions, is
    // returned; nothing in the decision touches the sessions it hosts.
    let table = with_roles(&paper_table(), &[(3, BORROWED_P_FROM_F)]);
    let l = loads(&[(2, 0), (0, 0), (0, 0), (0, 6), (0, 0)]);
    let before = l.clone();
    let changes = paper_plb().returns(&table, &l).unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(l, before);
}

#[test]
fn returns_are_evaluated_at_admission_before_the_decision() {
    let table = with_roles(&paper_table(), &[(4, BORROWED_P_FROM_M)]);
    let l = loads(&[(2, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    let a = paper_plb().admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(1), AdmissionRule::PoolHeadroom));
    assert_eq!(a.role_changes.len(), 1);
    assert_eq!(
        a.role_changes.as_slice()[0].reason,
        ChangeReason::ReturnToMixed
    );
}

#[test]
fn a_return_and_a_borrow_in_one_admission_apply_in_order() {
    // Replica 4, borrowed by freemium, is idle and freemium pressure has eased (replica 2 below
    // τ_F): it returns to Mixed (|R_P| = K_P). Premium is saturated, so the same admission then
    // borrows it from Mixed. The second change is only valid after the first.
    let table = with_roles(&paper_table(), &[(4, BORROWED_F_FROM_M)]);
    let plb = paper_plb();
    let l = loads(&[(10, 0), (10, 0), (0, 3), (0, 10), (0, 0)]);
    let a = plb.admit(&table, &l, P).unwrap();
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::BorrowMixed));
    let reasons: Vec<_> = a.role_changes.iter().map(|c| c.reason).collect();
    assert_eq!(
        reasons,
        [
            ChangeReason::ReturnToMixed,
            ChangeReason::BorrowMixedForPremium
        ]
    );
    let mut owner = table;
    apply_all(&mut owner, &a, plb.params());
    assert_eq!(owner.role(r(4)), Some(BORROWED_P_FROM_M));
}

#[test]
fn returned_replica_is_visible_to_the_same_admission() {
    // Replica 2, borrowed from Freemium by premium, is idle and premium pressure has eased:
    // it returns to Freemium (|R_F| < K_F) and the freemium session lands on it.
    let table = with_roles(&paper_table(), &[(2, BORROWED_P_FROM_F)]);
    let plb = paper_plb();
    let l = loads(&[(5, 0), (0, 0), (0, 0), (0, 10), (0, 0)]);
    let a = plb.admit(&table, &l, F).unwrap();
    assert_eq!(a.role_changes.as_slice()[0].to, Role::Freemium);
    assert_eq!((a.replica, a.rule), (r(2), AdmissionRule::PoolHeadroom));
}

#[test]
fn apply_rejects_a_stale_change() {
    let plb = paper_plb();
    let mut table = paper_table();
    let l = loads(&[(10, 0), (10, 0), (0, 0), (0, 0), (0, 0)]);
    let a = plb.admit(&table, &l, P).unwrap();
    let change = a.role_changes.as_slice()[0];
    assert_eq!(table.apply(&change, plb.params()), Ok(()));
    assert_eq!(
        table.apply(&change, plb.params()),
        Err(Conflict::Stale {
            replica: r(4),
            expected: Role::Mixed,
            actual: BORROWED_P_FROM_M,
        })
    );
}

#[test]
fn apply_rejects_concurrent_borrows_that_would_break_the_freemium_floor() {
    // Two shards decide on the same snapshot to borrow different Freemium replicas; after the
    // first, |R_F| − 1 < κ_F, so the second is refused.
    let table = layout(5, &[0, 1], &[2, 3, 4]);
    let params = PlbParams::PAPER.with_floor(F, 2);
    let plb = plb_with(params, &table);
    let snapshot = table.clone();
    let first = plb
        .admit(
            &snapshot,
            &loads(&[(10, 0), (10, 0), (0, 1), (0, 2), (0, 3)]),
            P,
        )
        .unwrap();
    let second = plb
        .admit(
            &snapshot,
            &loads(&[(10, 0), (10, 0), (0, 9), (0, 2), (0, 3)]),
            P,
        )
        .unwrap();
    assert_ne!(first.replica, second.replica);
    let mut owner = table;
    assert!(
        owner
            .apply(&first.role_changes.as_slice()[0], &params)
            .is_ok()
    );
    assert_eq!(
        owner.apply(&second.role_changes.as_slice()[0], &params),
        Err(Conflict::FreemiumFloor {
            freemium_pool: 2,
            floor: 2
        })
    );
}

#[test]
fn apply_rejects_concurrent_borrows_that_would_break_the_premium_target() {
    let table = layout(5, &[0, 1, 2], &[3, 4]);
    let plb = plb_with(PlbParams::PAPER, &table);
    let first = plb
        .admit(
            &table,
            &loads(&[(0, 0), (0, 1), (1, 0), (0, 10), (0, 10)]),
            F,
        )
        .unwrap();
    let second = plb
        .admit(
            &table,
            &loads(&[(0, 5), (0, 1), (1, 0), (0, 10), (0, 10)]),
            F,
        )
        .unwrap();
    assert_ne!(first.replica, second.replica);
    let mut owner = table;
    assert!(
        owner
            .apply(&first.role_changes.as_slice()[0], plb.params())
            .is_ok()
    );
    assert!(matches!(
        owner.apply(&second.role_changes.as_slice()[0], plb.params()),
        Err(Conflict::PremiumTarget { .. })
    ));
}

#[test]
fn apply_rejects_unknown_replicas_and_malformed_roles() {
    let mut table = paper_table();
    let params = PlbParams::PAPER;
    let unknown = RoleChange {
        replica: r(9),
        from: Role::Mixed,
        to: Role::Premium,
        reason: ChangeReason::RepairToTarget,
    };
    assert_eq!(
        table.apply(&unknown, &params),
        Err(Conflict::UnknownReplica(r(9)))
    );
    let malformed = RoleChange {
        replica: r(4),
        from: Role::Mixed,
        to: Role::BorrowedToPremium {
            from: Pool::Premium,
        },
        reason: ChangeReason::BorrowMixedForPremium,
    };
    assert!(matches!(
        table.apply(&malformed, &params),
        Err(Conflict::InvalidRole(_))
    ));
    assert_eq!(table, paper_table());
}

#[test]
fn return_watermark_is_the_floor_of_alpha_theta() {
    let p = PlbParams::PAPER;
    assert_eq!(p.return_watermark(P), 6);
    assert_eq!(p.return_watermark(F), 8);
    let decimal = PlbParams::PAPER.with_alpha(P, 0.29).with_theta(P, 100);
    assert_eq!(decimal.return_watermark(P), 29);
    let half = PlbParams::PAPER.with_alpha(P, 0.55);
    assert_eq!(half.return_watermark(P), 5);
}

#[test]
fn params_paper_values_are_valid() {
    assert!(PlbParams::PAPER.validate(&paper_table()).is_ok());
}

#[test]
fn params_reject_alpha_outside_unit_interval() {
    for alpha in [0.0, -0.5, 1.01, f64::NAN] {
        let p = PlbParams::PAPER.with_alpha(F, alpha);
        assert!(
            matches!(
                p.validate(&paper_table()),
                Err(ParamError::AlphaOutOfRange { .. })
            ),
            "alpha {alpha}"
        );
    }
    let one = PlbParams::PAPER.with_alpha(P, 1.0);
    assert!(one.validate(&paper_table()).is_ok());
}

#[test]
fn params_reject_zero_theta_and_zero_watermark() {
    let zero = PlbParams::PAPER.with_theta(P, 0);
    assert_eq!(
        zero.validate(&paper_table()),
        Err(ParamError::ThetaZero { class: P })
    );
    let tiny = PlbParams::PAPER.with_theta(F, 1);
    assert!(matches!(
        tiny.validate(&paper_table()),
        Err(ParamError::WatermarkZero { .. })
    ));
}

#[test]
fn params_reject_floor_larger_than_pool() {
    let p = PlbParams::PAPER.with_floor(F, 3);
    let err = p.validate(&paper_table()).unwrap_err();
    assert_eq!(err, ParamError::FloorLargerThanPool { floor: 3, pool: 2 });
    assert!(err.to_string().contains("freemium_floor = 3"));
}

#[test]
fn params_reject_targets_larger_than_budget() {
    let p = PlbParams::PAPER.with_target(P, 6);
    assert!(matches!(
        p.validate(&paper_table()),
        Err(ParamError::TargetLargerThanBudget { .. })
    ));
    let both = PlbParams::PAPER.with_target(P, 3).with_target(F, 3);
    assert!(matches!(
        both.validate(&paper_table()),
        Err(ParamError::TargetsExceedBudget { .. })
    ));
    assert!(Plb::new(both, &paper_table()).is_err());
}

#[test]
fn layout_rejects_overlap_unknown_and_size() {
    assert_eq!(
        RoleTable::new(5, &ids(&[0, 1]), &ids(&[1, 2])),
        Err(LayoutError::Overlap { replica: r(1) })
    );
    assert_eq!(
        RoleTable::new(5, &ids(&[0, 0]), &[]),
        Err(LayoutError::Overlap { replica: r(0) })
    );
    assert_eq!(
        RoleTable::new(3, &ids(&[0, 5]), &[]),
        Err(LayoutError::UnknownReplica {
            replica: r(5),
            count: 3
        })
    );
    assert_eq!(RoleTable::new(0, &[], &[]), Err(LayoutError::NoReplicas));
    assert_eq!(
        RoleTable::all_mixed(MAX_REPLICAS + 1),
        Err(LayoutError::TooManyReplicas {
            count: MAX_REPLICAS + 1
        })
    );
    let t = paper_table();
    assert_eq!(t.vector().premium, 2);
    assert_eq!(t.vector().mixed, 1);
    assert_eq!(t.vector().freemium, 2);
}
