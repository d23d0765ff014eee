//! A router in a fleet: its decisions add the rest of the fleet's load to its own counts,
//! it adopts the leader's tables (keeping what its own probes see Down), and it leaves
//! returns to the leader while in fleet mode.

use pgtier_policy::tiers::TierLoad;
use pgtier_policy::{Pool, ReplicaId, Role, RoleTable, ServiceClass};

use crate::health::HealthConfig;
use crate::mailbox::ServerFailureCause;
use crate::remote_load::RemoteLoad;
use crate::route_table::RouteTable;
use crate::router::ReplicaRouter;
use crate::test_support::{admit_now, paper_router};

const P: ServiceClass = ServiceClass::Premium;

fn role(router: &ReplicaRouter, replica: u8) -> Role {
    router
        .snapshot()
        .table
        .classes()
        .expect("a two-class table")
        .role(ReplicaId(replica))
        .expect("replica")
}

fn premium_elsewhere(per_replica: &[u32]) -> RemoteLoad {
    let sessions: Vec<TierLoad> = per_replica
        .iter()
        .map(|&premium| TierLoad {
            sessions: [premium, 0, 0, 0],
        })
        .collect();
    RemoteLoad::new(&sessions, &[])
}

#[test]
fn the_rest_of_the_fleet_load_makes_a_local_admission_borrow() {
    let router = paper_router(2);
    // The other hosts hold θ premium sessions on each premium replica: the premium pool has
    // no headroom for the fleet, though this host has no session at all.
    router
        .state()
        .set_remote(premium_elsewhere(&[2, 2, 0, 0, 0]));
    let lease = admit_now(&router, P).expect("admitted");
    assert_eq!(lease.replica(), ReplicaId(4));
    assert_eq!(
        role(&router, 4),
        Role::BorrowedToPremium { from: Pool::Mixed }
    );
    // Only this host's own session is counted here.
    assert_eq!(router.load(ReplicaId(4)).premium, 1);
    assert_eq!(router.load(ReplicaId(0)).premium, 0);
}

#[test]
fn a_local_claim_is_conditional_on_the_own_count_only() {
    let router = paper_router(4);
    router
        .state()
        .set_remote(premium_elsewhere(&[1, 3, 0, 0, 0]));
    let first = admit_now(&router, P).expect("admitted");
    assert_eq!(
        first.replica(),
        ReplicaId(0),
        "the least loaded for the fleet"
    );
    assert_eq!(
        router.stats().local_admissions,
        1,
        "placed without the control shard"
    );
    assert_eq!(router.load(ReplicaId(0)).premium, 1);
    // With no fleet, the same router decides on its own counts again.
    router.state().set_remote(RemoteLoad::default());
    let second = admit_now(&router, P).expect("admitted");
    assert_eq!(second.replica(), ReplicaId(1));
}

/// The paper's layout with replica 4 borrowed for premium, as a leader would publish it.
fn leader_table() -> RouteTable {
    let mut fleet = RoleTable::new(
        5,
        &[ReplicaId(0), ReplicaId(1)],
        &[ReplicaId(2), ReplicaId(3)],
    )
    .expect("layout");
    let borrow = pgtier_policy::RoleChange {
        replica: ReplicaId(4),
        from: Role::Mixed,
        to: Role::BorrowedToPremium { from: Pool::Mixed },
        reason: pgtier_policy::ChangeReason::BorrowMixedForPremium,
    };
    fleet
        .apply(&borrow, &pgtier_policy::PlbParams::PAPER)
        .expect("borrow");
    RouteTable::Classes(fleet)
}

#[test]
fn a_fleet_table_is_adopted_but_a_locally_down_replica_stays_down() {
    let router = paper_router(2);
    let generation = router.snapshot().generation;
    router.apply_fleet_table(&leader_table());
    assert_eq!(router.snapshot().table, leader_table());
    assert!(router.snapshot().generation > generation);
    // This host's servers find replica 2 dead; the leader has not heard yet.
    router.report_server_failure(ReplicaId(2), ServerFailureCause::ConnectionRefused);
    router.run_control_step(&HealthConfig::default(), false);
    assert_eq!(role(&router, 2), Role::Down);
    let epoch = router.state().failure_epoch();
    router.apply_fleet_table(&leader_table());
    assert_eq!(
        role(&router, 2),
        Role::Down,
        "this host's probes still see it down"
    );
    assert_eq!(role(&router, 0), Role::Premium);
    assert_eq!(
        router.state().failure_epoch(),
        epoch,
        "no new Down for the sessions"
    );
}

#[test]
fn in_fleet_mode_returns_are_the_leaders() {
    let router = paper_router(2);
    let leases: Vec<_> = (0..5)
        .map(|_| admit_now(&router, P).expect("admit"))
        .collect();
    assert_eq!(
        role(&router, 4),
        Role::BorrowedToPremium { from: Pool::Mixed }
    );
    drop(leases);
    router.set_fleet_mode(true);
    router.run_control_step(&HealthConfig::default(), true);
    assert_eq!(
        role(&router, 4),
        Role::BorrowedToPremium { from: Pool::Mixed },
        "no local return in fleet mode"
    );
    router.set_fleet_mode(false);
    router.run_control_step(&HealthConfig::default(), true);
    assert_eq!(role(&router, 4), Role::Mixed, "local PLB returns it again");
}
