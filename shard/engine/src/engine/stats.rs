//! The stats sink: the shard's counters, its per-database tally, its query digests and
//! latency histograms not yet folded into the shared totals, the flush policy that decides
//! when they are, and the start of the current observation interval. The flows tell it what
//! happened; it decides when the shared totals hear of it.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use pgtier_core::class::{CLASS_COUNT, ClassSetting};
use pgtier_core::config::Settings;
use pgtier_core::metrics::{
    ClassLatency, DatabaseSlot, DatabaseTally, FlushPolicy, LatencyHistogram, ShardCounters,
};

use crate::digests::{DigestLimits, ShardDigests};
use crate::shared::{IntervalStats, LocalStats, Shared};

/// What the shard counted and has not folded yet.
pub(crate) struct StatsSink {
    counters: ShardCounters,
    /// Per-database counts not yet folded (`SHOW STATS`, the metrics endpoint).
    databases: DatabaseTally,
    /// Query digests not yet folded (`SHOW QUERIES`, the metrics endpoint).
    digests: ShardDigests,
    flush_policy: FlushPolicy,
    local: LocalStats,
    latency: ClassLatency,
    /// Start of the current observation interval (shard 0 closes intervals).
    interval_started: Instant,
}

/// What one walk of a server's output completed, for the counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Answers {
    pub class: ClassSetting,
    pub database: Option<DatabaseSlot>,
    /// Queries completed, each in `elapsed_us`.
    pub completed: u64,
    pub elapsed_us: u64,
    /// Transactions completed, each in `transaction_us`.
    pub transactions: u64,
    pub transaction_us: u64,
}

impl StatsSink {
    pub(super) fn new(settings: &Settings, shared: &Shared, now: Instant) -> StatsSink {
        let digests = ShardDigests::new(
            shared.digests.clone(),
            DigestLimits::from_settings(settings),
        );
        let mut sink = StatsSink {
            counters: ShardCounters::default(),
            databases: DatabaseTally::default(),
            digests,
            flush_policy: FlushPolicy::from(settings),
            local: LocalStats::default(),
            latency: ClassLatency::default(),
            interval_started: now,
        };
        sink.configure(settings, shared);
        sink
    }

