//! Which host of an entry is its primary, decided from what one round of polls saw: each
//! host's `pg_is_in_recovery()` and, for a read-write host, its timeline.
//!
//! It exists so the rule that keeps an old primary from ever taking writes again (split
//! brain) is written once, is pure (no sockets, no clock) and is tested without a server.
//! The LSN poller of a reader entry feeds it a round at a time (`lsn_poll.rs`).
//!
//! The rule, as libpq's `target_session_attrs=read-write` finds a primary, plus a fence:
//! - the elected primary stays while it answers read-write, and while it cannot be reached
//!   (a restart is not a failover: nothing else was promoted);
//! - another read-write host takes over only on a **newer timeline** than the newest the
//!   elected primary was seen on (a promotion after it). When the elected primary was never
//!   seen read-write (pgtier started while it was down or a standby), any read-write host
//!   takes over once the elected one is not read-write;
//! - a read-write host on an older or the same timeline is **fenced**: it never becomes the
//!   primary (it is the old primary, back after a failover, or a stray server) until it is
//!   seen in recovery again (rejoined as a standby) and is then promoted anew;
//! - an elected primary seen in recovery (demoted) is no primary: writes have nowhere to go
//!   until a read-write host on a newer timeline appears.

/// What one poll saw of a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostRole {
    /// Not reached this round (refused, reset, timed out, or waiting to retry).
    Unreachable,
    /// `pg_is_in_recovery()` is true.
    Standby,
    /// `pg_is_in_recovery()` is false, writing on `timeline`.
    ReadWrite { timeline: u32 },
}

/// A change of the elected primary, to log and publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrimaryMove {
    /// Host `to` is the primary now (it was `from`).
    Elected {
        from: Option<usize>,
        to: usize,
        timeline: u32,
    },
    /// The elected primary `from` is in recovery: no host takes writes.
    Demoted { from: usize },
}

/// The election state of one entry's hosts (index 0: the configured primary).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrimaryElection {
    /// The host writes go to; `None` after a demotion until a newer primary appears.
    elected: Option<usize>,
    /// The newest timeline the elected primary (or the last one) was seen writing on.
    timeline: Option<u32>,
    /// Hosts seen read-write while another was primary, until seen in recovery.
    fenced: Vec<bool>,
}

impl PrimaryElection {
    /// `hosts` hosts, `configured` elected until a round says otherwise.
    pub fn new(hosts: usize, configured: usize) -> PrimaryElection {
        PrimaryElection {
            elected: (configured < hosts).then_some(configured),
            timeline: None,
            fenced: vec![false; hosts],
        }
    }

    /// The host writes go to.
    pub fn elected(&self) -> Option<usize> {
        self.elected
    }

    /// The newest timeline of the elected primary, once seen.
    pub fn timeline(&self) -> Option<u32> {
        self.timeline
    }

    /// Whether `host` is fenced (seen read-write while not the primary, not in recovery since).
    pub fn is_fenced(&self, host: usize) -> bool {
        self.fenced.get(host).copied().unwrap_or(false)
    }

