//! Reads in flight on the replicas of a reader entry, and the ticket that proves one read was
//! counted: incremented when a read is placed, decremented exactly once when the engine drops
//! the ticket at the end of the transaction, whatever path it ends by.
//!
//! The counters are shared by every shard; each sits alone on 128 bytes (like the session
//! counters) so reads placed on different replicas from different shards never share a line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pgtier_policy::ReplicaId;

/// One replica's counters, alone on 128 bytes. Tickets hold the replica's own `Arc`, so
/// placing a read writes only lines of that replica (its counters and its `Arc`'s count),
/// never a line every replica and shard shares.
#[repr(align(128))]
#[derive(Debug, Default)]
struct ReplicaReads {
    in_flight: AtomicU32,
    /// Totals for the console and metrics only (relaxed, not on anyone's decision path).
    reads: AtomicU64,
}

impl ReplicaReads {
    fn finish(&self) {
        if self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_err()
        {
            tracing::error!("a read ticket was released twice");
        }
    }
}

/// Per replica: reads in flight (placed, ticket not dropped) and reads ever placed.
#[derive(Debug)]
pub struct ReadCounters {
    replicas: Box<[Arc<ReplicaReads>]>,
}

impl ReadCounters {
    /// Zeroed counters for `replicas` replicas.
    pub fn new(replicas: usize) -> ReadCounters {
        ReadCounters {
            replicas: (0..replicas)
                .map(|_| Arc::new(ReplicaReads::default()))
                .collect(),
        }
    }

    /// Reads in flight on `replica` (zero for an unknown one).
    pub fn in_flight(&self, replica: ReplicaId) -> u32 {
        self.replicas
            .get(replica.index())
            .map_or(0, |c| c.in_flight.load(Ordering::Relaxed))
    }

    /// Reads ever placed on `replica`.
    pub fn reads(&self, replica: ReplicaId) -> u64 {
        self.replicas
            .get(replica.index())
            .map_or(0, |c| c.reads.load(Ordering::Relaxed))
    }

    /// Reads in flight on every replica (tests and the console look for leaks with it).
    pub fn total_in_flight(&self) -> u64 {
        self.replicas
            .iter()
            .map(|c| u64::from(c.in_flight.load(Ordering::Relaxed)))
            .sum()
    }

    /// Counts one more read on `replica` at `addr`; `None` for an unknown replica.
    pub(crate) fn start(&self, replica: ReplicaId, addr: SocketAddr) -> Option<InFlightRead> {
        let counters = self.replicas.get(replica.index())?;
        // Saturating: 4 billion reads in flight on one replica is not a state to wrap from.
        let _ = counters
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
        counters.reads.fetch_add(1, Ordering::Relaxed);
        Some(InFlightRead {
            counters: Arc::clone(counters),
            replica,
            addr,
        })
    }
}

/// One read counted in flight on one replica. Dropping it ends the count.
#[derive(Debug)]
#[must_use = "dropping the ticket ends the read's in-flight count at once"]
pub struct InFlightRead {
    counters: Arc<ReplicaReads>,
    replica: ReplicaId,
    addr: SocketAddr,
}

impl InFlightRead {
    /// The replica the read runs on.
    pub fn replica(&self) -> ReplicaId {
        self.replica
    }
}

impl pgtier_engine::services::ReadTicket for InFlightRead {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for InFlightRead {
    fn drop(&mut self) {
        self.counters.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_on_separate_cache_lines() {
        assert!(std::mem::align_of::<ReplicaReads>() >= 128);
    }

    #[test]
    fn a_ticket_counts_once_and_finish_never_goes_below_zero() {
        let counters = ReadCounters::new(2);
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        counters.replicas[0].finish();
        assert_eq!(counters.in_flight(ReplicaId(0)), 0);
        let ticket = counters.start(ReplicaId(1), addr).expect("replica 1");
        assert!(counters.start(ReplicaId(2), addr).is_none());
        let pair = |c: &ReadCounters| (c.in_flight(ReplicaId(1)), c.reads(ReplicaId(1)));
        assert_eq!(pair(&counters), (1, 1));
        drop(ticket);
        assert_eq!(pair(&counters), (0, 1));
    }
}
