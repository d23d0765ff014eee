//! Replacing a PgBouncer host (docs/operations.md): `pgtier check-config` on an existing
//! pgbouncer.ini names the keys that behave differently and how, the keys pgtier does not
//! act on, and the command line that starts pgtier with the file; that line, run as printed,
//! serves psql with the file unchanged. The exit status says whether the file runs as is: a
//! missing auth file or log directory makes it 1. PgBouncer's own sample configuration
//! (PgBouncer 1.25's etc/pgbouncer.ini, when its source is on this machine) is checked too.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::server;
use pgtier_tests::process::{Finished, pg_tool, run, send_signal};
use pgtier_tests::proxy::proxy_binary;
use pgtier_tests::{TempDir, free_port};

const TIMEOUT: Duration = Duration::from_secs(60);

/// Where PgBouncer's source may be unpacked on a development machine (not in CI).
const PGBOUNCER_SAMPLE: &str = "/tmp/pgtier-drivers/pgbouncer/etc/pgbouncer.ini";

fn check_config(path: &Path) -> Finished {
    let mut command = Command::new(proxy_binary().expect("the pgtier binary"));
    command.arg("check-config").arg(path);
    run(&mut command, TIMEOUT).expect("pgtier runs")
}

/// A production-style pgbouncer.ini: transaction pooling, syslog, the process keys, and
/// keys pgtier reads without acting on.
fn pgbouncer_ini(dir: &Path, server_port: u16, listen_port: u16) -> String {
    let dir = dir.display();
    format!(
        "\
[databases]
app = host=127.0.0.1 port={server_port} dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen_port}
unix_socket_dir = {dir}/run
logfile = {dir}/log/pgbouncer.log
pidfile = {dir}/run/pgbouncer.pid
auth_type = md5
auth_file = {dir}/userlist.txt
pool_mode = transaction
default_pool_size = 5
so_reuseport = 1
syslog = 1
server_round_robin = 1
tcp_keepalive = 1
"
    )
}

/// The lines under a heading of the report (`behaves differently under pgtier:`), indented.
fn section<'a>(out: &'a str, heading: &str) -> Vec<&'a str> {
    out.lines()
        .skip_while(|line| *line != heading)
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .map(str::trim)
        .collect()
}

/// pgtier started from a printed command line; killed if the test ends first.
struct Started(Child);

