//! Per-database traffic statistics: what PgBouncer 1.25's `SHOW STATS` reports (transactions,
//! queries, server assignments, bytes, transaction, query and wait time, prepared statement
//! parses and binds, logins) plus coarse query and transaction time
//! histograms for the metrics endpoint.
//!
//! A shard counts into its own [`DatabaseTally`] (plain integers in a vector indexed by a
//! [`DatabaseSlot`] the session resolved once at login, so a query costs a few additions and no
//! atomic), and folds the tally into the process-wide [`DatabaseRegistry`] at housekeeping and
//! before an admin read. Once per `stats_period` one shard closes an interval
//! ([`DatabaseRegistry::close_interval`]), which turns the totals' growth into PgBouncer's
//! averages.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::padded::CachePadded;

/// Upper bounds of the time histograms, microseconds (the last bucket, `+Inf`, is implied).
/// Chosen for OLTP: 100 µs to a minute, about three buckets per decade.
pub const TIME_BUCKET_BOUNDS_US: [u64; 18] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
];

/// Buckets of a time histogram: one per bound plus `+Inf`.
pub(crate) const TIME_BUCKETS: usize = TIME_BUCKET_BOUNDS_US.len() + 1;

/// Observations per bucket (not cumulative): bucket `i` holds values `<=` bound `i` and
/// above bound `i - 1`; the last holds everything above the last bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeBuckets {
    pub counts: [u64; TIME_BUCKETS],
}

impl TimeBuckets {
    /// Counts one observation of `value_us`.
    pub fn record(&mut self, value_us: u64) {
        // At most five comparisons over 18 sorted bounds.
        let bucket = TIME_BUCKET_BOUNDS_US.partition_point(|bound| *bound < value_us);
        self.counts[bucket] += 1;
    }

    /// Observations in every bucket together.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds `other`'s observations.
    pub fn add(&mut self, other: &TimeBuckets) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
    }
}

/// Counts of one database, as a shard tallies them or as read from the shared totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatabaseCounts {
    /// Transactions completed (a ReadyForQuery with status idle).
    pub xact_count: u64,
    /// Queries completed (each ReadyForQuery).
    pub query_count: u64,
    /// Bytes received from this database's clients.
    pub received_bytes: u64,
    /// Bytes sent to this database's clients.
    pub sent_bytes: u64,
    /// Time linked to a server inside transactions, microseconds.
    pub xact_time_us: u64,
    /// Time queries ran on a server, microseconds.
    pub query_time_us: u64,
    /// Time clients waited for a server, microseconds.
    pub wait_time_us: u64,
    /// Times a server was assigned to a client (each wait ends with one).
    pub server_assignment_count: u64,
    /// Named statements clients prepared, where pgtier keeps them (`max_prepared_statements`).
    pub client_parse_count: u64,
    /// Statements pgtier prepared on servers for them.
    pub server_parse_count: u64,
    /// Binds of those statements forwarded to servers.
    pub bind_count: u64,
    /// Successful client logins.
    pub client_login_count: u64,
    pub query_times: TimeBuckets,
    pub xact_times: TimeBuckets,
}

impl DatabaseCounts {
    /// Adds `other` (totals over several databases).
    pub fn add(&mut self, other: &DatabaseCounts) {
        self.xact_count += other.xact_count;
        self.query_count += other.query_count;
        self.received_bytes += other.received_bytes;
        self.sent_bytes += other.sent_bytes;
        self.xact_time_us += other.xact_time_us;
        self.query_time_us += other.query_time_us;
        self.wait_time_us += other.wait_time_us;
        self.server_assignment_count += other.server_assignment_count;
        self.client_parse_count += other.client_parse_count;
        self.server_parse_count += other.server_parse_count;
        self.bind_count += other.bind_count;
        self.client_login_count += other.client_login_count;
        self.query_times.add(&other.query_times);
        self.xact_times.add(&other.xact_times);
    }

    fn is_zero(&self) -> bool {
        *self == DatabaseCounts::default()
    }
}

/// PgBouncer 1.25's averages over one `stats_period`: counts and bytes per second, query
/// and transaction time per query and transaction, wait time per server assignment, all in
/// whole units.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatabaseAverages {
    pub xact_count: u64,
    pub query_count: u64,
    pub received_bytes: u64,
    pub sent_bytes: u64,
    pub xact_time_us: u64,
    pub query_time_us: u64,
    pub wait_time_us: u64,
    pub server_assignment_count: u64,
    pub client_parse_count: u64,
    pub server_parse_count: u64,
    pub bind_count: u64,
    pub client_login_count: u64,
}

