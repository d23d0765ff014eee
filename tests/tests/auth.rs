//! Client authentication against a PgBouncer-style userlist (SCRAM, md5, plain), an HBA
//! file, TLS client certificates and `auth_query`; server login with the configured or
//! looked-up password, and the SQLSTATEs PostgreSQL uses for failures.

use std::time::{Duration, Instant};

use pgtier_tests::config::toml_string;
use pgtier_tests::fixtures::{admin, sqlstate, start_proxy};
use pgtier_tests::pki::TestPki;
use pgtier_tests::process::{pg_tool, run};
use pgtier_tests::{HbaAuth, LocalPg, PgOptions, Pgtier, ProxyConfig, TempDir, wait};

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

/// The error of a login that must fail: (SQLSTATE, message).
fn refusal(proxy: &Pgtier, user: &str, password: &str) -> (String, String) {
    let error = connect(proxy, user, password)
        .err()
        .expect("login should fail");
    let message = error
        .as_db_error()
        .map(|db| db.message().to_string())
        .unwrap_or_else(|| error.to_string());
    (sqlstate(&error).unwrap_or_default(), message)
}

#[test]
fn plain_auth_checks_the_cleartext_password_against_a_hashed_entry() {
    let pg = server(HbaAuth::Md5, "md5");
    let hash = admin(
        &pg,
        "SELECT rolpassword FROM pg_authid WHERE rolname = 'alice'",
    );
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("plain")
            .user("alice", &hash),
    );
    assert_logged_in_as(connect(&proxy, "alice", "s3cret pass"), "alice");
    assert_password_rejected(&proxy, "alice", "wrong");
    // The stored hash is not a password.
    assert_password_rejected(&proxy, "alice", &hash);
}

#[test]
fn an_hba_file_chooses_the_method_per_user_and_reloads() {
    let pg = server(HbaAuth::Trust, "scram-sha-256");
    for user in ["bob", "carol", "dave"] {
        pg.create_user(user, "pw").expect("create user");
    }
    let dir = TempDir::new("pgtier-hba").expect("temp dir");
    let hba = dir.path().join("pg_hba.conf");
    let lines = "# pgtier test\n\
                 host all alice 127.0.0.1/32 trust\n\
                 host all bob   127.0.0.1/32 md5\n\
                 host all carol 127.0.0.1/32 reject\n";
    std::fs::write(&hba, lines).expect("hba file");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("hba")
            .setting("auth_hba_file", &toml_string(&hba.display().to_string()))
            // A trust line still needs the user in the auth file, as in PgBouncer.
            .user("alice", "")
            .user("bob", "pw")
            .user("dave", ""),
    );
    assert_logged_in_as(connect(&proxy, "alice", "anything"), "alice");
    assert_logged_in_as(connect(&proxy, "bob", "pw"), "bob");
    assert_password_rejected(&proxy, "bob", "wrong");
    assert_eq!(
        refusal(&proxy, "carol", "pw"),
        (
            "28000".to_string(),
            "pg_hba.conf rejects connection for host \"127.0.0.1\", user \"carol\", database \"postgres\", no encryption".to_string()
        )
    );
    assert_eq!(
        refusal(&proxy, "dave", "pw"),
        (
            "28000".to_string(),
            "no pg_hba.conf entry for host \"127.0.0.1\", user \"dave\", database \"postgres\", no encryption".to_string()
        )
    );
    // A reload reads the file again.
    std::fs::write(&hba, format!("{lines}host all dave 127.0.0.1/32 trust\n")).expect("hba");
    proxy.reload().expect("SIGHUP");
    let reached = wait::until(Duration::from_secs(10), Duration::from_millis(100), || {
        connect(&proxy, "dave", "").ok()
    });
    assert!(reached.is_some(), "dave was let in after the reload");
}

/// psql through the proxy with `conninfo`: (succeeded, stderr).
fn psql(proxy: &Pgtier, conninfo: &str) -> (bool, String) {
    let mut command = pg_tool("psql");
    command
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(format!(
            "host=localhost port={} dbname=postgres {conninfo}",
            proxy.port()
        ))
        .args(["-c", "SELECT current_user"]);
    let finished = run(&mut command, Duration::from_secs(30)).expect("psql runs");
    (finished.status.success(), finished.stderr)
}

