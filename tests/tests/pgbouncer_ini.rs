//! An unchanged pgbouncer.ini, as a PgBouncer user writes it, run with `pgtier FILE.ini`:
//! transaction pooling, md5 logins from the auth file, the `*` fallback, per-entry startup
//! parameters, and the startup warning that names the keys pgtier does not honour.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pgtier_tests::fixtures::{PGBENCH_TIMEOUT, PSQL_TIMEOUT, admin, pgbench_processed, server};
use pgtier_tests::process::{Finished, pg_tool, run};
use pgtier_tests::proxy::proxy_binary;
use pgtier_tests::{Pgtier, TempDir, free_port};

const PASSWORD: &str = "s3cret pass";

/// Keys of the file below that PgBouncer has and pgtier does not act on.
const UNHONOURED: [&str; 3] = ["server_round_robin", "tcp_keepalive", "log_disconnections"];

fn pgbouncer_ini(dir: &Path, server_port: u16, listen_port: u16) -> String {
    let dir = dir.display();
    format!(
        "\
;; PgBouncer 1.18 configuration (pgtier runs it unchanged)
[databases]
app = host=127.0.0.1 port={server_port} dbname=appdb timezone=Asia/Tokyo
; every other database, by its own name
* = host=127.0.0.1 port={server_port}

[users]
postgres = pool_mode=transaction

[pgbouncer]
logfile = {dir}/pgbouncer.log
pidfile = {dir}/pgbouncer.pid
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir = {dir}
auth_type = md5
auth_file = userlist.txt
admin_users = postgres
pool_mode = transaction
default_pool_size = 4
max_client_conn = 50
server_reset_query = DISCARD ALL
ignore_startup_parameters = extra_float_digits
server_round_robin = 1
tcp_keepalive = 1
log_disconnections = 1
"
    )
}

fn with_password(mut command: Command) -> Command {
    command.env("PGPASSWORD", PASSWORD);
    command
}

fn finish(command: &mut Command, timeout: Duration) -> Finished {
    match run(command, timeout) {
        Ok(finished) => finished,
        Err(error) => panic!("running {command:?}: {error}"),
    }
}

fn psql(proxy: &Pgtier, dbname: &str, sql: &str) -> Finished {
    let mut command = with_password(pg_tool("psql"));
    command
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(proxy.conninfo(dbname, "postgres"))
        .args(["-c", sql]);
    finish(&mut command, PSQL_TIMEOUT)
}

fn start(dir_files: impl FnOnce(&Path) -> std::io::Result<PathBuf>, port: u16) -> Pgtier {
    match Pgtier::start_file(port, dir_files) {
        Ok(proxy) => proxy,
        Err(error) => panic!("starting pgtier with a pgbouncer.ini: {error}"),
    }
}

#[test]
fn an_unchanged_pgbouncer_ini_serves_psql_and_pgbench() {
    let pg = server();
    admin(&pg, "CREATE DATABASE appdb");
    admin(&pg, "CREATE DATABASE autodb");
    let mut init = pg_tool("pgbench");
    init.args(["-i", "-q", "-s", "1", "-h", "127.0.0.1", "-p"])
        .arg(pg.port().to_string())
        .args(["-U", "postgres", "appdb"]);
    assert!(finish(&mut init, PGBENCH_TIMEOUT).success(), "pgbench -i");

    let listen_port = free_port().expect("port");
    let server_port = pg.port();
    let proxy = start(
        |dir| {
            std::fs::write(
                dir.join("userlist.txt"),
                format!("\"postgres\" \"{PASSWORD}\"\n"),
            )?;
            let path = dir.join("pgbouncer.ini");
            std::fs::write(&path, pgbouncer_ini(dir, server_port, listen_port))?;
            Ok(path)
        },
        listen_port,
    );

    // A named entry, with its timezone= sent to the server at connect.
    let named = psql(
        &proxy,
        "app",
        "SELECT current_database(), current_setting('TimeZone')",
    );
    assert!(named.success(), "{named:?}");
    assert_eq!(named.stdout.trim(), "appdb|Asia/Tokyo");

    // A database no entry names, reached through `*` under its own name.
    let fallback = psql(&proxy, "autodb", "SELECT current_database()");
    assert!(fallback.success(), "{fallback:?}");
    assert_eq!(fallback.stdout.trim(), "autodb");
    let again = psql(&proxy, "autodb", "SELECT 1");
    assert!(again.success(), "{again:?}");
    // ...and one the server does not have: the server's own error.
    let missing = psql(&proxy, "nosuchdb", "SELECT 1");
    assert!(!missing.success(), "{missing:?}");
    assert!(
        missing.stderr.contains("\"nosuchdb\" does not exist"),
        "{missing:?}"
    );
    // A wrong password is refused by the auth file check.
    let mut wrong = pg_tool("psql");
    wrong
        .env("PGPASSWORD", "wrong")
        .args(["-XAtq", "-d"])
        .arg(proxy.conninfo("app", "postgres"))
        .args(["-c", "SELECT 1"]);
    let wrong = finish(&mut wrong, PSQL_TIMEOUT);
    assert!(
        !wrong.success() && wrong.stderr.contains("password authentication failed"),
        "{wrong:?}"
    );

    let mut bench = with_password(pg_tool("pgbench"));
    bench
        .args([
            "-n",
            "-c",
            "4",
            "-j",
            "2",
            "-t",
            "50",
            "-h",
            "127.0.0.1",
            "-p",
        ])
        .arg(listen_port.to_string())
        .args(["-U", "postgres", "app"]);
    let bench = finish(&mut bench, PGBENCH_TIMEOUT);
    assert!(bench.success(), "{bench:?}");
    assert_eq!(pgbench_processed(&bench.stdout), Some(200), "{bench:?}");

    // One startup warning names every key that was read and not honoured (in the standard
    // error log, or in the ini's logfile where pgtier writes one).
    let logfile = std::fs::read_to_string(proxy.dir().join("pgbouncer.log")).unwrap_or_default();
    let log = format!("{}{logfile}", proxy.log());
    let warning = log
        .lines()
        .find(|line| line.contains("does not honour"))
        .unwrap_or_else(|| panic!("no warning about unhonoured keys in:\n{log}"));
    for key in UNHONOURED {
        assert!(warning.contains(key), "{key} missing from: {warning}");
    }
    assert!(!warning.contains("listen_addr"), "{warning}");

    // PgBouncer's lines that operators grep for: each server connection (log_connections
    // is on by default), and the first client of a name `*` serves, once.
    let opened =
        format!("app/postgres@127.0.0.1:{server_port} new connection to server (from 127.0.0.1:");
    assert!(logfile.contains(&opened), "no {opened:?} in:\n{logfile}");
    let registered = logfile
        .matches("registered new auto-database: autodb")
        .count();
    assert_eq!(registered, 1, "{logfile}");
}

