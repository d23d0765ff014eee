//! The control plane: the control shard's thread, the prober threads, and building the
//! routers from `pgtier.toml`.
//!
//! The control shard runs on its own thread, parked until a data shard or a prober wakes it
//! (or the return tick elapses); it never runs on a data shard's loop and never blocks one.
//! Probers are one thread per replica with blocking sockets (see [`crate::probe`]).
//! Dropping the plane stops and joins every thread it started.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant, SystemTime};

use pgtier_core::config::{
    Config, DatabaseConfig, HostList, ReplicaSet as ConfiguredReplicas, ServerSet,
};
use pgtier_policy::ReplicaId;

use crate::health::{HealthConfig, ProbeOutcome};
use crate::host_primary::{self, HostPrimary};
use crate::lsn_poll;
use crate::probe::{ProbeLogin, ProbeReport, Prober, health_check_login};
use crate::read_router::ReadRouter;
use crate::router::ReplicaRouter;
use crate::router_config::{RouterConfig, RouterError};

/// Default period of return evaluation when no session close asked for it.
pub(crate) const DEFAULT_RETURN_TICK: Duration = Duration::from_millis(100);

/// How the control plane runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlOptions {
    /// Probe cadence and thresholds.
    pub health: HealthConfig,
    /// Returns are evaluated at least this often, besides on session closes.
    pub return_tick: Duration,
    /// Start prober threads (off in tests that drive health only through reports).
    pub probes: bool,
    /// Period of the LSN pollers of reader entries (`lsn_poll_interval`).
    pub lsn_poll_interval: Duration,
}

impl ControlOptions {
    /// Health settings from `[pgtier]`, the default return tick, probes on.
    pub fn from_settings(settings: &pgtier_core::config::Settings) -> ControlOptions {
        ControlOptions {
            health: HealthConfig::from_settings(settings),
            lsn_poll_interval: settings.lsn_poll_interval.duration(),
            ..ControlOptions::default()
        }
    }
}

impl Default for ControlOptions {
    fn default() -> ControlOptions {
        ControlOptions {
            health: HealthConfig::default(),
            return_tick: DEFAULT_RETURN_TICK,
            probes: true,
            lsn_poll_interval: Duration::from_millis(10),
        }
    }
}

/// Routers of a configuration: one per distinct replica set, shared by the entries that name
/// the same replicas and routing (e.g. `analytics` and its alias `analytics_premium`), and
/// for a reader entry (one with a `primary`) the read side next to its router.
#[derive(Debug, Default)]
pub struct RouterMap {
    by_entry: BTreeMap<String, Arc<ReplicaRouter>>,
    routers: Vec<Arc<ReplicaRouter>>,
    readers_by_entry: BTreeMap<String, Arc<ReadRouter>>,
    readers: Vec<Arc<ReadRouter>>,
    /// Host-list entries with `target_session_attrs = "read-write"`: their primary election.
    host_primaries: BTreeMap<String, Arc<HostPrimary>>,
}

impl RouterMap {
    /// Builds the routers of every replica-set entry of `config`. `probe_login` chooses how
    /// the probes of an entry log in; by default use [`default_probe_login`].
    pub fn from_config(
        config: &Config,
        probe_login: impl Fn(&DatabaseConfig) -> Option<ProbeLogin>,
    ) -> Result<RouterMap, RouterError> {
        let mut map = RouterMap::build(config, &probe_login, |_| None, |_, _, _| None)?;
        map.host_primaries = host_primaries(config, &probe_login, |_, _, _| None);
        Ok(map)
    }

    /// The routers of a reloaded `config`: a replica set whose replicas, routing and probe
    /// login did not change keeps its router (sessions, roles, health and events carry over);
    /// the others get new routers. Its label stays the one it was created with. A reader
    /// entry whose router was kept and whose read settings did not change keeps its read side
    /// (counters and LSN view), and forgets what it knew of its primary's functions.
    pub fn reload(
        &self,
        config: &Config,
        probe_login: impl Fn(&DatabaseConfig) -> Option<ProbeLogin>,
    ) -> Result<RouterMap, RouterError> {
        let mut map = RouterMap::build(
            config,
            &probe_login,
            |wanted| {
                self.routers
                    .iter()
                    .find(|router| router.same_setup(wanted))
                    .cloned()
            },
            |router, replicas, login| {
                let kept = self
                    .readers
                    .iter()
                    .find(|reader| reader.same_setup(router, replicas, login))
                    .cloned();
                // A reload refreshes what is known of the primary's functions.
                if let Some(reader) = &kept {
                    reader.functions().forget();
                }
                kept
            },
        )?;
        map.host_primaries = host_primaries(config, &probe_login, |name, list, login| {
            self.host_primaries
                .get(name)
                .filter(|kept| kept.same_setup(list, login))
                .cloned()
        });
        Ok(map)
    }

