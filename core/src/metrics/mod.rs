//! Counters and latency statistics shared between workers without locks. Workers count into
//! plain local fields and fold them into padded atomic totals in batches; per-replica session
//! counts are padded atomics written at session open/close; latency goes into fixed-bucket
//! histograms that merge without allocating.

mod histogram;
mod padded;
mod replica_load;
mod totals;

pub use histogram::{
    ClassLatency, HISTOGRAM_BUCKETS, IntervalSummary, LatencyHistogram, SharedHistogram,
};
pub use padded::CachePadded;
pub use replica_load::{ReplicaLoad, ReplicaLoadCounters};
pub use totals::{FlushPolicy, ShardCounters, SharedTotals, TotalsSnapshot};
