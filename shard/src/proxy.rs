//! Starting and stopping the proxy: listeners, one pinned thread per shard with its own
//! ring, and the signal loop (SIGHUP reload, SIGTERM/SIGINT graceful, a second signal
//! immediate).

use std::net::SocketAddr;
use std::os::fd::{IntoRawFd, RawFd};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use pgtier_core::config::Config;
use pgtier_engine::shared::StatsSnapshot;
use pgtier_engine::userlist::UserList;
use pgtier_engine::{Engine, EngineParts};
use socket2::{Domain, Protocol, Socket, Type};
use tracing::{error, info, warn};

use crate::console::ShardConsole;
use crate::control::{ControlOptions, ControlPlane, ReplyMailbox, RouterMap, default_probe_login};
use crate::driver::{Shard, ShardParts};
use crate::io::uring::UringRing;
use crate::mailbox::{Command, Mailbox, ShutdownMode};
use crate::os_random::OsRandom;
use crate::resolve::SystemResolver;
use crate::routing::{ShardRouting, SharedRouting};

/// A shard that panicked takes the process down with this status (EX_SOFTWARE): a proxy
/// with a dead shard would keep its listener in the port's SO_REUSEPORT group, and about one
/// new connection in every `workers` would hang.
const SHARD_PANIC_EXIT: i32 = 70;

/// Test-only (debug builds): a shard panics after this many accepts, to check that a shard
/// panic ends the process instead of leaving it half alive.
const PANIC_HOOK_VARIABLE: &str = "PGTIER_TEST_PANIC_AFTER_ACCEPTS";

/// State shared by all shards, read off the query path.
pub struct Shared {
    pub mailboxes: Vec<Arc<Mailbox>>,
    /// What the engines share: client count, statistics, pool budgets.
    pub engine: Arc<pgtier_engine::Shared>,
    /// The replica routers of the current configuration.
    pub routing: Arc<SharedRouting>,
    /// Shards whose loop has returned.
    pub finished_shards: AtomicUsize,
}

/// Commands a shard's mailbox holds before posts fail.
const MAILBOX_CAPACITY: usize = 4096;

/// A running proxy.
pub struct ProxyHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Result<(), String>>>,
    /// The control shard of the current routers; replaced on reload, stopped at join.
    control: Mutex<Option<ControlPlane>>,
}

impl ProxyHandle {
    /// The address clients connect to (the real port when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Totals over all shards (folded in batches, so slightly behind).
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.engine.snapshot()
    }

    /// Clients currently connected across all shards.
    pub fn client_count(&self) -> u32 {
        self.shared.engine.clients.load(Ordering::Acquire)
    }

    /// The replica routers of the current configuration (what `SHOW REPLICAS` shows).
    pub fn routers(&self) -> Arc<RouterMap> {
        self.shared.routing.map.load_full()
    }

    /// Hands a new configuration to every shard (what SIGHUP does). Unchanged replica sets
    /// keep their router (sessions, roles, health); a new control plane takes over and the
    /// old one stops.
    pub fn reload(&self, config: Config) -> Result<(), String> {
        let users = Arc::new(load_users(&config)?);
        let tls = load_tls(&config)?;
        let old_map = self.shared.routing.map.load_full();
        let map = old_map
            .reload(&config, default_probe_login)
            .map_err(|error| format!("replica routing: {error}"))?;
        let plane =
            ControlPlane::start(map.routers(), ControlOptions::from_settings(&config.pgtier))
                .map_err(|error| format!("cannot start the control shard: {error}"))?;
        self.shared.routing.map.store(Arc::new(map));
        let old_plane = self
            .control
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(plane);
        drop(old_plane);
        let config = Arc::new(config);
        for mailbox in &self.shared.mailboxes {
            let command = Command::Reload {
                config: config.clone(),
                users: users.clone(),
                tls: tls.clone(),
            };
            mailbox
                .post(command)
                .map_err(|_| "a shard's mailbox is full".to_string())?;
        }
        Ok(())
    }

    /// Asks every shard to shut down in `mode`.
    pub fn shutdown(&self, mode: ShutdownMode) {
        for mailbox in &self.shared.mailboxes {
            if mailbox.post(Command::Shutdown(mode)).is_err() {
                warn!("shutdown not delivered: mailbox full");
            }
        }
    }

    /// Every shard has returned.
    pub fn is_finished(&self) -> bool {
        self.shared.finished_shards.load(Ordering::Acquire) == self.threads.len()
    }

    /// Waits for every shard, then stops the control shard; the first shard error is
    /// returned.
    pub fn join(self) -> Result<(), String> {
        let plane = self
            .control
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut result = Ok(());
        for thread in self.threads {
            let outcome = thread
                .join()
                .unwrap_or_else(|_| Err("a shard panicked".to_string()));
            if result.is_ok() {
                result = outcome;
            }
        }
        if let Some(plane) = plane {
            plane.shutdown();
        }
        result
    }
}

fn load_users(config: &Config) -> Result<UserList, String> {
    match &config.pgtier.auth_file {
        Some(path) => UserList::load(path),
        None => Ok(UserList::new()),
    }
}

