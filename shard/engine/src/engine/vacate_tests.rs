//! Table tests of a client's database DDL (`engine/linker/vacate.rs`) through two kernel-less
//! drivers sharing one set of budgets (`testing::Pair`): the idle servers of the database
//! the statement names (by its PostgreSQL name, not the entry's) get Terminate and close on
//! both shards before the statement is answered; a server a client is using stays; servers
//! of other databases stay; and the warmup does not refill the emptied pool at once.

use std::time::Duration;

use crate::testing::{Pair, config, parse, query, sync};

/// An entry `shop` for the PostgreSQL database `Shop Main`, next to `db`.
fn shop_config(extra: &str) -> String {
    format!(
        "{}[databases.shop]\nhost = \"127.0.0.1\"\nport = 5432\ndbname = \"Shop Main\"\n{extra}",
        config("pool_mode = \"transaction\"\ndefault_pool_size = 4")
    )
}

/// A client of `shop` on each shard ran a query and left its server idle; returns the two
/// servers.
fn idle_shop_servers(pair: &mut Pair) -> [crate::ServerId; 2] {
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    // Both in a transaction at once, so that each shard opens its own server (a server idle
    // on the other shard would be borrowed instead).
    for shard in &mut pair.shards {
        let (client, _) = shard.login("alice", "shop");
        shard.client_sends(client, &query("BEGIN"));
        assert!(shard.client_tags(client).ends_with('Z'));
        clients.push(client);
    }
    for (shard, client) in pair.shards.iter_mut().zip(clients) {
        shard.client_sends(client, &query("COMMIT"));
        assert!(shard.client_tags(client).ends_with('Z'));
        shard.client_leaves(client);
        let live = shard.live_servers();
        assert_eq!(live.len(), 1);
        servers.push(live[0]);
    }
    pair.exchange();
    [servers[0], servers[1]]
}

/// Whether the last message pgtier sent a server is a Terminate.
fn terminated(pair: &Pair, shard: usize, server: crate::ServerId) -> bool {
    pair.shards[shard]
        .output_to(server)
        .ends_with(&crate::testing::terminate())
}

#[test]
fn drop_database_closes_the_idle_servers_of_that_database_on_both_shards() {
    let mut pair = Pair::new(&shop_config(""));
    let shop = idle_shop_servers(&mut pair);
    let (admin, _) = pair.shards[0].login("alice", "db");
    let own: Vec<_> = pair.shards[0]
        .live_servers()
        .into_iter()
        .filter(|id| *id != shop[0])
        .collect();
    assert_eq!(own.len(), 1, "the db entry's server");
    pair.shards[0].client_sends(
        admin,
        &query("/* test */ drop database if exists \"Shop Main\""),
    );
    assert!(terminated(&pair, 0, shop[0]), "Terminate on this shard");
    assert!(!pair.shards[0].live_servers().contains(&shop[0]));
    assert!(
        !terminated(&pair, 1, shop[1]),
        "not before the post arrives"
    );
    pair.exchange();
    assert!(
        terminated(&pair, 1, shop[1]),
        "Terminate on the other shard"
    );
    assert!(pair.shards[1].live_servers().is_empty());
    assert!(
        own.iter()
            .all(|id| pair.shards[0].live_servers().contains(id)),
        "the db entry's server stays"
    );
    assert!(pair.shards[0].client_tags(admin).ends_with('Z'));
    for shard in &pair.shards {
        shard.engine.check_invariants().expect("invariants");
    }
}

#[test]
fn a_server_in_use_stays_and_a_parse_text_counts_too() {
    let mut pair = Pair::new(&shop_config(""));
    let shop = idle_shop_servers(&mut pair);
    let (user, _) = pair.shards[1].login("bob", "shop");
    pair.shards[1].client_sends(user, &query("BEGIN"));
    // Bob's own pool (another user): alice's idle server is still there next to his.
    let live = pair.shards[1].live_servers();
    assert_eq!(live.len(), 2);
    let in_use: Vec<_> = live.into_iter().filter(|id| *id != shop[1]).collect();
    let (admin, _) = pair.shards[0].login("alice", "db");
    let mut extended = parse("", "ALTER DATABASE \"Shop Main\" RENAME TO shop_old");
    extended.extend(sync());
    pair.shards[0].client_sends(admin, &extended);
    pair.exchange();
    assert!(!pair.shards[0].live_servers().contains(&shop[0]));
    assert_eq!(
        pair.shards[1].live_servers(),
        in_use,
        "alice's idle server closed, bob's stays"
    );
    pair.shards[1].client_sends(user, &query("COMMIT"));
    assert!(pair.shards[1].client_tags(user).ends_with('Z'));
}

#[test]
fn other_databases_are_untouched_and_the_warmup_waits() {
    let mut pair = Pair::new(&shop_config("user = \"alice\"\nmin_pool_size = 2\n"));
    pair.advance(Duration::from_millis(300));
    let warm: usize = pair.shards.iter().map(|s| s.live_servers().len()).sum();
    assert_eq!(warm, 2, "one warm server per shard");
    let (admin, _) = pair.shards[0].login("alice", "db");
    let before = pair.shards[0].live_servers().len();
    pair.shards[0].client_sends(admin, &query("DROP DATABASE shop"));
    pair.exchange();
    assert_eq!(
        pair.shards[0].live_servers().len(),
        before,
        "`shop` is an entry name, not the database's: nothing closes"
    );
    pair.shards[0].client_sends(admin, &query("DROP DATABASE \"Shop Main\""));
    pair.exchange();
    assert_eq!(pair.shards[1].live_servers().len(), 0);
    pair.advance(Duration::from_secs(1));
    assert_eq!(
        pair.shards[1].live_servers().len(),
        0,
        "no refill while held"
    );
    pair.advance(super::linker::vacate::WARMUP_HOLD);
    assert_eq!(pair.shards[1].live_servers().len(), 1, "the warmup resumes");
}
