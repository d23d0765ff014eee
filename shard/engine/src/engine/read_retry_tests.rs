//! Reads that run again (`read_retries`) through the kernel-less harness: a read on a replica
//! whose server dies before any of its answer reached the client runs on another server and
//! the client sees only the answer; a write, a read inside a block, a read whose answer began
//! and a read past its retries get 08006 as before. Both a reader entry (each read routed,
//! here by a script that honours `avoid`) and a replica-set entry (a session leased to one
//! replica) are covered.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::action::Conn;
use crate::addr::ServerAddr;
use crate::ids::ServerId;
use crate::services::{
    Admission, AdmissionReply, FailureCause, ReadRequest, ReadRoute, ReadTicket, ReplicaLease,
    Routing,
};
use crate::testing::{self, Harness, bind, execute, frame, parse, query, sync};
use pgtier_policy::tiers::Tier;

const FIRST: u16 = 5001;
const SECOND: u16 = 5002;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// What the routing was asked, for the tests to read.
#[derive(Debug, Default)]
struct Asked {
    /// The `avoid` of every read routed.
    avoids: Vec<Option<SocketAddr>>,
    /// Failures reported, by replica.
    failures: Vec<SocketAddr>,
    /// Replicas the test says are Down.
    down: Vec<SocketAddr>,
}

#[derive(Debug)]
struct Ticket(SocketAddr);

impl ReadTicket for Ticket {
    fn addr(&self) -> SocketAddr {
        self.0
    }
}

#[derive(Debug)]
struct Lease(SocketAddr);

impl ReplicaLease for Lease {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
    fn addr(&self) -> SocketAddr {
        self.0
    }
    fn class(&self) -> Tier {
        Tier(0)
    }
    fn replica_failed(&mut self) -> bool {
        false
    }
}

/// Reads go to the first replica unless told to avoid it; replica-set sessions are leased
/// the first replica, and moved to the second.
struct Routed(Arc<Mutex<Asked>>);

impl Routing for Routed {
    fn is_routed(&self, database: &str) -> bool {
        database == "set"
    }
    fn admit(&self, _: &str, _: Tier, _: u64) -> Admission {
        Admission::Placed(Box::new(Lease(addr(FIRST))))
    }
    fn repin(&self, _: Box<dyn ReplicaLease>, _: u64) -> Admission {
        Admission::Placed(Box::new(Lease(addr(SECOND))))
    }
    fn poll_reply(&self) -> Option<AdmissionReply> {
        None
    }
    fn report_failure(&self, _: &str, replica: SocketAddr, _: FailureCause) {
        if let Ok(mut asked) = self.0.lock() {
            asked.failures.push(replica);
        }
    }
    fn is_down(&self, _: &str, replica: SocketAddr) -> bool {
        self.0
            .lock()
            .is_ok_and(|asked| asked.down.contains(&replica))
    }
    fn route_read(&self, request: &ReadRequest<'_>) -> ReadRoute {
        if let Ok(mut asked) = self.0.lock() {
            asked.avoids.push(request.avoid);
        }
        let port = if request.avoid == Some(addr(FIRST)) {
            SECOND
        } else {
            FIRST
        };
        ReadRoute::Replica(Box::new(Ticket(addr(port))))
    }
}

/// A reader entry `db` (primary 5000, replicas 5001 and 5002) and a replica-set entry `set`
/// (5001 and 5002), transaction mode, with `extra` in `[pgtier]`.
fn harness(extra: &str) -> (Harness, Arc<Mutex<Asked>>) {
    let asked = Arc::new(Mutex::new(Asked::default()));
    let text = format!(
        "{}\n[databases.set]\nreplicas = [\"127.0.0.1:{FIRST}\", \"127.0.0.1:{SECOND}\"]\n\
         routing = \"round_robin\"\n",
        testing::reader_config(&format!(
            "pool_mode = \"transaction\"\ndefault_pool_size = 2\n{extra}"
        ))
    );
    let h = Harness::with_routing(&text, Box::new(Routed(Arc::clone(&asked))));
    (h, asked)
}

fn errors(messages: &[testing::Msg]) -> Vec<String> {
    messages
        .iter()
        .filter(|m| m.tag == b'E')
        .filter_map(|m| m.sqlstate())
        .collect()
}

/// The live server connected to `port` most recently.
fn server_on(h: &Harness, port: u16) -> ServerId {
    let live = h.live_servers();
    let found = h
        .connects
        .iter()
        .rev()
        .find(|(id, to)| *to == ServerAddr::Tcp(addr(port)) && live.contains(id));
    match found {
        Some((id, _)) => *id,
        None => panic!("no live server on {port}: {:?}", h.connects),
    }
}

/// Every query the backends alive now saw containing `text`.
fn seen_by_live(h: &mut Harness, text: &str) -> usize {
    let live = h.live_servers();
    live.into_iter()
        .map(|id| {
            h.backend(id)
                .seen
                .iter()
                .filter(|sql| sql.contains(text))
                .count()
        })
        .sum()
}

