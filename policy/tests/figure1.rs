//! A worked scenario in the spirit of 000 Figure 1: the five-replica deployment (2, 2, 1)
//! goes through every transition of Figure 1b — borrow(P,M), borrow(P,F), return(P,F),
//! return(P,M), borrow(F,M), return(F,M) — and ends in its initial layout. The exact timeline
//! of Figure 1a is not recoverable from the text, so the order here is one the rules produce
//! for a premium surge followed by a freemium surge.

mod common;

use common::*;
use pgtier_policy::{AdmissionRule, ChangeReason, Pool, Role};

#[test]
fn figure1_borrow_and_return_cycle() {
    let mut c = Cluster::paper();
    let initial = c.table.clone();

    // T1: premium fills R_P to θ_P = 10 per replica, then borrows the Mixed replica.
    let fill = c.open_many(P, 20);
    assert!(fill.iter().all(|a| a.rule == AdmissionRule::PoolHeadroom));
    assert_eq!((c.loads[0].premium, c.loads[1].premium), (10, 10));
    let a = c.open(P);
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::BorrowMixed));
    assert_eq!(c.role(4), Role::BorrowedToPremium { from: Pool::Mixed });

    // The borrowed replica now serves premium until it saturates too.
    let more = c.open_many(P, 9);
    assert!(more.iter().all(|a| a.replica == r(4)));

    // T2: Mixed is empty, |R_F| − 1 = 1 ≥ κ_F and idle Freemium replicas are below m_P = 10:
    // premium borrows Freemium replica 2 (below τ_F, lowest index).
    let a = c.open(P);
    assert_eq!((a.replica, a.rule), (r(2), AdmissionRule::BorrowFreemium));
    assert_eq!(
        c.role(2),
        Role::BorrowedToPremium {
            from: Pool::Freemium
        }
    );

    // A further surge cannot take the last Freemium replica (floor κ_F = 1).
    c.open_many(P, 9);
    let a = c.open(P);
    assert_eq!(a.rule, AdmissionRule::PoolFallback);
    assert_eq!(c.role(3), Role::Freemium);

    // T3: the surge ends. Borrowed replicas drain and replica 0 drops below τ_P = 6.
    c.close(r(2), P, 10 + u32::from(a.replica == r(2)));
    c.close(r(4), P, 10 + u32::from(a.replica == r(4)));
    let extra0 = u32::from(a.replica == r(0));
    c.close(r(0), P, 5 + extra0);
    c.close(r(1), P, u32::from(a.replica == r(1)));
    // The next admission returns 2 to Freemium (|R_F| = 1 < K_F) and 4 to Mixed.
    let a = c.open(F);
    let returns: Vec<_> = a
        .role_changes
        .iter()
        .map(|ch| (ch.replica, ch.to, ch.reason))
        .collect();
    assert_eq!(
        returns,
        [
            (r(2), Role::Freemium, ChangeReason::ReturnToUnmetTarget),
            (r(4), Role::Mixed, ChangeReason::ReturnToMixed),
        ]
    );
    assert_eq!(c.table, initial);
    c.close(a.replica, F, 1);

    // T4: freemium surge: R_F fills to θ_F = 10 each, then borrows Mixed.
    c.open_many(F, 20);
    assert_eq!((c.loads[2].freemium, c.loads[3].freemium), (10, 10));
    let a = c.open(F);
    assert_eq!((a.replica, a.rule), (r(4), AdmissionRule::BorrowMixed));
    assert_eq!(c.role(4), Role::BorrowedToFreemium { from: Pool::Mixed });

    // T5: freemium drains from the borrowed replica and replica 3 drops below τ_F = 8.
    c.close(r(4), F, 1);
    c.close(r(3), F, 3);
    let a = c.open(P);
    assert_eq!(a.role_changes.len(), 1);
    let back = a.role_changes.as_slice()[0];
    assert_eq!((back.replica, back.to), (r(4), Role::Mixed));
    assert_eq!(back.reason, ChangeReason::ReturnToMixed);
    assert_eq!(c.table, initial);
}
