//! The waiting experiment: PLB against PLB with each replica's server pool held to two
//! servers, waiters served in arrival order (`5PLB+wait-fifo`) or premium first with freemium
//! aged 20 ms (`5PLB+wait-class`), at the live harness's calibration (`grid --live`) and a few
//! contention points, with common random numbers.
//!
//! It asks of the model what `bench/plb-live.sh` measured (docs/plb-live.md, "Class-aware
//! waiting inside a replica's pool"): what the bound alone and the class order each do to
//! premium and freemium latency, and how often the order had a choice to make. This file
//! owns the experiment's points, its run loop and its summary; a point's runs are the
//! grid's ([`GridSpec::run_config`], the same seeds for every strategy).

use std::fmt::Write as _;

use super::scenario::{GridPoint, GridSpec, run_observed};
use super::stats::{PhaseSummary, mean_of};
use super::strategies::Strategy;

/// The compared strategies: the paper's PLB first (the reference of every ratio).
pub fn strategies() -> Vec<Strategy> {
    vec![
        Strategy::Plb,
        Strategy::PlbWait { by_class: false },
        Strategy::PlbWait { by_class: true },
    ]
}

/// The live calibration (five quarter-core replicas, the live query mix, 5–15 s sessions,
/// 0.5 s think, θ = 3) at 1.5, 2, 2.5 and 3 sessions/s, premium share 0.25 (the live runs'
/// mix) and 0.5.
pub fn spec(seeds: u64) -> GridSpec {
    GridSpec {
        terminals: [1.5, 2.0, 2.5, 3.0].map(|rate| rate * 60.0).to_vec(),
        premium_shares: vec![0.25, 0.5],
        strategies: strategies(),
        ..GridSpec::live(seeds)
    }
}

/// The live contention point only (2.5 sessions/s, P25).
pub fn quick(seeds: u64) -> GridSpec {
    GridSpec {
        terminals: vec![2.5 * 60.0],
        premium_shares: vec![0.25],
        ..spec(seeds)
    }
}

/// One point of the experiment for one strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitPoint {
    /// Latency, goodput and utilisation, means over seeds (as the grid's).
    pub point: GridPoint,
    /// Queries that waited in a pool and then got a server, over all seeds.
    pub served_after_waiting: u64,
    /// Of those, the ones served ahead of an earlier-parked waiter of the other class: the
    /// choices in which the order differed from arrival order.
    pub served_out_of_order: u64,
}

/// Runs every point of `spec`; `on_run` is called after each simulation.
pub fn run_waiting(spec: &GridSpec, on_run: &mut dyn FnMut()) -> Result<Vec<WaitPoint>, String> {
    let mut points = Vec::new();
    for &terminals in &spec.terminals {
        for &premium_share in &spec.premium_shares {
            for &strategy in &spec.strategies {
                let (mut per_seed, mut served, mut out_of_order) = (Vec::new(), 0, 0);
                for seed_index in 0..spec.seeds {
                    let config = spec.run_config(terminals, premium_share, seed_index);
                    let observations = run_observed(&config, strategy)?;
                    let phase = observations.phases.first().ok_or("a run without a phase")?;
                    per_seed.push(PhaseSummary::of(phase));
                    served += observations.pool_served;
                    out_of_order += observations.pool_served_out_of_order;
                    on_run();
                }
                let summary = PhaseSummary::aggregate(&per_seed, mean_of)
                    .ok_or("a point needs at least one seed")?;
                points.push(WaitPoint {
                    point: GridPoint {
                        strategy,
                        terminals,
                        premium_share,
                        summary,
                    },
                    served_after_waiting: served,
                    served_out_of_order: out_of_order,
                });
            }
        }
    }
    Ok(points)
}

fn ms(seconds: f64) -> String {
    if seconds.is_finite() {
        format!("{:.0}", seconds * 1000.0)
    } else {
        "n/a".into()
    }
}

