//! pgtier as a Unix process, started the way PgBouncer's init scripts and service units start
//! it: `-d` with a pidfile and a logfile, `-q`, `-V`, `-u USER`; several listen addresses and
//! the Unix socket (psql and pgbench on it, a stale socket file replaced, a live one refused);
//! a server reached over its Unix socket; shards pinned within the CPU mask it starts with;
//! `-R`, taking the addresses over from the running pgtier while it finishes its transactions.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::server;
use pgtier_tests::process::{Finished, pg_tool, run, send_signal};
use pgtier_tests::proxy::proxy_binary;
use pgtier_tests::{LocalPg, TempDir, free_port};

/// Bounded waits: listeners to appear, a process to exit.
const WAIT: Duration = Duration::from_secs(20);
/// Time limit for one client program.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

/// A pgtier started by a test (a child, or a daemon known by its pid) that is killed if the
/// test ends while it runs.
struct Running {
    pid: u32,
    child: Option<Child>,
}

impl Running {
    fn alive(&mut self) -> bool {
        if let Some(child) = self.child.as_mut() {
            return matches!(child.try_wait(), Ok(None));
        }
        // A daemon is not our child: gone means no process, or an unreaped zombie.
        match std::fs::read_to_string(format!("/proc/{}/status", self.pid)) {
            Ok(status) => !status
                .lines()
                .any(|line| line.starts_with("State:") && line.contains('Z')),
            Err(_) => false,
        }
    }

    /// SIGTERM, then waits (bounded) for the process to be gone.
    fn terminate(&mut self) -> bool {
        let _ = send_signal(self.pid, libc::SIGTERM);
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if !self.alive() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.alive() {
            let _ = send_signal(self.pid, libc::SIGKILL);
        }
        if let Some(child) = self.child.as_mut() {
            let _ = child.wait();
        }
    }
}

/// A pgtier.toml in `dir` with `pgtier_lines` in `[pgtier]` and a `postgres` entry at `host`
/// (a directory for a Unix socket) and `port`.
fn write_config(dir: &Path, pgtier_lines: &str, host: &str, port: u16) -> PathBuf {
    let userlist = dir.join("userlist.txt");
    std::fs::write(&userlist, "\"postgres\" \"\"\n").expect("userlist");
    let text = format!(
        "[pgtier]\nworkers = 2\nauth_type = \"trust\"\nauth_file = \"{}\"\n\
         pool_mode = \"transaction\"\nadmin_users = [\"postgres\"]\n{pgtier_lines}\n\
         [databases.postgres]\nhost = \"{host}\"\nport = {port}\ndbname = \"postgres\"\n",
        userlist.display()
    );
    let path = dir.join("pgtier.toml");
    std::fs::write(&path, text).expect("config");
    path
}

fn pgtier_command(args: &[&str], config: &Path) -> Command {
    let mut command = Command::new(proxy_binary().expect("pgtier binary"));
    command.args(args).arg(config).env("PGTIER_LOG", "info");
    command
}

