//! Which host of a database's host list a pool's next server connects to (PgBouncer's
//! `load_balance_hosts`): each pool keeps its own turn, and whether its last open failed.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// How a pool walks its database's host list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostBalance {
    /// Every open takes the next host.
    RoundRobin,
    /// Opens stay on one host until an open fails, then move to the next.
    StayUntilFailure,
}

/// A pool's place in its host list, shared by every worker's slice of the pool (PgBouncer
/// keeps one per pool; pgtier's pool spans workers), so with `disable` a host that failed on
/// one worker is passed over by all, and round-robin turns once per open whichever worker
/// opens. Two atomics touched once per server open, never per query.
#[derive(Debug, Default)]
pub struct HostTurn {
    turn: AtomicU32,
    /// An open failed and no pick has moved on from it yet: the next pick moves on.
    last_failed: AtomicBool,
}

impl HostTurn {
    /// The index, among `hosts` entries, of the host the next open goes to.
    pub(crate) fn next(&self, hosts: usize, balance: HostBalance) -> usize {
        if hosts == 0 {
            return 0;
        }
        let turn = match balance {
            HostBalance::RoundRobin => self.turn.fetch_add(1, Ordering::Relaxed),
            // One failure moves the turn once, however many workers' opens failed with it
            // (they all tried the same host) and however many pick next.
            HostBalance::StayUntilFailure if self.last_failed.swap(false, Ordering::Relaxed) => {
                self.turn.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
            }
            HostBalance::StayUntilFailure => self.turn.load(Ordering::Relaxed),
        };
        turn as usize % hosts
    }

    pub(crate) fn failed(&self) {
        self.last_failed.store(true, Ordering::Relaxed);
    }

    pub(crate) fn opened(&self) {
        self.last_failed.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(turn: &HostTurn, balance: HostBalance, outcomes: &[bool]) -> Vec<usize> {
        outcomes
            .iter()
            .map(|&ok| {
                let index = turn.next(3, balance);
                if ok {
                    turn.opened()
                } else {
                    turn.failed()
                }
                index
            })
            .collect()
    }

    #[test]
    fn round_robin_takes_the_next_host_whatever_happened() {
        let turn = HostTurn::default();
        let outcomes = [true, false, true, true, false];
        assert_eq!(
            picks(&turn, HostBalance::RoundRobin, &outcomes),
            [0, 1, 2, 0, 1]
        );
    }

    #[test]
    fn stay_until_failure_moves_on_only_after_a_failed_open() {
        let turn = HostTurn::default();
        // Host 0 works twice, then fails; every later open while failing moves on once.
        let outcomes = [true, true, false, false, true, true];
        assert_eq!(
            picks(&turn, HostBalance::StayUntilFailure, &outcomes),
            [0, 0, 0, 1, 2, 2]
        );
    }
}