    fn build(
        config: &Config,
        probe_login: &impl Fn(&DatabaseConfig) -> Option<ProbeLogin>,
        reuse: impl Fn(&RouterConfig) -> Option<Arc<ReplicaRouter>>,
        reuse_reader: impl Fn(
            &Arc<ReplicaRouter>,
            &ConfiguredReplicas,
            &Option<ProbeLogin>,
        ) -> Option<Arc<ReadRouter>>,
    ) -> Result<RouterMap, RouterError> {
        let mut groups: Vec<(&ConfiguredReplicas, Vec<&str>, Option<ProbeLogin>)> = Vec::new();
        for (name, database) in &config.databases {
            let ServerSet::Replicas(replicas) = &database.servers else {
                continue;
            };
            match groups.iter_mut().find(|(set, _, _)| *set == replicas) {
                Some((_, names, _)) => names.push(name),
                None => groups.push((
                    replicas,
                    vec![name],
                    probe_login(database).or_else(|| health_check_login(config, database)),
                )),
            }
        }
        let mut map = RouterMap::default();
        for (replicas, names, login) in groups {
            let label = names.join(",");
            let wanted =
                RouterConfig::from_replicas(&label, replicas, &config.pgtier, login.clone());
            let router = match reuse(&wanted) {
                Some(router) => router,
                None => ReplicaRouter::new(wanted)?,
            };
            let reader = match reuse_reader(&router, replicas, &login) {
                Some(reader) => Some(reader),
                None => ReadRouter::new(Arc::clone(&router), replicas, login),
            };
            for name in &names {
                map.by_entry.insert(name.to_string(), Arc::clone(&router));
            }
            if let Some(reader) = reader {
                for name in &names {
                    map.readers_by_entry
                        .insert(name.to_string(), Arc::clone(&reader));
                }
                map.readers.push(reader);
            }
            map.routers.push(router);
        }
        Ok(map)
    }

    /// A map over routers built by hand (tests, tools).
    pub fn from_routers(routers: Vec<(Vec<String>, Arc<ReplicaRouter>)>) -> RouterMap {
        let mut map = RouterMap::default();
        for (names, router) in routers {
            for name in names {
                map.by_entry.insert(name, Arc::clone(&router));
            }
            map.routers.push(router);
        }
        map
    }

    /// The router of database entry `name`, if it is a replica set.
    pub fn router(&self, entry: &str) -> Option<&Arc<ReplicaRouter>> {
        self.by_entry.get(entry)
    }

    /// Every router once.
    pub fn routers(&self) -> &[Arc<ReplicaRouter>] {
        &self.routers
    }

    /// The read side of reader entry `name` (an entry with a `primary`).
    pub fn reader(&self, entry: &str) -> Option<&Arc<ReadRouter>> {
        self.readers_by_entry.get(entry)
    }

    /// Every reader entry's read side once.
    pub fn readers(&self) -> &[Arc<ReadRouter>] {
        &self.readers
    }

    /// The primary election of host-list entry `name` (with `target_session_attrs`
    /// asking for the primary).
    pub fn host_primary(&self, entry: &str) -> Option<&Arc<HostPrimary>> {
        self.host_primaries.get(entry)
    }

    /// Every host-list entry's primary election.
    pub fn host_primaries(&self) -> impl Iterator<Item = &Arc<HostPrimary>> {
        self.host_primaries.values()
    }

    /// The read side built over `router`, if its entry has a primary.
    pub fn reader_of(&self, router: &Arc<ReplicaRouter>) -> Option<&Arc<ReadRouter>> {
        self.readers
            .iter()
            .find(|reader| Arc::ptr_eq(reader.router(), router))
    }
}

