//! The load the rest of a fleet reported (see `crate::fleet`), which this host's decisions
//! add to its own counts, so a host decides on the fleet's load and not on its share of it.
//!
//! The fleet thread replaces it after every round (empty in local mode, and always without a
//! fleet); a decision reads it once, lock-free. Claims stay conditional on this host's own
//! counter: the remote part is taken off the value a decision saw before the
//! compare-and-swap, so the remote load is an offset, never claimed or released here.

use pgtier_policy::tiers::{Tier, TierLoad};
use pgtier_policy::{MAX_REPLICAS, ReplicaLoad};

/// Other members' open sessions and transactions in flight, per replica and rank.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RemoteLoad {
    sessions: Vec<TierLoad>,
    in_flight: Vec<TierLoad>,
}

impl RemoteLoad {
    /// The others' load; slices longer than [`MAX_REPLICAS`] are cut there.
    pub fn new(sessions: &[TierLoad], in_flight: &[TierLoad]) -> RemoteLoad {
        RemoteLoad {
            sessions: sessions.iter().copied().take(MAX_REPLICAS).collect(),
            in_flight: in_flight.iter().copied().take(MAX_REPLICAS).collect(),
        }
    }

    /// True when nothing is added (no fleet, local mode, or idle peers).
    pub fn is_empty(&self) -> bool {
        self.sessions
            .iter()
            .chain(&self.in_flight)
            .all(|l| l.total() == 0)
    }

    /// Adds the others' sessions to `out` (two classes: rank 0 premium, the rest freemium).
    pub(crate) fn add_sessions(&self, out: &mut [ReplicaLoad]) {
        add_classes(&self.sessions, out);
    }

    /// Adds the others' transactions in flight to `out`.
    pub(crate) fn add_in_flight(&self, out: &mut [ReplicaLoad]) {
        add_classes(&self.in_flight, out);
    }

    /// Adds the others' sessions to `out`, by rank.
    pub(crate) fn add_tier_sessions(&self, out: &mut [TierLoad]) {
        for (slot, remote) in out.iter_mut().zip(&self.sessions) {
            for (mine, theirs) in slot.sessions.iter_mut().zip(remote.sessions) {
                *mine = mine.saturating_add(theirs);
            }
        }
    }

    /// The others' sessions of `class` on replica `index` as a two-class router counts them.
    pub(crate) fn class_sessions(&self, index: usize, class: Tier) -> u32 {
        self.sessions
            .get(index)
            .map_or(0, |load| two_class(*load).of(class.two_class()))
    }

    /// The others' sessions of rank `class` on replica `index`.
    pub(crate) fn tier_sessions(&self, index: usize, class: Tier) -> u32 {
        self.sessions.get(index).map_or(0, |load| load.of(class))
    }
}

fn two_class(load: TierLoad) -> ReplicaLoad {
    ReplicaLoad {
        premium: load.sessions[0],
        freemium: load.sessions[1..]
            .iter()
            .fold(0u32, |sum, &n| sum.saturating_add(n)),
    }
}

fn add_classes(remote: &[TierLoad], out: &mut [ReplicaLoad]) {
    for (slot, load) in out.iter_mut().zip(remote) {
        let load = two_class(*load);
        slot.premium = slot.premium.saturating_add(load.premium);
        slot.freemium = slot.freemium.saturating_add(load.freemium);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_others_load_adds_per_class_and_rank_and_reads_back() {
        let remote = RemoteLoad::new(
            &[TierLoad {
                sessions: [3, 2, 1, 0],
            }],
            &[TierLoad {
                sessions: [1, 0, 0, 0],
            }],
        );
        assert!(!remote.is_empty());
        let mut classes = [ReplicaLoad {
            premium: 1,
            freemium: 1,
        }; 2];
        remote.add_sessions(&mut classes);
        assert_eq!(
            classes[0],
            ReplicaLoad {
                premium: 4,
                freemium: 4
            }
        );
        assert_eq!(
            classes[1],
            ReplicaLoad {
                premium: 1,
                freemium: 1
            }
        );
        let mut flights = [ReplicaLoad::default(); 1];
        remote.add_in_flight(&mut flights);
        assert_eq!(flights[0].premium, 1);
        let mut ranks = [TierLoad::default(); 1];
        remote.add_tier_sessions(&mut ranks);
        assert_eq!(ranks[0].sessions, [3, 2, 1, 0]);
        assert_eq!(remote.class_sessions(0, Tier(1)), 3);
        assert_eq!(remote.tier_sessions(0, Tier(2)), 1);
        assert_eq!(remote.tier_sessions(5, Tier(0)), 0);
        assert!(RemoteLoad::default().is_empty());
    }
}
