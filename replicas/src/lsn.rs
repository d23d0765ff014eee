//! WAL positions of one reader entry, as the LSN poller sees them, and the immutable view of
//! them that read routing consults: the primary's recent insert positions with the instant
//! each was asked for, every replica's replay position, its lag and whether the lag cap
//! excludes it.
//!
//! Pure: the poller ([`crate::lsn_poll`]) feeds [`LsnTracker`] with samples and
//! instants; tests feed it by hand.
//!
//! Read-your-writes. A sample `(sent_at, lsn)` was asked for at `sent_at`, before its query
//! went out, so every transaction acknowledged before `sent_at` has its commit record below
//! `lsn`. A read that must see everything committed before `t` therefore targets the `lsn` of
//! the earliest sample with `sent_at > t` ([`LsnView::target_after`]); until such a sample
//! exists the read is not placeable yet. When `t` is older than the whole ring, the oldest
//! sample is a valid (more demanding) target, so the ring only bounds how precise old targets
//! are, not whether they are right.
//!
//! Lag. `lag_bytes` = newest primary sample − replay (saturating); `lag` = now − `sent_at` of
//! the oldest sample the replica has not replayed (zero when it replayed the newest). The cap
//! (`max_replica_lag_bytes`, `max_replica_lag_seconds`, either, 0 = off) excludes a replica
//! while it is past a cap, and lets it back once it is at or under three quarters of every cap
//! (hysteresis, so a replica hovering at the cap does not flap on every poll).
//!
//! A replica whose poll fails keeps its last replay position but is stale: it is ready for no
//! target until a poll succeeds again, and its lag keeps growing with the primary.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use pgtier_core::config::ReadSettings;

/// Primary samples kept. At the default 10 ms poll this spans 2.5 s, more than the default
/// `read_your_writes_timeout` (1 s); older targets fall back to the oldest sample (correct,
/// only more demanding).
pub(crate) const LSN_SAMPLES: usize = 256;

/// A WAL position (PostgreSQL's `pg_lsn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// Parses PostgreSQL's text form, `X/Y` with both halves in hex (e.g. `0/3000148`).
    pub fn parse(text: &[u8]) -> Option<Lsn> {
        let text = std::str::from_utf8(text).ok()?;
        let (high, low) = text.split_once('/')?;
        let high = u32::from_str_radix(high, 16).ok()?;
        let low = u32::from_str_radix(low, 16).ok()?;
        Some(Lsn(u64::from(high) << 32 | u64::from(low)))
    }

    /// Bytes from `older` to `self`, zero when `older` is not older.
    pub(crate) fn bytes_since(self, older: Lsn) -> u64 {
        self.0.saturating_sub(older.0)
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

/// Size of a WAL page header (`SizeOfXLogShortPHD`), and of the long header that starts a
/// segment (`SizeOfXLogLongPHD`).
const SHORT_PAGE_HEADER: u64 = 24;
const LONG_PAGE_HEADER: u64 = 40;

/// The end position equivalent to an insert position. `pg_current_wal_insert_lsn()` reports a
/// position at a page start as the byte after the page header, while a standby's replay
/// position after a record that ended exactly at the page boundary is the boundary itself:
/// without this, a caught-up replica would look a header behind until the next WAL record.
/// Nothing can end inside a header, so the two positions are the same point of the stream.
pub(crate) fn insert_lsn_as_end(insert: Lsn, wal_block_size: u64) -> Lsn {
    if wal_block_size == 0 {
        return insert;
    }
    let offset = insert.0 % wal_block_size;
    if offset == SHORT_PAGE_HEADER || offset == LONG_PAGE_HEADER {
        Lsn(insert.0 - offset)
    } else {
        insert
    }
}

/// One insert position of the primary, with the instant its query was about to be sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LsnSample {
    pub sent_at: Instant,
    pub lsn: Lsn,
}

/// The lag cap of a reader entry; zero parts are off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LagCap {
    pub bytes: u64,
    pub time: Duration,
}

impl LagCap {
    /// The cap of `ReadSettings`.
    pub fn from_settings(settings: &ReadSettings) -> LagCap {
        LagCap {
            bytes: settings.max_replica_lag_bytes,
            time: settings.max_replica_lag,
        }
    }

    fn exceeded(&self, lag_bytes: u64, lag: Duration) -> bool {
        (self.bytes > 0 && lag_bytes > self.bytes) || (!self.time.is_zero() && lag > self.time)
    }

