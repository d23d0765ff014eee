//! Table tests of statement pooling (`pool_mode = "statement"`) through the kernel-less
//! harness: a server goes back to the pool at every idle ReadyForQuery, as in transaction
//! mode, and a ReadyForQuery inside a transaction block ends the client with PgBouncer's
//! error and closes the server, which never returns to the pool.

use crate::action::Conn;
use crate::testing::{Harness, Msg, bind, config, execute, parse, query, startup, sync, terminate};

const STATEMENT: &str = "pool_mode = \"statement\"\ndefault_pool_size = 1";

fn tags(messages: &[Msg]) -> String {
    messages.iter().map(|m| m.tag as char).collect()
}

/// The one ErrorResponse of `messages`: severity, SQLSTATE, message.
fn only_error(messages: &[Msg]) -> (String, String, String) {
    let errors: Vec<&Msg> = messages.iter().filter(|m| m.tag == b'E').collect();
    assert_eq!(errors.len(), 1, "{}", tags(messages));
    let error = errors[0];
    (
        error.field(b'S').unwrap_or_default(),
        error.sqlstate().unwrap_or_default(),
        error.field(b'M').unwrap_or_default(),
    )
}

fn refused() -> (String, String, String) {
    (
        "FATAL".to_string(),
        "08P01".to_string(),
        "transaction blocks not allowed in statement pooling mode".to_string(),
    )
}

#[test]
fn clients_take_turns_on_one_server_statement_by_statement() {
    let mut h = Harness::new(&config(STATEMENT));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    for _ in 0..3 {
        for client in [a, b] {
            h.client_sends(client, &query("SELECT 1"));
            assert_eq!(h.client_tags(client), "TDCZ");
        }
    }
    assert_eq!(
        h.live_servers().len(),
        1,
        "both clients shared the one server"
    );
}

#[test]
fn a_transaction_block_ends_the_client_and_its_server() {
    let mut h = Harness::new(&config(STATEMENT));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let server = h.live_servers()[0];
    h.client_sends(a, &query("BEGIN"));
    let messages = h.client_output(a);
    assert_eq!(
        tags(&messages),
        "CE",
        "the block's ReadyForQuery is not forwarded: the error replaces it"
    );
    assert_eq!(only_error(&messages), refused());
    assert!(h.is_closed(Conn::Client(a)));
    assert!(
        h.is_closed(Conn::Server(server)),
        "the server, inside the block, is closed rather than pooled"
    );
    // The next client gets a fresh server, outside any transaction.
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    let fresh = h.live_servers();
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh[0], server);
    assert!(!h.is_closed(Conn::Client(b)));
}

#[test]
fn a_multi_statement_query_is_one_statement_unless_it_leaves_a_block_open() {
    let mut h = Harness::new(&config(STATEMENT));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("BEGIN; SELECT 1; COMMIT"));
    assert!(h.client_tags(a).ends_with('Z'));
    assert!(!h.is_closed(Conn::Client(a)));
    h.client_sends(a, &query("SELECT 1; BEGIN"));
    let messages = h.client_output(a);
    assert_eq!(only_error(&messages), refused());
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn answers_pipelined_before_the_block_reach_the_client_first() {
    let mut h = Harness::new(&config(STATEMENT));
    let (a, _) = h.login("alice", "db");
    let mut bytes = query("SELECT 1");
    bytes.extend(query("BEGIN"));
    bytes.extend(query("SELECT 2"));
    h.client_sends(a, &bytes);
    let messages = h.client_output(a);
    assert_eq!(tags(&messages), "TDCZCE", "nothing after the refused block");
    assert_eq!(only_error(&messages), refused());
    assert!(h.is_closed(Conn::Client(a)));
}

#[test]
fn extended_protocol_with_named_statements_is_released_at_each_sync() {
    let mut h = Harness::new(&config(STATEMENT));
    let (a, _) = h.login("alice", "db");
    let (b, _) = h.login("alice", "db");
    for client in [a, b] {
        h.client_sends(client, &[parse("s1", "SELECT 1"), sync()].concat());
        assert_eq!(h.client_tags(client), "1Z");
    }
    for client in [a, b, a] {
        h.client_sends(client, &[bind("s1"), execute(), sync()].concat());
        assert_eq!(h.client_tags(client), "2CZ");
    }
    let server = h.live_servers();
    assert_eq!(server.len(), 1, "one server, rewritten names on it");
    assert_eq!(h.backend(server[0]).statements, ["pgtier_1"]);
}

#[test]
fn session_state_pins_a_statement_mode_client_as_in_transaction_mode() {
    let mut h = Harness::new(&config("pool_mode = \"statement\"\ndefault_pool_size = 2"));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SET default_transaction_read_only = on"));
    assert_eq!(h.client_tags(a), "CZ");
    let pinned = h.live_servers()[0];
    let (b, _) = h.login("alice", "db");
    h.client_sends(b, &query("SELECT 1"));
    assert_eq!(h.client_tags(b), "TDCZ");
    assert_eq!(
        h.live_servers().len(),
        2,
        "a keeps its server: b needed another"
    );
    h.client_sends(a, &terminate());
    assert!(h.backend(pinned).seen.iter().any(|q| q == "DISCARD ALL"));
    assert!(h.backend(pinned).settings.is_empty());
}

#[test]
fn session_state_is_reset_before_the_server_changes_hands() {
    let mut h = Harness::new(&config(&format!(
        "{STATEMENT}\nserver_reset_query_always = true"
    )));
    let (a, _) = h.login("alice", "db");
    h.client_sends(a, &query("SELECT 1"));
    assert_eq!(h.client_tags(a), "TDCZ");
    let server = h.live_servers()[0];
    h.client_sends(a, &terminate());
    assert!(h.backend(server).seen.iter().any(|q| q == "DISCARD ALL"));
}

#[test]
fn a_user_in_statement_mode_is_refused_blocks_where_others_are_not() {
    let text = config(
        "pool_mode = \"transaction\"\ndefault_pool_size = 2\n[users.bob]\npool_mode = \"statement\"",
    );
    let mut h = Harness::new(&text);
    let (alice, _) = h.login("alice", "db");
    h.client_sends(alice, &query("BEGIN"));
    assert_eq!(
        h.client_tags(alice),
        "CZ",
        "transaction mode keeps its block"
    );
    h.client_sends(alice, &query("COMMIT"));
    assert_eq!(h.client_tags(alice), "CZ");
    let (bob, _) = h.login("bob", "db");
    h.client_sends(bob, &query("BEGIN"));
    assert_eq!(only_error(&h.client_output(bob)), refused());
    assert!(h.is_closed(Conn::Client(bob)));
    assert!(!h.is_closed(Conn::Client(alice)));
}

#[test]
fn a_replication_connection_is_in_session_mode_and_may_open_blocks() {
    // PgBouncer pools a replication connection in session mode whatever its entry says:
    // logical replication's table sync runs in a transaction block.
    let mut h = Harness::new(&config(STATEMENT));
    let id = h.accept();
    let params = [
        ("user", "alice"),
        ("database", "db"),
        ("replication", "database"),
    ];
    h.client_sends(id, &startup(&params));
    assert!(h.client_tags(id).ends_with('Z'));
    h.client_sends(id, &query("BEGIN"));
    assert_eq!(h.client_tags(id), "CZ");
    h.client_sends(id, &query("COMMIT"));
    assert_eq!(h.client_tags(id), "CZ");
    assert!(!h.is_closed(Conn::Client(id)));
}
