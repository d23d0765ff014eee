//! What the simulated clients do: the cluster shape, session arrivals and lifetimes, think
//! time, the service classes, and the query service-demand distribution.
//!
//! The shape follows Section IV-A of the PLB paper: T terminals over a duration D arrive as
//! a Poisson process of rate T/D, each lives U[10, 30] s and runs TPC-H queries chosen
//! uniformly at random, one after another.

use pgtier_policy::{PlbParams, ServiceClass};

use super::rng::SimRng;
use super::tiered::TierSetup;

pub use super::class::Class;

/// The replica budget: `replicas` identical nodes of `cores_per_replica` cores, and the PLB
/// configuration chosen for it (000 §IV-B calibrates PLB once per replica budget).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// K.
    pub replicas: usize,
    /// C (the paper's nodes have 18 cores).
    pub cores_per_replica: f64,
    /// Most cores one query uses at once (PostgreSQL parallel query: leader plus workers).
    pub query_parallelism: f64,
    /// PLB's parameters on this budget (the paper's by default).
    pub plb: PlbParams,
    /// PLB's parameters when it decides on transactions in flight (`PLB+txsignal`): θ counts
    /// running queries there, not open sessions.
    pub plb_in_flight: PlbParams,
    /// Tiered PLB's layout and parameters (`PLB-tiered`).
    pub tiers: TierSetup,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            replicas: 5,
            cores_per_replica: 18.0,
            query_parallelism: 1.0,
            plb: PlbParams::PAPER,
            plb_in_flight: PlbParams::PAPER,
            tiers: TierSetup::three_of(&PlbParams::PAPER),
        }
    }
}

impl ClusterConfig {
    /// `bench/plb-live.sh`'s cluster: five replicas held to a quarter core each, PLB with
    /// θ_P = θ_F = 3 sessions (its `THETA`), the paper's other parameters; on the in-flight
    /// signal θ = 2 transactions (its `THETA_TX`).
    pub fn live() -> Self {
        Self {
            cores_per_replica: 0.25,
            plb: PlbParams::PAPER
                .with_theta(ServiceClass::Premium, 3)
                .with_theta(ServiceClass::Freemium, 3),
            plb_in_flight: PlbParams::PAPER
                .with_theta(ServiceClass::Premium, 2)
                .with_theta(ServiceClass::Freemium, 2),
            tiers: TierSetup::three_of(&PlbParams::PAPER.with_theta(ServiceClass::Premium, 3)),
            ..Self::default()
        }
    }
}

/// What happens when a session's lifetime runs out while one of its queries is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The session closes after its running query completes (the query is measured).
    AfterRunningQuery,
    /// The session closes at once and its running query is abandoned unmeasured.
    AtLifetime,
}

/// Query service demands: TPC-H's 22 queries picked uniformly, each a log-normal around
/// its own median, scaled so that the mixture's mean is `mean_demand_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct DemandModel {
    /// Relative median cost of each query template.
    pub relative_medians: Vec<f64>,
    /// Log-space standard deviation of a template's run-to-run variation.
    pub sigma: f64,
    /// Mean demand of the whole mixture in core-seconds.
    pub mean_demand_s: f64,
}

/// Relative single-core cost of TPC-H Q1..Q22 at a fixed scale factor on PostgreSQL.
///
/// An assumed profile (not a measurement): a few heavy scans and joins (Q1, Q9, Q13, Q18,
/// Q21), many medium queries, and a handful of cheap ones (Q6, Q11, Q14, Q19, Q22). It gives
/// the long right tail that separates p95 from the median in the paper's figures.
pub const TPCH_RELATIVE_COST: [f64; 22] = [
    20.0, 2.5, 8.0, 4.0, 7.0, 2.5, 7.0, 4.0, 15.0, 6.0, 1.5, 5.0, 10.0, 2.5, 5.0, 3.0, 12.0, 18.0,
    1.5, 5.0, 15.0, 1.5,
];

impl Default for DemandModel {
    fn default() -> Self {
        Self {
            relative_medians: TPCH_RELATIVE_COST.to_vec(),
            sigma: 0.25,
            mean_demand_s: 6.0,
        }
    }
}

/// `bench/plb-live.sh`'s query mix as (weight, core-milliseconds): pricing summary, top-N,
/// join, range aggregate, distinct count, point lookup. Measured as each query's median
/// latency alone on a quarter-core replica; the four that outlast the CFS quota's 25 ms
/// burst ran at a quarter core (core time = latency / 4), the two short ones at a full core.
pub const LIVE_QUERY_COST_MS: [(u32, f64); 6] = [
    (2, 39.0),
    (2, 30.0),
    (2, 28.0),
    (3, 11.0),
    (1, 101.0),
    (4, 0.7),
];

