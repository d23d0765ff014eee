//! Replica failures through the real proxy: five streaming replicas under a mixed load of both
//! classes in transaction mode; one premium replica is killed with `pg_ctl stop -m immediate`,
//! then a second (cascade), then both restart. Measures how long the killed replica kept
//! receiving new sessions, checks the repaired role layout, that sessions elsewhere see no
//! error, that idle sessions pinned to the dead replica continue on another one without an
//! error, and that every count is back to zero at the end.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use common::replicas::{self, Cluster, Session, layout, open, wait_for};
use pgtier::ProxyHandle;
use pgtier_policy::{ReplicaId, RoleVector};
use pgtier_replicas::{EventKind, HealthTransition};

const DETECTION_LIMIT: Duration = Duration::from_secs(2);
const REJOIN_LIMIT: Duration = Duration::from_secs(15);

/// A session querying in a loop until told to stop; gives back the session, its error
/// count and its query count.
struct Load {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Session, u64, u64)>,
}

fn start_load(mut session: Session, port_of: Vec<String>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        let (mut errors, mut queries) = (0, 0);
        while !flag.load(Ordering::Acquire) {
            match session.client.query("SELECT inet_server_port()") {
                Ok(rows) if rows.first() == Some(&port_of[session.replica]) => {}
                Ok(rows) => panic!("pinned session moved: {rows:?}"),
                Err(error) => {
                    println!("load error: {error:?}");
                    errors += 1;
                    break;
                }
            }
            queries += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        (session, errors, queries)
    });
    Load { stop, thread }
}

fn stop_load(load: Load) -> Session {
    load.stop.store(true, Ordering::Release);
    let (session, errors, queries) = load.thread.join().expect("load thread");
    assert_eq!(errors, 0, "a session not on a killed replica saw an error");
    assert!(queries > 0);
    session
}

/// (interval_queries, p50_ms, p95_ms) of premium and freemium from `SHOW CLASS_STATS`.
fn per_class_interval(proxy: &ProxyHandle) -> Vec<(u64, f64, f64)> {
    replicas::admin(proxy, "CLASS_STATS")
        .iter()
        .map(|line| {
            let cols: Vec<&str> = line.split('|').collect();
            let number = |i: usize| cols[i].parse::<f64>().unwrap_or(0.0);
            (number(5) as u64, number(7), number(8))
        })
        .collect()
}

fn vector(proxy: &ProxyHandle) -> RoleVector {
    proxy.routers().routers()[0]
        .snapshot()
        .table
        .classes()
        .expect("a two-class table")
        .vector()
}

fn expect_vector(proxy: &ProxyHandle, premium: usize, mixed: usize, freemium: usize) {
    let wanted = RoleVector {
        premium,
        mixed,
        freemium,
    };
    wait_for("repair to target", Duration::from_secs(2), || {
        vector(proxy) == wanted
    });
}

/// Kills `victim` and returns how long it took until new sessions stopped landing on it
/// (Down in the snapshot every admission reads).
fn kill(proxy: &ProxyHandle, cluster: &Cluster, victim: usize) -> Duration {
    let router = proxy.routers().routers()[0].clone();
    let replica = ReplicaId(victim as u8);
    let started = Instant::now();
    let started_at = SystemTime::now();
    cluster.replicas[victim]
        .stop_immediate()
        .expect("pg_ctl stop -m immediate");
    let stopped = started.elapsed();
    wait_for("Down of the killed replica", DETECTION_LIMIT, || {
        router.is_down(replica)
    });
    // The Down event's own timestamp: polling after pg_ctl returns would only measure pg_ctl.
    let down = router
        .events()
        .into_iter()
        .rev()
        .find_map(|event| match event.kind {
            EventKind::Health {
                replica: r,
                transition: HealthTransition::Down,
                cause,
            } if r == replica => Some((event.at, cause)),
            _ => None,
        })
        .expect("a Down event");
    let detected = down.0.duration_since(started_at).unwrap_or_default();
    println!(
        "replica {victim} killed: Down (no new session lands on it) {detected:?} after \
         pg_ctl stop started, cause: {}; pg_ctl itself took {stopped:?}",
        down.1
    );
    detected
}

/// Idle sessions that were on `dead` run their next transaction elsewhere without an error.
fn idle_sessions_continue(sessions: &mut [Session], cluster: &Cluster, dead: usize) {
    for session in sessions.iter_mut().filter(|s| s.replica == dead) {
        let port = session
            .client
            .query("SELECT inet_server_port()")
            .expect("an idle session on the dead replica continues without an error");
        session.replica = cluster.index_of(&port[0]);
        assert_ne!(session.replica, dead, "re-pinned to a live replica");
    }
}

