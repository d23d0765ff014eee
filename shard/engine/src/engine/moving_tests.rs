//! Table tests of servers moving whole between shards (`engine/moving.rs`), through two
//! kernel-less drivers sharing one set of budgets (`testing::Pair`): a clean server moves with
//! its backend and its state to the shard whose client waits, and no server is opened for it;
//! a server released while the other shard waits goes there directly; a server that arrives
//! after its waiter left stays idle; a server that holds prepared statements moves and drops
//! them before it serves on its new shard; a server that speaks while its socket is detached
//! is ended for its slot instead. A client that needs no server for its welcome gets the one
//! another shard's server login reported. A shard that can log in opens its own server; one
//! whose login PostgreSQL refused borrows another shard's idle server instead of failing its
//! waiters (moved whole, checked first when stale); a borrow refused because the server was
//! used meanwhile, or left unanswered, gives them the refusal.

use std::time::Duration;

use crate::action::Conn;
use crate::testing::{Pair, config, parse, query, startup, sync};

const TX_ONE: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 1";
const PERIOD: Duration = Duration::from_millis(300);

/// Both shards with one client of alice's pool each; the only server has moved to shard 1,
/// where the second client's welcome needed it. Returns the two clients and the server's pid.
fn two_clients_one_server(pair: &mut Pair) -> (crate::ClientId, crate::ClientId, u32) {
    let (a, messages) = pair.shards[0].login("alice", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    let server = pair.shards[0].live_servers()[0];
    let pid = pair.shards[0].backend(server).pid;
    let (b, messages) = login_needing_a_server(&mut pair.shards[1]);
    assert!(messages.is_empty(), "b waits for a server to welcome it");
    pair.exchange();
    (a, b, pid)
}

/// A client of alice's pool whose welcome needs a server: its `application_name` is a
/// spelling the pool has not seen a server answer (a client with none would be welcomed
/// from the welcome another shard's server login reported).
fn login_needing_a_server(
    shard: &mut crate::testing::Harness,
) -> (crate::ClientId, Vec<crate::testing::Msg>) {
    let id = shard.accept();
    shard.client_sends(
        id,
        &startup(&[
            ("user", "alice"),
            ("database", "db"),
            ("application_name", "needs-a-server"),
        ]),
    );
    let messages = shard.client_output(id);
    (id, messages)
}

/// Servers counted in the budgets: each holds a slot of its pool's budget and of its
/// database's and user's caps.
fn budget_in_use(pair: &Pair) -> u32 {
    pair.shards[0].engine.env.shared().budgets.in_use() / 3
}

#[test]
fn a_clean_idle_server_moves_whole_to_the_shard_whose_client_waits() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (_a, b, pid) = two_clients_one_server(&mut pair);
    let tags = pair.shards[1].client_tags(b);
    assert!(tags.starts_with('R') && tags.ends_with("KZ"), "{tags}");
    assert!(pair.shards[0].live_servers().is_empty(), "it left shard 0");
    let moved = pair.shards[1].live_servers();
    assert_eq!(moved.len(), 1);
    assert_eq!(
        pair.shards[1].backend(moved[0]).pid,
        pid,
        "the same backend"
    );
    assert!(pair.shards[1].connects.is_empty(), "no server was opened");
    assert_eq!(pair.shards[0].connects.len(), 1);
    assert_eq!(budget_in_use(&pair), 1, "its one slot moved with it");
    assert!(!pair.shards[0].is_closed(Conn::Server(moved[0])));
    pair.shards[1].client_sends(b, &query("SELECT 1"));
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
    for shard in &pair.shards {
        shard.engine.check_invariants().expect("invariants");
    }
}

