//! What a scrape shows: every `pgtier_*` metric, read from state the shards already keep
//! (folded totals, the per-pool gauges they publish at housekeeping, the routers' snapshots,
//! counters and health), encoded with `prometheus-client` in the Prometheus text format or
//! OpenMetrics. A scrape never asks a shard to do anything.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use pgtier_core::class::ClassSetting;
use pgtier_core::metrics::{TIME_BUCKET_BOUNDS_US, TimeBuckets};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use pgtier_console::query_id_label;
use pgtier_replicas::SharedRouting;
use pgtier_replicas::health::ProbeOutcome;

/// The format a scraper asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    /// Prometheus text format 0.0.4 (the default).
    PrometheusText,
    /// OpenMetrics 1.0 text, when the scraper's `Accept` names it.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for.
    pub(crate) fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::PrometheusText,
        }
    }

    /// The response's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::PrometheusText => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The state a scrape reads.
#[derive(Clone)]
pub struct Sources {
    pub engine: Arc<pgtier_engine::Shared>,
    pub routing: Arc<SharedRouting>,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources").finish_non_exhaustive()
    }
}

/// A registry holding the one collector that reads [`Sources`].
pub fn registry(sources: Sources) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(PgtierCollector { sources }));
    registry
}

/// Encodes every metric of `registry` in `format`.
pub fn encode(registry: &Registry, format: Format) -> Result<String, std::fmt::Error> {
    let mut text = String::with_capacity(16 * 1024);
    match format {
        Format::PrometheusText => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, registry)?
        }
        Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut text, registry)?,
    }
    Ok(text)
}

#[derive(Debug)]
struct PgtierCollector {
    sources: Sources,
}

type Encoded = std::result::Result<(), std::fmt::Error>;

/// A metric family: its descriptor, then one sample set per label set.
fn family<'a>(
    encoder: &'a mut DescriptorEncoder<'_>,
    name: &'a str,
    help: &str,
    unit: Option<&'a Unit>,
    kind: MetricType,
) -> std::result::Result<MetricEncoder<'a>, std::fmt::Error> {
    encoder.encode_descriptor(name, help, unit, kind)
}

/// A gauge family with one sample per (pool, state): `states` gives each pool's counts.
fn encode_pool_states(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    pools: &[pgtier_engine::pool_gauges::PoolGauge],
    states: impl Fn(&pgtier_engine::pool_gauges::PoolGauge) -> Vec<(&'static str, u32)>,
) -> Encoded {
    let mut metric = family(encoder, name, help, None, MetricType::Gauge)?;
    for pool in pools {
        for (state, value) in states(pool) {
            let labels = [
                ("database", &*pool.database),
                ("user", &*pool.user),
                ("state", state),
            ];
            metric.encode_family(&labels)?.encode_gauge(&value)?;
        }
    }
    Ok(())
}

fn seconds(micros: u64) -> f64 {
    micros as f64 / 1_000_000.0
}

/// The (upper bound in seconds, observations) pairs of `buckets`, `+Inf` last.
fn histogram_buckets(buckets: &TimeBuckets) -> Vec<(f64, u64)> {
    TIME_BUCKET_BOUNDS_US
        .iter()
        .map(|bound| seconds(*bound))
        .chain(std::iter::once(f64::INFINITY))
        .zip(buckets.counts)
        .collect()
}

/// One histogram sample set; its count is the sum of its buckets, so the exposition stays
/// consistent even when a fold raced with the read.
fn encode_histogram(metric: &mut MetricEncoder<'_>, buckets: &TimeBuckets, sum_us: u64) -> Encoded {
    metric.encode_histogram::<NoLabelSet>(
        seconds(sum_us),
        buckets.total(),
        &histogram_buckets(buckets),
        None,
    )
}

impl Collector for PgtierCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Encoded {
        self.process(&mut encoder)?;
        self.pools(&mut encoder)?;
        self.databases(&mut encoder)?;
        self.digests(&mut encoder)?;
        self.classes(&mut encoder)?;
        self.fleet(&mut encoder)?;
        let map = self.sources.routing.map.load_full();
        encode_replicas(&mut encoder, map.routers())?;
        encode_readers(&mut encoder, map.readers())
    }
}

