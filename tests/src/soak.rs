//! The soak's judgement (`pgtier-soak`): series of samples of pgtier's RSS, fds, pools and
//! servers over a long mixed load, a least-squares line through each after the warm-up, and
//! whether what the line says grew over the run stands out of the noise around it. A leak
//! shows as growth many times the residual spread; a flat series has a slope whose growth
//! over the window is within a few residual deviations (or below a small floor, for series
//! that barely move). Growth per connection served is the same line against the count of
//! connections instead of time.

use std::fmt;

/// One series: (x, y) points, x being seconds or connections served.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: &'static str,
    pub unit: &'static str,
    /// Growth over the window below this is never a failure (a series that barely moves has
    /// almost no residual spread to compare with).
    pub floor: f64,
    pub points: Vec<(f64, f64)>,
}

/// A least-squares line and the spread of the points around it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    pub slope: f64,
    pub intercept: f64,
    /// Standard deviation of the residuals.
    pub residual_sd: f64,
    /// The x range the points cover.
    pub span: f64,
}

impl Fit {
    /// The growth the line predicts over the points' range.
    pub fn growth(&self) -> f64 {
        self.slope * self.span
    }
}

/// The line through `points` (`None` with fewer than three, or all at one x).
pub fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    let sse: f64 = points
        .iter()
        .map(|p| (p.1 - (intercept + slope * p.0)).powi(2))
        .sum();
    let residual_sd = (sse / (n - 2.0)).sqrt();
    let min_x = points.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let max_x = points.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    Some(Fit {
        slope,
        intercept,
        residual_sd,
        span: max_x - min_x,
    })
}

/// How many residual deviations growth may reach before it counts as growth.
pub const NOISE_SIGMAS: f64 = 3.0;

/// The verdict on one series.
#[derive(Clone, Debug)]
pub struct Verdict {
    pub name: &'static str,
    pub unit: &'static str,
    pub fit: Option<Fit>,
    /// The growth allowed: the noise band or the floor, whichever is larger.
    pub allowed: f64,
    pub flat: bool,
}

impl Series {
    /// Flat when the line's growth over the window is within the noise band (or the floor).
    pub fn verdict(&self) -> Verdict {
        let fit = fit(&self.points);
        let allowed = fit.map_or(self.floor, |fit| {
            (NOISE_SIGMAS * fit.residual_sd).max(self.floor)
        });
        let flat = fit.is_none_or(|fit| fit.growth() <= allowed);
        Verdict {
            name: self.name,
            unit: self.unit,
            fit,
            allowed,
            flat,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.fit {
            Some(fit) => write!(
                f,
                "{}: slope {:.4} {}/s, growth over the window {:.2} {} (allowed {:.2}: {}x residual sd {:.2}, floor), {}",
                self.name,
                fit.slope,
                self.unit,
                fit.growth(),
                self.unit,
                self.allowed,
                NOISE_SIGMAS,
                fit.residual_sd,
                if self.flat { "flat" } else { "GROWS" }
            ),
            None => write!(f, "{}: too few samples", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(points: Vec<(f64, f64)>, floor: f64) -> Series {
        Series {
            name: "rss",
            unit: "MiB",
            floor,
            points,
        }
    }

    #[test]
    fn a_line_is_fitted_exactly() {
        let points: Vec<(f64, f64)> = (0..10).map(|x| (x as f64, 2.0 * x as f64 + 1.0)).collect();
        let fit = fit(&points).expect("fit");
        assert!((fit.slope - 2.0).abs() < 1e-9);
        assert!((fit.intercept - 1.0).abs() < 1e-9);
        assert!(fit.residual_sd < 1e-9);
        assert!((fit.growth() - 18.0).abs() < 1e-9);
    }

    #[test]
    fn noise_without_a_trend_is_flat_a_steady_climb_is_not() {
        // Alternating noise of +-1 around 50.
        let noisy: Vec<(f64, f64)> = (0..60)
            .map(|x| (x as f64, 50.0 + if x % 2 == 0 { 1.0 } else { -1.0 }))
            .collect();
        assert!(series(noisy.clone(), 0.0).verdict().flat);
        // The same noise on a climb of 0.5 per sample: 30 over the window, far past 3 sd.
        let climbing: Vec<(f64, f64)> = noisy.iter().map(|&(x, y)| (x, y + 0.5 * x)).collect();
        let verdict = series(climbing, 0.0).verdict();
        assert!(!verdict.flat, "{verdict}");
    }

    #[test]
    fn a_perfectly_flat_series_and_a_tiny_step_are_within_the_floor() {
        let flat: Vec<(f64, f64)> = (0..30).map(|x| (x as f64, 27.0)).collect();
        assert!(series(flat, 0.0).verdict().flat);
        // One more fd halfway: a step of 1 with no other noise passes on the floor.
        let step: Vec<(f64, f64)> = (0..30)
            .map(|x| (x as f64, if x < 15 { 27.0 } else { 28.0 }))
            .collect();
        assert!(series(step.clone(), 2.0).verdict().flat);
        assert!(!series(step, 0.0).verdict().flat);
    }

    #[test]
    fn too_few_samples_are_not_judged() {
        assert!(fit(&[(0.0, 1.0), (1.0, 2.0)]).is_none());
        assert!(series(vec![(0.0, 1.0)], 0.0).verdict().flat);
    }
}
