//! Starting and stopping the proxy: one pinned thread per shard with its own ring and its
//! listeners (bound by `pgtier_shard::listen`), each shard's engine with its services, the
//! control plane, the metrics endpoint and the resolver thread, and the signal loop (SIGHUP
//! reload, the console's RELOAD and SET carried out by `reconfigure.rs`, SIGTERM/SIGINT
//! graceful, a second signal immediate, SIGUSR1/SIGUSR2 PAUSE/RESUME).

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use pgtier_core::config::Config;
use pgtier_engine::reconfigure::{Order, Pending};
use pgtier_engine::services::Refusal;
use pgtier_engine::shared::StatsSnapshot;
use pgtier_engine::tls::TlsSides;
use pgtier_engine::userlist::UserList;
use pgtier_engine::{Engine, EngineParts};
use tracing::{debug, error, info, warn};

use pgtier_console::ShardConsole;
use pgtier_metrics::MetricsEndpoint;
use pgtier_metrics::Sources;
use pgtier_replicas::{
    ControlOptions, ControlPlane, FleetConfig, FleetStatus, ReplyMailbox, RouterMap, ShardRouting,
    SharedRouting, default_probe_login,
};
use pgtier_shard::listen::{Listeners, TcpStops, UnixSocketFile};
use pgtier_shard::{
    Command, Mailbox, PauseSignal, RecvBuffers, Shard, ShardParts, ShutdownMode, UringRing,
};

use crate::os_random::OsRandom;
use crate::resolve::Dns;
use crate::sd_notify::Notifier;

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
    /// Per shard: its loop has returned (a graceful shutdown ends shards one by one).
    finished: Vec<AtomicBool>,
}

impl Shared {
    /// Shard `index`'s loop has returned.
    fn shard_finished(&self, index: usize) {
        if let Some(flag) = self.finished.get(index) {
            flag.store(true, Ordering::Release);
        }
        self.finished_shards.fetch_add(1, Ordering::AcqRel);
    }
}

/// Commands a shard's mailbox holds before posts fail.
const MAILBOX_CAPACITY: usize = 4096;

/// A running proxy.
pub struct ProxyHandle {
    /// The first TCP address (or the unspecified address with `listen_port` without one).
    addr: SocketAddr,
    tcp_addrs: Vec<SocketAddr>,
    /// The Unix socket; its file is removed when the handle is dropped.
    unix: Option<UnixSocketFile>,
    /// The TCP listeners, stopped at once when a shutdown would refuse a queued client.
    tcp_stops: TcpStops,
    /// The settings the process started with (those a reload cannot change are named).
    started: pgtier_core::config::Settings,
    /// The configuration in effect (the last one handed to the shards): what a console SET
    /// changes. Held for the whole of a reload, so reloads and SETs apply one at a time.
    current: Mutex<Arc<Config>>,
    /// The TLS configurations in effect (the last ones handed to the shards), kept when a
    /// SET leaves the TLS files inconsistent for a while.
    tls: Mutex<TlsSides>,
    /// The console's RELOAD and SET orders, for the main loop (`run`) to carry out; `None`
    /// when no main loop does (embedded proxies: the console refuses them).
    orders: Option<Mutex<mpsc::Receiver<Order>>>,
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Result<(), String>>>,
    /// The control shard of the current routers; replaced on reload, stopped at join.
    control: Mutex<Option<ControlPlane>>,
    /// The metrics endpoint with its address, when `metrics_port` is set; restarted when a
    /// reload changes the address, stopped at join.
    metrics: Mutex<MetricsEndpoint>,
    /// Server host names, resolved off the shard threads; stopped when the handle goes.
    dns: Dns,
}

