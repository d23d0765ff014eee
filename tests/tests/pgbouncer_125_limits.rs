//! The per-database and per-user limits PgBouncer 1.19–1.25 added, against a real server:
//! client-connection limits refused with PgBouncer's FATAL, a user's own `pool_size`, a
//! database's own `server_lifetime`, and `auth_dbname` choosing where `auth_query` runs.

use std::time::Duration;

use pgtier_tests::fixtures::{admin, server, server_connections, sqlstate, start_proxy};
use pgtier_tests::{ProxyConfig, wait};

const PATIENCE: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// The FATAL a refused client got: (SQLSTATE, message).
fn refusal(error: &postgres::Error) -> (String, String) {
    let message = error
        .as_db_error()
        .map(|db| db.message().to_string())
        .unwrap_or_else(|| error.to_string());
    (sqlstate(error).unwrap_or_default(), message)
}

fn works(client: &mut postgres::Client) {
    let row = client.query_one("SELECT 1", &[]).expect("query");
    assert_eq!(row.get::<_, i32>(0), 1);
}

#[test]
fn max_db_client_connections_refuses_the_next_client_of_that_database_only() {
    let pg = server();
    admin(&pg, "CREATE DATABASE other");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .database_setting("max_db_client_connections", "2")
            .database("other", pg.port(), "other"),
    );
    let mut first = proxy.connect("postgres", "postgres").expect("first");
    let mut second = proxy.connect("postgres", "postgres").expect("second");
    let error = proxy.connect_error("postgres", "postgres");
    assert_eq!(
        refusal(&error),
        (
            "08P01".to_string(),
            "client connections exceeded (max_db_client_connections)".to_string()
        )
    );
    // The clients inside keep working, and another database is not limited.
    works(&mut first);
    works(&mut second);
    let mut others: Vec<_> = (0..3)
        .map(|_| proxy.connect("other", "postgres").expect("other database"))
        .collect();
    others.iter_mut().for_each(works);
    // A client that leaves gives its place back.
    drop(first);
    let mut third = wait::until(PATIENCE, POLL, || {
        proxy.connect("postgres", "postgres").ok()
    })
    .expect("a place came back");
    works(&mut third);
    works(&mut second);
}

#[test]
fn max_user_client_connections_per_user_beats_the_global_limit() {
    let pg = server();
    admin(&pg, "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .user("alice", "")
            .user("bob", "")
            .setting("max_user_client_connections", "1")
            .user_setting("alice", "max_user_client_connections", "2"),
    );
    let mut alice: Vec<_> = (0..2)
        .map(|_| proxy.connect("postgres", "alice").expect("alice"))
        .collect();
    let expected = (
        "08P01".to_string(),
        "client connections exceeded (max_user_client_connections)".to_string(),
    );
    assert_eq!(refusal(&proxy.connect_error("postgres", "alice")), expected);
    let mut bob = proxy.connect("postgres", "bob").expect("bob");
    assert_eq!(refusal(&proxy.connect_error("postgres", "bob")), expected);
    alice.iter_mut().for_each(works);
    works(&mut bob);
}

#[test]
fn a_users_pool_size_caps_the_servers_of_its_pools() {
    let pg = server();
    admin(&pg, "CREATE ROLE alice LOGIN; CREATE ROLE bob LOGIN");
    // Session mode: each client holds its server from its first query to its end.
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .user("alice", "")
            .user("bob", "")
            .pool_mode("session")
            .pool_size(5)
            .setting("query_wait_timeout", "1")
            .user_setting("alice", "pool_size", "1"),
    );
    let mut alice = proxy.connect("postgres", "alice").expect("alice");
    works(&mut alice);
    // Alice's second client finds her only server taken and times out waiting for one
    // (for its welcome, or for its first query when the welcome came from the pool).
    let error = match proxy.connect("postgres", "alice") {
        Err(error) => error,
        Ok(mut waiting) => waiting
            .query_one("SELECT 1", &[])
            .expect_err("alice's second server"),
    };
    assert_eq!(
        refusal(&error),
        ("08P01".to_string(), "query_wait_timeout".to_string())
    );
    // Bob has the entry's pool size: two servers at once.
    let mut bobs: Vec<_> = (0..2)
        .map(|_| proxy.connect("postgres", "bob").expect("bob"))
        .collect();
    bobs.iter_mut().for_each(works);
    let count = |user: &str| {
        admin(
            &pg,
            &format!("SELECT count(*) FROM pg_stat_activity WHERE usename = '{user}'"),
        )
    };
    assert_eq!(count("alice"), "1");
    assert_eq!(count("bob"), "2");
    works(&mut alice);
}

fn backend_pid(client: &mut postgres::Client) -> i32 {
    client
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("pid")
        .get(0)
}