impl PgtierCollector {
    /// The fleet families (docs/fleet.md), only while `fleet_name` is set.
    fn fleet(&self, encoder: &mut DescriptorEncoder<'_>) -> Encoded {
        let status = &self.sources.routing.fleet;
        let view = status.view();
        if view.mode == "off" {
            return Ok(());
        }
        let fleet = [("fleet", &*view.name)];
        family(
            encoder,
            "pgtier_fleet_mode",
            "this host's fleet mode as a label: fleet (the shared table) or local (the store is unreachable)",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&[("fleet", &*view.name), ("mode", view.mode)])?
        .encode_gauge(&1u32)?;
        let live = view.members.iter().filter(|member| member.live).count() as u64;
        let gauges = [
            (
                "pgtier_fleet_leader",
                "1 while this host is the fleet's leader",
                u64::from(view.is_leader),
            ),
            (
                "pgtier_fleet_version",
                "the newest fleet role-table version this host applied",
                view.version,
            ),
            (
                "pgtier_fleet_stored_version",
                "the newest role-table version in the store",
                view.stored_version,
            ),
            (
                "pgtier_fleet_live_members",
                "members whose last report is younger than fleet_member_timeout",
                live,
            ),
        ];
        for (name, help, value) in gauges {
            family(encoder, name, help, None, MetricType::Gauge)?
                .encode_family(&fleet)?
                .encode_gauge(&value)?;
        }
        {
            let mut metric = family(
                encoder,
                "pgtier_fleet_member_report_age",
                "age of each member's last report on the store's clock",
                Some(&Unit::Seconds),
                MetricType::Gauge,
            )?;
            for member in &view.members {
                let labels = [("fleet", &*view.name), ("member", &*member.host)];
                metric
                    .encode_family(&labels)?
                    .encode_gauge(&member.age.as_secs_f64())?;
            }
        }
        let counters = status.counters();
        let counters = [
            (
                "pgtier_fleet_local_fallbacks",
                "times this host fell back to local PLB",
                counters.went_local,
            ),
            (
                "pgtier_fleet_versions_applied",
                "fleet role-table versions this host applied",
                counters.applied,
            ),
            (
                "pgtier_fleet_versions_published",
                "role-table versions this host published as leader",
                counters.published,
            ),
            (
                "pgtier_fleet_failed_rounds",
                "rounds with the fleet's store that failed",
                counters.failed_rounds,
            ),
        ];
        for (name, help, value) in counters {
            family(encoder, name, help, None, MetricType::Counter)?
                .encode_family(&fleet)?
                .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
        }
        Ok(())
    }

    fn process(&self, encoder: &mut DescriptorEncoder<'_>) -> Encoded {
        let engine = &self.sources.engine;
        let snapshot = engine.snapshot();
        family(
            encoder,
            "pgtier_up",
            "1 while pgtier serves",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&1u32)?;
        family(
            encoder,
            "pgtier_version_info",
            "the running pgtier version, as a label",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&[("version", env!("CARGO_PKG_VERSION"))])?
        .encode_gauge(&1u32)?;
        family(
            encoder,
            "pgtier_clients",
            "client connections open now, over every shard",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&engine.clients.load(Ordering::Relaxed))?;
        let counters = [
            (
                "pgtier_clients_accepted",
                "client connections accepted",
                snapshot.clients_accepted,
            ),
            (
                "pgtier_servers_opened",
                "server connections opened",
                snapshot.servers_opened,
            ),
            (
                "pgtier_servers_moved",
                "idle server connections moved whole to another shard",
                snapshot.servers_moved,
            ),
            (
                "pgtier_server_login_failures",
                "server logins that failed",
                snapshot.login_failures,
            ),
            (
                "pgtier_reads_on_replicas",
                "read transactions of reader entries run on a replica",
                snapshot.reads_on_replicas,
            ),
            (
                "pgtier_reads_on_primary",
                "read transactions of reader entries run on the primary",
                snapshot.reads_on_primary,
            ),
            (
                "pgtier_read_waits",
                "reads that waited for a replica to replay their session's write",
                snapshot.read_waits,
            ),
            (
                "pgtier_read_wait_timeouts",
                "reads that waited read_your_writes_timeout and ran on the primary",
                snapshot.read_waits_timed_out,
            ),
            (
                "pgtier_reads_run_again",
                "reads on replicas run again on another server after theirs died unanswered",
                snapshot.reads_run_again,
            ),
        ];
        for (name, help, value) in counters {
            family(encoder, name, help, None, MetricType::Counter)?
                .encode_counter::<NoLabelSet, _, u64>(&value, None)?;
        }
        Ok(())
    }

