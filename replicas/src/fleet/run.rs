//! The fleet thread: one per process while `fleet_name` is set. Each interval it writes this
//! host's report, takes or keeps the leader's lock, reads the members and the published
//! table, computes and publishes the next table when it leads, and applies any newer version
//! to the routers. Between rounds it waits on the store's connection, so a NOTIFY applies a
//! new version at once. It never runs on a shard's or the control shard's thread; when the
//! store fails, the routers go back to local PLB in the same round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgtier_core::config::{Config, ServerSet};
use pgtier_policy::ReplicaId;

use super::leader::next_table;
use super::mode::{Member, Mode, Transition, next_version};
use super::report::{HostReport, ReplicaReport, RouterReport, sum};
use super::roles::FleetTables;
use super::status::{FleetStatus, FleetView, MemberView};
use super::store::{MemberRow, Store, StoreTarget, TableRow};
use crate::probe::ProbeLogin;
use crate::remote_load::RemoteLoad;
use crate::router::ReplicaRouter;
use pgtier_engine::shared::BudgetRegistry;

/// How this host takes part in its fleet, from `[pgtier]`.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// `fleet_name`.
    pub name: String,
    /// This host's id: its host name and listen port (unique per process of a fleet).
    pub host: String,
    /// The store, or why there is none (then the host stays local and says why).
    pub target: Result<StoreTarget, String>,
    /// `fleet_report_interval`.
    pub interval: Duration,
    /// `fleet_member_timeout` (resolved).
    pub member_timeout: Duration,
}

impl FleetConfig {
    /// The fleet of `config`, `None` when `fleet_name` is empty. `login` gives an entry's
    /// probe login, which the store's login borrows from when `fleet_store` omits it.
    pub fn from_config(
        config: &Config,
        login: impl Fn(&pgtier_core::config::DatabaseConfig) -> Option<ProbeLogin>,
    ) -> Option<FleetConfig> {
        let settings = &config.pgtier;
        if settings.fleet_name.is_empty() {
            return None;
        }
        let entry = config
            .databases
            .values()
            .find_map(|database| match &database.servers {
                ServerSet::Replicas(set) => set.primary.map(|primary| {
                    let entry_login = login(database)
                        .or_else(|| crate::probe::health_check_login(config, database));
                    (primary, entry_login)
                }),
                _ => None,
            });
        let target = pgtier_core::config::fleet_store_pairs(&settings.fleet_store).and_then(
            |pairs| match (pairs.is_empty(), &entry) {
                (false, _) => {
                    StoreTarget::from_pairs(&pairs, entry.as_ref().and_then(|e| e.1.as_ref()))
                }
                (true, Some((primary, Some(login)))) => Ok(StoreTarget {
                    host: primary.ip().to_string(),
                    port: primary.port(),
                    login: login.clone(),
                }),
                (true, Some((_, None))) => Err("fleet_store is empty and the first entry with a \
                     primary has no login (set its user, or health_check_user)"
                    .to_string()),
                (true, None) => {
                    Err("fleet_store is empty and no replica-set entry has a primary".to_string())
                }
            },
        );
        Some(FleetConfig {
            name: settings.fleet_name.clone(),
            host: format!("{}:{}", host_name(), settings.listen_port),
            target,
            interval: settings.fleet_report_interval.duration(),
            member_timeout: settings.fleet_member_timeout(),
        })
    }