/// Starts pgtier in the foreground with stderr into `stderr_path`.
fn spawn(args: &[&str], config: &Path, stderr_path: &Path) -> Running {
    let stderr = std::fs::File::create(stderr_path).expect("stderr file");
    let child = pgtier_command(args, config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn pgtier");
    Running {
        pid: child.id(),
        child: Some(child),
    }
}

/// Waits until something accepts on `socket` (a Unix socket file).
fn wait_for_unix(socket: &Path, running: &mut Running) {
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        if std::os::unix::net::UnixStream::connect(socket).is_ok() {
            return;
        }
        assert!(
            running.alive(),
            "pgtier exited before listening on {}",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on {} after {WAIT:?}", socket.display());
}

/// `psql -XAt -c SQL` with libpq's `host` and `port` (a directory for a Unix socket).
fn psql(host: &str, port: u16, database: &str, sql: &str) -> Finished {
    let mut command = pg_tool("psql");
    command
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-h", host, "-p"])
        .arg(port.to_string())
        .args(["-U", "postgres", "-d", database, "-c", sql]);
    run(&mut command, CLIENT_TIMEOUT).expect("psql")
}

fn psql_ok(host: &str, port: u16, database: &str, sql: &str) -> String {
    let finished = psql(host, port, database, sql);
    assert!(
        finished.success(),
        "psql -h {host} -p {port} {sql}: {finished:?}"
    );
    finished.stdout.trim().to_string()
}

fn socket_path(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!(".s.PGSQL.{port}"))
}

fn uid_line(pid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    status
        .lines()
        .find(|line| line.starts_with("Uid:"))
        .unwrap_or_default()
        .to_string()
}

/// `-V` prints the version; `-q` keeps standard error empty while the log file gets the lines
/// (reopened on SIGHUP); `-R` warns and starts normally.
#[test]
fn version_and_quiet() {
    let version = run(
        Command::new(proxy_binary().expect("binary")).arg("-V"),
        WAIT,
    )
    .expect("pgtier -V");
    assert!(
        version.success() && version.stdout.starts_with("pgtier "),
        "{version:?}"
    );

    let dir = TempDir::new("process-quiet").expect("tempdir");
    let port = free_port().expect("port");
    let logfile = dir.path().join("pgtier.log");
    let pidfile = dir.path().join("pgtier.pid");
    let lines = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nlogfile = \"{}\"\n\
         pidfile = \"{}\"\n",
        logfile.display(),
        pidfile.display()
    );
    let config = write_config(dir.path(), &lines, "127.0.0.1", 1);
    let stderr_path = dir.path().join("stderr.txt");
    // -R with no pgtier running: it says so in the log (not on stderr, with -q) and starts.
    let mut proxy = spawn(&["--quiet", "-R"], &config, &stderr_path);
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            proxy.alive() && Instant::now() < deadline,
            "pgtier -q did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // logrotate: the file is moved away, SIGHUP makes pgtier write to a new one at the path.
    let rotated = dir.path().join("pgtier.log.1");
    std::fs::rename(&logfile, &rotated).expect("rotate");
    send_signal(proxy.pid, libc::SIGHUP).expect("SIGHUP");
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(&logfile).is_ok_and(|log| log.contains("reloaded")) {
        assert!(
            Instant::now() < deadline,
            "no reload line in a reopened log file"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(proxy.terminate(), "pgtier -q did not stop on SIGTERM");
    let stderr = std::fs::read_to_string(&stderr_path).expect("stderr");
    assert_eq!(stderr, "", "-q: nothing on standard error");
    let old = std::fs::read_to_string(&rotated).expect("rotated log");
    assert!(
        old.contains("-R: no running pgtier in the pidfile to take over from"),
        "{old}"
    );
    assert!(
        old.contains("pgtier listening"),
        "the log file has the lines: {old}"
    );
    assert!(
        !old.contains("reloaded"),
        "after SIGHUP nothing goes to the moved file: {old}"
    );
}

/// The CPUs a process may run on, from its `Cpus_allowed_list` (`0-1,3` style).
fn allowed_cpus(status_path: &Path) -> Vec<usize> {
    let status = std::fs::read_to_string(status_path).unwrap_or_default();
    let list = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or("")
        .trim()
        .to_string();
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|part| !part.is_empty()) {
        let (low, high) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(low), Ok(high)) = (low.parse::<usize>(), high.parse::<usize>()) {
            cpus.extend(low..=high);
        }
    }
    cpus
}