impl ProxyHandle {
    /// The address clients connect to (the real port when the config said 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every TCP address listened on, in `listen_addr` order.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.tcp_addrs
    }

    /// The Unix socket file, when `unix_socket_dir` names a directory.
    pub fn unix_socket_path(&self) -> Option<&Path> {
        self.unix.as_ref().and_then(UnixSocketFile::path)
    }

    /// Totals over all shards (folded in batches, so slightly behind).
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.engine.snapshot()
    }

    /// Clients currently connected across all shards.
    pub fn client_count(&self) -> u32 {
        self.shared.engine.clients.load(Ordering::Acquire)
    }

    /// Where the metrics endpoint listens, when it is on.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        let metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        metrics.local_addr()
    }

    /// Starts, moves or stops the metrics endpoint when `metrics_addr`/`metrics_port`
    /// changed. A new address that cannot be bound leaves the endpoint off (logged).
    fn reload_metrics(&self, config: &Config) {
        let mut metrics = self.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        if let Err(message) = metrics.apply(&config.pgtier, || self.metrics_sources()) {
            warn!(%message, "metrics endpoint not restarted");
        }
    }

    fn metrics_sources(&self) -> Sources {
        Sources {
            engine: self.shared.engine.clone(),
            routing: self.shared.routing.clone(),
        }
    }

    /// The replica routers of the current configuration (what `SHOW REPLICAS` shows).
    pub fn routers(&self) -> Arc<RouterMap> {
        self.shared.routing.map.load_full()
    }

    /// Hands a new configuration to every shard (what SIGHUP does). Unchanged replica sets
    /// keep their router (sessions, roles, health); a new control plane takes over and the
    /// old one stops. On an error nothing changed.
    pub fn reload(&self, config: Config) -> Result<(), String> {
        self.reload_with(config, None)
    }

    /// [`ProxyHandle::reload`]; `pending` is the console session waiting until every shard
    /// has applied it (each shard's reload carries it, and the last one answers).
    pub(crate) fn reload_with(
        &self,
        config: Config,
        pending: Option<Arc<Pending>>,
    ) -> Result<(), String> {
        self.apply(config, pending, OnTlsError::Fail)
    }

    /// Hands `config` to every shard; what a TLS file problem does is `on_tls_error`'s.
    fn apply(
        &self,
        config: Config,
        pending: Option<Arc<Pending>>,
        on_tls_error: OnTlsError,
    ) -> Result<(), String> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        for setting in pgtier_shard::listen::startup_only_changes(&self.started, &config.pgtier) {
            warn!(
                setting,
                "changed in the configuration; it is read at start only and applies at the next start"
            );
        }
        let users = Arc::new(load_users(&config)?);
        let mut tls_in_effect = self.tls.lock().unwrap_or_else(PoisonError::into_inner);
        let tls = match load_tls(&config) {
            Ok(tls) => tls,
            Err(error) => {
                // PgBouncer's words (operators and its test suite look for them).
                error!("TLS setup failed: {error}");
                match on_tls_error {
                    OnTlsError::Fail => return Err(error),
                    OnTlsError::KeepInEffect => {
                        warn!("TLS settings could not be applied, still using old configuration");
                        tls_in_effect.clone()
                    }
                }
            }
        };
        let old_map = self.shared.routing.map.load_full();
        let map = old_map
            .reload(&config, default_probe_login)
            .map_err(|error| format!("replica routing: {error}"))?;
        let plane = start_control_plane(
            &map,
            &config,
            &self.shared.routing.fleet,
            &self.shared.engine,
        )?;
        // New host names are looked up here, before any shard has the configuration.
        self.dns.reload(&config);
        // A changed entry may point a pool at another server: shards learn its welcome anew.
        self.shared.engine.forget_welcomes();
        self.shared.routing.map.store(Arc::new(map));
        let old_plane = self
            .control
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(plane);
        drop(old_plane);
        self.reload_metrics(&config);
        let config = Arc::new(config);
        *current = config.clone();
        *tls_in_effect = tls.clone();
        for mailbox in &self.shared.mailboxes {
            let command = Command::Reload {
                config: config.clone(),
                users: users.clone(),
                tls: tls.clone(),
                pending: pending.clone(),
            };
            mailbox
                .post(command)
                .map_err(|_| "a shard's mailbox is full".to_string())?;
        }
        Ok(())
    }

    /// The console orders that arrived since the last call.
    pub(crate) fn take_orders(&self) -> Vec<Order> {
        let Some(orders) = &self.orders else {
            return Vec::new();
        };
        let orders = orders.lock().unwrap_or_else(PoisonError::into_inner);
        std::iter::from_fn(|| orders.try_recv().ok()).collect()
    }

    /// Asks every shard to shut down in `mode`.
    pub fn shutdown(&self, mode: ShutdownMode) {
        // Known at once: a second signal right behind the first finds it.
        self.shared.engine.note_shutdown();
        if mode.refuses_login(false) {
            // Before the shards hear of it: meanwhile they would accept clients only to
            // refuse them, where the kernel gives them to another process on the port.
            self.tcp_stops.stop_listening();
        }
        for mailbox in &self.shared.mailboxes {
            if mailbox.post(Command::Shutdown(mode)).is_err() {
                warn!("shutdown not delivered: mailbox full");
            }
        }
    }

    /// SIGUSR1 or SIGUSR2: the first shard still running (a graceful shutdown ends them one
    /// by one) decides with the gates every shard holds and posts the PAUSE or RESUME to
    /// all of them.
    pub fn pause_signal(&self, signal: PauseSignal) {
        let running = self
            .shared
            .finished
            .iter()
            .position(|finished| !finished.load(Ordering::Acquire));
        let Some(mailbox) = running.and_then(|index| self.shared.mailboxes.get(index)) else {
            return;
        };
        if mailbox.post(Command::Signal(signal)).is_err() {
            warn!("a signal's PAUSE or RESUME not delivered: mailbox full");
        }
    }

    /// A shutdown was asked for (by a signal or on the console).
    pub fn is_shutting_down(&self) -> bool {
        self.shared.engine.is_shutting_down()
    }

    /// Every shard has returned.
    pub fn is_finished(&self) -> bool {
        self.shared.finished_shards.load(Ordering::Acquire) == self.threads.len()
    }

    /// Waits for every shard, then stops the control shard; the first shard error is
    /// returned. The Unix socket file is removed.
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
        self.metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop();
        result
    }
}