    /// How long one store call may take: the interval, within [0.2 s, 5 s].
    fn call_timeout(&self) -> Duration {
        self.interval
            .clamp(Duration::from_millis(200), Duration::from_secs(5))
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Longest wait without looking at the stop flag.
const STOP_SLICE: Duration = Duration::from_millis(50);

/// Runs the fleet until `stop`; the routers are back in local mode when it returns.
pub(crate) fn fleet_loop(
    routers: &[Arc<ReplicaRouter>],
    status: &FleetStatus,
    budgets: &BudgetRegistry,
    config: &FleetConfig,
    stop: &AtomicBool,
) {
    let mut host = Host {
        routers,
        status,
        budgets,
        shared_by: 0,
        config,
        member: Member::default(),
        link: None,
        members: Vec::new(),
        table: None,
        newest_seen: 0,
    };
    let mut next_round = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if Instant::now() >= next_round {
            next_round = Instant::now() + config.interval;
            host.round();
            continue;
        }
        let until = next_round.min(Instant::now() + STOP_SLICE);
        host.wait(until);
    }
    // Back to what a host without a fleet has (a reload that removed the fleet; a newer
    // fleet thread over the same routers sets its own state again at its next round).
    for router in routers {
        router.set_fleet_mode(false);
        router.state().set_remote(RemoteLoad::default());
    }
    share_budgets(routers, budgets, 1);
}

/// `live` members share the `max_db_connections` of every entry the routers serve.
fn share_budgets(routers: &[Arc<ReplicaRouter>], budgets: &BudgetRegistry, live: u32) {
    for router in routers {
        for entry in router.name().split(',') {
            budgets.share_database(entry, live);
        }
    }
}

/// The fleet thread's state between rounds.
struct Host<'a> {
    routers: &'a [Arc<ReplicaRouter>],
    status: &'a FleetStatus,
    /// Where the routers' entries get their share of `max_db_connections`.
    budgets: &'a BudgetRegistry,
    /// The live members the budgets were last shared by (0: not yet).
    shared_by: u32,
    config: &'a FleetConfig,
    member: Member,
    /// The connection to the store, while there is one.
    link: Option<Link>,
    /// The members as last read.
    members: Vec<MemberRow>,
    /// The table as last read.
    table: Option<TableRow>,
    /// The newest version this host ever saw: a leader never writes one at or below it, even
    /// if the store lost its row.
    newest_seen: u64,
}

/// A connection to the store, and whether it holds the leader's lock (which it loses with
/// the connection).
struct Link {
    store: Store,
    leading: bool,
}

