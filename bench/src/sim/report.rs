//! CSV output of grid points and failure experiments, one row per (point, strategy) or per
//! (case, strategy, phase). Hand-written: the values are plain numbers and labels without
//! commas, so a CSV library would add nothing.

use std::fmt::Write as _;

use super::scenario::{FaultPoint, GridPoint};
use super::stats::{LatencyStats, PhaseSummary};

fn num(value: f64) -> String {
    if value.is_finite() {
        format!("{value:.4}")
    } else {
        String::new()
    }
}

fn latency_columns(prefix: &str) -> String {
    format!("{prefix}_median_s,{prefix}_p95_s,{prefix}_mean_s,{prefix}_queries")
}

fn latency_values(stats: &LatencyStats) -> String {
    format!(
        "{},{},{},{}",
        num(stats.median_s),
        num(stats.p95_s),
        num(stats.mean_s),
        num(stats.count)
    )
}

fn summary_header(replicas: usize) -> String {
    let mut header = [
        latency_columns("premium"),
        latency_columns("freemium"),
        latency_columns("overall"),
    ]
    .join(",");
    header.push_str(",premium_goodput_per_s,freemium_goodput_per_s,utilisation,utilisation_cv");
    for r in 0..replicas {
        let _ = write!(header, ",u_replica{r}");
    }
    header.push_str(",premium_admitted,freemium_admitted,premium_lost,freemium_lost");
    header.push_str(",premium_session_lifetime_s,freemium_session_lifetime_s");
    header
}

fn summary_values(s: &PhaseSummary) -> String {
    let mut row = [
        latency_values(&s.class[0]),
        latency_values(&s.class[1]),
        latency_values(&s.overall),
    ]
    .join(",");
    for v in [
        s.goodput_per_s[0],
        s.goodput_per_s[1],
        s.utilisation,
        s.utilisation_cv,
    ] {
        let _ = write!(row, ",{}", num(v));
    }
    for &u in &s.replica_utilisation {
        let _ = write!(row, ",{}", num(u));
    }
    for v in [
        s.admitted[0],
        s.admitted[1],
        s.lost[0],
        s.lost[1],
        s.session_lifetime_s[0],
        s.session_lifetime_s[1],
    ] {
        let _ = write!(row, ",{}", num(v));
    }
    row
}

/// The grid as CSV (means over seeds).
pub fn grid_csv(points: &[GridPoint], replicas: usize) -> String {
    let mut out = format!(
        "strategy,terminals,premium_share,{}\n",
        summary_header(replicas)
    );
    for p in points {
        let _ = writeln!(
            out,
            "{},{},{},{}",
            p.strategy.label(replicas),
            p.terminals,
            p.premium_share,
            summary_values(&p.summary)
        );
    }
    out
}

/// The failure experiments as CSV (medians over seeds), one row per phase.
pub fn faults_csv(points: &[FaultPoint], replicas: usize) -> String {
    let mut out = format!(
        "shape,terminals,premium_share,strategy,phase,premium_p95_change,freemium_p95_change,\
         premium_goodput_retention,freemium_goodput_retention,{}\n",
        summary_header(replicas)
    );
    for p in points {
        for (phase, change) in p.phases.iter().zip(&p.changes) {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{}",
                p.case.shape.label(),
                p.case.terminals,
                p.case.premium_share,
                p.strategy.label(replicas),
                phase.name,
                num(change.p95_change[0]),
                num(change.p95_change[1]),
                num(change.goodput_retention[0]),
                num(change.goodput_retention[1]),
                summary_values(phase)
            );
        }
    }
    out
}

/// The role traces of the failure experiments (first seed), one row per observation.
pub fn fault_roles_csv(points: &[FaultPoint], replicas: usize) -> String {
    let mut out = String::from("shape,terminals,premium_share,strategy,time_s");
    for r in 0..replicas {
        let _ = write!(out, ",replica{r}");
    }
    out.push('\n');
    for p in points {
        for (time_s, roles) in &p.role_trace {
            let _ = write!(
                out,
                "{},{},{},{},{time_s}",
                p.case.shape.label(),
                p.case.terminals,
                p.case.premium_share,
                p.strategy.label(replicas)
            );
            for role in roles {
                // Role labels such as "borrowed_to_premium(from mixed)" hold no commas.
                let _ = write!(out, ",{role}");
            }
            out.push('\n');
        }
    }
    out
}
