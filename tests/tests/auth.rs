//! Client authentication against a PgBouncer-style userlist (SCRAM and md5), server login with
//! the configured password, and the SQLSTATEs PostgreSQL uses for failures.

use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{admin, sqlstate, start_proxy};
use pgtier_tests::{HbaAuth, LocalPg, PgOptions, Pgtier, ProxyConfig};

fn server(auth: HbaAuth, password_encryption: &'static str) -> LocalPg {
    let pg = LocalPg::start_primary(&PgOptions {
        auth,
        password_encryption,
        ..PgOptions::default()
    })
    .expect("PostgreSQL");
    pg.create_user("alice", "s3cret pass")
        .expect("create alice");
    pg
}

fn connect(
    proxy: &Pgtier,
    user: &str,
    password: &str,
) -> Result<postgres::Client, postgres::Error> {
    let mut config = proxy.pg_config("postgres", user);
    config.password(password);
    config.connect(postgres::NoTls)
}

fn assert_logged_in_as(client: Result<postgres::Client, postgres::Error>, user: &str) {
    let mut client = client.expect("login should succeed");
    let row = client
        .query_typed_one("SELECT current_user::text", &[])
        .expect("query");
    assert_eq!(row.get::<_, String>(0), user);
}

/// Login with a bad password fails promptly with PostgreSQL's 28P01.
fn assert_password_rejected(proxy: &Pgtier, user: &str, password: &str) {
    let started = Instant::now();
    let error = connect(proxy, user, password)
        .err()
        .expect("login should fail");
    let elapsed = started.elapsed();
    assert_eq!(sqlstate(&error).as_deref(), Some("28P01"), "{error:?}");
    assert!(
        elapsed < Duration::from_secs(2),
        "rejection took {elapsed:?}"
    );
}

#[test]
fn scram_client_auth_with_a_plaintext_userlist() {
    let pg = server(HbaAuth::Scram, "scram-sha-256");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("scram-sha-256")
            .user("alice", "s3cret pass"),
    );
    assert_logged_in_as(connect(&proxy, "alice", "s3cret pass"), "alice");
    assert_password_rejected(&proxy, "alice", "wrong");
    // A user missing from the userlist fails the same way (no user enumeration).
    assert_password_rejected(&proxy, "mallory", "anything");
}

#[test]
fn md5_client_auth_with_a_hashed_userlist() {
    let pg = server(HbaAuth::Md5, "md5");
    let hash = admin(&pg, "SELECT 'md5' || md5('s3cret pass' || 'alice')");
    assert_eq!(
        admin(
            &pg,
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'"
        ),
        hash,
        "server stores the same md5 hash"
    );
    let proxy = start_proxy(ProxyConfig::new(pg.port()).auth("md5").user("alice", &hash));
    assert_logged_in_as(connect(&proxy, "alice", "s3cret pass"), "alice");
    assert_password_rejected(&proxy, "alice", "s3cret pasS");
}

#[test]
fn md5_client_auth_with_a_plaintext_userlist_and_a_scram_server() {
    let pg = server(HbaAuth::Scram, "scram-sha-256");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("md5")
            .user("alice", "s3cret pass"),
    );
    assert_logged_in_as(connect(&proxy, "alice", "s3cret pass"), "alice");
    assert_password_rejected(&proxy, "alice", "nope");
}

#[test]
fn wrong_password_reaches_neither_pool_nor_server() {
    let pg = server(HbaAuth::Scram, "scram-sha-256");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("scram-sha-256")
            .user("alice", "s3cret pass"),
    );
    for _ in 0..3 {
        assert_password_rejected(&proxy, "alice", "wrong");
    }
    let logins = admin(
        &pg,
        "SELECT count(*) FROM pg_stat_activity WHERE usename = 'alice'",
    );
    assert_eq!(logins, "0");
    // The right password still works afterwards.
    assert_logged_in_as(connect(&proxy, "alice", "s3cret pass"), "alice");
}

#[test]
fn server_rejecting_the_configured_password_is_reported() {
    // The userlist knows a password the server does not accept.
    let pg = server(HbaAuth::Scram, "scram-sha-256");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("scram-sha-256")
            .user("alice", "stale password"),
    );
    let error = connect(&proxy, "alice", "stale password")
        .err()
        .expect("server login fails");
    assert_eq!(sqlstate(&error).as_deref(), Some("28P01"), "{error:?}");
}

#[test]
fn a_database_entry_can_force_the_server_user_and_password() {
    // Clients log in to pgtier as `postgres` (trust); pgtier logs in to the server as alice
    // with the entry's password (SCRAM on the server side).
    let pg = server(HbaAuth::Scram, "scram-sha-256");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .database("as_alice", pg.port(), "postgres")
            .database_setting("user", "\"alice\"")
            .database_setting("password", "\"s3cret pass\""),
    );
    let mut client = proxy.connect("as_alice", "postgres").expect("connect");
    let row = client
        .query_typed_one("SELECT current_user::text", &[])
        .expect("query");
    assert_eq!(row.get::<_, String>(0), "alice");
}
