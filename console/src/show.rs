//! The rows of each `SHOW` command, built from a read-only view of the routers, their health
//! and event logs, the traffic statistics and the configuration; the commands over every
//! shard's connection rows are in `listing.rs`.

use std::sync::Arc;

use pgtier_core::class::ClassSetting;
use pgtier_policy::ReplicaId;

use crate::command::AdminCommand;
use crate::format::{millis, utc_timestamp};
use crate::listing;
use crate::queries;
use crate::result::{ResultSet, bytea, int4, int8, text as text_column, text_columns};
use crate::stats;
use crate::{AdminView, PoolerState, StatsView};
use pgtier_replicas::ReadRouter;
use pgtier_replicas::authority::ReplicaHealth;
use pgtier_replicas::events::{ControlEvent, EventKind};
use pgtier_replicas::health::ProbeOutcome;
use pgtier_replicas::router::ReplicaRouter;
use pgtier_replicas::router_config::RouterPolicy;

/// `SHOW PEERS`: PgBouncer's columns, one row per `[peers]` entry but this process's own.
fn peers(config: Option<&pgtier_core::config::Config>) -> ResultSet {
    let rows = config
        .into_iter()
        .flat_map(|config| {
            let own = config.pgtier.peer_id;
            config
                .peers
                .iter()
                .filter(move |(id, _)| u32::from(**id) != own)
                .map(move |(id, peer)| {
                    let pool_size = peer.pool_size.unwrap_or(config.pgtier.default_pool_size);
                    vec![
                        Some(id.to_string()),
                        Some(peer.addr.host.clone()),
                        Some(peer.addr.port.to_string()),
                        Some(pool_size.to_string()),
                    ]
                })
        })
        .collect();
    ResultSet {
        columns: vec![
            int4("peer_id"),
            text_column("host"),
            int4("port"),
            int4("pool_size"),
        ],
        rows,
    }
}

/// The result set of `command` over `view`.
pub(crate) fn result_set(command: AdminCommand, view: &AdminView<'_>) -> ResultSet {
    match command {
        AdminCommand::Replicas => replicas(view.routers, view.readers),
        AdminCommand::Routers => routers(view.routers),
        AdminCommand::Fleet => crate::fleet::show_fleet(view.fleet),
        AdminCommand::Readers => readers(view.readers),
        AdminCommand::RoleEvents => role_events(view.routers),
        AdminCommand::Events => failure_events(view.routers),
        AdminCommand::ClassStats => class_stats(view.stats),
        AdminCommand::Stats => stats::show_stats(view),
        AdminCommand::StatsTotals => stats::show_stats_totals(view),
        AdminCommand::StatsAverages => stats::show_stats_averages(view),
        AdminCommand::Totals => stats::show_totals(view),
        AdminCommand::Queries => queries::show_queries(view),
        AdminCommand::Clients => listing::clients(view.listing),
        AdminCommand::Servers => listing::servers(view.listing),
        AdminCommand::Sockets => listing::sockets(view.listing, false),
        AdminCommand::ActiveSockets => listing::sockets(view.listing, true),
        AdminCommand::Pools => listing::pools(view.config, view.listing),
        AdminCommand::Databases => listing::databases(view.config, view.listing, view.gates),
        AdminCommand::Users => listing::users(view.config, view.listing),
        AdminCommand::Lists => listing::lists(view.config, view.listing),
        AdminCommand::Config => config(view.config),
        AdminCommand::Mem => ResultSet::empty(vec![
            text_column("name"),
            int4("size"),
            int4("used"),
            int4("free"),
            int4("memtotal"),
        ]),
        AdminCommand::Fds => ResultSet::empty(vec![
            int4("fd"),
            text_column("task"),
            text_column("user"),
            text_column("database"),
            text_column("addr"),
            int4("port"),
            int8("cancel"),
            int4("link"),
            text_column("client_encoding"),
            text_column("std_strings"),
            text_column("datestyle"),
            text_column("timezone"),
            text_column("password"),
            bytea("scram_client_key"),
            bytea("scram_server_key"),
        ]),
        AdminCommand::Peers => peers(view.config),
        AdminCommand::PeerPools => ResultSet::empty(vec![
            int4("peer_id"),
            int4("cl_active_cancel_req"),
            int4("cl_waiting_cancel_req"),
            int4("sv_active_cancel"),
            int4("sv_login"),
        ]),
        AdminCommand::DnsHosts => ResultSet::empty(vec![
            text_column("hostname"),
            int8("ttl"),
            text_column("addrs"),
        ]),
        AdminCommand::DnsZones => {
            ResultSet::empty(vec![text_column("zonename"), int8("serial"), int4("count")])
        }
        AdminCommand::State => state(view.state),
        AdminCommand::Version => ResultSet {
            columns: text_columns(&["version"]),
            rows: vec![vec![Some(view.version.to_string())]],
        },
        AdminCommand::Help => ResultSet {
            columns: text_columns(&["command", "description"]),
            rows: AdminCommand::ALL
                .iter()
                .map(|(command, about)| {
                    vec![
                        Some(format!("SHOW {}", command.name())),
                        Some(about.to_string()),
                    ]
                })
                .collect(),
        },
    }
}