    /// Applies one round (`roles[i]` for host `i`; missing hosts count as unreachable).
    pub fn on_round(&mut self, roles: &[HostRole]) -> Option<PrimaryMove> {
        let role = |host: usize| roles.get(host).copied().unwrap_or(HostRole::Unreachable);
        let elected_role = self.elected.map(role);
        if let Some(HostRole::ReadWrite { timeline }) = elected_role {
            self.timeline = Some(self.timeline.map_or(timeline, |seen| seen.max(timeline)));
        }
        let newest = (0..self.fenced.len())
            .filter(|host| Some(*host) != self.elected)
            .filter_map(|host| match role(host) {
                HostRole::ReadWrite { timeline } => Some((timeline, host)),
                _ => None,
            })
            // Highest timeline; on a tie the lowest index, so the choice is deterministic.
            .max_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let elected_writes = matches!(elected_role, Some(HostRole::ReadWrite { .. }));
        let takes_over = newest.filter(|(timeline, _)| match self.timeline {
            Some(seen) => *timeline > seen,
            None => !elected_writes,
        });
        let change = match (takes_over, elected_role) {
            (Some((timeline, to)), _) => {
                let from = self.elected.replace(to);
                self.timeline = Some(timeline);
                self.fenced[to] = false;
                Some(PrimaryMove::Elected { from, to, timeline })
            }
            (None, Some(HostRole::Standby)) => self
                .elected
                .take()
                .map(|from| PrimaryMove::Demoted { from }),
            (None, _) => None,
        };
        for (host, fenced) in self.fenced.iter_mut().enumerate() {
            match role(host) {
                HostRole::Standby => *fenced = false,
                HostRole::ReadWrite { .. } if Some(host) != self.elected => *fenced = true,
                _ => {}
            }
        }
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HostRole::{ReadWrite, Standby, Unreachable};

    const fn rw(timeline: u32) -> HostRole {
        ReadWrite { timeline }
    }

    /// The configured primary (host 0) on timeline 1 and two standbys, seen once.
    fn settled() -> PrimaryElection {
        let mut election = PrimaryElection::new(3, 0);
        assert_eq!(election.on_round(&[rw(1), Standby, Standby]), None);
        assert_eq!(
            (election.elected(), election.timeline()),
            (Some(0), Some(1))
        );
        election
    }

    #[test]
    fn a_healthy_primary_stays() {
        let mut election = settled();
        for _ in 0..3 {
            assert_eq!(election.on_round(&[rw(1), Standby, Standby]), None);
        }
        assert_eq!(election.elected(), Some(0));
    }

    #[test]
    fn a_primary_that_restarts_stays_primary() {
        let mut election = settled();
        assert_eq!(election.on_round(&[Unreachable, Standby, Standby]), None);
        assert_eq!(election.on_round(&[rw(1), Standby, Standby]), None);
        assert_eq!(election.elected(), Some(0));
    }

    #[test]
    fn switchover_moves_to_the_promoted_replica() {
        let mut election = settled();
        // pg_ctl promote on host 1, the old primary stopped.
        assert_eq!(
            election.on_round(&[Unreachable, rw(2), Standby]),
            Some(PrimaryMove::Elected {
                from: Some(0),
                to: 1,
                timeline: 2
            })
        );
        assert_eq!(
            (election.elected(), election.timeline()),
            (Some(1), Some(2))
        );
    }

    #[test]
    fn a_newer_timeline_wins_even_while_the_old_primary_still_writes() {
        // A partition: the old primary still answers read-write, on the old timeline.
        let mut election = settled();
        assert_eq!(
            election.on_round(&[rw(1), Standby, rw(2)]),
            Some(PrimaryMove::Elected {
                from: Some(0),
                to: 2,
                timeline: 2
            })
        );
        assert!(election.is_fenced(0));
    }

    #[test]
    fn the_old_primary_back_on_its_old_timeline_is_fenced_until_it_rejoins() {
        let mut election = settled();
        election.on_round(&[Unreachable, rw(2), Standby]);
        for _ in 0..3 {
            assert_eq!(election.on_round(&[rw(1), rw(2), Standby]), None);
            assert_eq!(election.elected(), Some(1));
            assert!(election.is_fenced(0));
        }
        // Even with the new primary unreachable, the old one gets nothing.
        assert_eq!(election.on_round(&[rw(1), Unreachable, Standby]), None);
        assert_eq!(election.elected(), Some(1));
        // Rebuilt as a standby of the new primary: no longer fenced, and a later promotion
        // of it (a newer timeline) is followed.
        election.on_round(&[Standby, rw(2), Standby]);
        assert!(!election.is_fenced(0));
        assert_eq!(
            election.on_round(&[rw(3), Unreachable, Standby]),
            Some(PrimaryMove::Elected {
                from: Some(1),
                to: 0,
                timeline: 3
            })
        );
    }

    #[test]
    fn a_stray_read_write_host_on_the_same_timeline_never_takes_over() {
        let mut election = settled();
        assert_eq!(election.on_round(&[Unreachable, rw(1), Standby]), None);
        assert_eq!(election.elected(), Some(0));
        assert!(election.is_fenced(1));
    }

    #[test]
    fn a_demoted_primary_leaves_no_primary_until_a_promotion() {
        let mut election = settled();
        assert_eq!(
            election.on_round(&[Standby, Standby, Standby]),
            Some(PrimaryMove::Demoted { from: 0 })
        );
        assert_eq!(election.elected(), None);
        // The same timeline again is no promotion.
        assert_eq!(election.on_round(&[Standby, rw(1), Standby]), None);
        assert_eq!(
            election.on_round(&[Standby, Standby, rw(2)]),
            Some(PrimaryMove::Elected {
                from: None,
                to: 2,
                timeline: 2
            })
        );
    }

    #[test]
    fn started_after_a_failover_the_promoted_host_is_found() {
        // pgtier starts with host 0 configured, but host 2 was promoted while it was down.
        let mut election = PrimaryElection::new(3, 0);
        assert_eq!(
            election.on_round(&[Unreachable, Standby, rw(2)]),
            Some(PrimaryMove::Elected {
                from: Some(0),
                to: 2,
                timeline: 2
            })
        );
        // ... and when both write, the newer timeline wins from the first round.
        let mut election = PrimaryElection::new(3, 0);
        assert_eq!(
            election.on_round(&[rw(1), Standby, rw(2)]),
            Some(PrimaryMove::Elected {
                from: Some(0),
                to: 2,
                timeline: 2
            })
        );
        assert!(election.is_fenced(0));
    }

    #[test]
    fn two_promotions_at_once_pick_the_newest_timeline() {
        let mut election = settled();
        let change = election.on_round(&[Unreachable, rw(3), rw(2)]);
        assert_eq!(
            change,
            Some(PrimaryMove::Elected {
                from: Some(0),
                to: 1,
                timeline: 3
            })
        );
        assert!(election.is_fenced(2));
    }

    #[test]
    fn a_missing_role_is_unreachable() {
        let mut election = settled();
        assert_eq!(election.on_round(&[]), None);
        assert_eq!(election.elected(), Some(0));
    }
}
