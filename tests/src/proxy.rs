//! One pgtier process under test: writes its config, starts the binary, waits for its port,
//! and guarantees it dies with the test (Drop, and a watchdog for tests that hang).
//!
//! Which binary: `PGTIER_BIN` if set (to test an installed or release `pgtier`), otherwise
//! `pgtier-under-test`, a bin target of this crate whose main is the same one line as
//! shard's `pgtier` main. Cargo builds a package's bin targets before its integration tests
//! and places them next to the test executables' `deps/` directory, so the binary is always
//! current, whatever the profile or CARGO_TARGET_DIR, without a nested `cargo build`.

use std::io;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::config::ProxyConfig;
use crate::process::send_signal;
use crate::tempdir::TempDir;

/// How long a proxy gets to open its listener.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(20);
/// Default lifetime of a proxy before the watchdog kills it (overridable per test and by
/// `PGTIER_E2E_TIMEOUT_SECS`).
const DEFAULT_WATCHDOG: Duration = Duration::from_secs(240);
/// How long a client may wait for connect + authentication through the proxy.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running pgtier child process.
pub struct Pgtier {
    child: Child,
    port: u16,
    config: ProxyConfig,
    /// The file pgtier was started with.
    config_file: PathBuf,
    dir: TempDir,
    watchdog: Arc<Watchdog>,
    exit_status: Option<ExitStatus>,
}

impl Pgtier {
    /// Starts pgtier with `config` (a free port is chosen when `listen_port` is 0) and waits
    /// until it accepts TCP connections.
    pub fn start(config: ProxyConfig) -> io::Result<Pgtier> {
        let lifetime = std::env::var("PGTIER_E2E_TIMEOUT_SECS")
            .ok()
            .and_then(|secs| secs.parse().ok())
            .map_or(DEFAULT_WATCHDOG, Duration::from_secs);
        Pgtier::start_with_watchdog(config, lifetime)
    }

    /// As `start`, with the watchdog killing the proxy after `lifetime`.
    pub fn start_with_watchdog(mut config: ProxyConfig, lifetime: Duration) -> io::Result<Pgtier> {
        if config.listen_port == 0 {
            config.listen_port = crate::free_port()?;
        }
        let dir = TempDir::new("pgtier")?;
        write_config_files(dir.path(), &config)?;
        let config_file = dir.path().join("pgtier.toml");
        let args = ["--config".into(), config_file.clone().into_os_string()];
        Pgtier::spawn(dir, config_file, &args, config, lifetime)
    }

    /// Starts pgtier from a raw configuration file, PgBouncer style (`pgtier FILE`): `write`
    /// gets a fresh directory, writes the file (and what it refers to) there and returns its
    /// path. `listen_port` is the port the file makes pgtier listen on, over TCP on 127.0.0.1.
    pub fn start_file(
        listen_port: u16,
        write: impl FnOnce(&Path) -> io::Result<PathBuf>,
    ) -> io::Result<Pgtier> {
        let dir = TempDir::new("pgtier")?;
        let config_file = write(dir.path())?;
        let mut config = ProxyConfig::new(0);
        config.listen_port = listen_port;
        let args = [config_file.clone().into_os_string()];
        Pgtier::spawn(dir, config_file, &args, config, DEFAULT_WATCHDOG)
    }

    fn spawn(
        dir: TempDir,
        config_file: PathBuf,
        args: &[std::ffi::OsString],
        config: ProxyConfig,
        lifetime: Duration,
    ) -> io::Result<Pgtier> {
        let log = std::fs::File::create(dir.path().join("pgtier.log"))?;
        let child = Command::new(proxy_binary()?)
            .args(args)
            .env(
                "PGTIER_LOG",
                std::env::var("PGTIER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(config.env.iter().map(|(name, value)| (name, value)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let watchdog = Watchdog::arm(child.id(), lifetime);
        let mut proxy = Pgtier {
            port: config.listen_port,
            child,
            config,
            config_file,
            dir,
            watchdog,
            exit_status: None,
        };
        proxy.wait_for_listener()?;
        Ok(proxy)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    pub fn config_path(&self) -> PathBuf {
        self.config_file.clone()
    }

    /// The directory holding the proxy's files (its config, userlist and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the proxy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgtier.log")).unwrap_or_default()
    }

    /// Rewrites pgtier.toml and userlist.txt (the listen port stays) — follow with `reload`.
    pub fn rewrite_config(&mut self, mut config: ProxyConfig) -> io::Result<()> {
        config.listen_port = self.port;
        write_config_files(self.dir.path(), &config)?;
        self.config = config;
        Ok(())
    }

    /// SIGHUP: reload the config.
    pub fn reload(&self) -> io::Result<()> {
        self.signal(libc::SIGHUP)
    }

    pub fn signal(&self, signal: libc::c_int) -> io::Result<()> {
        if self.exit_status.is_some() {
            return Err(io::Error::other("pgtier already exited"));
        }
        send_signal(self.child.id(), signal)
    }

    /// Waits up to `timeout` for the process to exit.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_exit_status() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The exit status if the process has exited.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        if self.exit_status.is_none() {
            self.exit_status = self.child.try_wait().ok().flatten();
        }
        self.exit_status
    }

