//! Per-phase, per-class statistics of a run's rows: counts, latency median / p95 / mean of
//! successful queries, and goodput.
//!
//! Pure. Latencies are those of ok queries that *started* in the phase window [from, to);
//! goodput counts ok queries that *completed* in it, per second of window, so a query that
//! straddles a phase boundary is timed in the phase that sent it and counted as work done
//! in the phase that finished it.
//!
//! A run has two to [`Class::MAX`] classes, ranks 0..n-1; [`class_count`] reads n off the
//! rows, so tables cover every class the rows show.

use super::row::{Outcome, Row};
use crate::sim::stats::{mean, quantile};
use crate::sim::workload::Class;

/// A named time window of a run (s from the run start), [from, to).
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// Label in tables.
    pub name: String,
    /// Window start (s).
    pub from_s: f64,
    /// Window end (s), after `from_s`.
    pub to_s: f64,
}

impl Phase {
    /// Window length (s).
    pub fn length_s(&self) -> f64 {
        self.to_s - self.from_s
    }

    fn contains(&self, at_s: f64) -> bool {
        (self.from_s..self.to_s).contains(&at_s)
    }

    fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let [name, from, to] = parts[..] else {
            return Err(format!("phase {text:?} is not NAME:FROM:TO"));
        };
        let number = |value: &str| {
            value
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("phase {text:?}: {value:?} is not a number"))
        };
        let name = name.trim();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(format!(
                "phase {text:?}: the name must be ASCII letters, digits, '_', '-' or '.'"
            ));
        }
        let (from_s, to_s) = (number(from)?, number(to)?);
        if from_s >= to_s {
            return Err(format!("phase {text:?}: FROM must be before TO"));
        }
        Ok(Phase {
            name: name.to_string(),
            from_s,
            to_s,
        })
    }

    /// Parses `NAME:FROM:TO[,NAME:FROM:TO...]`.
    pub fn parse_list(text: &str) -> Result<Vec<Phase>, String> {
        let mut phases: Vec<Phase> = Vec::new();
        for part in text.split(',') {
            let phase = Phase::parse(part)?;
            if phases.iter().any(|p| p.name == phase.name) {
                return Err(format!("phase {:?} is named twice", phase.name));
            }
            phases.push(phase);
        }
        Ok(phases)
    }
}

/// Which sessions a statistic covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One class.
    Class(Class),
    /// Every class together.
    All,
}

impl Scope {
    /// The row order of tables for a run of `classes` classes: each class by rank (premium,
    /// freemium, tier2, tier3), then all.
    pub fn table_order(classes: usize) -> impl Iterator<Item = Scope> {
        Class::ranks(classes)
            .map(Scope::Class)
            .chain(std::iter::once(Scope::All))
    }

    /// Lower-case label.
    pub fn name(self) -> &'static str {
        match self {
            Scope::Class(class) => class.name(),
            Scope::All => "all",
        }
    }

    fn covers(self, class: Class) -> bool {
        match self {
            Scope::Class(c) => c == class,
            Scope::All => true,
        }
    }
}

/// The statistics of one scope in one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// Ok queries that started in the window.
    pub ok: u64,
    /// Failed queries that started in the window.
    pub errors: u64,
    /// Failed connection attempts that started in the window.
    pub connect_errors: u64,
    /// Median latency of the ok queries (ms); NaN without any.
    pub median_ms: f64,
    /// 95th percentile latency of the ok queries (ms); NaN without any.
    pub p95_ms: f64,
    /// Mean latency of the ok queries (ms); NaN without any.
    pub mean_ms: f64,
    /// Ok queries that completed in the window, per second of window.
    pub goodput_per_s: f64,
}

/// How many classes the rows come from: one more than the highest rank seen, and at least
/// the two every run has. Classes are contiguous ranks, so a rank below the highest is a
/// class of the run even when none of its rows are there (its sessions were all dropped,
/// or its rate was 0).
pub fn class_count<'a>(rows: impl IntoIterator<Item = &'a Row>) -> usize {
    rows.into_iter()
        .map(|row| row.class.index() + 1)
        .fold(2, usize::max)
        .min(Class::MAX)
}

