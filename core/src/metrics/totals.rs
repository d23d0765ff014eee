//! Traffic totals. Each worker counts into a [`ShardCounters`] it owns (plain integers, no
//! atomics on the query path) and folds them into the process-wide [`SharedTotals`] every
//! `counter_flush_queries` queries or `counter_flush_bytes` bytes, and at housekeeping and
//! before an admin read, so totals lag by at most one batch per worker.

use super::databases::{TIME_BUCKETS, TimeBuckets};
use super::padded::CachePadded;
use crate::class::{CLASS_COUNT, ClassSetting};
use std::sync::atomic::{AtomicU64, Ordering};

/// When a worker folds its counters into the totals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushPolicy {
    /// Queries counted since the last flush (`counter_flush_queries`).
    pub queries: u32,
    /// Bytes in either direction since the last flush (`counter_flush_bytes`).
    pub bytes: u32,
}

impl Default for FlushPolicy {
    fn default() -> FlushPolicy {
        FlushPolicy {
            queries: 64,
            bytes: 64 * 1024,
        }
    }
}

impl From<&crate::config::Settings> for FlushPolicy {
    /// `counter_flush_queries` and `counter_flush_bytes`.
    fn from(settings: &crate::config::Settings) -> FlushPolicy {
        FlushPolicy {
            queries: settings.counter_flush_queries,
            bytes: settings.counter_flush_bytes,
        }
    }
}

/// Plain totals, as counted by one worker or read from the shared totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TotalsSnapshot {
    /// Completed queries per class (goodput), indexed by [`ClassSetting::index`].
    pub queries: [u64; CLASS_COUNT],
    /// Completed transactions per class.
    pub transactions: [u64; CLASS_COUNT],
    /// Bytes received from clients.
    pub received_bytes: u64,
    /// Bytes sent to clients.
    pub sent_bytes: u64,
    /// Time spent in queries, microseconds.
    pub query_time_us: u64,
    /// Time spent in transactions, microseconds.
    pub transaction_time_us: u64,
    /// Time clients waited for a server, microseconds.
    pub wait_time_us: u64,
    /// Query durations per class, in the metrics endpoint's coarse buckets (cumulative since
    /// start, unlike the per-interval histograms of `SHOW CLASS_STATS`).
    pub query_times: [TimeBuckets; CLASS_COUNT],
    /// Time spent in queries per class, microseconds (the sum of `query_times`).
    pub class_query_time_us: [u64; CLASS_COUNT],
}

impl TotalsSnapshot {
    /// Queries of both classes.
    pub fn total_queries(&self) -> u64 {
        self.queries.iter().sum()
    }

    /// Transactions of both classes.
    pub fn total_transactions(&self) -> u64 {
        self.transactions.iter().sum()
    }
}

/// One worker's unflushed counts.
#[derive(Debug, Default)]
pub struct ShardCounters {
    counts: TotalsSnapshot,
    queries_since_flush: u32,
    received_since_flush: u64,
    sent_since_flush: u64,
}

impl ShardCounters {
    /// Counts one completed query of `class` that took `duration_us`.
    pub fn record_query(&mut self, class: ClassSetting, duration_us: u64) {
        self.counts.queries[class.index()] += 1;
        self.counts.query_time_us += duration_us;
        self.counts.query_times[class.index()].record(duration_us);
        self.counts.class_query_time_us[class.index()] += duration_us;
        self.queries_since_flush += 1;
    }

    /// Counts one completed transaction of `class` that took `duration_us`.
    pub fn record_transaction(&mut self, class: ClassSetting, duration_us: u64) {
        self.counts.transactions[class.index()] += 1;
        self.counts.transaction_time_us += duration_us;
    }

    /// Counts bytes moved from and to clients.
    pub fn record_bytes(&mut self, received_bytes: u64, sent_bytes: u64) {
        self.counts.received_bytes += received_bytes;
        self.counts.sent_bytes += sent_bytes;
        self.received_since_flush += received_bytes;
        self.sent_since_flush += sent_bytes;
    }

    /// Counts time a client waited for a server.
    pub fn record_wait(&mut self, wait_us: u64) {
        self.counts.wait_time_us += wait_us;
    }

    /// Whether a batch is full.
    pub(crate) fn should_flush(&self, policy: FlushPolicy) -> bool {
        let bytes = u64::from(policy.bytes);
        self.queries_since_flush >= policy.queries
            || self.received_since_flush >= bytes
            || self.sent_since_flush >= bytes
    }

    /// Flushes when a batch is full; returns whether it did.
    pub fn maybe_flush(&mut self, policy: FlushPolicy, totals: &SharedTotals) -> bool {
        let full = self.should_flush(policy);
        if full {
            self.flush_into(totals);
        }
        full
    }

    /// Adds everything counted so far to `totals` and starts a new batch.
    pub fn flush_into(&mut self, totals: &SharedTotals) {
        totals.add(&self.counts);
        *self = ShardCounters::default();
    }

    /// Counts not yet flushed.
    pub fn pending(&self) -> &TotalsSnapshot {
        &self.counts
    }
}

