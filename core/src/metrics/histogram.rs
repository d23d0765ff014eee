//! Latency histograms for per-class p50/p95 per observation interval. Log-linear buckets: 16
//! linear sub-buckets per power of two, so any recorded value is reported within 1/16 (6.25 %)
//! of itself; values are microseconds up to 2^40 (about 12 days), larger ones land in the last
//! bucket. Fixed size, so recording never allocates and histograms merge bucket by bucket.

use crate::class::{CLASS_COUNT, ClassSetting};
use std::sync::atomic::{AtomicU64, Ordering};

/// log2 of the linear sub-buckets per power of two.
const SUB_BITS: u32 = 4;
const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Highest power of two tracked: values up to 2^(MAX_EXPONENT+1) - 1.
const MAX_EXPONENT: u32 = 39;
/// Number of buckets.
pub(crate) const HISTOGRAM_BUCKETS: usize =
    (MAX_EXPONENT - SUB_BITS) as usize * SUB_BUCKETS + 2 * SUB_BUCKETS;
const MAX_VALUE: u64 = (1 << (MAX_EXPONENT + 1)) - 1;

/// Bucket of `value`: exact below 32, then 16 per power of two.
fn bucket_of(value: u64) -> usize {
    let value = value.min(MAX_VALUE);
    if value < 2 * SUB_BUCKETS as u64 {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BITS;
    shift as usize * SUB_BUCKETS + (value >> shift) as usize
}

/// Largest value that falls in `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    if bucket < 2 * SUB_BUCKETS {
        return bucket as u64;
    }
    let shift = (bucket / SUB_BUCKETS - 1) as u32;
    let mantissa = (bucket % SUB_BUCKETS + SUB_BUCKETS) as u64;
    ((mantissa + 1) << shift) - 1
}

/// p50, p95 and count of one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalSummary {
    pub count: u64,
    /// Median in microseconds (0 when empty).
    pub p50_us: u64,
    /// 95th percentile in microseconds (0 when empty).
    pub p95_us: u64,
}

/// A histogram owned by one worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencyHistogram {
    buckets: [u64; HISTOGRAM_BUCKETS],
    count: u64,
    max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> LatencyHistogram {
        LatencyHistogram {
            buckets: [0; HISTOGRAM_BUCKETS],
            count: 0,
            max_us: 0,
        }
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> LatencyHistogram {
        LatencyHistogram::default()
    }

    /// Records one latency.
    pub fn record(&mut self, value_us: u64) {
        self.buckets[bucket_of(value_us)] += 1;
        self.count += 1;
        self.max_us = self.max_us.max(value_us);
    }

    /// Adds `other`'s observations.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.max_us = self.max_us.max(other.max_us);
    }

    /// Observations recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Largest value recorded.
    pub fn max_us(&self) -> u64 {
        self.max_us
    }

    /// The value at quantile `quantile` (0..=1): the upper edge of the bucket holding that
    /// rank, capped at the largest value seen. None when empty.
    pub fn percentile(&self, quantile: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let quantile = quantile.clamp(0.0, 1.0);
        let rank = ((quantile * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (bucket, observations) in self.buckets.iter().enumerate() {
            seen += observations;
            if seen >= rank {
                return Some(bucket_high(bucket).min(self.max_us));
            }
        }
        Some(self.max_us)
    }

    /// Count, p50 and p95.
    pub fn summary(&self) -> IntervalSummary {
        IntervalSummary {
            count: self.count,
            p50_us: self.percentile(0.50).unwrap_or(0),
            p95_us: self.percentile(0.95).unwrap_or(0),
        }
    }

    /// Empties the histogram (start of a new interval).
    pub fn reset(&mut self) {
        *self = LatencyHistogram::default();
    }
}

/// One histogram per class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassLatency {
    by_class: [LatencyHistogram; CLASS_COUNT],
}

impl ClassLatency {
    /// Records a latency of `class`.
    pub fn record(&mut self, class: ClassSetting, value_us: u64) {
        self.by_class[class.index()].record(value_us);
    }

    /// The histogram of `class`.
    pub fn of(&self, class: ClassSetting) -> &LatencyHistogram {
        &self.by_class[class.index()]
    }

    /// Adds another worker's observations.
    pub fn merge(&mut self, other: &ClassLatency) {
        for (mine, theirs) in self.by_class.iter_mut().zip(other.by_class.iter()) {
            mine.merge(theirs);
        }
    }

    /// Count, p50 and p95 of `class`.
    pub fn summary(&self, class: ClassSetting) -> IntervalSummary {
        self.of(class).summary()
    }

    /// Empties both histograms.
    pub fn reset(&mut self) {
        self.by_class.iter_mut().for_each(LatencyHistogram::reset);
    }
}

/// A histogram several workers merge into and a reader drains once per interval.
#[derive(Debug)]
pub struct SharedHistogram {
    buckets: Box<[AtomicU64]>,
    count: AtomicU64,
    max_us: AtomicU64,
}