/// Started under `taskset -c CPU`, every shard stays on that CPU: a shard pins itself within
/// the mask it was started with, not to an absolute CPU number outside it.
#[test]
fn shards_are_pinned_within_the_affinity_mask_pgtier_starts_with() {
    let mine = allowed_cpus(Path::new("/proc/self/status"));
    let Some(cpu) = mine.last().copied() else {
        panic!("no CPU in this process's affinity list");
    };
    let dir = TempDir::new("process-affinity").expect("tempdir");
    let port = free_port().expect("port");
    let lines = format!("listen_addr = \"127.0.0.1\"\nlisten_port = {port}\n");
    let config = write_config(dir.path(), &lines, "127.0.0.1", 1);
    let stderr = std::fs::File::create(dir.path().join("stderr.txt")).expect("stderr file");
    // taskset execs pgtier: the child's pid is pgtier's.
    let child = Command::new("taskset")
        .arg("-c")
        .arg(cpu.to_string())
        .arg(proxy_binary().expect("pgtier binary"))
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn taskset");
    let mut proxy = Running {
        pid: child.id(),
        child: Some(child),
    };
    let deadline = Instant::now() + WAIT;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            proxy.alive() && Instant::now() < deadline,
            "pgtier under taskset did not listen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The port accepts from its bind on, before the shard threads start: look until both
    // are there (a loaded machine shows the gap).
    let shards = loop {
        let mut shards = Vec::new();
        for task in std::fs::read_dir(format!("/proc/{}/task", proxy.pid)).expect("tasks") {
            let task = task.expect("task").path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if name.trim().starts_with("pgtier-shard-") {
                shards.push((name.trim().to_string(), allowed_cpus(&task.join("status"))));
            }
        }
        if shards.len() >= 2 || Instant::now() >= deadline {
            break shards;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(shards.len(), 2, "two workers: {shards:?}");
    for (name, cpus) in &shards {
        assert_eq!(cpus, &vec![cpu], "{name} left the mask of CPU {cpu}");
    }
    assert!(proxy.terminate(), "pgtier did not stop on SIGTERM");
}

/// PgBouncer's init-script start: `pgtier -d FILE` returns once the daemon serves; the
/// pidfile names it; it answers on two addresses and on its Unix socket (psql and pgbench),
/// lists Unix clients as `unix`, reaches its server over the server's Unix socket; SIGTERM
/// to the pid in the pidfile stops it and removes the pidfile and the socket file.
#[test]
fn daemon_serves_tcp_and_unix_and_cleans_up_on_sigterm() {
    let pg: LocalPg = server();
    let dir = TempDir::new("process-daemon").expect("tempdir");
    let port = free_port().expect("port");
    let (logfile, pidfile) = (dir.path().join("pgtier.log"), dir.path().join("pgtier.pid"));
    let lines = format!(
        "listen_addr = \"127.0.0.1, 127.0.0.2\"\nlisten_port = {port}\n\
         unix_socket_dir = \"{}\"\nlogfile = \"{}\"\npidfile = \"{}\"\n",
        dir.path().display(),
        logfile.display(),
        pidfile.display()
    );
    let server_dir = pg.data_dir().display().to_string();
    let config = write_config(dir.path(), &lines, &server_dir, pg.port());

    let started = run(&mut pgtier_command(&["-d"], &config), WAIT).expect("pgtier -d");
    assert!(started.success(), "pgtier -d: {started:?}");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .expect("the pidfile exists once -d returns")
        .trim()
        .parse()
        .expect("a pid");
    let mut daemon = Running { pid, child: None };
    assert!(daemon.alive(), "the pid in the pidfile runs");
    let socket = socket_path(dir.path(), port);
    assert!(socket.exists(), "socket file {}", socket.display());

    for host in ["127.0.0.1", "127.0.0.2"] {
        assert_eq!(
            psql_ok(host, port, "postgres", "SELECT 1"),
            "1",
            "over {host}"
        );
    }
    let socket_dir = dir.path().display().to_string();
    // The server sees pgtier on its Unix socket: no client address.
    assert_eq!(
        psql_ok(
            &socket_dir,
            port,
            "postgres",
            "SELECT inet_client_addr() IS NULL"
        ),
        "t"
    );
    let mut pgbench = pg_tool("pgbench");
    pgbench
        .args(["-i", "-q", "-h", &socket_dir, "-p"])
        .arg(port.to_string())
        .args(["-U", "postgres", "postgres"]);
    let init = run(&mut pgbench, CLIENT_TIMEOUT).expect("pgbench -i");
    assert!(init.success(), "pgbench -i over the Unix socket: {init:?}");
    let mut pgbench = pg_tool("pgbench");
    pgbench
        .args([
            "-n",
            "-c",
            "4",
            "-j",
            "2",
            "-t",
            "50",
            "-h",
            &socket_dir,
            "-p",
        ])
        .arg(port.to_string())
        .args(["-U", "postgres", "postgres"]);
    let load = run(&mut pgbench, CLIENT_TIMEOUT).expect("pgbench");
    assert!(load.success(), "pgbench over the Unix socket: {load:?}");
    assert!(
        load.stdout.contains("number of failed transactions: 0")
            || !load.stdout.contains("failed transactions"),
        "{load:?}"
    );
    assert!(
        load.stdout.contains("processed: 200/200"),
        "every transaction ran: {}",
        load.stdout
    );
    let clients = psql_ok(&socket_dir, port, "pgtier", "SHOW CLIENTS");
    assert!(
        clients
            .lines()
            .any(|line| line.contains("|unix|") || line.starts_with("unix|")),
        "a Unix client is listed as unix:\n{clients}"
    );

    assert!(
        daemon.terminate(),
        "the daemon stops on SIGTERM to the pidfile's pid"
    );
    assert!(!pidfile.exists(), "pidfile removed at exit");
    assert!(!socket.exists(), "socket file removed at exit");
    let log = std::fs::read_to_string(&logfile).expect("logfile");
    assert!(log.contains("pgtier listening"), "{log}");
}

/// A socket file whose process is gone is replaced; one a live pgtier answers on stops a
/// second one; a second pgtier on the same TCP port (its own socket dir) starts, as a rolling
/// restart needs.
#[test]
fn stale_socket_replaced_live_socket_refused_same_port_shared() {
    let dir = TempDir::new("process-stale").expect("tempdir");
    let port = free_port().expect("port");
    let socket = socket_path(dir.path(), port);
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("stale socket"));
    assert!(
        socket.exists(),
        "the stale file stays after its listener closed"
    );

    let lines = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nunix_socket_dir = \"{}\"\n",
        dir.path().display()
    );
    let config = write_config(dir.path(), &lines, "127.0.0.1", 1);
    let mut first = spawn(&[], &config, &dir.path().join("first.txt"));
    wait_for_unix(&socket, &mut first);

    let second = run(&mut pgtier_command(&[], &config), WAIT).expect("second pgtier");
    assert!(!second.status.success() && !second.timed_out, "{second:?}");
    assert!(second.stderr.contains("in use"), "says why: {second:?}");

    let other_dir = TempDir::new("process-stale-other").expect("tempdir");
    let lines = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nunix_socket_dir = \"{}\"\n",
        other_dir.path().display()
    );
    let other_config = write_config(other_dir.path(), &lines, "127.0.0.1", 1);
    let mut third = spawn(&[], &other_config, &other_dir.path().join("third.txt"));
    wait_for_unix(&socket_path(other_dir.path(), port), &mut third);
    assert!(third.alive() && first.alive(), "both share the TCP port");
    assert!(third.terminate() && first.terminate());
    assert!(
        !socket.exists(),
        "the first one's socket file removed at exit"
    );
}

