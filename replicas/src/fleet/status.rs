//! What the console (`SHOW FLEET`) and the metrics endpoint read of the fleet: an immutable
//! view the fleet thread replaces after every round, so readers never wait on the store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;

/// One member as the last round read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberView {
    /// The member's host id.
    pub host: String,
    /// Its last report, as the store's clock wrote it (text, as PostgreSQL prints it).
    pub last_report: String,
    /// Age of that report on the store's clock.
    pub age: Duration,
    /// Younger than `fleet_member_timeout`.
    pub live: bool,
}

/// The fleet as this host last saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetView {
    /// `fleet_name` ("" = no fleet).
    pub name: String,
    /// This host's id in the fleet.
    pub host: String,
    /// `off` (no fleet), `starting`, `fleet` or `local`.
    pub mode: &'static str,
    /// Why the mode is local, if it is.
    pub cause: Option<String>,
    /// The host holding the fleet's lock, as the stored table names it.
    pub leader: Option<String>,
    /// This host holds the lock.
    pub is_leader: bool,
    /// The newest fleet version this host applied (0: none since the store was reached).
    pub version: u64,
    /// The newest version in the store.
    pub stored_version: u64,
    /// Members with a row, newest report first.
    pub members: Vec<MemberView>,
}

/// The shared handle: the view plus counters that only grow.
#[derive(Debug)]
pub struct FleetStatus {
    view: ArcSwap<FleetView>,
    transitions_local: AtomicU64,
    versions_applied: AtomicU64,
    versions_published: AtomicU64,
    rounds_failed: AtomicU64,
}

impl Default for FleetStatus {
    fn default() -> FleetStatus {
        FleetStatus {
            view: ArcSwap::from_pointee(FleetView {
                mode: "off",
                ..FleetView::default()
            }),
            transitions_local: AtomicU64::new(0),
            versions_applied: AtomicU64::new(0),
            versions_published: AtomicU64::new(0),
            rounds_failed: AtomicU64::new(0),
        }
    }
}

/// Counters of [`FleetStatus`], read together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetCounters {
    /// Times this host fell back to local mode.
    pub went_local: u64,
    /// Fleet versions applied.
    pub applied: u64,
    /// Versions this host published as leader.
    pub published: u64,
    /// Rounds with the store that failed.
    pub failed_rounds: u64,
}

impl FleetStatus {
    /// A fresh status (mode `off`).
    pub fn new() -> Arc<FleetStatus> {
        Arc::new(FleetStatus::default())
    }

    /// The newest view.
    pub fn view(&self) -> Arc<FleetView> {
        self.view.load_full()
    }

    /// The counters.
    pub fn counters(&self) -> FleetCounters {
        FleetCounters {
            went_local: self.transitions_local.load(Ordering::Relaxed),
            applied: self.versions_applied.load(Ordering::Relaxed),
            published: self.versions_published.load(Ordering::Relaxed),
            failed_rounds: self.rounds_failed.load(Ordering::Relaxed),
        }
    }

    /// Replaces the view (the fleet thread after each round; tests).
    pub fn publish(&self, view: FleetView) {
        self.view.store(Arc::new(view));
    }

    pub(crate) fn count_local(&self) {
        self.transitions_local.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_applied(&self) {
        self.versions_applied.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_published(&self) {
        self.versions_published.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_failed_round(&self) {
        self.rounds_failed.fetch_add(1, Ordering::Relaxed);
    }
}
