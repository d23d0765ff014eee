//! A server left idle on one shard serves the next client of its pool on any shard, seen from
//! PostgreSQL. PgBouncer has one pool per (database, user), so a second client reuses the
//! first one's server; pgtier splits each pool into one slice per shard, and a shard that has
//! no idle server borrows the other shard's idle one (moved whole) rather than opening a new
//! connection, even when the pool size leaves room for one. With two workers and
//! `default_pool_size = 20`: sequential clients, landing on either shard, all get the same
//! backend (`pg_backend_pid()`), and PostgreSQL sees one connection; a server cached idle
//! on shard 0 serves a client on shard 1.

use std::time::Duration;

use postgres::{Client, SimpleQueryMessage};

use pgtier_tests::fixtures::{server_and_proxy, server_connections};
use pgtier_tests::{LocalPg, Pgtier};

const CONSOLE: &str = "pgtier";

/// The first value of the last row a simple query returned.
fn value(client: &mut Client, sql: &str) -> String {
    let messages = client
        .simple_query(sql)
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_string),
            _ => None,
        })
        .last()
        .unwrap_or_else(|| panic!("{sql}: no row"))
}

/// The shard SHOW CLIENTS gives for the client that set `application_name`.
fn shard_of(console: &mut Client, application_name: &str) -> Option<String> {
    let messages = console
        .simple_query("SHOW CLIENTS")
        .unwrap_or_else(|error| panic!("SHOW CLIENTS: {error}"));
    messages.iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => {
            let column = |name: &str| {
                row.columns()
                    .iter()
                    .position(|column| column.name() == name)
                    .and_then(|index| row.get(index))
            };
            (column("application_name") == Some(application_name))
                .then(|| column("shard").map(str::to_string))
                .flatten()
        }
        _ => None,
    })
}

/// A client named `name_<n>` and the shard it landed on.
fn client(proxy: &Pgtier, console: &mut Client, name: &str, attempt: usize) -> (Client, String) {
    let application_name = format!("{name}_{attempt}");
    let mut config = proxy.pg_config("postgres", "postgres");
    config.application_name(&application_name);
    let client = config
        .connect(postgres::NoTls)
        .unwrap_or_else(|error| panic!("connect: {error}\n{}", proxy.log()));
    let shard = shard_of(console, &application_name)
        .unwrap_or_else(|| panic!("{application_name} not in SHOW CLIENTS"));
    (client, shard)
}

fn two_workers_pool_of_20() -> (LocalPg, Pgtier) {
    server_and_proxy(|config| {
        let mut config = config
            .pool_mode("transaction")
            .pool_size(20)
            .setting("admin_users", "[\"postgres\"]");
        config.workers = 2;
        config
    })
}

#[test]
fn sequential_clients_on_either_shard_get_the_same_backend() {
    let (pg, proxy) = two_workers_pool_of_20();
    let mut console = proxy
        .connect(CONSOLE, "postgres")
        .unwrap_or_else(|error| panic!("console: {error}\n{}", proxy.log()));
    let mut pids = Vec::new();
    let mut shards = Vec::new();
    // Until clients landed on both shards (SO_REUSEPORT spreads them), at least 6.
    for attempt in 0..200 {
        let (mut client, shard) = client(&proxy, &mut console, "sequential", attempt);
        pids.push(value(&mut client, "SELECT pg_backend_pid()"));
        shards.push(shard);
        drop(client);
        let both = shards.iter().any(|s| s == "0") && shards.iter().any(|s| s == "1");
        if both && attempt >= 5 {
            break;
        }
    }
    assert!(
        shards.iter().any(|s| s == "0") && shards.iter().any(|s| s == "1"),
        "clients landed on one shard only: {shards:?}"
    );
    assert!(
        pids.iter().all(|pid| *pid == pids[0]),
        "one backend for every client: pids {pids:?} on shards {shards:?}\n{}",
        proxy.log()
    );
    assert_eq!(server_connections(&pg, "postgres"), 1);
}

#[test]
fn a_server_cached_idle_on_one_shard_serves_a_client_on_the_other() {
    let (pg, proxy) = two_workers_pool_of_20();
    let mut console = proxy
        .connect(CONSOLE, "postgres")
        .unwrap_or_else(|error| panic!("console: {error}\n{}", proxy.log()));
    let mut clients = Vec::new();
    let mut first = None;
    for attempt in 0..200 {
        let (client, shard) = client(&proxy, &mut console, "first", attempt);
        if shard == "0" {
            first = Some(client);
            break;
        }
        clients.push(client);
    }
    let mut first = first.expect("no client landed on shard 0");
    let pid = value(&mut first, "SELECT pg_backend_pid()");
    // The server is idle on shard 0 now (transaction pooling), its client still connected.
    let mut second = None;
    for attempt in 0..200 {
        let (client, shard) = client(&proxy, &mut console, "second", attempt);
        if shard == "1" {
            second = Some(client);
            break;
        }
        clients.push(client);
    }
    let mut second = second.expect("no client landed on shard 1");
    assert_eq!(
        value(&mut second, "SELECT pg_backend_pid()"),
        pid,
        "the idle server of shard 0 served shard 1's client\n{}",
        proxy.log()
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        server_connections(&pg, "postgres"),
        1,
        "no second connection"
    );
    // And it went back to shard 0's client the same way.
    assert_eq!(value(&mut first, "SELECT pg_backend_pid()"), pid);
}
