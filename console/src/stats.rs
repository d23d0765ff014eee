//! PgBouncer's statistics commands: `SHOW STATS`, `SHOW STATS_TOTALS`, `SHOW STATS_AVERAGES`
//! (one row per database) and `SHOW TOTALS` (one row per figure, over every database), with
//! PgBouncer 1.25's column names, order and types (`database`/`name` text, every figure
//! numeric), from the per-database totals every shard folds into the engine's shared state.
//!
//! Totals count since start; averages are those of the last closed `stats_period`, as
//! PgBouncer 1.25 computes them: counts and bytes per second, transaction and query time per
//! transaction and query, wait time per server assignment (microseconds).

use pgtier_core::metrics::{DatabaseAverages, DatabaseCounts, DatabaseStats};

use crate::AdminView;
use crate::result::ResultSet;
use crate::result::{Column, numeric, text};

/// How many figures each of totals and averages has.
const FIGURES: usize = 12;

/// PgBouncer 1.25's twenty-five columns, then `total_requests`: the pre-1.8 name of the
/// query count, which Debian's prometheus-pgbouncer-exporter (1.7) still reads (it fails on
/// a PgBouncer without it). pgtier's own columns go after PgBouncer's.
const STATS_COLUMNS: [&str; 2 * FIGURES + 2] = [
    "database",
    "total_server_assignment_count",
    "total_xact_count",
    "total_query_count",
    "total_received",
    "total_sent",
    "total_xact_time",
    "total_query_time",
    "total_wait_time",
    "total_client_parse_count",
    "total_server_parse_count",
    "total_bind_count",
    "total_client_login_count",
    "avg_server_assignment_count",
    "avg_xact_count",
    "avg_query_count",
    "avg_recv",
    "avg_sent",
    "avg_xact_time",
    "avg_query_time",
    "avg_wait_time",
    "avg_client_parse_count",
    "avg_server_parse_count",
    "avg_bind_count",
    "avg_client_login_count",
    "total_requests",
];

/// `SHOW STATS_TOTALS`' names.
const TOTALS_SUBSET_COLUMNS: [&str; FIGURES + 1] = [
    "database",
    "server_assignment_count",
    "xact_count",
    "query_count",
    "bytes_received",
    "bytes_sent",
    "xact_time",
    "query_time",
    "wait_time",
    "client_parse_count",
    "server_parse_count",
    "bind_count",
    "client_login_count",
];

/// `SHOW STATS_AVERAGES`' names: PgBouncer prefixes only the figures added in 1.21 and later.
const AVERAGES_SUBSET_COLUMNS: [&str; FIGURES + 1] = [
    "database",
    "server_assignment_count",
    "xact_count",
    "query_count",
    "bytes_received",
    "bytes_sent",
    "xact_time",
    "query_time",
    "wait_time",
    "avg_client_parse_count",
    "avg_server_parse_count",
    "avg_bind_count",
    "avg_client_login_count",
];

const TOTALS_COLUMNS: [&str; 2] = ["name", "value"];