/// The primary elections of the host-list entries whose `target_session_attrs` asks for
/// the primary, kept from the running configuration where `reuse` says so. An entry without
/// a login gets none (the configuration refuses it).
fn host_primaries(
    config: &Config,
    probe_login: &impl Fn(&DatabaseConfig) -> Option<ProbeLogin>,
    reuse: impl Fn(&str, &HostList, &ProbeLogin) -> Option<Arc<HostPrimary>>,
) -> BTreeMap<String, Arc<HostPrimary>> {
    let mut out = BTreeMap::new();
    for (name, database) in &config.databases {
        let ServerSet::Hosts(list) = &database.servers else {
            continue;
        };
        if !list.target.wants_primary() {
            continue;
        }
        let Some(login) = probe_login(database).or_else(|| health_check_login(config, database))
        else {
            continue;
        };
        let watch =
            reuse(name, list, &login).unwrap_or_else(|| HostPrimary::new(name, list, login));
        out.insert(name.clone(), watch);
    }
    out
}

/// Probes log in as the entry's forced server user when it has one; otherwise probes are
/// handshake-only.
pub fn default_probe_login(database: &DatabaseConfig) -> Option<ProbeLogin> {
    database.user.as_ref().map(|user| ProbeLogin {
        user: user.clone(),
        password: database.password.clone(),
        dbname: database.dbname.clone(),
    })
}

/// The running control shard and probers. Drop stops them.
#[derive(Debug)]
pub struct ControlPlane {
    routers: Vec<Arc<ReplicaRouter>>,
    stop: Arc<AtomicBool>,
    control: Option<JoinHandle<()>>,
    control_thread: Thread,
    probers: Vec<JoinHandle<()>>,
    options: ControlOptions,
}

impl ControlPlane {
    /// Starts the control thread for `routers` and, when `options.probes`, one prober thread
    /// per replica. On a reload, start the new plane over the new [`RouterMap`] first, then
    /// drop the old plane: routers kept by the reload move to the new plane without refusing
    /// anything, routers dropped by it refuse their pending admissions.
    pub fn start(
        routers: &[Arc<ReplicaRouter>],
        options: ControlOptions,
    ) -> io::Result<ControlPlane> {
        let stop = Arc::new(AtomicBool::new(false));
        let routers: Vec<Arc<ReplicaRouter>> = routers.to_vec();
        let control = {
            let routers = routers.clone();
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("pgtier-control".to_string())
                .spawn(move || control_loop(&routers, &stop, options))?
        };
        let control_thread = control.thread().clone();
        for router in &routers {
            router.attach_control_thread(control_thread.clone());
        }
        let mut plane = ControlPlane {
            routers,
            stop,
            control: Some(control),
            control_thread,
            probers: Vec::new(),
            options,
        };
        if options.probes {
            plane.start_probers(options.health)?;
        }
        Ok(plane)
    }

    /// Starts one LSN poller thread per reader entry (`RouterMap::readers`). They stop with
    /// the plane; on a reload the new plane's pollers take over kept readers (both publish
    /// valid views for a moment).
    pub fn start_lsn_pollers(&mut self, readers: &[Arc<ReadRouter>]) -> io::Result<()> {
        for reader in readers {
            let reader = Arc::clone(reader);
            let stop = Arc::clone(&self.stop);
            let (interval, health) = (self.options.lsn_poll_interval, self.options.health);
            let handle = std::thread::Builder::new()
                .name("pgtier-lsn".to_string())
                .spawn(move || lsn_poll::poll_loop(&reader, &stop, interval, health))?;
            self.probers.push(handle);
        }
        Ok(())
    }

