//! Reader entries through the kernel-less harness: which server each transaction reaches,
//! what a replica may be sent, and read-your-writes waits. The routing service is a script
//! (the control shard's real one has its own tests, against real replicas).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::addr::ServerAddr;
use crate::services::{
    Admission, AdmissionReply, FailureCause, ReadRequest, ReadRoute, ReadTicket, ReplicaLease,
    Routing,
};
use crate::testing::{Harness, bind, execute, parse, query, sync};
use pgtier_policy::tiers::Tier;

const PRIMARY: &str = "127.0.0.1:5000";
const REPLICA: &str = "127.0.0.1:5001";

fn reader_config(extra: &str) -> String {
    format!(
        "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 2\n\n[databases.app]\nprimary = \"{PRIMARY}\"\n\
         replicas = [\"{REPLICA}\", \"127.0.0.1:5002\"]\n{extra}\n"
    )
}

/// What the scripted routing answers, and what it was asked.
#[derive(Debug, Default)]
struct Script {
    /// Answers to give, in order; when empty, the read goes to `REPLICA`.
    answers: Vec<Answer>,
    asked: Vec<Option<Instant>>,
    in_flight: usize,
}

#[derive(Debug, Clone, Copy)]
enum Answer {
    Replica,
    Primary,
    NotYet,
}

#[derive(Debug)]
struct Ticket(Arc<Mutex<Script>>);

impl ReadTicket for Ticket {
    fn addr(&self) -> SocketAddr {
        REPLICA.parse().unwrap_or_else(|_| unreachable!())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if let Ok(mut script) = self.0.lock() {
            script.in_flight -= 1;
        }
    }
}

struct ScriptedRouting(Arc<Mutex<Script>>);

impl Routing for ScriptedRouting {
    fn is_routed(&self, _database: &str) -> bool {
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
    fn route_read(&self, request: &ReadRequest<'_>) -> ReadRoute {
        let Ok(mut script) = self.0.lock() else {
            return ReadRoute::Primary;
        };
        script.asked.push(request.after);
        let answer = if script.answers.is_empty() {
            Answer::Replica
        } else {
            script.answers.remove(0)
        };
        match answer {
            Answer::Replica => {
                script.in_flight += 1;
                ReadRoute::Replica(Box::new(Ticket(Arc::clone(&self.0))))
            }
            Answer::Primary => ReadRoute::Primary,
            Answer::NotYet => ReadRoute::NotYet,
        }
    }
}

fn harness(extra: &str) -> (Harness, Arc<Mutex<Script>>) {
    let script = Arc::new(Mutex::new(Script::default()));
    let h = Harness::with_routing(
        &reader_config(extra),
        Box::new(ScriptedRouting(Arc::clone(&script))),
    );
    (h, script)
}

/// The address of each server connection opened so far, in order.
fn connected(h: &Harness) -> Vec<String> {
    h.connects
        .iter()
        .map(|(_, addr)| match addr {
            ServerAddr::Tcp(addr) => addr.to_string(),
            other => format!("{other:?}"),
        })
        .collect()
}

fn script(script: &Arc<Mutex<Script>>) -> std::sync::MutexGuard<'_, Script> {
    script.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_login_is_welcomed_by_the_primary_and_a_read_runs_on_a_replica() {
    let (mut h, routing) = harness("");
    let (a, _) = h.login("alice", "app");
    assert_eq!(connected(&h), [PRIMARY]);
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(connected(&h), [PRIMARY, REPLICA]);
    assert_eq!(
        script(&routing).in_flight,
        0,
        "the read's ticket was given back"
    );
}

#[test]
fn a_write_runs_on_the_primary_and_the_next_read_must_see_it() {
    let (mut h, routing) = harness("");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &query("UPDATE t SET a = 1"));
    assert!(h.client_tags(a).ends_with('Z'));
    assert_eq!(
        connected(&h),
        [PRIMARY],
        "the write reused the primary's server"
    );
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let asked = script(&routing).asked.clone();
    assert_eq!(asked.len(), 1);
    assert!(asked[0].is_some(), "the read carried its write's instant");
}

