//! TLS end to end: psql verifying pgtier's certificate (`sslmode=verify-full`), pgtier
//! verifying PostgreSQL's (`server_tls_sslmode = verify-full`), a plain-text client refused
//! where TLS is required, SCRAM-SHA-256-PLUS through pgtier, and a server certificate that
//! does not verify leaving the client waiting with the reason logged, X.509 version 1
//! certificates on both sides, TLS settings changed one SET at a time, and a TLS server
//! cached idle on one shard serving the next client on either shard (its session moves).

use pgtier_tests::fixtures::{admin, start_proxy};
use pgtier_tests::pki::TestPki;
use pgtier_tests::process::{pg_tool, run};
use pgtier_tests::tempdir::TempDir;
use pgtier_tests::{HbaAuth, LocalPg, PgOptions, Pgtier, ProxyConfig};
use std::time::Duration;

fn toml_path(path: &std::path::Path) -> String {
    format!("\"{}\"", path.display())
}

/// A TLS PostgreSQL, the PKI it and pgtier use, and a pgtier with client TLS in `mode` and
/// server TLS verifying the server fully.
fn setup(mode: &str, auth: HbaAuth) -> (TempDir, TestPki, LocalPg, Pgtier) {
    setup_with(mode, auth, |config| config)
}

/// [`setup`], with the proxy configuration adjusted by `adjust`.
fn setup_with(
    mode: &str,
    auth: HbaAuth,
    adjust: impl FnOnce(ProxyConfig) -> ProxyConfig,
) -> (TempDir, TestPki, LocalPg, Pgtier) {
    let dir = TempDir::new("pgtier-tls").expect("temp dir");
    let pki = TestPki::write(dir.path(), "alice").expect("pki");
    let pg = LocalPg::start_primary(&PgOptions {
        auth,
        tls: Some(pki.pg_tls(&[])),
        ..PgOptions::default()
    })
    .expect("PostgreSQL with TLS");
    pg.create_user("alice", "s3cret").expect("alice");
    let config = ProxyConfig::new(pg.port())
        .pool_mode("transaction")
        .auth(if auth == HbaAuth::Trust {
            "trust"
        } else {
            "scram-sha-256"
        })
        .user("alice", "s3cret")
        .setting("client_tls_sslmode", &format!("\"{mode}\""))
        .setting("client_tls_cert_file", &toml_path(&pki.server.cert))
        .setting("client_tls_key_file", &toml_path(&pki.server.key))
        .setting("server_tls_sslmode", "\"verify-full\"")
        .setting("server_tls_ca_file", &toml_path(&pki.ca_cert));
    let proxy = start_proxy(adjust(config));
    (dir, pki, pg, proxy)
}

/// psql with `conninfo` through the proxy: (succeeded, stdout, stderr).
fn psql(proxy: &Pgtier, extra: &str, sql: &str) -> (bool, String, String) {
    let mut command = pg_tool("psql");
    command
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(format!(
            "host=localhost port={} dbname=postgres {extra}",
            proxy.port()
        ))
        .args(["-c", sql]);
    let finished = run(&mut command, Duration::from_secs(30)).expect("psql runs");
    (
        finished.status.success(),
        finished.stdout.trim().to_string(),
        finished.stderr,
    )
}

/// What the backend serving this session says about its own connection's TLS.
const BACKEND_SSL: &str = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";

#[test]
fn psql_verifies_pgtier_and_pgtier_verifies_the_server() {
    let (_dir, pki, _pg, proxy) = setup("require", HbaAuth::Trust);
    let conninfo = format!("user=postgres {}", pki.verify_full_conninfo());
    let (ok, out, err) = psql(&proxy, &conninfo, BACKEND_SSL);
    assert!(
        ok,
        "psql verify-full through pgtier: {err}\n{}",
        proxy.log()
    );
    assert_eq!(out, "t", "pgtier reached the server over TLS as well");
    let (ok, out, _) = psql(&proxy, &conninfo, "SHOW ssl");
    assert!(ok);
    assert_eq!(out, "on");
}

#[test]
fn a_plaintext_client_is_refused_where_tls_is_required() {
    let (_dir, _pki, _pg, proxy) = setup("require", HbaAuth::Trust);
    let (ok, _, err) = psql(&proxy, "user=postgres sslmode=disable", "SELECT 1");
    assert!(!ok);
    assert!(
        err.contains("TLS is required (client_tls_sslmode = require)"),
        "{err}"
    );
    // With prefer, the same client is served in plain text, and a TLS client over TLS.
    let (_dir, pki, _pg, proxy) = setup("prefer", HbaAuth::Trust);
    let (ok, _, err) = psql(&proxy, "user=postgres sslmode=disable", "SELECT 1");
    assert!(ok, "{err}");
    let conninfo = format!("user=postgres {}", pki.verify_full_conninfo());
    assert!(psql(&proxy, &conninfo, "SELECT 1").0);
}