#[test]
fn killed_replica_gets_no_new_sessions_and_idle_sessions_continue() {
    let total = Instant::now();
    let cluster = Cluster::start();
    let ports: Vec<String> = cluster
        .replicas
        .iter()
        .map(|r| r.port().to_string())
        .collect();
    let proxy = common::start_proxy(&replicas::config(
        &cluster,
        "transaction",
        10,
        "stats_period = 1",
    ));
    let router = proxy.routers().routers()[0].clone();
    wait_for(
        "every replica probed healthy",
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
    expect_vector(&proxy, 2, 1, 2);

    // 8 premium sessions spread over replicas 0 and 1, 8 freemium over 2 and 3.
    let mut idle = Vec::new();
    let mut loads = Vec::new();
    for i in 0..16 {
        let user = if i % 2 == 0 { "alice" } else { "bob" };
        let session = open(&proxy, &cluster, user, "analytics", &[]).expect("session");
        if session.replica == 0 {
            idle.push(session);
        } else {
            loads.push(start_load(session, ports.clone()));
        }
    }
    assert_eq!(
        idle.len(),
        4,
        "premium sessions alternate between replicas 0 and 1"
    );
    std::thread::sleep(Duration::from_millis(200));

    // Single fault on premium replica 0.
    let first = kill(&proxy, &cluster, 0);
    expect_vector(&proxy, 2, 0, 2);
    for _ in 0..8 {
        let session = open(&proxy, &cluster, "alice", "analytics", &[]).expect("new session");
        assert_ne!(
            session.replica, 0,
            "a new session landed on the dead replica"
        );
        idle.push(session);
    }
    idle_sessions_continue(&mut idle, &cluster, 0);
    println!("after the first fault: {:?}", layout(&proxy, &cluster));
    assert_eq!(
        layout(&proxy, &cluster)[0].1,
        0,
        "no session counted on replica 0"
    );

    // Cascade: replica 1. Sessions there stop their load first (they are idle at the kill).
    let mut still_running = Vec::new();
    for load in loads {
        let session = stop_load(load);
        if session.replica == 1 {
            idle.push(session);
        } else {
            still_running.push(start_load(session, ports.clone()));
        }
    }
    let loads = still_running;
    let second = kill(&proxy, &cluster, 1);
    expect_vector(&proxy, 2, 0, 1);
    idle_sessions_continue(&mut idle, &cluster, 1);
    idle_sessions_continue(&mut idle, &cluster, 0);
    println!("after the cascade: {:?}", layout(&proxy, &cluster));

    // Recovery: both restart, rejoin, and the reference layout (2, 1, 2) comes back.
    for replica in &cluster.replicas[..2] {
        replica.start().expect("restart");
    }
    let rejoin = wait_for("rejoin of both replicas", REJOIN_LIMIT, || {
        !router.is_down(ReplicaId(0)) && !router.is_down(ReplicaId(1))
    });
    println!("replicas 0 and 1 rejoined {rejoin:?} after pg_ctl start returned");
    expect_vector(&proxy, 2, 1, 2);
    let after = open(&proxy, &cluster, "alice", "analytics", &[]).expect("after recovery");
    idle.push(after);

    // Goodput and latency per class and observation interval (stats_period = 1 s).
    wait_for(
        "an interval with both classes",
        Duration::from_secs(5),
        || {
            per_class_interval(&proxy)
                .iter()
                .all(|(queries, _, _)| *queries > 0)
        },
    );
    let interval = per_class_interval(&proxy);
    println!("SHOW CLASS_STATS interval (queries, p50_ms, p95_ms) premium, freemium: {interval:?}");
    for (_, p50, p95) in &interval {
        assert!(p50 <= p95 && *p95 > 0.0, "{interval:?}");
    }
    for load in loads {
        idle.push(stop_load(load));
    }
    for event in replicas::admin(&proxy, "EVENTS") {
        println!("event: {event}");
    }
    drop(idle);
    wait_for("counts back to zero", Duration::from_secs(5), || {
        layout(&proxy, &cluster)
            .iter()
            .all(|row| row.1 == 0 && row.2 == 0)
    });
    assert_eq!(router.total_sessions(), 0);
    // No server connection leaks: each replica holds at most the servers of its pools (two
    // entries with pool size 20, both logging in as the forced user) plus the health probe's
    // connection, and none once pgtier has exited.
    for (index, replica) in cluster.replicas.iter().enumerate() {
        let servers = pooled_backends(replica);
        println!("replica {index}: {servers} pooled server connections after the test");
        assert!(
            servers <= 2 * 20 + 1,
            "replica {index} holds {servers} servers"
        );
    }
    println!(
        "detection: first fault {first:?}, cascade {second:?}; whole test {:?}",
        total.elapsed()
    );
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("pgtier never crashed");
    for (index, replica) in cluster.replicas.iter().enumerate() {
        wait_for(
            &format!("replica {index} has no pgtier server left"),
            Duration::from_secs(5),
            || pooled_backends(replica) == 0,
        );
    }
}

/// Client backends on one replica other than the one asking, as PostgreSQL sees them: the
/// entries force the server user `postgres`, so these are pgtier's servers and its probe.
fn pooled_backends(replica: &pgtier_core::localpg::LocalPg) -> usize {
    replica
        .psql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity \
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(usize::MAX)
}
