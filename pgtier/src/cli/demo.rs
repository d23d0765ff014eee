//! `pgtier demo`: the README's first command. Starts a local primary with pgbench data and
//! read-only streaming replicas, puts pgtier in front of them (PLB routing, a premium and a
//! freemium user, the admin console), prints how to connect, and removes everything again on
//! Ctrl-C. With `--load` it then drives both classes and fails a replica (`demo_load.rs`).
//! With `--proxies N` it runs N pgtier processes on consecutive ports as one fleet
//! (docs/fleet.md), meeting on the primary, and prints how to watch `SHOW FLEET`.
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
pub(super) const DEMO_DATABASE: &str = "pgbench";
/// The client users of the read entry, one per class. They exist only in pgtier: the entry
/// logs in to the servers as `postgres`, so the servers need no roles or grants for them.
pub(super) const PREMIUM_USER: &str = "premium";
pub(super) const FREEMIUM_USER: &str = "freemium";
/// Superuser: the primary entry and the admin console.
pub(super) const ADMIN_USER: &str = "postgres";
/// PLB's θ_P = θ_F: sessions per replica before a class looks for headroom elsewhere. Small,
/// so that the few sessions of the demo load already make a class borrow.
pub(super) const DEMO_THETA: u32 = 2;
/// Server connections per replica. Small on purpose: a replica then runs only a few queries
/// at a time, so a class with more sessions than its replicas take queues in pgtier and its
/// latency shows it, even on a laptop where all servers share the same few cores.
pub(super) const DEMO_POOL_SIZE: u32 = 2;
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
pub(super) struct DemoCluster {
    pub(super) proxy: Option<Child>,
    /// `--proxies N`: the fleet's other members, on the ports after the first.
    pub(super) fleet: Vec<Child>,
    /// pgtier processes started (so that none left is an error, not a quiet wait).
    pub(super) started: usize,
    pub(super) replicas: Vec<LocalPg>,
    pub(super) primary: Option<LocalPg>,
    pub(super) config_dir: PathBuf,
}

impl Drop for DemoCluster {
    fn drop(&mut self) {
        for proxy in self.fleet.drain(..).chain(self.proxy.take()) {
            stop_proxy(proxy);
        }
        eprintln!("pgtier demo: stopping PostgreSQL servers and removing their directories");
        self.replicas.clear();
        self.primary = None;
        let _ = std::fs::remove_dir_all(&self.config_dir);
    }
}

/// Starts the demo's servers and pgtier and prints how to reach them. The caller then waits
/// for Ctrl-C (`wait_for_stop`) or drives the load (`demo_load.rs`); dropping the cluster
/// cleans up.
pub(crate) fn start(options: &DemoOptions) -> Result<DemoCluster, String> {
    install_stop_handler()?;
    let config_dir = std::env::temp_dir().join(format!("pgtier-demo-{}", std::process::id()));
    std::fs::create_dir_all(&config_dir)
        .map_err(|e| format!("creating {}: {e}", config_dir.display()))?;
    let mut cluster = DemoCluster {
        proxy: None,
        fleet: Vec::new(),
        started: 0,
        replicas: Vec::new(),
        primary: None,
        config_dir,
    };
    start_servers(&mut cluster, options)?;
    for index in 0..options.proxies {
        let port = proxy_port(options, index);
        let config_path = write_config(&cluster, options, index)?;
        eprintln!("pgtier demo: starting pgtier on 127.0.0.1:{port}");
        let proxy = spawn_proxy(&config_path, options.load)?;
        cluster.started += 1;
        match cluster.proxy {
            None => cluster.proxy = Some(proxy),
            Some(_) => cluster.fleet.push(proxy),
        }
        wait_for_listener(&mut cluster, port)?;
    }
    print_instructions(&cluster, options);
    Ok(cluster)
}

/// The port of proxy `index` (0 is `--port`; the parser made sure the others fit).
fn proxy_port(options: &DemoOptions, index: usize) -> u16 {
    let offset = u16::try_from(index).unwrap_or(u16::MAX);
    options.listen_port.saturating_add(offset)
}