    /// At or under three quarters of every cap that is on.
    fn cleared(&self, lag_bytes: u64, lag: Duration) -> bool {
        let bytes_ok = self.bytes == 0 || lag_bytes <= self.bytes - self.bytes / 4;
        let time_ok = self.time.is_zero() || lag <= self.time.mul_f64(0.75);
        bytes_ok && time_ok
    }
}

/// One replica in a published view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaLsn {
    /// The newest replay position read (`None`: never read).
    pub replay: Option<Lsn>,
    /// The newest poll failed: `replay` may be old.
    pub stale: bool,
    pub lag_bytes: u64,
    pub lag: Duration,
    /// Past the lag cap: gets no new reads.
    pub excluded: bool,
}

/// What read routing consults: published by the poller after every round.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LsnView {
    /// Primary samples, oldest first (ordered by `sent_at`).
    samples: Vec<LsnSample>,
    replicas: Vec<ReplicaLsn>,
    /// The newest poll of the primary failed.
    pub primary_stale: bool,
}

impl LsnView {
    /// The view before any poll: no sample, no replay position.
    pub fn empty(replicas: usize) -> LsnView {
        LsnView {
            samples: Vec::new(),
            replicas: vec![ReplicaLsn::default(); replicas],
            primary_stale: false,
        }
    }

    /// The WAL position a read must wait for to see every commit acknowledged before
    /// `after`: the earliest sample asked for later than `after` (`None`: none yet).
    pub fn target_after(&self, after: Instant) -> Option<Lsn> {
        let first_later = self.samples.partition_point(|s| s.sent_at <= after);
        self.samples.get(first_later).map(|s| s.lsn)
    }

    /// The newest insert position of the primary.
    pub fn primary_lsn(&self) -> Option<Lsn> {
        self.samples.last().map(|s| s.lsn)
    }

    /// The primary samples kept, oldest first.
    pub fn samples(&self) -> &[LsnSample] {
        &self.samples
    }

    /// Replica `index` (configured order).
    pub fn replica(&self, index: usize) -> Option<&ReplicaLsn> {
        self.replicas.get(index)
    }

    /// Whether replica `index` has replayed `target` (a stale replica has not, whatever it
    /// last said).
    pub fn is_ready(&self, index: usize, target: Lsn) -> bool {
        self.replica(index)
            .is_some_and(|r| !r.stale && r.replay.is_some_and(|replay| replay >= target))
    }

    /// Whether the lag cap excludes replica `index`.
    pub fn is_excluded(&self, index: usize) -> bool {
        self.replica(index).is_some_and(|r| r.excluded)
    }
}

/// The poller's state of one reader entry.
#[derive(Debug)]
pub struct LsnTracker {
    samples: VecDeque<LsnSample>,
    capacity: usize,
    replicas: Vec<ReplicaLsn>,
    cap: LagCap,
    primary_stale: bool,
}

impl LsnTracker {
    /// A tracker of `replicas` replicas keeping `LSN_SAMPLES` samples.
    pub fn new(replicas: usize, cap: LagCap) -> LsnTracker {
        LsnTracker::with_capacity(replicas, cap, LSN_SAMPLES)
    }

    /// A tracker keeping `capacity` samples (at least one).
    pub fn with_capacity(replicas: usize, cap: LagCap, capacity: usize) -> LsnTracker {
        let capacity = capacity.max(1);
        LsnTracker {
            samples: VecDeque::with_capacity(capacity),
            capacity,
            replicas: vec![ReplicaLsn::default(); replicas],
            cap,
            primary_stale: false,
        }
    }

    /// The primary's insert position was `lsn` when asked at `sent_at`. Samples must come in
    /// `sent_at` order (one poller asks one query at a time); an older one is ignored.
    pub fn on_primary(&mut self, sent_at: Instant, lsn: Lsn) {
        self.primary_stale = false;
        if self
            .samples
            .back()
            .is_some_and(|last| last.sent_at > sent_at)
        {
            return;
        }
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back(LsnSample { sent_at, lsn });
    }

    /// The primary could not be polled.
    pub(crate) fn on_primary_failed(&mut self) {
        self.primary_stale = true;
    }

    /// Replica `index` has replayed up to `replay`.
    pub fn on_replica(&mut self, index: usize, replay: Lsn) {
        if let Some(replica) = self.replicas.get_mut(index) {
            replica.replay = Some(replay);
            replica.stale = false;
        }
    }

    /// Replica `index` could not be polled: its last position is kept, marked stale.
    pub(crate) fn on_replica_failed(&mut self, index: usize) {
        if let Some(replica) = self.replicas.get_mut(index) {
            replica.stale = true;
        }
    }