#[test]
fn a_server_released_while_the_other_shard_waits_is_handed_there_directly() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (a, b, pid) = two_clients_one_server(&mut pair);
    let _ = pair.shards[1].client_tags(b);
    pair.advance(PERIOD);
    // a's transaction takes the server back to shard 0 (it was idle on shard 1).
    pair.shards[0].client_sends(a, &query("BEGIN"));
    pair.exchange();
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    pair.advance(PERIOD);
    // b waits on shard 1 while a's transaction holds the one server.
    pair.shards[1].client_sends(b, &query("SELECT 1"));
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(b), "", "b waits for a's COMMIT");
    pair.shards[0].client_sends(a, &query("COMMIT"));
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    pair.exchange();
    assert_eq!(
        pair.shards[1].client_tags(b),
        "TDCZ",
        "b ran on the moved server"
    );
    let server = pair.shards[1].live_servers()[0];
    let backend = pair.shards[1].backend(server);
    assert_eq!(backend.pid, pid);
    assert!(
        backend.seen.iter().any(|q| q == "BEGIN") && backend.seen.iter().any(|q| q == "SELECT 1"),
        "one backend served both shards: {:?}",
        backend.seen
    );
    let opened = pair.shards[0].connects.len() + pair.shards[1].connects.len();
    assert_eq!(opened, 1, "PostgreSQL saw one connection");
    assert_eq!(budget_in_use(&pair), 1);
}

#[test]
fn a_server_that_arrives_after_its_waiter_left_is_kept_idle() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (_a, _) = pair.shards[0].login("alice", "db");
    let (b, _) = login_needing_a_server(&mut pair.shards[1]);
    pair.shards[1].client_leaves(b);
    pair.exchange();
    let arrived = pair.shards[1].live_servers();
    assert_eq!(arrived.len(), 1, "it arrived and stays");
    assert!(!pair.shards[1].is_closed(Conn::Server(arrived[0])));
    assert!(pair.shards[0].live_servers().is_empty());
    assert_eq!(budget_in_use(&pair), 1, "counted once");
    // The pool learned its welcome from the server's shard: the next client needs no server.
    let (c, messages) = pair.shards[1].login("alice", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'));
    pair.shards[1].client_sends(c, &query("SELECT 1"));
    assert_eq!(pair.shards[1].client_tags(c), "TDCZ");
    assert!(pair.shards[1].connects.is_empty());
    pair.shards[1]
        .engine
        .check_invariants()
        .expect("invariants");
}

#[test]
fn a_server_that_speaks_while_its_socket_is_detached_is_ended_and_its_slot_moves() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (_a, _) = pair.shards[0].login("alice", "db");
    let server = pair.shards[0].live_servers()[0];
    pair.shards[0].hold_detaches = true;
    let (b, _) = login_needing_a_server(&mut pair.shards[1]);
    pair.exchange();
    assert_eq!(pair.shards[0].detaching, vec![server]);
    // A notice arrives before the receive is cancelled: the driver hands it over instead.
    pair.shards[0].detaching.clear();
    let notice = crate::testing::frame(b'N', b"SNOTICE\0Mhello\0\0");
    pair.shards[0].server_sends(server, &notice);
    assert!(pair.shards[0].is_closed(Conn::Server(server)));
    pair.exchange();
    assert_eq!(
        pair.shards[1].connects.len(),
        1,
        "shard 1 opened with the slot"
    );
    let tags = pair.shards[1].client_tags(b);
    assert!(tags.ends_with("KZ"), "{tags}");
    assert_eq!(budget_in_use(&pair), 1);
}

#[test]
fn a_server_with_prepared_statements_moves_and_drops_them_before_it_serves_there() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (a, _) = pair.shards[0].login("alice", "db");
    pair.shards[0].client_sends(a, &[parse("s1", "SELECT 1"), sync()].concat());
    assert_eq!(pair.shards[0].client_tags(a), "1Z");
    let pid = pair.shards[0].backend(pair.shards[0].live_servers()[0]).pid;
    let (b, _) = login_needing_a_server(&mut pair.shards[1]);
    pair.exchange();
    assert!(pair.shards[1].connects.is_empty(), "it moved");
    let server = pair.shards[1].live_servers()[0];
    let backend = pair.shards[1].backend(server);
    assert_eq!(backend.pid, pid);
    assert!(
        backend.seen.iter().any(|q| q == "DEALLOCATE ALL"),
        "shard 0's pgtier_<n> names are dropped first: {:?}",
        backend.seen
    );
    assert!(backend.statements.is_empty());
    let tags = pair.shards[1].client_tags(b);
    assert!(tags.ends_with("KZ"), "{tags}");
    // b's own statement s1 is prepared under shard 1's name, without a clash.
    pair.shards[1].client_sends(b, &[parse("s1", "SELECT 2"), sync()].concat());
    assert_eq!(pair.shards[1].client_tags(b), "1Z");
    assert_eq!(budget_in_use(&pair), 1);
    pair.shards[1]
        .engine
        .check_invariants()
        .expect("invariants");
}