impl crate::reconfigure::Proxy for ProxyHandle {
    fn current_config(&self) -> Arc<Config> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn reload_with(&self, config: Config, pending: Option<Arc<Pending>>) -> Result<(), String> {
        ProxyHandle::reload_with(self, config, pending)
    }

    fn set_with(&self, config: Config, pending: Arc<Pending>) -> Result<(), String> {
        self.apply(config, Some(pending), OnTlsError::KeepInEffect)
    }

    fn answer(&self, order: &Order, error: Option<Refusal>) {
        let Some(mailbox) = self.shared.mailboxes.get(order.shard) else {
            return;
        };
        let command = Command::AdminDone {
            request_id: order.request_id,
            error,
        };
        if mailbox.post(command).is_err() {
            warn!("a console answer was not delivered: the shard's mailbox is full");
        }
    }

    fn shards(&self) -> usize {
        self.shared.mailboxes.len()
    }
}

/// What a reload does when the TLS files do not make a configuration.
#[derive(Clone, Copy, Debug)]
enum OnTlsError {
    /// It fails as a whole (SIGHUP, RELOAD, start).
    Fail,
    /// The rest applies and the TLS configurations in effect stay (a console SET: PgBouncer's
    /// TLS settings change one at a time, so a key and its certificate differ in between).
    KeepInEffect,
}