/// Started as root with `-u nobody`, pgtier binds, then runs as nobody (all four uids), and
/// can still remove its socket file and pidfile at exit.
#[test]
fn user_switch_drops_root() {
    // SAFETY: geteuid takes no arguments.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: -u needs root");
        return;
    }
    let dir = TempDir::new("process-user").expect("tempdir");
    // Like /tmp: anyone may create files, only their owner remove them.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let port = free_port().expect("port");
    let pidfile = dir.path().join("pgtier.pid");
    let lines = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nunix_socket_dir = \"{}\"\n\
         pidfile = \"{}\"\n",
        dir.path().display(),
        pidfile.display()
    );
    let config = write_config(dir.path(), &lines, "127.0.0.1", 1);
    let mut proxy = spawn(&["-u", "nobody"], &config, &dir.path().join("stderr.txt"));
    let socket = socket_path(dir.path(), port);
    wait_for_unix(&socket, &mut proxy);
    let deadline = Instant::now() + WAIT;
    while !pidfile.exists() {
        assert!(proxy.alive() && Instant::now() < deadline, "no pidfile");
        std::thread::sleep(Duration::from_millis(20));
    }
    let nobody = {
        let id = run(Command::new("id").args(["-u", "nobody"]), WAIT).expect("id");
        id.stdout.trim().to_string()
    };
    let uids = uid_line(proxy.pid);
    let fields: Vec<&str> = uids.split_whitespace().skip(1).collect();
    assert_eq!(fields, vec![nobody.as_str(); 4], "{uids}");
    assert!(proxy.terminate());
    let stderr = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default();
    assert!(!socket.exists(), "socket removed by nobody: {stderr}");
    assert!(!pidfile.exists(), "pidfile removed by nobody: {stderr}");

    // Not root and not that user: the start fails, as PgBouncer's does. nobody may not be
    // able to reach the build directory or the test's own (a CI checkout under a 0700
    // directory), so the binary and the config go to a directory anyone may read.
    let open_dir = std::env::temp_dir().join(format!("pgtier-nobody-{}", std::process::id()));
    std::fs::create_dir_all(&open_dir).expect("open directory");
    let binary = open_dir.join("pgtier");
    let open_config = open_dir.join("pgtier.toml");
    std::fs::copy(proxy_binary().expect("binary"), &binary).expect("copy the binary");
    std::fs::copy(&config, &open_config).expect("copy the config");
    for (path, mode) in [(&open_dir, 0o755), (&binary, 0o755), (&open_config, 0o644)] {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
    }
    let mut as_nobody = Command::new("runuser");
    as_nobody
        .args(["-u", "nobody", "--"])
        .arg(&binary)
        .args(["-u", "postgres"])
        .arg(&open_config);
    let refused = run(&mut as_nobody, WAIT).expect("runuser");
    let _ = std::fs::remove_dir_all(&open_dir);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    assert!(
        refused.stderr.contains("not started as root"),
        "{refused:?}"
    );
}

