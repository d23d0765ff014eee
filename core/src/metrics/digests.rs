//! The process-wide store of query digests: per (database, normalized text), the calls, rows,
//! time, errors and a time histogram of every query with that text, for `SHOW QUERIES` and
//! the metrics endpoint.
//!
//! No query touches it. Each shard counts into a map of its own and folds it in here at
//! housekeeping, before the console answers, and when its map fills up: the lock is taken
//! by those folds and by readers only. The store is bounded (`digest_store_capacity`): when a
//! new text does not fit, the least-called tenth of the entries go, and the evictions are
//! counted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::databases::{TIME_BUCKET_BOUNDS_US, TimeBuckets};

/// What the calls of one digest added up to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DigestCounts {
    /// Completed calls (a Query, or an extended-protocol segment up to its Sync).
    pub calls: u64,
    /// Rows the calls' CommandComplete tags reported (`SELECT 3`, `UPDATE 1`...).
    pub rows: u64,
    /// Time the calls ran, microseconds.
    pub total_time_us: u64,
    /// Calls answered with an ErrorResponse.
    pub errors: u64,
    /// Longest call, microseconds.
    pub max_time_us: u64,
    /// The calls' times (the buckets of `SHOW STATS`' histograms).
    pub times: TimeBuckets,
}

impl DigestCounts {
    /// One call that took `time_us`, reported `rows` and failed when `failed`.
    pub fn record(&mut self, time_us: u64, rows: u64, failed: bool) {
        self.calls += 1;
        self.rows += rows;
        self.total_time_us += time_us;
        self.errors += u64::from(failed);
        self.max_time_us = self.max_time_us.max(time_us);
        self.times.record(time_us);
    }

    /// Adds `other`'s calls.
    pub fn add(&mut self, other: &DigestCounts) {
        self.calls += other.calls;
        self.rows += other.rows;
        self.total_time_us += other.total_time_us;
        self.errors += other.errors;
        self.max_time_us = self.max_time_us.max(other.max_time_us);
        self.times.add(&other.times);
    }

    /// Mean time of a call, microseconds (0 without calls).
    pub fn mean_time_us(&self) -> u64 {
        self.total_time_us.checked_div(self.calls).unwrap_or(0)
    }

    /// The time under which a `quantile` (0..=1) of the calls ran: the upper bound of the
    /// bucket holding that rank, capped at the longest call (so never above what was seen;
    /// as coarse as the buckets, about three per decade). 0 without calls.
    pub fn quantile_us(&self, quantile: f64) -> u64 {
        let count = self.times.total();
        if count == 0 {
            return 0;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (bucket, observations) in self.times.counts.iter().enumerate() {
            seen += observations;
            if seen >= rank {
                let bound = TIME_BUCKET_BOUNDS_US
                    .get(bucket)
                    .copied()
                    .unwrap_or(u64::MAX);
                return bound.min(self.max_time_us);
            }
        }
        self.max_time_us
    }
}

/// One shard's pending counts of one digest, as it folds them.
#[derive(Clone, Copy, Debug)]
pub struct DigestFold<'a> {
    pub database: &'a Arc<str>,
    pub query_id: u64,
    /// The normalized text; `None` when the shard no longer has it (its map was cleared
    /// between the query and its answer): kept only if the store knows the digest.
    pub text: Option<&'a Arc<str>>,
    pub counts: &'a DigestCounts,
}

/// One digest as read from the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigestStats {
    pub database: Arc<str>,
    pub query_id: u64,
    pub text: Arc<str>,
    pub counts: DigestCounts,
}

#[derive(Debug)]
struct StoreEntry {
    text: Arc<str>,
    counts: DigestCounts,
}

#[derive(Debug, Default)]
struct StoreInner {
    entries: HashMap<(Arc<str>, u64), StoreEntry>,
    evicted: u64,
    unattributed: u64,
}

/// The merged digests of every shard.
#[derive(Debug)]
pub struct DigestStore {
    inner: Mutex<StoreInner>,
    capacity: AtomicUsize,
}

/// `digest_store_capacity`'s default.
pub(crate) const DEFAULT_DIGEST_STORE_CAPACITY: usize = 5000;

impl Default for DigestStore {
    fn default() -> DigestStore {
        DigestStore::new(DEFAULT_DIGEST_STORE_CAPACITY)
    }
}

impl DigestStore {
    pub fn new(capacity: usize) -> DigestStore {
        DigestStore {
            inner: Mutex::default(),
            capacity: AtomicUsize::new(capacity.max(1)),
        }
    }

    /// A reload changed `digest_store_capacity` (a smaller store shrinks at its next fold).
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity.max(1), Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, StoreInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds one shard's pending counts (one lock for the whole fold).
    pub fn merge<'a>(&self, folds: impl IntoIterator<Item = DigestFold<'a>>) {
        let capacity = self.capacity.load(Ordering::Relaxed);
        let mut inner = self.lock();
        for fold in folds {
            let key = (fold.database.clone(), fold.query_id);
            if let Some(entry) = inner.entries.get_mut(&key) {
                entry.counts.add(fold.counts);
                continue;
            }
            let Some(text) = fold.text else {
                inner.unattributed += fold.counts.calls;
                continue;
            };
            if inner.entries.len() >= capacity {
                inner.evict_least_called(capacity);
            }
            inner.entries.insert(
                key,
                StoreEntry {
                    text: text.clone(),
                    counts: *fold.counts,
                },
            );
        }
    }

    /// The `limit` digests with the most total time, most first (ties: most calls, then
    /// database and query id, so the order is stable).
    pub fn top_by_time(&self, limit: usize) -> Vec<DigestStats> {
        let inner = self.lock();
        let mut all: Vec<DigestStats> = inner
            .entries
            .iter()
            .map(|((database, query_id), entry)| DigestStats {
                database: database.clone(),
                query_id: *query_id,
                text: entry.text.clone(),
                counts: entry.counts,
            })
            .collect();
        drop(inner);
        all.sort_by(|a, b| {
            (b.counts.total_time_us, b.counts.calls)
                .cmp(&(a.counts.total_time_us, a.counts.calls))
                .then_with(|| (&a.database, a.query_id).cmp(&(&b.database, b.query_id)))
        });
        all.truncate(limit);
        all
    }

    /// Digests held now.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Digests evicted to make room since start.
    pub fn evicted(&self) -> u64 {
        self.lock().evicted
    }

    /// Calls whose text was lost (a shard's map cleared between a query and its answer,
    /// and the store no longer held the digest).
    pub fn unattributed_calls(&self) -> u64 {
        self.lock().unattributed
    }
}