    /// A rust-postgres configuration for `dbname`/`user` through the proxy.
    pub fn pg_config(&self, dbname: &str, user: &str) -> postgres::Config {
        let mut config = postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .dbname(dbname)
            .user(user)
            .connect_timeout(CONNECT_TIMEOUT);
        config
    }

    /// Connects through the proxy (no TLS).
    pub fn connect(&self, dbname: &str, user: &str) -> Result<postgres::Client, postgres::Error> {
        self.pg_config(dbname, user).connect(postgres::NoTls)
    }

    /// Connects through the proxy expecting failure; panics if the login succeeds.
    pub fn connect_error(&self, dbname: &str, user: &str) -> postgres::Error {
        match self.connect(dbname, user) {
            Ok(_) => panic!("login to {dbname} as {user} succeeded; an error was expected"),
            Err(error) => error,
        }
    }

    /// libpq-style connection string for psql/pgbench.
    pub fn conninfo(&self, dbname: &str, user: &str) -> String {
        format!(
            "host=127.0.0.1 port={} dbname={dbname} user={user}",
            self.port
        )
    }

    fn wait_for_listener(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + LISTEN_TIMEOUT;
        let address = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        loop {
            if let Some(status) = self.try_exit_status() {
                return Err(io::Error::other(format!(
                    "pgtier exited during start-up ({status}); log:\n{}",
                    self.log()
                )));
            }
            if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(io::Error::other(format!(
                    "pgtier did not listen on {address} within {LISTEN_TIMEOUT:?}; log:\n{}",
                    self.log()
                )));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

impl Drop for Pgtier {
    fn drop(&mut self) {
        self.watchdog.disarm();
        if self.try_exit_status().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            let log = self.log();
            let tail: String = tail_lines(&log, 60);
            eprintln!("---- pgtier log (last lines) ----\n{tail}---- end of pgtier log ----");
        }
    }
}

fn tail_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(count);
    lines[start..]
        .iter()
        .map(|line| format!("{line}\n"))
        .collect()
}

fn write_config_files(dir: &Path, config: &ProxyConfig) -> io::Result<()> {
    let userlist = dir.join("userlist.txt");
    std::fs::write(&userlist, config.userlist())?;
    // Write-then-rename so a reload never reads a half-written file.
    let staging = dir.join("pgtier.toml.new");
    std::fs::write(&staging, config.to_toml(&userlist))?;
    std::fs::rename(staging, dir.join("pgtier.toml"))
}

/// The pgtier executable to test (see the module doc).
pub fn proxy_binary() -> io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("PGTIER_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let exe_dir = exe
        .parent()
        .ok_or_else(|| io::Error::other("cannot locate the target directory"))?;
    // A bin target of this crate (the fuzzer) sits beside the binary; a test executable
    // sits one level further down, in `deps/`.
    let beside = exe_dir.join("pgtier-under-test");
    if beside.exists() {
        return Ok(beside);
    }
    let profile_dir = exe_dir
        .parent()
        .ok_or_else(|| io::Error::other("cannot locate the target directory"))?;
    let binary = profile_dir.join("pgtier-under-test");
    if !binary.exists() {
        return Err(io::Error::other(format!(
            "{} does not exist: run the tests with `cargo test -p pgtier-tests` (which builds \
             it) or set PGTIER_BIN",
            binary.display()
        )));
    }
    Ok(binary)
}

/// Kills a process that outlives its test's time budget. Disarmed by `Pgtier::drop` before
/// the child is reaped, so the pid it kills is always still ours.
struct Watchdog {
    disarmed: Mutex<bool>,
    wake: Condvar,
}

impl Watchdog {
    fn arm(pid: u32, lifetime: Duration) -> Arc<Watchdog> {
        let watchdog = Arc::new(Watchdog {
            disarmed: Mutex::new(false),
            wake: Condvar::new(),
        });
        let shared = Arc::clone(&watchdog);
        std::thread::spawn(move || shared.watch(pid, lifetime));
        watchdog
    }

    fn watch(&self, pid: u32, lifetime: Duration) {
        let deadline = Instant::now() + lifetime;
        let Ok(mut disarmed) = self.disarmed.lock() else {
            return;
        };
        while !*disarmed {
            let now = Instant::now();
            if now >= deadline {
                eprintln!("watchdog: pgtier (pid {pid}) ran past {lifetime:?}; killing it");
                let _ = send_signal(pid, libc::SIGKILL);
                return;
            }
            disarmed = match self.wake.wait_timeout(disarmed, deadline - now) {
                Ok((guard, _)) => guard,
                Err(_) => return,
            };
        }
    }

    fn disarm(&self) {
        if let Ok(mut disarmed) = self.disarmed.lock() {
            *disarmed = true;
        }
        self.wake.notify_all();
    }
}
