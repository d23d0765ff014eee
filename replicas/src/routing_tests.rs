//! The engine's replica routing served by the control shard's routers: a login whose
//! admission needs the control shard waits, and continues on the borrowed replica when the
//! reply arrives through the shard's reply mailbox; a reply for a client that left is dropped
//! and its count released; connection failures reach the router.

use std::sync::Arc;

use pgtier_core::config::Config;
use pgtier_engine::testing::Harness;

use crate::routing::{ShardRouting, SharedRouting};
use crate::{HealthConfig, ReplicaRouter, ReplyMailbox, RouterMap};

/// Five replicas, theta 2 so the fifth premium session needs a borrow from Mixed, which only
/// the control shard applies.
const CONFIG: &str = r#"
[pgtier]
listen_port = 6432
auth_type = "trust"
pool_mode = "transaction"
[databases.analytics]
dbname = "postgres"
user = "postgres"
replicas = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"]
routing = "plb"
[databases.analytics.plb]
premium = ["127.0.0.1:1", "127.0.0.1:2"]
freemium = ["127.0.0.1:3", "127.0.0.1:4"]
theta_premium = 2
theta_freemium = 2
[users.alice]
class = "premium"
"#;

fn routed() -> (Harness, Arc<ReplicaRouter>) {
    let config = Config::from_str(CONFIG, "/tmp/routing.toml").expect("config");
    let map = RouterMap::from_config(&config, |_| None).expect("routers");
    let router = map.routers()[0].clone();
    let replies = ReplyMailbox::new(|| {});
    let routing = ShardRouting::new(Arc::new(SharedRouting::new(map)), replies);
    (Harness::with_routing(CONFIG, Box::new(routing)), router)
}

/// Premium sessions per replica, in the router's order.
fn premium_per_replica(router: &ReplicaRouter) -> Vec<u32> {
    (0..router.replica_count())
        .filter_map(pgtier_policy::ReplicaId::from_index)
        .map(|replica| router.load(replica).premium)
        .collect()
}

#[test]
fn a_pending_admission_waits_for_the_reply_then_joins_the_borrowed_replica() {
    let (mut h, router) = routed();
    for _ in 0..4 {
        let (_, messages) = h.login("alice", "analytics");
        assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'), "welcomed");
    }
    assert_eq!(
        premium_per_replica(&router),
        [2, 2, 0, 0, 0],
        "headroom on the premium replicas"
    );
    let (fifth, messages) = h.login("alice", "analytics");
    assert!(messages.is_empty(), "the fifth waits for the control shard");
    router.run_control_step(&HealthConfig::default(), false);
    h.engine.handle_routing_replies(h.now);
    h.pump();
    assert_eq!(
        premium_per_replica(&router),
        [2, 2, 0, 0, 1],
        "borrowed from Mixed"
    );
    assert_eq!(h.connects.last().map(|(_, addr)| addr.port()), Some(5));
    assert_eq!(h.client_output(fifth).last().map(|m| m.tag), Some(b'Z'));
    h.client_leaves(fifth);
    assert_eq!(router.total_sessions(), 4, "the lease is released at close");
}

#[test]
fn a_reply_for_a_client_that_left_releases_its_count() {
    let (mut h, router) = routed();
    for _ in 0..4 {
        h.login("alice", "analytics");
    }
    let (fifth, _) = h.login("alice", "analytics");
    h.client_leaves(fifth);
    router.run_control_step(&HealthConfig::default(), false);
    h.engine.handle_routing_replies(h.now);
    h.pump();
    assert_eq!(
        router.total_sessions(),
        4,
        "the orphan reply's lease was dropped"
    );
}

#[test]
fn a_refused_connect_to_a_replica_is_reported_to_its_router() {
    let (mut h, router) = routed();
    h.auto_backend = false;
    let id = h.accept();
    h.client_sends(
        id,
        &pgtier_engine::testing::startup(&[("user", "alice"), ("database", "analytics")]),
    );
    let (server, addr) = h.connecting[0].clone();
    let addr = addr.tcp().expect("a replica is a TCP address");
    h.engine
        .handle_server_connected(h.now, server, Err(111 /* ECONNREFUSED */));
    h.pump();
    router.run_control_step(&HealthConfig::default(), false);
    let replica = router.replica_id(addr).expect("a replica of the router");
    assert!(router.is_down(replica), "reported and marked Down at once");
}

#[test]
fn a_session_placed_by_the_control_shard_is_re_pinned_on_the_same_router() {
    let (mut h, router) = routed();
    for _ in 0..4 {
        h.login("alice", "analytics");
    }
    let (fifth, _) = h.login("alice", "analytics");
    router.run_control_step(&HealthConfig::default(), false);
    h.engine.handle_routing_replies(h.now);
    h.pump();
    assert_eq!(premium_per_replica(&router), [2, 2, 0, 0, 1], "borrowed");
    h.client_output(fifth);

    // The borrowed replica fails; the fifth session's next transaction moves it, through the
    // router remembered with its pending admission.
    router.report_server_failure(
        pgtier_policy::ReplicaId(4),
        crate::ServerFailureCause::ConnectionReset,
    );
    router.run_control_step(&HealthConfig::default(), false);
    h.client_sends(fifth, &pgtier_engine::testing::query("select 1"));
    h.pump();
    router.run_control_step(&HealthConfig::default(), false);
    h.engine.handle_routing_replies(h.now);
    h.pump();
    assert_eq!(router.total_sessions(), 5, "moved, not lost or doubled");
    assert_eq!(
        router.load(pgtier_policy::ReplicaId(4)).premium,
        0,
        "off the Down replica"
    );
    assert_eq!(router.stats().repins, 1);
    assert_eq!(h.client_output(fifth).last().map(|m| m.tag), Some(b'Z'));
}
