//! One recorded query attempt (or failed connect) and its CSV form, the contract between
//! `pgtier-load run` and `pgtier-load summarize`.
//!
//! Hand-written CSV: every field is a number or a label without commas (query names are
//! restricted by the queries file), so a CSV library would add nothing.

use crate::sim::workload::Class;

/// The CSV header line (without the line end).
pub const CSV_HEADER: &str = "class,session,query,start_s,latency_ms,outcome";

/// The query name of rows that record a failed connection attempt.
pub const CONNECT_QUERY: &str = "<connect>";

/// The SQLSTATE placeholder for errors without one (the connection broke or never opened).
pub const CONNECTION_CODE: &str = "conn";

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Completed without error.
    Ok,
    /// Failed with this SQLSTATE, or `conn` for a connection-level failure.
    Error(String),
}

impl Outcome {
    fn to_field(&self) -> String {
        match self {
            Outcome::Ok => "ok".into(),
            Outcome::Error(code) => format!("error:{code}"),
        }
    }

    fn parse(field: &str) -> Option<Self> {
        match field {
            "ok" => Some(Outcome::Ok),
            _ => field
                .strip_prefix("error:")
                .filter(|code| !code.is_empty())
                .map(|code| Outcome::Error(code.to_string())),
        }
    }
}

/// One attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The session's class.
    pub class: Class,
    /// The session's index within its class (the schedule's, stable across runs).
    pub session: u64,
    /// Query name, or [`CONNECT_QUERY`].
    pub query: String,
    /// When the attempt was sent, from the run start (s).
    pub start_s: f64,
    /// Wall-clock time from send to completion or failure (ms).
    pub latency_ms: f64,
    /// How it ended.
    pub outcome: Outcome,
}

impl Row {
    /// True for a query attempt, false for a failed connect.
    pub fn is_query(&self) -> bool {
        self.query != CONNECT_QUERY
    }

    /// When the attempt ended, from the run start (s).
    pub fn end_s(&self) -> f64 {
        self.start_s + self.latency_ms / 1000.0
    }

    /// The CSV line (without the line end).
    pub fn to_csv(&self) -> String {
        format!(
            "{},{},{},{:.6},{:.3},{}",
            self.class.name(),
            self.session,
            self.query,
            self.start_s,
            self.latency_ms,
            self.outcome.to_field()
        )
    }

    /// Parses one CSV line.
    pub fn parse(line: &str) -> Result<Self, String> {
        let fields: Vec<&str> = line.split(',').collect();
        let [class, session, query, start_s, latency_ms, outcome] = fields[..] else {
            return Err(format!("expected 6 fields, found {}", fields.len()));
        };
        let number = |name: &str, value: &str| -> Result<f64, String> {
            value
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("{name} {value:?} is not a number"))
        };
        Ok(Row {
            class: parse_class(class)?,
            session: session
                .parse()
                .map_err(|_| format!("session {session:?} is not an index"))?,
            query: query.to_string(),
            start_s: number("start_s", start_s)?,
            latency_ms: number("latency_ms", latency_ms)?,
            outcome: Outcome::parse(outcome)
                .ok_or_else(|| format!("outcome {outcome:?} is neither ok nor error:CODE"))?,
        })
    }
}

/// The class of a lower-case name as written by [`Class::name`]: any of the
/// [`Class::MAX`] ranks (premium, freemium, tier2, tier3).
pub fn parse_class(name: &str) -> Result<Class, String> {
    Class::from_name(name).ok_or_else(|| format!("unknown class {name:?}"))
}

/// Parses a whole CSV file (header first); errors name the (1-based) line.
pub fn parse_csv(text: &str) -> Result<Vec<Row>, String> {
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    match lines.next() {
        Some((_, header)) if header.trim_end() == CSV_HEADER => {}
        _ => return Err(format!("line 1: expected the header {CSV_HEADER:?}")),
    }
    lines
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(number, line)| {
            Row::parse(line.trim_end()).map_err(|e| format!("line {number}: {e}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_csv() {
        let rows = [
            Row {
                class: Class::PREMIUM,
                session: 3,
                query: "heavy".into(),
                start_s: 1.25,
                latency_ms: 12.5,
                outcome: Outcome::Ok,
            },
            Row {
                class: Class::FREEMIUM,
                session: 0,
                query: CONNECT_QUERY.into(),
                start_s: 0.5,
                latency_ms: 0.25,
                outcome: Outcome::Error(CONNECTION_CODE.into()),
            },
        ];
        let text = format!("{CSV_HEADER}\n{}\n{}\n", rows[0].to_csv(), rows[1].to_csv());
        assert_eq!(parse_csv(&text).unwrap(), rows);
        assert!(rows[0].is_query() && !rows[1].is_query());
        assert!((rows[0].end_s() - 1.2625).abs() < 1e-12);
    }

    #[test]
    fn every_class_name_parses_back_to_its_rank() {
        for class in Class::ranks(Class::MAX) {
            assert_eq!(parse_class(class.name()), Ok(class));
        }
        let text = format!("{CSV_HEADER}\ntier2,4,q,0.1,2.0,ok\ntier3,0,q,0.2,1.0,ok\n");
        let rows = parse_csv(&text).unwrap();
        assert_eq!((rows[0].class, rows[1].class), (Class(2), Class(3)));
        assert!(rows[0].to_csv().starts_with("tier2,4,q,"));
    }

    #[test]
    fn bad_lines_are_named() {
        assert!(parse_csv("nope\n").unwrap_err().starts_with("line 1:"));
        let text = format!("{CSV_HEADER}\npremium,1,q,0.1,2.0,ok\npremium,1,q,0.1,x,ok\n");
        assert!(parse_csv(&text).unwrap_err().starts_with("line 3:"));
        for bad in ["basic", "tier4", "Premium", ""] {
            let text = format!("{CSV_HEADER}\n{bad},1,q,0.1,2.0,ok\n");
            assert!(
                parse_csv(&text).unwrap_err().contains("unknown class"),
                "{bad}"
            );
        }
        let text = format!("{CSV_HEADER}\nbasic,1,q,0.1,2.0,ok\n");
        assert!(parse_csv(&text).unwrap_err().contains("unknown class"));
        let text = format!("{CSV_HEADER}\npremium,1,q,0.1,2.0,error:\n");
        assert!(parse_csv(&text).unwrap_err().contains("outcome"));
        let text = format!("{CSV_HEADER}\npremium,1,q,0.1\n");
        assert!(parse_csv(&text).unwrap_err().contains("6 fields"));
    }
}