#[test]
fn without_read_your_writes_a_read_has_no_target() {
    let (mut h, routing) = harness("read_your_writes = false");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &query("UPDATE t SET a = 1"));
    h.client_output(a);
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(script(&routing).asked, [None]);
}

#[test]
fn a_read_waits_for_a_replica_to_catch_up_then_runs_there() {
    let (mut h, routing) = harness("");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &query("UPDATE t SET a = 1"));
    h.client_output(a);
    script(&routing).answers = vec![Answer::NotYet, Answer::NotYet];
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "", "it waits");
    h.advance(Duration::from_millis(3));
    assert_eq!(h.client_tags(a), "", "still behind");
    h.advance(Duration::from_millis(3));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(connected(&h), [PRIMARY, REPLICA]);
    assert_eq!(script(&routing).asked.len(), 3);
}

#[test]
fn a_read_that_waited_too_long_runs_on_the_primary() {
    let (mut h, routing) = harness("read_your_writes_timeout = 0.01");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &query("UPDATE t SET a = 1"));
    h.client_output(a);
    script(&routing).answers = vec![Answer::NotYet; 100];
    h.client_sends(a, &query("SELECT 1"));
    for _ in 0..10 {
        h.advance(Duration::from_millis(2));
    }
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(connected(&h), [PRIMARY], "it ran on the primary's server");
}

#[test]
fn no_replica_means_the_primary() {
    let (mut h, routing) = harness("");
    let (a, _) = h.login("alice", "app");
    script(&routing).answers = vec![Answer::Primary];
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(connected(&h), [PRIMARY]);
}

#[test]
fn a_write_pipelined_behind_a_read_waits_for_the_replica_and_goes_to_the_primary() {
    let (mut h, _routing) = harness("");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &[query("SELECT 1"), query("DELETE FROM t")].concat());
    let tags = h.client_tags(a);
    assert_eq!(tags.matches('Z').count(), 2, "{tags}");
    assert_eq!(connected(&h), [PRIMARY, REPLICA]);
    // The replica's server never saw the DELETE.
    for (id, addr) in h.connects.clone() {
        let sent = String::from_utf8_lossy(&h.output_to(id)).into_owned();
        if matches!(addr, ServerAddr::Tcp(a) if a.to_string() == REPLICA) {
            assert!(!sent.contains("DELETE"), "{sent}");
        }
    }
}

#[test]
fn an_extended_read_waits_for_its_sync_before_it_is_routed() {
    let (mut h, _routing) = harness("");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &[parse("", "SELECT 1"), bind("")].concat());
    assert_eq!(connected(&h), [PRIMARY], "not routed yet");
    h.client_sends(a, &[execute(), sync()].concat());
    assert!(h.client_tags(a).ends_with('Z'));
    assert_eq!(connected(&h), [PRIMARY, REPLICA]);
}

#[test]
fn session_mode_stays_on_the_primary() {
    let (mut h, routing) = harness("pool_mode = \"session\"");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert_eq!(connected(&h), [PRIMARY]);
    assert!(script(&routing).asked.is_empty());
}

#[test]
fn a_read_only_block_runs_on_one_replica_to_its_end() {
    let (mut h, _routing) = harness("");
    let (a, _) = h.login("alice", "app");
    h.client_sends(a, &query("BEGIN READ ONLY"));
    assert!(h.client_tags(a).ends_with('Z'));
    h.client_sends(a, &query("SELECT 1"));
    assert!(h.client_tags(a).ends_with('Z'));
    h.client_sends(a, &query("COMMIT"));
    assert!(h.client_tags(a).ends_with('Z'));
    assert_eq!(connected(&h), [PRIMARY, REPLICA]);
}
