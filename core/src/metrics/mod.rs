//! Counters and latency statistics shared between workers without locks. Workers count into
//! plain local fields and fold them into padded atomic totals in batches; per-replica session
//! counts are padded atomics written at session open/close; latency goes into fixed-bucket
//! histograms that merge without allocating; query digests are counted per shard and merged
//! into one locked store off the query path.

mod databases;
mod digests;
mod histogram;
mod padded;
mod totals;

pub use databases::{
    DatabaseAverages, DatabaseCounts, DatabaseRegistry, DatabaseSlot, DatabaseStats, DatabaseTally,
    TIME_BUCKET_BOUNDS_US, TimeBuckets,
};
pub use digests::{DigestCounts, DigestFold, DigestStats, DigestStore};
pub use histogram::{ClassLatency, IntervalSummary, LatencyHistogram, SharedHistogram};
pub use totals::{FlushPolicy, ShardCounters, SharedTotals, TotalsSnapshot};
