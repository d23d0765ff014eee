//! The layers together, without sockets: the class flags as the command line gives them
//! become a schedule, a fake executor plays each planned session with a fixed latency per
//! query, as the session driver would, and the summary of the rows (also through CSV) must
//! agree with what was played.

use super::classes::{ClassFlags, ClassSpec};
use super::report::{LabelledRun, csv, markdown, panels, table};
use super::row::{CSV_HEADER, Outcome, Row, parse_csv};
use super::schedule::{Schedule, ScheduleParams, plan};
use super::summary::{Phase, Scope, summarize};
use crate::sim::workload::Class;

fn params() -> ScheduleParams {
    ScheduleParams {
        rate_per_s: vec![2.0, 4.0],
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

/// The classes the flags define, or the error.
fn classes(flags: &[&str]) -> Result<Vec<ClassSpec>, String> {
    let mut parsed = ClassFlags::default();
    let mut it = flags.iter();
    while let Some(&flag) = it.next() {
        let value = it.next().copied().unwrap_or_default();
        match flag {
            "--class" => parsed.add(value)?,
            "--user-premium" => parsed.user_premium = Some(value.into()),
            "--user-freemium" => parsed.user_freemium = Some(value.into()),
            "--rate-premium" => parsed.rate_premium = value.parse().ok(),
            "--rate-freemium" => parsed.rate_freemium = value.parse().ok(),
            other => panic!("not a class flag: {other}"),
        }
    }
    parsed.finish()
}

fn spec(class: Class, user: &str, rate_per_s: f64) -> ClassSpec {
    ClassSpec {
        class,
        user: user.into(),
        rate_per_s,
    }
}

#[test]
fn class_flags_define_three_classes_in_any_order() {
    let three = classes(&[
        "--class",
        "tier2:bulk:0.5",
        "--class",
        "premium:gold:1",
        "--class",
        "freemium:free:2.5",
    ])
    .unwrap();
    assert_eq!(
        three,
        [
            spec(Class::PREMIUM, "gold", 1.0),
            spec(Class::FREEMIUM, "free", 2.5),
            spec(Class(2), "bulk", 0.5),
        ]
    );
    // The user is everything between the name and the rate.
    let four = classes(&[
        "--class",
        "premium:a:1",
        "--class",
        "freemium:b:0",
        "--class",
        "tier2:c:d:2",
        "--class",
        "tier3:e:3",
    ])
    .unwrap();
    assert_eq!(four.len(), 4);
    assert_eq!(four[2], spec(Class(2), "c:d", 2.0));
    assert_eq!(four[3], spec(Class(3), "e", 3.0));
}

#[test]
fn two_class_flags_work_as_before_and_combine_with_higher_ranks() {
    let legacy = [
        "--user-premium",
        "gold",
        "--rate-premium",
        "1",
        "--user-freemium",
        "free",
        "--rate-freemium",
        "2",
    ];
    let two = classes(&legacy).unwrap();
    assert_eq!(
        two,
        [
            spec(Class::PREMIUM, "gold", 1.0),
            spec(Class::FREEMIUM, "free", 2.0)
        ]
    );
    assert_eq!(
        classes(&["--class", "premium:gold:1", "--class", "freemium:free:2"]).unwrap(),
        two
    );
    let three = classes(&[&legacy[..], &["--class", "tier2:bulk:3"]].concat()).unwrap();
    assert_eq!(three[..2], two[..]);
    assert_eq!(three[2], spec(Class(2), "bulk", 3.0));
    // One two-class flag of a class without the other is refused as it always was.
    assert_eq!(
        classes(&legacy[2..]).unwrap_err(),
        "--user-premium is required"
    );
    assert_eq!(
        classes(&[&legacy[..2], &legacy[4..]].concat()).unwrap_err(),
        "--rate-premium is required"
    );
}

#[test]
fn class_flags_refuse_gaps_duplicates_unknown_names_and_mixing() {
    let refused: [(&[&str], &str); 12] = [
        (
            &["--class", "premium:a:1", "--class", "tier2:c:1"],
            "freemium is not defined",
        ),
        (
            &[
                "--class",
                "premium:a:1",
                "--class",
                "freemium:b:1",
                "--class",
                "tier3:d:1",
            ],
            "--class tier3 needs --class tier2 too",
        ),
        (
            &["--class", "freemium:b:1", "--class", "tier2:c:1"],
            "premium is not defined",
        ),
        (&["--class", "premium:a:1"], "freemium is not defined"),
        (&[], "premium is not defined"),
        (
            &["--class", "premium:a:1", "--class", "premium:b:2"],
            "--class premium is given twice",
        ),
        (
            &[
                "--class",
                "premium:a:1",
                "--class",
                "freemium:b:1",
                "--user-premium",
                "a",
                "--rate-premium",
                "1",
            ],
            "premium is defined by both --class premium:... and --user-premium/--rate-premium",
        ),
        (
            // Mixing is refused even when the two-class flags are incomplete.
            &[
                "--class",
                "premium:a:1",
                "--class",
                "freemium:b:1",
                "--rate-freemium",
                "1",
            ],
            "freemium is defined by both",
        ),
        (&["--class", "gold:a:1"], "unknown class \"gold\""),
        (&["--class", "premium:a"], "is not NAME:USER:RATE"),
        (&["--class", "premium::1"], "the user is empty"),
        (&["--class", "premium:a:-1"], "is not a non-negative number"),
    ];
    for (flags, message) in refused {
        let err = classes(flags).unwrap_err();
        assert!(err.contains(message), "{flags:?}: {err}");
    }
    for bad_rate in ["x", "NaN", "inf", ""] {
        let flag = format!("premium:a:{bad_rate}");
        assert!(classes(&["--class", &flag]).is_err(), "{flag}");
    }
    // The names the message offers are the four ranks'.
    let err = classes(&["--class", "tier4:a:1"]).unwrap_err();
    assert!(err.contains("premium, freemium, tier2, tier3"), "{err}");
}

#[test]
fn three_class_flags_plan_the_two_class_sessions_plus_tier2() {
    let from_flags = |flags: &[&str]| {
        let rates = classes(flags)
            .unwrap()
            .iter()
            .map(|c| c.rate_per_s)
            .collect();
        plan(
            13,
            &ScheduleParams {
                rate_per_s: rates,
                ..params()
            },
        )
        .unwrap()
    };
    let legacy = [
        "--user-premium",
        "a",
        "--rate-premium",
        "2",
        "--user-freemium",
        "b",
        "--rate-freemium",
        "4",
    ];
    let two = from_flags(&legacy);
    let three = from_flags(&[&legacy[..], &["--class", "tier2:c:3"]].concat());
    let key = |s: &Schedule, keep: fn(Class) -> bool| -> Vec<(Class, u64, u64, u64)> {
        s.sessions
            .iter()
            .filter(|p| keep(p.class))
            .map(|p| {
                (
                    p.class,
                    p.index,
                    p.arrival_s.to_bits(),
                    p.lifetime_s.to_bits(),
                )
            })
            .collect()
    };
    assert_eq!(key(&three, |c| c < Class(2)), key(&two, |_| true));
    assert!(!key(&three, |c| c == Class(2)).is_empty());
    assert_eq!((two.class_count, three.class_count), (2, 3));
}

#[test]
fn summarize_a_csv_with_tier2_rows() {
    let schedule = plan(
        5,
        &ScheduleParams {
            rate_per_s: vec![2.0, 4.0, 3.0],
            ..params()
        },
    )
    .unwrap();
    let played = play(&schedule, [0.01, 0.2]);
    let text: String = std::iter::once(CSV_HEADER.to_string())
        .chain(played.iter().map(Row::to_csv))
        .map(|line| line + "\n")
        .collect();
    assert!(text.contains("\ntier2,"));
    let rows = parse_csv(&text).unwrap();
    let slower: Vec<Row> = rows
        .iter()
        .map(|r| Row {
            latency_ms: r.latency_ms * 2.0,
            ..r.clone()
        })
        .collect();
    let runs = [
        LabelledRun {
            label: "rr".into(),
            rows: rows.clone(),
        },
        LabelledRun {
            label: "plb".into(),
            rows: slower,
        },
    ];
    let phases = Phase::parse_list("warm:0:10,steady:10:50").unwrap();
    let table = table(&runs, &phases, Some("rr")).unwrap();
    // Premium, freemium, tier2 and all, per label and phase, in rank order.
    assert_eq!(table.len(), 2 * 2 * 4);
    let scopes: Vec<Scope> = table.iter().take(4).map(|r| r.scope).collect();
    assert_eq!(scopes, Scope::table_order(3).collect::<Vec<_>>());
    let steady = Phase {
        name: "steady".into(),
        from_s: 10.0,
        to_s: 50.0,
    };
    let tier2 = table
        .iter()
        .find(|r| r.label == "rr" && r.phase == "steady" && r.scope == Scope::Class(Class(2)))
        .unwrap();
    assert_eq!(
        tier2.stats,
        summarize(&rows, &steady, Scope::Class(Class(2)))
    );
    assert!(tier2.stats.ok > 0);
    // Baseline ratios per class, tier2 included: every latency doubled.
    for row in table.iter().filter(|r| r.label == "plb") {
        let ratios = row.versus_baseline.unwrap();
        assert!((ratios.median - 2.0).abs() < 1e-9, "{row:?}");
        assert!((ratios.p95 - 2.0).abs() < 1e-9, "{row:?}");
    }
    let md = markdown(&table, Some("rr"));
    assert!(md.contains("| rr | steady | tier2 |"), "{md}");
    assert!(md.contains("| plb | warm | tier2 |"), "{md}");
    assert!(csv(&table).contains("\nplb,steady,tier2,"));
    // One panel per class present.
    let labels = vec!["rr".to_string(), "plb".to_string()];
    let drawn = panels(&table, &labels, &phases);
    let titles: Vec<&str> = drawn.iter().map(|p| p.title.as_str()).collect();
    assert_eq!(
        titles,
        [
            "premium p95 latency by phase",
            "freemium p95 latency by phase",
            "tier2 p95 latency by phase"
        ]
    );
}

#[test]
fn two_class_csvs_still_summarize_to_premium_freemium_all() {
    let rows = play(&plan(5, &params()).unwrap(), [0.01, 0.2]);
    let runs = [LabelledRun {
        label: "rr".into(),
        rows,
    }];
    let table = table(&runs, &Phase::parse_list("all:0:60").unwrap(), None).unwrap();
    let scopes: Vec<&str> = table.iter().map(|r| r.scope.name()).collect();
    assert_eq!(scopes, ["premium", "freemium", "all"]);
}