#[test]
fn a_read_killed_before_its_answer_runs_on_another_replica_and_the_client_sees_only_the_answer() {
    let (mut h, asked) = harness("");
    let (a, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    let first = server_on(&h, FIRST);
    assert!(h.client_output(a).is_empty(), "the read runs");
    h.hold_new_backends = None;
    h.server_gone(first);
    assert_eq!(h.client_tags(a), "TDCZ", "only the answer, no error");
    assert!(!h.is_closed(Conn::Client(a)));
    let second = server_on(&h, SECOND);
    assert_eq!(
        seen_by_live(&mut h, "slow"),
        1,
        "run once more, on {second:?}"
    );
    let asked = asked.lock().expect("asked");
    assert_eq!(asked.avoids, vec![None, Some(addr(FIRST))]);
    assert_eq!(
        asked.failures,
        vec![addr(FIRST)],
        "the replica was reported"
    );
    drop(asked);
    h.engine.fold_counters();
    assert_eq!(h.engine.env.shared().snapshot().reads_run_again, 1);
    // The session goes on as usual.
    h.client_sends(a, &query("SELECT 2"));
    assert_eq!(h.client_tags(a), "TDCZ");
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn an_extended_read_of_the_unnamed_statement_runs_again() {
    let (mut h, _) = harness("");
    let (a, _) = h.login("alice", "db");
    // Held by the first replica's backend: it never answers before it dies.
    h.auto_backend = false;
    let segment = [parse("", "SELECT 1"), bind(""), execute(), sync()].concat();
    h.client_sends(a, &segment);
    h.complete_connects_without_backend();
    let first = h.connects.last().map(|(id, _)| *id).expect("a connect");
    h.server_sends(first, &login_answer());
    h.auto_backend = true;
    assert!(h.client_output(a).is_empty());
    h.server_gone(first);
    assert_eq!(h.client_tags(a), "12CZ", "only the answer");
    assert!(!h.is_closed(Conn::Client(a)));
}

/// A NoticeResponse from a server.
fn notice(severity: &str, code: &str, message: &str) -> Vec<u8> {
    let mut out = testing::error(severity, code, message);
    out[0] = b'N';
    out
}

/// What a backend says to log in (trust) and be ready.
fn login_answer() -> Vec<u8> {
    let mut out = frame(b'R', &0u32.to_be_bytes());
    out.extend(frame(b'K', &[0, 0, 0, 9, 0, 0, 0, 7]));
    out.extend(frame(b'Z', b"I"));
    out
}

#[test]
fn a_backend_announcing_an_immediate_shutdown_is_not_an_answer() {
    let (mut h, asked) = harness("");
    let (a, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    let first = server_on(&h, FIRST);
    h.hold_new_backends = None;
    // `pg_ctl stop -m immediate`: every backend says this, then its connection ends.
    h.server_sends(
        first,
        &notice(
            "WARNING",
            "57P01",
            "terminating connection due to immediate shutdown command",
        ),
    );
    h.server_gone(first);
    assert_eq!(h.client_tags(a), "TDCZ", "no warning, no error: the answer");
    assert_eq!(asked.lock().expect("asked").failures, vec![addr(FIRST)]);
}

#[test]
fn a_read_whose_answer_began_is_not_run_again() {
    let (mut h, _) = harness("");
    let (a, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    let first = server_on(&h, FIRST);
    h.hold_new_backends = None;
    // One byte of the answer is one too many: a notice.
    h.server_sends(first, &notice("NOTICE", "00000", "hello"));
    h.server_gone(first);
    let messages = h.client_output(a);
    assert_eq!(errors(&messages), vec!["08006".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
    assert_eq!(seen_by_live(&mut h, "slow"), 0, "not run again");
}

#[test]
fn a_read_inside_a_block_is_not_run_again() {
    let (mut h, _) = harness("");
    let (a, _) = h.login("alice", "set");
    h.client_sends(a, &query("BEGIN"));
    assert_eq!(h.client_tags(a), "CZ");
    let server = server_on(&h, FIRST);
    h.backend(server).hold_queries_with = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    h.server_gone(server);
    assert_eq!(errors(&h.client_output(a)), vec!["08006".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
    assert_eq!(seen_by_live(&mut h, "slow"), 0, "not run again");
}

#[test]
fn a_write_is_never_sent_again() {
    let (mut h, _) = harness("");
    // On a replica-set entry everything goes to the session's replica, writes too (PostgreSQL
    // refuses them there; pgtier must not send one twice anyway).
    let (a, _) = h.login("alice", "set");
    let server = server_on(&h, FIRST);
    h.backend(server).hold_queries_with = Some("UPDATE".into());
    h.client_sends(a, &query("UPDATE t SET a = 1"));
    h.server_gone(server);
    assert_eq!(errors(&h.client_output(a)), vec!["08006".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
    assert_eq!(seen_by_live(&mut h, "UPDATE"), 0, "never sent again");
    // A write on a reader entry runs on the primary: not run again either.
    let (b, _) = h.login("alice", "db");
    let primary = server_on(&h, 5000);
    h.backend(primary).hold_queries_with = Some("UPDATE".into());
    h.client_sends(b, &query("UPDATE t SET a = 2"));
    h.server_gone(primary);
    assert_eq!(errors(&h.client_output(b)), vec!["08006".to_string()]);
    assert_eq!(seen_by_live(&mut h, "UPDATE"), 0, "never sent again");
}

#[test]
fn a_replica_set_session_runs_its_read_again_on_a_new_server() {
    let (mut h, asked) = harness("");
    let (a, _) = h.login("alice", "set");
    // Its welcome's server is idle on its replica: the read takes it.
    let first = server_on(&h, FIRST);
    h.backend(first).hold_queries_with = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    assert!(h.client_output(a).is_empty(), "the read runs");
    h.server_gone(first);
    assert_eq!(h.client_tags(a), "TDCZ", "only the answer");
    assert!(!h.is_closed(Conn::Client(a)));
    assert_eq!(seen_by_live(&mut h, "slow"), 1);
    assert_eq!(asked.lock().expect("asked").failures, vec![addr(FIRST)]);
    h.engine.check_invariants().expect("invariants");
}

#[test]
fn a_read_runs_again_at_most_read_retries_times() {
    let (mut h, _) = harness("read_retries = 1");
    let (a, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    h.server_gone(server_on(&h, FIRST));
    assert!(h.client_output(a).is_empty(), "run again, held again");
    h.server_gone(server_on(&h, SECOND));
    assert_eq!(errors(&h.client_output(a)), vec!["08006".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
    // Off: the first death is the client's.
    let (mut h, _) = harness("read_retries = 0");
    let (b, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(b, &query("SELECT slow FROM t"));
    h.server_gone(server_on(&h, FIRST));
    assert_eq!(errors(&h.client_output(b)), vec!["08006".to_string()]);
}

#[test]
fn a_backend_terminated_mid_query_flushes_its_row_description_and_the_read_still_runs_again() {
    let (mut h, _) = harness("");
    let (a, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    let first = server_on(&h, FIRST);
    h.hold_new_backends = None;
    // `pg_terminate_backend`: the RowDescription it had buffered, then its FATAL, in one read.
    let mut last_words = frame(b'T', b"\0\0");
    last_words.extend(testing::error(
        "FATAL",
        "57P01",
        "terminating connection due to administrator command",
    ));
    h.server_sends(first, &last_words);
    h.server_gone(first);
    assert_eq!(h.client_tags(a), "TDCZ", "one answer, no error");
    assert!(!h.is_closed(Conn::Client(a)));
}

#[test]
fn a_read_on_a_replica_that_goes_down_without_a_word_runs_again_elsewhere() {
    let (mut h, asked) = harness("");
    let (a, _) = h.login("alice", "db");
    h.hold_new_backends = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    let first = server_on(&h, FIRST);
    h.hold_new_backends = None;
    h.advance(std::time::Duration::from_millis(300));
    assert!(h.client_output(a).is_empty(), "its replica is up: it waits");
    // Hung or partitioned: the probes mark it Down, its server says nothing.
    asked.lock().expect("asked").down.push(addr(FIRST));
    h.advance(std::time::Duration::from_millis(300));
    assert_eq!(h.client_tags(a), "TDCZ", "answered by the other replica");
    assert!(
        h.is_closed(Conn::Server(first)),
        "the hung server is closed"
    );
    assert!(!h.is_closed(Conn::Client(a)));
}

#[test]
fn a_read_after_session_state_or_behind_a_write_is_not_run_again() {
    let (mut h, _) = harness("");
    // A SET pins the session to its server: its reads may depend on that state.
    let (a, _) = h.login("alice", "set");
    h.client_sends(a, &query("SET work_mem = '64MB'"));
    assert_eq!(h.client_tags(a), "CZ");
    let server = server_on(&h, FIRST);
    h.backend(server).hold_queries_with = Some("slow".into());
    h.client_sends(a, &query("SELECT slow FROM t"));
    h.server_gone(server);
    assert_eq!(errors(&h.client_output(a)), vec!["08006".to_string()]);
    assert_eq!(seen_by_live(&mut h, "slow"), 0, "not run again");
    // A read pipelined with a write in one send: the server got both, neither runs again.
    let (b, _) = h.login("alice", "set");
    // Both held: no answer begins.
    h.hold_new_backends = Some(" t".into());
    let pipeline = [query("SELECT slow FROM t"), query("UPDATE t SET a = 1")].concat();
    h.client_sends(b, &pipeline);
    h.hold_new_backends = None;
    assert!(h.client_output(b).is_empty());
    h.server_gone(server_on(&h, FIRST));
    assert_eq!(errors(&h.client_output(b)), vec!["08006".to_string()]);
    assert_eq!(seen_by_live(&mut h, "UPDATE"), 0, "never sent again");
}
