//! Unit tests of the router and the control shard's side, driven on one thread.

use std::sync::Arc;

use pgtier_core::config::{Config, DedicatedSplit, Routing};
use pgtier_policy::{ChangeReason, Pool, ReplicaId, Role, ServiceClass};

use crate::admission_error::AdmissionError;
use crate::events::{EventKind, HealthTransition};
use crate::health::{HealthConfig, ProbeOutcome};
use crate::mailbox::{ReplyMailbox, ServerFailureCause};
use crate::plane::{RouterMap, default_probe_login};
use crate::probe::ProbeReport;
use crate::router::{Admission, ReplicaRouter};
use crate::router_config::RouterConfig;
use crate::test_support::{addresses, admit_now, paper_router, paper_settings, router};

const P: ServiceClass = ServiceClass::Premium;
const F: ServiceClass = ServiceClass::Freemium;

fn role(router: &ReplicaRouter, replica: u8) -> Role {
    router
        .snapshot()
        .table
        .classes()
        .expect("a two-class table")
        .role(ReplicaId(replica))
        .expect("replica")
}

fn role_changes(router: &ReplicaRouter) -> Vec<(u8, ChangeReason)> {
    router
        .events()
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::Role { change, .. } => Some((change.replica.0, change.reason)),
            EventKind::Health { .. } | EventKind::TierRole { .. } => None,
        })
        .collect()
}

#[test]
fn admission_with_headroom_is_placed_locally_without_events() {
    let router = paper_router(2);
    let leases: Vec<_> = (0..4)
        .map(|_| admit_now(&router, P).expect("admit"))
        .collect();
    let replicas: Vec<u8> = leases.iter().map(|l| l.replica().0).collect();
    assert_eq!(replicas, vec![0, 1, 0, 1]);
    assert_eq!(router.events_recorded(), 0);
    assert_eq!(router.snapshot().generation, 1);
}

#[test]
fn borrow_goes_through_the_control_shard_and_is_logged_once() {
    let router = paper_router(2);
    let mut leases: Vec<_> = (0..4)
        .map(|_| admit_now(&router, P).expect("admit"))
        .collect();
    let mailbox = ReplyMailbox::new(|| {});
    assert!(matches!(
        router.admit_session(P, &mailbox, 42),
        Admission::Pending
    ));
    let report = router.run_control_step(&HealthConfig::default(), false);
    assert_eq!((report.requests, report.publishes), (1, 1));
    let reply = mailbox.poll_reply().expect("reply");
    assert_eq!(reply.request_id, 42);
    let lease = reply.result.expect("admitted");
    assert_eq!(lease.replica(), ReplicaId(4));
    assert_eq!(
        role(&router, 4),
        Role::BorrowedToPremium { from: Pool::Mixed }
    );
    assert_eq!(
        role_changes(&router),
        vec![(4, ChangeReason::BorrowMixedForPremium)]
    );
    assert_eq!(router.snapshot().generation, 2);
    leases.push(lease);
}

#[test]
fn session_close_lets_the_control_shard_return_a_borrowed_replica() {
    let router = paper_router(2);
    let mut leases: Vec<_> = (0..5)
        .map(|_| admit_now(&router, P).expect("admit"))
        .collect();
    assert!(router.snapshot().has_borrowed);
    // Close the borrowed replica's session and everything on replica 0: pressure has eased.
    leases.retain(|lease| lease.replica() != ReplicaId(4) && lease.replica() != ReplicaId(0));
    router.run_control_step(&HealthConfig::default(), false);
    assert_eq!(role(&router, 4), Role::Mixed);
    assert_eq!(
        role_changes(&router),
        vec![
            (4, ChangeReason::BorrowMixedForPremium),
            (4, ChangeReason::ReturnToMixed)
        ]
    );
    drop(leases);
    assert_eq!(router.total_sessions(), 0);
}

