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
    DatabaseTotals, TIME_BUCKET_BOUNDS_US, TIME_BUCKETS, TimeBuckets,
};
pub use digests::{
    DEFAULT_DIGEST_STORE_CAPACITY, DigestCounts, DigestFold, DigestStats, DigestStore,
};
pub use histogram::{
    ClassLatency, HISTOGRAM_BUCKETS, IntervalSummary, LatencyHistogram, SharedHistogram,
};
pub use padded::CachePadded;
pub use totals::{FlushPolicy, ShardCounters, SharedTotals, TotalsSnapshot};
