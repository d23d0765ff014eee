//! Which charts the simulator draws, in the layout of the papers' figures: latency against
//! load per class and mix (000 Fig. 2), utilisation and imbalance against the premium share
//! (Fig. 3), per-class medians against the share at fixed load (Fig. 4), and per-phase
//! p95 change and goodput retention for the failure experiments (001 Figs. 4–6).

use std::path::{Path, PathBuf};

use super::plot::{Panel, Series, draw};
use super::scenario::{FaultPoint, FaultShape, GridPoint};
use super::stats::{LatencyStats, PhaseSummary};
use super::strategies::Strategy;

/// Strategies present in `points`, in first-seen order.
fn strategies_of(points: &[GridPoint]) -> Vec<Strategy> {
    let mut seen = Vec::new();
    for p in points {
        if !seen.contains(&p.strategy) {
            seen.push(p.strategy);
        }
    }
    seen
}

fn distinct(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The three mixes shown per row: the shares of the grid nearest 20 %, 50 % and 80 % (the
/// paper's "Premium < 40 %", "40–60 %" and "> 60 %" buckets).
fn shown_shares(points: &[GridPoint]) -> Vec<f64> {
    let shares = distinct(points.iter().map(|p| p.premium_share));
    let nearest = |target: f64| {
        shares
            .iter()
            .copied()
            .min_by(|a, b| (a - target).abs().total_cmp(&(b - target).abs()))
    };
    let mut shown: Vec<f64> = [0.2, 0.5, 0.8].into_iter().filter_map(nearest).collect();
    shown.dedup();
    shown
}

/// The fixed load of Figs. 3–4: T = 1000 if present, else the largest T of the grid.
pub fn fixed_load(points: &[GridPoint]) -> f64 {
    let loads = distinct(points.iter().map(|p| p.terminals));
    if loads.contains(&1000.0) {
        1000.0
    } else {
        loads.last().copied().unwrap_or(0.0)
    }
}

fn series_over<F: Fn(&GridPoint) -> Option<(f64, f64)>>(
    points: &[GridPoint],
    replicas: usize,
    select: F,
) -> Vec<Series> {
    strategies_of(points)
        .into_iter()
        .map(|strategy| Series {
            name: strategy.label(replicas),
            points: points
                .iter()
                .filter(|p| p.strategy == strategy)
                .filter_map(&select)
                .collect(),
        })
        .collect()
}

type LatencyPick = fn(&LatencyStats) -> f64;

/// Which latency statistics of a summary a row of panels shows.
type ClassPick = fn(&PhaseSummary) -> LatencyStats;

fn latency_vs_load(
    points: &[GridPoint],
    replicas: usize,
    pick: LatencyPick,
    what: &str,
) -> Vec<Panel> {
    let rows: [(&str, ClassPick); 3] = [
        ("premium", |s| s.class[0]),
        ("freemium", |s| s.class[1]),
        ("overall", |s| s.overall),
    ];
    let mut panels = Vec::new();
    for (class_name, class_of) in rows {
        for share in shown_shares(points) {
            panels.push(Panel {
                title: format!("{class_name}, premium share {:.0}%", share * 100.0),
                x_label: "terminals T".into(),
                y_label: format!("{what} latency (s)"),
                series: series_over(points, replicas, |p| {
                    (p.premium_share == share).then(|| (p.terminals, pick(&class_of(&p.summary))))
                }),
                x_categories: Vec::new(),
            });
        }
    }
    panels
}

fn at_fixed_load(
    points: &[GridPoint],
    replicas: usize,
    title: &str,
    y_label: &str,
    value: fn(&PhaseSummary) -> f64,
) -> Panel {
    let load = fixed_load(points);
    Panel {
        title: title.to_string(),
        x_label: "premium share".into(),
        y_label: y_label.to_string(),
        series: series_over(points, replicas, |p| {
            (p.terminals == load).then(|| (p.premium_share, value(&p.summary)))
        }),
        x_categories: Vec::new(),
    }
}

/// Draws the grid figures into `dir`; returns the files written.
pub fn grid_figures(
    points: &[GridPoint],
    replicas: usize,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    let load = fixed_load(points);
    let mut written = Vec::new();
    let median = dir.join("latency_median_vs_terminals.png");
    draw(
        &median,
        "Median latency vs load (simulated, cf. PLB paper Fig. 2)",
        &latency_vs_load(points, replicas, |l| l.median_s, "median"),
        3,
    )?;
    written.push(median);
    let p95 = dir.join("latency_p95_vs_terminals.png");
    draw(
        &p95,
        "p95 latency vs load (simulated)",
        &latency_vs_load(points, replicas, |l| l.p95_s, "p95"),
        3,
    )?;
    written.push(p95);
    let utilisation = dir.join("utilisation_vs_share.png");
    draw(
        &utilisation,
        &format!("Cluster CPU fraction and imbalance at T = {load} (cf. Fig. 3)"),
        &[
            at_fixed_load(points, replicas, "mean cluster CPU fraction", "u", |s| {
                s.utilisation
            }),
            at_fixed_load(points, replicas, "replica imbalance", "CV(u)", |s| {
                s.utilisation_cv
            }),
        ],
        2,
    )?;
    written.push(utilisation);
    let by_share = dir.join("median_vs_share.png");
    draw(
        &by_share,
        &format!("Per-class median latency at T = {load} (cf. Fig. 4)"),
        &[
            at_fixed_load(points, replicas, "overall", "median (s)", |s| {
                s.overall.median_s
            }),
            at_fixed_load(points, replicas, "premium", "median (s)", |s| {
                s.class[0].median_s
            }),
            at_fixed_load(points, replicas, "freemium", "median (s)", |s| {
                s.class[1].median_s
            }),
        ],
        3,
    )?;
    written.push(by_share);
    Ok(written)
}

/// Draws one figure per (failure shape, T) into `dir`; returns the files written.
pub fn fault_figures(
    points: &[FaultPoint],
    replicas: usize,
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    let mut groups: Vec<(FaultShape, f64)> = Vec::new();
    for p in points {
        let key = (p.case.shape, p.case.terminals);
        if !groups.contains(&key) {
            groups.push(key);
        }
    }
    let mut written = Vec::new();
    for (shape, terminals) in groups {
        let group: Vec<&FaultPoint> = points
            .iter()
            .filter(|p| p.case.shape == shape && p.case.terminals == terminals)
            .collect();
        let path = dir.join(format!("faults_{}_T{terminals}.png", shape.label()));
        draw(
            &path,
            &format!(
                "{} failure, T = {terminals}: change vs the pre-fault 30 s",
                shape.label()
            ),
            &fault_panels(&group, replicas),
            3,
        )?;
        written.push(path);
    }
    Ok(written)
}

fn fault_panels(group: &[&FaultPoint], replicas: usize) -> Vec<Panel> {
    let shares = distinct(group.iter().map(|p| p.case.premium_share));
    let phase_names: Vec<String> = group
        .first()
        .map(|p| p.phases.iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    type Metric = (&'static str, &'static str, fn(&FaultPoint, usize) -> f64);
    let metrics: [Metric; 4] = [
        ("premium p95 change", "%", |p, i| {
            p.changes[i].p95_change[0] * 100.0
        }),
        ("freemium p95 change", "%", |p, i| {
            p.changes[i].p95_change[1] * 100.0
        }),
        ("premium goodput retention", "G/G_pre", |p, i| {
            p.changes[i].goodput_retention[0]
        }),
        ("freemium goodput retention", "G/G_pre", |p, i| {
            p.changes[i].goodput_retention[1]
        }),
    ];
    let mut panels = Vec::new();
    for (title, unit, value) in metrics {
        for &share in &shares {
            let series = group
                .iter()
                .filter(|p| p.case.premium_share == share)
                .map(|p| Series {
                    name: p.strategy.label(replicas),
                    points: (0..p.changes.len())
                        .map(|i| (i as f64, value(p, i)))
                        .collect(),
                })
                .collect();
            panels.push(Panel {
                title: format!(
                    "{title}, P{:.0}:F{:.0}",
                    share * 100.0,
                    100.0 - share * 100.0
                ),
                x_label: "phase".into(),
                y_label: unit.into(),
                series,
                x_categories: phase_names.clone(),
            });
        }
    }
    panels
}