    /// Computes every replica's lag at `now`, applies the cap, and returns the view to
    /// publish.
    pub fn view(&mut self, now: Instant) -> LsnView {
        let newest = self.samples.back().map(|s| s.lsn);
        for replica in &mut self.replicas {
            let Some(replay) = replica.replay else {
                continue;
            };
            replica.lag_bytes = newest.map_or(0, |lsn| lsn.bytes_since(replay));
            replica.lag = self
                .samples
                .iter()
                .find(|s| s.lsn > replay)
                .map_or(Duration::ZERO, |s| now.saturating_duration_since(s.sent_at));
            replica.excluded = if replica.excluded {
                !self.cap.cleared(replica.lag_bytes, replica.lag)
            } else {
                self.cap.exceeded(replica.lag_bytes, replica.lag)
            };
        }
        LsnView {
            samples: self.samples.iter().copied().collect(),
            replicas: self.replicas.clone(),
            primary_stale: self.primary_stale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn cap(bytes: u64, time: Duration) -> LagCap {
        LagCap { bytes, time }
    }

    #[test]
    fn lsn_text_round_trips() {
        for text in ["0/0", "0/3000148", "16/B374D848", "FFFFFFFF/FFFFFFFF"] {
            let lsn = Lsn::parse(text.as_bytes()).expect(text);
            assert_eq!(lsn.to_string(), text);
        }
        assert_eq!(Lsn::parse(b"0/3000148"), Some(Lsn(0x0300_0148)));
        assert_eq!(Lsn::parse(b"1/0"), Some(Lsn(1 << 32)));
        for bad in ["", "0", "0/", "/1", "g/1", "0/1/2", "100000000/0"] {
            assert_eq!(Lsn::parse(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn an_insert_position_after_a_page_header_is_the_page_start() {
        assert_eq!(insert_lsn_as_end(Lsn(8192 * 5 + 24), 8192), Lsn(8192 * 5));
        assert_eq!(insert_lsn_as_end(Lsn(16 << 20 | 40), 8192), Lsn(16 << 20));
        assert_eq!(
            insert_lsn_as_end(Lsn(8192 * 5 + 25), 8192),
            Lsn(8192 * 5 + 25)
        );
        assert_eq!(insert_lsn_as_end(Lsn(8192 * 5), 8192), Lsn(8192 * 5));
        assert_eq!(insert_lsn_as_end(Lsn(8192 + 24), 0), Lsn(8192 + 24));
    }

    #[test]
    fn a_target_is_the_earliest_sample_asked_after_the_commit() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(1, LagCap::default());
        assert_eq!(tracker.view(start).target_after(start), None);
        for (ms, lsn) in [(10, 100), (20, 150), (30, 150), (40, 400)] {
            tracker.on_primary(start + ms * MS, Lsn(lsn));
        }
        let view = tracker.view(start + 50 * MS);
        assert_eq!(view.target_after(start), Some(Lsn(100)));
        assert_eq!(
            view.target_after(start + 10 * MS),
            Some(Lsn(150)),
            "sent_at must be later"
        );
        assert_eq!(view.target_after(start + 25 * MS), Some(Lsn(150)));
        assert_eq!(view.target_after(start + 35 * MS), Some(Lsn(400)));
        assert_eq!(view.target_after(start + 40 * MS), None, "not asked yet");
        assert_eq!(view.primary_lsn(), Some(Lsn(400)));
    }

    #[test]
    fn the_ring_keeps_the_newest_samples_and_old_targets_use_the_oldest() {
        let start = Instant::now();
        let mut tracker = LsnTracker::with_capacity(1, LagCap::default(), 4);
        for i in 1..=10u64 {
            tracker.on_primary(start + Duration::from_millis(i), Lsn(i * 10));
        }
        let view = tracker.view(start + 20 * MS);
        assert_eq!(view.samples().len(), 4);
        assert_eq!(view.target_after(start), Some(Lsn(70)));
        // A sample out of order is ignored rather than breaking the ordering.
        tracker.on_primary(start, Lsn(1));
        assert_eq!(tracker.view(start + 20 * MS).samples().len(), 4);
    }

    #[test]
    fn readiness_needs_a_fresh_replay_at_or_past_the_target() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(2, LagCap::default());
        tracker.on_primary(start + MS, Lsn(500));
        assert!(!tracker.view(start).is_ready(0, Lsn(500)), "never polled");
        tracker.on_replica(0, Lsn(499));
        tracker.on_replica(1, Lsn(500));
        let view = tracker.view(start + 2 * MS);
        assert!(!view.is_ready(0, Lsn(500)));
        assert!(view.is_ready(1, Lsn(500)));
        tracker.on_replica_failed(1);
        let view = tracker.view(start + 3 * MS);
        assert!(
            !view.is_ready(1, Lsn(1)),
            "a stale replica is ready for nothing"
        );
        assert_eq!(view.replica(1).and_then(|r| r.replay), Some(Lsn(500)));
        tracker.on_replica(1, Lsn(500));
        assert!(tracker.view(start + 4 * MS).is_ready(1, Lsn(500)));
    }

    #[test]
    fn lag_is_bytes_behind_the_newest_sample_and_the_age_of_the_oldest_unreplayed_one() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(2, LagCap::default());
        for (ms, lsn) in [(0, 100), (10, 200), (20, 300)] {
            tracker.on_primary(start + ms * MS, Lsn(lsn));
        }
        tracker.on_replica(0, Lsn(150));
        tracker.on_replica(1, Lsn(300));
        let view = tracker.view(start + 50 * MS);
        let behind = view.replica(0).copied().expect("replica 0");
        assert_eq!((behind.lag_bytes, behind.lag), (150, 40 * MS));
        let caught_up = view.replica(1).copied().expect("replica 1");
        assert_eq!((caught_up.lag_bytes, caught_up.lag), (0, Duration::ZERO));
        // A replica ahead of the samples (they lag the replica's view) is not negative.
        tracker.on_replica(1, Lsn(900));
        assert_eq!(
            tracker
                .view(start + 50 * MS)
                .replica(1)
                .map(|r| r.lag_bytes),
            Some(0)
        );
    }

    #[test]
    fn the_byte_cap_excludes_and_readmits_with_hysteresis() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(1, cap(1000, Duration::ZERO));
        tracker.on_primary(start, Lsn(10_000));
        let mut at = |replay: u64| {
            tracker.on_replica(0, Lsn(replay));
            tracker.view(start + MS).is_excluded(0)
        };
        assert!(!at(9_000), "exactly at the cap is allowed");
        assert!(at(8_999), "past the cap");
        assert!(at(9_000), "back at the cap: still out (hysteresis)");
        assert!(at(9_249), "above three quarters of the cap");
        assert!(!at(9_250), "at three quarters of the cap: back in");
        assert!(!at(9_000));
    }

    #[test]
    fn the_time_cap_excludes_a_replica_whose_replay_is_old() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(1, cap(0, Duration::from_secs(1)));
        tracker.on_primary(start, Lsn(100));
        tracker.on_replica(0, Lsn(100));
        tracker.on_primary(start + 10 * MS, Lsn(200));
        assert!(!tracker.view(start + 900 * MS).is_excluded(0));
        assert!(
            !tracker.view(start + 1010 * MS).is_excluded(0),
            "exactly 1 s"
        );
        assert!(tracker.view(start + 1011 * MS).is_excluded(0));
        tracker.on_replica(0, Lsn(200));
        let view = tracker.view(start + 1100 * MS);
        assert!(!view.is_excluded(0), "caught up: lag is zero");
        assert_eq!(view.replica(0).map(|r| r.lag), Some(Duration::ZERO));
    }

    #[test]
    fn no_cap_never_excludes() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(1, LagCap::default());
        tracker.on_primary(start, Lsn(u64::MAX / 2));
        tracker.on_replica(0, Lsn(0));
        assert!(
            !tracker
                .view(start + Duration::from_secs(3600))
                .is_excluded(0)
        );
    }

    #[test]
    fn a_stale_replica_keeps_falling_behind_and_gets_excluded() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(1, cap(100, Duration::ZERO));
        tracker.on_primary(start, Lsn(1000));
        tracker.on_replica(0, Lsn(1000));
        tracker.on_replica_failed(0);
        tracker.on_primary(start + MS, Lsn(1200));
        let view = tracker.view(start + 2 * MS);
        assert!(view.is_excluded(0));
        assert_eq!(
            view.replica(0).map(|r| (r.stale, r.lag_bytes)),
            Some((true, 200))
        );
    }

    #[test]
    fn a_failed_primary_poll_is_reported_until_the_next_sample() {
        let start = Instant::now();
        let mut tracker = LsnTracker::new(0, LagCap::default());
        tracker.on_primary_failed();
        assert!(tracker.view(start).primary_stale);
        tracker.on_primary(start, Lsn(1));
        assert!(!tracker.view(start).primary_stale);
    }
}