/// `-d` reports a failed start through its exit status and standard error: no pidfile set, a
/// pidfile naming a live process, a port taken by a socket without SO_REUSEPORT.
#[test]
fn daemon_start_failures_are_reported() {
    let dir = TempDir::new("process-daemon-fail").expect("tempdir");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a plain listener");
    let port = taken.local_addr().expect("addr").port();
    let (logfile, pidfile) = (dir.path().join("pgtier.log"), dir.path().join("pgtier.pid"));
    let base = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nlogfile = \"{}\"\n",
        logfile.display()
    );
    let config = write_config(dir.path(), &base, "127.0.0.1", 1);
    let no_pidfile = run(&mut pgtier_command(&["-d"], &config), WAIT).expect("pgtier -d");
    assert_eq!(no_pidfile.status.code(), Some(1), "{no_pidfile:?}");
    assert!(
        no_pidfile.stderr.contains("needs pidfile"),
        "{no_pidfile:?}"
    );

    let lines = format!("{base}pidfile = \"{}\"\n", pidfile.display());
    let config = write_config(dir.path(), &lines, "127.0.0.1", 1);
    let busy = run(&mut pgtier_command(&["-d"], &config), WAIT).expect("pgtier -d");
    assert_eq!(busy.status.code(), Some(1), "{busy:?}");
    assert!(
        busy.stderr.contains("cannot listen on 127.0.0.1"),
        "the daemon's error: {busy:?}"
    );
    assert!(!pidfile.exists(), "no pidfile after a failed start");
    drop(taken);

    std::fs::write(&pidfile, format!("{}\n", std::process::id())).expect("pidfile");
    let running = run(&mut pgtier_command(&["-d"], &config), WAIT).expect("pgtier -d");
    assert_eq!(running.status.code(), Some(1), "{running:?}");
    assert!(running.stderr.contains("another instance"), "{running:?}");
}

/// The pid the pidfile names, once it names one.
fn pid_in(pidfile: &Path) -> Option<u32> {
    std::fs::read_to_string(pidfile).ok()?.trim().parse().ok()
}

