//! The primary of a host list with `target_session_attrs = "read-write"` (or `"primary"`):
//! which of its hosts new server connections go to.
//!
//! libpq finds the primary of a host list by trying each host and asking it whether it is in
//! recovery. pgtier asks every host continuously instead, on a control-plane thread (one per
//! such entry, blocking std sockets like the probes), every `health_check_interval`, with
//! the same query as the reader entries' poller, and elects the primary with the same pure
//! rule ([`PrimaryElection`]): a host promoted on a newer timeline takes over, and a host
//! that answers read-write on an older (or the same) timeline while another is primary is
//! fenced, so an old primary that comes back never takes a write. Until a round elects a
//! host nothing is connected: the first round runs before the plane returns.
//!
//! Shards read the election through the `Routing` service (`routing.rs`) and act on a move
//! (`pgtier_engine`'s `primary_moves.rs`): servers on any other host are closed.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use pgtier_core::config::HostList;

use crate::health::HealthConfig;
use crate::lsn_poll::{HOST_SQL, Polled, host_answer};
use crate::primary_election::{HostRole, PrimaryElection, PrimaryMove};
use crate::probe::ProbeLogin;

/// Election epochs, unique in the process: a shard that remembers an epoch of a watcher a
/// reload replaced still sees the new watcher's first move as news.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

/// Longest uninterrupted sleep, so a shutdown is noticed quickly.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The host new connections go to, as the shards read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectedHost {
    /// Index in the entry's host list; `None` before the first election, or when no host
    /// is read-write (on a newer timeline than the last primary's).
    pub host: Option<usize>,
    /// Moves with every change of `host` (0 before any).
    pub epoch: u64,
}

/// The primary election of one host-list entry.
#[derive(Debug)]
pub struct HostPrimary {
    name: String,
    list: HostList,
    login: ProbeLogin,
    election: Mutex<PrimaryElection>,
    elected: ArcSwap<ElectedHost>,
    /// A round has run: the first one decides before anything connects.
    decided: AtomicBool,
}

impl HostPrimary {
    /// The election of entry `name` over `list`, polled as `login`; nothing elected yet.
    pub fn new(name: &str, list: &HostList, login: ProbeLogin) -> Arc<HostPrimary> {
        let hosts = list.hosts.len();
        Arc::new(HostPrimary {
            name: name.to_string(),
            list: list.clone(),
            login,
            // No configured primary: whichever host answers read-write first.
            election: Mutex::new(PrimaryElection::new(hosts, hosts)),
            elected: ArcSwap::from_pointee(ElectedHost {
                host: None,
                epoch: 0,
            }),
            decided: AtomicBool::new(false),
        })
    }

    /// Whether a reload may keep this election for `list` polled as `login`.
    pub fn same_setup(&self, list: &HostList, login: &ProbeLogin) -> bool {
        self.list == *list && self.login == *login
    }

    /// The host new connections go to now.
    pub fn elected(&self) -> ElectedHost {
        **self.elected.load()
    }

    /// The entry's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Applies one round of the hosts' roles, logs and publishes a move.
    pub fn on_round(&self, roles: &[HostRole]) {
        let mut election = self.election.lock().unwrap_or_else(PoisonError::into_inner);
        let change = election.on_round(roles);
        let host = election.elected();
        drop(election);
        self.decided.store(true, Ordering::Release);
        let Some(change) = change else {
            return;
        };
        let name = |host: Option<usize>| {
            host.and_then(|h| self.list.hosts.get(h))
                .map_or_else(|| "none".to_string(), ToString::to_string)
        };
        match change {
            PrimaryMove::Elected { from, to, timeline } => tracing::warn!(
                entry = %self.name,
                from = %name(from),
                to = %name(Some(to)),
                timeline,
                "primary moved: new server connections go to the host that is read-write on \
                 the newest timeline"
            ),
            PrimaryMove::Demoted { from } => tracing::warn!(
                entry = %self.name,
                from = %name(Some(from)),
                "the primary is in recovery: no host takes new connections until one is promoted"
            ),
        }
        let epoch = NEXT_EPOCH.fetch_add(1, Ordering::Relaxed);
        self.elected.store(Arc::new(ElectedHost { host, epoch }));
    }

