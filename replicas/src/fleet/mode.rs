//! The pure rules of one fleet member: whether it works from the fleet's table or its own
//! (and when to say so), which versions it applies, and which version a leader writes next.
//! (Each host's share of a server budget is `pgtier_pool::fleet_share`.)

/// Where this host's role tables come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Not yet reached the store since the start.
    Starting,
    /// Reaches the store: applies the fleet's table (and computes it when leader).
    Fleet {
        /// This host holds the fleet's lock.
        leader: bool,
    },
    /// The store is unreachable: local PLB, as without a fleet.
    Local {
        /// Why, for the log and the console.
        cause: String,
    },
}

impl Mode {
    /// `fleet` or `local` (`starting` before the first round), as the console shows it.
    pub fn as_str(&self) -> &'static str {
        match self {
            Mode::Starting => "starting",
            Mode::Fleet { .. } => "fleet",
            Mode::Local { .. } => "local",
        }
    }
}

/// A change worth one log line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Reached the store (first time, or again after local mode).
    JoinedFleet,
    /// Lost the store: local PLB until it returns.
    WentLocal {
        /// Why.
        cause: String,
    },
    /// Took the fleet's lock.
    BecameLeader,
    /// Gave the lock up (its connection was lost, or another host holds it now).
    StoppedLeading,
}

/// The member's mode and the newest fleet version it applied.
#[derive(Clone, Debug)]
pub struct Member {
    mode: Mode,
    applied: Option<u64>,
}

impl Default for Member {
    fn default() -> Member {
        Member {
            mode: Mode::Starting,
            applied: None,
        }
    }
}

impl Member {
    /// The current mode.
    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// The newest fleet version applied since the store was last reached (`None` in local
    /// mode: the local table has moved on its own since).
    pub fn applied(&self) -> Option<u64> {
        self.applied
    }

    /// A round with the store succeeded; `leader` says whether this host holds the lock.
    /// Returns the transitions to log, in order.
    pub fn on_store_reached(&mut self, leader: bool) -> Vec<Transition> {
        let mut out = Vec::new();
        let was_leader = match self.mode {
            Mode::Fleet { leader } => leader,
            Mode::Starting | Mode::Local { .. } => {
                out.push(Transition::JoinedFleet);
                false
            }
        };
        match (was_leader, leader) {
            (false, true) => out.push(Transition::BecameLeader),
            (true, false) => out.push(Transition::StoppedLeading),
            _ => {}
        }
        self.mode = Mode::Fleet { leader };
        out
    }

    /// A round with the store failed. Local at once; only the first failure of a run is a
    /// transition (the log says it once), later ones just refresh the cause.
    pub fn on_store_lost(&mut self, cause: &str) -> Vec<Transition> {
        let mut out = Vec::new();
        match &self.mode {
            Mode::Local { .. } => {}
            Mode::Fleet { leader } => {
                if *leader {
                    out.push(Transition::StoppedLeading);
                }
                out.push(Transition::WentLocal {
                    cause: cause.to_string(),
                });
            }
            Mode::Starting => out.push(Transition::WentLocal {
                cause: cause.to_string(),
            }),
        }
        self.mode = Mode::Local {
            cause: cause.to_string(),
        };
        self.applied = None;
        out
    }

    /// Whether the fleet's `version` should be applied now: in fleet mode, when it is newer
    /// than the last one applied (or none was since the store was reached).
    pub fn should_apply(&self, version: u64) -> bool {
        matches!(self.mode, Mode::Fleet { .. }) && self.applied.is_none_or(|seen| version > seen)
    }

    /// `version` was applied.
    pub fn applied_version(&mut self, version: u64) {
        self.applied = Some(self.applied.map_or(version, |seen| seen.max(version)));
    }
}

/// The version a leader writes: the stored one plus one when the table changed or the leader
/// is new (so a takeover is visible and never reuses a number), else nothing to write. A new
/// leader reads the stored version under the lock, so versions never fork.
pub fn next_version(stored: Option<u64>, new_leader: bool, changed: bool) -> Option<u64> {
    (new_leader || changed || stored.is_none()).then(|| stored.unwrap_or(0).saturating_add(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_lost_and_found_again_logs_each_transition_once() {
        let mut member = Member::default();
        assert_eq!(member.mode().as_str(), "starting");
        assert_eq!(member.on_store_reached(false), [Transition::JoinedFleet]);
        assert!(member.on_store_reached(false).is_empty());
        assert_eq!(member.on_store_reached(true), [Transition::BecameLeader]);
        let lost = member.on_store_lost("connect: refused");
        assert_eq!(
            lost,
            [
                Transition::StoppedLeading,
                Transition::WentLocal {
                    cause: "connect: refused".to_string()
                }
            ]
        );
        assert!(member.on_store_lost("connect: timed out").is_empty());
        assert_eq!(
            member.mode(),
            &Mode::Local {
                cause: "connect: timed out".to_string()
            }
        );
        assert_eq!(member.on_store_reached(false), [Transition::JoinedFleet]);
        assert_eq!(member.mode().as_str(), "fleet");
    }

    #[test]
    fn a_host_that_never_reached_the_store_goes_local() {
        let mut member = Member::default();
        assert!(matches!(
            member.on_store_lost("no route").as_slice(),
            [Transition::WentLocal { .. }]
        ));
        assert!(!member.should_apply(1));
    }

    #[test]
    fn only_newer_versions_apply_and_local_mode_forgets_the_last_one() {
        let mut member = Member::default();
        member.on_store_reached(false);
        assert!(member.should_apply(7));
        member.applied_version(7);
        assert!(!member.should_apply(7));
        assert!(!member.should_apply(6));
        assert!(member.should_apply(8));
        member.on_store_lost("down");
        assert_eq!(member.applied(), None);
        member.on_store_reached(false);
        // The local table moved meanwhile: the fleet's table applies again, same version.
        assert!(member.should_apply(7));
    }

    #[test]
    fn a_leader_writes_the_next_version_on_change_or_takeover_only() {
        assert_eq!(next_version(None, false, false), Some(1));
        assert_eq!(next_version(Some(41), true, false), Some(42));
        assert_eq!(next_version(Some(41), false, true), Some(42));
        assert_eq!(next_version(Some(41), false, false), None);
        assert_eq!(next_version(Some(u64::MAX), true, true), Some(u64::MAX));
    }
}