/// Summarises the rows of `scope` in `phase`.
pub fn summarize(rows: &[Row], phase: &Phase, scope: Scope) -> Stats {
    let mut latencies_ms = Vec::new();
    let (mut errors, mut connect_errors, mut completed) = (0, 0, 0u64);
    for row in rows.iter().filter(|r| scope.covers(r.class)) {
        let is_ok = row.outcome == Outcome::Ok;
        if is_ok && phase.contains(row.end_s()) {
            completed += 1;
        }
        if !phase.contains(row.start_s) {
            continue;
        }
        match (is_ok, row.is_query()) {
            (true, _) => latencies_ms.push(row.latency_ms),
            (false, true) => errors += 1,
            (false, false) => connect_errors += 1,
        }
    }
    latencies_ms.sort_by(f64::total_cmp);
    Stats {
        ok: latencies_ms.len() as u64,
        errors,
        connect_errors,
        median_ms: quantile(&latencies_ms, 0.5),
        p95_ms: quantile(&latencies_ms, 0.95),
        mean_ms: mean(&latencies_ms),
        goodput_per_s: completed as f64 / phase.length_s(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::row::{CONNECT_QUERY, CONNECTION_CODE};

    fn row(class: Class, start_s: f64, latency_ms: f64, ok: bool) -> Row {
        Row {
            class,
            session: 0,
            query: "q".into(),
            start_s,
            latency_ms,
            outcome: if ok {
                Outcome::Ok
            } else {
                Outcome::Error("57014".into())
            },
        }
    }

    fn phase(from_s: f64, to_s: f64) -> Phase {
        Phase {
            name: "p".into(),
            from_s,
            to_s,
        }
    }

    #[test]
    fn windows_latencies_and_goodput() {
        const PREMIUM: Class = Class::PREMIUM;
        const FREEMIUM: Class = Class::FREEMIUM;
        let mut rows = vec![
            row(PREMIUM, 0.5, 100.0, true),   // before the window
            row(PREMIUM, 1.0, 10.0, true),    // in
            row(PREMIUM, 2.0, 20.0, true),    // in
            row(PREMIUM, 3.0, 30.0, true),    // in
            row(PREMIUM, 3.9, 400.0, true),   // starts in, completes after
            row(PREMIUM, 4.0, 1.0, true),     // the window is half-open
            row(PREMIUM, 2.5, 5.0, false),    // an error
            row(FREEMIUM, 0.95, 100.0, true), // starts before, completes in
            row(FREEMIUM, 1.5, 50.0, true),
        ];
        rows.push(Row {
            query: CONNECT_QUERY.into(),
            outcome: Outcome::Error(CONNECTION_CODE.into()),
            ..row(FREEMIUM, 2.0, 1.0, false)
        });
        let p = phase(1.0, 4.0);
        let premium = summarize(&rows, &p, Scope::Class(PREMIUM));
        assert_eq!(
            (premium.ok, premium.errors, premium.connect_errors),
            (4, 1, 0)
        );
        assert_eq!(premium.median_ms, 25.0);
        assert_eq!(premium.mean_ms, 115.0);
        assert!((premium.p95_ms - 344.5).abs() < 1e-9, "{}", premium.p95_ms);
        // Completed in [1, 4): the three at 1.01, 2.02, 3.03 s; 4.3 s and 4.001 s are out.
        assert!((premium.goodput_per_s - 1.0).abs() < 1e-12);

        let freemium = summarize(&rows, &p, Scope::Class(FREEMIUM));
        assert_eq!(
            (freemium.ok, freemium.errors, freemium.connect_errors),
            (1, 0, 1)
        );
        assert_eq!(freemium.median_ms, 50.0);
        assert!((freemium.goodput_per_s - 2.0 / 3.0).abs() < 1e-12);

        let all = summarize(&rows, &p, Scope::All);
        assert_eq!((all.ok, all.errors, all.connect_errors), (5, 1, 1));
        assert_eq!(all.median_ms, 30.0);
        assert!((all.goodput_per_s - 5.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn class_count_covers_every_rank_up_to_the_highest() {
        assert_eq!(class_count(&[]), 2);
        assert_eq!(class_count(&[row(Class::PREMIUM, 0.0, 1.0, true)]), 2);
        let tier3 = [
            row(Class::FREEMIUM, 0.0, 1.0, true),
            row(Class(3), 0.0, 1.0, true),
        ];
        assert_eq!(class_count(&tier3), 4);
        let order: Vec<Scope> = Scope::table_order(3).collect();
        assert_eq!(
            order,
            [
                Scope::Class(Class::PREMIUM),
                Scope::Class(Class::FREEMIUM),
                Scope::Class(Class(2)),
                Scope::All
            ]
        );
        assert_eq!(Scope::Class(Class(2)).name(), "tier2");
    }

    #[test]
    fn empty_window_gives_nan_latencies_and_zero_goodput() {
        let stats = summarize(&[], &phase(0.0, 10.0), Scope::All);
        assert_eq!((stats.ok, stats.errors, stats.goodput_per_s), (0, 0, 0.0));
        assert!(stats.median_ms.is_nan() && stats.p95_ms.is_nan() && stats.mean_ms.is_nan());
    }

    #[test]
    fn parses_phase_lists() {
        let phases = Phase::parse_list("warm:0:10,steady:10:60.5").unwrap();
        assert_eq!(phases.len(), 2);
        assert_eq!(
            phases[1],
            Phase {
                name: "steady".into(),
                from_s: 10.0,
                to_s: 60.5
            }
        );
        for bad in ["a:1", "a:2:1", "a:x:2", ":0:1", "a:0:1,a:1:2", "a b:0:1"] {
            assert!(Phase::parse_list(bad).is_err(), "{bad}");
        }
    }
}
