//! `SHOW QUERIES`: the query digests with the most total time (at most [`SHOW_QUERIES_ROWS`]),
//! from the store every shard folds its digests into. Times are microseconds, as in
//! `SHOW STATS`; `p50`/`p95` are as coarse as the time buckets (about three per decade, capped
//! at the longest call); `query_id` is the id the metrics endpoint labels the digest with.

use pgtier_core::metrics::DigestStats;

use crate::AdminView;
use crate::result::ResultSet;
use crate::result::{Column, numeric, text};

/// Rows `SHOW QUERIES` shows, by total time.
pub(crate) const SHOW_QUERIES_ROWS: usize = 100;

fn columns() -> Vec<Column> {
    vec![
        text("query"),
        numeric("calls"),
        numeric("rows"),
        numeric("total_time"),
        numeric("mean_time"),
        numeric("p50"),
        numeric("p95"),
        numeric("errors"),
        text("database"),
        text("query_id"),
    ]
}

/// The query id as the console and the metrics endpoint write it.
pub fn query_id_label(query_id: u64) -> String {
    format!("{query_id:016x}")
}

fn row(digest: &DigestStats) -> Vec<Option<String>> {
    let counts = &digest.counts;
    let figures = [
        counts.calls,
        counts.rows,
        counts.total_time_us,
        counts.mean_time_us(),
        counts.quantile_us(0.50),
        counts.quantile_us(0.95),
        counts.errors,
    ];
    let mut row = vec![Some(digest.text.to_string())];
    row.extend(figures.iter().map(|figure| Some(figure.to_string())));
    row.push(Some(digest.database.to_string()));
    row.push(Some(query_id_label(digest.query_id)));
    row
}

/// `SHOW QUERIES`.
pub fn show_queries(view: &AdminView<'_>) -> ResultSet {
    let digests = view
        .digests
        .map(|store| store.top_by_time(SHOW_QUERIES_ROWS))
        .unwrap_or_default();
    ResultSet {
        columns: columns(),
        rows: digests.iter().map(row).collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pgtier_core::metrics::{DigestCounts, DigestFold, DigestStore};

    use super::*;
    use crate::VERSION;

    #[test]
    fn rows_by_total_time_with_the_figures_in_microseconds() {
        let store = DigestStore::new(10);
        let db = Arc::<str>::from("app");
        let (fast, slow) = (Arc::<str>::from("SELECT $1"), Arc::<str>::from("UPDATE t"));
        let mut fast_counts = DigestCounts::default();
        for _ in 0..10 {
            fast_counts.record(50, 1, false);
        }
        let mut slow_counts = DigestCounts::default();
        slow_counts.record(3_000, 2, true);
        slow_counts.record(1_000, 0, false);
        store.merge([
            DigestFold {
                database: &db,
                query_id: 1,
                text: Some(&fast),
                counts: &fast_counts,
            },
            DigestFold {
                database: &db,
                query_id: 0xabc,
                text: Some(&slow),
                counts: &slow_counts,
            },
        ]);
        let view = AdminView {
            routers: &[],
            readers: &[],
            stats: None,
            version: VERSION,
            listing: None,
            databases: &[],
            digests: Some(&store),
            config: None,
            state: crate::PoolerState::default(),
            gates: None,
            fleet: None,
        };
        let set = show_queries(&view);
        let names: Vec<&str> = set.columns.iter().map(|column| column.name).collect();
        assert_eq!(
            names,
            [
                "query",
                "calls",
                "rows",
                "total_time",
                "mean_time",
                "p50",
                "p95",
                "errors",
                "database",
                "query_id"
            ]
        );
        let cell = |row: &Vec<Option<String>>, at: usize| row[at].clone().unwrap_or_default();
        let first = &set.rows[0];
        assert_eq!(cell(first, 0), "UPDATE t", "most total time first");
        assert_eq!(
            (1..8).map(|at| cell(first, at)).collect::<Vec<_>>(),
            ["2", "2", "4000", "2000", "1000", "3000", "1"]
        );
        assert_eq!(cell(first, 8), "app");
        assert_eq!(cell(first, 9), "0000000000000abc");
        assert_eq!(cell(&set.rows[1], 0), "SELECT $1");
        assert_eq!(
            cell(&set.rows[1], 5),
            "50",
            "bucket bound 100, capped at 50"
        );
    }
}
