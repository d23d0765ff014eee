//! The stats sink: the shard's counters, its per-database tally, its query digests and
//! latency histograms not yet folded into the shared totals, the flush policy that decides
//! when they are, and the start of the current observation interval.

use std::time::Instant;

use pgtier_core::metrics::{ClassLatency, DatabaseTally, FlushPolicy, ShardCounters};

use crate::shared::LocalStats;

/// What the shard counted and has not folded yet.
pub(crate) struct StatsSink {
    pub(super) counters: ShardCounters,
    /// Per-database counts not yet folded (`SHOW STATS`, the metrics endpoint).
    pub(super) databases: DatabaseTally,
    /// Query digests not yet folded (`SHOW QUERIES`, the metrics endpoint).
    pub(super) digests: crate::digests::ShardDigests,
    pub(super) flush_policy: FlushPolicy,
    pub(super) local: LocalStats,
    pub(super) latency: ClassLatency,
    /// Start of the current observation interval (shard 0 closes intervals).
    pub(super) interval_started: Instant,
}

impl StatsSink {
    pub(super) fn new(
        digests: crate::digests::ShardDigests,
        flush_policy: FlushPolicy,
        now: Instant,
    ) -> StatsSink {
        StatsSink {
            counters: ShardCounters::default(),
            databases: DatabaseTally::default(),
            digests,
            flush_policy,
            local: LocalStats::default(),
            latency: ClassLatency::default(),
            interval_started: now,
        }
    }
}