#[test]
fn reboot_takes_the_addresses_over_and_the_old_process_finishes_its_transactions() {
    let pg: LocalPg = server();
    let dir = TempDir::new("process-reboot").expect("tempdir");
    let port = free_port().expect("port");
    let pidfile = dir.path().join("pgtier.pid");
    let lines = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nunix_socket_dir = \"{}\"\n\
         pidfile = \"{}\"\n",
        dir.path().display(),
        pidfile.display()
    );
    let config = write_config(dir.path(), &lines, "127.0.0.1", pg.port());
    let socket = socket_path(dir.path(), port);
    let mut old = spawn(&[], &config, &dir.path().join("old.stderr"));
    wait_for_unix(&socket, &mut old);
    let until_pid = |wanted: u32| {
        let deadline = Instant::now() + WAIT;
        while pid_in(&pidfile) != Some(wanted) {
            assert!(
                Instant::now() < deadline,
                "the pidfile never named {wanted}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    until_pid(old.pid);

    pg.psql("postgres", "CREATE TABLE reboot_log (v int)")
        .expect("table");
    // Two clients of the old process: one inside a transaction when the restart comes, one
    // idle (which must not hold the restart up).
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let mut session = postgres::Client::connect(&conninfo, postgres::NoTls).expect("session");
    session
        .batch_execute("BEGIN; INSERT INTO reboot_log VALUES (1)")
        .expect("begin");
    let mut idle = postgres::Client::connect(&conninfo, postgres::NoTls).expect("idle client");
    idle.batch_execute("SELECT 1").expect("idle client's query");

    let mut new = spawn(&["-R"], &config, &dir.path().join("new.stderr"));
    until_pid(new.pid);
    // The new process serves new clients over TCP and the socket...
    assert_eq!(psql_ok("127.0.0.1", port, "postgres", "SELECT 1"), "1");
    let socket_dir = dir.path().display().to_string();
    assert_eq!(psql_ok(&socket_dir, port, "postgres", "SELECT 2"), "2");
    // ...while the old one still serves the transaction in progress, to its end.
    assert!(old.alive(), "the old process left with a transaction open");
    session
        .batch_execute("INSERT INTO reboot_log VALUES (2)")
        .expect("the old transaction goes on");
    // COMMIT's answer comes, then the close (FATAL 57P01), which the driver may report as
    // the COMMIT's error: the table says whether it committed.
    if let Err(error) = session.batch_execute("COMMIT") {
        assert_eq!(
            error.as_db_error().map(|db| db.code().code()),
            Some("57P01"),
            "{error:?}"
        );
    }
    assert_eq!(
        pg.psql("postgres", "SELECT count(*) FROM reboot_log")
            .expect("count")
            .trim(),
        "2",
        "the transaction in progress committed"
    );
    // Then it is done: its clients are closed (the idle one too, still connected here), and
    // it exits without waiting for them to leave.
    let deadline = Instant::now() + WAIT;
    while old.alive() {
        assert!(
            Instant::now() < deadline,
            "the old process did not exit once its last transaction ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        idle.batch_execute("SELECT 1").is_err(),
        "the idle client was closed"
    );
    // Its exit left the new process's pidfile and socket in place.
    assert_eq!(pid_in(&pidfile), Some(new.pid));
    assert_eq!(psql_ok(&socket_dir, port, "postgres", "SELECT 3"), "3");
    assert!(new.terminate(), "the new pgtier did not stop on SIGTERM");
}

#[test]
fn reboot_finds_the_running_pgtier_on_its_socket_or_refuses_at_once() {
    // PgBouncer's test suite runs with `pidfile =` (empty): the running process is found on
    // the Unix socket, by its peer credentials.
    let pg: LocalPg = server();
    let dir = TempDir::new("process-reboot-socket").expect("tempdir");
    let port = free_port().expect("port");
    let lines = format!(
        "listen_addr = \"127.0.0.1\"\nlisten_port = {port}\nunix_socket_dir = \"{}\"\n",
        dir.path().display()
    );
    let config = write_config(dir.path(), &lines, "127.0.0.1", pg.port());
    let socket = socket_path(dir.path(), port);
    let mut old = spawn(&[], &config, &dir.path().join("old.stderr"));
    wait_for_unix(&socket, &mut old);
    let mut new = spawn(&["-R"], &config, &dir.path().join("new.stderr"));
    let deadline = Instant::now() + WAIT;
    while old.alive() {
        assert!(
            Instant::now() < deadline,
            "the old pgtier was not taken over from"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for_unix(&socket, &mut new);
    let socket_dir = dir.path().display().to_string();
    assert_eq!(psql_ok(&socket_dir, port, "postgres", "SELECT 1"), "1");
    assert!(new.terminate(), "the new pgtier did not stop on SIGTERM");

    // With neither a pidfile nor anything on the socket: refused at once, not a wait.
    let finished = run(&mut pgtier_command(&["-R"], &config), WAIT).expect("pgtier -R");
    assert!(!finished.success(), "{finished:?}");
    assert!(
        finished
            .stderr
            .contains("no running pgtier to take over from"),
        "{finished:?}"
    );
}