#[test]
fn reported_failure_marks_down_at_once_and_repairs_to_target() {
    let router = paper_router(10);
    let epoch = router.state().failure_epoch();
    router.report_server_failure(ReplicaId(0), ServerFailureCause::ConnectionRefused);
    router.run_control_step(&HealthConfig::default(), false);
    assert!(router.is_down(ReplicaId(0)));
    assert_ne!(router.state().failure_epoch(), epoch);
    // K+ = 4: target (P=2, M=0, F=2), so the Mixed replica is repaired into Premium.
    assert_eq!(role(&router, 4), Role::Premium);
    assert_eq!(
        role_changes(&router),
        vec![(0, ChangeReason::Down), (4, ChangeReason::RepairToTarget)]
    );
    let health_events = router
        .events()
        .iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::Health {
                    transition: HealthTransition::Down,
                    ..
                }
            )
        })
        .count();
    assert_eq!(health_events, 1);
    // A second report of the same failure changes nothing.
    router.report_server_failure(ReplicaId(0), ServerFailureCause::ConnectionReset);
    router.run_control_step(&HealthConfig::default(), false);
    assert_eq!(router.events_recorded(), 3);
}

#[test]
fn a_flood_of_failure_reports_queues_one_request() {
    let router = paper_router(10);
    for _ in 0..1000 {
        router.report_server_failure(ReplicaId(3), ServerFailureCause::ConnectionReset);
    }
    let report = router.run_control_step(&HealthConfig::default(), false);
    assert_eq!(report.requests, 1);
    assert!(router.is_down(ReplicaId(3)));
    router.report_server_failure(ReplicaId(3), ServerFailureCause::ConnectionReset);
    assert_eq!(
        router
            .run_control_step(&HealthConfig::default(), false)
            .requests,
        0
    );
    assert_eq!(router.stats().failure_reports, 1001);
}

#[test]
fn repin_moves_the_count_off_a_down_replica() {
    let router = paper_router(10);
    let lease = admit_now(&router, P).expect("admit");
    assert_eq!(lease.replica(), ReplicaId(0));
    router.report_server_failure(ReplicaId(0), ServerFailureCause::ConnectionReset);
    router.run_control_step(&HealthConfig::default(), false);
    let mailbox = ReplyMailbox::new(|| {});
    let Admission::Placed(moved) = router.repin(lease, &mailbox, 1) else {
        panic!("re-pin with headroom is local")
    };
    assert_ne!(moved.replica(), ReplicaId(0));
    assert_eq!(router.load(ReplicaId(0)).premium, 0);
    assert_eq!(router.load(moved.replica()).premium, 1);
}

#[test]
fn probes_take_a_replica_down_and_back() {
    let router = paper_router(10);
    let config = HealthConfig::default();
    let probe = |healthy: bool| ProbeReport {
        replica: ReplicaId(2),
        at: std::time::SystemTime::now(),
        outcome: if healthy {
            ProbeOutcome::Healthy {
                round_trip: std::time::Duration::from_millis(1),
            }
        } else {
            ProbeOutcome::Failed {
                cause: "connect: refused".to_string(),
            }
        },
    };
    for healthy in [false, false] {
        router.report_probe(probe(healthy));
        router.run_control_step(&config, false);
    }
    assert!(router.is_down(ReplicaId(2)));
    for _ in 0..config.successes_to_rejoin {
        router.report_probe(probe(true));
        router.run_control_step(&config, false);
    }
    assert!(!router.is_down(ReplicaId(2)));
    // Back to the reference split (2, 1, 2) after repair.
    let split = router
        .snapshot()
        .table
        .classes()
        .expect("a two-class table")
        .vector();
    assert_eq!(split.total(), 5);
    assert_eq!(split.premium, 2);
    assert_eq!(split.freemium, 2);
    let transitions: Vec<HealthTransition> = router
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Health { transition, .. } => Some(*transition),
            EventKind::Role { .. } | EventKind::TierRole { .. } => None,
        })
        .collect();
    assert_eq!(
        transitions,
        vec![HealthTransition::Down, HealthTransition::Rejoin]
    );
    let health = router.replica_health();
    assert!(health[2].state.is_up());
    assert!(
        health[2]
            .last_probe
            .as_ref()
            .is_some_and(|p| p.outcome.is_healthy())
    );
}