fn check_config(path: &Path) -> Finished {
    let mut command = Command::new(proxy_binary().expect("pgtier binary"));
    command.arg("check-config").arg(path);
    finish(&mut command, Duration::from_secs(30))
}

#[test]
fn check_config_says_which_ini_keys_are_honoured_and_names_misspelt_ones() {
    let dir = TempDir::new("ini-check").expect("tempdir");
    std::fs::write(dir.path().join("userlist.txt"), "\"postgres\" \"x\"\n").expect("userlist");
    let good = dir.path().join("pgbouncer.ini");
    std::fs::write(&good, pgbouncer_ini(dir.path(), 5432, 6432)).expect("ini");
    let finished = check_config(&good);
    assert!(finished.success(), "{finished:?}");
    let out = &finished.stdout;
    assert!(out.starts_with("OK\n"), "{out}");
    let honoured = out
        .lines()
        .find(|l| l.trim_start().starts_with("honoured:"))
        .expect(out);
    for key in [
        "listen_addr",
        "auth_file",
        "admin_users",
        "pool_mode",
        "[databases] timezone",
    ] {
        assert!(honoured.contains(key), "{key}: {out}");
    }
    let not = out.lines().find(|l| l.contains("not honoured")).expect(out);
    for key in UNHONOURED {
        assert!(not.contains(key) && !honoured.contains(key), "{key}: {out}");
    }

    // A file with a misspelt key is refused, naming the file, the line and the likely key;
    // the proxy refuses to start with it too.
    let bad = dir.path().join("typo.ini");
    std::fs::write(&bad, "[pgbouncer]\nauth_type = trust\nlisten_prot = 6432\n").expect("ini");
    let finished = check_config(&bad);
    assert!(!finished.success(), "{finished:?}");
    let expected = format!(
        "{}:3: [pgbouncer] listen_prot: PgBouncer 1.25 has no such setting (did you mean \
         \"listen_port\"?)",
        bad.display()
    );
    assert_eq!(finished.stderr.trim(), expected);
    let mut run_it = Command::new(proxy_binary().expect("pgtier binary"));
    run_it.arg(&bad);
    let ran = finish(&mut run_it, Duration::from_secs(30));
    assert!(!ran.success() && ran.stderr.contains(&expected), "{ran:?}");
}

/// PgBouncer 1.25's own test configuration (its `test/test.ini`, copied unchanged).
const PGBOUNCER_125_TEST_INI: &str = include_str!("../fixtures/pgbouncer-1.25-test.ini");

#[test]
fn pgbouncer_125s_own_test_ini_loads() {
    // The file as PgBouncer's suite ships it: statement pooling, host lists with a name that
    // does not resolve and a host listed twice, and the 1.19+ keys.
    let text = PGBOUNCER_125_TEST_INI.to_string();
    let dir = TempDir::new("ini-125").expect("tempdir");
    let path = dir.path().join("test.ini");
    std::fs::write(&path, text).expect("ini");
    // check-config also reads the auth file the proxy would read at start.
    std::fs::write(dir.path().join("userlist.txt"), "").expect("userlist");
    let finished = check_config(&path);
    assert!(finished.success(), "{finished:?}");
    let out = &finished.stdout;
    let honoured = out
        .lines()
        .find(|l| l.trim_start().starts_with("honoured:"))
        .expect(out);
    for key in [
        "[databases] reserve_pool_size",
        "[databases] server_lifetime",
        "[databases] auth_dbname",
        "[databases] load_balance_hosts",
        "[databases] max_db_client_connections",
        "[users] max_user_client_connections",
        "[users] pool_size",
        "[users] reserve_pool_size",
        "[databases] connect_query",
        "track_extra_parameters",
    ] {
        assert!(honoured.contains(key), "{key}: {out}");
    }
    let not = out.lines().find(|l| l.contains("not honoured")).expect(out);
    assert!(not.contains("tcp_keepalive"), "{out}");
}
