//! Counters of how admissions were decided, per router: the evidence that the common
//! admission needs no message and no lock, and how often shards raced.
//!
//! Admissions happen once per session, not per query, so shared relaxed counters cost nothing
//! that matters here.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters of one router.
#[derive(Debug, Default)]
pub(crate) struct RouterCounters {
    local_admissions: AtomicU64,
    control_admissions: AtomicU64,
    claim_races: AtomicU64,
    repins: AtomicU64,
    drain_moves: AtomicU64,
    failure_reports: AtomicU64,
}

/// A copy of a router's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterStats {
    /// Admissions placed on the calling shard (no message, no lock).
    pub local_admissions: u64,
    /// Admissions sent to the control shard (a role change was needed, or races were lost).
    pub control_admissions: u64,
    /// Local attempts that lost a race (counter changed or a snapshot was published) and
    /// decided again.
    pub claim_races: u64,
    /// Sessions moved off their replica with `repin` (failures and drain moves).
    pub repins: u64,
    /// Sessions the recovery-tail drain told to leave an overloaded survivor.
    pub drain_moves: u64,
    /// Server failures reported by shards.
    pub failure_reports: u64,
}

impl RouterCounters {
    pub(crate) fn local_admission(&self) {
        self.local_admissions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn control_admission(&self) {
        self.control_admissions.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn claim_race(&self) {
        self.claim_races.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn repin(&self) {
        self.repins.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn drain_move(&self) {
        self.drain_moves.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn failure_report(&self) {
        self.failure_reports.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RouterStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RouterStats {
            local_admissions: load(&self.local_admissions),
            control_admissions: load(&self.control_admissions),
            claim_races: load(&self.claim_races),
            repins: load(&self.repins),
            drain_moves: load(&self.drain_moves),
            failure_reports: load(&self.failure_reports),
        }
    }
}
