//! The shard's side of replica routing over the fake ring: a login whose admission needs the
//! control shard waits in `WaitingForReplica` and continues when the reply arrives through the
//! shard's mailbox; a reply for a client that left is dropped and its count released.

use std::net::SocketAddr;
use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize};

use bytes::BytesMut;
use pgtier_core::config::Config;

use crate::client::ClientState;
use crate::control::{HealthConfig, ReplicaRouter, ReplyMailbox, RouterMap};
use crate::io::fake::{FakeRing, Pending};
use crate::io::op_key::OpKind;
use crate::io::slab::ClientId;
use crate::mailbox::Mailbox;
use crate::pool::PoolBudgets;
use crate::proto;
use crate::routing::SharedRouting;
use crate::shard::{Shard, Shared};
use crate::stats::SharedStats;
use crate::userlist::UserList;

/// Five replicas nobody listens on (the fake ring never connects), theta 2 so the fifth
/// premium session needs a borrow from Mixed, which only the control shard applies.
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

fn routed_shard() -> (Shard<FakeRing>, Arc<ReplicaRouter>) {
    let config = Config::from_str(CONFIG, "/tmp/routing.toml").expect("config");
    let map = RouterMap::from_config(&config, |_| None).expect("routers");
    let router = map.routers()[0].clone();
    let mailbox = Arc::new(Mailbox::new(16).expect("eventfd"));
    let waker = mailbox.clone();
    let replies = vec![ReplyMailbox::new(move || waker.wake())];
    let shared = Arc::new(Shared {
        mailboxes: vec![mailbox],
        budgets: Arc::new(PoolBudgets::default()),
        stats: Arc::new(SharedStats::default()),
        totals: Arc::new(pgtier_core::metrics::SharedTotals::new()),
        clients: AtomicU32::new(0),
        finished_shards: AtomicUsize::new(0),
        routing: SharedRouting::new(map, replies),
    });
    let users = Arc::new(UserList::new());
    let mut shard = Shard::new(0, FakeRing::new(), Arc::new(config), users, shared, None);
    shard.start();
    (shard, router)
}

fn socket_fd() -> i32 {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.into_raw_fd()
}

fn recv_of(id: ClientId) -> impl Fn(&Pending) -> bool {
    move |p| p.key.kind == OpKind::ClientRecv && p.key.index == id.0.index
}

/// A client of `alice` on `analytics` that has sent its StartupMessage.
fn log_in(shard: &mut Shard<FakeRing>) -> ClientId {
    shard.admit_client(socket_fd());
    let id = shard
        .clients
        .slots()
        .find(|(_, client)| matches!(client.state, ClientState::Startup))
        .map(|(slot, _)| ClientId(slot))
        .expect("new client");
    let recv = shard.ring.take(recv_of(id)).expect("client recv armed");
    let mut startup = BytesMut::new();
    proto::startup_message(
        &mut startup,
        &[("user", "alice"), ("database", "analytics")],
    );
    shard.ring.deliver(recv, &startup);
    shard.turn(false).expect("turn");
    id
}

fn replica_addr_of(shard: &Shard<FakeRing>, id: ClientId) -> SocketAddr {
    let pool = shard.clients.get(id.0).and_then(|c| c.pool).expect("pool");
    shard.pools.get(pool).key.addr
}

/// Lets the control shard answer (on this thread) and the shard read its mailbox.
fn control_answers(shard: &mut Shard<FakeRing>, router: &Arc<ReplicaRouter>) {
    router.run_control_step(&HealthConfig::default(), false);
    let wake = shard
        .ring
        .take(|p| p.key.kind == OpKind::MailboxRead)
        .expect("mailbox read armed");
    shard.ring.complete(wake, 8, false);
    shard.turn(false).expect("turn");
}

#[test]
fn pending_admission_waits_for_the_reply_then_joins_the_borrowed_replica() {
    let (mut shard, router) = routed_shard();
    let ports: Vec<u16> = (0..4)
        .map(|_| {
            let id = log_in(&mut shard);
            replica_addr_of(&shard, id).port()
        })
        .collect();
    assert_eq!(ports, [1, 2, 1, 2], "headroom on the premium replicas");

    let fifth = log_in(&mut shard);
    assert!(matches!(
        shard.clients.get(fifth.0).map(|c| &c.state),
        Some(ClientState::WaitingForReplica { .. })
    ));
    control_answers(&mut shard, &router);
    assert!(matches!(
        shard.clients.get(fifth.0).map(|c| &c.state),
        Some(ClientState::WaitingForServer { .. })
    ));
    assert_eq!(
        replica_addr_of(&shard, fifth).port(),
        5,
        "borrowed from Mixed"
    );
    assert_eq!(router.total_sessions(), 5);

    shard.close_client(fifth, None);
    assert_eq!(router.total_sessions(), 4, "the lease is released at close");
}

#[test]
fn reply_for_a_client_that_left_releases_its_count() {
    let (mut shard, router) = routed_shard();
    for _ in 0..4 {
        log_in(&mut shard);
    }
    let fifth = log_in(&mut shard);
    assert!(matches!(
        shard.clients.get(fifth.0).map(|c| &c.state),
        Some(ClientState::WaitingForReplica { .. })
    ));
    shard.close_client(fifth, None);
    control_answers(&mut shard, &router);
    assert_eq!(
        router.total_sessions(),
        4,
        "the orphan reply's lease was dropped"
    );
}