impl Host<'_> {
    fn leading(&self) -> bool {
        self.link.as_ref().is_some_and(|link| link.leading)
    }

    fn store(&mut self) -> Option<&mut Store> {
        self.link.as_mut().map(|link| &mut link.store)
    }

    fn round(&mut self) {
        let transitions = match self.exchange() {
            Ok(()) => {
                self.share_remote();
                self.share_budgets();
                self.member.on_store_reached(self.leading())
            }
            Err(cause) => {
                self.link = None;
                self.status.count_failed_round();
                for router in self.routers {
                    router.state().set_remote(RemoteLoad::default());
                }
                self.member.on_store_lost(&cause)
            }
        };
        self.log(&transitions);
        // Every round, not only at a transition: a reload's old fleet thread resets the routers
        // it shared with this one as it stops.
        let fleet = matches!(self.member.mode(), Mode::Fleet { .. });
        for router in self.routers {
            router.set_fleet_mode(fleet);
        }
        self.apply_newer();
        self.publish_view();
    }

    /// One round with the store: report, lead, read, and publish when leading.
    fn exchange(&mut self) -> Result<(), String> {
        let target = self.config.target.as_ref().map_err(Clone::clone)?;
        if self.link.is_none() {
            let store = Store::open(
                target,
                &self.config.name,
                &self.config.host,
                self.config.call_timeout(),
                self.config.member_timeout,
            )?;
            self.link = Some(Link {
                store,
                leading: false,
            });
        }
        let Some(Link { store, leading }) = self.link.as_mut() else {
            return Err("no store".to_string());
        };
        store.report(&self.config.host, &local_report(self.routers).encode())?;
        let new_leader = !*leading && store.try_lead()?;
        *leading |= new_leader;
        self.members = store.members()?;
        self.table = store.table()?;
        self.note_seen();
        if self.leading() {
            self.lead(new_leader)?;
        } else if let Some(leader) = self.silent_leader() {
            let store = self.store().ok_or("no store")?;
            if store.depose(&leader)? {
                tracing::warn!(fleet = %self.config.name, %leader, "fleet: the leader stopped reporting; its lock was taken back");
            }
        }
        Ok(())
    }

    /// The leader named by the stored table, when its own report is older than
    /// `fleet_member_timeout` (or missing) while it still holds the lock.
    fn silent_leader(&self) -> Option<String> {
        let leader = &self.table.as_ref()?.leader;
        let report = self.members.iter().find(|member| &member.host == leader);
        report
            .is_none_or(|member| member.age >= self.config.member_timeout)
            .then(|| leader.clone())
    }

    /// The leader's part: the next tables from the stored ones and the live members' sum.
    fn lead(&mut self, new_leader: bool) -> Result<(), String> {
        let stored = self
            .table
            .as_ref()
            .map(|row| FleetTables::decode(&row.tables))
            .unwrap_or_default();
        let live: Vec<HostReport> = self
            .members
            .iter()
            .filter(|member| member.age < self.config.member_timeout)
            .map(|member| HostReport::decode(&member.report))
            .collect();
        let mut next = FleetTables::default();
        for router in self.routers {
            let name = router.name();
            let base = stored
                .table(name)
                .filter(|table| table.iter().count() == router.replica_count())
                .cloned()
                .unwrap_or_else(|| router.authority_table());
            let summed = sum(&live, name, router.replica_count());
            next.routers.push((
                name.to_string(),
                next_table(router.policy(), &base, &summed),
            ));
        }
        let encoded = next.encode();
        let stored_version = self
            .table
            .as_ref()
            .map(|row| row.version)
            .max((self.newest_seen > 0).then_some(self.newest_seen));
        let changed = self.table.as_ref().is_none_or(|row| row.tables != encoded);
        let Some(version) = next_version(stored_version, new_leader, changed) else {
            return Ok(());
        };
        let config = self.config;
        let forget_after = (10 * config.member_timeout).max(Duration::from_secs(60));
        let Some(store) = self.store() else {
            return Err("no store".to_string());
        };
        store.publish(version, &config.host, &encoded, forget_after)?;
        self.status.count_published();
        self.table = Some(TableRow {
            version,
            leader: self.config.host.clone(),
            tables: encoded,
        });
        Ok(())
    }

    /// Gives each router the other live members' load, which its decisions add to its own.
    fn share_remote(&self) {
        let others: Vec<HostReport> = self
            .members
            .iter()
            .filter(|member| {
                member.host != self.config.host && member.age < self.config.member_timeout
            })
            .map(|member| HostReport::decode(&member.report))
            .collect();
        for router in self.routers {
            let summed = sum(&others, router.name(), router.replica_count());
            router
                .state()
                .set_remote(RemoteLoad::new(&summed.sessions, &summed.in_flight));
        }
    }

    /// Each router's entries take their share of `max_db_connections`: divided by the live
    /// members, this host included. In local mode the last share stays (the other hosts
    /// most likely still serve), so a store outage does not multiply the servers.
    fn share_budgets(&mut self) {
        let live = self
            .members
            .iter()
            .filter(|member| member.age < self.config.member_timeout)
            .count()
            .max(1);
        let live = u32::try_from(live).unwrap_or(u32::MAX);
        // Applied every round, not only on change: a reload's old fleet thread may reset the
        // shares as it stops, after this one set them.
        share_budgets(self.routers, self.budgets, live);
        if live != self.shared_by {
            tracing::info!(fleet = %self.config.name, members = live, "fleet: max_db_connections shared by the live members");
            self.shared_by = live;
        }
    }

    /// Waits for a notification until `until`; one that arrives reads and applies the table.
    fn wait(&mut self, until: Instant) {
        let Some(store) = self.store() else {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            return;
        };
        let read = match store.wait_for_notification(until) {
            Ok(false) => return,
            Ok(true) => store.table(),
            Err(cause) => Err(cause),
        };
        match read {
            Ok(table) => {
                self.table = table;
                self.note_seen();
                self.apply_newer();
                self.publish_view();
            }
            // The next round reconnects, or says the store is gone.
            Err(_) => {
                self.link = None;
            }
        }
    }

    fn note_seen(&mut self) {
        if let Some(row) = &self.table {
            self.newest_seen = self.newest_seen.max(row.version);
        }
    }

    /// Applies the table read last when it is newer than the one applied.
    fn apply_newer(&mut self) {
        let Some(row) = &self.table else {
            return;
        };
        if !self.member.should_apply(row.version) {
            return;
        }
        let tables = FleetTables::decode(&row.tables);
        for router in self.routers {
            if let Some(table) = tables.table(router.name()) {
                router.apply_fleet_table(table);
            }
        }
        self.member.applied_version(row.version);
        self.status.count_applied();
        tracing::debug!(fleet = %self.config.name, version = row.version, leader = %row.leader, "fleet table applied");
    }

    fn log(&self, transitions: &[Transition]) {
        let (fleet, host) = (&self.config.name, &self.config.host);
        for transition in transitions {
            match transition {
                Transition::JoinedFleet => {
                    for router in self.routers {
                        router.set_fleet_mode(true);
                    }
                    tracing::info!(%fleet, %host, "fleet: the store is reachable; routing from the fleet's table");
                }
                Transition::WentLocal { cause } => {
                    for router in self.routers {
                        router.set_fleet_mode(false);
                    }
                    self.status.count_local();
                    tracing::warn!(%fleet, %host, %cause, "fleet: the store is unreachable; local PLB until it returns");
                }
                Transition::BecameLeader => {
                    tracing::info!(%fleet, %host, "fleet: this host is the leader")
                }
                Transition::StoppedLeading => {
                    tracing::info!(%fleet, %host, "fleet: this host no longer leads")
                }
            }
        }
    }

    fn publish_view(&self) {
        let in_fleet = matches!(self.member.mode(), Mode::Fleet { .. });
        let cause = match self.member.mode() {
            Mode::Local { cause } => Some(cause.clone()),
            _ => None,
        };
        let members = self
            .members
            .iter()
            .map(|member| MemberView {
                host: member.host.clone(),
                last_report: member.reported_at.clone(),
                age: member.age,
                live: member.age < self.config.member_timeout,
            })
            .collect();
        self.status.publish(FleetView {
            name: self.config.name.clone(),
            host: self.config.host.clone(),
            mode: self.member.mode().as_str(),
            cause,
            // Only a host in touch with the store knows who leads: in local mode the last
            // row read names a leader whose lock may be gone, and showing it would say the
            // fleet still has one.
            leader: in_fleet
                .then(|| self.table.as_ref().map(|row| row.leader.clone()))
                .flatten(),
            is_leader: in_fleet && self.leading(),
            version: self.member.applied().unwrap_or(0),
            stored_version: self.table.as_ref().map_or(0, |row| row.version),
            members,
        });
    }
}

/// This host's load and health of every router.
fn local_report(routers: &[Arc<ReplicaRouter>]) -> HostReport {
    let routers = routers
        .iter()
        .map(|router| {
            let health = router.replica_health();
            let replicas = (0..router.replica_count())
                .filter_map(ReplicaId::from_index)
                .map(|replica| ReplicaReport {
                    sessions: router.tier_load(replica),
                    in_flight: router.state().in_flight_tiers(replica),
                    down: health
                        .get(replica.index())
                        .is_some_and(|h| !h.state.is_up()),
                })
                .collect();
            RouterReport {
                name: router.name().to_string(),
                replicas,
            }
        })
        .collect();
    HostReport { routers }
}