impl Default for SharedHistogram {
    fn default() -> SharedHistogram {
        SharedHistogram {
            buckets: (0..HISTOGRAM_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            max_us: AtomicU64::new(0),
        }
    }
}

impl SharedHistogram {
    /// An empty shared histogram.
    pub fn new() -> SharedHistogram {
        SharedHistogram::default()
    }

    /// Adds a worker's histogram (then the worker resets its own).
    pub fn merge_from(&self, local: &LatencyHistogram) {
        for (shared, observations) in self.buckets.iter().zip(local.buckets.iter()) {
            if *observations > 0 {
                shared.fetch_add(*observations, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(local.count, Ordering::Relaxed);
        self.max_us.fetch_max(local.max_us, Ordering::Relaxed);
    }

    /// Moves everything into `out` (which is reset first) and empties this histogram. A merge
    /// racing with the drain lands in this interval or the next, never in neither.
    pub fn take_into(&self, out: &mut LatencyHistogram) {
        out.reset();
        for (shared, bucket) in self.buckets.iter().zip(out.buckets.iter_mut()) {
            *bucket = shared.swap(0, Ordering::Relaxed);
        }
        self.count.swap(0, Ordering::Relaxed);
        out.count = out.buckets.iter().sum();
        out.max_us = self.max_us.swap(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(actual: u64, expected: u64) {
        let error = actual.abs_diff(expected) as f64 / expected as f64;
        assert!(
            error <= 1.0 / 16.0,
            "{actual} is not within 6.25% of {expected}"
        );
    }

    #[test]
    fn buckets_are_contiguous_and_ordered() {
        let mut previous_high = None;
        for bucket in 0..HISTOGRAM_BUCKETS {
            let high = bucket_high(bucket);
            assert_eq!(bucket_of(high), bucket, "bucket {bucket}");
            if let Some(previous) = previous_high {
                assert_eq!(
                    bucket_of(previous + 1),
                    bucket,
                    "gap before bucket {bucket}"
                );
            }
            previous_high = Some(high);
        }
        assert_eq!(bucket_of(u64::MAX), HISTOGRAM_BUCKETS - 1);
    }

    #[test]
    fn small_values_are_exact() {
        let mut histogram = LatencyHistogram::new();
        for value in [3, 3, 7] {
            histogram.record(value);
        }
        assert_eq!(histogram.percentile(0.5), Some(3));
        assert_eq!(histogram.percentile(1.0), Some(7));
    }

    #[test]
    fn percentiles_of_uniform_values() {
        let mut histogram = LatencyHistogram::new();
        for value in 1..=10_000 {
            histogram.record(value);
        }
        let summary = histogram.summary();
        assert_eq!(summary.count, 10_000);
        assert_close(summary.p50_us, 5_000);
        assert_close(summary.p95_us, 9_500);
        assert_eq!(histogram.percentile(1.0), Some(10_000));
    }

    #[test]
    fn empty_histogram_has_no_percentile() {
        assert_eq!(LatencyHistogram::new().percentile(0.5), None);
        assert_eq!(
            LatencyHistogram::new().summary(),
            IntervalSummary::default()
        );
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut left = LatencyHistogram::new();
        let mut right = LatencyHistogram::new();
        let mut both = LatencyHistogram::new();
        for value in 0..5_000u64 {
            let target = if value % 3 == 0 {
                &mut left
            } else {
                &mut right
            };
            target.record(value * 17);
            both.record(value * 17);
        }
        left.merge(&right);
        assert_eq!(left, both);
    }

    #[test]
    fn per_class_summaries_are_separate() {
        let mut latency = ClassLatency::default();
        for _ in 0..100 {
            latency.record(ClassSetting::PREMIUM, 1_000);
            latency.record(ClassSetting::FREEMIUM, 50_000);
        }
        assert_close(latency.summary(ClassSetting::PREMIUM).p95_us, 1_000);
        assert_close(latency.summary(ClassSetting::FREEMIUM).p50_us, 50_000);
        latency.reset();
        assert_eq!(latency.summary(ClassSetting::PREMIUM).count, 0);
    }

    #[test]
    fn shared_histogram_merges_threads_and_drains() {
        let shared = std::sync::Arc::new(SharedHistogram::new());
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let shared = std::sync::Arc::clone(&shared);
                std::thread::spawn(move || {
                    let mut local = LatencyHistogram::new();
                    for value in 1..=1_000 {
                        local.record(value);
                    }
                    shared.merge_from(&local);
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker panicked");
        }
        let mut drained = LatencyHistogram::new();
        shared.take_into(&mut drained);
        assert_eq!(drained.count(), 4_000);
        assert_close(drained.percentile(0.5).unwrap_or(0), 500);
        shared.take_into(&mut drained);
        assert_eq!(drained.count(), 0);
    }
}
