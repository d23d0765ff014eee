//! Summaries of raw observations: quantiles, per-phase per-class statistics, utilisation
//! mean and coefficient of variation, and aggregation of per-seed summaries.
//!
//! Definitions follow the papers: the mean CPU fraction of the replicas that were up
//! throughout a phase and its coefficient of variation σ/μ (000 §V-C, 001 §IV), latency
//! medians and p95 per class, goodput as completed queries per second per class.

use super::engine::PhaseObservations;
use super::workload::Class;

/// Linear-interpolation quantile of `sorted` (ascending) at `q` in [0, 1]; NaN when empty.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let position = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let low = position.floor() as usize;
    let high = position.ceil() as usize;
    let fraction = position - low as f64;
    sorted[low] + (sorted[high] - sorted[low]) * fraction
}

/// Arithmetic mean; NaN when empty.
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        f64::NAN
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Population coefficient of variation σ/μ; NaN when empty or μ = 0.
pub fn coefficient_of_variation(values: &[f64]) -> f64 {
    let mu = mean(values);
    if values.is_empty() || mu == 0.0 {
        return f64::NAN;
    }
    let variance = values.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / values.len() as f64;
    variance.sqrt() / mu
}

/// Median of unsorted values, ignoring NaN; NaN when nothing is left.
pub fn median_of(values: &[f64]) -> f64 {
    let mut finite: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    finite.sort_by(f64::total_cmp);
    quantile(&finite, 0.5)
}

/// Mean of values, ignoring NaN; NaN when nothing is left.
pub fn mean_of(values: &[f64]) -> f64 {
    let finite: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    mean(&finite)
}

/// Latency statistics of one class (or of all queries) in one phase.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyStats {
    /// Completed queries.
    pub count: f64,
    /// Mean latency (s).
    pub mean_s: f64,
    /// Median latency (s).
    pub median_s: f64,
    /// 95th percentile latency (s).
    pub p95_s: f64,
}

impl LatencyStats {
    pub(crate) fn of(mut latencies: Vec<f64>) -> Self {
        latencies.sort_by(f64::total_cmp);
        Self {
            count: latencies.len() as f64,
            mean_s: mean(&latencies),
            median_s: quantile(&latencies, 0.5),
            p95_s: quantile(&latencies, 0.95),
        }
    }
}

/// Everything reported about one phase of one run (or an aggregate over seeds).
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseSummary {
    /// Phase label.
    pub name: String,
    /// Premium (0) and freemium (1) latency statistics.
    pub class: [LatencyStats; 2],
    /// Statistics over all queries.
    pub overall: LatencyStats,
    /// Completed queries per second, per class.
    pub goodput_per_s: [f64; 2],
    /// Mean busy-core fraction of the replicas up throughout the phase.
    pub utilisation: f64,
    /// Coefficient of variation of those replicas' busy fractions.
    pub utilisation_cv: f64,
    /// Per replica busy fraction (NaN when the replica was down during the phase).
    pub replica_utilisation: Vec<f64>,
    /// Sessions admitted per class.
    pub admitted: [f64; 2],
    /// Sessions lost with a failed replica, per class.
    pub lost: [f64; 2],
    /// Sessions that found no replica up, per class.
    pub rejected: [f64; 2],
    /// Mean observed session lifetime (arrival to close) of sessions closing in the phase.
    pub session_lifetime_s: [f64; 2],
}

/// The papers' two classes of a per-class count array.
fn pair_of(counts: &[u64; Class::MAX]) -> [f64; 2] {
    [counts[0] as f64, counts[1] as f64]
}

impl PhaseSummary {
    /// Summarises one phase of one run.
    pub fn of(obs: &PhaseObservations) -> Self {
        let duration_s = obs.phase.end_s - obs.phase.start_s;
        let (premium, freemium) = (&obs.latencies_s[0], &obs.latencies_s[1]);
        let all: Vec<f64> = obs.latencies_s.iter().flatten().copied().collect();
        let survivors: Vec<f64> = obs.busy_fraction.iter().flatten().copied().collect();
        Self {
            name: obs.phase.name.clone(),
            class: [
                LatencyStats::of(premium.clone()),
                LatencyStats::of(freemium.clone()),
            ],
            overall: LatencyStats::of(all),
            goodput_per_s: [
                premium.len() as f64 / duration_s,
                freemium.len() as f64 / duration_s,
            ],
            utilisation: mean(&survivors),
            utilisation_cv: coefficient_of_variation(&survivors),
            replica_utilisation: obs
                .busy_fraction
                .iter()
                .map(|u| u.unwrap_or(f64::NAN))
                .collect(),
            admitted: pair_of(&obs.admitted),
            lost: pair_of(&obs.lost),
            rejected: pair_of(&obs.rejected),
            session_lifetime_s: [
                mean(&obs.session_lifetimes_s[0]),
                mean(&obs.session_lifetimes_s[1]),
            ],
        }
    }

    /// Combines per-seed summaries of the same phase field by field with `combine`
    /// (mean for the grid as in 000, median for fault scenarios as in 001).
    pub fn aggregate(runs: &[PhaseSummary], combine: fn(&[f64]) -> f64) -> Option<PhaseSummary> {
        let first = runs.first()?;
        let field = |get: &dyn Fn(&PhaseSummary) -> f64| -> f64 {
            combine(&runs.iter().map(get).collect::<Vec<f64>>())
        };
        let latency = |get: &dyn Fn(&PhaseSummary) -> LatencyStats| LatencyStats {
            count: field(&|s| get(s).count),
            mean_s: field(&|s| get(s).mean_s),
            median_s: field(&|s| get(s).median_s),
            p95_s: field(&|s| get(s).p95_s),
        };
        let pair = |get: &dyn Fn(&PhaseSummary) -> [f64; 2]| {
            [field(&|s| get(s)[0]), field(&|s| get(s)[1])]
        };
        Some(PhaseSummary {
            name: first.name.clone(),
            class: [latency(&|s| s.class[0]), latency(&|s| s.class[1])],
            overall: latency(&|s| s.overall),
            goodput_per_s: pair(&|s| s.goodput_per_s),
            utilisation: field(&|s| s.utilisation),
            utilisation_cv: field(&|s| s.utilisation_cv),
            replica_utilisation: (0..first.replica_utilisation.len())
                .map(|r| field(&|s| s.replica_utilisation.get(r).copied().unwrap_or(f64::NAN)))
                .collect(),
            admitted: pair(&|s| s.admitted),
            lost: pair(&|s| s.lost),
            rejected: pair(&|s| s.rejected),
            session_lifetime_s: pair(&|s| s.session_lifetime_s),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&xs, 0.5), 3.0);
        assert_eq!(quantile(&xs, 0.0), 1.0);
        assert_eq!(quantile(&xs, 1.0), 5.0);
        assert!((quantile(&xs, 0.95) - 4.8).abs() < 1e-12);
        assert!(quantile(&[], 0.5).is_nan());
    }

    #[test]
    fn cv_of_equal_values_is_zero() {
        assert_eq!(coefficient_of_variation(&[0.5, 0.5, 0.5]), 0.0);
        let cv = coefficient_of_variation(&[1.0, 0.0]);
        assert!((cv - 1.0).abs() < 1e-12);
    }

    #[test]
    fn median_ignores_nan() {
        assert_eq!(median_of(&[f64::NAN, 1.0, 3.0, 2.0]), 2.0);
    }
}