impl DatabaseAverages {
    /// The averages of the growth from `before` to `after` over `length`.
    pub fn between(before: &DatabaseCounts, after: &DatabaseCounts, length: Duration) -> Self {
        let micros = length.as_micros();
        if micros == 0 {
            return DatabaseAverages::default();
        }
        let grown = |after: u64, before: u64| u128::from(after.saturating_sub(before));
        let per_second = |after: u64, before: u64| {
            u64::try_from(grown(after, before) * 1_000_000 / micros).unwrap_or(u64::MAX)
        };
        let per_event = |after_time: u64, before_time: u64, events: u128| {
            grown(after_time, before_time)
                .checked_div(events)
                .map_or(0, |average| u64::try_from(average).unwrap_or(u64::MAX))
        };
        let xacts = grown(after.xact_count, before.xact_count);
        let queries = grown(after.query_count, before.query_count);
        let assignments = grown(
            after.server_assignment_count,
            before.server_assignment_count,
        );
        DatabaseAverages {
            xact_count: per_second(after.xact_count, before.xact_count),
            query_count: per_second(after.query_count, before.query_count),
            received_bytes: per_second(after.received_bytes, before.received_bytes),
            sent_bytes: per_second(after.sent_bytes, before.sent_bytes),
            xact_time_us: per_event(after.xact_time_us, before.xact_time_us, xacts),
            query_time_us: per_event(after.query_time_us, before.query_time_us, queries),
            wait_time_us: per_event(after.wait_time_us, before.wait_time_us, assignments),
            server_assignment_count: per_second(
                after.server_assignment_count,
                before.server_assignment_count,
            ),
            client_parse_count: per_second(after.client_parse_count, before.client_parse_count),
            server_parse_count: per_second(after.server_parse_count, before.server_parse_count),
            bind_count: per_second(after.bind_count, before.bind_count),
            client_login_count: per_second(after.client_login_count, before.client_login_count),
        }
    }
}

/// The shared totals of one database, added to by every shard's folds.
#[derive(Debug, Default)]
pub(crate) struct DatabaseTotals {
    // One block per database on its own lines: folds come from every shard but only every
    // housekeeping period, so the counters of one database need not be split further.
    inner: CachePadded<TotalsInner>,
}

#[derive(Debug, Default)]
struct TotalsInner {
    xact_count: AtomicU64,
    query_count: AtomicU64,
    received_bytes: AtomicU64,
    sent_bytes: AtomicU64,
    xact_time_us: AtomicU64,
    query_time_us: AtomicU64,
    wait_time_us: AtomicU64,
    server_assignment_count: AtomicU64,
    client_parse_count: AtomicU64,
    server_parse_count: AtomicU64,
    bind_count: AtomicU64,
    client_login_count: AtomicU64,
    query_times: [AtomicU64; TIME_BUCKETS],
    xact_times: [AtomicU64; TIME_BUCKETS],
}

fn add_to(counter: &AtomicU64, value: u64) {
    if value != 0 {
        counter.fetch_add(value, Ordering::Relaxed);
    }
}

impl DatabaseTotals {
    fn add(&self, counts: &DatabaseCounts) {
        let totals = &self.inner.0;
        add_to(&totals.xact_count, counts.xact_count);
        add_to(&totals.query_count, counts.query_count);
        add_to(&totals.received_bytes, counts.received_bytes);
        add_to(&totals.sent_bytes, counts.sent_bytes);
        add_to(&totals.xact_time_us, counts.xact_time_us);
        add_to(&totals.query_time_us, counts.query_time_us);
        add_to(&totals.wait_time_us, counts.wait_time_us);
        add_to(
            &totals.server_assignment_count,
            counts.server_assignment_count,
        );
        add_to(&totals.client_parse_count, counts.client_parse_count);
        add_to(&totals.server_parse_count, counts.server_parse_count);
        add_to(&totals.bind_count, counts.bind_count);
        add_to(&totals.client_login_count, counts.client_login_count);
        for (shared, local) in totals.query_times.iter().zip(counts.query_times.counts) {
            add_to(shared, local);
        }
        for (shared, local) in totals.xact_times.iter().zip(counts.xact_times.counts) {
            add_to(shared, local);
        }
    }