    fn pools(&self, encoder: &mut DescriptorEncoder<'_>) -> Encoded {
        let pools = self.sources.engine.pool_gauges.merged();
        encode_pool_states(
            encoder,
            "pgtier_pool_clients",
            "clients of the pool by state: active (idle or linked to a server), waiting (queued for a server)",
            &pools,
            |pool| {
                vec![
                    ("active", pool.clients_active),
                    ("waiting", pool.clients_waiting),
                ]
            },
        )?;
        encode_pool_states(
            encoder,
            "pgtier_pool_servers",
            "server connections of the pool by PgBouncer's states: active, idle, used, tested, login",
            &pools,
            |pool| {
                vec![
                    ("active", pool.servers_active),
                    ("idle", pool.servers_idle),
                    ("used", pool.servers_used),
                    ("tested", pool.servers_tested),
                    ("login", pool.servers_login),
                ]
            },
        )?;
        let mut metric = family(
            encoder,
            "pgtier_pool_pinned_clients",
            "clients whose session state pins their server to them between transactions",
            None,
            MetricType::Gauge,
        )?;
        for pool in &pools {
            let labels = [("database", &*pool.database), ("user", &*pool.user)];
            metric
                .encode_family(&labels)?
                .encode_gauge(&pool.clients_pinned)?;
        }
        let mut metric = family(
            encoder,
            "pgtier_pool_max_wait",
            "how long the oldest client queued in the pool has waited",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for pool in &pools {
            let labels = [("database", &*pool.database), ("user", &*pool.user)];
            metric
                .encode_family(&labels)?
                .encode_gauge(&seconds(pool.max_wait_us))?;
        }
        Ok(())
    }

    fn databases(&self, encoder: &mut DescriptorEncoder<'_>) -> Encoded {
        let databases = self.sources.engine.databases.stats();
        type Pick = fn(&pgtier_core::metrics::DatabaseCounts) -> u64;
        let counters: [(&str, &str, Option<Unit>, Pick); 5] = [
            (
                "pgtier_database_queries",
                "queries completed (PgBouncer's total_query_count)",
                None,
                |t| t.query_count,
            ),
            (
                "pgtier_database_transactions",
                "transactions completed (PgBouncer's total_xact_count)",
                None,
                |t| t.xact_count,
            ),
            (
                "pgtier_database_received",
                "bytes received from the database's clients",
                Some(Unit::Bytes),
                |t| t.received_bytes,
            ),
            (
                "pgtier_database_sent",
                "bytes sent to the database's clients",
                Some(Unit::Bytes),
                |t| t.sent_bytes,
            ),
            (
                "pgtier_database_wait",
                "time clients waited for a server (PgBouncer's total_wait_time)",
                Some(Unit::Seconds),
                |t| t.wait_time_us,
            ),
        ];
        for (name, help, unit, pick) in &counters {
            let mut metric = family(encoder, name, help, unit.as_ref(), MetricType::Counter)?;
            for stats in &databases {
                let value = pick(&stats.totals);
                let labels = [("database", &*stats.database)];
                let mut sample = metric.encode_family(&labels)?;
                if matches!(unit, Some(Unit::Seconds)) {
                    sample.encode_counter::<NoLabelSet, _, f64>(&seconds(value), None)?;
                } else {
                    sample.encode_counter::<NoLabelSet, _, u64>(&value, None)?;
                }
            }
        }
        type PickTimes = fn(&pgtier_core::metrics::DatabaseCounts) -> (&TimeBuckets, u64);
        let histograms: [(&str, &str, PickTimes); 2] = [
            (
                "pgtier_database_query_duration",
                "time queries ran on a server, from the first message to their ReadyForQuery",
                |t| (&t.query_times, t.query_time_us),
            ),
            (
                "pgtier_database_transaction_duration",
                "time a server was linked inside each transaction",
                |t| (&t.xact_times, t.xact_time_us),
            ),
        ];
        for (name, help, pick) in &histograms {
            let mut metric = family(
                encoder,
                name,
                help,
                Some(&Unit::Seconds),
                MetricType::Histogram,
            )?;
            for stats in &databases {
                let (buckets, sum_us) = pick(&stats.totals);
                let labels = [("database", &*stats.database)];
                let mut sample = metric.encode_family(&labels)?;
                encode_histogram(&mut sample, buckets, sum_us)?;
            }
        }
        Ok(())
    }

    /// The `digest_metrics_top` digests with the most total time. Their texts are in one
    /// info gauge per digest, so each counter sample carries only the short `query_id`.
    fn digests(&self, encoder: &mut DescriptorEncoder<'_>) -> Encoded {
        let engine = &self.sources.engine;
        family(
            encoder,
            "pgtier_query_digests_evicted",
            "query digests the store evicted to make room (digest_store_capacity)",
            None,
            MetricType::Counter,
        )?
        .encode_counter::<NoLabelSet, _, u64>(&engine.digests.evicted(), None)?;
        let top = engine.digest_metrics_top.load(Ordering::Relaxed);
        if top == 0 {
            return Ok(());
        }
        let digests: Vec<(String, pgtier_core::metrics::DigestStats)> = engine
            .digests
            .top_by_time(top)
            .into_iter()
            .map(|digest| (query_id_label(digest.query_id), digest))
            .collect();
        type Pick = fn(&pgtier_core::metrics::DigestCounts) -> u64;
        let counters: [(&str, &str, Option<Unit>, Pick); 3] = [
            (
                "pgtier_query_calls",
                "calls of the query digest (a Query, or an extended segment up to its Sync)",
                None,
                |counts| counts.calls,
            ),
            (
                "pgtier_query_time",
                "time the digest's calls ran",
                Some(Unit::Seconds),
                |counts| counts.total_time_us,
            ),
            (
                "pgtier_query_errors",
                "calls of the digest answered with an error",
                None,
                |counts| counts.errors,
            ),
        ];
        for (name, help, unit, pick) in &counters {
            let mut metric = family(encoder, name, help, unit.as_ref(), MetricType::Counter)?;
            for (query_id, digest) in &digests {
                let labels = [
                    ("database", &*digest.database),
                    ("query_id", query_id.as_str()),
                ];
                let mut sample = metric.encode_family(&labels)?;
                let value = pick(&digest.counts);
                if unit.is_some() {
                    sample.encode_counter::<NoLabelSet, _, f64>(&seconds(value), None)?;
                } else {
                    sample.encode_counter::<NoLabelSet, _, u64>(&value, None)?;
                }
            }
        }
        let mut metric = family(
            encoder,
            "pgtier_query_info",
            "the normalized text of each exported query digest (always 1)",
            None,
            MetricType::Gauge,
        )?;
        for (query_id, digest) in &digests {
            let labels = [("query_id", query_id.as_str()), ("query", &*digest.text)];
            metric.encode_family(&labels)?.encode_gauge(&1u64)?;
        }
        Ok(())
    }

    fn classes(&self, encoder: &mut DescriptorEncoder<'_>) -> Encoded {
        let totals = self.sources.engine.totals.snapshot();
        let mut metric = family(
            encoder,
            "pgtier_class_query_duration",
            "query latency per service class, every database together",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for class in ClassSetting::ALL {
            if !class.always_reported() && totals.queries[class.index()] == 0 {
                continue;
            }
            let buckets = &totals.query_times[class.index()];
            let labels = [("class", class.as_str())];
            let mut sample = metric.encode_family(&labels)?;
            let sum_us = totals.class_query_time_us[class.index()];
            encode_histogram(&mut sample, buckets, sum_us)?;
        }
        Ok(())
    }
}

/// The replica and role-event families of `routers`.
fn encode_replicas(
    encoder: &mut DescriptorEncoder<'_>,
    routers: &[Arc<pgtier_replicas::router::ReplicaRouter>],
) -> Encoded {
    struct Replica {
        database: String,
        replica: String,
        role: &'static str,
        up: bool,
        premium: u32,
        freemium: u32,
        probe_seconds: Option<f64>,
    }
    let mut replicas = Vec::new();
    for router in routers {
        let snapshot = router.snapshot();
        let health = router.replica_health();
        for (replica, role) in snapshot.table.iter() {
            let state = health.get(replica.index());
            let load = router.load(replica);
            replicas.push(Replica {
                database: router.name().to_string(),
                replica: router
                    .replica_addr(replica)
                    .map_or_else(|| replica.to_string(), |addr| addr.to_string()),
                role: router.role_name(replica, role),
                up: state.is_some_and(|h| h.state.is_up()),
                premium: load.premium,
                freemium: load.freemium,
                probe_seconds: state.and_then(|h| h.last_probe.as_ref()).and_then(|p| {
                    match p.outcome {
                        ProbeOutcome::Healthy { round_trip } => Some(round_trip.as_secs_f64()),
                        ProbeOutcome::Failed { .. } => None,
                    }
                }),
            });
        }
    }
    {
        let mut metric = family(
            encoder,
            "pgtier_replica_up",
            "1 while the replica receives sessions, 0 while it is Down",
            None,
            MetricType::Gauge,
        )?;
        for r in &replicas {
            let labels = [("database", &*r.database), ("replica", &*r.replica)];
            metric
                .encode_family(&labels)?
                .encode_gauge(&u32::from(r.up))?;
        }
    }
    {
        let mut metric = family(
            encoder,
            "pgtier_replica_role",
            "the replica's current role, as a label (value 1)",
            None,
            MetricType::Gauge,
        )?;
        for r in &replicas {
            let labels = [
                ("database", &*r.database),
                ("replica", &*r.replica),
                ("role", r.role),
            ];
            metric.encode_family(&labels)?.encode_gauge(&1u32)?;
        }
    }
    {
        let mut metric = family(
            encoder,
            "pgtier_replica_sessions",
            "sessions admitted to the replica now, by class",
            None,
            MetricType::Gauge,
        )?;
        for r in &replicas {
            for (class, value) in [("premium", r.premium), ("freemium", r.freemium)] {
                let labels = [
                    ("database", &*r.database),
                    ("replica", &*r.replica),
                    ("class", class),
                ];
                metric.encode_family(&labels)?.encode_gauge(&value)?;
            }
        }
    }
    {
        let mut metric = family(
            encoder,
            "pgtier_replica_probe_duration",
            "round trip of the replica's last successful health probe (absent after a failed one)",
            Some(&Unit::Seconds),
            MetricType::Gauge,
        )?;
        for r in &replicas {
            if let Some(probe) = r.probe_seconds {
                let labels = [("database", &*r.database), ("replica", &*r.replica)];
                metric.encode_family(&labels)?.encode_gauge(&probe)?;
            }
        }
    }
    let mut metric = family(
        encoder,
        "pgtier_role_events",
        "replica borrows and returns between classes",
        None,
        MetricType::Counter,
    )?;
    for router in routers {
        let labels = [("database", router.name())];
        metric
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&router.role_events_recorded(), None)?;
    }
    Ok(())
}

/// The read side of reader entries: per replica its replay position, lag, exclusion and
/// reads; per entry the reads sent to the primary. Replicas not polled yet have no
/// position and lag samples.
fn encode_readers(
    encoder: &mut DescriptorEncoder<'_>,
    readers: &[Arc<pgtier_replicas::ReadRouter>],
) -> Encoded {
    struct Replica {
        database: String,
        replica: String,
        lsn: Option<pgtier_replicas::lsn::ReplicaLsn>,
        reads: u64,
    }
    let mut replicas = Vec::new();
    for reader in readers {
        let view = reader.view();
        for replica in (0..reader.replica_count()).filter_map(pgtier_policy::ReplicaId::from_index)
        {
            replicas.push(Replica {
                database: reader.name().to_string(),
                replica: reader
                    .replica_addr(replica)
                    .map_or_else(|| replica.to_string(), |addr| addr.to_string()),
                lsn: view
                    .replica(replica.index())
                    .copied()
                    .filter(|r| r.replay.is_some()),
                reads: reader.counters().reads(replica),
            });
        }
    }
    type Value = fn(&pgtier_replicas::lsn::ReplicaLsn) -> f64;
    let gauges: [(&str, &str, Option<Unit>, Value); 4] = [
        (
            "pgtier_replica_replay_lsn",
            "the replica's last polled replay position (pg_last_wal_replay_lsn) as a byte offset",
            None,
            |r| r.replay.map_or(0.0, |lsn| lsn.0 as f64),
        ),
        (
            "pgtier_replica_lag_bytes",
            "WAL bytes between the primary's newest insert position and the replica's replay",
            None,
            |r| r.lag_bytes as f64,
        ),
        (
            "pgtier_replica_lag",
            "age of the oldest primary position the replica has not replayed (0 when caught up)",
            Some(Unit::Seconds),
            |r| r.lag.as_secs_f64(),
        ),
        (
            "pgtier_replica_excluded",
            "1 while the replica is past the entry's replication lag cap and gets no new reads",
            None,
            |r| f64::from(u8::from(r.excluded)),
        ),
    ];
    for (name, help, unit, value) in gauges {
        let mut metric = family(encoder, name, help, unit.as_ref(), MetricType::Gauge)?;
        for r in &replicas {
            if let Some(lsn) = &r.lsn {
                let labels = [("database", &*r.database), ("replica", &*r.replica)];
                metric.encode_family(&labels)?.encode_gauge(&value(lsn))?;
            }
        }
    }
    {
        let mut metric = family(
            encoder,
            "pgtier_replica_reads",
            "read transactions of a reader entry placed on the replica",
            None,
            MetricType::Counter,
        )?;
        for r in &replicas {
            let labels = [("database", &*r.database), ("replica", &*r.replica)];
            metric
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&r.reads, None)?;
        }
    }
    let mut metric = family(
        encoder,
        "pgtier_reader_primary_fallbacks",
        "reads of a reader entry sent to the primary because no replica could serve them",
        None,
        MetricType::Counter,
    )?;
    for reader in readers {
        let labels = [("database", reader.name())];
        metric
            .encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&reader.primary_fallbacks(), None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_core::metrics::DatabaseTally;
    use pgtier_engine::pool_gauges::PoolGauge;
    use pgtier_replicas::RouterMap;

    fn sources() -> Sources {
        let engine = Arc::new(pgtier_engine::Shared::new(2));
        let mut tally = DatabaseTally::default();
        let app = tally.slot("app", &engine.databases);
        for duration_us in [50, 300, 2_000_000] {
            tally.record_query(app, duration_us);
        }
        tally.record_transaction(app, 400);
        tally.record_bytes(app, 10, 20);
        tally.record_wait(app, 1_500_000);
        tally.fold();
        let mut counts = pgtier_core::metrics::DigestCounts::default();
        counts.record(1_500_000, 1, false);
        counts.record(500_000, 0, true);
        let (database, text) = (
            Arc::<str>::from("app"),
            Arc::<str>::from("SELECT \"q\" = $1"),
        );
        engine.digests.merge([pgtier_core::metrics::DigestFold {
            database: &database,
            query_id: 0xfeed,
            text: Some(&text),
            counts: &counts,
        }]);
        engine.pool_gauges.publish(
            1,
            vec![PoolGauge {
                database: "app".into(),
                user: "alice".into(),
                clients_active: 3,
                clients_waiting: 1,
                clients_pinned: 1,
                servers_idle: 2,
                max_wait_us: 250_000,
                ..PoolGauge::default()
            }],
        );
        Sources {
            engine,
            routing: Arc::new(SharedRouting::new(RouterMap::default())),
        }
    }

    fn lines(format: Format) -> Vec<String> {
        let text = encode(&registry(sources()), format).expect("encodes");
        text.lines().map(str::to_string).collect()
    }

    fn has(lines: &[String], wanted: &str) -> bool {
        lines.iter().any(|line| line == wanted)
    }

    #[test]
    fn prometheus_text_has_typed_families_with_units_and_totals() {
        let lines = lines(Format::PrometheusText);
        for wanted in [
            "# TYPE pgtier_up gauge",
            "pgtier_up 1",
            "# TYPE pgtier_database_queries_total counter",
            "pgtier_database_queries_total{database=\"app\"} 3",
            "pgtier_database_received_bytes_total{database=\"app\"} 10",
            "pgtier_database_wait_seconds_total{database=\"app\"} 1.5",
            "# TYPE pgtier_database_query_duration_seconds histogram",
            "pgtier_database_query_duration_seconds_bucket{database=\"app\",le=\"0.0001\"} 1",
            "pgtier_database_query_duration_seconds_bucket{database=\"app\",le=\"0.0005\"} 2",
            "pgtier_database_query_duration_seconds_bucket{database=\"app\",le=\"+Inf\"} 3",
            "pgtier_database_query_duration_seconds_count{database=\"app\"} 3",
            "pgtier_pool_clients{database=\"app\",user=\"alice\",state=\"waiting\"} 1",
            "pgtier_pool_servers{database=\"app\",user=\"alice\",state=\"idle\"} 2",
            "pgtier_pool_max_wait_seconds{database=\"app\",user=\"alice\"} 0.25",
            "pgtier_pool_pinned_clients{database=\"app\",user=\"alice\"} 1",
            "# TYPE pgtier_class_query_duration_seconds histogram",
            "# TYPE pgtier_query_calls_total counter",
            "pgtier_query_calls_total{database=\"app\",query_id=\"000000000000feed\"} 2",
            "pgtier_query_time_seconds_total{database=\"app\",query_id=\"000000000000feed\"} 2.0",
            "pgtier_query_errors_total{database=\"app\",query_id=\"000000000000feed\"} 1",
            "pgtier_query_info{query_id=\"000000000000feed\",query=\"SELECT \\\"q\\\" = $1\"} 1",
            "pgtier_query_digests_evicted_total 0",
        ] {
            assert!(
                has(&lines, wanted),
                "missing {wanted:?} in\n{}",
                lines.join("\n")
            );
        }
        assert!(!has(&lines, "# EOF"), "the text format has no EOF marker");
        let help = lines.iter().filter(|l| l.starts_with("# HELP ")).count();
        let types = lines.iter().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(help, types, "every family has HELP and TYPE");
    }

    #[test]
    fn the_fleet_families_appear_only_with_a_fleet() {
        let sources = sources();
        let fleet = Arc::clone(&sources.routing.fleet);
        let registry = registry(sources);
        let text = encode(&registry, Format::PrometheusText).expect("encodes");
        assert!(!text.contains("pgtier_fleet"), "{text}");
        fleet.publish(pgtier_replicas::FleetView {
            name: "east".to_string(),
            host: "a:6432".to_string(),
            mode: "local",
            is_leader: false,
            version: 0,
            stored_version: 9,
            members: vec![pgtier_replicas::MemberView {
                host: "b:6432".to_string(),
                last_report: String::new(),
                age: std::time::Duration::from_millis(1500),
                live: true,
            }],
            ..pgtier_replicas::FleetView::default()
        });
        let text = encode(&registry, Format::PrometheusText).expect("encodes");
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        for wanted in [
            "pgtier_fleet_mode{fleet=\"east\",mode=\"local\"} 1",
            "pgtier_fleet_leader{fleet=\"east\"} 0",
            "pgtier_fleet_version{fleet=\"east\"} 0",
            "pgtier_fleet_stored_version{fleet=\"east\"} 9",
            "pgtier_fleet_live_members{fleet=\"east\"} 1",
            "pgtier_fleet_member_report_age_seconds{fleet=\"east\",member=\"b:6432\"} 1.5",
            "pgtier_fleet_local_fallbacks_total{fleet=\"east\"} 0",
            "pgtier_fleet_versions_applied_total{fleet=\"east\"} 0",
            "pgtier_fleet_versions_published_total{fleet=\"east\"} 0",
            "pgtier_fleet_failed_rounds_total{fleet=\"east\"} 0",
        ] {
            assert!(has(&lines, wanted), "missing {wanted:?} in\n{text}");
        }
    }

    /// Encodes only the replica families of `routers`.
    #[derive(Debug)]
    struct Replicas(Vec<Arc<pgtier_replicas::router::ReplicaRouter>>);

    impl Collector for Replicas {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Encoded {
            encode_replicas(&mut encoder, &self.0)
        }
    }

    /// Encodes only the reader families.
    #[derive(Debug)]
    struct Readers(Vec<Arc<pgtier_replicas::ReadRouter>>);

    impl Collector for Readers {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Encoded {
            encode_readers(&mut encoder, &self.0)
        }
    }

    #[test]
    fn readers_show_replay_lag_exclusion_reads_and_fallbacks() {
        use pgtier_replicas::lsn::{Lsn, LsnTracker};
        let text = r#"
            [pgtier]
            auth_type = "trust"
            [databases.app]
            dbname = "postgres"
            user = "postgres"
            primary = "127.0.0.1:15400"
            replicas = ["127.0.0.1:15401", "127.0.0.1:15402"]
            max_replica_lag_bytes = 100
        "#;
        let config = pgtier_core::config::Config::from_str(text, "/tmp/m.toml").expect("config");
        let map =
            RouterMap::from_config(&config, pgtier_replicas::default_probe_login).expect("map");
        let reader = Arc::clone(map.reader("app").expect("reader"));
        let mut tracker = LsnTracker::new(2, reader.lag_cap());
        let now = std::time::Instant::now();
        tracker.on_primary(now, Lsn(1000));
        tracker.on_replica(0, Lsn(800));
        reader.publish(tracker.view(now));
        let mut local = pgtier_replicas::ReadLocal::new(1);
        let ask = pgtier_replicas::ReadAsk {
            class: pgtier_policy::ServiceClass::Freemium.into(),
            leased: None,
            after: None,
            avoid: None,
        };
        // Replica 0 is excluded, replica 1 never polled (so it still serves plain reads).
        drop(reader.route(&ask, &mut local));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Readers(vec![reader])));
        let text = encode(&registry, Format::PrometheusText).expect("encodes");
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        let labels = "{database=\"app\",replica=\"127.0.0.1:15401\"}";
        for wanted in [
            format!("pgtier_replica_replay_lsn{labels} 800.0"),
            format!("pgtier_replica_lag_bytes{labels} 200.0"),
            format!("pgtier_replica_lag_seconds{labels} 0.0"),
            format!("pgtier_replica_excluded{labels} 1.0"),
            format!("pgtier_replica_reads_total{labels} 0"),
            "pgtier_replica_reads_total{database=\"app\",replica=\"127.0.0.1:15402\"} 1"
                .to_string(),
            "pgtier_reader_primary_fallbacks_total{database=\"app\"} 0".to_string(),
            "# TYPE pgtier_replica_lag_seconds gauge".to_string(),
        ] {
            assert!(
                has(&lines, &wanted),
                "missing {wanted:?} in\n{}",
                lines.join("\n")
            );
        }
        assert!(
            !lines
                .iter()
                .any(|l| l.starts_with("pgtier_replica_lag_bytes{") && l.contains("15402")),
            "a replica never polled has no lag sample"
        );
    }

    #[test]
    fn replicas_show_role_state_sessions_and_role_events() {
        use pgtier_replicas::test_support::{admit_now, paper_router};
        let router = paper_router(2);
        let _leases: Vec<_> = (0..5)
            .map(|_| admit_now(&router, pgtier_policy::ServiceClass::Premium).expect("admit"))
            .collect();
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Replicas(vec![router.clone()])));
        let text = encode(&registry, Format::PrometheusText).expect("encodes");
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        let name = router.name().to_string();
        let sessions: u64 = lines
            .iter()
            .filter(|l| {
                l.starts_with("pgtier_replica_sessions{") && l.contains("class=\"premium\"")
            })
            .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<u64>().ok()))
            .sum();
        assert_eq!(sessions, 5, "{text}");
        let ups = lines
            .iter()
            .filter(|l| l.starts_with("pgtier_replica_up{"))
            .count();
        assert_eq!(ups, router.replica_count());
        let roles = lines
            .iter()
            .filter(|l| l.starts_with("pgtier_replica_role{"))
            .count();
        assert_eq!(roles, router.replica_count());
        // The fifth session borrowed a replica through the control shard: one role event.
        let events = format!("pgtier_role_events_total{{database=\"{name}\"}} 1");
        assert!(has(&lines, &events), "{text}");
    }

    #[test]
    fn openmetrics_when_asked_ends_with_eof() {
        let format = Format::from_accept(Some(
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        ));
        assert_eq!(format, Format::OpenMetrics);
        assert!(
            format
                .content_type()
                .starts_with("application/openmetrics-text")
        );
        let lines = lines(format);
        assert_eq!(lines.last().map(String::as_str), Some("# EOF"));
        assert!(has(
            &lines,
            "# UNIT pgtier_database_query_duration_seconds seconds"
        ));
        assert!(has(
            &lines,
            "pgtier_database_queries_total{database=\"app\"} 3"
        ));
        assert_eq!(Format::from_accept(Some("*/*")), Format::PrometheusText);
        assert_eq!(Format::from_accept(None), Format::PrometheusText);
    }
}