fn text(value: impl ToString) -> Option<String> {
    Some(value.to_string())
}

fn replicas(routers: &[Arc<ReplicaRouter>], readers: &[Arc<ReadRouter>]) -> ResultSet {
    let mut rows = Vec::new();
    for router in routers {
        let snapshot = router.snapshot();
        let health = router.replica_health();
        let reader = readers.iter().find(|r| Arc::ptr_eq(r.router(), router));
        let view = reader.map(|reader| reader.view());
        for (replica, role) in snapshot.table.iter() {
            let load = router.load(replica);
            let state = health.get(replica.index());
            let lsn = view.as_ref().and_then(|view| view.replica(replica.index()));
            let mut row = vec![
                text(router.name()),
                router.replica_addr(replica).map(|addr| addr.to_string()),
                text(router.role_name(replica, role)),
                role.borrowed_from().map(str::to_string),
                text(load.premium),
                text(load.freemium),
                state.map(|h| h.state.as_str().to_string()),
                state.map(|h| utc_timestamp(h.since)),
                state
                    .and_then(|h| h.last_probe.as_ref())
                    .map(|p| utc_timestamp(p.at)),
                state.and_then(probe_result),
            ];
            // Reader entries only; NULL elsewhere (and before the first poll).
            row.extend([
                lsn.and_then(|r| r.replay).map(|lsn| lsn.to_string()),
                lsn.filter(|r| r.replay.is_some())
                    .map(|r| r.lag_bytes.to_string()),
                lsn.filter(|r| r.replay.is_some())
                    .map(|r| format!("{:.3}", r.lag.as_secs_f64())),
                lsn.map(|r| bool_text(r.excluded)),
                // Reads in flight on a reader entry; PLB's transactions in flight when it
                // decides on them (`load_signal = "in_flight"`).
                match reader {
                    Some(r) => text(r.counters().in_flight(replica)),
                    None if router.counts_in_flight() => text(router.in_flight(replica).total()),
                    None => None,
                },
                reader.map(|r| r.counters().reads(replica).to_string()),
                // Tiered PLB: the sessions of every rank, premium first ("2/1/4"); the two
                // columns above count rank 0 and every rank below it.
                class_sessions(router, replica),
            ]);
            rows.push(row);
        }
    }
    ResultSet {
        columns: text_columns(&[
            "database",
            "replica",
            "role",
            "borrowed_from",
            "premium_sessions",
            "freemium_sessions",
            "state",
            "state_since",
            "last_probe",
            "last_probe_result",
            "replay_lsn",
            "lag_bytes",
            "lag_seconds",
            "excluded",
            "in_flight",
            "reads",
            "class_sessions",
        ]),
        rows,
    }
}

fn class_sessions(router: &ReplicaRouter, replica: ReplicaId) -> Option<String> {
    let RouterPolicy::Tiers(plb) = router.policy() else {
        return None;
    };
    let load = router.tier_load(replica);
    let ranks = usize::from(plb.params().tiers);
    let counts: Vec<String> = load
        .sessions
        .iter()
        .take(ranks)
        .map(u32::to_string)
        .collect();
    Some(counts.join("/"))
}

