//! Which host of a database's host list a pool's next server connects to (PgBouncer's
//! `load_balance_hosts`): each pool keeps its own turn, and whether its last open failed.

/// How a pool walks its database's host list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostBalance {
    /// Every open takes the next host.
    RoundRobin,
    /// Opens stay on one host until an open fails, then move to the next.
    StayUntilFailure,
}

/// A pool's place in its host list.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HostTurn {
    turn: u32,
    /// The last open failed (and none succeeded since): the next one moves on.
    last_failed: bool,
}

impl HostTurn {
    /// The index, among `hosts` entries, of the host the next open goes to.
    pub(crate) fn next(&mut self, hosts: usize, balance: HostBalance) -> usize {
        if hosts == 0 {
            return 0;
        }
        if balance == HostBalance::StayUntilFailure && self.last_failed {
            self.turn = self.turn.wrapping_add(1);
        }
        let index = self.turn as usize % hosts;
        if balance == HostBalance::RoundRobin {
            self.turn = self.turn.wrapping_add(1);
        }
        index
    }

    pub(crate) fn failed(&mut self) {
        self.last_failed = true;
    }

    pub(crate) fn opened(&mut self) {
        self.last_failed = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(turn: &mut HostTurn, balance: HostBalance, outcomes: &[bool]) -> Vec<usize> {
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
        let mut turn = HostTurn::default();
        let outcomes = [true, false, true, true, false];
        assert_eq!(
            picks(&mut turn, HostBalance::RoundRobin, &outcomes),
            [0, 1, 2, 0, 1]
        );
    }

    #[test]
    fn stay_until_failure_moves_on_only_after_a_failed_open() {
        let mut turn = HostTurn::default();
        // Host 0 works twice, then fails; every later open while failing moves on once.
        let outcomes = [true, true, false, false, true, true];
        assert_eq!(
            picks(&mut turn, HostBalance::StayUntilFailure, &outcomes),
            [0, 0, 0, 1, 2, 2]
        );
    }
}