    /// The totals now (each counter read separately: a read during a fold may see part of
    /// it, so use a histogram's bucket total as its count).
    pub fn snapshot(&self) -> DatabaseCounts {
        let totals = &self.inner.0;
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        DatabaseCounts {
            xact_count: read(&totals.xact_count),
            query_count: read(&totals.query_count),
            received_bytes: read(&totals.received_bytes),
            sent_bytes: read(&totals.sent_bytes),
            xact_time_us: read(&totals.xact_time_us),
            query_time_us: read(&totals.query_time_us),
            wait_time_us: read(&totals.wait_time_us),
            server_assignment_count: read(&totals.server_assignment_count),
            client_parse_count: read(&totals.client_parse_count),
            server_parse_count: read(&totals.server_parse_count),
            bind_count: read(&totals.bind_count),
            client_login_count: read(&totals.client_login_count),
            query_times: TimeBuckets {
                counts: std::array::from_fn(|bucket| read(&totals.query_times[bucket])),
            },
            xact_times: TimeBuckets {
                counts: std::array::from_fn(|bucket| read(&totals.xact_times[bucket])),
            },
        }
    }
}

/// One database's totals since start and its averages over the last closed interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseStats {
    pub database: Arc<str>,
    pub totals: DatabaseCounts,
    /// Zero until the first interval closed.
    pub averages: DatabaseAverages,
}

#[derive(Debug, Default)]
struct Interval {
    /// Totals when the last interval closed.
    at_close: HashMap<Arc<str>, DatabaseCounts>,
    averages: HashMap<Arc<str>, DatabaseAverages>,
}

/// Every database's shared totals, created on a shard's first session of that database.
/// The lock is taken only then, at an interval's close and by readers (the console, the
/// metrics endpoint), never by a query.
#[derive(Debug, Default)]
pub struct DatabaseRegistry {
    databases: Mutex<BTreeMap<Arc<str>, Arc<DatabaseTotals>>>,
    interval: Mutex<Interval>,
}

impl DatabaseRegistry {
    /// The totals of `database`, created on first use.
    pub(crate) fn totals_of(&self, database: &str) -> Arc<DatabaseTotals> {
        let mut databases = self
            .databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(totals) = databases.get(database) {
            return totals.clone();
        }
        let totals = Arc::new(DatabaseTotals::default());
        databases.insert(Arc::from(database), totals.clone());
        totals
    }

    fn snapshot_totals(&self) -> Vec<(Arc<str>, DatabaseCounts)> {
        let databases = self
            .databases
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        databases
            .iter()
            .map(|(name, totals)| (name.clone(), totals.snapshot()))
            .collect()
    }

    /// Every database seen so far, by name, with its totals and last averages.
    pub fn stats(&self) -> Vec<DatabaseStats> {
        let totals = self.snapshot_totals();
        let interval = self.interval.lock().unwrap_or_else(PoisonError::into_inner);
        totals
            .into_iter()
            .map(|(database, totals)| DatabaseStats {
                averages: interval
                    .averages
                    .get(&database)
                    .copied()
                    .unwrap_or_default(),
                database,
                totals,
            })
            .collect()
    }

    /// Closes an observation interval of `length`: the averages become those of the growth
    /// since the previous close.
    pub fn close_interval(&self, length: Duration) {
        let totals = self.snapshot_totals();
        let mut interval = self.interval.lock().unwrap_or_else(PoisonError::into_inner);
        let mut averages = HashMap::with_capacity(totals.len());
        for (database, now) in &totals {
            let before = interval.at_close.get(database).copied().unwrap_or_default();
            averages.insert(
                database.clone(),
                DatabaseAverages::between(&before, now, length),
            );
        }
        interval.averages = averages;
        interval.at_close = totals.into_iter().collect();
    }
}

/// Index of a database in one shard's [`DatabaseTally`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DatabaseSlot(u32);

#[derive(Debug)]
struct TallyEntry {
    shared: Arc<DatabaseTotals>,
    pending: DatabaseCounts,
}

/// One shard's unfolded per-database counts.
#[derive(Debug, Default)]
pub struct DatabaseTally {
    entries: Vec<TallyEntry>,
    by_name: HashMap<Arc<str>, DatabaseSlot>,
}