    /// Starts one thread per host-list entry that elects its primary, after running the
    /// first round of each new election here (so no connection goes out before a primary
    /// is known). They stop with the plane; a reload's new plane takes kept elections over.
    pub fn start_primary_watches<'a>(
        &mut self,
        watches: impl Iterator<Item = &'a Arc<HostPrimary>>,
    ) -> io::Result<()> {
        for watch in watches {
            let health = self.options.health;
            host_primary::first_round(watch, health);
            let watch = Arc::clone(watch);
            let stop = Arc::clone(&self.stop);
            let handle = std::thread::Builder::new()
                .name("pgtier-primary".to_string())
                .spawn(move || host_primary::watch_loop(&watch, &stop, health))?;
            self.probers.push(handle);
        }
        Ok(())
    }

    /// Starts the fleet thread (`fleet_name` set): it shares this plane's routers' load and
    /// role tables with the other hosts of the fleet, writes what it sees to `status`, and
    /// gives the routers' entries their share of `max_db_connections` in `engine`'s budgets.
    /// It stops with the plane (its store connection closes, which frees the leader's lock).
    pub fn start_fleet(
        &mut self,
        config: crate::fleet::FleetConfig,
        status: Arc<crate::fleet::FleetStatus>,
        engine: Arc<pgtier_engine::Shared>,
    ) -> io::Result<()> {
        let routers = self.routers.clone();
        let stop = Arc::clone(&self.stop);
        let handle = std::thread::Builder::new()
            .name("pgtier-fleet".to_string())
            .spawn(move || {
                crate::fleet::run::fleet_loop(&routers, &status, &engine.budgets, &config, &stop)
            })?;
        self.probers.push(handle);
        Ok(())
    }

    /// The routers this plane controls.
    pub fn routers(&self) -> &[Arc<ReplicaRouter>] {
        &self.routers
    }

    fn start_probers(&mut self, health: HealthConfig) -> io::Result<()> {
        for router in &self.routers {
            for index in 0..router.replica_count() {
                let Some(replica) = ReplicaId::from_index(index) else {
                    break;
                };
                let router = Arc::clone(router);
                let stop = Arc::clone(&self.stop);
                let handle = std::thread::Builder::new()
                    .name(format!("pgtier-probe-{index}"))
                    .spawn(move || probe_loop(&router, replica, &stop, health))?;
                self.probers.push(handle);
            }
        }
        Ok(())
    }

    /// Stops and joins every thread; queued admissions are refused.
    pub fn shutdown(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.stop.store(true, Ordering::Release);
        for handle in self.probers.drain(..) {
            handle.thread().unpark();
            if handle.join().is_err() {
                tracing::error!("a prober thread panicked");
            }
        }
        if let Some(control) = self.control.take() {
            control.thread().unpark();
            if control.join().is_err() {
                tracing::error!("the control thread panicked");
            }
        }
        for router in &self.routers {
            // A router a newer plane took over (a reload) stays with that plane.
            if router.detach_control_thread(&self.control_thread) {
                router.refuse_pending();
            }
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

fn control_loop(routers: &[Arc<ReplicaRouter>], stop: &AtomicBool, options: ControlOptions) {
    let mut next_tick = Instant::now() + options.return_tick;
    while !stop.load(Ordering::Acquire) {
        let tick = Instant::now() >= next_tick;
        if tick {
            next_tick = Instant::now() + options.return_tick;
        }
        for router in routers {
            run_step_isolated(router, &options.health, tick);
        }
        let pending = routers.iter().any(|r| r.has_pending_control_work());
        if !pending {
            std::thread::park_timeout(next_tick.saturating_duration_since(Instant::now()));
        }
    }
}

/// Runs one router's control step; a panic (a bug) is logged and the loop goes on, so one
/// faulty router cannot stop admissions and health checks of the others.
fn run_step_isolated(router: &Arc<ReplicaRouter>, health: &HealthConfig, tick: bool) {
    let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        router.run_control_step(health, tick)
    }));
    if step.is_err() {
        tracing::error!(router = %router.name(), "control step panicked; continuing");
    }
}

/// Longest uninterrupted wait of a prober, so a shutdown is noticed quickly.
const PROBER_WAIT_SLICE: Duration = Duration::from_millis(50);

fn probe_loop(router: &ReplicaRouter, replica: ReplicaId, stop: &AtomicBool, health: HealthConfig) {
    let Some(addr) = router.replica_addr(replica) else {
        return;
    };
    let mut prober = Prober::new(addr, router.probe_login().cloned(), health.timeout);
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        report_probe(router, replica, prober.probe());
        let next = started + health.interval;
        while !stop.load(Ordering::Acquire) && Instant::now() < next {
            let slice_end = next.min(Instant::now() + PROBER_WAIT_SLICE);
            if prober.wait_for_close(slice_end) {
                // The server closed the idle connection: that is evidence of failure, and
                // the next probe (a reconnect) runs at once to confirm or refute it.
                let cause = "the server closed the probe connection".to_string();
                report_probe(router, replica, ProbeOutcome::Failed { cause });
                break;
            }
            std::thread::park_timeout(slice_end.saturating_duration_since(Instant::now()));
        }
    }
}

fn report_probe(router: &ReplicaRouter, replica: ReplicaId, outcome: ProbeOutcome) {
    let report = ProbeReport {
        replica,
        at: SystemTime::now(),
        outcome,
    };
    router.report_probe(report);
}
