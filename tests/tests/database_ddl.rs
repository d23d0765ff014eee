//! The pooler never blocks a client's own database DDL. PostgreSQL refuses `DROP DATABASE x`,
//! `ALTER DATABASE x RENAME` and `CREATE DATABASE y TEMPLATE x` (55006, after waiting about
//! 5 s) while other sessions are connected to `x`; pgtier's own idle pooled servers of `x`,
//! left by clients that have gone, must not count. Two workers, so the idle servers live on
//! both shards (the warm pool's `min_pool_size = 2` puts one on each). A server in use by
//! another client stays, and PostgreSQL's refusal reaches the client unchanged.

use std::time::Duration;

use pgtier_tests::fixtures::{admin, server, server_connections, sqlstate, start_proxy};
use pgtier_tests::{LocalPg, Pgtier, ProxyConfig, wait};

const CONSOLE: &str = "pgbouncer";
/// Clients of a database held at once, each with its own server, before they all leave.
const HOLDERS: usize = 6;
/// Bounds every wait for pgtier's pools to settle; they settle in milliseconds.
const SETTLE: Duration = Duration::from_secs(20);

/// Two workers, `mode`, the console for `postgres`, and an entry per (entry, dbname).
fn proxy(pg: &LocalPg, mode: &str, entries: &[(&str, &str)]) -> Pgtier {
    let mut config = ProxyConfig::new(pg.port())
        .pool_mode(mode)
        .setting("admin_users", "[\"postgres\"]");
    config.workers = 2;
    for (entry, dbname) in entries {
        config = config.database(entry, pg.port(), dbname);
    }
    // A pool kept warm on every shard: each of the two opens one server.
    let config = config
        .database("ddl_warm", pg.port(), "ddl_warm")
        .database_setting("user", "\"postgres\"")
        .database_setting("min_pool_size", "2");
    start_proxy(config)
}

fn connect(proxy: &Pgtier, entry: &str) -> postgres::Client {
    match proxy.connect(entry, "postgres") {
        Ok(client) => client,
        Err(error) => panic!("connecting to {entry}: {error}\n{}", proxy.log()),
    }
}

/// The idle servers of `entry` across both shards, from SHOW POOLS.
fn idle_servers(console: &mut postgres::Client, entry: &str) -> u32 {
    let messages = console.simple_query("SHOW POOLS").expect("SHOW POOLS");
    messages
        .iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) if row.get("database") == Some(entry) => row
                .get("sv_idle")
                .and_then(|count| count.parse::<u32>().ok()),
            _ => None,
        })
        .sum()
}

fn wait_idle(proxy: &Pgtier, entry: &str, expected: u32) {
    let mut console = connect(proxy, CONSOLE);
    let settled = wait::until(SETTLE, Duration::from_millis(20), || {
        (idle_servers(&mut console, entry) == expected).then_some(())
    });
    assert!(
        settled.is_some(),
        "{entry}: expected {expected} idle servers, SHOW POOLS says {}\n{}",
        idle_servers(&mut console, entry),
        proxy.log()
    );
}

/// Clients of `entry` each hold a server at once (inside a transaction, so in transaction
/// mode too), then all leave: pgtier keeps their servers idle.
fn leave_idle_servers(proxy: &Pgtier, entry: &str) {
    let mut clients: Vec<postgres::Client> = (0..HOLDERS).map(|_| connect(proxy, entry)).collect();
    for client in &mut clients {
        client
            .batch_execute("BEGIN; SELECT 1")
            .unwrap_or_else(|error| panic!("{entry}: {error}"));
    }
    for client in &mut clients {
        client.batch_execute("COMMIT").expect("COMMIT");
    }
    drop(clients);
    wait_idle(proxy, entry, HOLDERS as u32);
}

fn database_exists(pg: &LocalPg, name: &str) -> bool {
    let sql = format!("SELECT count(*) FROM pg_database WHERE datname = '{name}'");
    admin(pg, &sql) == "1"
}