/// A text name first, numeric figures after: the columns of every statistics result.
fn columns(names: &[&'static str]) -> Vec<Column> {
    names
        .iter()
        .enumerate()
        .map(|(index, name)| {
            if index == 0 {
                text(name)
            } else {
                numeric(name)
            }
        })
        .collect()
}

fn number(value: u64) -> Option<String> {
    Some(value.to_string())
}

fn total_figures(totals: &DatabaseCounts) -> [u64; FIGURES] {
    [
        totals.server_assignment_count,
        totals.xact_count,
        totals.query_count,
        totals.received_bytes,
        totals.sent_bytes,
        totals.xact_time_us,
        totals.query_time_us,
        totals.wait_time_us,
        totals.client_parse_count,
        totals.server_parse_count,
        totals.bind_count,
        totals.client_login_count,
    ]
}

fn average_figures(averages: &DatabaseAverages) -> [u64; FIGURES] {
    [
        averages.server_assignment_count,
        averages.xact_count,
        averages.query_count,
        averages.received_bytes,
        averages.sent_bytes,
        averages.xact_time_us,
        averages.query_time_us,
        averages.wait_time_us,
        averages.client_parse_count,
        averages.server_parse_count,
        averages.bind_count,
        averages.client_login_count,
    ]
}

fn database_rows(
    databases: &[DatabaseStats],
    figures: impl Fn(&DatabaseStats) -> Vec<u64>,
) -> Vec<Vec<Option<String>>> {
    databases
        .iter()
        .map(|stats| {
            let mut row = vec![Some(stats.database.to_string())];
            row.extend(figures(stats).into_iter().map(number));
            row
        })
        .collect()
}

/// `SHOW STATS`: totals, then averages, then `total_requests`, per database.
pub(crate) fn show_stats(view: &AdminView<'_>) -> ResultSet {
    ResultSet {
        columns: columns(&STATS_COLUMNS),
        rows: database_rows(view.databases, |stats| {
            let mut figures = total_figures(&stats.totals).to_vec();
            figures.extend(average_figures(&stats.averages));
            figures.push(stats.totals.query_count);
            figures
        }),
    }
}

/// `SHOW STATS_TOTALS`: the totals of `SHOW STATS` without their `total_` prefix.
pub(crate) fn show_stats_totals(view: &AdminView<'_>) -> ResultSet {
    ResultSet {
        columns: columns(&TOTALS_SUBSET_COLUMNS),
        rows: database_rows(view.databases, |stats| {
            total_figures(&stats.totals).to_vec()
        }),
    }
}

/// `SHOW STATS_AVERAGES`: the averages of `SHOW STATS`.
pub(crate) fn show_stats_averages(view: &AdminView<'_>) -> ResultSet {
    ResultSet {
        columns: columns(&AVERAGES_SUBSET_COLUMNS),
        rows: database_rows(view.databases, |stats| {
            average_figures(&stats.averages).to_vec()
        }),
    }
}

/// `SHOW TOTALS`.
pub(crate) fn show_totals(view: &AdminView<'_>) -> ResultSet {
    ResultSet {
        columns: columns(&TOTALS_COLUMNS),
        rows: totals_rows(view.databases),
    }
}

/// `SHOW TOTALS`: the figures of `SHOW STATS` over every database, one per row, with
/// PgBouncer's names (`client_bytes` received from clients, `server_bytes` sent to them,
/// `ps_` before the prepared statement counts).
fn totals_rows(databases: &[DatabaseStats]) -> Vec<Vec<Option<String>>> {
    const NAMES: [&str; FIGURES] = [
        "server_assignment_count",
        "xact_count",
        "query_count",
        "client_bytes",
        "server_bytes",
        "xact_time",
        "query_time",
        "wait_time",
        "ps_client_parse_count",
        "ps_server_parse_count",
        "ps_bind_count",
        "client_login_count",
    ];
    let mut totals = [0u64; FIGURES];
    let mut averages = [0u64; FIGURES];
    for stats in databases {
        let add = |sum: &mut [u64; FIGURES], figures: [u64; FIGURES]| {
            for (sum, figure) in sum.iter_mut().zip(figures) {
                *sum = sum.saturating_add(figure);
            }
        };
        add(&mut totals, total_figures(&stats.totals));
        add(&mut averages, average_figures(&stats.averages));
    }
    // Time per query, per transaction and per assignment do not add up across databases:
    // weigh each database's average by its own rate.
    averages[5] = weighted_average(databases, |a| (a.xact_time_us, a.xact_count));
    averages[6] = weighted_average(databases, |a| (a.query_time_us, a.query_count));
    averages[7] = weighted_average(databases, |a| (a.wait_time_us, a.server_assignment_count));
    let rows = NAMES
        .iter()
        .zip(totals)
        .map(|(name, value)| (format!("total_{name}"), value));
    let averages = NAMES
        .iter()
        .zip(averages)
        .map(|(name, value)| (format!("avg_{name}"), value));
    rows.chain(averages)
        .map(|(name, value)| vec![Some(name), number(value)])
        .collect()
}

fn weighted_average(
    databases: &[DatabaseStats],
    pick: impl Fn(&DatabaseAverages) -> (u64, u64),
) -> u64 {
    let (mut weighted, mut weight) = (0u128, 0u128);
    for stats in databases {
        let (average, rate) = pick(&stats.averages);
        weighted += u128::from(average) * u128::from(rate);
        weight += u128::from(rate);
    }
    if weight == 0 {
        return 0;
    }
    u64::try_from(weighted / weight).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::VERSION;
    use crate::command::AdminCommand;
    use crate::result::ColumnType;
    use std::sync::Arc;

    fn stats(name: &str, queries: u64, avg_query_us: u64, avg_queries: u64) -> DatabaseStats {
        DatabaseStats {
            database: Arc::from(name),
            totals: DatabaseCounts {
                query_count: queries,
                xact_count: queries / 2,
                received_bytes: 100,
                server_assignment_count: 7,
                client_login_count: 3,
                ..DatabaseCounts::default()
            },
            averages: DatabaseAverages {
                query_count: avg_queries,
                query_time_us: avg_query_us,
                ..DatabaseAverages::default()
            },
        }
    }

    fn view(databases: &[DatabaseStats]) -> AdminView<'_> {
        AdminView {
            routers: &[],
            readers: &[],
            stats: None,
            version: VERSION,
            listing: None,
            databases,
            digests: None,
            config: None,
            state: crate::PoolerState::default(),
            gates: None,
            fleet: None,
        }
    }

    #[test]
    fn columns_and_types_are_pgbouncers() {
        for command in [
            AdminCommand::Stats,
            AdminCommand::StatsTotals,
            AdminCommand::StatsAverages,
            AdminCommand::Totals,
        ] {
            let set = crate::show::result_set(command, &view(&[]));
            assert_eq!(set.columns[0].ty, ColumnType::Text, "{command:?}");
            assert!(
                set.columns[1..]
                    .iter()
                    .all(|column| column.ty == ColumnType::Numeric),
                "{command:?}"
            );
        }
    }

    #[test]
    fn the_row_description_says_text_then_numeric() {
        use pgtier_wire::messages::BackendMessage;
        let databases = [stats("app", 4, 1, 1)];
        let mut out = bytes::BytesMut::new();
        crate::answer(
            "SHOW STATS_TOTALS",
            pgtier_engine::ConsoleRights::Stats,
            &view(&databases),
            &mut out,
        );
        let limits = pgtier_wire::FrameLimits::default();
        let frame = pgtier_wire::framing::split_message(&mut out, &limits)
            .expect("framing")
            .expect("a message");
        let Ok(BackendMessage::RowDescription(description)) = BackendMessage::decode(&frame.bytes)
        else {
            panic!("a RowDescription first");
        };
        let fields: Vec<(String, u32)> = description
            .fields()
            .map(|f| (String::from_utf8_lossy(f.name).into_owned(), f.type_oid))
            .collect();
        assert_eq!(fields[0], ("database".to_string(), 25));
        assert_eq!(fields[8], ("wait_time".to_string(), 1700));
        assert_eq!(fields[12], ("client_login_count".to_string(), 1700));
        assert_eq!(fields.len(), 13);
    }

    #[test]
    fn one_row_per_database_with_totals_then_averages() {
        let databases = [stats("app", 40, 250, 4), stats("pgbouncer", 2, 0, 0)];
        let set = show_stats(&view(&databases));
        assert_eq!(set.rows.len(), 2);
        let app = &set.rows[0];
        assert_eq!(app[0].as_deref(), Some("app"));
        assert_eq!(
            app[1].as_deref(),
            Some("7"),
            "total_server_assignment_count"
        );
        assert_eq!(app[2].as_deref(), Some("20"), "total_xact_count");
        assert_eq!(app[3].as_deref(), Some("40"), "total_query_count");
        assert_eq!(app[4].as_deref(), Some("100"), "total_received");
        assert_eq!(app[12].as_deref(), Some("3"), "total_client_login_count");
        assert_eq!(app[15].as_deref(), Some("4"), "avg_query_count");
        assert_eq!(app[19].as_deref(), Some("250"), "avg_query_time");
        assert_eq!(app[25].as_deref(), Some("40"), "total_requests");
        let totals = show_stats_totals(&view(&databases));
        assert_eq!(totals.rows[0][1..13], app[1..13]);
        let averages = show_stats_averages(&view(&databases));
        assert_eq!(averages.rows[0][1..], app[13..25]);
    }

    #[test]
    fn totals_add_databases_and_weigh_time_averages() {
        let databases = [stats("a", 10, 100, 1), stats("b", 30, 500, 3)];
        let set = show_totals(&view(&databases));
        let value = |name: &str| {
            set.rows
                .iter()
                .find(|row| row[0].as_deref() == Some(name))
                .and_then(|row| row[1].clone())
        };
        assert_eq!(value("total_query_count"), number(40));
        assert_eq!(value("total_client_bytes"), number(200));
        assert_eq!(value("avg_query_count"), number(4));
        assert_eq!(value("avg_query_time"), number(400), "(100*1 + 500*3) / 4");
        assert_eq!(value("total_server_assignment_count"), number(14));
        assert_eq!(value("total_client_login_count"), number(6));
        assert_eq!(value("total_ps_bind_count"), number(0));
        assert_eq!(set.rows.len(), 24);
    }
}