impl DatabaseTally {
    /// The slot of `database` on this shard (at login, not per query).
    pub fn slot(&mut self, database: &str, registry: &DatabaseRegistry) -> DatabaseSlot {
        if let Some(slot) = self.by_name.get(database) {
            return *slot;
        }
        let slot = DatabaseSlot(u32::try_from(self.entries.len()).unwrap_or(u32::MAX));
        self.entries.push(TallyEntry {
            shared: registry.totals_of(database),
            pending: DatabaseCounts::default(),
        });
        self.by_name.insert(Arc::from(database), slot);
        slot
    }

    fn pending(&mut self, slot: DatabaseSlot) -> Option<&mut DatabaseCounts> {
        self.entries
            .get_mut(slot.0 as usize)
            .map(|entry| &mut entry.pending)
    }

    /// One completed query that took `duration_us`.
    pub fn record_query(&mut self, slot: DatabaseSlot, duration_us: u64) {
        if let Some(counts) = self.pending(slot) {
            counts.query_count += 1;
            counts.query_time_us += duration_us;
            counts.query_times.record(duration_us);
        }
    }

    /// One completed transaction that took `duration_us`.
    pub fn record_transaction(&mut self, slot: DatabaseSlot, duration_us: u64) {
        if let Some(counts) = self.pending(slot) {
            counts.xact_count += 1;
            counts.xact_time_us += duration_us;
            counts.xact_times.record(duration_us);
        }
    }

    /// Bytes received from and sent to a client of the database.
    pub fn record_bytes(&mut self, slot: DatabaseSlot, received_bytes: u64, sent_bytes: u64) {
        if let Some(counts) = self.pending(slot) {
            counts.received_bytes += received_bytes;
            counts.sent_bytes += sent_bytes;
        }
    }

    /// Time a client of the database waited for a server.
    pub fn record_wait(&mut self, slot: DatabaseSlot, wait_us: u64) {
        if let Some(counts) = self.pending(slot) {
            counts.wait_time_us += wait_us;
        }
    }

    /// A server was assigned to a client of the database.
    pub fn record_assignment(&mut self, slot: DatabaseSlot) {
        if let Some(counts) = self.pending(slot) {
            counts.server_assignment_count += 1;
        }
    }

    /// A client of the database logged in.
    pub fn record_login(&mut self, slot: DatabaseSlot) {
        if let Some(counts) = self.pending(slot) {
            counts.client_login_count += 1;
        }
    }

    /// Named statements: `client_parses` prepared by clients, `server_parses` prepared by
    /// pgtier on servers, `binds` of them forwarded.
    pub fn record_statements(
        &mut self,
        slot: DatabaseSlot,
        client_parses: u64,
        server_parses: u64,
        binds: u64,
    ) {
        if let Some(counts) = self.pending(slot) {
            counts.client_parse_count += client_parses;
            counts.server_parse_count += server_parses;
            counts.bind_count += binds;
        }
    }

