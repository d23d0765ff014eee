//! The write ledger: what each write's client was told, and the check of that against what
//! the primary holds afterwards.
//!
//! Each write is one transaction inserting a unique id (`BEGIN`, `INSERT`, `COMMIT`, each its
//! own round trip, so the client knows whether COMMIT was sent). Its outcome is:
//! - **acknowledged**: COMMIT returned success. The id must be on the primary exactly once.
//! - **failed**: an error before COMMIT was sent (the transaction cannot have committed), or
//!   an ERROR answer to COMMIT on a connection that stays up. The id must be absent.
//! - **unknown**: the connection died after COMMIT was sent, before its answer. The id may
//!   be present or absent, never twice. PostgreSQL's clients call this 08006 (connection
//!   failure: libpq's lost connection, JDBC's 08006), 08003 or 08007 (transaction resolution
//!   unknown); any other way of getting here (a FATAL with another SQLSTATE, a client-side
//!   timeout) is counted as an unexpected unknown and named in the report.
//!
//! The ledger table has no unique constraint, so a write pgtier re-sent would show up as a
//! duplicate instead of failing.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// What the client was told about one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Acknowledged,
    /// `kind`: the SQLSTATE or connection error.
    Failed {
        kind: String,
    },
    /// The connection died after COMMIT was sent; `kind` as for `Failed`.
    Unknown {
        kind: String,
    },
}

/// One write of the load.
#[derive(Clone, Debug)]
pub struct WriteRecord {
    pub id: i64,
    /// When the outcome was known, from the start of the load.
    pub at: Duration,
    pub outcome: Outcome,
}

/// Kinds of unknown outcome a PostgreSQL client may legitimately see.
pub const ALLOWED_UNKNOWN: [&str; 4] = ["08006", "08003", "08007", "connection closed"];

/// The result of checking a ledger against the primary's rows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LedgerCheck {
    pub acknowledged: usize,
    pub failed: usize,
    pub unknown: usize,
    /// Unknown outcomes whose id is on the primary (committed after all).
    pub unknown_committed: usize,
    /// Acknowledged ids missing on the primary.
    pub lost: Vec<i64>,
    /// Ids on the primary more than once.
    pub duplicated: Vec<i64>,
    /// Definitely failed ids present on the primary.
    pub failed_present: Vec<i64>,
    /// Ids on the primary that no write of this ledger attempted.
    pub stray: Vec<i64>,
    /// Unknown outcomes by kind that PostgreSQL's clients would not report as such.
    pub unexpected_unknown: BTreeMap<String, usize>,
}

impl LedgerCheck {
    /// True when nothing acknowledged was lost, nothing duplicated, nothing failed
    /// committed, and nothing appeared that was never written.
    pub fn holds(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.failed_present.is_empty()
            && self.stray.is_empty()
    }

    /// One line for logs.
    pub fn summary(&self) -> String {
        format!(
            "{} acknowledged, {} failed, {} unknown ({} committed); lost {}, duplicated {}, \
             failed but present {}, stray {}, unexpected unknown {:?}",
            self.acknowledged,
            self.failed,
            self.unknown,
            self.unknown_committed,
            self.lost.len(),
            self.duplicated.len(),
            self.failed_present.len(),
            self.stray.len(),
            self.unexpected_unknown
        )
    }
}

/// Checks `records` against `rows`, the count of each id found on the primary (ids not
/// found are absent from the map).
pub fn check(records: &[WriteRecord], rows: &HashMap<i64, u64>) -> LedgerCheck {
    let mut result = LedgerCheck::default();
    let mut attempted = std::collections::HashSet::with_capacity(records.len());
    for record in records {
        attempted.insert(record.id);
        let count = rows.get(&record.id).copied().unwrap_or(0);
        match &record.outcome {
            Outcome::Acknowledged => {
                result.acknowledged += 1;
                if count == 0 {
                    result.lost.push(record.id);
                }
            }
            Outcome::Failed { .. } => {
                result.failed += 1;
                if count > 0 {
                    result.failed_present.push(record.id);
                }
            }
            Outcome::Unknown { kind } => {
                result.unknown += 1;
                if count > 0 {
                    result.unknown_committed += 1;
                }
                if !ALLOWED_UNKNOWN.contains(&kind.as_str()) {
                    *result.unexpected_unknown.entry(kind.clone()).or_default() += 1;
                }
            }
        }
    }
    for (&id, &count) in rows {
        if count > 1 {
            result.duplicated.push(id);
        }
        if !attempted.contains(&id) {
            result.stray.push(id);
        }
    }
    result.lost.sort_unstable();
    result.duplicated.sort_unstable();
    result.failed_present.sort_unstable();
    result.stray.sort_unstable();
    result
}