/// One SO_REUSEPORT listener per shard on the configured address; the first binds the port
/// (which may be 0) and the rest join it.
fn listeners(config: &Config, count: usize) -> Result<(Vec<RawFd>, SocketAddr), String> {
    let mut addr = SocketAddr::new(config.pgtier.listen_addr, config.pgtier.listen_port);
    let mut fds = Vec::with_capacity(count);
    for _ in 0..count {
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.cloexec(),
            Some(Protocol::TCP),
        )
        .map_err(|e| format!("cannot create the listening socket: {e}"))?;
        socket
            .set_reuse_address(true)
            .map_err(|e| format!("SO_REUSEADDR: {e}"))?;
        socket
            .set_reuse_port(true)
            .map_err(|e| format!("SO_REUSEPORT: {e}"))?;
        socket
            .bind(&addr.into())
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        socket
            .listen(1024)
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        if addr.port() == 0 {
            if let Some(bound) = socket.local_addr().ok().and_then(|a| a.as_socket()) {
                addr = bound;
            }
        }
        fds.push(socket.into_raw_fd());
    }
    Ok((fds, addr))
}

/// Settings pgtier parses (so a PgBouncer file translates) but does not act on yet, with
/// whether the loaded value differs from the default.
fn unenforced_settings(config: &Config) -> Vec<&'static str> {
    let defaults = pgtier_core::config::Settings::default();
    let mut set = Vec::new();
    if config.pgtier.recv_buffer_count != defaults.recv_buffer_count {
        set.push("recv_buffer_count");
    }
    set
}

/// Reads the TLS files the settings name (at start and on every reload, so renewed
/// certificates are picked up); a broken file fails the start or the reload as a whole.
fn load_tls(config: &Config) -> Result<pgtier_engine::tls::TlsSides, String> {
    let contexts =
        crate::tls_files::TlsContexts::load(&config.pgtier).map_err(|e| e.to_string())?;
    for warning in contexts.warnings() {
        warn!("{warning}");
    }
    Ok(pgtier_engine::tls::TlsSides {
        acceptor: contexts.acceptor().cloned(),
        connector: contexts.connector().cloned(),
    })
}

/// Starts the shards and returns once each has its ring and listener.
pub fn start(config: Config) -> Result<ProxyHandle, String> {
    for setting in unenforced_settings(&config) {
        warn!(
            setting,
            "this setting is parsed but not enforced yet: its value has no effect"
        );
    }
    // SAFETY: ignoring SIGPIPE process-wide is what every network server does; sends also
    // pass MSG_NOSIGNAL.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let workers = config
        .pgtier
        .worker_count()
        .clamp(1, pgtier_engine::cancel::MAX_SHARDS);
    let users = Arc::new(load_users(&config)?);
    let tls = load_tls(&config)?;
    let (listen_fds, addr) = listeners(&config, workers)?;
    let mailboxes = (0..workers)
        .map(|_| Mailbox::new(MAILBOX_CAPACITY).map(Arc::new))
        .collect::<Result<Vec<Arc<Mailbox>>, _>>()?;
    let replies: Vec<Arc<ReplyMailbox>> = mailboxes
        .iter()
        .map(|mailbox| {
            let mailbox = mailbox.clone();
            ReplyMailbox::new(move || mailbox.wake())
        })
        .collect();
    let map = RouterMap::from_config(&config, default_probe_login)
        .map_err(|error| format!("replica routing: {error}"))?;
    let plane = ControlPlane::start(map.routers(), ControlOptions::from_settings(&config.pgtier))
        .map_err(|error| format!("cannot start the control shard: {error}"))?;
    let shared = Arc::new(Shared {
        mailboxes,
        engine: Arc::new(pgtier_engine::Shared::new(workers)),
        routing: Arc::new(SharedRouting::new(map)),
        finished_shards: AtomicUsize::new(0),
    });
    let config = Arc::new(config);
    let panic_after_accepts = std::env::var(PANIC_HOOK_VARIABLE)
        .ok()
        .and_then(|value| value.parse::<u64>().ok())
        .filter(|_| cfg!(debug_assertions));
    if let Some(accepts) = panic_after_accepts {
        warn!(
            accepts,
            "test hook armed: a shard panics after this many accepts ({PANIC_HOOK_VARIABLE})"
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::with_capacity(workers);
    for (index, (listener, replies)) in listen_fds.into_iter().zip(replies).enumerate() {
        let (config, users, shared, ready, tls) = (
            config.clone(),
            users.clone(),
            shared.clone(),
            ready_tx.clone(),
            tls.clone(),
        );
        let thread = std::thread::Builder::new()
            .name(format!("pgtier-shard-{index}"))
            .spawn(move || {
                pin_to_core(index % cores);
                let ring = match UringRing::new(config.pgtier.ring_entries) {
                    Ok(ring) => ring,
                    Err(message) => {
                        let _ = ready.send(Err(message.clone()));
                        shared.finished_shards.fetch_add(1, Ordering::AcqRel);
                        return Err(message);
                    }
                };
                info!(shard = index, flavor = %ring.flavor(), "shard started");
                let engine = Engine::new(EngineParts {
                    shard: index,
                    config: config.clone(),
                    users,
                    shared: shared.engine.clone(),
                    routing: Box::new(ShardRouting::new(shared.routing.clone(), replies)),
                    console: Box::new(ShardConsole::new(
                        shared.routing.clone(),
                        shared.engine.clone(),
                    )),
                    resolver: Box::new(SystemResolver),
                    random: Box::new(OsRandom),
                    now: Instant::now(),
                    wall_now: SystemTime::now(),
                    tls,
                });
                let parts = ShardParts {
                    index,
                    ring,
                    engine,
                    mailboxes: shared.mailboxes.clone(),
                    listener: Some(listener),
                    panic_after_accepts,
                };
                let mut shard = Shard::new(parts, &config);
                let _ = ready.send(Ok(()));
                let result = match std::panic::catch_unwind(AssertUnwindSafe(|| shard.run())) {
                    Ok(result) => result,
                    Err(panic) => {
                        let reason = panic
                            .downcast_ref::<&str>()
                            .map(|text| text.to_string())
                            .or_else(|| panic.downcast_ref::<String>().cloned())
                            .unwrap_or_else(|| "unknown".to_string());
                        error!(
                            shard = index,
                            %reason,
                            "a shard panicked; pgtier exits so that no client waits on a dead shard"
                        );
                        std::process::exit(SHARD_PANIC_EXIT);
                    }
                };
                if let Err(message) = &result {
                    error!(shard = index, %message, "shard stopped");
                }
                shared.finished_shards.fetch_add(1, Ordering::AcqRel);
                result
            })
            .map_err(|e| format!("cannot start a shard thread: {e}"))?;
        threads.push(thread);
    }
    let handle = ProxyHandle {
        addr,
        shared,
        threads,
        control: Mutex::new(Some(plane)),
    };
    for _ in 0..workers {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(message)) => {
                handle.shutdown(ShutdownMode::Immediate);
                let _ = handle.join();
                return Err(message);
            }
            Err(_) => return Err("a shard thread exited during startup".to_string()),
        }
    }
    info!(%addr, workers, "pgtier listening");
    Ok(handle)
}