impl DemandModel {
    /// The live harness's mix: each template repeated by its weight (templates are drawn
    /// uniformly), the mixture's mean the weighted mean of the measured costs.
    pub fn live() -> Self {
        let sigma: f64 = 0.25;
        let relative_medians: Vec<f64> = LIVE_QUERY_COST_MS
            .iter()
            .flat_map(|&(weight, ms)| std::iter::repeat_n(ms / 1000.0, weight as usize))
            .collect();
        let median_mean = relative_medians.iter().sum::<f64>() / relative_medians.len() as f64;
        Self {
            relative_medians,
            sigma,
            mean_demand_s: median_mean * (sigma * sigma / 2.0).exp(),
        }
    }

    /// Draws one query's demand in core-seconds.
    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        let template = self.relative_medians[rng.index(self.relative_medians.len())];
        rng.lognormal(template * self.scale(), self.sigma)
    }

    /// Multiplier from relative medians to seconds giving the configured mixture mean.
    fn scale(&self) -> f64 {
        let n = self.relative_medians.len() as f64;
        let relative_mean = self.relative_medians.iter().sum::<f64>() / n;
        // A log-normal's mean is its median times exp(sigma^2 / 2).
        let lognormal_mean_factor = (self.sigma * self.sigma / 2.0).exp();
        self.mean_demand_s / (relative_mean * lognormal_mean_factor)
    }
}

/// The client population of one run.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// T: sessions expected over `arrival_period_s`.
    pub terminals: f64,
    /// D: λ = T / D sessions per second.
    pub arrival_period_s: f64,
    /// Arrivals stop at this time (D for the grid; the run's end for fault scenarios).
    pub arrivals_until_s: f64,
    /// Probability that a session is premium.
    pub premium_share: f64,
    /// Tiered runs: the share of each class by rank (they add up to 1); empty for the papers'
    /// two classes, which draw from `premium_share` instead.
    pub class_shares: Vec<f64>,
    /// Session lifetime is uniform in this range (seconds).
    pub lifetime_range_s: (f64, f64),
    /// Mean of the exponential think time between a session's queries (0: none).
    pub think_mean_s: f64,
    /// What a lifetime ending mid-query does.
    pub session_end: SessionEnd,
    /// Query service demands.
    pub demand: DemandModel,
}

impl WorkloadConfig {
    /// The paper's workload at T terminals and the given premium share, over D = 180 s.
    pub fn paper(terminals: f64, premium_share: f64) -> Self {
        Self {
            terminals,
            arrival_period_s: 180.0,
            arrivals_until_s: 180.0,
            premium_share,
            class_shares: Vec::new(),
            lifetime_range_s: (10.0, 30.0),
            think_mean_s: 5.0,
            session_end: SessionEnd::AfterRunningQuery,
            demand: DemandModel::default(),
        }
    }

    /// `bench/plb-live.sh`'s clients: arrivals for D = 60 s (so T = 60 × its sessions per
    /// second), lifetimes of 5–15 s, 0.5 s think time, its query mix.
    pub fn live(terminals: f64, premium_share: f64) -> Self {
        Self {
            terminals,
            arrival_period_s: 60.0,
            arrivals_until_s: 60.0,
            premium_share,
            class_shares: Vec::new(),
            lifetime_range_s: (5.0, 15.0),
            think_mean_s: 0.5,
            session_end: SessionEnd::AfterRunningQuery,
            demand: DemandModel::live(),
        }
    }

    /// The class of an arrival whose uniform draw in [0, 1) is `u`, by `class_shares`
    /// (the last class absorbs rounding).
    pub fn draw_class(&self, u: f64) -> Class {
        let last = self.class_shares.len().clamp(1, Class::MAX) - 1;
        let mut cumulative = 0.0;
        for (rank, share) in self.class_shares.iter().enumerate().take(last) {
            cumulative += share;
            if u < cumulative {
                return Class(rank as u8);
            }
        }
        Class(last as u8)
    }

    /// Session arrival rate λ = T / D per second.
    pub fn arrival_rate_per_s(&self) -> f64 {
        self.terminals / self.arrival_period_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_mix_mean_is_the_weighted_mean_of_its_costs() {
        let model = DemandModel::live();
        let weights: u32 = LIVE_QUERY_COST_MS.iter().map(|&(w, _)| w).sum();
        let weighted_ms: f64 = LIVE_QUERY_COST_MS
            .iter()
            .map(|&(w, ms)| f64::from(w) * ms)
            .sum();
        assert_eq!(model.relative_medians.len(), weights as usize);
        let mut rng = SimRng::new(5);
        let n = 200_000;
        let mean = (0..n).map(|_| model.sample(&mut rng)).sum::<f64>() / n as f64;
        let expected = weighted_ms / f64::from(weights) / 1000.0 * (0.25f64 * 0.25 / 2.0).exp();
        assert!(
            (mean - expected).abs() < expected * 0.02,
            "mean {mean}, expected {expected}"
        );
    }

    #[test]
    fn demand_mixture_mean_matches_configuration() {
        let model = DemandModel::default();
        let mut rng = SimRng::new(3);
        let n = 200_000;
        let mean = (0..n).map(|_| model.sample(&mut rng)).sum::<f64>() / n as f64;
        assert!((mean - model.mean_demand_s).abs() < 0.1, "mean {mean}");
    }
}