/// Process-wide totals, each counter on its own cache line.
#[derive(Debug, Default)]
pub struct SharedTotals {
    queries: [CachePadded<AtomicU64>; CLASS_COUNT],
    transactions: [CachePadded<AtomicU64>; CLASS_COUNT],
    received_bytes: CachePadded<AtomicU64>,
    sent_bytes: CachePadded<AtomicU64>,
    query_time_us: CachePadded<AtomicU64>,
    transaction_time_us: CachePadded<AtomicU64>,
    wait_time_us: CachePadded<AtomicU64>,
    query_times: [CachePadded<[AtomicU64; TIME_BUCKETS]>; CLASS_COUNT],
    class_query_time_us: [CachePadded<AtomicU64>; CLASS_COUNT],
}

impl SharedTotals {
    /// Zero totals.
    pub fn new() -> SharedTotals {
        SharedTotals::default()
    }

    fn add(&self, counts: &TotalsSnapshot) {
        let add = |counter: &AtomicU64, value: u64| {
            if value > 0 {
                counter.fetch_add(value, Ordering::Relaxed);
            }
        };
        for class in 0..CLASS_COUNT {
            add(&self.queries[class], counts.queries[class]);
            add(&self.transactions[class], counts.transactions[class]);
            add(
                &self.class_query_time_us[class],
                counts.class_query_time_us[class],
            );
            for (shared, local) in self.query_times[class]
                .iter()
                .zip(counts.query_times[class].counts)
            {
                add(shared, local);
            }
        }
        add(&self.received_bytes, counts.received_bytes);
        add(&self.sent_bytes, counts.sent_bytes);
        add(&self.query_time_us, counts.query_time_us);
        add(&self.transaction_time_us, counts.transaction_time_us);
        add(&self.wait_time_us, counts.wait_time_us);
    }

    /// The totals now (each counter read separately: a snapshot taken during a flush may
    /// include part of that batch).
    pub fn snapshot(&self) -> TotalsSnapshot {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        TotalsSnapshot {
            queries: std::array::from_fn(|class| read(&self.queries[class])),
            transactions: std::array::from_fn(|class| read(&self.transactions[class])),
            received_bytes: read(&self.received_bytes),
            sent_bytes: read(&self.sent_bytes),
            query_time_us: read(&self.query_time_us),
            transaction_time_us: read(&self.transaction_time_us),
            wait_time_us: read(&self.wait_time_us),
            class_query_time_us: std::array::from_fn(|class| {
                read(&self.class_query_time_us[class])
            }),
            query_times: std::array::from_fn(|class| TimeBuckets {
                counts: std::array::from_fn(|bucket| read(&self.query_times[class][bucket])),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn batches_flush_by_queries_or_bytes() {
        let policy = FlushPolicy {
            queries: 3,
            bytes: 100,
        };
        let totals = SharedTotals::new();
        let mut counters = ShardCounters::default();
        counters.record_query(ClassSetting::PREMIUM, 10);
        counters.record_query(ClassSetting::FREEMIUM, 10);
        assert!(!counters.maybe_flush(policy, &totals));
        assert_eq!(totals.snapshot().total_queries(), 0);
        counters.record_query(ClassSetting::PREMIUM, 10);
        assert!(counters.maybe_flush(policy, &totals));
        assert_eq!(totals.snapshot().queries, [2, 1, 0, 0]);
        assert_eq!(totals.snapshot().query_time_us, 30);
        counters.record_bytes(0, 100);
        assert!(counters.should_flush(policy));
    }

    #[test]
    fn flush_policy_defaults_match_settings() {
        let settings = crate::config::Settings::default();
        assert_eq!(FlushPolicy::from(&settings), FlushPolicy::default());
    }

    #[test]
    fn totals_add_up_under_threads() {
        const THREADS: u64 = 8;
        const QUERIES: u64 = 10_000;
        let totals = Arc::new(SharedTotals::new());
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let totals = Arc::clone(&totals);
                std::thread::spawn(move || {
                    let mut counters = ShardCounters::default();
                    for query in 0..QUERIES {
                        let class = ClassSetting::ALL[(query % 2) as usize];
                        counters.record_query(class, 1);
                        counters.record_transaction(class, 2);
                        counters.record_bytes(3, 4);
                        counters.record_wait(5);
                        counters.maybe_flush(FlushPolicy::default(), &totals);
                    }
                    counters.flush_into(&totals);
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker panicked");
        }
        let snapshot = totals.snapshot();
        let total = THREADS * QUERIES;
        assert_eq!(snapshot.queries, [total / 2, total / 2, 0, 0]);
        assert_eq!(snapshot.total_transactions(), total);
        assert_eq!(snapshot.received_bytes, 3 * total);
        assert_eq!(snapshot.sent_bytes, 4 * total);
        assert_eq!(snapshot.query_time_us, total);
        assert_eq!(snapshot.transaction_time_us, 2 * total);
        assert_eq!(snapshot.wait_time_us, 5 * total);
        assert_eq!(snapshot.query_times[0].total(), total / 2);
        assert_eq!(
            snapshot.query_times[1].counts[0],
            total / 2,
            "1 µs <= 100 µs"
        );
    }

    #[test]
    fn shared_counters_are_padded() {
        assert_eq!(std::mem::align_of::<CachePadded<AtomicU64>>(), 128);
        assert_eq!(std::mem::size_of::<CachePadded<AtomicU64>>(), 128);
    }
}
