//! The three-class experiment: a workload of three ranked classes on the paper's five
//! replicas, run through 5RR, the paper's PLB with rank 0 as premium (ranks 1 and 2 share
//! freemium), PLB with ranks 0–1 as premium, and tiered PLB, with common random numbers.
//!
//! It answers what 000 leaves as future work: does a pool per class buy a middle class
//! anything the two-class policy cannot give it, and what does that cost the other two?

use std::fmt::Write as _;

use super::engine::{self, Phase, RunConfig};
use super::scenario::{point_seed, with_server_pool};
use super::stats::{LatencyStats, mean};
use super::strategies::{Strategy, build_router};
use super::workload::{ClusterConfig, WorkloadConfig};

/// Ranks of the experiment (the tiered layout's pools).
pub const RANKS: usize = 3;

/// The grid of the experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct TierSpec {
    /// Replicas, PLB's parameters and the tiered layout.
    pub cluster: ClusterConfig,
    /// Client template; `terminals` and `class_shares` are set per point.
    pub workload: WorkloadConfig,
    /// T values.
    pub terminals: Vec<f64>,
    /// Class shares by rank, each adding up to 1.
    pub mixes: Vec<[f64; RANKS]>,
    /// Compared strategies.
    pub strategies: Vec<Strategy>,
    /// Repetitions per point.
    pub seeds: u64,
    /// Seed of the whole grid.
    pub base_seed: u64,
    /// Statistics ignore the ramp-up before this time.
    pub warmup_s: f64,
}

impl TierSpec {
    /// The paper's calibration at light load and in contention, three mixes.
    pub fn paper(seeds: u64) -> Self {
        Self {
            cluster: ClusterConfig::default(),
            workload: WorkloadConfig::paper(0.0, 0.0),
            terminals: vec![300.0, 1000.0, 1500.0],
            mixes: vec![[0.2, 0.3, 0.5], [0.3, 0.3, 0.4], [0.1, 0.2, 0.7]],
            strategies: vec![
                Strategy::RoundRobin,
                Strategy::Plb,
                Strategy::PlbTop { ranks: 2 },
                Strategy::PlbTiered { reclaim: false },
                Strategy::PlbTiered { reclaim: true },
            ],
            seeds,
            base_seed: 0x71E5,
            warmup_s: 30.0,
        }
    }

    /// `bench/plb-live.sh`'s three-class run (five quarter-core replicas, its query mix and
    /// sessions, θ = 3 for every rank): 2.5 sessions/s (T = 150), 20 / 30 / 50 %, the three
    /// strategies it compares; statistics after the first 20 % of arrivals, as it reads them.
    pub fn live(seeds: u64) -> Self {
        Self {
            cluster: ClusterConfig::live(),
            workload: WorkloadConfig::live(0.0, 0.0),
            terminals: vec![150.0],
            mixes: vec![[0.2, 0.3, 0.5]],
            strategies: vec![
                Strategy::Plb,
                Strategy::PlbTop { ranks: 2 },
                Strategy::PlbTiered { reclaim: true },
            ],
            warmup_s: 12.0,
            ..Self::paper(seeds)
        }
    }

    /// One contention point, for smoke runs and tests.
    pub fn quick(seeds: u64) -> Self {
        Self {
            terminals: vec![1000.0],
            mixes: vec![[0.2, 0.3, 0.5]],
            ..Self::paper(seeds)
        }
    }

    /// Number of simulations.
    pub fn run_count(&self) -> u64 {
        (self.terminals.len() * self.mixes.len() * self.strategies.len()) as u64 * self.seeds
    }

    fn run_config(&self, terminals: f64, mix: [f64; RANKS], seed_index: u64) -> RunConfig {
        let workload = WorkloadConfig {
            terminals,
            class_shares: mix.to_vec(),
            ..self.workload.clone()
        };
        let end_s = workload.arrivals_until_s;
        RunConfig {
            cluster: self.cluster.clone(),
            workload,
            faults: Vec::new(),
            phases: vec![Phase {
                name: "run".to_string(),
                start_s: self.warmup_s,
                end_s,
            }],
            end_s,
            seed: point_seed(
                self.base_seed,
                terminals,
                mix[0] + 10.0 * mix[1],
                seed_index,
            ),
            pool: None,
        }
    }
}

