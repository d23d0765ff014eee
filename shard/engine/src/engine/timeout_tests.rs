//! PgBouncer's client timeouts through the engine: what a client past `query_timeout`,
//! `idle_transaction_timeout` or `transaction_timeout` is told (PgBouncer's words, FATAL
//! 08P01, which its users' tools match on), a user's own limit winning over the global one,
//! and the states none of them applies to.

use std::time::Duration;

use crate::action::Conn;
use crate::ids::ClientId;
use crate::testing::{Harness, config, query};

const TX: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 2";
const SESSION: &str = "pool_mode = \"session\"\ndefault_pool_size = 2";

/// The SQLSTATE and message of each error `id` was sent.
fn errors(h: &mut Harness, id: ClientId) -> Vec<(String, String)> {
    h.client_output(id)
        .iter()
        .filter(|m| m.tag == b'E')
        .map(|m| {
            (
                m.sqlstate().unwrap_or_default(),
                m.field(b'M').unwrap_or_default(),
            )
        })
        .collect()
}

fn fatal(message: &str) -> Vec<(String, String)> {
    vec![("08P01".to_string(), message.to_string())]
}

#[test]
fn query_timeout_ends_a_query_that_runs_too_long() {
    let mut h = Harness::new(&config(&format!("{TX}\nquery_timeout = 1")));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    h.advance(Duration::from_millis(1600));
    assert_eq!(errors(&mut h, a), fatal("query timeout"));
    assert!(h.is_closed(Conn::Client(a)));
    assert_eq!(
        h.cancels,
        vec![server],
        "the query was cancelled on the server"
    );
}

#[test]
fn query_timeout_does_not_count_while_no_query_runs() {
    let mut h = Harness::new(&config(&format!("{TX}\nquery_timeout = 1")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "CZTDCZ");
    h.advance(Duration::from_millis(2600));
    assert!(!h.is_closed(Conn::Client(a)), "idle in its transaction");
    h.client_sends(a, &query("SELECT 2"));
    assert_eq!(h.client_tags(a), "TDCZ");
}

#[test]
fn query_timeout_bounds_the_wait_for_a_server_too() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nquery_timeout = 1",
    ));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_sends(b, &query("SELECT 1"));
    h.advance(Duration::from_millis(1600));
    // PgBouncer spells the waiting client's reason with an underscore.
    assert_eq!(errors(&mut h, b), fatal("query_timeout"));
    assert!(h.is_closed(Conn::Client(b)));
    assert!(
        !h.is_closed(Conn::Client(a)),
        "idle in a transaction, no query"
    );
}

#[test]
fn idle_transaction_timeout_closes_a_client_idle_in_a_transaction() {
    let mut h = Harness::new(&config(&format!("{TX}\nidle_transaction_timeout = 1")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.advance(Duration::from_millis(1600));
    assert_eq!(errors(&mut h, a), fatal("idle transaction timeout"));
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn transaction_timeout_ends_a_transaction_that_lasts_too_long() {
    let mut h = Harness::new(&config(&format!("{TX}\ntransaction_timeout = 2")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.advance(Duration::from_millis(1250));
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "CZTDCZ", "busy, not idle: still in time");
    h.advance(Duration::from_millis(1250));
    assert_eq!(errors(&mut h, a), fatal("transaction timeout"));
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn transaction_timeout_counts_a_running_query_too() {
    let mut h = Harness::new(&config(&format!("{TX}\ntransaction_timeout = 1")));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    h.advance(Duration::from_millis(1600));
    assert_eq!(errors(&mut h, a), fatal("transaction timeout"));
}

#[test]
fn transaction_timeout_spares_a_session_between_transactions() {
    let mut h = Harness::new(&config(&format!("{SESSION}\ntransaction_timeout = 1")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_sends(a, &query("COMMIT"));
    assert_eq!(h.client_tags(a), "CZCZ");
    h.advance(Duration::from_millis(2600));
    assert!(!h.is_closed(Conn::Client(a)), "it holds its server, idle");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    h.advance(Duration::from_millis(2600));
    assert!(
        !h.is_closed(Conn::Client(a)),
        "a statement outside a block ended"
    );
}

#[test]
fn a_users_own_transaction_timeout_wins_over_the_global_one() {
    let mut h = Harness::new(&config(&format!(
        "{TX}\ntransaction_timeout = 100\n[users.alice]\ntransaction_timeout = 1"
    )));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("bob", "db");
    h.client_sends(a, &query("BEGIN"));
    h.client_sends(b, &query("BEGIN"));
    h.advance(Duration::from_millis(1600));
    assert_eq!(errors(&mut h, a), fatal("transaction timeout"));
    assert!(!h.is_closed(Conn::Client(b)), "bob has the global limit");
}

#[test]
fn idle_transaction_timeout_counts_from_the_end_of_the_last_query() {
    let mut h = Harness::new(&config(&format!("{TX}\nidle_transaction_timeout = 2")));
    let (a, _) = h.login("alice", "db");
    let server = h.live_servers()[0];
    h.client_sends(a, &query("BEGIN"));
    h.backend(server).hold_queries_with = Some("sleep".into());
    h.client_sends(a, &query("SELECT sleep"));
    h.advance(Duration::from_millis(1750));
    h.finish_running();
    h.advance(Duration::from_millis(1250));
    assert!(
        !h.is_closed(Conn::Client(a)),
        "idle 1.25 s since its answer, though 3 s since it last spoke"
    );
    h.advance(Duration::from_millis(1000));
    assert_eq!(errors(&mut h, a), fatal("idle transaction timeout"));
}

#[test]
fn pool_idle_timeout_keeps_an_unused_pool_then_frees_it() {
    let mut h = Harness::new(&config(&format!(
        "{TX}\nserver_idle_timeout = 1\npool_idle_timeout = 2"
    )));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    h.client_tags(a);
    h.client_sends(a, &crate::testing::terminate());
    let mut live = Vec::new();
    for _ in 0..22 {
        h.advance(Duration::from_millis(250));
        live.push((h.live_servers().len(), h.engine.list_sessions().pools.len()));
    }
    // Housekeeping every 250 ms: the server goes past server_idle_timeout (1 s), then the
    // pool, unused, past pool_idle_timeout (2 s more).
    assert_eq!(live[2], (1, 1));
    assert_eq!(live[3], (0, 1), "its server went idle and closed");
    assert_eq!(live[10], (0, 1), "the pool stays while unused for 2 s");
    assert_eq!(live[11], (0, 0), "then it is freed");
}

#[test]
fn without_pool_idle_timeout_an_unused_pool_goes_with_its_last_server() {
    let mut h = Harness::new(&config(&format!("{TX}\nserver_idle_timeout = 1")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &crate::testing::terminate());
    h.advance(Duration::from_millis(1250));
    assert!(h.engine.list_sessions().pools.is_empty());
}
