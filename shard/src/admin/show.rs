//! The rows of each `SHOW` command, built from a read-only view of the routers, their health
//! and event logs, and the traffic statistics.

use std::sync::Arc;

use pgtier_policy::{ReplicaId, Role, ServiceClass, Strategy};

use crate::admin::command::AdminCommand;
use crate::admin::format::{millis, utc_timestamp};
use crate::admin::listing;
use crate::admin::{AdminView, StatsView};
use crate::control::authority::ReplicaHealth;
use crate::control::events::{ControlEvent, EventKind};
use crate::control::health::ProbeOutcome;
use crate::control::router::ReplicaRouter;

/// Column names and rows of one result set.
pub struct ResultSet {
    pub columns: &'static [&'static str],
    pub rows: Vec<Vec<Option<String>>>,
}

/// The result set of `command` over `view`.
pub fn result_set(command: AdminCommand, view: &AdminView<'_>) -> ResultSet {
    match command {
        AdminCommand::Replicas => replicas(view.routers),
        AdminCommand::Routers => routers(view.routers),
        AdminCommand::RoleEvents => role_events(view.routers),
        AdminCommand::Events => failure_events(view.routers),
        AdminCommand::Stats => stats(view.stats),
        AdminCommand::Clients => listing::clients(view.listing),
        AdminCommand::Pools => listing::pools(view.listing),
        AdminCommand::Version => ResultSet {
            columns: &["version"],
            rows: vec![vec![Some(view.version.to_string())]],
        },
        AdminCommand::Help => ResultSet {
            columns: &["command", "description"],
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

fn replicas(routers: &[Arc<ReplicaRouter>]) -> ResultSet {
    let mut rows = Vec::new();
    for router in routers {
        let snapshot = router.snapshot();
        let health = router.replica_health();
        for (replica, role) in snapshot.table.iter() {
            let load = router.load(replica);
            let state = health.get(replica.index());
            rows.push(vec![
                text(router.name()),
                router.replica_addr(replica).map(|addr| addr.to_string()),
                text(role_name(router.strategy(), replica, role)),
                role.borrowed_from().map(|pool| pool.as_str().to_string()),
                text(load.premium),
                text(load.freemium),
                state.map(|h| h.state.as_str().to_string()),
                state.map(|h| utc_timestamp(h.since)),
                state
                    .and_then(|h| h.last_probe.as_ref())
                    .map(|p| utc_timestamp(p.at)),
                state.and_then(probe_result),
            ]);
        }
    }
    ResultSet {
        columns: &[
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
        ],
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
                text(router.strategy().name().as_str()),
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
            ]
        })
        .collect();
    ResultSet {
        columns: &[
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
        ],
        rows,
    }
}

/// PLB shows its role; the baselines have no roles, so show what the replica serves.
fn role_name(strategy: &Strategy, replica: ReplicaId, role: Role) -> &'static str {
    match (strategy, role) {
        (_, Role::Down) => "down",
        (Strategy::Plb(_), role) => role.as_str(),
        (Strategy::Dedicated(split), _) => {
            if split.subset(ServiceClass::Premium).contains(replica) {
                "premium"
            } else if split.subset(ServiceClass::Freemium).contains(replica) {
                "freemium"
            } else {
                "unused"
            }
        }
        _ => "shared",
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
            let EventKind::Role { change, class } = &event.kind else {
                return None;
            };
            Some(vec![
                text(event.seq),
                Some(utc_timestamp(event.at)),
                text(&event.database),
                Some(replica_label(routers, &event.database, change.replica)),
                text(change.from.as_str()),
                text(change.to.as_str()),
                class.map(|c| c.as_str().to_string()),
                text(change.reason.as_str()),
            ])
        })
        .collect();
    ResultSet {
        columns: &[
            "seq", "time", "database", "replica", "from", "to", "class", "reason",
        ],
        rows,
    }
}

fn failure_events(routers: &[Arc<ReplicaRouter>]) -> ResultSet {
    let rows = merged_events(routers, ControlEvent::is_failure_handling)
        .into_iter()
        .map(|event| {
            let (replica, name, from, to, detail) = match &event.kind {
                EventKind::Health {
                    replica,
                    transition,
                    cause,
                } => (
                    *replica,
                    transition.as_str(),
                    None,
                    None,
                    Some(cause.clone()),
                ),
                EventKind::Role { change, .. } => (
                    change.replica,
                    change.reason.as_str(),
                    text(change.from.as_str()),
                    text(change.to.as_str()),
                    None,
                ),
            };
            vec![
                text(event.seq),
                Some(utc_timestamp(event.at)),
                text(&event.database),
                Some(replica_label(routers, &event.database, replica)),
                text(name),
                from,
                to,
                detail,
            ]
        })
        .collect();
    ResultSet {
        columns: &[
            "seq", "time", "database", "replica", "event", "from", "to", "cause",
        ],
        rows,
    }
}

fn stats(view: Option<&StatsView>) -> ResultSet {
    let columns: &'static [&'static str] = &[
        "class",
        "total_queries",
        "total_transactions",
        "interval_end",
        "interval_s",
        "interval_queries",
        "queries_per_s",
        "p50_ms",
        "p95_ms",
    ];
    let Some(view) = view else {
        return ResultSet {
            columns,
            rows: Vec::new(),
        };
    };
    let rows = ServiceClass::ALL
        .iter()
        .enumerate()
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
