//! Health of each replica as the control shard sees it: a small state machine fed by probe
//! results and by failure reports from data shards, and the thresholds that drive it.
//!
//! It exists so that "Down after N consecutive failed probes, at once on a refused or reset
//! connection, Rejoin after M consecutive good probes" is written once, is pure (no sockets, no
//! clock: times are arguments) and is tested without a server. The probes themselves run on
//! the control plane's prober threads (see [`crate::probe`]).

use std::time::{Duration, SystemTime};

use pgtier_core::config::Settings;

use crate::events::HealthTransition;

/// Probe cadence and the thresholds of the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthConfig {
    /// Time between the starts of two probes of one replica.
    pub interval: Duration,
    /// Connect + login + query budget of one probe.
    pub timeout: Duration,
    /// Consecutive failed probes that mark an Up replica Down.
    pub failures_to_down: u32,
    /// Consecutive good probes that let a Down replica rejoin.
    pub successes_to_rejoin: u32,
}

impl HealthConfig {
    /// The `[pgtier]` health settings. Thresholds of zero are raised to one: a replica cannot
    /// change state without evidence.
    pub fn from_settings(settings: &Settings) -> HealthConfig {
        HealthConfig {
            interval: settings.health_check_interval.duration(),
            timeout: settings.health_check_timeout.duration(),
            failures_to_down: settings.health_check_failures.max(1),
            successes_to_rejoin: settings.health_check_successes.max(1),
        }
    }
}

impl Default for HealthConfig {
    /// The defaults of `[pgtier]`: a killed replica is Down within two probes of 250 ms.
    fn default() -> HealthConfig {
        HealthConfig {
            interval: Duration::from_millis(250),
            timeout: Duration::from_millis(500),
            failures_to_down: 2,
            successes_to_rejoin: 3,
        }
    }
}

/// Result of one probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Logged in, `SELECT 1` answered, and the server is still a standby.
    Healthy {
        /// Connect to last byte of the answer.
        round_trip: Duration,
    },
    /// Anything else; the text says what (refused, timeout, auth error, promoted, ...).
    Failed { cause: String },
}

impl ProbeOutcome {
    /// True for [`ProbeOutcome::Healthy`].
    pub fn is_healthy(&self) -> bool {
        matches!(self, ProbeOutcome::Healthy { .. })
    }
}

/// The newest probe of a replica, for `SHOW REPLICAS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastProbe {
    /// When the probe finished.
    pub at: SystemTime,
    /// What it found.
    pub outcome: ProbeOutcome,
}

/// Health state of one replica. Each variant counts the evidence toward leaving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthState {
    /// Receives sessions; `failures` consecutive failed probes so far (below the threshold).
    Up { failures: u32 },
    /// Receives no session; `successes` consecutive good probes so far (below the threshold).
    Down { successes: u32 },
}

impl HealthState {
    /// A replica starts Up: the first failed probes or reports take it down.
    pub(crate) const INITIAL: HealthState = HealthState::Up { failures: 0 };

    /// True for `Up`.
    pub const fn is_up(self) -> bool {
        matches!(self, HealthState::Up { .. })
    }

    /// Admin-console spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            HealthState::Up { .. } => "up",
            HealthState::Down { .. } => "down",
        }
    }

    /// Feeds one probe result; returns the transition it causes, if any.
    pub(crate) fn on_probe(
        &mut self,
        healthy: bool,
        config: &HealthConfig,
    ) -> Option<HealthTransition> {
        let (next, transition) = match (*self, healthy) {
            (HealthState::Up { .. }, true) => (HealthState::Up { failures: 0 }, None),
            (HealthState::Up { failures }, false) => {
                let failures = failures.saturating_add(1);
                if failures >= config.failures_to_down {
                    (
                        HealthState::Down { successes: 0 },
                        Some(HealthTransition::Down),
                    )
                } else {
                    (HealthState::Up { failures }, None)
                }
            }
            (HealthState::Down { successes }, true) => {
                let successes = successes.saturating_add(1);
                if successes >= config.successes_to_rejoin {
                    (
                        HealthState::Up { failures: 0 },
                        Some(HealthTransition::Rejoin),
                    )
                } else {
                    (HealthState::Down { successes }, None)
                }
            }
            (HealthState::Down { .. }, false) => (HealthState::Down { successes: 0 }, None),
        };
        *self = next;
        transition
    }

    /// A data shard saw a connection to the replica refused or reset: Down at once. A report
    /// about a replica that is already Down restarts its count of good probes.
    pub(crate) fn on_reported_failure(&mut self) -> Option<HealthTransition> {
        let was_up = self.is_up();
        *self = HealthState::Down { successes: 0 };
        was_up.then_some(HealthTransition::Down)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HealthConfig {
        HealthConfig::default()
    }

    fn feed(state: &mut HealthState, probes: &[bool]) -> Vec<Option<HealthTransition>> {
        probes
            .iter()
            .map(|&ok| state.on_probe(ok, &config()))
            .collect()
    }

    #[test]
    fn down_after_consecutive_failures_only() {
        let mut state = HealthState::INITIAL;
        assert_eq!(
            feed(&mut state, &[false, true, false]),
            vec![None, None, None]
        );
        assert_eq!(
            state.on_probe(false, &config()),
            Some(HealthTransition::Down)
        );
        assert!(!state.is_up());
    }

    #[test]
    fn rejoin_after_consecutive_successes_only() {
        let mut state = HealthState::Down { successes: 0 };
        assert_eq!(
            feed(&mut state, &[true, true, false, true, true]),
            vec![None; 5]
        );
        assert_eq!(
            state.on_probe(true, &config()),
            Some(HealthTransition::Rejoin)
        );
        assert_eq!(state, HealthState::Up { failures: 0 });
    }

    #[test]
    fn reported_failure_is_down_at_once() {
        let mut state = HealthState::INITIAL;
        assert_eq!(state.on_reported_failure(), Some(HealthTransition::Down));
        assert_eq!(state.on_reported_failure(), None);
        assert_eq!(state, HealthState::Down { successes: 0 });
    }

    #[test]
    fn zero_thresholds_are_raised_to_one() {
        let settings = Settings {
            health_check_failures: 0,
            health_check_successes: 0,
            ..Settings::default()
        };
        let config = HealthConfig::from_settings(&settings);
        assert_eq!(
            (config.failures_to_down, config.successes_to_rejoin),
            (1, 1)
        );
    }

    #[test]
    fn defaults_detect_within_a_second() {
        let config = HealthConfig::default();
        let worst = config.interval * config.failures_to_down + config.timeout;
        assert!(worst <= Duration::from_secs(1), "{worst:?}");
    }
}
