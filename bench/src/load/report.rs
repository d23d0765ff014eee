//! The comparison of labelled runs (one per routing strategy): a table with one row per
//! (label, phase, class), optionally relative to a baseline label, as Markdown, CSV and a
//! PNG chart. The classes are those of the inputs (see [`class_count`]), the same for every
//! label so that tables line up; the chart has one panel per class.
//!
//! Pure except [`draw_png`], which writes through the simulator's plotting code.

use std::fmt::Write as _;
use std::path::Path;

use super::row::Row;
use super::summary::{Phase, Scope, Stats, class_count, summarize};
use crate::sim::plot::{Panel, Series, draw};
use crate::sim::workload::Class;

/// One run's rows and its label (a strategy name).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelledRun {
    /// Label in tables and legends.
    pub label: String,
    /// The run's rows.
    pub rows: Vec<Row>,
}

/// A label's latency relative to the baseline label's in the same phase and scope.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratios {
    /// Median / baseline median.
    pub median: f64,
    /// p95 / baseline p95.
    pub p95: f64,
}

/// One line of the comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    /// The run's label.
    pub label: String,
    /// The phase's name.
    pub phase: String,
    /// One class (premium, freemium, tier2, tier3) or all.
    pub scope: Scope,
    /// The statistics.
    pub stats: Stats,
    /// Relative to the baseline, when one was asked for.
    pub versus_baseline: Option<Ratios>,
}

/// Builds the comparison: labels in the given order, then phases, then each class of the
/// inputs by rank, then all. `baseline` must be one of the labels.
pub fn table(
    runs: &[LabelledRun],
    phases: &[Phase],
    baseline: Option<&str>,
) -> Result<Vec<TableRow>, String> {
    let base = match baseline {
        Some(name) => Some(
            runs.iter()
                .find(|r| r.label == name)
                .ok_or_else(|| format!("--baseline {name:?} is not one of the --in labels"))?,
        ),
        None => None,
    };
    let classes = class_count(runs.iter().flat_map(|run| &run.rows));
    let mut table = Vec::new();
    for run in runs {
        for phase in phases {
            for scope in Scope::table_order(classes) {
                let stats = summarize(&run.rows, phase, scope);
                let versus_baseline = base.map(|base| {
                    let reference = summarize(&base.rows, phase, scope);
                    Ratios {
                        median: stats.median_ms / reference.median_ms,
                        p95: stats.p95_ms / reference.p95_ms,
                    }
                });
                table.push(TableRow {
                    label: run.label.clone(),
                    phase: phase.name.clone(),
                    scope,
                    stats,
                    versus_baseline,
                });
            }
        }
    }
    Ok(table)
}

/// A number for humans: `-` when undefined.
fn human(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        "-".into()
    }
}

/// A number for CSV: empty when undefined.
fn machine(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.4}")
    } else {
        String::new()
    }
}

fn has_baseline(rows: &[TableRow]) -> bool {
    rows.iter().any(|r| r.versus_baseline.is_some())
}

/// The comparison as a Markdown table.
pub fn markdown(rows: &[TableRow], baseline: Option<&str>) -> String {
    let with_ratios = has_baseline(rows);
    let mut out = String::from(
        "| label | phase | class | ok | errors | failed connects | median ms | p95 ms | mean ms | goodput q/s |",
    );
    let mut rule = String::from("|---|---|---|--:|--:|--:|--:|--:|--:|--:|");
    if with_ratios {
        let name = baseline.unwrap_or("baseline");
        let _ = write!(out, " median / {name} | p95 / {name} |");
        rule.push_str("--:|--:|");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{rule}");
    for r in rows {
        let s = &r.stats;
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.label,
            r.phase,
            r.scope.name(),
            s.ok,
            s.errors,
            s.connect_errors,
            human(s.median_ms, 1),
            human(s.p95_ms, 1),
            human(s.mean_ms, 1),
            human(s.goodput_per_s, 2)
        );
        if let Some(ratios) = r.versus_baseline {
            let _ = write!(
                out,
                " {} | {} |",
                human(ratios.median, 2),
                human(ratios.p95, 2)
            );
        }
        let _ = writeln!(out);
    }
    out
}

/// The comparison as CSV (undefined values are empty).
pub fn csv(rows: &[TableRow]) -> String {
    let with_ratios = has_baseline(rows);
    let mut out = String::from(
        "label,phase,class,ok,errors,connect_errors,median_ms,p95_ms,mean_ms,goodput_per_s",
    );
    if with_ratios {
        out.push_str(",median_vs_baseline,p95_vs_baseline");
    }
    out.push('\n');
    for r in rows {
        let s = &r.stats;
        let _ = write!(
            out,
            "{},{},{},{},{},{},{},{},{},{}",
            r.label,
            r.phase,
            r.scope.name(),
            s.ok,
            s.errors,
            s.connect_errors,
            machine(s.median_ms),
            machine(s.p95_ms),
            machine(s.mean_ms),
            machine(s.goodput_per_s)
        );
        if with_ratios {
            let (median, p95) = r
                .versus_baseline
                .map_or((f64::NAN, f64::NAN), |v| (v.median, v.p95));
            let _ = write!(out, ",{},{}", machine(median), machine(p95));
        }
        out.push('\n');
    }
    out
}

fn find<'a>(rows: &'a [TableRow], label: &str, phase: &str, class: Class) -> Option<&'a Stats> {
    rows.iter()
        .find(|r| r.label == label && r.phase == phase && r.scope == Scope::Class(class))
        .map(|r| &r.stats)
}

/// The classes of the table's rows, by rank.
fn classes(rows: &[TableRow]) -> Vec<Class> {
    let mut classes: Vec<Class> = rows
        .iter()
        .filter_map(|r| match r.scope {
            Scope::Class(class) => Some(class),
            Scope::All => None,
        })
        .collect();
    classes.sort();
    classes.dedup();
    classes
}

