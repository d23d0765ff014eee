//! Query digests through the whole engine (kernel-less harness, scripted PostgreSQL): calls
//! counted per normalized text in the simple and the extended protocol, rows and errors,
//! pipelines, named statements across servers, the map folded when full, and off.

use std::collections::HashMap;

use pgtier_core::metrics::DigestCounts;

use crate::testing::{Harness, bind, config, execute, parse, query, sync};

const TX: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 2";

fn pipeline(messages: &[Vec<u8>]) -> Vec<u8> {
    messages.concat()
}

/// The shared store's digests by text, after every shard folded.
fn digests(h: &mut Harness) -> HashMap<String, DigestCounts> {
    h.engine.fold_counters();
    h.engine
        .env
        .shared()
        .digests
        .top_by_time(100)
        .into_iter()
        .map(|digest| (digest.text.to_string(), digest.counts))
        .collect()
}

#[test]
fn simple_queries_count_under_their_normalized_text_with_rows_and_errors() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    for aid in [17, 4_242, 9] {
        h.client_sends(a, &query("BEGIN;"));
        let sql = format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid};");
        h.client_sends(a, &query(&sql));
        h.client_sends(a, &query("COMMIT"));
    }
    h.client_sends(a, &query("FAIL 'now'"));
    h.client_sends(a, &query("FAIL 'again'"));
    h.client_output(a);
    let found = digests(&mut h);
    let select = found["SELECT abalance FROM pgbench_accounts WHERE aid = $1"];
    assert_eq!((select.calls, select.rows, select.errors), (3, 3, 0));
    assert_eq!(select.times.total(), 3);
    assert_eq!(found["BEGIN"].calls, 3);
    assert_eq!(found["COMMIT"].calls, 3);
    let fail = found["FAIL $1"];
    assert_eq!((fail.calls, fail.errors), (2, 2));
    assert_eq!(
        found.len(),
        4,
        "the engine's own queries are not counted: {found:?}"
    );
}

#[test]
fn extended_calls_count_the_statement_their_execute_ran() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    // Unnamed statements, two segments pipelined in one send.
    let segment = |sql: &str| pipeline(&[parse("", sql), bind(""), execute(), sync()]);
    h.client_sends(
        a,
        &pipeline(&[
            segment("UPDATE t SET v = v + $1 WHERE id = $2"),
            segment("UPDATE t SET v = v + 5 WHERE id = 7"),
        ]),
    );
    // A named statement, prepared alone, then run three times.
    h.client_sends(
        a,
        &pipeline(&[parse("s1", "SELECT v FROM t WHERE id = $1"), sync()]),
    );
    for _ in 0..3 {
        h.client_sends(a, &pipeline(&[bind("s1"), execute(), sync()]));
    }
    h.client_output(a);
    let found = digests(&mut h);
    let update = found["UPDATE t SET v = v + $1 WHERE id = $2"];
    assert_eq!(update.calls, 2, "simple constants and parameters meet");
    assert_eq!(update.rows, 2, "the fake answers SELECT 1 to every Execute");
    let select = found["SELECT v FROM t WHERE id = $1"];
    assert_eq!(select.calls, 3, "the prepare alone is no call");
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn calls_of_two_clients_on_two_servers_meet_in_one_digest() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    let first = h.live_servers()[0];
    h.backend(first).hold_queries_with = Some("pg_sleep".into());
    h.client_sends(a, &query("SELECT pg_sleep(1)"));
    assert!(h.backend(first).is_running());
    h.client_sends(b, &query("SELECT pg_sleep(2)"));
    assert_eq!(h.live_servers().len(), 2, "both run at once");
    h.finish_running();
    h.client_output(a);
    h.client_output(b);
    let found = digests(&mut h);
    assert_eq!(found["SELECT pg_sleep($1)"].calls, 2);
}

#[test]
fn a_full_map_folds_into_the_store_at_once() {
    let mut h = Harness::new(&config(&format!("{TX}\ndigest_map_capacity = 2")));
    let (a, _) = h.login("alice", "db");
    for sql in ["SELECT a FROM t", "SELECT b FROM t", "SELECT c FROM t"] {
        h.client_sends(a, &query(sql));
    }
    assert_eq!(
        h.engine.env.shared().digests.len(),
        2,
        "the third text found the map full: the first two were folded"
    );
    let found = digests(&mut h);
    assert_eq!(found.len(), 3);
    assert!(found.values().all(|counts| counts.calls == 1), "{found:?}");
}

#[test]
fn long_texts_are_cut_at_the_limit() {
    let mut h = Harness::new(&config(&format!("{TX}\ndigest_max_text_bytes = 16")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT a, b, c, d, e FROM t WHERE x = 1"));
    h.client_sends(a, &query("SELECT a, b, c, d, f FROM u"));
    let found = digests(&mut h);
    assert_eq!(found["SELECT a, b, c, …"].calls, 2, "{found:?}");
}

#[test]
fn digests_off_count_nothing() {
    let mut h = Harness::new(&config(&format!("{TX}\nquery_digests = false")));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert!(digests(&mut h).is_empty());
}

/// A session keeps its call log while it queries; once it is idle with nothing owed,
/// housekeeping gives the log back, so an idle client holds none.
#[test]
fn housekeeping_drops_the_call_log_of_an_idle_client() {
    let mut h = Harness::new(&config(TX));
    let (a, _) = h.login("alice", "db");
    let has_log = |h: &Harness| {
        h.engine
            .clients
            .get(a.0)
            .and_then(|client| client.session())
            .is_some_and(|session| session.has_call_log())
    };
    assert!(!has_log(&h), "none before its first query");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    assert!(has_log(&h), "kept between transactions");
    h.advance(std::time::Duration::from_secs(1));
    assert!(!has_log(&h), "dropped once idle");
}