impl StoreInner {
    /// Makes room for at least one entry under `capacity`: the least-called tenth goes (at
    /// once, so a store under churn does not scan itself at every new text).
    fn evict_least_called(&mut self, capacity: usize) {
        let over = (self.entries.len() + 1).saturating_sub(capacity);
        let count = (capacity / 10).max(1).max(over).min(self.entries.len());
        let mut calls: Vec<(u64, (Arc<str>, u64))> = self
            .entries
            .iter()
            .map(|(key, entry)| (entry.counts.calls, key.clone()))
            .collect();
        calls.select_nth_unstable_by_key(count - 1, |(calls, _)| *calls);
        for (_, key) in calls.into_iter().take(count) {
            self.entries.remove(&key);
        }
        self.evicted += count as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(calls: u64, time_us: u64) -> DigestCounts {
        let mut counts = DigestCounts::default();
        for _ in 0..calls {
            counts.record(time_us, 1, false);
        }
        counts
    }

    #[test]
    fn folds_of_several_shards_add_up_per_database_and_text() {
        let store = DigestStore::new(10);
        let (app, other) = (Arc::<str>::from("app"), Arc::<str>::from("other"));
        let text = Arc::<str>::from("SELECT $1");
        let a = counts(3, 100);
        let b = counts(2, 300);
        for (database, counts) in [(&app, &a), (&app, &b), (&other, &a)] {
            store.merge([DigestFold {
                database,
                query_id: 7,
                text: Some(&text),
                counts,
            }]);
        }
        let top = store.top_by_time(10);
        assert_eq!(top.len(), 2, "one digest per database");
        assert_eq!(&*top[0].database, "app");
        assert_eq!(top[0].counts.calls, 5);
        assert_eq!(top[0].counts.total_time_us, 900);
        assert_eq!(top[0].counts.rows, 5);
        assert_eq!(top[0].counts.max_time_us, 300);
        assert_eq!(top[1].counts.calls, 3);
        assert_eq!(store.top_by_time(1).len(), 1);
    }

    #[test]
    fn a_full_store_evicts_the_least_called_and_counts_them() {
        let store = DigestStore::new(10);
        let db = Arc::<str>::from("db");
        let text = Arc::<str>::from("q");
        for query_id in 0..10u64 {
            let counts = counts(query_id + 1, 1);
            store.merge([DigestFold {
                database: &db,
                query_id,
                text: Some(&text),
                counts: &counts,
            }]);
        }
        assert_eq!((store.len(), store.evicted()), (10, 0));
        let counts = counts(100, 1);
        store.merge([DigestFold {
            database: &db,
            query_id: 99,
            text: Some(&text),
            counts: &counts,
        }]);
        assert_eq!((store.len(), store.evicted()), (10, 1));
        let ids: Vec<u64> = store.top_by_time(20).iter().map(|d| d.query_id).collect();
        assert!(!ids.contains(&0), "the least called went: {ids:?}");
        assert!(ids.contains(&99));
    }

    #[test]
    fn a_fold_without_text_joins_a_known_digest_or_is_counted_lost() {
        let store = DigestStore::new(10);
        let db = Arc::<str>::from("db");
        let text = Arc::<str>::from("q");
        let one = counts(1, 1);
        store.merge([DigestFold {
            database: &db,
            query_id: 1,
            text: None,
            counts: &one,
        }]);
        assert!(store.is_empty());
        assert_eq!(store.unattributed_calls(), 1);
        store.merge([
            DigestFold {
                database: &db,
                query_id: 1,
                text: Some(&text),
                counts: &one,
            },
            DigestFold {
                database: &db,
                query_id: 1,
                text: None,
                counts: &one,
            },
        ]);
        assert_eq!(store.top_by_time(1)[0].counts.calls, 2);
    }

    #[test]
    fn quantiles_are_bucket_bounds_capped_at_the_longest_call() {
        let mut counts = DigestCounts::default();
        for _ in 0..95 {
            counts.record(80, 0, false);
        }
        for _ in 0..5 {
            counts.record(3_000, 0, true);
        }
        assert_eq!(counts.quantile_us(0.5), 100, "the bound of (0, 100]");
        assert_eq!(counts.quantile_us(0.95), 100);
        assert_eq!(
            counts.quantile_us(0.96),
            3_000,
            "(2500, 5000] capped at the longest"
        );
        assert_eq!(counts.quantile_us(1.0), 3_000, "bucket 5000 capped at 3000");
        assert_eq!(counts.errors, 5);
        assert_eq!(counts.mean_time_us(), (95 * 80 + 5 * 3_000) / 100);
        assert_eq!(DigestCounts::default().quantile_us(0.5), 0);
    }
}
