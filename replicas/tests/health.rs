//! Health checks against real PostgreSQL: a primary and five streaming replicas started with
//! `localpg`, probed by the control plane with its default settings. Measures how long a
//! replica killed with `pg_ctl stop -m immediate` keeps receiving new sessions, checks that
//! the role table is repaired to the target of the survivor set (single fault, then a
//! cascade), and that restarted replicas rejoin and the reference layout comes back.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtier_core::config::{PlbSettings, Routing};
use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier_policy::{PlbParams, ReplicaId, RoleVector, ServiceClass};
use pgtier_replicas::probe::Prober;
use pgtier_replicas::{
    ControlOptions, ControlPlane, ProbeLogin, ProbeOutcome, ReplicaRouter, RouterConfig,
    SessionLease,
};

const HEALTH_USER: &str = "pgtier_health";
const HEALTH_PASSWORD: &str = "health-secret";
const ADMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// The published two-class split.
fn published(router: &ReplicaRouter) -> RoleVector {
    router
        .snapshot()
        .table
        .classes()
        .expect("a two-class table")
        .vector()
}
fn login() -> ProbeLogin {
    ProbeLogin {
        user: HEALTH_USER.to_string(),
        password: Some(HEALTH_PASSWORD.to_string()),
        dbname: "postgres".to_string(),
    }
}

struct Cluster {
    // Replicas first so they stop before their primary when dropped.
    replicas: Vec<LocalPg>,
    primary: LocalPg,
}

fn start_cluster() -> Cluster {
    let options = PgOptions {
        auth: HbaAuth::Scram,
        ..PgOptions::default()
    };
    let primary = LocalPg::start_primary(&options).expect("primary");
    primary
        .create_user(HEALTH_USER, HEALTH_PASSWORD)
        .expect("health user");
    let replicas = (0..5)
        .map(|_| LocalPg::start_replica(&primary).expect("replica"))
        .collect();
    Cluster { replicas, primary }
}

fn paper_router(cluster: &Cluster) -> Arc<ReplicaRouter> {
    ReplicaRouter::new(RouterConfig {
        name: "analytics".to_string(),
        replicas: cluster
            .replicas
            .iter()
            .map(|pg| ([127, 0, 0, 1], pg.port()).into())
            .collect(),
        routing: Routing::Plb(PlbSettings {
            premium: vec![0, 1],
            freemium: vec![2, 3],
            params: PlbParams::PAPER
                .with_theta(ServiceClass::Premium, 10)
                .with_theta(ServiceClass::Freemium, 10),
            load_signal: Default::default(),
            recovery_drain: false,
            tiers: None,
        }),
        role_events_capacity: 1024,
        control_queue_capacity: 1024,
        claim_attempts: 8,
        probe_login: Some(login()),
    })
    .expect("router")
}

/// Polls `condition` every millisecond; returns how long it took, or panics after `limit`.
fn wait_for(what: &str, limit: Duration, condition: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    started.elapsed()
}

fn vector(premium: usize, mixed: usize, freemium: usize) -> RoleVector {
    RoleVector {
        premium,
        mixed,
        freemium,
    }
}

fn admit_many(router: &Arc<ReplicaRouter>, count: usize) -> Vec<SessionLease> {
    (0..count)
        .map(|i| {
            let class = if i % 2 == 0 {
                ServiceClass::Premium
            } else {
                ServiceClass::Freemium
            };
            router
                .admit_session_blocking(class, ADMIT_TIMEOUT)
                .expect("admitted")
        })
        .collect()
}

/// How long a killed replica kept receiving new sessions.
struct Detection {
    /// From the start of `pg_ctl stop -m immediate` to Down in the published snapshot.
    from_kill: Duration,
    /// From `pg_ctl` returning (the postmaster is gone) to Down.
    from_stopped: Duration,
}

impl std::fmt::Display for Detection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Down {:?} after pg_ctl stop started, {:?} after it returned",
            self.from_kill, self.from_stopped
        )
    }
}

fn kill_and_time(router: &ReplicaRouter, replica: &LocalPg, id: ReplicaId) -> Detection {
    let kill = Instant::now();
    replica.stop_immediate().expect("pg_ctl stop -m immediate");
    let stopped = Instant::now();
    wait_for("Down of the killed replica", Duration::from_secs(2), || {
        router.is_down(id)
    });
    Detection {
        from_kill: kill.elapsed(),
        from_stopped: stopped.elapsed(),
    }
}

