//! Durations written in seconds, as PgBouncer writes them (`server_idle_timeout = 600`,
//! `health_check_interval = 0.25`). Kept as a type so a negative or NaN value is rejected while
//! parsing, and so "0 means disabled" is asked for by name instead of compared against zero.

use serde::Deserialize;
use std::fmt;
use std::time::Duration;

/// Longest accepted duration: about 31 years, far beyond any sane timeout, small enough that
/// `Instant + duration` never overflows.
const MAX_SECONDS: f64 = 1.0e9;

/// A non-negative, finite number of seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(try_from = "f64")]
pub struct Seconds(Duration);

impl Seconds {
    /// Zero seconds: for the settings where PgBouncer says so, this means "disabled".
    pub const ZERO: Seconds = Seconds(Duration::ZERO);

    /// Whole seconds.
    pub const fn from_secs(secs: u64) -> Seconds {
        Seconds(Duration::from_secs(secs))
    }

    /// Milliseconds.
    pub const fn from_millis(millis: u64) -> Seconds {
        Seconds(Duration::from_millis(millis))
    }

    /// The duration, zero included.
    pub const fn duration(self) -> Duration {
        self.0
    }

    /// `None` when zero (the setting is disabled), otherwise the duration.
    pub const fn enabled(self) -> Option<Duration> {
        if self.0.is_zero() { None } else { Some(self.0) }
    }

    /// True when zero.
    pub const fn is_zero(self) -> bool {
        self.0.is_zero()
    }

    /// Seconds as a float, as written in the file.
    pub fn as_secs_f64(self) -> f64 {
        self.0.as_secs_f64()
    }
}

impl TryFrom<f64> for Seconds {
    type Error = String;

    fn try_from(secs: f64) -> Result<Seconds, String> {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("{secs} is not a duration: expected seconds >= 0"));
        }
        if secs > MAX_SECONDS {
            return Err(format!(
                "{secs} seconds is too long (at most {MAX_SECONDS})"
            ));
        }
        Ok(Seconds(Duration::from_secs_f64(secs)))
    }
}

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_disabled() {
        assert_eq!(Seconds::ZERO.enabled(), None);
        assert_eq!(
            Seconds::from_secs(5).enabled(),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn fractions_negative_and_nan() {
        assert_eq!(Seconds::try_from(0.25), Ok(Seconds::from_millis(250)));
        assert!(Seconds::try_from(-1.0).is_err());
        assert!(Seconds::try_from(f64::NAN).is_err());
        assert!(Seconds::try_from(f64::INFINITY).is_err());
        assert!(Seconds::try_from(2.0e9).is_err());
    }
}
