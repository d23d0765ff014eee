//! The shared vocabulary: load counters that never go negative, replica sets, roles and their
//! admin-console spellings.

mod common;

use common::*;
use pgtier_policy::{
    ChangeReason, LoadError, MAX_REPLICAS, Pool, ReplicaId, ReplicaLoad, ReplicaSet, Role,
    ServiceClass,
};

#[test]
fn loads_never_go_negative() {
    let mut load = ReplicaLoad::default();
    assert_eq!(load.released(P), Err(LoadError::ReleaseWithoutSession(P)));
    load.admitted(F).expect("in range");
    assert_eq!(load.released(P), Err(LoadError::ReleaseWithoutSession(P)));
    assert_eq!(load.released(F), Ok(()));
    assert!(load.is_idle());
    let mut full = ReplicaLoad {
        premium: u32::MAX,
        freemium: u32::MAX,
    };
    assert_eq!(full.admitted(P), Err(LoadError::Overflow(P)));
    assert_eq!(full.total(), 2 * u64::from(u32::MAX));
}

#[test]
fn replica_ids_are_bounded_by_max_replicas() {
    assert_eq!(ReplicaId::from_index(3), Some(r(3)));
    assert_eq!(ReplicaId::from_index(MAX_REPLICAS), None);
    let set = ReplicaSet::of(&ids(&[1, 3, 63]));
    assert_eq!(set.len(), 3);
    assert!(set.contains(r(63)) && !set.contains(r(2)));
    assert_eq!(set.iter().collect::<Vec<_>>(), ids(&[1, 3, 63]));
    // Out-of-range members are ignored, never a shift overflow.
    assert_eq!(set.with(ReplicaId(200)), set);
    assert!(!set.contains(ReplicaId(200)));
    assert!(set.intersects(ReplicaSet::of(&ids(&[3]))));
    assert!(ReplicaSet::EMPTY.is_empty());
}

#[test]
fn service_class_names_parse_case_insensitively() {
    assert_eq!(ServiceClass::parse("Premium"), Some(P));
    assert_eq!(ServiceClass::parse("FREEMIUM"), Some(F));
    assert_eq!(ServiceClass::parse("gold"), None);
    assert_eq!(P.other(), F);
    assert_eq!(F.to_string(), "freemium");
}

#[test]
fn roles_know_owner_borrower_and_donor() {
    let borrowed = Role::BorrowedToPremium {
        from: Pool::Freemium,
    };
    assert_eq!(borrowed.serves(), Some(P));
    assert_eq!(borrowed.owner(), None);
    assert_eq!(borrowed.borrowed_from(), Some(Pool::Freemium));
    assert_eq!(borrowed.to_string(), "borrowed_to_premium(from freemium)");
    assert_eq!(Role::Mixed.serves(), None);
    assert_eq!(Role::Down.serves(), None);
    assert!(!Role::Down.is_up());
    assert!(
        !Role::BorrowedToFreemium {
            from: Pool::Freemium
        }
        .is_valid()
    );
    assert_eq!(
        Role::borrowed_for(F, Pool::Premium),
        Role::BorrowedToFreemium {
            from: Pool::Premium
        }
    );
}

#[test]
fn change_reasons_have_stable_names() {
    assert_eq!(
        ChangeReason::BorrowMixedForPremium.as_str(),
        "borrow_mixed_for_premium"
    );
    assert!(ChangeReason::BorrowPremiumForFreemium.is_borrow());
    assert!(!ChangeReason::ReturnToMixed.is_borrow());
    assert_eq!(ChangeReason::RepairToTarget.to_string(), "repair_to_target");
}

#[test]
fn role_table_census() {
    let table = with_roles(
        &paper_table(),
        &[
            (1, Role::Down),
            (4, Role::BorrowedToFreemium { from: Pool::Mixed }),
        ],
    );
    assert_eq!(table.len(), 5);
    assert_eq!(table.up_count(), 4);
    assert_eq!(table.owned(P), 1);
    assert_eq!(table.owned(F), 2);
    assert_eq!(table.mixed(), 0);
    assert!(!table.is_up(r(1)));
    assert_eq!(table.role(r(9)), None);
    assert_eq!(
        table.to_string(),
        "0:premium 1:down 2:freemium 3:freemium 4:borrowed_to_freemium(from mixed)"
    );
}
