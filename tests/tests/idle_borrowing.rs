//! A server left idle on one shard serves a client of its pool on the other shard when
//! PostgreSQL refuses that shard's new login, seen from PostgreSQL. PgBouncer has one pool per
//! (database, user), so a client reuses the server another client left idle even after
//! `pg_hba.conf` or the role changed (its test suite's "connection is still cached"); pgtier
//! splits each pool into one slice per shard, and a shard whose login is refused borrows the
//! other shard's idle server (moved whole) rather than fail its client. A shard that can
//! still log in opens its own server within `pool_size` (a new client then gets a new backend
//! as often as without pooling across shards), and with nothing idle anywhere the client gets
//! PostgreSQL's refusal.

use postgres::{Client, SimpleQueryMessage};

use pgtier_tests::fixtures::{admin, server, sqlstate, start_proxy};
use pgtier_tests::{LocalPg, Pgtier, ProxyConfig};

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

/// A client of `cached` named `name_<n>` and the shard it landed on.
fn client(proxy: &Pgtier, console: &mut Client, name: &str, attempt: usize) -> (Client, String) {
    let application_name = format!("{name}_{attempt}");
    let mut config = proxy.pg_config("postgres", "cached");
    config.application_name(&application_name);
    let client = config
        .connect(postgres::NoTls)
        .unwrap_or_else(|error| panic!("connect: {error:?}\n{}", proxy.log()));
    let shard = shard_of(console, &application_name)
        .unwrap_or_else(|| panic!("{application_name} not in SHOW CLIENTS"));
    (client, shard)
}

/// A primary with the role `cached` and two workers in front of it, pool size 20, in
/// transaction mode.
fn two_workers_pool_of_20() -> (LocalPg, Pgtier) {
    let pg = server();
    admin(&pg, "CREATE ROLE cached LOGIN");
    let mut config = ProxyConfig::new(pg.port())
        .user("cached", "")
        .pool_mode("transaction")
        .pool_size(20)
        .setting("admin_users", "[\"postgres\"]");
    config.workers = 2;
    (pg, start_proxy(config))
}

/// Connects as `cached` until a client lands on `shard`; the others are kept connected in
/// `others` (so they do not land elsewhere again).
fn client_on(
    proxy: &Pgtier,
    console: &mut Client,
    name: &str,
    shard: &str,
    others: &mut Vec<Client>,
) -> Client {
    for attempt in 0..200 {
        let (client, landed) = client(proxy, console, name, attempt);
        if landed == shard {
            return client;
        }
        others.push(client);
    }
    panic!("no client landed on shard {shard}");
}

#[test]
fn a_server_cached_idle_on_one_shard_serves_a_client_whose_login_is_refused_on_the_other() {
    let (pg, proxy) = two_workers_pool_of_20();
    let mut console = proxy
        .connect(CONSOLE, "postgres")
        .unwrap_or_else(|error| panic!("console: {error}\n{}", proxy.log()));
    let mut others = Vec::new();
    let mut first = client_on(&proxy, &mut console, "first", "0", &mut others);
    let pid = value(&mut first, "SELECT pg_backend_pid()");
    // The server is idle on shard 0 now (transaction pooling), its client still connected.
    // Shard 1 logged in servers of its own (for its clients' welcome, and for `second`'s
    // query): they end, so that none is left there.
    let mut second = client_on(&proxy, &mut console, "second", "1", &mut others);
    let own = value(&mut second, "SELECT pg_backend_pid()");
    assert_ne!(own, pid, "shard 1 logged in its own server");
    admin(
        &pg,
        &format!(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE usename = 'cached' AND pid <> {pid}"
        ),
    );
    wait_for(&proxy, "only shard 0's server left", || {
        servers(&mut console) == 1
    });
    // PostgreSQL now refuses new logins of the role; the logged-in backend goes on.
    admin(&pg, "ALTER ROLE cached NOLOGIN");
    assert_eq!(
        value(&mut second, "SELECT pg_backend_pid()"),
        pid,
        "the idle server of shard 0 served shard 1's client\n{}",
        proxy.log()
    );
    assert_eq!(logged_in(&pg), "1", "no second login of cached");
    // RECONNECT closes the pool's servers (PgBouncer's test does the same): with nothing
    // idle anywhere, a client gets PostgreSQL's refusal, at login or at its first query.
    console
        .simple_query("RECONNECT")
        .unwrap_or_else(|error| panic!("RECONNECT: {error}"));
    wait_for(&proxy, "no server left", || servers(&mut console) == 0);
    let refused = match proxy
        .pg_config("postgres", "cached")
        .connect(postgres::NoTls)
    {
        Err(error) => error,
        Ok(mut third) => third
            .simple_query("SELECT 1")
            .err()
            .unwrap_or_else(|| panic!("served without a server\n{}", proxy.log())),
    };
    assert_eq!(sqlstate(&refused).as_deref(), Some("28000"), "{refused}");
    drop(second);
    drop(first);
}

#[test]
fn a_shard_that_can_log_in_opens_its_own_server() {
    let (pg, proxy) = two_workers_pool_of_20();
    let mut console = proxy
        .connect(CONSOLE, "postgres")
        .unwrap_or_else(|error| panic!("console: {error}\n{}", proxy.log()));
    let mut others = Vec::new();
    let mut first = client_on(&proxy, &mut console, "first", "0", &mut others);
    let pid = value(&mut first, "SELECT pg_backend_pid()");
    let mut second = client_on(&proxy, &mut console, "second", "1", &mut others);
    assert_ne!(
        value(&mut second, "SELECT pg_backend_pid()"),
        pid,
        "shard 1 logged in a server of its own (pool size 20)"
    );
    assert_eq!(logged_in(&pg), "2");
}

/// How many servers SHOW SERVERS lists.
fn servers(console: &mut Client) -> usize {
    console
        .simple_query("SHOW SERVERS")
        .unwrap_or_else(|error| panic!("SHOW SERVERS: {error}"))
        .iter()
        .filter(|message| matches!(message, SimpleQueryMessage::Row(_)))
        .count()
}

/// Waits (bounded) until `done` holds.
fn wait_for(proxy: &Pgtier, what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("never: {what}\n{}", proxy.log());
}

/// How many backends of the role `cached` PostgreSQL has.
fn logged_in(pg: &LocalPg) -> String {
    admin(
        pg,
        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'cached'",
    )
    .trim()
    .to_string()
}
