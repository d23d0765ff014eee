//! PostgreSQL nodes inside the lab's namespaces: a primary and streaming replicas started
//! as `pgtier_core::localpg` starts them (initdb or pg_basebackup, `pg_ctl -w`, run as the
//! `postgres` user), but listening on their own namespace's address, and with synchronous
//! replication to any one standby so that a failover to the most advanced standby loses no
//! acknowledged commit. The harness reaches each node's SQL over its Unix socket (in the data
//! directory), which no network fault touches.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::netns::{Host, Lab};

/// Every node listens on this port, each in its own namespace.
pub const PG_PORT: u16 = 5432;

/// One PostgreSQL server in a lab namespace; stopped and deleted on drop.
#[derive(Debug)]
pub struct Node {
    host: Host,
    ns: String,
    addr: String,
    data_dir: PathBuf,
    bindir: PathBuf,
}

impl Node {
    /// initdb, configure and start a primary in `host`'s namespace.
    pub fn start_primary(lab: &Lab, host: Host, root: &Path) -> io::Result<Node> {
        let node = Node::prepare(lab, host, root)?;
        let data = node.data()?;
        node.tool(
            "initdb",
            &[
                "-D",
                &data,
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ],
        )?;
        let mut conf = node.base_conf();
        conf.extend([
            ("wal_level", "replica".to_string()),
            ("max_wal_senders", "20".to_string()),
            ("hot_standby", "on".to_string()),
            ("synchronous_commit", "on".to_string()),
        ]);
        node.append_conf(&conf)?;
        let cidr = lab.cidr();
        std::fs::write(
            node.data_dir.join("pg_hba.conf"),
            format!(
                "local all all trust\nhost all all {cidr} trust\nhost replication all {cidr} trust\n"
            ),
        )?;
        node.start()?;
        Ok(node)
    }

    /// Clones `primary` with pg_basebackup over the lab network and starts a streaming
    /// replica in `host`'s namespace.
    pub fn start_replica(lab: &Lab, host: Host, primary: &Node, root: &Path) -> io::Result<Node> {
        let node = Node::prepare(lab, host, root)?;
        let data = node.data()?;
        let port = PG_PORT.to_string();
        node.tool(
            "pg_basebackup",
            &[
                "-h",
                &primary.addr,
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                &data,
                "-R",
                "-X",
                "stream",
                "--checkpoint=fast",
                "--no-sync",
            ],
        )?;
        // The primary's socket lock came with the copy; every node uses the same port, so
        // it would name the primary's live postmaster and stop this one from starting.
        let _ = std::fs::remove_file(node.data_dir.join(format!(".s.PGSQL.{PG_PORT}.lock")));
        node.append_conf(&node.base_conf())?;
        node.start()?;
        Ok(node)
    }

