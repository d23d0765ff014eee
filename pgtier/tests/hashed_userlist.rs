//! Server logins from hashed auth-file entries, as PgBouncer does them: an `md5` hash logs in
//! to an md5 server without the password, and a SCRAM secret logs in to a SCRAM server with
//! the ClientKey the client just proved to the proxy.

mod common;

use common::*;
use pgtier::ShutdownMode;

/// The password hash PostgreSQL stored for `user`, exactly as pg_authid holds it.
fn stored_password(pg: &LocalPg, user: &str) -> String {
    let sql = format!("SELECT rolpassword FROM pg_authid WHERE rolname = '{user}'");
    pg.psql("postgres", &sql).expect("read pg_authid")
}

fn userlist_dir(user: &str, stored: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "pgtier-hashed-userlist-{}-{}",
        std::process::id(),
        stored.len()
    ));
    std::fs::create_dir_all(&dir).expect("tempdir");
    std::fs::write(
        dir.join("userlist.txt"),
        format!("\"{user}\" \"{stored}\"\n"),
    )
    .expect("userlist");
    dir
}

/// Logs in through a proxy using `auth_type` and the hashed entry, then checks a wrong
/// password is still refused.
fn login_through_proxy(pg: &LocalPg, auth_type: &str, stored: &str) {
    let dir = userlist_dir("alice", stored);
    let extra = format!("auth_type = \"{auth_type}\"\nauth_file = \"userlist.txt\"");
    let proxy = start_proxy_in(&dir, &config_text(pg.port(), &extra, "transaction", 2));
    let port = proxy.local_addr().port();
    let (ok, out, err) = psql(
        port,
        "alice",
        "postgres",
        "SELECT current_user",
        Some("secret"),
    );
    assert!(ok, "{auth_type}: {err}");
    assert_eq!(out, "alice");
    let (ok, _, err) = psql(port, "alice", "postgres", "SELECT 1", Some("wrong"));
    assert!(!ok);
    // PostgreSQL's words for md5 and cleartext, PgBouncer's for a failed SCRAM exchange
    // (md5 runs SCRAM for a SCRAM entry).
    assert!(
        err.contains("password authentication failed")
            || err.contains("SASL authentication failed"),
        "{auth_type}: {err}"
    );
    proxy.shutdown(ShutdownMode::Immediate);
    proxy.join().expect("exit");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn md5_hash_entry_logs_in_to_an_md5_server() {
    let pg = LocalPg::start_primary(&PgOptions {
        auth: HbaAuth::Md5,
        password_encryption: "md5",
        ..PgOptions::default()
    })
    .expect("postgres starts");
    pg.create_user("alice", "secret").expect("create user");
    let stored = stored_password(&pg, "alice");
    assert!(stored.starts_with("md5"), "{stored}");
    login_through_proxy(&pg, "md5", &stored);
}

#[test]
fn scram_secret_entry_logs_in_with_the_clients_key() {
    let pg = start_pg(HbaAuth::Scram);
    pg.create_user("alice", "secret").expect("create user");
    let stored = stored_password(&pg, "alice");
    assert!(stored.starts_with("SCRAM-SHA-256$"), "{stored}");
    login_through_proxy(&pg, "scram-sha-256", &stored);
}