/// The auth file and, with `auth_type = hba`, the HBA rules (read again on reload).
fn load_users(config: &Config) -> Result<UserList, String> {
    UserList::load_for(&config.pgtier)
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

/// The number of shards `config` asks for.
pub fn worker_count(config: &Config) -> usize {
    config
        .pgtier
        .worker_count()
        .clamp(1, pgtier_engine::cancel::MAX_SHARDS)
}

/// Binds the listeners, starts the shards and returns once each has its ring and listener.
/// Nothing carries out the console's RELOAD and SET (they are refused); `run` does.
pub fn start(config: Config) -> Result<ProxyHandle, String> {
    let listeners = Listeners::bind(&config.pgtier, worker_count(&config))?;
    start_bound(config, listeners, false)
}

/// Starts the shards on listeners bound already (by `Listeners::bind` with
/// `worker_count(&config)` shards), so a process can bind and then give up root first.
/// With `console_changes`, the console's RELOAD and SET are queued for the caller to carry
/// out ([`ProxyHandle::take_orders`]).
pub(crate) fn start_bound(
    config: Config,
    listeners: Listeners,
    console_changes: bool,
) -> Result<ProxyHandle, String> {
    if !config.unhonoured.is_empty() {
        warn!(
            "PgBouncer settings pgtier reads but does not honour (their values have no effect): {}",
            config.unhonoured.join(", ")
        );
    }
    // SAFETY: ignoring SIGPIPE process-wide is what every network server does; sends also
    // pass MSG_NOSIGNAL.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let workers = worker_count(&config);
    if listeners.per_shard.len() != workers {
        return Err(format!(
            "bug: listeners bound for {} shards, {workers} configured",
            listeners.per_shard.len()
        ));
    }
    let users = Arc::new(load_users(&config)?);
    let tls = load_tls(&config)?;
    let tcp_stops = listeners.tcp_stops()?;
    let Listeners {
        per_shard: listen_fds,
        tcp_addrs,
        unix,
    } = listeners;
    let addr = tcp_addrs.first().copied().unwrap_or_else(|| {
        SocketAddr::new(
            std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            config.pgtier.listen_port,
        )
    });
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
    let fleet = FleetStatus::new();
    let engine = Arc::new(pgtier_engine::Shared::new(workers));
    let plane = start_control_plane(&map, &config, &fleet, &engine)?;
    let dns = Dns::start(&config)?;
    let shared = Arc::new(Shared {
        mailboxes,
        engine,
        routing: Arc::new(SharedRouting::with_fleet(map, fleet)),
        finished_shards: AtomicUsize::new(0),
        finished: (0..workers).map(|_| AtomicBool::new(false)).collect(),
    });
    let (order_tx, order_rx) = mpsc::channel::<Order>();
    let order_tx = console_changes.then_some(order_tx);
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
    // The CPUs this process may run on (a taskset or cpuset mask included): shard i is
    // pinned to the i-th of them, so a mask is honoured and shards spread over it.
    let cpus = allowed_cpus();
    let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
    let mut threads = Vec::with_capacity(workers);
    for (index, (listener, replies)) in listen_fds.into_iter().zip(replies).enumerate() {
        let (config, users, shared, ready, tls, resolver, orders) = (
            config.clone(),
            users.clone(),
            shared.clone(),
            ready_tx.clone(),
            tls.clone(),
            dns.resolver(),
            order_tx.clone(),
        );
        let cpu = (!cpus.is_empty()).then(|| cpus[index % cpus.len()]);
        let thread = std::thread::Builder::new()
            .name(format!("pgtier-shard-{index}"))
            .spawn(move || {
                if let Some(cpu) = cpu {
                    pin_to_core(cpu);
                }
                let recv = RecvBuffers {
                    count: u16::try_from(config.pgtier.recv_buffer_count).unwrap_or(1 << 15),
                    size: config.pgtier.recv_buffer_bytes,
                };
                let ring = match UringRing::new(config.pgtier.ring_entries, recv) {
                    Ok(ring) => ring,
                    Err(message) => {
                        let _ = ready.send(Err(message.clone()));
                        shared.shard_finished(index);
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
                    console: {
                        let console =
                            ShardConsole::new(shared.routing.clone(), shared.engine.clone());
                        Box::new(match orders {
                            Some(orders) => console.with_process(orders),
                            None => console,
                        })
                    },
                    resolver: Box::new(resolver),
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
                    listeners: listener,
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
                shared.shard_finished(index);
                result
            })
            .map_err(|e| format!("cannot start a shard thread: {e}"))?;
        threads.push(thread);
    }
    let handle = ProxyHandle {
        addr,
        tcp_addrs,
        unix,
        tcp_stops,
        started: config.pgtier.clone(),
        current: Mutex::new(config.clone()),
        tls: Mutex::new(tls.clone()),
        orders: console_changes.then(|| Mutex::new(order_rx)),
        shared,
        threads,
        control: Mutex::new(Some(plane)),
        metrics: Mutex::new(MetricsEndpoint::default()),
        dns,
    };
    let started = handle
        .metrics
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .apply(&config.pgtier, || handle.metrics_sources());
    if let Err(message) = started {
        handle.shutdown(ShutdownMode::Immediate);
        let _ = handle.join();
        return Err(message);
    }
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
    let tcp: Vec<String> = handle.tcp_addrs.iter().map(SocketAddr::to_string).collect();
    let unix = handle.unix.as_ref().map(|unix| unix.shown().to_string());
    info!(tcp = %tcp.join(","), unix = unix.as_deref().unwrap_or(""), workers, "pgtier listening");
    Ok(handle)
}

/// The control shard over `map`'s routers, with an LSN poller for each reader entry.
fn start_control_plane(
    map: &RouterMap,
    config: &Config,
    fleet: &Arc<FleetStatus>,
    engine: &Arc<pgtier_engine::Shared>,
) -> Result<ControlPlane, String> {
    let mut plane =
        ControlPlane::start(map.routers(), ControlOptions::from_settings(&config.pgtier))
            .map_err(|error| format!("cannot start the control shard: {error}"))?;
    plane
        .start_lsn_pollers(map.readers())
        .map_err(|error| format!("cannot start the LSN pollers: {error}"))?;
    plane
        .start_primary_watches(map.host_primaries())
        .map_err(|error| format!("cannot start the primary watches: {error}"))?;
    if let Some(fleet_config) = FleetConfig::from_config(config, default_probe_login) {
        plane
            .start_fleet(fleet_config, Arc::clone(fleet), Arc::clone(engine))
            .map_err(|error| format!("cannot start the fleet thread: {error}"))?;
    }
    Ok(plane)
}

/// The CPUs in this thread's affinity mask, in order (empty if it cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size, and CPU_ISSET
    // reads within its bounds for every index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|cpu| libc::CPU_ISSET(*cpu, &set))
            .collect()
    }
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

/// Blocks SIGHUP, SIGTERM, SIGINT, SIGQUIT, SIGUSR1 and SIGUSR2 in the calling thread (and
/// threads it starts later), so only `wait_signal` sees them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set, then pthread_sigmask for this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGQUIT);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGUSR2);
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

/// Binds the listeners; for `patience`, a failure is tried again every few milliseconds
/// (an address another process is letting go), then reported.
fn bind_patiently(
    config: &Config,
    patience: Duration,
    predecessor: Option<libc::pid_t>,
) -> Result<Listeners, String> {
    let deadline = Instant::now() + patience;
    loop {
        match Listeners::bind_taking_over(&config.pgtier, worker_count(config), predecessor) {
            Ok(listeners) => return Ok(listeners),
            Err(message) if Instant::now() < deadline => {
                debug!(%message, "the addresses are not free yet");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(message) => return Err(message),
        }
    }
}

/// What the process around the proxy does at its steps (the command line's daemon,
/// pidfile, privileges and log files); every hook may be a no-op.
pub(crate) struct RunHooks<'a> {
    /// How long binding tries again an address another process still holds (`-R`: the
    /// process taken over from lets its addresses go within moments).
    pub bind_patience: Duration,
    /// `-R`: the process taken over from, whose Unix socket file (kept open for its admin
    /// console while it finishes) this one replaces.
    pub predecessor: Option<libc::pid_t>,
    /// The listeners are bound and no thread runs yet (drop privileges here).
    pub bound: &'a mut dyn FnMut(&Listeners) -> Result<(), String>,
    /// Every shard is serving (write the pidfile, tell a waiting parent).
    pub serving: &'a mut dyn FnMut(&ProxyHandle) -> Result<(), String>,
    /// SIGHUP arrived, before the reload (reopen log files).
    pub sighup: &'a mut dyn FnMut(),
}

/// How often the main thread looks for a RELOAD or SET asked on the admin console.
const ORDER_POLL: Duration = Duration::from_millis(50);

/// Runs the proxy from a config file until a shutdown completes, with PgBouncer 1.25's
/// signals: SIGHUP (or RELOAD on the console) rereads the file (an invalid file is logged and
/// the configuration in effect stays); SIGINT is the safe shutdown (`SHUTDOWN
/// WAIT_FOR_SERVERS`: stop accepting, let running transactions finish and start no new one,
/// exit once no server is in use); SIGTERM is the super safe one (`SHUTDOWN
/// WAIT_FOR_CLIENTS`: stop accepting, exit once every client has left, which is what a
/// rolling restart needs); either while a shutdown (a signal's or the console's) runs closes
/// everything at once, and so does SIGQUIT (`SHUTDOWN`: the socket file is removed and the
/// log ends with the shutdown, where the default action would leave both); SIGUSR1 is
/// `PAUSE` and SIGUSR2 `RESUME` (ignored while shutting down).
pub fn run(config_path: &Path) -> Result<(), String> {
    let config = Config::load(config_path).map_err(|error| error.to_string())?;
    init_logging(&config.pgtier.log_level);
    run_with(
        config_path,
        config,
        RunHooks {
            bind_patience: Duration::ZERO,
            predecessor: None,
            bound: &mut |_| Ok(()),
            serving: &mut |_| Ok(()),
            sighup: &mut || {},
        },
    )
}

/// Runs the proxy with `config` (loaded from `config_path`) until a shutdown completes, with
/// the signals of [`run`] and the process steps of `hooks`.
pub(crate) fn run_with(
    config_path: &Path,
    config: Config,
    hooks: RunHooks<'_>,
) -> Result<(), String> {
    let signals = block_signals();
    let systemd = Notifier::from_env();
    let listeners = bind_patiently(&config, hooks.bind_patience, hooks.predecessor)?;
    (hooks.bound)(&listeners)?;
    let handle = start_bound(config, listeners, true)?;
    if let Err(message) = (hooks.serving)(&handle) {
        handle.shutdown(ShutdownMode::Immediate);
        let _ = handle.join();
        return Err(message);
    }
    // Every shard listens (`start_bound` returned) and the pidfile is written.
    systemd.ready();
    let mut told_stopping = false;
    while !handle.is_finished() {
        for order in handle.take_orders() {
            let reload = matches!(order.change, pgtier_engine::reconfigure::Change::Reload);
            if reload {
                systemd.reloading();
            }
            crate::reconfigure::carry_out(&handle, order, config_path, &mut *hooks.sighup);
            if reload {
                systemd.ready();
            }
        }
        if let Some(signal) = wait_signal(&signals, ORDER_POLL) {
            on_signal(&handle, signal, config_path, &systemd, &mut *hooks.sighup);
        }
        // A signal's shutdown or the console's SHUTDOWN: systemd waits for the exit from now.
        if !told_stopping && handle.is_shutting_down() {
            systemd.stopping();
            told_stopping = true;
        }
    }
    if !told_stopping {
        systemd.stopping();
    }
    handle.join()
}

/// What a signal does, with PgBouncer's log lines (operators and its test suite look for
/// them).
fn on_signal(
    handle: &ProxyHandle,
    signal: i32,
    config_path: &Path,
    systemd: &Notifier,
    sighup: &mut dyn FnMut(),
) {
    let shutting_down = handle.is_shutting_down();
    match signal {
        libc::SIGHUP => {
            systemd.reloading();
            info!("got SIGHUP, re-reading config");
            // Log files first, so the reload's own lines land in the fresh file.
            sighup();
            if let Err(message) = crate::reconfigure::reload_file(handle, config_path, None) {
                warn!(%message, "config file loading failed");
            }
            // Done either way: a file that does not load leaves the running configuration,
            // which still serves.
            systemd.ready();
        }
        libc::SIGQUIT => {
            // Logged once the TCP listeners have left the port group (`shutdown` does that
            // first): whoever reads the line knows new connections go to the other processes.
            handle.shutdown(ShutdownMode::Immediate);
            info!("got SIGQUIT, fast exit");
        }
        libc::SIGTERM if shutting_down => {
            info!("got SIGTERM while shutting down, fast exit");
            handle.shutdown(ShutdownMode::Immediate);
        }
        libc::SIGINT if shutting_down => {
            info!("got SIGINT while shutting down, fast exit");
            handle.shutdown(ShutdownMode::Immediate);
        }
        libc::SIGTERM => {
            info!("got SIGTERM, shutting down, waiting for all clients disconnect");
            handle.shutdown(ShutdownMode::WaitForClients);
        }
        libc::SIGINT => {
            info!("got SIGINT, shutting down, waiting for all servers connections to be released");
            handle.shutdown(ShutdownMode::WaitForTransactions);
        }
        libc::SIGUSR1 => handle.pause_signal(PauseSignal::Pause),
        libc::SIGUSR2 => handle.pause_signal(PauseSignal::Resume),
        _ => {}
    }
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .try_init();
}