    /// The settings of a (re)load: the flush policy, and the digests of the sessions that
    /// log in from now on follow `query_digests`.
    pub(super) fn configure(&mut self, settings: &Settings, shared: &Shared) {
        self.flush_policy = FlushPolicy::from(settings);
        self.digests
            .configure(DigestLimits::from_settings(settings));
        shared
            .digests
            .set_capacity(settings.digest_store_capacity as usize);
        shared.digest_metrics_top.store(
            settings.digest_metrics_top as usize,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The tally slot of database `name`, resolved once per session.
    pub(super) fn database_slot(&mut self, name: &str, shared: &Shared) -> DatabaseSlot {
        self.databases.slot(name, &shared.databases)
    }

    /// The query digests, for the call logs that feed them.
    pub(super) fn digests_mut(&mut self) -> &mut ShardDigests {
        &mut self.digests
    }

    // ---- what happened ----

    /// Bytes came from (`received`) or went to (`sent`) a client of `database`.
    pub(super) fn bytes(&mut self, database: Option<DatabaseSlot>, received: u64, sent: u64) {
        self.counters.record_bytes(received, sent);
        if let Some(database) = database {
            self.databases.record_bytes(database, received, sent);
        }
    }

    /// A client of `database` waited `wait_us` for its server.
    pub(super) fn waited(&mut self, database: Option<DatabaseSlot>, wait_us: u64) {
        self.counters.record_wait(wait_us);
        if let Some(database) = database {
            self.databases.record_wait(database, wait_us);
        }
    }

    /// A server was assigned to a client of `database` to run its queries (not one that
    /// only gave a transaction-mode client its welcome).
    pub(super) fn assigned(&mut self, database: Option<DatabaseSlot>) {
        if let Some(database) = database {
            self.databases.record_assignment(database);
        }
    }

    /// A client of `database` logged in (the console's included, as PgBouncer counts them).
    pub(super) fn logged_in(&mut self, database: DatabaseSlot) {
        self.databases.record_login(database);
    }

    /// Named statements of a client of `database`: `client_parses` it prepared,
    /// `server_parses` pgtier prepared on servers for it, `binds` of them forwarded.
    pub(super) fn statements(
        &mut self,
        database: DatabaseSlot,
        client_parses: u64,
        server_parses: u64,
        binds: u64,
    ) {
        if client_parses + server_parses + binds > 0 {
            self.databases
                .record_statements(database, client_parses, server_parses, binds);
        }
    }

    /// A server's answers completed queries and transactions; a full batch goes to the
    /// shared totals now, so they lag by one batch at most.
    pub(super) fn answered(&mut self, answers: Answers, shared: &Shared) {
        let Answers {
            class,
            database,
            completed,
            elapsed_us,
            transactions,
            transaction_us,
        } = answers;
        for _ in 0..completed {
            self.counters.record_query(class, elapsed_us);
            self.latency.record(class, elapsed_us);
            if let Some(database) = database {
                self.databases.record_query(database, elapsed_us);
            }
        }
        for _ in 0..transactions {
            self.counters.record_transaction(class, transaction_us);
            if let Some(database) = database {
                self.databases.record_transaction(database, transaction_us);
            }
        }
        if completed > 0 {
            self.counters.maybe_flush(self.flush_policy, &shared.totals);
        }
    }

    /// A console statement is about to be answered (PgBouncer counts its console's queries
    /// under its `pgbouncer` database). The per-database counts fold at once, so that the
    /// statement's own answer counts it (`SHOW TOTALS` includes itself, as in PgBouncer).
    pub(super) fn console_query(&mut self, database: DatabaseSlot) {
        self.databases.record_query(database, 0);
        self.databases.record_transaction(database, 0);
        self.databases.fold();
    }

    pub(super) fn client_accepted(&mut self) {
        self.local.clients_accepted += 1;
    }

    pub(super) fn server_opened(&mut self) {
        self.local.servers_opened += 1;
    }

    pub(super) fn server_moved_in(&mut self) {
        self.local.servers_moved_in += 1;
    }

    pub(super) fn login_failed(&mut self) {
        self.local.login_failures += 1;
    }

    pub(super) fn read_on_replica(&mut self) {
        self.local.reads_on_replicas += 1;
    }

    pub(super) fn read_on_primary(&mut self) {
        self.local.reads_on_primary += 1;
    }

    /// A read's server died unanswered and it runs again (`read_retries`).
    pub(super) fn read_run_again(&mut self) {
        self.local.reads_run_again += 1;
    }

    /// A read waited for a replica to catch up (`timed_out`: it gave up and went to the
    /// primary).
    pub(super) fn read_waited(&mut self, timed_out: bool) {
        if timed_out {
            self.local.read_waits_timed_out += 1;
        } else {
            self.local.read_waits += 1;
        }
    }

    // ---- folds ----

    /// Folds every pending count into the shared totals (at housekeeping, at exit, and
    /// before the console answers). `interval`: on shard 0, the observation interval's
    /// period and the time now, monotonic and wall clock, for it to close when due.
    pub(super) fn fold(
        &mut self,
        shared: &Shared,
        interval: Option<(Duration, Instant, SystemTime)>,
    ) {
        self.counters.flush_into(&shared.totals);
        self.databases.fold();
        self.digests.fold();
        self.local.fold_into(&shared.stats);
        self.fold_latency(shared, interval);
    }

    /// Folds latency into the shared histograms; shard 0 closes the observation interval
    /// when its period passed.
    fn fold_latency(&mut self, shared: &Shared, interval: Option<(Duration, Instant, SystemTime)>) {
        let mut recorded = false;
        for class in ClassSetting::ALL {
            let local = self.latency.of(class);
            if local.count() > 0 {
                shared.latency[class.index()].merge_from(local);
                recorded = true;
            }
        }
        if recorded {
            self.latency.reset();
        }
        let Some((period, now, wall_now)) = interval else {
            return;
        };
        let length = now.saturating_duration_since(self.interval_started);
        if length < period {
            return;
        }
        let mut histogram = LatencyHistogram::new();
        let mut latency = [Default::default(); CLASS_COUNT];
        for (class, summary) in latency.iter_mut().enumerate() {
            shared.latency[class].take_into(&mut histogram);
            *summary = histogram.summary();
        }
        let stats = IntervalStats {
            ended_at: wall_now,
            length,
            latency,
        };
        shared.interval.store(Some(Arc::new(stats)));
        shared.databases.close_interval(length);
        shared
            .intervals
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.interval_started = now;
    }
}
