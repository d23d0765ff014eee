//! `pgtier demo`, the README's first command: it must come up, serve the pgbench data through
//! the proxy, and remove every server and directory on Ctrl-C (SIGINT).

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
    let psql_line = format!("psql -h 127.0.0.1 -p {port} -U postgres pgbench");
    assert!(
        printed.iter().any(|line| line.trim() == psql_line),
        "{printed:#?}"
    );

    // The printed command works: the replica behind pgtier has the pgbench data, read-only.
    let finished = run(
        pg_tool("psql").args([
            "-XAt",
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-c",
            "SELECT count(*), pg_is_in_recovery() FROM pgbench_accounts",
            "pgbench",
        ]),
        Duration::from_secs(30),
    )
    .expect("psql");
    let served = finished.stdout.trim().to_string();

    send_signal(demo_pid, libc::SIGINT).expect("SIGINT");
    let exited = wait::until(Duration::from_secs(60), Duration::from_millis(50), || {
        demo.try_wait().ok().flatten()
    });
    if exited.is_none() {
        let _ = demo.kill();
        let _ = demo.wait();
    }
    assert!(finished.success(), "{finished:?}");
    assert_eq!(served, "100000|t");
    let status = exited.expect("demo did not exit within 60 s of SIGINT");
    assert!(status.success(), "{status}");
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
