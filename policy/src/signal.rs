//! What PLB counts as a replica's load: its open sessions (000's signal) or the transactions
//! in flight on it (a beyond-paper option).
//!
//! 000 counts sessions, so a session that sits idle between transactions loads its replica
//! as much as one that runs queries back to back. Under a transaction pool the proxy knows
//! which sessions are inside a transaction, and an idle one costs the replica nothing. With
//! [`LoadSignal::InFlight`] the caller passes those counts as the decision signal; the open
//! session counts still guard every rule whose safety is about *where sessions are pinned*
//! (a return needs the replica to host no session of the borrowing class, and freemium may
//! borrow only a Premium replica that hosts no premium session), because a pinned idle
//! session comes back to its replica at its next transaction.

use core::fmt;

use crate::admission::AdmitError;
use crate::replica::ReplicaLoad;

/// The load PLB decides on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LoadSignal {
    /// Open sessions pinned to the replica (000).
    #[default]
    Sessions,
    /// Transactions in flight on the replica (a pinned session between transactions counts
    /// zero).
    InFlight,
}

impl LoadSignal {
    /// Both signals, the paper's first.
    pub const ALL: [LoadSignal; 2] = [LoadSignal::Sessions, LoadSignal::InFlight];

    /// Configuration spelling: `sessions` or `in_flight`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LoadSignal::Sessions => "sessions",
            LoadSignal::InFlight => "in_flight",
        }
    }

    /// Parses the configuration spelling.
    pub fn parse(name: &str) -> Option<LoadSignal> {
        LoadSignal::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

impl fmt::Display for LoadSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The two per-replica counts one PLB decision reads, one entry per replica each: per class
/// ([`ReplicaLoad`]) for the two-class vocabulary, per rank ([`crate::tiers::TierLoad`]) for
/// the tiered one.
#[derive(Clone, Copy, Debug)]
pub struct Loads<'a, L = ReplicaLoad> {
    /// The decision signal: headroom, least-loaded choice, borrow ranking, return pressure.
    pub signal: &'a [L],
    /// Open sessions pinned to each replica: the pinning guards of returns and borrows.
    pub sessions: &'a [L],
}

impl<'a, L> Loads<'a, L> {
    /// The paper's case: sessions are both the signal and the guard.
    pub const fn sessions(sessions: &'a [L]) -> Loads<'a, L> {
        Loads {
            signal: sessions,
            sessions,
        }
    }

    /// The length of a slice that does not have one entry per replica of a
    /// `replicas`-replica table, if one does not.
    pub(crate) fn miscounted(&self, replicas: usize) -> Option<usize> {
        [self.signal.len(), self.sessions.len()]
            .into_iter()
            .find(|&len| len != replicas)
    }

    /// Both slices have one entry per replica of a `replicas`-replica table.
    pub(crate) fn check(&self, replicas: usize) -> Result<(), AdmitError> {
        match self.miscounted(replicas) {
            Some(loads) => Err(AdmitError::LoadCount { replicas, loads }),
            None => Ok(()),
        }
    }
}
