//! Schedule and summary together, without sockets: a fake executor plays each planned
//! session with a fixed latency per query, as the session driver would, and the summary of
//! the rows must agree with what was played.

use super::row::{Outcome, Row};
use super::schedule::{Schedule, ScheduleParams, plan};
use super::summary::{Phase, Scope, summarize};
use crate::sim::workload::Class;

fn params() -> ScheduleParams {
    ScheduleParams {
        rate_per_s: [2.0, 4.0],
        duration_s: 60.0,
        lifetime_s: (2.0, 4.0),
        think_mean_s: 0.2,
        query_weights: vec![1.0, 1.0],
    }
}

/// Plays every session the way `session.rs` does: a query starts only before the end of the
/// lifetime, runs to completion, then the session thinks (or ends if the lifetime is over).
fn play(schedule: &Schedule, latency_s: [f64; 2]) -> Vec<Row> {
    let mut rows = Vec::new();
    for session in &schedule.sessions {
        let mut now_s = session.arrival_s;
        for step in session.steps(&schedule.picker) {
            if now_s >= session.end_s() {
                break;
            }
            let latency = latency_s[step.query];
            rows.push(Row {
                class: session.class,
                session: session.index,
                query: format!("q{}", step.query),
                start_s: now_s,
                latency_ms: latency * 1000.0,
                outcome: Outcome::Ok,
            });
            now_s += latency + step.think_s;
        }
    }
    rows
}

#[test]
fn summary_of_a_played_schedule_matches_the_rows() {
    let schedule = plan(42, &params()).unwrap();
    let rows = play(&schedule, [0.01, 0.2]);
    let phase = Phase {
        name: "steady".into(),
        from_s: 10.0,
        to_s: 50.0,
    };
    let premium = summarize(&rows, &phase, Scope::Class(Class::PREMIUM));
    let freemium = summarize(&rows, &phase, Scope::Class(Class::FREEMIUM));
    let all = summarize(&rows, &phase, Scope::All);
    let started_in = |class: Class| {
        rows.iter()
            .filter(|r| r.class == class && (10.0..50.0).contains(&r.start_s))
            .count() as u64
    };
    assert_eq!(premium.ok, started_in(Class::PREMIUM));
    assert_eq!(freemium.ok, started_in(Class::FREEMIUM));
    assert_eq!(all.ok, premium.ok + freemium.ok);
    // Twice the arrival rate, same session shape: roughly twice the queries.
    let ratio = freemium.ok as f64 / premium.ok as f64;
    assert!((1.5..2.7).contains(&ratio), "ratio {ratio}");
    // Two equally weighted queries of 10 and 200 ms: the median sits on one of them and
    // the p95 is the slow one.
    assert!(all.median_ms == 10.0 || all.median_ms == 200.0);
    assert_eq!(all.p95_ms, 200.0);
    // Started-in and completed-in differ only by the few queries straddling a boundary.
    assert!((all.goodput_per_s * 40.0 - all.ok as f64).abs() <= 10.0);
}

#[test]
fn common_random_numbers_across_strategies() {
    // Two "strategies" that differ only in speed see the same sessions and the same query
    // sequence; the faster one simply gets further through each session's plan.
    let schedule = plan(9, &params()).unwrap();
    let fast = play(&schedule, [0.01, 0.05]);
    let slow = play(&schedule, [0.05, 0.5]);
    assert!(fast.len() > slow.len());
    for session in &schedule.sessions {
        let queries = |rows: &[Row]| -> Vec<String> {
            rows.iter()
                .filter(|r| r.class == session.class && r.session == session.index)
                .map(|r| r.query.clone())
                .collect()
        };
        let (f, s) = (queries(&fast), queries(&slow));
        assert!(!s.is_empty(), "every session runs at least one query");
        assert_eq!(
            &f[..s.len()],
            &s[..],
            "the slow run's queries are a prefix of the fast run's"
        );
    }
}