/// What one run yields: latency per rank and the mean replica utilisation.
type RunResult = ([LatencyStats; RANKS], f64);

/// One point, averaged over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct TierPoint {
    /// Strategy.
    pub strategy: Strategy,
    /// T.
    pub terminals: f64,
    /// Shares by rank.
    pub mix: [f64; RANKS],
    /// Latency per rank (means over seeds of each statistic).
    pub ranks: [LatencyStats; RANKS],
    /// Mean busy-core fraction of the replicas.
    pub utilisation: f64,
}

/// Runs every point; `on_run` after each simulation.
pub fn run_tiers(spec: &TierSpec, on_run: &mut dyn FnMut()) -> Result<Vec<TierPoint>, String> {
    let mut points = Vec::new();
    for &terminals in &spec.terminals {
        for &mix in &spec.mixes {
            for &strategy in &spec.strategies {
                let mut per_seed: Vec<RunResult> = Vec::new();
                for seed_index in 0..spec.seeds {
                    let config = spec.run_config(terminals, mix, seed_index);
                    per_seed.push(run_point(&config, strategy)?);
                    on_run();
                }
                let field = |get: &dyn Fn(&RunResult) -> f64| {
                    mean(&per_seed.iter().map(get).collect::<Vec<_>>())
                };
                let ranks = std::array::from_fn(|r| LatencyStats {
                    count: field(&|s| s.0[r].count),
                    mean_s: field(&|s| s.0[r].mean_s),
                    median_s: field(&|s| s.0[r].median_s),
                    p95_s: field(&|s| s.0[r].p95_s),
                });
                points.push(TierPoint {
                    strategy,
                    terminals,
                    mix,
                    ranks,
                    utilisation: field(&|s| s.1),
                });
            }
        }
    }
    Ok(points)
}

fn run_point(config: &RunConfig, strategy: Strategy) -> Result<RunResult, String> {
    let mut router = build_router(strategy, &config.cluster)?;
    let observations = engine::run(&with_server_pool(config, strategy), router.as_mut());
    let label = strategy.label(config.cluster.replicas);
    if observations.placements_on_down_replica > 0 || router.refused_role_changes() > 0 {
        return Err(format!(
            "{label}: {} placements on a down replica, {} refused role changes",
            observations.placements_on_down_replica,
            router.refused_role_changes()
        ));
    }
    let phase = observations
        .phases
        .first()
        .ok_or_else(|| format!("{label}: no phase observed"))?;
    let ranks = std::array::from_fn(|r| LatencyStats::of(phase.latencies_s[r].clone()));
    let busy: Vec<f64> = phase.busy_fraction.iter().flatten().copied().collect();
    Ok((ranks, mean(&busy)))
}

/// One row per point and rank.
pub fn tiers_csv(points: &[TierPoint], replicas: usize) -> String {
    let mut out = String::from(
        "strategy,terminals,share0,share1,share2,rank,queries,median_s,p95_s,mean_s,utilisation\n",
    );
    for p in points {
        for (rank, stats) in p.ranks.iter().enumerate() {
            let _ = writeln!(
                out,
                "{},{},{},{},{},{rank},{:.1},{:.4},{:.4},{:.4},{:.4}",
                p.strategy.label(replicas),
                p.terminals,
                p.mix[0],
                p.mix[1],
                p.mix[2],
                stats.count,
                stats.median_s,
                stats.p95_s,
                stats.mean_s,
                p.utilisation
            );
        }
    }
    out
}