fn bool_text(value: bool) -> String {
    (if value { "t" } else { "f" }).to_string()
}

fn readers(readers: &[Arc<ReadRouter>]) -> ResultSet {
    let rows = readers
        .iter()
        .map(|reader| {
            let view = reader.view();
            let counters = reader.counters();
            let reads: u64 = (0..reader.replica_count())
                .filter_map(ReplicaId::from_index)
                .map(|replica| counters.reads(replica))
                .sum();
            vec![
                text(reader.name()),
                // The host writes go to now: the configured primary until a promotion.
                reader.elected_primary().addr.map(|addr| addr.to_string()),
                view.primary_lsn().map(|lsn| lsn.to_string()),
                text(bool_text(view.primary_stale)),
                text(reader.replica_count()),
                text(counters.total_in_flight()),
                text(reads),
                text(reader.primary_fallbacks()),
                text(reader.not_yet()),
            ]
        })
        .collect();
    ResultSet {
        columns: text_columns(&[
            "database",
            "primary",
            "primary_lsn",
            "primary_stale",
            "replicas",
            "in_flight",
            "replica_reads",
            "primary_fallbacks",
            "not_yet",
        ]),
        rows,
    }
}

fn routers(routers: &[Arc<ReplicaRouter>]) -> ResultSet {
    let rows = routers
        .iter()
        .map(|router| {
            let snapshot = router.snapshot();
            let stats = router.stats();
            vec![
                text(router.name()),
                text(router.policy().name().as_str()),
                text(router.replica_count()),
                text(snapshot.table.up_count()),
                text(snapshot.generation),
                text(router.total_sessions()),
                text(stats.local_admissions),
                text(stats.control_admissions),
                text(stats.claim_races),
                text(stats.repins),
                text(stats.failure_reports),
                text(router.events_recorded()),
                text(stats.drain_moves),
            ]
        })
        .collect();
    ResultSet {
        columns: text_columns(&[
            "database",
            "routing",
            "replicas",
            "replicas_up",
            "generation",
            "sessions",
            "local_admissions",
            "control_admissions",
            "claim_races",
            "repins",
            "failure_reports",
            "events",
            "drain_moves",
        ]),
        rows,
    }
}

fn probe_result(health: &ReplicaHealth) -> Option<String> {
    let probe = health.last_probe.as_ref()?;
    Some(match &probe.outcome {
        ProbeOutcome::Healthy { round_trip } => format!("ok ({} ms)", millis(*round_trip)),
        ProbeOutcome::Failed { cause } => cause.clone(),
    })
}

/// Events of every router matching `keep`, oldest first.
fn merged_events(
    routers: &[Arc<ReplicaRouter>],
    keep: impl Fn(&ControlEvent) -> bool,
) -> Vec<ControlEvent> {
    let mut events: Vec<ControlEvent> = routers
        .iter()
        .flat_map(|router| router.events())
        .filter(|event| keep(event))
        .collect();
    events.sort_by(|a, b| (a.at, &*a.database, a.seq).cmp(&(b.at, &*b.database, b.seq)));
    events
}

fn replica_label(routers: &[Arc<ReplicaRouter>], database: &str, replica: ReplicaId) -> String {
    routers
        .iter()
        .find(|router| router.name() == database)
        .and_then(|router| router.replica_addr(replica))
        .map_or_else(|| replica.to_string(), |addr| addr.to_string())
}

fn role_events(routers: &[Arc<ReplicaRouter>]) -> ResultSet {
    let rows = merged_events(routers, ControlEvent::is_borrow_or_return)
        .into_iter()
        .filter_map(|event| {
            let change = event.kind.role_parts()?;
            Some(vec![
                text(event.seq),
                Some(utc_timestamp(event.at)),
                text(&event.database),
                Some(replica_label(routers, &event.database, change.replica)),
                text(change.from),
                text(change.to),
                change.class.map(str::to_string),
                text(change.reason),
            ])
        })
        .collect();
    ResultSet {
        columns: text_columns(&[
            "seq", "time", "database", "replica", "from", "to", "class", "reason",
        ]),
        rows,
    }
}

