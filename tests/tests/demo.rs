//! `pgtier demo`, the README's first command: it must come up, serve the pgbench data through
//! the proxy to its premium and freemium users, open the admin console, and remove every
//! server and directory on Ctrl-C (SIGINT). `pgtier demo --load` must drive both classes, fail
//! and restore a replica, report as it goes, and clean up by itself.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use pgtier_tests::process::{pg_tool, run, send_signal};
use pgtier_tests::proxy::proxy_binary;
use pgtier_tests::{free_port, wait};

/// Lists /tmp entries that localpg or the demo create for process `pid`.
fn leftovers(pid: u32) -> Vec<String> {
    let prefixes = [format!("pgtier-pg-{pid}-"), format!("pgtier-demo-{pid}")];
    std::fs::read_dir(std::env::temp_dir())
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| {
                    prefixes
                        .iter()
                        .any(|prefix| name.starts_with(prefix.as_str()))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Runs psql against the demo's pgtier and returns what it printed (`-XAt`).
fn psql_through(port: u16, user: &str, database: &str, sql: &str) -> (bool, String) {
    let finished = run(
        pg_tool("psql").args([
            "-XAt",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            user,
            "-c",
            sql,
            database,
        ]),
        Duration::from_secs(30),
    )
    .expect("psql");
    (
        finished.success(),
        format!("{}{}", finished.stdout, finished.stderr),
    )
}

/// Asserts the demo process left nothing behind: no directories, no listener.
fn assert_cleaned_up(demo_pid: u32, port: u16) {
    assert_eq!(
        leftovers(demo_pid),
        Vec::<String>::new(),
        "demo left directories behind"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "pgtier still listening after the demo stopped"
    );
}

#[test]
fn demo_serves_pgbench_data_and_cleans_up_on_ctrl_c() {
    let port = free_port().expect("port");
    let mut demo = Command::new(proxy_binary().expect("binary"))
        .args(["demo", "--port", &port.to_string(), "--replicas", "2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start demo");
    let demo_pid = demo.id();
    let stdout = demo.stdout.take().expect("stdout");
    let (lines_in, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_in.send(line);
        }
    });
    let mut printed = Vec::new();
    let ready = wait::until(Duration::from_secs(180), Duration::from_millis(50), || {
        while let Ok(line) = lines.try_recv() {
            printed.push(line);
        }
        printed
            .iter()
            .any(|line| line.contains("Press Ctrl-C"))
            .then_some(())
    });
    if ready.is_none() {
        let _ = demo.kill();
        let _ = demo.wait();
        panic!("demo never became ready; printed: {printed:#?}");
    }
    for (user, database) in [
        ("premium", "pgbench"),
        ("freemium", "pgbench"),
        ("postgres", "pgbench_primary"),
        ("postgres", "pgbouncer"),
    ] {
        let psql_line = format!("psql -h 127.0.0.1 -p {port} -U {user} {database}");
        assert!(
            printed.iter().any(|line| line.trim() == psql_line),
            "{psql_line:?} not printed: {printed:#?}"
        );
    }

    // The printed commands work: both classes read the pgbench data from a replica, and the
    // admin console shows the PLB roles of the two replicas.
    let read = "SELECT count(*), pg_is_in_recovery() FROM pgbench_accounts";
    let premium = psql_through(port, "premium", "pgbench", read);
    let freemium = psql_through(port, "freemium", "pgbench", read);
    let primary = psql_through(
        port,
        "postgres",
        "pgbench_primary",
        "SELECT pg_is_in_recovery()",
    );
    let replicas = psql_through(port, "postgres", "pgbouncer", "SHOW REPLICAS");

    send_signal(demo_pid, libc::SIGINT).expect("SIGINT");
    let exited = wait::until(Duration::from_secs(60), Duration::from_millis(50), || {
        demo.try_wait().ok().flatten()
    });
    if exited.is_none() {
        let _ = demo.kill();
        let _ = demo.wait();
    }
    assert_eq!(premium, (true, "100000|t\n".to_string()));
    assert_eq!(freemium, (true, "100000|t\n".to_string()));
    assert_eq!(primary, (true, "f\n".to_string()));
    assert!(replicas.0, "{replicas:?}");
    let roles: Vec<&str> = replicas
        .1
        .lines()
        .filter_map(|row| row.split('|').nth(2))
        .collect();
    assert_eq!(roles, ["premium", "freemium"], "{replicas:?}");
    let status = exited.expect("demo did not exit within 60 s of SIGINT");
    assert!(status.success(), "{status}");
    assert_cleaned_up(demo_pid, port);
}

#[test]
fn demo_load_reports_both_classes_a_failure_and_a_rejoin_then_exits() {
    let port = free_port().expect("port");
    let mut demo = Command::new(proxy_binary().expect("binary"))
        .args(["demo", "--port", &port.to_string(), "--replicas", "3"])
        .args(["--load", "--load-seconds", "12"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start demo");
    let demo_pid = demo.id();
    let stdout = demo.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    // Start-up (about 10 s with 3 replicas) plus the 12 s load, with room for a slow machine.
    let exited = wait::until(Duration::from_secs(150), Duration::from_millis(100), || {
        demo.try_wait().ok().flatten()
    });
    if exited.is_none() {
        let _ = send_signal(demo_pid, libc::SIGINT);
        let stopped = wait::until(Duration::from_secs(30), Duration::from_millis(100), || {
            demo.try_wait().ok().flatten()
        });
        if stopped.is_none() {
            let _ = demo.kill();
            let _ = demo.wait();
        }
    }
    let printed = reader.join().expect("reader");
    let status = exited.unwrap_or_else(|| panic!("demo --load did not finish: {printed:#?}"));
    assert!(status.success(), "{status}: {printed:#?}");
    let has = |needle: &str| printed.iter().any(|line| line.contains(needle));
    let class_lines = printed
        .iter()
        .filter(|line| {
            line.starts_with("t=")
                && line.contains("premium: ")
                && line.contains("freemium: ")
                && line.matches(" ms").count() == 2
        })
        .count();
    assert!(class_lines >= 3, "per-class latency lines: {printed:#?}");
    assert!(has("killed replica 1 (127.0.0.1:"), "{printed:#?}");
    assert!(has("restarted replica 1 (127.0.0.1:"), "{printed:#?}");
    assert!(has("SHOW REPLICAS at t="), "{printed:#?}");
    let table_header = printed.iter().any(|line| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        columns.starts_with(&["replica", "role", "borrowed_from", "premium_sessions"])
    });
    assert!(table_header, "{printed:#?}");
    // The killed replica shows as down in a table printed after the kill, and the timeline
    // at the end has its failure and its rejoin.
    assert!(
        printed
            .iter()
            .any(|line| line.trim_start().starts_with("#1 ") && line.ends_with(" down")),
        "{printed:#?}"
    );
    assert!(has("Role and failure events"), "{printed:#?}");
    assert!(has("premium -> down"), "{printed:#?}");
    assert!(has("down -> mixed"), "{printed:#?}");
    assert!(has("Summary over"), "{printed:#?}");
    assert_cleaned_up(demo_pid, port);
}

/// This proxy's `SHOW FLEET` row: (mode, version, leader) as psql prints them.
fn fleet_state(port: u16) -> Option<(String, u64, String)> {
    let (ok, text) = psql_through(port, "postgres", "pgbouncer", "SHOW FLEET");
    if !ok {
        return None;
    }
    // fleet|member|is_self|is_leader|live|last_report|age_ms|mode|version|stored_version|cause
    let rows: Vec<Vec<&str>> = text.lines().map(|line| line.split('|').collect()).collect();
    let leader = rows
        .iter()
        .find(|row| row.get(3) == Some(&"t"))?
        .get(1)?
        .to_string();
    let own = rows.iter().find(|row| row.get(2) == Some(&"t"))?;
    Some((own.get(7)?.to_string(), own.get(8)?.parse().ok()?, leader))
}

/// The first of three consecutive free ports (the demo listens on PORT, PORT+1, PORT+2),
/// below Linux's ephemeral range: the demo binds the last two seconds after this looked,
/// and meanwhile the other tests' outgoing connections take local ports from that range.
fn three_free_ports() -> Option<u16> {
    const BELOW_EPHEMERAL: std::ops::Range<u32> = 20_000..32_000;
    let span = BELOW_EPHEMERAL.end - BELOW_EPHEMERAL.start;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let start = (std::process::id().wrapping_mul(7_919) ^ nanos) % span;
    let free = |p: u32| {
        u16::try_from(p).is_ok_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
    };
    (0..span)
        .step_by(3)
        .map(|offset| BELOW_EPHEMERAL.start + (start + offset) % (span - 2))
        .find(|&port| free(port) && free(port + 1) && free(port + 2))
        .and_then(|port| u16::try_from(port).ok())
}

#[test]
fn demo_with_three_proxies_runs_one_fleet_and_cleans_up() {
    let port = three_free_ports().expect("three consecutive free ports");
    let ports = [port, port + 1, port + 2];
    let mut demo = Command::new(proxy_binary().expect("binary"))
        .args(["demo", "--port", &port.to_string(), "--replicas", "2"])
        .args(["--proxies", "3"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start demo");
    let demo_pid = demo.id();
    let stdout = demo.stdout.take().expect("stdout");
    let (lines_in, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines_in.send(line);
        }
    });
    let mut printed = Vec::new();
    let ready = wait::until(Duration::from_secs(180), Duration::from_millis(50), || {
        while let Ok(line) = lines.try_recv() {
            printed.push(line);
        }
        printed
            .iter()
            .any(|line| line.contains("Press Ctrl-C"))
            .then_some(())
    });
    if ready.is_none() {
        let _ = demo.kill();
        let _ = demo.wait();
        panic!("demo never became ready; printed: {printed:#?}");
    }
    // All three answer SHOW FLEET in fleet mode with one version and one leader.
    let mut last_seen = Vec::new();
    let agreed = wait::until(Duration::from_secs(60), Duration::from_millis(200), || {
        let states: Vec<Option<(String, u64, String)>> =
            ports.iter().map(|p| fleet_state(*p)).collect();
        last_seen.clone_from(&states);
        let first = states.first()?.clone()?;
        states
            .iter()
            .all(|s| s.as_ref().is_some_and(|s| s.0 == "fleet" && *s == first))
            .then_some(first)
    });
    // Both classes read through a member that is not the first.
    let read = "SELECT count(*) FROM pgbench_accounts";
    let premium = psql_through(port + 2, "premium", "pgbench", read);

    send_signal(demo_pid, libc::SIGINT).expect("SIGINT");
    let exited = wait::until(Duration::from_secs(60), Duration::from_millis(50), || {
        demo.try_wait().ok().flatten()
    });
    if exited.is_none() {
        let _ = demo.kill();
        let _ = demo.wait();
    }
    assert!(
        agreed.is_some(),
        "the three proxies did not agree; last (mode, version, leader) seen on each: \
         {last_seen:?}; printed: {printed:#?}"
    );
    assert!(
        printed.iter().any(|line| line.contains("SHOW FLEET")),
        "how to watch the fleet is printed: {printed:#?}"
    );
    assert_eq!(
        premium,
        (true, "100000\n".to_string()),
        "premium read through port+2"
    );
    let status = exited.expect("demo did not exit within 60 s of SIGINT");
    assert!(status.success(), "{status}");
    for port in ports {
        assert_cleaned_up(demo_pid, port);
    }
}
