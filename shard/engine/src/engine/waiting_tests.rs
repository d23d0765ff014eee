//! Clients waiting for a server are served by class (`waiter_policy`): a premium client parked
//! after a freemium one on the same pool gets the server first; under `fifo` it does not.

use crate::testing::{Harness, query};

/// One server of an entry that logs every client in as `app`, so alice (premium) and bob
/// (the entry's freemium) share one pool.
fn shared_pool(policy: &str) -> String {
    format!(
        "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\npool_mode = \"transaction\"\n\
         default_pool_size = 1\nwaiter_policy = \"{policy}\"\n\
         [databases.db]\nhost = \"127.0.0.1\"\nport = 5432\ndbname = \"db\"\nuser = \"app\"\n\
         class = \"freemium\"\n\
         [users.alice]\nclass = \"premium\"\n"
    )
}

/// The order in which the queued SELECTs reached the one server.
fn order_served(policy: &str) -> Vec<String> {
    let mut h = Harness::new(&shared_pool(policy));
    let (holder, _) = h.login("bob", "db");
    let (freemium, _) = h.login("bob", "db");
    let (premium, _) = h.login("alice", "db");
    h.client_sends(holder, &query("BEGIN"));
    assert_eq!(h.client_tags(holder), "CZ");
    h.client_sends(freemium, &query("SELECT 'freemium'"));
    h.client_sends(premium, &query("SELECT 'premium'"));
    assert_eq!(
        h.client_tags(freemium),
        "",
        "the only server is in a transaction"
    );
    assert_eq!(h.client_tags(premium), "");
    h.client_sends(holder, &query("COMMIT"));
    assert_eq!(h.client_tags(premium), "TDCZ");
    assert_eq!(h.client_tags(freemium), "TDCZ");
    let servers = h.live_servers();
    assert_eq!(servers.len(), 1, "all three shared one server");
    h.backend(servers[0])
        .seen
        .iter()
        .filter(|sql| sql.starts_with("SELECT '"))
        .cloned()
        .collect()
}

#[test]
fn a_premium_client_parked_after_a_freemium_one_gets_the_server_first() {
    assert_eq!(
        order_served("class"),
        ["SELECT 'premium'", "SELECT 'freemium'"]
    );
}

#[test]
fn fifo_serves_waiters_in_arrival_order_whatever_their_class() {
    assert_eq!(
        order_served("fifo"),
        ["SELECT 'freemium'", "SELECT 'premium'"]
    );
}