#[test]
fn scram_with_channel_binding_through_pgtier() {
    let (_dir, pki, _pg, proxy) = setup("require", HbaAuth::Scram);
    let conninfo = format!(
        "user=alice password=s3cret channel_binding=require {}",
        pki.verify_full_conninfo()
    );
    let (ok, out, err) = psql(&proxy, &conninfo, BACKEND_SSL);
    assert!(
        ok,
        "SCRAM-SHA-256-PLUS to pgtier, and pgtier's own login to the server: {err}\n{}",
        proxy.log()
    );
    assert_eq!(out, "t");
    let conninfo = format!(
        "user=alice password=wrong channel_binding=require {}",
        pki.verify_full_conninfo()
    );
    let (ok, _, err) = psql(&proxy, &conninfo, "SELECT 1");
    // PgBouncer's words for a SCRAM exchange that failed.
    assert!(!ok && err.contains("SASL authentication failed"), "{err}");
}

#[test]
fn version_1_certificates_on_both_sides() {
    // PgBouncer's own test certificates are X.509 version 1 (`openssl ca` without
    // extensions): pgtier presents one to psql and verifies PostgreSQL's, whose name is its
    // common name (pgtier connects to 127.0.0.1), as libpq checks it.
    let dir = TempDir::new("pgtier-tls-v1").expect("temp dir");
    let pki = TestPki::write(dir.path(), "alice").expect("pki");
    let server_v1 = pki
        .issue_v1_with_openssl("pg-v1", "127.0.0.1")
        .expect("v1 server certificate");
    let pgtier_v1 = pki
        .issue_v1_with_openssl("pgtier-v1", "localhost")
        .expect("v1 pgtier certificate");
    let pg = LocalPg::start_primary(&PgOptions {
        tls: Some(pgtier_core::localpg::PgTls {
            ca_file: Some(pki.ca_cert.clone()),
            ..pgtier_core::localpg::PgTls::new(&server_v1.cert, &server_v1.key)
        }),
        ..PgOptions::default()
    })
    .expect("PostgreSQL with a v1 certificate");
    let config = ProxyConfig::new(pg.port())
        .setting("client_tls_sslmode", "\"require\"")
        .setting("client_tls_cert_file", &toml_path(&pgtier_v1.cert))
        .setting("client_tls_key_file", &toml_path(&pgtier_v1.key))
        .setting("server_tls_sslmode", "\"verify-full\"")
        .setting("server_tls_ca_file", &toml_path(&pki.ca_cert));
    let proxy = start_proxy(config);
    let conninfo = format!("user=postgres {}", pki.verify_full_conninfo());
    let (ok, out, err) = psql(&proxy, &conninfo, BACKEND_SSL);
    assert!(ok, "{err}\n{}", proxy.log());
    assert_eq!(out, "t");
    // PgBouncer's login line, with what the client negotiated.
    let log = proxy.log();
    assert!(
        log.contains("login attempt: db=postgres user=postgres tls=TLSv1.3/"),
        "{log}"
    );
}

#[test]
fn a_server_certificate_that_does_not_verify_fails_the_login() {
    let dir = TempDir::new("pgtier-tls-other-ca").expect("temp dir");
    let pki = TestPki::write(dir.path(), "alice").expect("pki");
    let other = TempDir::new("pgtier-tls-other").expect("temp dir");
    let other_pki = TestPki::write(other.path(), "alice").expect("other pki");
    let pg = LocalPg::start_primary(&PgOptions {
        tls: Some(pki.pg_tls(&[])),
        ..PgOptions::default()
    })
    .expect("PostgreSQL with TLS");
    let config = ProxyConfig::new(pg.port())
        .setting("server_tls_sslmode", "\"verify-full\"")
        .setting("server_tls_ca_file", &toml_path(&other_pki.ca_cert))
        .setting("query_wait_timeout", "2");
    let proxy = start_proxy(config);
    // As PgBouncer: the server is closed with the reason in the log, and the client waits
    // for a server that can be verified, here until query_wait_timeout.
    let (ok, _, err) = psql(&proxy, "user=postgres sslmode=disable", "SELECT 1");
    assert!(!ok);
    assert!(err.contains("query_wait_timeout"), "{err}");
    let log = proxy.log();
    assert!(
        log.contains(
            "closing because: TLS with server failed: TLS error: certificate verify failed"
        ),
        "{log}"
    );
}