    /// Adds every pending count to the shared totals and starts over.
    pub fn fold(&mut self) {
        for entry in &mut self.entries {
            if !entry.pending.is_zero() {
                entry.shared.add(&entry.pending);
                entry.pending = DatabaseCounts::default();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_values_up_to_their_bound() {
        let mut buckets = TimeBuckets::default();
        for value in [0, 100, 101, 60_000_000, 60_000_001, u64::MAX] {
            buckets.record(value);
        }
        assert_eq!(buckets.counts[0], 2, "0 and 100 are <= 100");
        assert_eq!(buckets.counts[1], 1, "101 is in (100, 250]");
        assert_eq!(
            buckets.counts[TIME_BUCKETS - 2],
            1,
            "exactly the last bound"
        );
        assert_eq!(buckets.counts[TIME_BUCKETS - 1], 2, "+Inf");
        assert_eq!(buckets.total(), 6);
    }

    #[test]
    fn tallies_of_several_shards_fold_into_one_total() {
        let registry = DatabaseRegistry::default();
        let mut shards: Vec<DatabaseTally> = (0..3).map(|_| DatabaseTally::default()).collect();
        for tally in &mut shards {
            let app = tally.slot("app", &registry);
            let other = tally.slot("other", &registry);
            assert_eq!(tally.slot("app", &registry), app, "a slot per name");
            for _ in 0..10 {
                tally.record_query(app, 300);
            }
            tally.record_transaction(app, 2_000);
            tally.record_bytes(app, 5, 7);
            tally.record_wait(other, 40);
            tally.record_assignment(other);
            tally.record_login(app);
            tally.record_statements(app, 1, 2, 3);
        }
        assert!(registry.stats().iter().all(|s| s.totals.query_count == 0));
        shards.iter_mut().for_each(DatabaseTally::fold);
        shards.iter_mut().for_each(DatabaseTally::fold);
        let stats = registry.stats();
        let names: Vec<&str> = stats.iter().map(|s| &*s.database).collect();
        assert_eq!(names, ["app", "other"], "sorted by name");
        let app = stats[0].totals;
        assert_eq!(app.query_count, 30);
        assert_eq!(app.query_time_us, 9_000);
        assert_eq!(app.query_times.counts[2], 30, "300 µs is in (250, 500]");
        assert_eq!(app.xact_count, 3);
        assert_eq!(app.xact_times.total(), 3);
        assert_eq!((app.received_bytes, app.sent_bytes), (15, 21));
        assert_eq!(stats[1].totals.wait_time_us, 120);
        assert_eq!(stats[1].totals.server_assignment_count, 3);
        assert_eq!(app.client_login_count, 3);
        assert_eq!(
            (
                app.client_parse_count,
                app.server_parse_count,
                app.bind_count
            ),
            (3, 6, 9)
        );
        assert_eq!(stats[1].totals.query_count, 0);
    }

    #[test]
    fn an_unknown_slot_counts_nothing() {
        let mut tally = DatabaseTally::default();
        tally.record_query(DatabaseSlot(7), 1);
        tally.fold();
    }

    #[test]
    fn averages_follow_pgbouncer() {
        let before = DatabaseCounts {
            xact_count: 10,
            query_count: 20,
            received_bytes: 1_000,
            sent_bytes: 2_000,
            xact_time_us: 100,
            query_time_us: 200,
            wait_time_us: 0,
            ..DatabaseCounts::default()
        };
        let after = DatabaseCounts {
            xact_count: 30,
            query_count: 60,
            received_bytes: 5_000,
            sent_bytes: 10_000,
            xact_time_us: 100 + 20 * 500,
            query_time_us: 200 + 40 * 50,
            wait_time_us: 3_000,
            server_assignment_count: 6,
            client_login_count: 4,
            bind_count: 8,
            ..DatabaseCounts::default()
        };
        let averages = DatabaseAverages::between(&before, &after, Duration::from_secs(2));
        assert_eq!(averages.xact_count, 10, "per second");
        assert_eq!(averages.query_count, 20);
        assert_eq!(averages.received_bytes, 2_000);
        assert_eq!(averages.sent_bytes, 4_000);
        assert_eq!(averages.xact_time_us, 500, "per transaction");
        assert_eq!(averages.query_time_us, 50, "per query");
        assert_eq!(averages.wait_time_us, 500, "per server assignment, as 1.25");
        assert_eq!(averages.server_assignment_count, 3, "per second");
        assert_eq!(averages.client_login_count, 2, "per second");
        assert_eq!(averages.bind_count, 4, "per second");
        let idle = DatabaseAverages::between(&after, &after, Duration::from_secs(2));
        assert_eq!(idle, DatabaseAverages::default());
        let empty = DatabaseAverages::between(&before, &after, Duration::ZERO);
        assert_eq!(empty, DatabaseAverages::default());
    }

    #[test]
    fn closing_an_interval_averages_its_growth() {
        let registry = DatabaseRegistry::default();
        let mut tally = DatabaseTally::default();
        let app = tally.slot("app", &registry);
        for _ in 0..40 {
            tally.record_query(app, 10);
        }
        tally.fold();
        assert_eq!(registry.stats()[0].averages, DatabaseAverages::default());
        registry.close_interval(Duration::from_secs(4));
        assert_eq!(registry.stats()[0].averages.query_count, 10);
        assert_eq!(registry.stats()[0].averages.query_time_us, 10);
        registry.close_interval(Duration::from_secs(4));
        assert_eq!(registry.stats()[0].averages.query_count, 0, "no growth");
        assert_eq!(registry.stats()[0].totals.query_count, 40);
    }
}