/// Parses psql's unaligned `id|count` lines.
pub fn parse_counts(text: &str) -> Result<HashMap<i64, u64>, String> {
    let mut rows = HashMap::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let (id, count) = line
            .split_once('|')
            .ok_or_else(|| format!("not an id|count line: {line:?}"))?;
        let id: i64 = id
            .trim()
            .parse()
            .map_err(|_| format!("bad id in {line:?}"))?;
        let count: u64 = count
            .trim()
            .parse()
            .map_err(|_| format!("bad count in {line:?}"))?;
        rows.insert(id, count);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: i64, outcome: Outcome) -> WriteRecord {
        WriteRecord {
            id,
            at: Duration::ZERO,
            outcome,
        }
    }

    fn failed(kind: &str) -> Outcome {
        Outcome::Failed { kind: kind.into() }
    }

    fn unknown(kind: &str) -> Outcome {
        Outcome::Unknown { kind: kind.into() }
    }

    fn ledger() -> Vec<WriteRecord> {
        vec![
            record(1, Outcome::Acknowledged),
            record(2, Outcome::Acknowledged),
            record(3, failed("57P01")),
            record(4, unknown("08006")),
            record(5, unknown("connection closed")),
        ]
    }

    #[test]
    fn a_clean_ledger_holds() {
        let rows = HashMap::from([(1, 1), (2, 1), (4, 1)]);
        let result = check(&ledger(), &rows);
        assert!(result.holds(), "{}", result.summary());
        assert_eq!(
            (result.acknowledged, result.failed, result.unknown),
            (2, 1, 2)
        );
        assert_eq!(result.unknown_committed, 1);
        assert!(result.unexpected_unknown.is_empty());
    }

    #[test]
    fn a_deleted_acknowledged_write_is_lost() {
        let rows = HashMap::from([(1, 1)]);
        let result = check(&ledger(), &rows);
        assert!(!result.holds());
        assert_eq!(result.lost, vec![2]);
    }

    #[test]
    fn a_second_copy_is_a_duplicate_even_of_an_unknown_write() {
        let rows = HashMap::from([(1, 1), (2, 2), (5, 2)]);
        let result = check(&ledger(), &rows);
        assert!(!result.holds());
        assert_eq!(result.duplicated, vec![2, 5]);
        assert!(result.lost.is_empty());
    }

    #[test]
    fn a_failed_write_that_committed_and_a_stray_id_break_the_ledger() {
        let rows = HashMap::from([(1, 1), (2, 1), (3, 1), (99, 1)]);
        let result = check(&ledger(), &rows);
        assert!(!result.holds());
        assert_eq!(result.failed_present, vec![3]);
        assert_eq!(result.stray, vec![99]);
    }

    #[test]
    fn unknown_outcomes_other_than_connection_failures_are_named() {
        let records = vec![
            record(1, unknown("57P01")),
            record(2, unknown("client timeout")),
        ];
        let result = check(&records, &HashMap::new());
        assert!(result.holds());
        assert_eq!(result.unexpected_unknown.len(), 2);
    }

    #[test]
    fn psql_counts_parse() {
        let rows = parse_counts("1|1\n7|2\n\n").expect("parse");
        assert_eq!(rows, HashMap::from([(1, 1), (7, 2)]));
        assert!(parse_counts("x").is_err());
    }
}