#[test]
fn a_moving_server_whose_post_is_not_delivered_is_adopted_back_where_it_was() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (a, _) = pair.shards[0].login("alice", "db");
    let pid = pair.shards[0].backend(pair.shards[0].live_servers()[0]).pid;
    let (_b, _) = login_needing_a_server(&mut pair.shards[1]);
    // Deliver the ask, but keep what shard 0 posts in answer from reaching shard 1: the
    // driver gives an undeliverable ServerMoved back to its own engine.
    for (_, command) in std::mem::take(&mut pair.shards[1].posts) {
        let now = pair.shards[0].now;
        pair.shards[0].engine.handle_command(now, command);
        pair.shards[0].pump();
    }
    let posts = std::mem::take(&mut pair.shards[0].posts);
    assert!(matches!(
        posts.as_slice(),
        [(1, crate::command::Command::ServerMoved { .. })]
    ));
    for (_, command) in posts {
        let now = pair.shards[0].now;
        pair.shards[0].engine.handle_command(now, command);
        pair.shards[0].pump();
    }
    let servers = pair.shards[0].live_servers();
    assert_eq!(servers.len(), 1, "back on shard 0");
    assert_eq!(pair.shards[0].backend(servers[0]).pid, pid);
    pair.shards[0].client_sends(a, &query("SELECT 1"));
    assert_eq!(pair.shards[0].client_tags(a), "TDCZ");
    assert_eq!(budget_in_use(&pair), 1, "counted once");
    pair.shards[0]
        .engine
        .check_invariants()
        .expect("invariants");
}

#[test]
fn a_client_is_welcomed_with_what_another_shards_server_login_reported() {
    let mut pair = Pair::new(&config(TX_ONE));
    let (a, _) = pair.shards[0].login("alice", "db");
    // a holds the pool's only server in a transaction.
    pair.shards[0].client_sends(a, &query("BEGIN"));
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    let (b, messages) = pair.shards[1].login("alice", "db");
    assert_eq!(
        messages.last().map(|m| m.tag),
        Some(b'Z'),
        "welcomed without a server: {messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.tag == b'S' && m.body.starts_with(b"server_version\0")),
        "with the server's parameters: {messages:?}"
    );
    assert!(pair.shards[1].connects.is_empty());
    pair.exchange();
    // b's query waits for the server a holds.
    pair.shards[1].client_sends(b, &query("SELECT 1"));
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(b), "");
    pair.shards[0].client_sends(a, &query("COMMIT"));
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
}

const TX_MANY: &str = "pool_mode = \"transaction\"\ndefault_pool_size = 20";

/// A client of alice's pool on shard 0 ran a query and left its server idle; returns the
/// server's pid.
fn idle_on_shard_0(pair: &mut Pair) -> u32 {
    let (a, _) = pair.shards[0].login("alice", "db");
    pair.shards[0].client_sends(a, &query("SELECT 1"));
    assert_eq!(pair.shards[0].client_tags(a), "TDCZ");
    pair.shards[0].client_leaves(a);
    let server = pair.shards[0].live_servers()[0];
    pair.shards[0].backend(server).pid
}

/// Shard 1 sends `sql` for client `b`; its pool has no server, so it logs one in, and
/// PostgreSQL refuses the login (`pg_hba.conf` changed since shard 0's server logged in).
fn login_refused_on_shard_1(pair: &mut Pair, b: crate::ClientId, sql: &str) {
    let shard = &mut pair.shards[1];
    shard.auto_backend = false;
    shard.client_sends(b, &query(sql));
    let (server, _) = shard
        .connecting
        .last()
        .cloned()
        .expect("shard 1 logs a server in");
    shard.complete_connects_without_backend();
    shard.server_sends(
        server,
        &crate::testing::error(
            "FATAL",
            "28000",
            "no pg_hba.conf entry for host \"127.0.0.1\", user \"alice\", database \"db\"",
        ),
    );
    shard.auto_backend = true;
}