#[test]
fn admission_is_refused_when_every_replica_is_down() {
    let router = paper_router(10);
    for replica in 0..5 {
        router.report_server_failure(ReplicaId(replica), ServerFailureCause::ConnectionRefused);
    }
    router.run_control_step(&HealthConfig::default(), false);
    let error = admit_now(&router, F).expect_err("nothing is up");
    assert_eq!(error, AdmissionError::NoReplicaUp);
    assert_eq!(error.sqlstate(), "57P03");
}

#[test]
fn full_control_queue_refuses_instead_of_waiting() {
    let router = ReplicaRouter::new(RouterConfig {
        name: "tight".to_string(),
        replicas: addresses(5),
        routing: Routing::Plb(paper_settings(2)),
        role_events_capacity: 16,
        control_queue_capacity: 1,
        claim_attempts: 1,
        probe_login: None,
    })
    .expect("router");
    let _full: Vec<_> = (0..4)
        .map(|_| admit_now(&router, P).expect("headroom"))
        .collect();
    let mailbox = ReplyMailbox::new(|| {});
    assert!(matches!(
        router.admit_session(P, &mailbox, 1),
        Admission::Pending
    ));
    let Admission::Refused(error) = router.admit_session(P, &mailbox, 2) else {
        panic!("the queue holds one request")
    };
    assert_eq!(error, AdmissionError::ControlQueueFull);
    router.refuse_pending();
    let reply = mailbox.poll_reply().expect("refused reply");
    assert_eq!(
        reply.result.expect_err("stopped"),
        AdmissionError::ControlStopped
    );
    let Admission::Refused(error) = router.admit_session(P, &mailbox, 3) else {
        panic!("nothing answers after shutdown")
    };
    assert_eq!(error, AdmissionError::ControlStopped);
}

#[test]
fn round_robin_rotates_over_healthy_replicas() {
    let router = router(Routing::RoundRobin);
    router.report_server_failure(ReplicaId(1), ServerFailureCause::ConnectionRefused);
    router.run_control_step(&HealthConfig::default(), false);
    let replicas: Vec<u8> = (0..8)
        .map(|_| admit_now(&router, P).expect("admit").replica().0)
        .collect();
    assert!(!replicas.contains(&1));
    for replica in [0, 2, 3, 4] {
        assert_eq!(replicas.iter().filter(|&&r| r == replica).count(), 2);
    }
}

#[test]
fn dedicated_keeps_each_class_in_its_subset() {
    let router = router(Routing::Dedicated(DedicatedSplit {
        premium: vec![0, 1, 2],
        freemium: vec![3, 4],
    }));
    for _ in 0..6 {
        assert!(admit_now(&router, P).expect("premium").replica().0 <= 2);
        assert!(admit_now(&router, F).expect("freemium").replica().0 >= 3);
    }
}

#[test]
fn alias_entries_share_one_router() {
    let text = r#"
        [pgtier]
        auth_type = "trust"

        [databases.analytics]
        dbname = "postgres"
        user = "health"
        replicas = ["127.0.0.1:15431", "127.0.0.1:15432", "127.0.0.1:15433"]
        routing = "plb"
        class = "freemium"
        [databases.analytics.plb]
        premium = ["127.0.0.1:15431"]
        freemium = ["127.0.0.1:15432"]
        premium_target = 1
        freemium_target = 1

        [databases.analytics_premium]
        dbname = "postgres"
        user = "health"
        replicas = ["127.0.0.1:15431", "127.0.0.1:15432", "127.0.0.1:15433"]
        routing = "plb"
        class = "premium"
        [databases.analytics_premium.plb]
        premium = ["127.0.0.1:15431"]
        freemium = ["127.0.0.1:15432"]
        premium_target = 1
        freemium_target = 1

        [databases.primary]
        host = "127.0.0.1"
    "#;
    let config = Config::from_str(text, "/tmp/pgtier-alias-test.toml").expect("config");
    let map = RouterMap::from_config(&config, default_probe_login).expect("routers");
    assert_eq!(map.routers().len(), 1);
    let plain = map.router("analytics").expect("analytics");
    let alias = map.router("analytics_premium").expect("alias");
    assert!(Arc::ptr_eq(plain, alias));
    assert_eq!(plain.name(), "analytics,analytics_premium");
    assert!(map.router("primary").is_none());
    assert_eq!(plain.probe_login().map(|l| l.user.as_str()), Some("health"));
}