/// `value` and its ratio to `reference`, as "598 (0.78×)".
fn with_ratio(value: f64, reference: f64, show: fn(f64) -> String) -> String {
    if reference > 0.0 && value.is_finite() {
        format!("{} ({:.2}×)", show(value), value / reference)
    } else {
        show(value)
    }
}

fn rate(value: f64) -> String {
    format!("{value:.2}")
}

/// Markdown: per point, each strategy's premium and freemium median and p95 (ms), goodput
/// (queries/s) and utilisation, with the ratio to PLB's in parentheses, and how many queries
/// waited and were served out of arrival order.
pub fn waiting_summary(points: &[WaitPoint], replicas: usize) -> String {
    let mut out = String::from("# Waiting inside the proxy's pool\n\n");
    out.push_str(
        "+wait: each replica's pool held to 2 servers, the other queries wait inside the \
         proxy (fifo: arrival order; class: premium first, freemium aged 20 ms). Latency \
         = waiting + service, in ms; goodput in completed queries/s; means over seeds; \
         (×) = against PLB at the same point. Waited: queries that waited for a server, over \
         all seeds; out of order: those of them served ahead of an earlier waiter of the other \
         class (the only choices in which the class order differs from FIFO).\n",
    );
    let mut keys: Vec<(f64, f64)> = Vec::new();
    for p in points.iter().map(|p| &p.point) {
        if !keys.contains(&(p.terminals, p.premium_share)) {
            keys.push((p.terminals, p.premium_share));
        }
    }
    for (terminals, share) in keys {
        let here =
            |p: &&WaitPoint| p.point.terminals == terminals && p.point.premium_share == share;
        let Some(plb) = points
            .iter()
            .filter(here)
            .find(|p| p.point.strategy == Strategy::Plb)
            .map(|p| &p.point.summary)
        else {
            continue;
        };
        let _ = writeln!(
            out,
            "\n## {:.1} sessions/s (T = {terminals}), premium share {share}\n",
            terminals / 60.0
        );
        out.push_str(
            "| strategy | premium median | premium p95 | freemium median | freemium p95 | goodput P | goodput F | u | waited | out of order |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for p in points.iter().filter(here) {
            out.push_str(&row(p, plb, replicas));
        }
    }
    out
}

fn row(p: &WaitPoint, plb: &PhaseSummary, replicas: usize) -> String {
    let s = &p.point.summary;
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {} | {} |\n",
        p.point.strategy.label(replicas),
        with_ratio(s.class[0].median_s, plb.class[0].median_s, ms),
        with_ratio(s.class[0].p95_s, plb.class[0].p95_s, ms),
        with_ratio(s.class[1].median_s, plb.class[1].median_s, ms),
        with_ratio(s.class[1].p95_s, plb.class[1].p95_s, ms),
        with_ratio(s.goodput_per_s[0], plb.goodput_per_s[0], rate),
        with_ratio(s.goodput_per_s[1], plb.goodput_per_s[1], rate),
        s.utilisation,
        p.served_after_waiting,
        p.served_out_of_order,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_experiment_runs_every_strategy_and_summarises_it() {
        let spec = quick(1);
        assert_eq!(spec.cluster.cores_per_replica, 0.25, "the live calibration");
        let points = run_waiting(&spec, &mut || {}).expect("runs");
        assert_eq!(points.len(), 3);
        let [plb, fifo, class] = [0, 1, 2].map(|i| &points[i]);
        assert_eq!(
            plb.served_after_waiting, 0,
            "PLB has no bound: nothing waits"
        );
        assert!(
            fifo.served_after_waiting > 0,
            "the bound binds at contention"
        );
        assert_eq!(fifo.served_out_of_order, 0, "FIFO never reorders");
        assert!(class.served_out_of_order <= class.served_after_waiting);
        let summary = waiting_summary(&points, spec.cluster.replicas);
        for label in ["| 5PLB |", "| 5PLB+wait-fifo |", "| 5PLB+wait-class |"] {
            assert!(summary.contains(label), "{label} missing:\n{summary}");
        }
        assert!(summary.contains("(1.00×)"), "PLB against itself");
    }
}