#[test]
fn killed_replicas_are_detected_repaired_around_and_rejoin() {
    let total = Instant::now();
    let cluster = start_cluster();
    println!(
        "cluster of 1 primary + 5 replicas up in {:?}",
        total.elapsed()
    );
    let router = paper_router(&cluster);
    let plane =
        ControlPlane::start(&[Arc::clone(&router)], ControlOptions::default()).expect("plane");
    wait_for(
        "every replica up and probed",
        Duration::from_secs(10),
        || {
            router.replica_health().iter().all(|h| {
                h.state.is_up()
                    && h.last_probe
                        .as_ref()
                        .is_some_and(|p| p.outcome.is_healthy())
            })
        },
    );
    assert_eq!(published(&router), vector(2, 1, 2));
    let mut sessions = admit_many(&router, 12);

    // Single fault on a premium replica.
    let detection = kill_and_time(&router, &cluster.replicas[0], ReplicaId(0));
    println!("replica 0 killed with pg_ctl stop -m immediate (default settings): {detection}");
    assert!(detection.from_kill < Duration::from_secs(2));
    assert_eq!(published(&router), vector(2, 0, 2), "target for K+ = 4");
    let after_fault = admit_many(&router, 20);
    assert!(
        after_fault
            .iter()
            .all(|lease| lease.replica() != ReplicaId(0))
    );
    sessions.extend(after_fault);

    // Cascade: a second premium replica.
    let detection = kill_and_time(&router, &cluster.replicas[1], ReplicaId(1));
    println!("replica 1 killed (cascade): {detection}");
    assert!(detection.from_kill < Duration::from_secs(2));
    assert_eq!(published(&router), vector(2, 0, 1), "target for K+ = 3");
    let after_cascade = admit_many(&router, 20);
    assert!(after_cascade.iter().all(|lease| lease.replica().0 >= 2));
    sessions.extend(after_cascade);

    // Recovery: both restart and rejoin; the reference split (2, 1, 2) comes back.
    for replica in &cluster.replicas[..2] {
        replica.start().expect("restart");
    }
    let restarted = Instant::now();
    wait_for("rejoin of both replicas", Duration::from_secs(10), || {
        !router.is_down(ReplicaId(0)) && !router.is_down(ReplicaId(1))
    });
    println!(
        "replicas 0 and 1 rejoined {:?} after pg_ctl start returned",
        restarted.elapsed()
    );
    assert_eq!(published(&router), vector(2, 1, 2));

    drop(sessions);
    assert_eq!(router.total_sessions(), 0, "no count leaked");
    let events = router.events();
    for event in &events {
        println!("event {:>3} {:?}", event.seq, event.kind);
    }
    plane.shutdown();
    println!("whole test took {:?}", total.elapsed());
    drop(cluster.primary);
}

#[test]
fn probe_of_a_primary_reports_a_promotion() {
    let primary = LocalPg::start_primary(&PgOptions {
        auth: HbaAuth::Md5,
        password_encryption: "md5",
        ..PgOptions::default()
    })
    .expect("primary");
    primary
        .create_user(HEALTH_USER, HEALTH_PASSWORD)
        .expect("user");
    let mut prober = Prober::new(
        ([127, 0, 0, 1], primary.port()).into(),
        Some(login()),
        Duration::from_millis(500),
    );
    match prober.probe() {
        ProbeOutcome::Failed { cause } => assert!(cause.contains("promoted"), "{cause}"),
        healthy => panic!("a primary is not a healthy replica: {healthy:?}"),
    }
    let mut wrong = Prober::new(
        ([127, 0, 0, 1], primary.port()).into(),
        Some(ProbeLogin {
            password: Some("wrong".to_string()),
            ..login()
        }),
        Duration::from_millis(500),
    );
    match wrong.probe() {
        ProbeOutcome::Failed { cause } => assert!(cause.contains("28P01"), "{cause}"),
        healthy => panic!("a bad password cannot pass: {healthy:?}"),
    }
    let mut handshake = Prober::new(
        ([127, 0, 0, 1], primary.port()).into(),
        None,
        Duration::from_millis(500),
    );
    assert!(
        handshake.probe().is_healthy(),
        "the postmaster answers an SSLRequest"
    );
}