    fn is_decided(&self) -> bool {
        self.decided.load(Ordering::Acquire)
    }
}

/// The polled hosts of one entry: each host's name resolved when it has no connection.
struct Hosts {
    polled: Vec<Option<Polled>>,
}

impl Hosts {
    fn new(count: usize) -> Hosts {
        Hosts {
            polled: (0..count).map(|_| None).collect(),
        }
    }

    /// One round: every host's role.
    fn round(&mut self, watch: &HostPrimary, health: &HealthConfig) -> Vec<HostRole> {
        let mut roles = Vec::with_capacity(self.polled.len());
        for (index, slot) in self.polled.iter_mut().enumerate() {
            if slot.is_none() {
                *slot = watch
                    .list
                    .hosts
                    .get(index)
                    .and_then(resolve)
                    .map(Polled::new);
            }
            let Some(polled) = slot.as_mut() else {
                roles.push(HostRole::Unreachable);
                continue;
            };
            let sent_at = Instant::now();
            let role = match polled.query(&watch.login, HOST_SQL, health) {
                Some(Ok(row)) => host_answer(&row, sent_at).role,
                Some(Err(_)) => {
                    // Resolved again for the next attempt (an address that moved).
                    *slot = None;
                    HostRole::Unreachable
                }
                None => HostRole::Unreachable,
            };
            roles.push(role);
        }
        roles
    }
}

/// A TCP address of `host` (a Unix socket directory is never polled: no election).
fn resolve(host: &pgtier_core::config::HostPort) -> Option<SocketAddr> {
    if host.host.starts_with('/') {
        return None;
    }
    (host.host.as_str(), host.port)
        .to_socket_addrs()
        .ok()?
        .next()
}

/// Runs the first round now, if none ran yet (so the first connections go to the primary).
pub(crate) fn first_round(watch: &HostPrimary, health: HealthConfig) {
    if !watch.is_decided() {
        let roles = Hosts::new(watch.list.hosts.len()).round(watch, &health);
        watch.on_round(&roles);
    }
}

/// Polls `watch`'s hosts every `health.interval` until `stop`.
pub(crate) fn watch_loop(watch: &HostPrimary, stop: &AtomicBool, health: HealthConfig) {
    let mut hosts = Hosts::new(watch.list.hosts.len());
    let interval = health.interval.max(Duration::from_millis(1));
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let roles = hosts.round(watch, &health);
        watch.on_round(&roles);
        let next = started + interval;
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::park_timeout((next - now).min(WAIT_SLICE));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_core::config::{HostPort, LoadBalanceHosts, TargetSessionAttrs};

    fn watch() -> Arc<HostPrimary> {
        let list = HostList {
            hosts: vec![
                HostPort {
                    host: "10.0.0.1".into(),
                    port: 5432,
                },
                HostPort {
                    host: "10.0.0.2".into(),
                    port: 5432,
                },
            ],
            balance: LoadBalanceHosts::RoundRobin,
            target: TargetSessionAttrs::ReadWrite,
        };
        let login = ProbeLogin {
            user: "u".into(),
            password: None,
            dbname: "d".into(),
        };
        HostPrimary::new("app", &list, login)
    }

    #[test]
    fn nothing_is_elected_before_a_round_and_moves_change_the_epoch() {
        let watch = watch();
        assert_eq!(watch.elected().host, None);
        watch.on_round(&[HostRole::Standby, HostRole::ReadWrite { timeline: 1 }]);
        let first = watch.elected();
        assert_eq!(first.host, Some(1));
        assert_ne!(first.epoch, 0);
        // The old primary back read-write on its timeline after host 0's promotion: fenced.
        watch.on_round(&[HostRole::ReadWrite { timeline: 2 }, HostRole::Unreachable]);
        watch.on_round(&[
            HostRole::ReadWrite { timeline: 2 },
            HostRole::ReadWrite { timeline: 1 },
        ]);
        let second = watch.elected();
        assert_eq!(second.host, Some(0));
        assert!(second.epoch > first.epoch);
    }
}
