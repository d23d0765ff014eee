//! Shared helpers for the shard's end-to-end tests: a real PostgreSQL, a pgtier in front of
//! it, and psql/pgbench runners.
#![allow(dead_code)]

pub use pgtier_core::localpg;
pub mod raw;
pub mod replicas;

use std::process::Command;
use std::time::Duration;

pub use localpg::{HbaAuth, LocalPg, PgOptions};
use pgtier::ProxyHandle;
use pgtier_core::config::Config;

pub fn start_pg(auth: HbaAuth) -> LocalPg {
    LocalPg::start_primary(&PgOptions {
        auth,
        ..PgOptions::default()
    })
    .expect("postgres starts")
}

/// A config for one database `postgres` (and `nosuchdb` pointing at a missing database).
pub fn config_text(pg_port: u16, extra: &str, mode: &str, pool_size: u32) -> String {
    let listen_port = localpg::free_port().expect("free port");
    format!(
        r#"
[pgtier]
listen_addr = "127.0.0.1"
listen_port = {listen_port}
workers = 1
pool_mode = "{mode}"
default_pool_size = {pool_size}
max_client_conn = 2000
{extra}

[databases.postgres]
host = "127.0.0.1"
port = {pg_port}
dbname = "postgres"

[databases.nosuchdb]
host = "127.0.0.1"
port = {pg_port}
dbname = "nosuchdb"
"#
    )
}

pub fn start_proxy(text: &str) -> ProxyHandle {
    let dir = std::env::temp_dir();
    let config = Config::from_str(text, dir.join("pgtier-test.toml")).expect("valid config");
    pgtier::start(config).expect("pgtier starts")
}

pub fn start_proxy_in(dir: &std::path::Path, text: &str) -> ProxyHandle {
    let path = dir.join("pgtier.toml");
    std::fs::write(&path, text).expect("write config");
    let config = Config::load(&path).expect("valid config");
    pgtier::start(config).expect("pgtier starts")
}

/// Runs psql against `port` and returns (success, stdout, stderr).
pub fn psql(
    port: u16,
    user: &str,
    db: &str,
    sql: &str,
    password: Option<&str>,
) -> (bool, String, String) {
    let bindir = localpg::pg_bindir();
    let mut command = Command::new(bindir.join("psql"));
    command
        .args([
            "-XAtq",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            user,
            "-d",
            db,
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .env("PGCONNECT_TIMEOUT", "10");
    match password {
        Some(password) => command.env("PGPASSWORD", password),
        None => command.env_remove("PGPASSWORD"),
    };
    let output = command.output().expect("psql runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
        String::from_utf8_lossy(&output.stderr).trim().to_string(),
    )
}

pub fn pgbench(port: u16, args: &[&str]) -> (bool, String) {
    let bindir = localpg::pg_bindir();
    let output = Command::new(bindir.join("pgbench"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg("postgres")
        .output()
        .expect("pgbench runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    check()
}