    fn prepare(lab: &Lab, host: Host, root: &Path) -> io::Result<Node> {
        let data_dir = root.join(lab.ns(host));
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir)?;
        }
        std::fs::create_dir_all(&data_dir)?;
        run_checked(
            Command::new("chown")
                .arg("postgres:postgres")
                .arg(&data_dir),
            "chown",
        )?;
        run_checked(Command::new("chmod").arg("700").arg(&data_dir), "chmod")?;
        Ok(Node {
            host,
            ns: lab.ns(host),
            addr: lab.addr(host),
            data_dir,
            bindir: crate::pg_bindir(),
        })
    }

    /// Makes every commit wait until one standby has flushed it (once standbys exist): a
    /// failover to the most advanced standby then keeps every acknowledged write, and one
    /// standby lost or hung does not stop writes.
    pub fn require_one_standby(&self) -> io::Result<()> {
        self.psql("ALTER SYSTEM SET synchronous_standby_names = 'ANY 1 (*)'")?;
        self.psql("SELECT pg_reload_conf()").map(|_| ())
    }

    pub fn host(&self) -> Host {
        self.host
    }

    /// `address:port` as pgtier's configuration names it.
    pub fn endpoint(&self) -> String {
        format!("{}:{PG_PORT}", self.addr)
    }

    fn base_conf(&self) -> Vec<(&'static str, String)> {
        vec![
            ("listen_addresses", format!("'{}'", self.addr)),
            ("port", PG_PORT.to_string()),
            (
                "unix_socket_directories",
                format!("'{}'", self.data_dir.display()),
            ),
            ("max_connections", "300".to_string()),
            ("fsync", "off".to_string()),
            ("full_page_writes", "off".to_string()),
            ("shared_buffers", "64MB".to_string()),
            ("logging_collector", "off".to_string()),
            // A partitioned peer is noticed in seconds, not the default minute.
            ("wal_sender_timeout", "'5s'".to_string()),
            ("wal_receiver_timeout", "'5s'".to_string()),
        ]
    }

    fn append_conf(&self, settings: &[(&str, String)]) -> io::Result<()> {
        use std::io::Write;
        let path = self.data_dir.join("postgresql.conf");
        let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
        writeln!(file, "\n# pgtier faults harness")?;
        for (key, value) in settings {
            writeln!(file, "{key} = {value}")?;
        }
        Ok(())
    }

    /// Starts (or restarts) the server and waits until it accepts connections.
    pub fn start(&self) -> io::Result<()> {
        let data = self.data()?;
        let log = self.data_dir.join("server.log");
        let log = log.display().to_string();
        self.tool(
            "pg_ctl",
            &["-D", &data, "-l", &log, "-w", "-t", "60", "start"],
        )
        .map(|_| ())
        .map_err(|error| {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = lines[lines.len().saturating_sub(5)..].join("\n");
            io::Error::other(format!("{} {error}; server log:\n{tail}", self.ns))
        })
    }

    /// `pg_ctl stop -m fast`: a clean shutdown (standbys get all WAL first).
    pub fn stop_fast(&self) -> io::Result<()> {
        let data = self.data()?;
        self.tool("pg_ctl", &["-D", &data, "-m", "fast", "-w", "stop"])
            .map(|_| ())
    }

    /// `pg_ctl promote -w`: this standby becomes a primary.
    pub fn promote(&self) -> io::Result<()> {
        let data = self.data()?;
        self.tool("pg_ctl", &["-D", &data, "-w", "promote"])
            .map(|_| ())
    }

    /// Sends `signal` to the postmaster and every process it started (backends, walsender,
    /// walreceiver...): SIGSTOP hangs the whole server, SIGKILL is a crash of its machine.
    pub fn signal_all(&self, signal: libc::c_int) -> io::Result<()> {
        let Some(postmaster) = self.postmaster_pid() else {
            return Err(io::Error::other(format!("{}: no postmaster.pid", self.ns)));
        };
        // The postmaster first, so that it starts no new child after the scan.
        crate::process::send_signal(postmaster, signal)?;
        for child in children_of(postmaster) {
            let _ = crate::process::send_signal(child, signal);
        }
        Ok(())
    }

    fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.data_dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Runs `sql` as the superuser over the Unix socket; trimmed stdout.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        let out = Command::new(self.bindir.join("psql"))
            .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.data_dir)
            .args([
                "-p",
                &PG_PORT.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()?;
        ensure(&out, "psql")?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The WAL position this standby has received (or a primary has written), for picking
    /// the most advanced standby to promote.
    pub fn wal_position(&self) -> io::Result<String> {
        self.psql(
            "SELECT CASE WHEN pg_is_in_recovery() \
               THEN pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0') \
               ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') END",
        )
    }

    /// Waits until this standby has replayed what `primary` has written so far.
    pub fn wait_caught_up(&self, primary: &Node, timeout: Duration) -> io::Result<()> {
        let target = primary.psql("SELECT pg_current_wal_lsn()")?;
        let sql = format!("SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn");
        let deadline = Instant::now() + timeout;
        loop {
            if self.psql(&sql).ok().as_deref() == Some("t") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} did not replay up to {target}", self.ns),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn data(&self) -> io::Result<String> {
        self.data_dir
            .to_str()
            .map(str::to_string)
            .ok_or_else(|| io::Error::other("data directory path is not UTF-8"))
    }

    /// Runs a server tool as `postgres` inside the node's namespace.
    fn tool(&self, tool: &str, args: &[&str]) -> io::Result<Output> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.ns, "runuser", "-u", "postgres", "--"])
            .arg(self.bindir.join(tool))
            .args(args)
            .current_dir(std::env::temp_dir())
            .stdin(Stdio::null())
            .output()?;
        ensure(&out, tool)?;
        Ok(out)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // A stopped server cannot stop; continue it first.
        let _ = self.signal_all(libc::SIGCONT);
        if let Ok(data) = self.data() {
            let _ = self.tool("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]);
        }
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

/// The pids whose parent is `parent` (from /proc).
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The command name is in parentheses and may hold spaces: fields follow the last ')'.
        let Some(after) = stat.rfind(')').map(|at| &stat[at + 1..]) else {
            continue;
        };
        let ppid = after.split_whitespace().nth(1).and_then(|f| f.parse().ok());
        if ppid == Some(parent) {
            children.push(pid);
        }
    }
    children
}

fn run_checked(command: &mut Command, what: &str) -> io::Result<()> {
    let out = command.stdin(Stdio::null()).output()?;
    ensure(&out, what)
}

fn ensure(out: &Output, what: &str) -> io::Result<()> {
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr).trim(),
        String::from_utf8_lossy(&out.stdout).trim()
    )))
}