/// One panel per class of the table, by rank. With one phase the labels are the x
/// categories and the series are p50 and p95; with several, the phases are the x categories
/// and each label is a p95 series.
pub fn panels(rows: &[TableRow], labels: &[String], phases: &[Phase]) -> Vec<Panel> {
    let latency = |label: &str, phase: &str, class: Class, pick: fn(&Stats) -> f64| {
        find(rows, label, phase, class).map_or(f64::NAN, pick)
    };
    classes(rows)
        .into_iter()
        .map(|class| match phases {
            [phase] => Panel {
                title: format!("{} latency, phase {}", class.name(), phase.name),
                x_label: "run".into(),
                y_label: "latency (ms)".into(),
                series: [
                    ("p50", (|s: &Stats| s.median_ms) as fn(&Stats) -> f64),
                    ("p95", |s| s.p95_ms),
                ]
                .into_iter()
                .map(|(name, pick)| Series {
                    name: name.into(),
                    points: labels
                        .iter()
                        .enumerate()
                        .map(|(i, label)| (i as f64, latency(label, &phase.name, class, pick)))
                        .collect(),
                })
                .collect(),
                x_categories: labels.to_vec(),
            },
            _ => Panel {
                title: format!("{} p95 latency by phase", class.name()),
                x_label: "phase".into(),
                y_label: "p95 latency (ms)".into(),
                series: labels
                    .iter()
                    .map(|label| Series {
                        name: label.clone(),
                        points: phases
                            .iter()
                            .enumerate()
                            .map(|(i, p)| (i as f64, latency(label, &p.name, class, |s| s.p95_ms)))
                            .collect(),
                    })
                    .collect(),
                x_categories: phases.iter().map(|p| p.name.clone()).collect(),
            },
        })
        .collect()
}

/// Draws [`panels`] side by side into a PNG; Err says why (including a missing font).
pub fn draw_png(
    path: &Path,
    rows: &[TableRow],
    labels: &[String],
    phases: &[Phase],
) -> Result<(), String> {
    let panels = panels(rows, labels, phases);
    // Two or three classes side by side, four as two by two.
    let columns = if panels.len() <= 3 { panels.len() } else { 2 };
    draw(path, "pgtier-load", &panels, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::row::Outcome;

    fn rows(class: Class, latencies_ms: &[f64]) -> Vec<Row> {
        latencies_ms
            .iter()
            .enumerate()
            .map(|(i, &latency_ms)| Row {
                class,
                session: 0,
                query: "q".into(),
                start_s: i as f64 * 0.1,
                latency_ms,
                outcome: Outcome::Ok,
            })
            .collect()
    }

    fn runs() -> Vec<LabelledRun> {
        let run = |label: &str, premium: &[f64], freemium: &[f64]| LabelledRun {
            label: label.into(),
            rows: [
                rows(Class::PREMIUM, premium),
                rows(Class::FREEMIUM, freemium),
            ]
            .concat(),
        };
        vec![
            run("rr", &[10.0, 20.0, 30.0], &[100.0, 100.0]),
            run("plb", &[5.0, 10.0, 15.0], &[200.0, 200.0]),
        ]
    }

    fn phases() -> Vec<Phase> {
        Phase::parse_list("all:0:10").unwrap()
    }

    #[test]
    fn baseline_ratios_compare_the_same_phase_and_class() {
        let table = table(&runs(), &phases(), Some("rr")).unwrap();
        assert_eq!(table.len(), 2 * 3);
        let ratio = |label: &str, scope: Scope| {
            table
                .iter()
                .find(|r| r.label == label && r.scope == scope)
                .and_then(|r| r.versus_baseline)
                .unwrap()
        };
        assert_eq!(ratio("rr", Scope::Class(Class::PREMIUM)).median, 1.0);
        assert_eq!(ratio("plb", Scope::Class(Class::PREMIUM)).median, 0.5);
        assert_eq!(ratio("plb", Scope::Class(Class::FREEMIUM)).p95, 2.0);
        let md = markdown(&table, Some("rr"));
        assert!(md.contains("p95 / rr"), "{md}");
        assert!(
            md.contains("| plb | all | premium | 3 | 0 | 0 | 10.0 |"),
            "{md}"
        );
        let csv = csv(&table);
        assert!(
            csv.lines()
                .next()
                .unwrap()
                .ends_with(",median_vs_baseline,p95_vs_baseline")
        );
        assert_eq!(csv.lines().count(), 1 + 6);
    }

    #[test]
    fn unknown_baseline_is_an_error_and_no_baseline_means_no_ratio_columns() {
        assert!(table(&runs(), &phases(), Some("nope")).is_err());
        let table = table(&runs(), &phases(), None).unwrap();
        assert!(!markdown(&table, None).contains("/ baseline"));
        assert!(!csv(&table).contains("vs_baseline"));
    }

    #[test]
    fn panels_follow_the_number_of_phases() {
        let labels: Vec<String> = vec!["rr".into(), "plb".into()];
        let one = table(&runs(), &phases(), None).unwrap();
        let p = panels(&one, &labels, &phases());
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].x_categories, labels);
        assert_eq!(p[0].series.len(), 2);
        assert_eq!(p[0].series[0].points, vec![(0.0, 20.0), (1.0, 10.0)]);
        let two_phases = Phase::parse_list("a:0:0.15,b:0.15:10").unwrap();
        let two = table(&runs(), &two_phases, None).unwrap();
        let p = panels(&two, &labels, &two_phases);
        assert_eq!(p[1].x_categories, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(p[1].series.len(), 2);
        assert_eq!(p[1].series[0].name, "rr");
    }
}