fn replica_config(replicas: &str) -> Config {
    let text = format!(
        r#"
        [pgtier]
        auth_type = "trust"

        [databases.reports]
        dbname = "postgres"
        replicas = ["127.0.0.1:15441", "127.0.0.1:15442"]
        routing = "round_robin"

        [databases.analytics]
        dbname = "postgres"
        replicas = [{replicas}]
        routing = "plb"
        [databases.analytics.plb]
        premium = ["127.0.0.1:15431"]
        freemium = ["127.0.0.1:15432"]
        premium_target = 1
        freemium_target = 1
        theta_premium = 2
        theta_freemium = 2
    "#
    );
    Config::from_str(&text, "/tmp/pgtier-reload-test.toml").expect("config")
}

#[test]
fn reload_keeps_unchanged_routers_and_their_sessions() {
    use crate::plane::{ControlOptions, ControlPlane};
    use std::time::Duration;

    let three = r#""127.0.0.1:15431", "127.0.0.1:15432", "127.0.0.1:15433""#;
    let four = r#""127.0.0.1:15431", "127.0.0.1:15432", "127.0.0.1:15433", "127.0.0.1:15434""#;
    let first = RouterMap::from_config(&replica_config(three), default_probe_login).expect("map");
    let options = ControlOptions {
        probes: false,
        ..ControlOptions::default()
    };
    let old_plane = ControlPlane::start(first.routers(), options).expect("plane");
    let reports = Arc::clone(first.router("reports").expect("reports"));
    let analytics = Arc::clone(first.router("analytics").expect("analytics"));
    let kept = reports
        .admit_session_blocking(P, Duration::from_secs(5))
        .expect("admit");

    // analytics gains a replica; reports is unchanged.
    let second = first
        .reload(&replica_config(four), default_probe_login)
        .expect("reload");
    assert!(Arc::ptr_eq(
        second.router("reports").expect("reports"),
        &reports
    ));
    assert!(!Arc::ptr_eq(
        second.router("analytics").expect("analytics"),
        &analytics
    ));
    let new_plane = ControlPlane::start(second.routers(), options).expect("new plane");
    drop(old_plane);

    // The kept router still answers admissions that need the control shard (none here for
    // round robin, so use the new PLB router to prove the new plane runs), and keeps its count.
    assert_eq!(reports.total_sessions(), 1);
    let new_analytics = second.router("analytics").expect("analytics");
    let borrowed: Vec<_> = (0..3)
        .map(|_| {
            new_analytics
                .admit_session_blocking(P, Duration::from_secs(5))
                .expect("admit")
        })
        .collect();
    assert_eq!(
        new_analytics.events_recorded(),
        1,
        "the third premium session borrowed"
    );
    // The dropped router refuses what needs its (stopped) control shard.
    let mailbox = ReplyMailbox::new(|| {});
    let held: Vec<_> = (0..2)
        .map(|_| admit_now(&analytics, P).expect("headroom is local"))
        .collect();
    let Admission::Refused(error) = analytics.admit_session(P, &mailbox, 9) else {
        panic!("the old plane is gone")
    };
    assert_eq!(error, AdmissionError::ControlStopped);
    drop((kept, borrowed, held));
    assert_eq!(reports.total_sessions() + new_analytics.total_sessions(), 0);
    new_plane.shutdown();
}