/// DROP (simple Query, then a plain one of the warm pool), ALTER DATABASE RENAME of a quoted
/// name (Parse) and CREATE DATABASE TEMPLATE, through pgtier, each of a database whose only
/// other sessions are pgtier's idle servers.
fn ddl_over_idle_servers(mode: &str) {
    let pg = server();
    for name in ["ddl_drop", "\"Ddl Rename\"", "ddl_template", "ddl_warm"] {
        admin(&pg, &format!("CREATE DATABASE {name}"));
    }
    let proxy = proxy(
        &pg,
        mode,
        &[
            ("ddl_drop", "ddl_drop"),
            ("ddl_rename", "Ddl Rename"),
            ("ddl_template", "ddl_template"),
        ],
    );
    for entry in ["ddl_drop", "ddl_rename", "ddl_template"] {
        leave_idle_servers(&proxy, entry);
    }
    wait_idle(&proxy, "ddl_warm", 2);
    let mut client = connect(&proxy, "postgres");
    let run = |client: &mut postgres::Client, sql: &str, extended: bool| {
        let result = if extended {
            client.execute(sql, &[]).map(drop)
        } else {
            client.batch_execute(sql)
        };
        if let Err(error) = result {
            panic!(
                "{mode}: {sql}: {error} ({:?})\n{}",
                sqlstate(&error),
                proxy.log()
            );
        }
    };
    run(&mut client, "DROP DATABASE IF EXISTS ddl_drop", false);
    run(
        &mut client,
        "/* rename */ ALTER DATABASE \"Ddl Rename\" RENAME TO ddl_renamed",
        true,
    );
    run(
        &mut client,
        "CREATE DATABASE ddl_copy WITH TEMPLATE = ddl_template",
        false,
    );
    run(&mut client, "drop database ddl_warm", false);
    assert!(!database_exists(&pg, "ddl_drop"));
    assert!(!database_exists(&pg, "Ddl Rename"));
    assert!(database_exists(&pg, "ddl_renamed"));
    assert!(database_exists(&pg, "ddl_copy"));
    assert!(!database_exists(&pg, "ddl_warm"));
    // The client that ran them goes on, and so do the template's clients.
    run(&mut client, "SELECT 1", false);
    connect(&proxy, "ddl_template")
        .batch_execute("SELECT 1")
        .expect("a client of the template after the copy");
}

#[test]
fn session_mode_database_ddl_is_not_blocked_by_idle_servers() {
    ddl_over_idle_servers("session");
}

#[test]
fn transaction_mode_database_ddl_is_not_blocked_by_idle_servers() {
    ddl_over_idle_servers("transaction");
}

/// A session-mode client of the database holds its server: PostgreSQL refuses the DROP as it
/// would without pgtier, the idle servers are closed all the same, and that client goes on.
#[test]
fn a_database_in_use_by_a_client_is_not_dropped() {
    let pg = server();
    admin(&pg, "CREATE DATABASE ddl_busy");
    admin(&pg, "CREATE DATABASE ddl_warm");
    let proxy = proxy(&pg, "session", &[("ddl_busy", "ddl_busy")]);
    leave_idle_servers(&proxy, "ddl_busy");
    let mut user = connect(&proxy, "ddl_busy");
    user.batch_execute("CREATE TABLE kept(id int); INSERT INTO kept VALUES (1)")
        .expect("the user's work");
    let mut client = connect(&proxy, "postgres");
    let error = match client.batch_execute("DROP DATABASE ddl_busy") {
        Ok(()) => panic!("DROP DATABASE succeeded under a connected client"),
        Err(error) => error,
    };
    assert_eq!(sqlstate(&error).as_deref(), Some("55006"), "{error}");
    assert!(database_exists(&pg, "ddl_busy"));
    let count: i64 = user
        .query_one("SELECT count(*) FROM kept", &[])
        .expect("the user's session is unharmed")
        .get(0);
    assert_eq!(count, 1);
    // Only the user's server is left of the six.
    let left = wait::until(SETTLE, Duration::from_millis(20), || {
        (server_connections(&pg, "ddl_busy") == 1).then_some(())
    });
    assert!(left.is_some(), "idle servers of ddl_busy were not closed");
    client
        .batch_execute("SELECT 1")
        .expect("the DROP's client goes on");
}