fn pin_to_core(core: usize) {
    // SAFETY: cpu_set_t is plain data; CPU_SET stays within its bounds for core < 1024, and
    // sched_setaffinity only reads the set. Failure (e.g. a restricted cpuset) is harmless.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if core < libc::CPU_SETSIZE as usize {
            libc::CPU_SET(core, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }
}

/// Blocks SIGHUP, SIGTERM and SIGINT in the calling thread (and threads it starts later), so
/// only `wait_signal` sees them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set, then pthread_sigmask for this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `set` and `ts` are live locals; a null siginfo pointer is allowed.
    let signal = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    (signal > 0).then_some(signal)
}

/// Runs the proxy from a config file until a shutdown completes. SIGHUP reloads the file (an
/// invalid file is logged and ignored), SIGTERM waits for clients to leave, SIGINT waits for
/// running transactions, and a second SIGTERM/SIGINT closes everything at once.
pub fn run(config_path: &Path) -> Result<(), String> {
    let config = Config::load(config_path).map_err(|error| error.to_string())?;
    init_logging(&config.pgtier.log_level);
    let signals = block_signals();
    let handle = start(config)?;
    let mut shutting_down = false;
    while !handle.is_finished() {
        let Some(signal) = wait_signal(&signals, Duration::from_millis(200)) else {
            continue;
        };
        match signal {
            libc::SIGHUP => match Config::load(config_path) {
                Ok(config) => match handle.reload(config) {
                    Ok(()) => info!("reloaded {}", config_path.display()),
                    Err(message) => warn!(%message, "reload failed"),
                },
                Err(error) => warn!(%error, "reload skipped: invalid configuration"),
            },
            libc::SIGTERM | libc::SIGINT if shutting_down => {
                info!("second signal: closing everything now");
                handle.shutdown(ShutdownMode::Immediate);
            }
            libc::SIGTERM => {
                info!("SIGTERM: waiting for clients to disconnect");
                shutting_down = true;
                handle.shutdown(ShutdownMode::WaitForClients);
            }
            libc::SIGINT => {
                info!("SIGINT: waiting for running transactions");
                shutting_down = true;
                handle.shutdown(ShutdownMode::WaitForTransactions);
            }
            _ => {}
        }
    }
    handle.join()
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_unenforced_setting_is_named_at_startup() {
        let path = std::env::temp_dir().join("pgtier-unenforced.toml");
        let load = |extra: &str| {
            let text = format!("[pgtier]\nauth_type = \"trust\"\n{extra}");
            Config::from_str(&text, path.clone()).expect("valid config")
        };
        assert!(unenforced_settings(&load("")).is_empty());
        assert_eq!(
            unenforced_settings(&load("recv_buffer_count = 2048\n")),
            vec!["recv_buffer_count"]
        );
    }
}
