//! `pgtier demo`: the README's first command. Starts a local primary with pgbench data and
//! read-only streaming replicas, puts pgtier in front of them, prints how to connect, and
//! removes everything again on Ctrl-C.
//!
//! The proxy runs as a child process (this same binary with `--config`), so that its own
//! signal handling (SIGINT = graceful shutdown) is exactly what a user gets in production,
//! and so the demo can always clean up the servers even if the proxy fails.

use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgtier_core::localpg::{self, LocalPg, PgOptions};

use super::DemoOptions;

/// Name of the database users connect to through pgtier (and of the database on the servers).
const DEMO_DATABASE: &str = "pgbench";
/// How long replicas get to replay the pgbench load.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(120);
/// How long the proxy gets to open its listener.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the proxy gets to exit after SIGINT before it is killed.
const PROXY_EXIT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the wait loop looks at the stop flag and the proxy.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Set by the SIGINT/SIGTERM handler; everything else only reads it.
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Everything the demo started. Dropping it stops the proxy, then the servers (each
/// `LocalPg` stops its server and deletes its directory on drop), then the config dir.
struct DemoCluster {
    proxy: Option<Child>,
    replicas: Vec<LocalPg>,
    primary: Option<LocalPg>,
    config_dir: PathBuf,
}

impl Drop for DemoCluster {
    fn drop(&mut self) {
        if let Some(proxy) = self.proxy.take() {
            stop_proxy(proxy);
        }
        eprintln!("pgtier demo: stopping PostgreSQL servers and removing their directories");
        self.replicas.clear();
        self.primary = None;
        let _ = std::fs::remove_dir_all(&self.config_dir);
    }
}

/// Runs the demo until Ctrl-C (SIGINT) or SIGTERM, then cleans up.
pub fn run(options: &DemoOptions) -> Result<(), String> {
    install_stop_handler()?;
    let config_dir = std::env::temp_dir().join(format!("pgtier-demo-{}", std::process::id()));
    std::fs::create_dir_all(&config_dir)
        .map_err(|e| format!("creating {}: {e}", config_dir.display()))?;
    let mut cluster = DemoCluster {
        proxy: None,
        replicas: Vec::new(),
        primary: None,
        config_dir,
    };
    start_servers(&mut cluster, options)?;
    let config_path = write_config(&cluster, options)?;
    eprintln!(
        "pgtier demo: starting pgtier on 127.0.0.1:{}",
        options.listen_port
    );
    cluster.proxy = Some(spawn_proxy(&config_path)?);
    wait_for_listener(&mut cluster, options.listen_port)?;
    print_instructions(&cluster, options);
    wait_for_stop(&mut cluster)
}

fn start_servers(cluster: &mut DemoCluster, options: &DemoOptions) -> Result<(), String> {
    eprintln!("pgtier demo: starting the primary (initdb, pg_ctl as user postgres)");
    let primary = LocalPg::start_primary(&PgOptions::default())
        .map_err(|e| format!("starting the primary: {e}"))?;
    let primary = cluster.primary.insert(primary);
    check_stop()?;
    primary
        .psql("postgres", &format!("CREATE DATABASE {DEMO_DATABASE}"))
        .map_err(|e| format!("creating database {DEMO_DATABASE}: {e}"))?;
    for number in 1..=options.replica_count {
        eprintln!("pgtier demo: starting read-only replica {number} (pg_basebackup)");
        // pg_basebackup starts with a spread checkpoint unless told `-c fast`; one forced
        // here leaves it nothing to spread, so a clone takes a second instead of minutes.
        primary
            .psql("postgres", "CHECKPOINT")
            .map_err(|e| format!("checkpoint before replica {number}: {e}"))?;
        let replica = LocalPg::start_replica(primary)
            .map_err(|e| format!("starting replica {number}: {e}"))?;
        cluster.replicas.push(replica);
        check_stop()?;
    }
    load_pgbench(primary, options.pgbench_scale)?;
    for (index, replica) in cluster.replicas.iter().enumerate() {
        replica
            .wait_caught_up(primary, REPLAY_TIMEOUT)
            .map_err(|e| format!("replica {} replaying the pgbench data: {e}", index + 1))?;
    }
    check_stop()
}

fn load_pgbench(primary: &LocalPg, scale: u32) -> Result<(), String> {
    eprintln!("pgtier demo: loading pgbench data (scale {scale}) into the primary");
    let pgbench = localpg::pg_bindir().join("pgbench");
    let output = Command::new(&pgbench)
        .args([
            "-i",
            "-q",
            "-s",
            &scale.to_string(),
            "-h",
            "127.0.0.1",
            "-p",
        ])
        .arg(primary.port().to_string())
        .args(["-U", "postgres", DEMO_DATABASE])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {}: {e}", pgbench.display()))?;
    if !output.status.success() {
        return Err(format!(
            "pgbench -i failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(())
}

/// Writes userlist.txt and pgtier.toml. The `pgbench` database points at the first replica:
/// one backend per database entry is what every config format understands.
fn write_config(cluster: &DemoCluster, options: &DemoOptions) -> Result<PathBuf, String> {
    let userlist_path = cluster.config_dir.join("userlist.txt");
    write_file(&userlist_path, "\"postgres\" \"\"\n")?;
    if cluster.replicas.is_empty() {
        return Err("the demo needs at least one replica".to_string());
    }
    let replica_ports: Vec<u16> = cluster.replicas.iter().map(LocalPg::port).collect();
    let primary_port = cluster.primary.as_ref().map_or(0, LocalPg::port);
    let config = demo_config(
        options.listen_port,
        &userlist_path,
        &replica_ports,
        primary_port,
    );
    let config_path = cluster.config_dir.join("pgtier.toml");
    write_file(&config_path, &config)?;
    Ok(config_path)
}

/// The demo's pgtier.toml: `pgbench` spreads read sessions over the replicas (round robin),
/// `pgbench_primary` reaches the primary for writes.
fn demo_config(
    listen_port: u16,
    userlist_path: &Path,
    replica_ports: &[u16],
    primary_port: u16,
) -> String {
    let replicas: Vec<String> = replica_ports
        .iter()
        .map(|port| format!("\"127.0.0.1:{port}\""))
        .collect();
    format!(
        "# Written by `pgtier demo`; removed when the demo stops.\n\
         [pgtier]\n\
         listen_addr = \"127.0.0.1\"\n\
         listen_port = {listen_port}\n\
         auth_type = \"trust\"\n\
         auth_file = \"{userlist}\"\n\
         pool_mode = \"transaction\"\n\
         default_pool_size = 20\n\
         \n\
         # Read-only sessions: the streaming replicas.\n\
         [databases.{DEMO_DATABASE}]\n\
         replicas = [{replicas}]\n\
         routing = \"round_robin\"\n\
         dbname = \"{DEMO_DATABASE}\"\n\
         \n\
         # Writes: the primary.\n\
         [databases.{DEMO_DATABASE}_primary]\n\
         host = \"127.0.0.1\"\n\
         port = {primary_port}\n\
         dbname = \"{DEMO_DATABASE}\"\n",
        userlist = userlist_path.display(),
        replicas = replicas.join(", "),
    )
}

fn write_file(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("writing {}: {e}", path.display()))
}

fn spawn_proxy(config_path: &Path) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating the pgtier binary: {e}"))?;
    Command::new(exe)
        .arg("--config")
        .arg(config_path)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting pgtier: {e}"))
}

fn wait_for_listener(cluster: &mut DemoCluster, port: u16) -> Result<(), String> {
    let address = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    let deadline = Instant::now() + LISTEN_TIMEOUT;
    loop {
        check_stop()?;
        check_proxy_alive(cluster)?;
        if TcpStream::connect_timeout(&address.into(), POLL_INTERVAL).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "pgtier did not listen on {address} within {LISTEN_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn print_instructions(cluster: &DemoCluster, options: &DemoOptions) {
    let port = options.listen_port;
    let replica_ports: Vec<String> = cluster
        .replicas
        .iter()
        .map(|r| r.port().to_string())
        .collect();
    let primary_port = cluster.primary.as_ref().map_or(0, LocalPg::port);
    println!();
    println!("pgtier is listening on 127.0.0.1:{port}");
    println!(
        "  primary: 127.0.0.1:{primary_port}   read-only replicas: 127.0.0.1:{{{}}}",
        replica_ports.join(",")
    );
    println!();
    println!("Connect:");
    println!("  psql -h 127.0.0.1 -p {port} -U postgres {DEMO_DATABASE}");
    println!("Load it:");
    println!("  pgbench -S -n -c 8 -j 2 -T 10 -h 127.0.0.1 -p {port} -U postgres {DEMO_DATABASE}");
    println!();
    println!("Press Ctrl-C to stop pgtier and remove the servers.");
}

fn wait_for_stop(cluster: &mut DemoCluster) -> Result<(), String> {
    loop {
        if STOP_REQUESTED.load(Ordering::Relaxed) {
            eprintln!("pgtier demo: stopping");
            return Ok(());
        }
        check_proxy_alive(cluster)?;
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn check_stop() -> Result<(), String> {
    if STOP_REQUESTED.load(Ordering::Relaxed) {
        return Err("interrupted".to_string());
    }
    Ok(())
}

fn check_proxy_alive(cluster: &mut DemoCluster) -> Result<(), String> {
    let Some(proxy) = cluster.proxy.as_mut() else {
        return Ok(());
    };
    match proxy.try_wait() {
        Ok(None) => Ok(()),
        Ok(Some(status)) => {
            cluster.proxy = None;
            Err(format!("pgtier exited unexpectedly ({status})"))
        }
        Err(e) => Err(format!("watching pgtier: {e}")),
    }
}

/// Asks the proxy to shut down (SIGINT, as Ctrl-C would), then kills it if it lingers.
fn stop_proxy(mut proxy: Child) {
    if let Ok(Some(_)) = proxy.try_wait() {
        return;
    }
    if let Ok(pid) = libc::pid_t::try_from(proxy.id()) {
        // SAFETY: kill(2) takes plain integers; `pid` is our own child, not yet reaped.
        unsafe {
            libc::kill(pid, libc::SIGINT);
        }
    }
    let deadline = Instant::now() + PROXY_EXIT_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = proxy.try_wait() {
            return;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
    let _ = proxy.kill();
    let _ = proxy.wait();
}

extern "C" fn on_stop_signal(_signal: libc::c_int) {
    // Only an atomic store: the one thing that is async-signal-safe and all we need.
    STOP_REQUESTED.store(true, Ordering::Relaxed);
}

/// Routes SIGINT and SIGTERM to `on_stop_signal`. Handlers reset to the default at exec,
/// so the proxy child gets its own signal handling.
fn install_stop_handler() -> Result<(), String> {
    let handler: extern "C" fn(libc::c_int) = on_stop_signal;
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; we then set the
        // handler to a function that only performs an atomic store (async-signal-safe).
        let result = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if result != 0 {
            return Err(format!(
                "installing the handler for signal {signal}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generated config must pass the same validation as `pgtier check-config`.
    #[test]
    fn demo_config_is_valid() {
        let dir = std::env::temp_dir().join(format!("pgtier-demo-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let userlist = dir.join("userlist.txt");
        std::fs::write(&userlist, "\"postgres\" \"\"\n").expect("userlist");
        let path = dir.join("pgtier.toml");
        let text = demo_config(6432, &userlist, &[5433, 5434, 5435], 5432);
        std::fs::write(&path, &text).expect("config");
        let loaded = pgtier_core::config::Config::load(&path);
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(error) = loaded {
            panic!("{error}\n{text}");
        }
    }
}
