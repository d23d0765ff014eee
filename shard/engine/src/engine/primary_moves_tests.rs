//! A reader entry's primary moving (`primary_moves.rs`), through the kernel-less harness:
//! the routing service is a script whose elected primary the test changes.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::action::Conn;
use crate::addr::ServerAddr;
use crate::services::{
    Admission, AdmissionReply, ElectedServer, FailureCause, PrimaryNow, ReadRequest, ReadRoute,
    ReplicaLease, Routing,
};
use crate::testing::{Harness, query, startup};
use pgtier_policy::tiers::Tier;

const OLD: &str = "127.0.0.1:5000";
const NEW: &str = "127.0.0.1:5001";

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap_or_else(|_| unreachable!())
}

/// Every read on the primary; the primary is whatever the test put in the cell.
struct Elected(Arc<Mutex<PrimaryNow>>);

impl Routing for Elected {
    fn is_routed(&self, _: &str) -> bool {
        false
    }
    fn admit(&self, _: &str, _: Tier, _: u64) -> Admission {
        Admission::Pending
    }
    fn repin(&self, _: Box<dyn ReplicaLease>, _: u64) -> Admission {
        Admission::Pending
    }
    fn poll_reply(&self) -> Option<AdmissionReply> {
        None
    }
    fn report_failure(&self, _: &str, _: SocketAddr, _: FailureCause) {}
    fn is_down(&self, _: &str, _: SocketAddr) -> bool {
        false
    }
    fn route_read(&self, _: &ReadRequest<'_>) -> ReadRoute {
        ReadRoute::Primary
    }
    fn primary(&self, _: &str) -> Option<PrimaryNow> {
        self.0.lock().ok().map(|now| *now)
    }
}

/// A transaction-mode reader entry `app`: the primary on `OLD`, replicas on `NEW` and 5002.
fn config() -> String {
    format!(
        "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 2\n\n[databases.app]\nprimary = \"{OLD}\"\n\
         replicas = [\"{NEW}\", \"127.0.0.1:5002\"]\n"
    )
}

fn harness() -> (Harness, Arc<Mutex<PrimaryNow>>) {
    let cell = Arc::new(Mutex::new(PrimaryNow {
        server: Some(ElectedServer::Addr(addr(OLD))),
        epoch: 0,
    }));
    let h = Harness::with_routing(&config(), Box::new(Elected(Arc::clone(&cell))));
    (h, cell)
}

fn connected(h: &Harness) -> Vec<String> {
    h.connects
        .iter()
        .map(|(_, addr)| match addr {
            ServerAddr::Tcp(addr) => addr.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

fn elect(cell: &Arc<Mutex<PrimaryNow>>, server: Option<ElectedServer>, epoch: u64) {
    if let Ok(mut now) = cell.lock() {
        *now = PrimaryNow { server, epoch };
    }
}

#[test]
fn a_move_closes_servers_on_the_old_primary_and_new_ones_go_to_the_new() {
    let (mut h, cell) = harness();
    let (idle, _) = h.login("alice", "app");
    h.client_sends(idle, &query("UPDATE t SET a = 1"));
    assert!(h.client_tags(idle).ends_with('Z'));
    let (in_block, _) = h.login("bob", "app");
    h.client_sends(in_block, &query("BEGIN; UPDATE t SET a = 2"));
    assert!(h.client_tags(in_block).ends_with('Z'));
    assert!(connected(&h).iter().all(|server| server == OLD));
    let old_servers = h.live_servers();
    assert!(!old_servers.is_empty());

    elect(&cell, Some(ElectedServer::Addr(addr(NEW))), 1);
    h.advance(Duration::from_millis(300));
    // The client inside a transaction on the old primary loses it, as from a failed server.
    let output = h.client_output(in_block);
    assert!(
        output
            .iter()
            .any(|msg| msg.sqlstate().as_deref() == Some("08006")),
        "{output:?}"
    );
    assert!(h.is_closed(Conn::Client(in_block)));
    for server in old_servers {
        assert!(h.is_closed(Conn::Server(server)), "{server:?} stayed open");
    }
    // The idle client's next write reaches the new primary.
    h.client_sends(idle, &query("UPDATE t SET a = 3"));
    assert!(h.client_tags(idle).ends_with('Z'));
    assert_eq!(connected(&h).last().map(String::as_str), Some(NEW));
}

#[test]
fn without_a_primary_a_session_fails_with_08006() {
    let (mut h, cell) = harness();
    elect(&cell, None, 1);
    h.advance(Duration::from_millis(300));
    // The login itself needs the primary (it is welcomed by one of its servers).
    let (client, mut output) = h.login("alice", "app");
    if !h.is_closed(Conn::Client(client)) {
        h.client_sends(client, &query("UPDATE t SET a = 1"));
        output.extend(h.client_output(client));
    }
    assert!(
        output
            .iter()
            .any(|msg| msg.sqlstate().as_deref() == Some("08006")),
        "{output:?}"
    );
    assert!(connected(&h).iter().all(|server| server == OLD));
}

#[test]
fn the_same_epoch_closes_nothing() {
    let (mut h, _cell) = harness();
    let (client, _) = h.login("alice", "app");
    h.client_sends(client, &query("UPDATE t SET a = 1"));
    assert!(h.client_tags(client).ends_with('Z'));
    let servers = h.live_servers();
    h.advance(Duration::from_millis(600));
    for server in servers {
        assert!(!h.is_closed(Conn::Server(server)));
    }
}

#[test]
fn a_login_after_a_move_goes_to_the_new_primary_before_the_housekeeping_pass() {
    let (mut h, cell) = harness();
    h.auto_backend = false;
    let first = h.accept();
    h.client_sends(first, &startup(&[("user", "alice"), ("database", "app")]));
    assert_eq!(connected(&h), [OLD]);
    // The old primary is gone: the pool remembers the failure (PgBouncer's fast fail).
    h.refuse_connects(111);
    elect(&cell, Some(ElectedServer::Addr(addr(NEW))), 1);
    // No housekeeping pass yet: a new client still reaches the new primary.
    let second = h.accept();
    h.client_sends(second, &startup(&[("user", "alice"), ("database", "app")]));
    assert!(
        !h.is_closed(Conn::Client(second)),
        "failed for the old primary"
    );
    assert_eq!(connected(&h).last().map(String::as_str), Some(NEW));
}
