//! What a client sees when the replica under it dies while it holds server state: inside a
//! transaction (transaction mode) or for its whole life (session mode) nothing can be saved,
//! so it gets an ErrorResponse and is disconnected; a new session of the same client lands on
//! a live replica, and a reload keeps the routers (roles, health, counts) as they were.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::replicas::{self, Cluster, open, wait_for};
use pgtier_core::config::Config;
use pgtier_policy::ReplicaId;

#[test]
fn sessions_holding_server_state_on_a_dead_replica_get_an_error() {
    let cluster = Cluster::start();
    let transaction = common::start_proxy(&replicas::config(&cluster, "transaction", 10, ""));
    let session_text = replicas::config(&cluster, "session", 10, "");
    let session = common::start_proxy(&session_text);

    let mut in_tx = open(&transaction, &cluster, "alice", "analytics", &[]).expect("tx");
    assert_eq!(in_tx.replica, 0);
    in_tx.client.query("BEGIN").expect("begin");
    in_tx
        .client
        .query("SELECT 1")
        .expect("inside the transaction");
    let mut pinned = open(&session, &cluster, "alice", "analytics", &[]).expect("session");
    assert_eq!(pinned.replica, 0);
    // Re-pinning off: an idle transaction-mode session on the dead replica is disconnected.
    let no_repin_text =
        replicas::config(&cluster, "transaction", 10, "repin_idle_sessions = false");
    let no_repin = common::start_proxy(&no_repin_text);
    let mut stranded = open(&no_repin, &cluster, "alice", "analytics", &[]).expect("no repin");
    assert_eq!(stranded.replica, 0);
    // No idle server left to notice the death and probes too slow to: the session's next
    // transaction queues on the dead replica's pool, its connect is refused and reported, and
    // the queued client is re-routed instead of failed.
    let idle_text = replicas::config(
        &cluster,
        "transaction",
        10,
        "server_idle_timeout = 0.3\nhealth_check_interval = 30",
    )
    // Without a forced server user the probes only handshake, so they cannot see the death
    // before their next interval (30 s here).
    .replace("user = \"postgres\"\n", "");
    let no_idle_servers = common::start_proxy(&idle_text);
    let mut waiter = open(&no_idle_servers, &cluster, "alice", "analytics", &[]).expect("idle");
    assert_eq!(waiter.replica, 0);
    std::thread::sleep(Duration::from_millis(1200));

    cluster.replicas[0]
        .stop_immediate()
        .expect("pg_ctl stop -m immediate");
    let port = waiter
        .client
        .query("SELECT inet_server_port()")
        .expect("a client queued on a dead replica is re-routed, not failed");
    assert_ne!(cluster.index_of(&port[0]), 0);
    let router = no_idle_servers.routers().routers()[0].clone();
    let reports = router.stats().failure_reports;
    println!("queued client re-routed; shard failure reports on that proxy: {reports}");
    assert!(
        reports >= 1,
        "the refused connect was reported (probes are slow here)"
    );
    for proxy in [&transaction, &session, &no_repin] {
        let router = proxy.routers().routers()[0].clone();
        wait_for("Down", Duration::from_secs(2), || {
            router.is_down(ReplicaId(0))
        });
    }

    let error = in_tx
        .client
        .query("SELECT 2")
        .expect_err("the transaction is gone");
    println!("inside a transaction: {error:?}");
    assert!(["57P01", "08006"].contains(&error.0.as_str()), "{error:?}");
    let error = pinned
        .client
        .query("SELECT 2")
        .expect_err("the session is gone");
    println!("session mode: {error:?}");
    assert!(["57P01", "08006"].contains(&error.0.as_str()), "{error:?}");

    let error = stranded
        .client
        .query("SELECT 2")
        .expect_err("repin_idle_sessions = false disconnects");
    println!("idle session, re-pinning off: {error:?}");
    assert_eq!(error.0, "08006", "{error:?}");

    for proxy in [&transaction, &session] {
        let fresh = open(proxy, &cluster, "alice", "analytics", &[]).expect("reconnect");
        assert_ne!(fresh.replica, 0, "a new session lands on a live replica");
    }

    // SIGHUP with an unchanged replica set keeps its router: health and roles carry over.
    let before = session.routers().routers()[0].clone();
    let config = Config::from_str(
        &session_text,
        std::env::temp_dir().join("pgtier-reload.toml"),
    )
    .expect("valid config");
    session.reload(config).expect("reload");
    let after = session.routers().routers()[0].clone();
    assert!(
        Arc::ptr_eq(&before, &after),
        "an unchanged replica set keeps its router"
    );
    assert!(after.is_down(ReplicaId(0)));
    let fresh = open(&session, &cluster, "bob", "analytics", &[]).expect("after reload");
    assert!([2, 3].contains(&fresh.replica));
    drop(fresh);

    cluster.replicas[0].start().expect("restart");
    wait_for(
        "rejoin under the new control plane",
        Duration::from_secs(15),
        || !after.is_down(ReplicaId(0)),
    );
    drop((in_tx, pinned, stranded, waiter));
    for proxy in [transaction, session, no_repin, no_idle_servers] {
        let router = proxy.routers().routers()[0].clone();
        wait_for("counts back to zero", Duration::from_secs(5), || {
            router.total_sessions() == 0
        });
        proxy.shutdown(pgtier::ShutdownMode::Immediate);
        proxy.join().expect("clean shutdown");
    }
}