#[test]
fn a_databases_server_lifetime_recycles_its_servers_only() {
    let pg = server();
    admin(&pg, "CREATE DATABASE short");
    admin(&pg, "CREATE DATABASE long");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .setting("server_lifetime", "3600")
            .database("short", pg.port(), "short")
            .database_setting("server_lifetime", "1")
            .database("long", pg.port(), "long"),
    );
    // Transaction mode: the server goes back to its pool after each query.
    let mut short = proxy.connect("short", "postgres").expect("short");
    let mut long = proxy.connect("long", "postgres").expect("long");
    let short_pid = backend_pid(&mut short);
    let long_pid = backend_pid(&mut long);
    let recycled = wait::until(PATIENCE, Duration::from_millis(250), || {
        (backend_pid(&mut short) != short_pid).then_some(())
    });
    assert!(
        recycled.is_some(),
        "the short-lived server was never replaced"
    );
    // The other database keeps its server: the global lifetime is an hour.
    assert_eq!(backend_pid(&mut long), long_pid);
    assert_eq!(server_connections(&pg, "long"), 1);
}

#[test]
fn auth_dbname_runs_auth_query_in_the_named_database() {
    let pg = server();
    // The secrets live in a table of `authdb` only: a lookup run in `postgres` fails.
    admin(&pg, "CREATE DATABASE authdb");
    admin(&pg, "CREATE ROLE carol LOGIN");
    let secret = pg
        .psql("postgres", "SELECT 'md5' || md5('carol pw' || 'carol')")
        .expect("md5");
    pg.psql(
        "authdb",
        &format!(
            "CREATE TABLE creds (usename text, passwd text); \
             INSERT INTO creds VALUES ('carol', '{secret}')"
        ),
    )
    .expect("creds");
    let lookup = "\"SELECT usename, passwd FROM creds WHERE usename = $1\"";
    let config = |auth_dbname: Option<&str>| {
        let config = ProxyConfig::new(pg.port())
            .auth("md5")
            .setting("auth_user", "\"postgres\"")
            .setting("auth_query", lookup)
            .database("authdb", pg.port(), "authdb");
        match auth_dbname {
            Some(name) => config.setting("auth_dbname", &format!("\"{name}\"")),
            None => config,
        }
    };
    let login = |proxy: &pgtier_tests::Pgtier| {
        let mut settings = proxy.pg_config("postgres", "carol");
        settings.password("carol pw");
        settings.connect(postgres::NoTls)
    };

    let proxy = start_proxy(config(Some("authdb")));
    let mut client = login(&proxy).expect("carol, looked up in authdb");
    let row = client
        .query_one("SELECT current_user::text, current_database()::text", &[])
        .expect("query");
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("carol".to_string(), "postgres".to_string())
    );
    drop((client, proxy));

    // Without auth_dbname the same query runs in the client's database, which has no table.
    let proxy = start_proxy(config(None));
    let Err(error) = login(&proxy) else {
        panic!("carol logged in although postgres has no creds table");
    };
    // PgBouncer's words to the client; the server's own text goes to the log.
    assert_eq!(
        refusal(&error).1,
        "bouncer config error",
        "{:?}",
        refusal(&error)
    );
    let logged = wait::until(PATIENCE, POLL, || {
        proxy
            .log()
            .contains("\"creds\" does not exist")
            .then_some(())
    });
    assert!(logged.is_some(), "{}", proxy.log());
}

#[test]
fn a_client_that_waited_reserve_pool_timeout_gets_a_reserve_server_which_stays() {
    let pg = server();
    admin(&pg, "CREATE ROLE alice LOGIN");
    // Session mode: each client holds its server from its first query to its end.
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            // trust needs the user in the auth file (as PgBouncer's trust does).
            .user("alice", "")
            .pool_mode("session")
            .setting("reserve_pool_timeout", "1")
            .user_setting("alice", "pool_size", "1")
            .user_setting("alice", "reserve_pool_size", "1"),
    );
    let mut first = proxy.connect("postgres", "alice").expect("first");
    works(&mut first);
    // The second client waits reserve_pool_timeout for alice's one server, then gets a
    // server from the reserve, and PgBouncer's warning says so.
    let started = std::time::Instant::now();
    let mut second = proxy.connect("postgres", "alice").expect("second");
    works(&mut second);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(proxy.log().contains("taking connection from reserve_pool"));
    let count = || {
        admin(
            &pg,
            "SELECT count(*) FROM pg_stat_activity WHERE usename = 'alice'",
        )
    };
    assert_eq!(count(), "2");
    // The reserve server stays in the pool once its client left (as in PgBouncer): the next
    // client has it at once.
    drop(second);
    let started = std::time::Instant::now();
    let mut third =
        wait::until(PATIENCE, POLL, || proxy.connect("postgres", "alice").ok()).expect("third");
    works(&mut third);
    assert!(
        started.elapsed() < Duration::from_millis(800),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(count(), "2");
    works(&mut first);
}