/// Markdown: per point, every strategy's latency by rank, then tiered PLB against the
/// two-class splits.
pub fn tiers_summary(points: &[TierPoint], replicas: usize) -> String {
    let mut out = String::from("# Three classes: tiered PLB against the two-class policy\n\n");
    out.push_str(
        "Ranks 0 > 1 > 2. `PLB` counts rank 0 as premium and ranks 1–2 as freemium; \
         `PLB/top2` counts ranks 0–1 as premium; `PLB-tiered` has one pool per rank and lets a more important rank take back a Mixed \
         replica a less important one holds; `/noreclaim` without that. \
         Latencies in seconds, means over seeds.\n",
    );
    let mut keys: Vec<(f64, [f64; RANKS])> = Vec::new();
    for p in points {
        if !keys.iter().any(|k| k.0 == p.terminals && k.1 == p.mix) {
            keys.push((p.terminals, p.mix));
        }
    }
    for (terminals, mix) in keys {
        let at: Vec<&TierPoint> = points
            .iter()
            .filter(|p| p.terminals == terminals && p.mix == mix)
            .collect();
        let _ = writeln!(
            out,
            "\n## T = {terminals}, shares {:.0} / {:.0} / {:.0} %\n",
            mix[0] * 100.0,
            mix[1] * 100.0,
            mix[2] * 100.0
        );
        out.push_str(
            "| strategy | r0 median | r0 p95 | r1 median | r1 p95 | r2 median | r2 p95 | u |\n",
        );
        out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for p in &at {
            let _ = write!(out, "| {} ", p.strategy.label(replicas));
            for r in &p.ranks {
                let _ = write!(out, "| {:.2} | {:.2} ", r.median_s, r.p95_s);
            }
            let _ = writeln!(out, "| {:.2} |", p.utilisation);
        }
        let Some(tiered) = at
            .iter()
            .find(|p| p.strategy == Strategy::PlbTiered { reclaim: true })
        else {
            continue;
        };
        for baseline in at.iter().filter(|p| {
            matches!(
                p.strategy,
                Strategy::Plb | Strategy::PlbTop { .. } | Strategy::PlbTiered { reclaim: false }
            )
        }) {
            let _ = write!(
                out,
                "\nPLB-tiered against {}:",
                baseline.strategy.label(replicas)
            );
            for (rank, (t, b)) in tiered.ranks.iter().zip(&baseline.ranks).enumerate() {
                let _ = write!(
                    out,
                    " r{rank} median {:+.0} %, p95 {:+.0} %;",
                    change(t.median_s, b.median_s),
                    change(t.p95_s, b.p95_s)
                );
            }
            out.push('\n');
        }
    }
    out
}

fn change(new: f64, old: f64) -> f64 {
    (new / old - 1.0) * 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rank_gets_its_share_of_sessions_and_tiered_runs_clean() {
        let spec = TierSpec::quick(1);
        let config = spec.run_config(300.0, [0.2, 0.3, 0.5], 0);
        let (ranks, _) = run_point(&config, Strategy::PlbTiered { reclaim: true }).expect("run");
        let total: f64 = ranks.iter().map(|r| r.count).sum();
        for (rank, share) in [0.2, 0.3, 0.5].iter().enumerate() {
            let got = ranks[rank].count / total;
            assert!((got - share).abs() < 0.06, "rank {rank}: {got} of queries");
        }
    }

    #[test]
    fn strategies_see_the_same_sessions() {
        let spec = TierSpec::quick(1);
        let config = spec.run_config(1000.0, [0.2, 0.3, 0.5], 0);
        let admitted = |s| {
            let mut router = build_router(s, &config.cluster).expect("router");
            engine::run(&config, router.as_mut()).phases[0].admitted
        };
        let tiered = admitted(Strategy::PlbTiered { reclaim: true });
        assert!(tiered[..RANKS].iter().all(|&n| n > 0), "{tiered:?}");
        for s in [
            Strategy::RoundRobin,
            Strategy::Plb,
            Strategy::PlbTop { ranks: 2 },
            Strategy::PlbTiered { reclaim: false },
        ] {
            assert_eq!(admitted(s), tiered, "common random numbers");
        }
    }
}
