//! The notices pgtier sends on its own: `login_notify_message` in every welcome, and
//! `query_wait_notify`'s one notice per wait to a client queued for a server.

use std::time::Duration;

use crate::testing::{Harness, Msg, config, query};

fn tags(messages: &[Msg]) -> String {
    messages.iter().map(|m| m.tag as char).collect()
}

#[test]
fn the_login_notice_comes_after_the_cancel_key_and_before_ready() {
    let mut h = Harness::new(&config("login_notify_message = \"Welcome aboard\""));
    let (_, welcome) = h.login("alice", "db");
    let tags = tags(&welcome);
    assert!(tags.ends_with("KNZ"), "{tags}");
    let notice = &welcome[welcome.len() - 2];
    assert_eq!(notice.field(b'M').as_deref(), Some("Welcome aboard"));
    assert_eq!(notice.field(b'S').as_deref(), Some("NOTICE"));
}

#[test]
fn no_login_notice_by_default() {
    let mut h = Harness::new(&config(""));
    let (_, welcome) = h.login("alice", "db");
    assert!(tags(&welcome).ends_with("KZ"), "{}", tags(&welcome));
}

/// A client queued behind the only server of its pool, for `waited`.
fn queued_for(wait_notify: &str, waited: Duration) -> (Harness, crate::ids::ClientId) {
    let mut h = Harness::new(&config(&format!(
        "pool_mode = \"transaction\"\ndefault_pool_size = 1\nquery_wait_notify = {wait_notify}"
    )));
    let (holder, _) = h.login("alice", "db");
    let (waiter, _) = h.login("alice", "db");
    h.client_sends(holder, &query("BEGIN"));
    assert_eq!(h.client_tags(holder), "CZ");
    h.client_sends(waiter, &query("SELECT 1"));
    h.advance(waited);
    (h, waiter)
}

const WAIT_NOTICE: &str = "No server connection available in postgres backend, client being queued";

#[test]
fn a_client_queued_past_query_wait_notify_is_told_once() {
    let (mut h, waiter) = queued_for("2", Duration::from_millis(2_300));
    let told = h.client_output(waiter);
    assert_eq!(tags(&told), "N");
    assert_eq!(told[0].field(b'M').as_deref(), Some(WAIT_NOTICE));
    h.advance(Duration::from_secs(3));
    assert_eq!(h.client_tags(waiter), "", "once per wait");
}

#[test]
fn a_shorter_wait_or_a_zero_setting_tells_nothing() {
    let (mut h, waiter) = queued_for("8", Duration::from_secs(3));
    assert_eq!(h.client_tags(waiter), "");
    let (mut h, waiter) = queued_for("0", Duration::from_secs(30));
    assert_eq!(h.client_tags(waiter), "");
}
