//! A server that cannot be reached, as PgBouncer treats it: the clients already waiting stay
//! queued while the pool pauses for `server_login_retry` and tries again (a server restart is
//! ridden out), a client that comes meanwhile is told at once, and `query_timeout` or
//! `query_wait_timeout` end a wait that lasts too long.

use std::time::Duration;

use crate::action::Conn;
use crate::ids::ClientId;
use crate::testing::{Harness, config, query, startup};

const REFUSED: i32 = 111;

fn error_messages(h: &mut Harness, id: ClientId) -> Vec<String> {
    h.client_output(id)
        .iter()
        .filter(|m| m.tag == b'E')
        .filter_map(|m| m.field(b'M'))
        .collect()
}

fn connects(h: &Harness) -> usize {
    h.connecting.len()
}

#[test]
fn a_refused_connect_keeps_the_waiting_client_until_a_retry_succeeds() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\nserver_login_retry = 2",
    ));
    h.auto_backend = false;
    let a = h.accept();
    h.client_sends(a, &startup(&[("user", "alice"), ("database", "db")]));
    assert_eq!(connects(&h), 1);
    h.refuse_connects(REFUSED);
    assert!(
        !h.is_closed(Conn::Client(a)),
        "it waits for the next attempt"
    );
    assert!(error_messages(&mut h, a).is_empty());

    // A client that comes while the pool has no server and its last attempt failed is
    // told at once.
    let b = h.accept();
    h.client_sends(b, &startup(&[("user", "alice"), ("database", "db")]));
    assert!(h.is_closed(Conn::Client(b)));
    assert_eq!(error_messages(&mut h, b).len(), 1);
    assert_eq!(connects(&h), 0, "no attempt before server_login_retry");

    h.advance(Duration::from_millis(1000));
    assert_eq!(connects(&h), 0, "no attempt before server_login_retry");
    h.advance(Duration::from_millis(1250));
    assert_eq!(connects(&h), 1, "tried again after server_login_retry");
    h.auto_backend = true;
    h.complete_connects();
    h.pump();
    assert_eq!(h.client_output(a).last().map(|m| m.tag), Some(b'Z'));
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
}

#[test]
fn a_connect_timeout_closes_the_server_and_query_timeout_ends_the_wait() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\nserver_connect_timeout = 1\nquery_timeout = 2",
    ));
    h.auto_backend = false;
    let a = h.accept();
    h.client_sends(a, &startup(&[("user", "alice"), ("database", "db")]));
    let (server, _) = h.connecting[0].clone();
    h.advance(Duration::from_millis(1250));
    assert!(h.is_closed(Conn::Server(server)), "connect timeout");
    assert!(
        !h.is_closed(Conn::Client(a)),
        "it waits for the next attempt"
    );
    h.advance(Duration::from_millis(1000));
    assert_eq!(error_messages(&mut h, a), vec!["query_timeout".to_string()]);
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn a_failed_login_still_fails_the_waiting_clients_at_once() {
    let mut h = Harness::new(&config("pool_mode = \"transaction\""));
    h.auto_backend = false;
    let a = h.accept();
    h.client_sends(a, &startup(&[("user", "alice"), ("database", "db")]));
    let (server, _) = h.connecting[0].clone();
    h.complete_connects_without_backend();
    h.server_sends(
        server,
        &crate::testing::error("FATAL", "28P01", "password authentication failed"),
    );
    assert_eq!(
        error_messages(&mut h, a),
        vec!["password authentication failed".to_string()]
    );
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn a_server_starting_up_keeps_the_waiting_clients_for_the_next_attempt() {
    let mut h = Harness::new(&config(
        "pool_mode = \"transaction\"\nserver_login_retry = 1",
    ));
    h.auto_backend = false;
    let a = h.accept();
    h.client_sends(a, &startup(&[("user", "alice"), ("database", "db")]));
    let (server, _) = h.connecting[0].clone();
    h.complete_connects_without_backend();
    h.server_sends(
        server,
        &crate::testing::error("FATAL", "57P03", "the database system is starting up"),
    );
    assert!(h.is_closed(Conn::Server(server)));
    assert!(
        !h.is_closed(Conn::Client(a)),
        "it waits for the next attempt"
    );
    h.advance(Duration::from_millis(1250));
    assert_eq!(connects(&h), 1, "tried again after server_login_retry");
    h.auto_backend = true;
    h.complete_connects();
    h.pump();
    assert_eq!(h.client_output(a).last().map(|m| m.tag), Some(b'Z'));
}
