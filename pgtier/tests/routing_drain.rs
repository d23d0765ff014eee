//! PLB's recovery-tail drain (`recovery_drain = true`) through the real proxy over a primary
//! and five streaming replicas: a premium replica is killed with `pg_ctl stop -m immediate`,
//! its sessions re-pin past θ onto the survivors, it restarts and rejoins as Mixed, and at
//! their next transaction the sessions of the overloaded survivors move onto it (borrowing
//! it) until no survivor is past θ; the others stay, and no client sees an error.

mod common;

use std::time::Duration;

use common::replicas::{self, Cluster, Session, layout, open, roles, wait_for};
use pgtier_policy::ReplicaId;

const DETECTION_LIMIT: Duration = Duration::from_secs(5);
const REJOIN_LIMIT: Duration = Duration::from_secs(20);

/// Runs one transaction in each session and records where it ran.
fn query_all(sessions: &mut [Session], cluster: &Cluster) {
    for session in sessions.iter_mut() {
        let port = session
            .client
            .query("SELECT inet_server_port()")
            .expect("a session continues without an error");
        session.replica = cluster.index_of(&port[0]);
    }
}

fn premium_counts(proxy: &pgtier::ProxyHandle, cluster: &Cluster) -> Vec<u32> {
    layout(proxy, cluster).iter().map(|row| row.1).collect()
}

#[test]
fn after_a_rejoin_sessions_leave_overloaded_survivors_for_the_rejoined_replica() {
    let cluster = Cluster::start();
    // θ = 2; freemium_floor = 2 keeps premium from borrowing a freemium replica, so re-pinned
    // sessions overload the premium survivors instead.
    let config = replicas::config(&cluster, "transaction", 2, "")
        .replace("freemium_floor = 1\n", "freemium_floor = 2\n")
        .replace(
            "freemium_target = 2\n",
            "freemium_target = 2\nrecovery_drain = true\n",
        );
    let proxy = common::start_proxy(&config);
    let router = proxy.routers().routers()[0].clone();
    wait_for("every replica probed healthy", DETECTION_LIMIT, || {
        router.replica_health().iter().all(|h| {
            h.state.is_up()
                && h.last_probe
                    .as_ref()
                    .is_some_and(|p| p.outcome.is_healthy())
        })
    });

    // Six premium sessions: two on each premium replica, two on the borrowed Mixed one.
    let mut sessions: Vec<Session> = (0..6)
        .map(|_| open(&proxy, &cluster, "alice", "analytics", &[]).expect("premium"))
        .collect();
    assert_eq!(premium_counts(&proxy, &cluster), [2, 2, 0, 0, 2]);

    // Replica 1 dies; its two idle sessions re-pin at their next transaction. Replica 4 is
    // Premium now (canonicalized), both survivors are at θ and nothing can be borrowed: they
    // land past θ.
    cluster.replicas[1]
        .stop_immediate()
        .expect("pg_ctl stop -m immediate");
    wait_for("Down of replica 1", DETECTION_LIMIT, || {
        router.is_down(ReplicaId(1))
    });
    query_all(&mut sessions, &cluster);
    assert_eq!(premium_counts(&proxy, &cluster), [3, 0, 0, 0, 3]);
    assert_eq!(roles(&proxy, &cluster)[4], "premium");
    let before: Vec<usize> = sessions.iter().map(|s| s.replica).collect();

    // Replica 1 restarts and rejoins as Mixed (the reference split is whole again).
    cluster.replicas[1].start().expect("restart");
    wait_for("rejoin of replica 1", REJOIN_LIMIT, || {
        roles(&proxy, &cluster)[1] == "mixed"
    });

    // Next transactions: one session leaves each overloaded survivor for replica 1 (borrowed
    // for premium); after that no survivor is past θ and everyone else stays.
    query_all(&mut sessions, &cluster);
    assert_eq!(premium_counts(&proxy, &cluster), [2, 2, 0, 0, 2]);
    assert_eq!(roles(&proxy, &cluster)[1], "borrowed_to_premium");
    let moved: Vec<(usize, usize)> = before
        .iter()
        .zip(&sessions)
        .filter(|(was, now)| **was != now.replica)
        .map(|(was, now)| (*was, now.replica))
        .collect();
    assert_eq!(moved.len(), 2, "moves: {moved:?}");
    assert!(moved.iter().all(|&(_, to)| to == 1), "moves: {moved:?}");
    assert_eq!(router.stats().drain_moves, 2);

    // A second round moves nobody: each session asks once per rejoin.
    query_all(&mut sessions, &cluster);
    assert_eq!(premium_counts(&proxy, &cluster), [2, 2, 0, 0, 2]);
    assert_eq!(router.stats().drain_moves, 2);

    // Replica 4 stays Premium (canonicalized at the Down): the reference split (2, 1, 2) is
    // whole again, with replica 1 as its Mixed one once its borrow returns.
    drop(sessions);
    let roles = ["premium", "mixed", "freemium", "freemium", "premium"];
    replicas::expect_released_and_stop(proxy, &cluster, DETECTION_LIMIT, roles);
}