#[test]
fn verify_ca_asks_for_a_client_certificate_and_checks_it() {
    let (_dir, pki, pg, _proxy) = setup("require", HbaAuth::Trust);
    let other = TempDir::new("pgtier-tls-stranger").expect("temp dir");
    let stranger = TestPki::write(other.path(), "alice").expect("other pki");
    let config = ProxyConfig::new(pg.port())
        .setting("admin_users", "[\"postgres\"]")
        .setting("client_tls_sslmode", "\"verify-ca\"")
        .setting("client_tls_cert_file", &toml_path(&pki.server.cert))
        .setting("client_tls_key_file", &toml_path(&pki.server.key))
        .setting("client_tls_ca_file", &toml_path(&pki.ca_cert))
        .setting("server_tls_sslmode", "\"disable\"");
    let proxy = start_proxy(config);
    let good = format!(
        "user=postgres {} {}",
        pki.verify_full_conninfo(),
        TestPki::client_cert_conninfo(&pki.client)
    );
    let (ok, _, err) = psql(&proxy, &good, "SELECT 1");
    assert!(ok, "a certificate from the configured CA: {err}");
    let (ok, out, err) = psql(&proxy, &format!("{good} dbname=pgtier"), "SHOW CLIENTS");
    assert!(ok, "{err}");
    assert!(
        out.contains("TLSv1.3/"),
        "SHOW CLIENTS names the TLS: {out}"
    );
    let none = format!("user=postgres {}", pki.verify_full_conninfo());
    let (ok, _, err) = psql(&proxy, &none, "SELECT 1");
    assert!(!ok, "no certificate: refused in the handshake ({err})");
    let foreign = format!(
        "user=postgres {} {}",
        pki.verify_full_conninfo(),
        TestPki::client_cert_conninfo(&stranger.client)
    );
    let (ok, _, err) = psql(&proxy, &foreign, "SELECT 1");
    assert!(!ok, "a certificate from another CA: refused ({err})");
    let (ok, _, err) = psql(&proxy, &good, "SELECT 1");
    assert!(ok, "the failures touched no one else: {err}");
}

#[test]
fn tls_settings_change_one_set_at_a_time() {
    // PgBouncer takes each SET alone: a key before its certificate, a verifying server mode
    // before its CA file. In between, the TLS in effect stays.
    let (dir, pki, pg, _) = setup("require", HbaAuth::Trust);
    let other_dir = TempDir::new("pgtier-tls-next").expect("temp dir");
    let next = TestPki::write(other_dir.path(), "alice").expect("next pki");
    let config = ProxyConfig::new(pg.port())
        .setting("admin_users", "[\"postgres\"]")
        .setting("client_tls_sslmode", "\"prefer\"")
        .setting("client_tls_cert_file", &toml_path(&pki.server.cert))
        .setting("client_tls_key_file", &toml_path(&pki.server.key))
        .setting("server_tls_sslmode", "\"disable\"");
    let proxy = start_proxy(config);
    let mut console = proxy.connect("pgtier", "postgres").expect("console");
    let verified_by = |pki: &TestPki| {
        let conninfo = format!("user=postgres {}", pki.verify_full_conninfo());
        psql(&proxy, &conninfo, "SELECT 1").0
    };
    assert!(verified_by(&pki));

    let set = |console: &mut postgres::Client, key: &str, path: &std::path::Path| {
        console
            .simple_query(&format!("SET {key} = '{}'", path.display()))
            .map(|_| ())
    };
    set(&mut console, "client_tls_key_file", &next.server.key).expect("the key alone is taken");
    assert!(verified_by(&pki), "the certificate in effect stays");
    assert!(proxy.log().contains("TLS setup failed"), "{}", proxy.log());
    set(&mut console, "client_tls_cert_file", &next.server.cert).expect("then its certificate");
    assert!(verified_by(&next), "the new pair is in effect");
    assert!(!verified_by(&pki));

    console
        .simple_query("SET server_tls_sslmode = 'verify-full'")
        .expect("a verifying mode before its CA file");
    set(&mut console, "server_tls_ca_file", &pki.ca_cert).expect("then the CA file");
    let conninfo = format!("user=postgres {}", next.verify_full_conninfo());
    let (ok, out, err) = psql(&proxy, &conninfo, BACKEND_SSL);
    assert!(ok && out == "t", "{err}\n{}", proxy.log());
    drop(dir);
}

#[test]
fn a_tls_server_cached_on_one_shard_serves_clients_on_both_when_logins_are_refused() {
    let (_dir, _pki, pg, proxy) = setup_with("prefer", HbaAuth::Trust, |config| {
        let mut config = config.pool_size(20).user("cached", "");
        config.workers = 2;
        config
    });
    admin(&pg, "CREATE ROLE cached LOGIN");
    let query =
        "SELECT pg_backend_pid() || ' ' || ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";
    let (ok, first, err) = psql(&proxy, "user=cached sslmode=disable", query);
    assert!(ok, "{err}\n{}", proxy.log());
    assert!(
        first.ends_with(" true"),
        "the server is reached over TLS: {first}"
    );
    // PostgreSQL now refuses new logins of the role. Ten sequential clients: SO_REUSEPORT
    // spreads them over both shards (all ten on the first one's shard has odds of 1 in
    // 1024); a shard whose login is refused borrows the one TLS server, moved whole with its
    // TLS session, wherever it sits idle.
    admin(&pg, "ALTER ROLE cached NOLOGIN");
    for _ in 0..10 {
        let (ok, out, err) = psql(&proxy, "user=cached sslmode=disable", query);
        assert!(ok, "{err}\n{}", proxy.log());
        assert_eq!(
            out,
            first,
            "the cached TLS backend served the client\n{}",
            proxy.log()
        );
    }
}