impl Drop for Started {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[test]
fn check_config_tells_a_pgbouncer_user_what_differs_and_how_to_start() {
    let pg = server();
    let dir = TempDir::new("replace-pgb").expect("tempdir");
    for sub in ["run", "log"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("dirs");
    }
    std::fs::write(dir.path().join("userlist.txt"), "\"postgres\" \"secret\"\n").expect("users");
    let listen_port = free_port().expect("a free port");
    let ini = dir.path().join("pgbouncer.ini");
    std::fs::write(&ini, pgbouncer_ini(dir.path(), pg.port(), listen_port)).expect("ini");

    let checked = check_config(&ini);
    assert!(checked.success(), "runs as is: {checked:?}");
    let out = &checked.stdout;
    assert!(out.starts_with("OK\n"), "{out}");
    let differences = section(out, "behaves differently under pgtier:");
    for (key, how) in [
        ("so_reuseport", "SO_REUSEPORT"),
        ("logfile", "format"),
        ("syslog_ident", "pgtier"),
        ("pool_mode", "session state"),
    ] {
        assert!(
            differences
                .iter()
                .any(|line| line.starts_with(&format!("{key}: ")) && line.contains(how)),
            "{key} is said to differ ({how}): {out}"
        );
    }
    assert!(
        !differences
            .iter()
            .any(|line| line.starts_with("listen_port")),
        "a key that behaves the same is not listed: {out}"
    );
    let unhonoured = out
        .lines()
        .find(|line| line.contains("not honoured (read, no effect):"))
        .expect(out);
    for key in ["server_round_robin", "tcp_keepalive"] {
        assert!(unhonoured.contains(key), "{key}: {out}");
    }
    let start = section(out, "start pgtier with this file:");
    let ini_path = ini.display().to_string();
    assert_eq!(
        start.first(),
        Some(&format!("pgtier {ini_path}").as_str()),
        "{out}"
    );
    assert!(
        start
            .iter()
            .any(|line| line.starts_with(&format!("pgtier -d {ini_path} "))),
        "pidfile and logfile are set, so -d works: {out}"
    );

    // The printed line, run as printed (the binary under test for `pgtier`), serves the
    // file's database with its auth file.
    let mut words = start[0].split_whitespace().skip(1);
    let file = words.next().map(PathBuf::from).expect("a file argument");
    let mut command = Command::new(proxy_binary().expect("pgtier"));
    command
        .arg(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let started = Started(command.spawn().expect("start pgtier"));
    let deadline = Instant::now() + TIMEOUT;
    let answer = loop {
        let ran = run(
            pg_tool("psql")
                .args(["-X", "-At", "-c", "SELECT 'through pgtier'"])
                .arg(format!(
                    "host=127.0.0.1 port={listen_port} dbname=app user=postgres password=secret"
                )),
            TIMEOUT,
        )
        .expect("psql");
        if ran.success() || Instant::now() >= deadline {
            break ran;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(answer.stdout.trim(), "through pgtier", "{answer:?}");
    let _ = send_signal(started.0.id(), libc::SIGTERM);
    drop(started);

    // What stops a start makes the status 1: the auth file, then the log directory.
    std::fs::remove_file(dir.path().join("userlist.txt")).expect("remove");
    let missing = check_config(&ini);
    assert!(!missing.success(), "{missing:?}");
    assert!(missing.stderr.contains("userlist.txt"), "{missing:?}");
    std::fs::write(dir.path().join("userlist.txt"), "").expect("users");
    std::fs::remove_dir_all(dir.path().join("log")).expect("remove");
    let missing = check_config(&ini);
    assert!(!missing.success(), "{missing:?}");
    assert!(
        missing.stderr.contains("logfile") && missing.stderr.contains("does not exist"),
        "{missing:?}"
    );
}

#[test]
fn pgbouncers_own_sample_ini_is_checked() {
    let Ok(sample) = std::fs::read_to_string(PGBOUNCER_SAMPLE) else {
        eprintln!("{PGBOUNCER_SAMPLE} is not on this machine: nothing to check");
        return;
    };
    // As shipped: it runs as is only where its paths exist (PgBouncer's package makes them).
    let dir = TempDir::new("pgb-sample").expect("tempdir");
    let as_shipped = dir.path().join("pgbouncer.ini");
    std::fs::write(&as_shipped, &sample).expect("copy");
    let checked = check_config(&as_shipped);
    let paths_exist = ["/var/log/pgbouncer", "/var/run/pgbouncer"]
        .iter()
        .all(|dir| Path::new(dir).is_dir())
        && Path::new("/etc/pgbouncer/userlist.txt").is_file();
    assert_eq!(checked.success(), paths_exist, "{checked:?}");

    // Its paths moved under a directory of the test's: it runs as is, with its log format
    // named as the difference, nothing unhonoured, and both start lines.
    for sub in ["log", "run"] {
        std::fs::create_dir_all(dir.path().join(sub)).expect("dirs");
    }
    std::fs::write(dir.path().join("userlist.txt"), "").expect("users");
    let base = dir.path().display().to_string();
    let moved = sample
        .replace("/var/log/pgbouncer", &format!("{base}/log"))
        .replace("/var/run/pgbouncer", &format!("{base}/run"))
        .replace(
            "/etc/pgbouncer/userlist.txt",
            &format!("{base}/userlist.txt"),
        );
    let moved_path = dir.path().join("moved.ini");
    std::fs::write(&moved_path, moved).expect("ini");
    let checked = check_config(&moved_path);
    assert!(checked.success(), "{checked:?}");
    let out = &checked.stdout;
    assert!(
        section(out, "behaves differently under pgtier:")
            .iter()
            .any(|line| line.starts_with("logfile: ")),
        "{out}"
    );
    let start = section(out, "start pgtier with this file:");
    assert_eq!(
        start.first().copied(),
        Some(format!("pgtier {}", moved_path.display()).as_str()),
        "{out}"
    );
}