fn start_servers(cluster: &mut DemoCluster, options: &DemoOptions) -> Result<(), String> {
    eprintln!("pgtier demo: starting the primary (initdb, pg_ctl as user postgres)");
    // Replicas stream without slots, and the checkpoints forced below (one per clone) let the
    // primary recycle WAL an early replica has not streamed yet; keeping more than the
    // pgbench load writes (about 20 MB per scale unit) spares it a "requested WAL segment
    // has already been removed" loop.
    let wal_keep_mb = options.pgbench_scale.saturating_mul(32).max(256);
    let primary_options = PgOptions {
        extra_conf: vec![("wal_keep_size".to_string(), format!("'{wal_keep_mb}MB'"))],
        ..PgOptions::default()
    };
    let primary = LocalPg::start_primary(&primary_options)
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

/// The initial PLB pools of `replica_count` replicas, as replica indexes: premium first, then
/// freemium, then one Mixed replica from 3 replicas on (5 replicas: the paper's 2/2/1). `None`
/// for a single replica, which the demo routes round robin (PLB needs one replica per class).
pub(super) fn plb_split(replica_count: usize) -> Option<(Vec<usize>, Vec<usize>)> {
    if replica_count < 2 {
        return None;
    }
    let mixed = usize::from(replica_count >= 3);
    let premium = (replica_count - mixed).div_ceil(2);
    let freemium = replica_count - mixed - premium;
    Some((
        (0..premium).collect(),
        (premium..premium + freemium).collect(),
    ))
}

/// Writes userlist.txt and the pgtier.toml of proxy `index` (`pgtier.toml` for the first,
/// `pgtier-2.toml`... for the fleet's others).
fn write_config(
    cluster: &DemoCluster,
    options: &DemoOptions,
    index: usize,
) -> Result<PathBuf, String> {
    let userlist_path = cluster.config_dir.join("userlist.txt");
    write_file(&userlist_path, &demo_userlist())?;
    if cluster.replicas.is_empty() {
        return Err("the demo needs at least one replica".to_string());
    }
    let replica_ports: Vec<u16> = cluster.replicas.iter().map(LocalPg::port).collect();
    let primary_port = cluster.primary.as_ref().map_or(0, LocalPg::port);
    let mut config = demo_config(
        proxy_port(options, index),
        &userlist_path,
        &replica_ports,
        primary_port,
    );
    if options.proxies > 1 {
        config = with_fleet(&config, primary_port);
    }
    let config_path = cluster.config_dir.join(match index {
        0 => "pgtier.toml".to_string(),
        _ => format!("pgtier-{}.toml", index + 1),
    });
    write_file(&config_path, &config)?;
    Ok(config_path)
}

/// userlist.txt: auth_type trust still wants every user listed (PgBouncer's rule).
fn demo_userlist() -> String {
    [PREMIUM_USER, FREEMIUM_USER, ADMIN_USER]
        .iter()
        .map(|user| format!("\"{user}\" \"\"\n"))
        .collect()
}

/// The `routing` line and the `[databases.pgbench.plb]` table of the read entry.
fn routing_section(addresses: &[String]) -> String {
    let Some((premium, freemium)) = plb_split(addresses.len()) else {
        return "routing = \"round_robin\"\n".to_string();
    };
    let list = |indexes: &[usize]| {
        indexes
            .iter()
            .filter_map(|&index| addresses.get(index))
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "routing = \"plb\"\n\
         \n\
         # PLB: each class starts with its own replicas (the rest start Mixed) and borrows\n\
         # when its sessions exceed theta per replica; a failed replica is repaired around.\n\
         [databases.{DEMO_DATABASE}.plb]\n\
         premium = [{premium}]\n\
         freemium = [{freemium}]\n\
         theta_premium = {DEMO_THETA}\n\
         theta_freemium = {DEMO_THETA}\n",
        premium = list(&premium),
        freemium = list(&freemium),
    )
}

/// The demo's pgtier.toml: `pgbench` spreads read sessions over the replicas with PLB (users
/// `premium` and `freemium` are its two classes), `pgbench_primary` reaches the primary for
/// writes, and `postgres` may use the admin console.
fn demo_config(
    listen_port: u16,
    userlist_path: &Path,
    replica_ports: &[u16],
    primary_port: u16,
) -> String {
    let addresses: Vec<String> = replica_ports
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
         admin_users = [\"{ADMIN_USER}\"]\n\
         \n\
         # Read-only sessions: the streaming replicas. pgtier logs in to them as postgres, so\n\
         # premium and freemium are client identities only.\n\
         [databases.{DEMO_DATABASE}]\n\
         replicas = [{replicas}]\n\
         dbname = \"{DEMO_DATABASE}\"\n\
         user = \"{ADMIN_USER}\"\n\
         pool_size = {DEMO_POOL_SIZE}\n\
         {routing}\
         \n\
         # Writes: the primary.\n\
         [databases.{DEMO_DATABASE}_primary]\n\
         host = \"127.0.0.1\"\n\
         port = {primary_port}\n\
         dbname = \"{DEMO_DATABASE}\"\n\
         \n\
         [users.{PREMIUM_USER}]\n\
         class = \"premium\"\n\
         \n\
         [users.{FREEMIUM_USER}]\n\
         class = \"freemium\"\n",
        userlist = userlist_path.display(),
        replicas = addresses.join(", "),
        routing = routing_section(&addresses),
    )
}

/// `config` with the fleet settings of `--proxies`: every proxy names the same fleet and
/// meets on the primary (the read entry has no `primary` line, so the store is explicit).
fn with_fleet(config: &str, primary_port: u16) -> String {
    let fleet = format!(
        "# --proxies: these pgtier processes share one PLB view (docs/fleet.md).\n\
         fleet_name = \"demo\"\n\
         fleet_store = \"host=127.0.0.1 port={primary_port} dbname=postgres user={ADMIN_USER}\"\n\
         fleet_report_interval = 1\n"
    );
    config.replacen(
        "\n# Read-only sessions",
        &format!("{fleet}\n# Read-only sessions"),
        1,
    )
}

fn write_file(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Starts the proxy. Under `--load` it logs only warnings unless the user chose a level: its
/// role-change lines would interleave with the load report, whose event timeline and SHOW
/// REPLICAS tables say the same.
fn spawn_proxy(config_path: &Path, quiet: bool) -> Result<Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating the pgtier binary: {e}"))?;
    let mut command = Command::new(exe);
    command
        .arg("--config")
        .arg(config_path)
        .stdin(Stdio::null());
    let level_chosen = ["PGTIER_LOG", "RUST_LOG"]
        .iter()
        .any(|variable| std::env::var_os(variable).is_some());
    if quiet && !level_chosen {
        command.env("PGTIER_LOG", "warn");
    }
    command.spawn().map_err(|e| format!("starting pgtier: {e}"))
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
    let primary_port = cluster.primary.as_ref().map_or(0, LocalPg::port);
    let split = plb_split(cluster.replicas.len());
    println!();
    println!("pgtier is listening on 127.0.0.1:{port}");
    println!("  primary: 127.0.0.1:{primary_port}");
    for (index, replica) in cluster.replicas.iter().enumerate() {
        let role = match &split {
            None => "round robin",
            Some((premium, _)) if premium.contains(&index) => "premium",
            Some((_, freemium)) if freemium.contains(&index) => "freemium",
            Some(_) => "mixed",
        };
        println!(
            "  replica {}: 127.0.0.1:{}  (starts {role})",
            index + 1,
            replica.port()
        );
    }
    if split.is_some() {
        println!(
            "  routing: PLB, theta {DEMO_THETA} sessions per replica, {DEMO_POOL_SIZE} server \
             connections per replica"
        );
    }
    println!();
    println!("Read-only, as a premium user:");
    println!("  psql -h 127.0.0.1 -p {port} -U {PREMIUM_USER} {DEMO_DATABASE}");
    println!("Read-only, as a freemium user:");
    println!("  psql -h 127.0.0.1 -p {port} -U {FREEMIUM_USER} {DEMO_DATABASE}");
    println!("Writes, on the primary:");
    println!("  psql -h 127.0.0.1 -p {port} -U {ADMIN_USER} {DEMO_DATABASE}_primary");
    println!("Admin console (then SHOW REPLICAS; SHOW ROLE_EVENTS; SHOW EVENTS;):");
    println!("  psql -h 127.0.0.1 -p {port} -U {ADMIN_USER} pgbouncer");
    print_fleet(cluster, options);
    if options.load {
        println!();
        return;
    }
    println!("Load it:");
    println!(
        "  pgbench -S -n -c 8 -j 2 -T 10 -h 127.0.0.1 -p {port} -U {FREEMIUM_USER} {DEMO_DATABASE}"
    );
    println!("  or run `pgtier demo --load` to see borrowing, failure repair and rejoin");
    println!();
    println!("Press Ctrl-C to stop pgtier and remove the servers.");
}

/// With `--proxies N`: every member's address and pid, and how to watch the fleet.
fn print_fleet(cluster: &DemoCluster, options: &DemoOptions) {
    if options.proxies < 2 {
        return;
    }
    println!();
    println!(
        "{} pgtier processes share one PLB view (fleet \"demo\", meeting on the primary):",
        options.proxies
    );
    for (index, proxy) in cluster.proxy.iter().chain(&cluster.fleet).enumerate() {
        println!(
            "  pgtier {}: 127.0.0.1:{}  (pid {})",
            index + 1,
            proxy_port(options, index),
            proxy.id()
        );
    }
    println!("Watch the fleet (members, leader, role-table version, mode) from any of them:");
    println!(
        "  watch -n 1 psql -h 127.0.0.1 -p {} -U {ADMIN_USER} pgbouncer -c \"'SHOW FLEET'\"",
        options.listen_port
    );
    println!("Kill the leader (kill -9 the pid of the member with is_leader = t): another one");
    println!("takes over within about a second and the version goes up.");
}

pub(crate) fn wait_for_stop(cluster: &mut DemoCluster) -> Result<(), String> {
    loop {
        if STOP_REQUESTED.load(Ordering::Relaxed) {
            eprintln!("pgtier demo: stopping");
            return Ok(());
        }
        check_proxy_alive(cluster)?;
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// True once Ctrl-C (SIGINT) or SIGTERM arrived.
pub(super) fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::Relaxed)
}

fn check_stop() -> Result<(), String> {
    if STOP_REQUESTED.load(Ordering::Relaxed) {
        return Err("interrupted".to_string());
    }
    Ok(())
}

pub(super) fn check_proxy_alive(cluster: &mut DemoCluster) -> Result<(), String> {
    // With --proxies, a member that exits (a killed leader) is news, not the end: the fleet
    // goes on while one pgtier is left.
    let mut index = 0;
    while index < cluster.fleet.len() {
        match cluster.fleet[index].try_wait() {
            Ok(Some(status)) => {
                // Already reaped by try_wait; wait only returns the status it kept.
                let _ = cluster.fleet.remove(index).wait();
                eprintln!("pgtier demo: a fleet member exited ({status}); the others go on");
            }
            _ => index += 1,
        }
    }
    let Some(proxy) = cluster.proxy.as_mut() else {
        if cluster.started > 0 && cluster.fleet.is_empty() {
            return Err("every pgtier exited".to_string());
        }
        return Ok(());
    };
    match proxy.try_wait() {
        Ok(None) => Ok(()),
        Ok(Some(status)) if !cluster.fleet.is_empty() => {
            cluster.proxy = None;
            eprintln!("pgtier demo: pgtier 1 exited ({status}); the others go on");
            Ok(())
        }
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
        std::fs::write(&userlist, demo_userlist()).expect("userlist");
        let path = dir.join("pgtier.toml");
        let mut failures = Vec::new();
        for count in 1..=8u16 {
            let ports: Vec<u16> = (0..count).map(|i| 5433 + i).collect();
            let alone = demo_config(6432, &userlist, &ports, 5432);
            let fleet = with_fleet(&alone, 5432);
            for text in [alone, fleet] {
                std::fs::write(&path, &text).expect("config");
                match pgtier_core::config::Config::load(&path) {
                    Err(error) => failures.push(format!("{count} replicas: {error}\n{text}")),
                    Ok(config) if text.contains("fleet_name") => {
                        assert_eq!(config.pgtier.fleet_name, "demo");
                        assert!(config.pgtier.fleet_store.contains("port=5432"));
                    }
                    Ok(_) => {}
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        assert!(failures.is_empty(), "{failures:#?}");
    }

    #[test]
    fn plb_split_gives_each_class_a_replica_and_keeps_one_mixed() {
        assert_eq!(plb_split(1), None);
        assert_eq!(plb_split(2), Some((vec![0], vec![1])));
        assert_eq!(plb_split(3), Some((vec![0], vec![1])));
        assert_eq!(plb_split(4), Some((vec![0, 1], vec![2])));
        assert_eq!(plb_split(5), Some((vec![0, 1], vec![2, 3])));
        assert_eq!(plb_split(8), Some((vec![0, 1, 2, 3], vec![4, 5, 6])));
    }

    #[test]
    fn demo_config_routes_five_replicas_with_plb_two_two_one() {
        let text = demo_config(6432, Path::new("/tmp/u.txt"), &[1, 2, 3, 4, 5], 5432);
        assert!(text.contains("routing = \"plb\""), "{text}");
        assert!(
            text.contains("premium = [\"127.0.0.1:1\", \"127.0.0.1:2\"]"),
            "{text}"
        );
        assert!(
            text.contains("freemium = [\"127.0.0.1:3\", \"127.0.0.1:4\"]"),
            "{text}"
        );
        assert!(text.contains("admin_users = [\"postgres\"]"), "{text}");
        assert!(
            text.contains("[users.premium]\nclass = \"premium\""),
            "{text}"
        );
        assert!(
            text.contains("[users.freemium]\nclass = \"freemium\""),
            "{text}"
        );
    }
}