#[test]
fn a_shard_that_can_log_in_opens_its_own_server() {
    let mut pair = Pair::new(&config(TX_MANY));
    let pid = idle_on_shard_0(&mut pair);
    let (b, _) = pair.shards[1].login("alice", "db");
    pair.shards[1].client_sends(b, &query("SELECT 1"));
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
    assert_eq!(pair.shards[1].connects.len(), 1, "opened within pool_size");
    assert!(pair.shards[1].posts.is_empty(), "nothing asked of shard 0");
    let server = pair.shards[1].live_servers()[0];
    assert_ne!(
        pair.shards[1].backend(server).pid,
        pid,
        "a backend of its own"
    );
    assert_eq!(
        pair.shards[0].live_servers().len(),
        1,
        "shard 0's stays idle"
    );
}

#[test]
fn a_shard_borrows_another_shards_idle_server_rather_than_opening_one() {
    let mut pair = Pair::new(&config(TX_MANY));
    let pid = idle_on_shard_0(&mut pair);
    let (b, _) = pair.shards[1].login("alice", "db");
    login_refused_on_shard_1(&mut pair, b, "SELECT 1");
    assert_eq!(
        pair.shards[1].client_tags(b),
        "",
        "b waits for the lent server, not failed with the refusal"
    );
    assert_eq!(pair.shards[1].connects.len(), 1, "only the refused login");
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
    let servers = pair.shards[1].live_servers();
    assert_eq!(servers.len(), 1);
    assert_eq!(
        pair.shards[1].backend(servers[0]).pid,
        pid,
        "the same backend"
    );
    assert_eq!(pair.shards[1].connects.len(), 1, "no other open");
    assert!(pair.shards[0].live_servers().is_empty());
    assert_eq!(budget_in_use(&pair), 1);
    // Now idle here, it is reused locally: no message on the way.
    pair.shards[1].client_sends(b, &query("SELECT 2"));
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
    assert!(pair.shards[1].posts.is_empty());
    for shard in &pair.shards {
        shard.engine.check_invariants().expect("invariants");
    }
}

#[test]
fn a_borrow_refused_because_the_server_was_used_meanwhile_gives_the_refusal() {
    let mut pair = Pair::new(&config(TX_MANY));
    let (a, _) = pair.shards[0].login("alice", "db");
    pair.shards[0].client_sends(a, &query("SELECT 1"));
    assert_eq!(pair.shards[0].client_tags(a), "TDCZ");
    let (b, _) = pair.shards[1].login("alice", "db");
    login_refused_on_shard_1(&mut pair, b, "SELECT 1");
    assert_eq!(pair.shards[1].posts.len(), 1, "the borrow is on its way");
    // Before it arrives, shard 0's own client takes its idle server: it stays there.
    pair.shards[0].client_sends(a, &query("BEGIN"));
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    pair.exchange();
    let messages = pair.shards[1].client_output(b);
    assert_eq!(
        messages.iter().find_map(|m| m.sqlstate()).as_deref(),
        Some("28000"),
        "refused: b gets PostgreSQL's refusal: {messages:?}"
    );
    assert!(pair.shards[1].is_closed(Conn::Client(b)));
    assert_eq!(
        pair.shards[1].connects.len(),
        1,
        "no open within server_login_retry"
    );
    assert_eq!(
        pair.shards[0].live_servers().len(),
        1,
        "the busy server stayed"
    );
    pair.shards[0].client_sends(a, &query("COMMIT"));
    assert_eq!(pair.shards[0].client_tags(a), "CZ");
    assert_eq!(budget_in_use(&pair), 1);
    // Within server_login_retry, a client joining on shard 1 is not failed with the refusal
    // while shard 0's server is idle again: it is lent.
    pair.advance(PERIOD * 2);
    let (c, messages) = pair.shards[1].login("alice", "db");
    assert_eq!(messages.last().map(|m| m.tag), Some(b'Z'), "{messages:?}");
    pair.shards[1].client_sends(c, &query("SELECT 1"));
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(c), "TDCZ");
    assert_eq!(
        pair.shards[1].connects.len(),
        1,
        "still only the refused login"
    );
    assert_eq!(
        pair.shards[1].live_servers().len(),
        1,
        "served by the lent server"
    );
    for shard in &pair.shards {
        shard.engine.check_invariants().expect("invariants");
    }
}