fn failure_events(routers: &[Arc<ReplicaRouter>]) -> ResultSet {
    let rows = merged_events(routers, ControlEvent::is_failure_handling)
        .into_iter()
        .filter_map(|event| {
            let (replica, name, from, to, detail) = match (&event.kind, event.kind.role_parts()) {
                (_, Some(change)) => (
                    change.replica,
                    change.reason,
                    text(change.from),
                    text(change.to),
                    None,
                ),
                (
                    EventKind::Health {
                        replica,
                        transition,
                        cause,
                    },
                    None,
                ) => (
                    *replica,
                    transition.as_str(),
                    None,
                    None,
                    Some(cause.clone()),
                ),
                (_, None) => return None,
            };
            Some(vec![
                text(event.seq),
                Some(utc_timestamp(event.at)),
                text(&event.database),
                Some(replica_label(routers, &event.database, replica)),
                text(name),
                from,
                to,
                detail,
            ])
        })
        .collect();
    ResultSet {
        columns: text_columns(&[
            "seq", "time", "database", "replica", "event", "from", "to", "cause",
        ]),
        rows,
    }
}

fn class_stats(view: Option<&StatsView>) -> ResultSet {
    let columns = text_columns(&[
        "class",
        "total_queries",
        "total_transactions",
        "interval_end",
        "interval_s",
        "interval_queries",
        "queries_per_s",
        "p50_ms",
        "p95_ms",
    ]);
    let Some(view) = view else {
        return ResultSet {
            columns,
            rows: Vec::new(),
        };
    };
    let rows = ClassSetting::ALL
        .iter()
        .enumerate()
        .filter(|(index, class)| {
            class.always_reported()
                || view.totals.queries[*index] > 0
                || view.totals.transactions[*index] > 0
        })
        .map(|(index, class)| {
            let interval = view.interval.as_ref();
            let seconds = interval.map(|i| i.length.as_secs_f64());
            let queries = interval.map(|i| i.latency[index].count);
            let rate = match (queries, seconds) {
                (Some(q), Some(s)) if s > 0.0 => Some(format!("{:.1}", q as f64 / s)),
                _ => None,
            };
            let ms = |us: u64| format!("{:.3}", us as f64 / 1000.0);
            vec![
                text(class.as_str()),
                text(view.totals.queries[index]),
                text(view.totals.transactions[index]),
                interval.map(|i| utc_timestamp(i.ended_at)),
                seconds.map(|s| format!("{s:.1}")),
                queries.map(|q| q.to_string()),
                rate,
                interval.map(|i| ms(i.latency[index].p50_us)),
                interval.map(|i| ms(i.latency[index].p95_us)),
            ]
        })
        .collect();
    ResultSet { columns, rows }
}

/// `SHOW CONFIG`: every setting, rendered by `pgtier_core::config::show`.
fn config(config: Option<&pgtier_core::config::Config>) -> ResultSet {
    let columns = text_columns(&["key", "value", "default", "changeable"]);
    let rows = config
        .map(|config| pgtier_core::config::show::config_rows(&config.pgtier))
        .unwrap_or_default()
        .into_iter()
        .map(|row| {
            vec![
                text(row.key),
                text(row.value),
                text(row.default),
                text(pgtier_core::config::show::yes_no(row.changeable)),
            ]
        })
        .collect();
    ResultSet { columns, rows }
}

/// `SHOW STATE` (PgBouncer 1.19's): whether the pooler is active, paused, suspended.
fn state(state: PoolerState) -> ResultSet {
    let yes_no = |on: bool| text(if on { "yes" } else { "no" });
    ResultSet {
        columns: text_columns(&["key", "value"]),
        rows: vec![
            vec![text("active"), yes_no(!state.paused && !state.suspended)],
            vec![text("paused"), yes_no(state.paused)],
            vec![text("suspended"), yes_no(state.suspended)],
        ],
    }
}