#[test]
fn cert_auth_needs_a_certificate_naming_the_user() {
    let dir = TempDir::new("pgtier-cert-auth").expect("temp dir");
    let pki = TestPki::write(dir.path(), "alice").expect("pki");
    let pg = server(HbaAuth::Trust, "scram-sha-256");
    pg.create_user("bob", "pw").expect("bob");
    let path = |path: &std::path::Path| toml_string(&path.display().to_string());
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("cert")
            .setting("client_tls_sslmode", "\"verify-ca\"")
            .setting("client_tls_cert_file", &path(&pki.server.cert))
            .setting("client_tls_key_file", &path(&pki.server.key))
            .setting("client_tls_ca_file", &path(&pki.ca_cert))
            // A certificate logs in only a user the auth file lists, as in PgBouncer.
            .user("alice", "")
            .user("bob", ""),
    );
    let tls = format!(
        "{} {}",
        pki.verify_full_conninfo(),
        TestPki::client_cert_conninfo(&pki.client)
    );
    let (ok, err) = psql(&proxy, &format!("user=alice {tls}"));
    assert!(ok, "alice's certificate logs alice in: {err}");
    let (ok, err) = psql(&proxy, &format!("user=bob {tls}"));
    assert!(!ok, "alice's certificate does not log bob in");
    assert!(err.contains("TLS certificate name mismatch"), "{err}");
}

#[test]
fn auth_query_logs_in_users_only_postgresql_knows() {
    // One md5 server: PostgreSQL's md5 method runs SCRAM for a SCRAM-hashed role, so it
    // holds both kinds of secrets.
    let pg = server(HbaAuth::Md5, "scram-sha-256");
    admin(
        &pg,
        "CREATE ROLE pgtier_auth LOGIN SUPERUSER PASSWORD 'authpw'",
    );
    admin(
        &pg,
        "SET password_encryption = 'md5'; CREATE ROLE md5_user LOGIN PASSWORD 'pw one'",
    );
    admin(&pg, "CREATE ROLE scram_user LOGIN PASSWORD 'pw two'");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("md5")
            .setting("auth_user", "\"pgtier_auth\"")
            .user("pgtier_auth", "authpw"),
    );
    assert_logged_in_as(connect(&proxy, "md5_user", "pw one"), "md5_user");
    // SCRAM from the client to pgtier, and from pgtier to the server with the ClientKey the
    // client proved.
    assert_logged_in_as(connect(&proxy, "scram_user", "pw two"), "scram_user");
    assert_password_rejected(&proxy, "md5_user", "wrong");
    assert_password_rejected(&proxy, "scram_user", "wrong");
    // No row: PgBouncer's "no such user" (it runs no decoy exchange after auth_query).
    assert_eq!(
        refusal(&proxy, "nobody", "pw one"),
        ("28000".to_string(), "no such user".to_string())
    );
    // The users logged in to the server as themselves.
    let sessions = admin(
        &pg,
        "SELECT string_agg(DISTINCT usename, ',' ORDER BY usename) FROM pg_stat_activity \
         WHERE usename IN ('md5_user', 'scram_user')",
    );
    assert_eq!(sessions, "md5_user,scram_user");
}

#[test]
fn passwords_as_long_as_pgbouncer_takes_log_in() {
    // PgBouncer takes passwords up to 65,530 bytes (its test suite logs in with one); one
    // byte more is a wrong password, not a broken protocol.
    let long = "a".repeat(65_530);
    let pg = server(HbaAuth::Trust, "scram-sha-256");
    pg.create_user("longpass", "pw").expect("create longpass");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("plain")
            .user("longpass", &long),
    );
    assert_logged_in_as(connect(&proxy, "longpass", &long), "longpass");
    let too_long = format!("X{long}");
    let (code, message) = refusal(&proxy, "longpass", &too_long);
    assert_eq!(code, "28P01", "{message}");
}
