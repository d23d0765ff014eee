//! Servers moving whole between shards, seen from PostgreSQL. With two workers and a pool of
//! one server, a client on each shard: the second shard's client waits while the first one's
//! transaction holds the server, runs its query once that transaction commits, and the very
//! same backend (same pid, same `backend_start`) served both: no new connection was opened
//! for the other shard.
//!
//! The second client prepares its query (rust-postgres' extended protocol with a named
//! statement), so the server comes back to the first shard holding a statement named by the
//! other shard: it is deallocated on arrival, and the first client's query still runs on the
//! same backend.

use std::time::Duration;

use postgres::{Client, SimpleQueryMessage};

use pgtier_tests::fixtures::{admin, server_and_proxy, server_connections};
use pgtier_tests::{Pgtier, wait};

const CONSOLE: &str = "pgtier";
const WAIT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(20);

/// Rows of a console SHOW as (column, value) pairs.
fn show(console: &mut Client, sql: &str) -> Vec<Vec<(String, Option<String>)>> {
    let messages = console
        .simple_query(sql)
        .unwrap_or_else(|error| panic!("{sql}: {error}"));
    messages
        .iter()
        .filter_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(
                row.columns()
                    .iter()
                    .enumerate()
                    .map(|(i, column)| (column.name().to_string(), row.get(i).map(str::to_string)))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

fn column<'a>(row: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    row.iter()
        .find(|(column, _)| column == name)
        .and_then(|(_, value)| value.as_deref())
}

/// The SHOW CLIENTS row of the client that set `application_name`.
fn client_row(
    console: &mut Client,
    application_name: &str,
) -> Option<Vec<(String, Option<String>)>> {
    show(console, "SHOW CLIENTS")
        .into_iter()
        .find(|row| column(row, "application_name") == Some(application_name))
}

/// A client that landed on shard `shard` (SO_REUSEPORT spreads connections; reconnect
/// until one lands there), named `name` in SHOW CLIENTS.
fn client_on_shard(proxy: &Pgtier, console: &mut Client, shard: usize, name: &str) -> Client {
    for attempt in 0..200 {
        let application_name = format!("{name}_{attempt}");
        let mut config = proxy.pg_config("postgres", "postgres");
        config.application_name(&application_name);
        let client = config
            .connect(postgres::NoTls)
            .unwrap_or_else(|error| panic!("connect: {error}\n{}", proxy.log()));
        let landed = client_row(console, &application_name)
            .and_then(|row| column(&row, "shard").map(str::to_string));
        if landed.as_deref() == Some(shard.to_string().as_str()) {
            return client;
        }
    }
    panic!("no connection landed on shard {shard}");
}

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

#[test]
fn one_backend_serves_a_client_on_each_shard_in_turn() {
    let (pg, proxy) = server_and_proxy(|config| {
        let mut config = config.pool_size(1).setting("admin_users", "[\"postgres\"]");
        config.workers = 2;
        config
    });
    let mut console = proxy
        .connect(CONSOLE, "postgres")
        .unwrap_or_else(|error| panic!("console: {error}\n{}", proxy.log()));
    let mut first = client_on_shard(&proxy, &mut console, 0, "first");
    let mut second = client_on_shard(&proxy, &mut console, 1, "second");
    let pid = value(&mut first, "BEGIN; SELECT pg_backend_pid()");
    let started = admin(
        &pg,
        &format!("SELECT backend_start FROM pg_stat_activity WHERE pid = {pid}"),
    );
    let waiter = std::thread::spawn(move || {
        let pid: i32 = second
            .query_one("SELECT pg_backend_pid()", &[])
            .map(|row| row.get(0))
            .unwrap_or_else(|error| panic!("prepared query: {error}"));
        (pid.to_string(), second)
    });
    // The second client waits on shard 1 while the transaction on shard 0 holds the server.
    let waiting = wait::until(WAIT, POLL, || {
        show(&mut console, "SHOW CLIENTS")
            .iter()
            .any(|row| column(row, "shard") == Some("1") && column(row, "state") == Some("waiting"))
            .then_some(())
    });
    assert!(
        waiting.is_some(),
        "the second client waits\n{}",
        proxy.log()
    );
    first
        .simple_query("COMMIT")
        .unwrap_or_else(|error| panic!("COMMIT: {error}"));
    let (served, mut second) = waiter
        .join()
        .unwrap_or_else(|_| panic!("the waiting client's thread"));
    assert_eq!(
        served,
        pid,
        "the backend moved to shard 1 with its socket\n{}",
        proxy.log()
    );
    let still = admin(
        &pg,
        &format!("SELECT backend_start FROM pg_stat_activity WHERE pid = {pid}"),
    );
    assert_eq!(still, started, "the same backend, never reconnected");
    assert_eq!(
        server_connections(&pg, "postgres"),
        1,
        "PostgreSQL saw one connection"
    );
    // And back: the first shard's next transaction gets the same backend again, its
    // statements named by shard 1 dropped on the way.
    assert_eq!(value(&mut first, "SELECT pg_backend_pid()"), pid);
    // And the second client's prepared query once more, on the same backend: shard 1 named
    // its statements afresh, without a clash.
    let again: i32 = second
        .query_one("SELECT pg_backend_pid()", &[])
        .map(|row| row.get(0))
        .unwrap_or_else(|error| panic!("prepared query again: {error}\n{}", proxy.log()));
    assert_eq!(again.to_string(), pid);
    assert_eq!(server_connections(&pg, "postgres"), 1);
}