#[test]
fn an_unanswered_borrow_gives_the_refusal() {
    let mut pair = Pair::new(&config(TX_MANY));
    idle_on_shard_0(&mut pair);
    let (b, _) = pair.shards[1].login("alice", "db");
    login_refused_on_shard_1(&mut pair, b, "SELECT 1");
    // The other shard never answers.
    let lost = std::mem::take(&mut pair.shards[1].posts);
    assert_eq!(lost.len(), 1);
    pair.shards[1].advance(Duration::from_millis(50));
    assert!(
        !pair.shards[1].is_closed(Conn::Client(b)),
        "still waiting for the answer"
    );
    pair.shards[1].advance(Duration::from_millis(60));
    let messages = pair.shards[1].client_output(b);
    assert_eq!(
        messages.iter().find_map(|m| m.sqlstate()).as_deref(),
        Some("28000"),
        "past BORROW_WAIT: {messages:?}"
    );
    assert!(pair.shards[1].is_closed(Conn::Client(b)));
}

#[test]
fn a_borrowed_server_idle_past_server_check_delay_is_checked_before_it_serves() {
    let mut pair = Pair::new(&config(&format!("{TX_MANY}\nserver_check_delay = 0")));
    let pid = idle_on_shard_0(&mut pair);
    pair.advance(Duration::from_millis(10));
    let (b, _) = pair.shards[1].login("alice", "db");
    login_refused_on_shard_1(&mut pair, b, "SELECT 2");
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
    let server = pair.shards[1].live_servers()[0];
    let backend = pair.shards[1].backend(server);
    assert_eq!(backend.pid, pid);
    let check = backend.seen.iter().position(|q| q.is_empty());
    let served = backend.seen.iter().position(|q| q == "SELECT 2");
    assert!(
        check.is_some() && check < served,
        "checked, then served: {:?}",
        backend.seen
    );
}

/// PgBouncer's test_server_check_query with two shards: with `server_check_delay = 0`, a
/// server a client used and released on shard 0 runs the check query on shard 1 before that
/// shard's client gets it, as it would on a checkout where it sat.
#[test]
fn a_used_server_that_moves_is_checked_before_the_client_there_gets_it() {
    let mut pair = Pair::new(&config(&format!(
        "{TX_ONE}\nserver_check_delay = 0\nserver_check_query = \"SELECT 2\""
    )));
    let (a, _) = pair.shards[0].login("alice", "db");
    pair.shards[0].client_sends(a, &query("SELECT 1"));
    assert_eq!(pair.shards[0].client_tags(a), "TDCZ");
    let server = pair.shards[0].live_servers()[0];
    let pid = pair.shards[0].backend(server).pid;
    pair.shards[0].client_leaves(a);
    pair.advance(PERIOD);
    let (b, _) = pair.shards[1].login("alice", "db");
    pair.shards[1].client_sends(b, &query("SELECT 3"));
    pair.exchange();
    assert_eq!(pair.shards[1].client_tags(b), "TDCZ");
    let moved = pair.shards[1].live_servers();
    assert_eq!(moved.len(), 1);
    assert_eq!(
        pair.shards[1].backend(moved[0]).pid,
        pid,
        "the same backend"
    );
    let seen = pair.shards[1].backend(moved[0]).seen.clone();
    let check = seen.iter().position(|q| q == "SELECT 2").expect("checked");
    let query_at = seen.iter().position(|q| q == "SELECT 3").expect("ran");
    assert!(check < query_at, "the check ran first: {seen:?}");
    for shard in &pair.shards {
        shard.engine.check_invariants().expect("invariants");
    }
}
