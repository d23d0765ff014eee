//! Active sessions per replica and class, shared by all workers. Written once at session open
//! and once at close (a session is pinned to its replica), read at every admission, so each
//! replica's pair of counters has its own cache line. A close never takes a count below zero:
//! a duplicated close (a bug) must not wrap to four billion sessions and freeze routing.

use super::padded::CachePadded;
use crate::class::ClassSetting;
use std::sync::atomic::{AtomicU32, Ordering};

/// Active sessions of one replica by class, as plain numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaLoad {
    pub premium: u32,
    pub freemium: u32,
}

impl ReplicaLoad {
    /// Sessions of `class`.
    pub fn of(&self, class: ClassSetting) -> u32 {
        match class {
            ClassSetting::Premium => self.premium,
            ClassSetting::Freemium => self.freemium,
        }
    }

    /// Sessions of both classes.
    pub fn total(&self) -> u32 {
        self.premium + self.freemium
    }
}

#[derive(Debug, Default)]
struct ClassCounts {
    premium: AtomicU32,
    freemium: AtomicU32,
}

impl ClassCounts {
    fn of(&self, class: ClassSetting) -> &AtomicU32 {
        match class {
            ClassSetting::Premium => &self.premium,
            ClassSetting::Freemium => &self.freemium,
        }
    }
}

/// Per-replica per-class session counters of one replica set.
#[derive(Debug)]
pub struct ReplicaLoadCounters {
    replicas: Box<[CachePadded<ClassCounts>]>,
}

impl ReplicaLoadCounters {
    /// Counters for `replica_count` replicas, all zero.
    pub fn new(replica_count: usize) -> ReplicaLoadCounters {
        ReplicaLoadCounters {
            replicas: (0..replica_count).map(|_| CachePadded::default()).collect(),
        }
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Whether there are no replicas.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// A session of `class` was placed on `replica`. False if the index is unknown.
    pub fn open(&self, replica: usize, class: ClassSetting) -> bool {
        let Some(counts) = self.replicas.get(replica) else {
            return false;
        };
        counts.of(class).fetch_add(1, Ordering::AcqRel);
        true
    }

    /// A session of `class` left `replica`. False if there was none to remove (or the index is
    /// unknown); the count stays at zero.
    pub fn close(&self, replica: usize, class: ClassSetting) -> bool {
        let Some(counts) = self.replicas.get(replica) else {
            return false;
        };
        counts
            .of(class)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |count| {
                count.checked_sub(1)
            })
            .is_ok()
    }

    /// The load of one replica (zero for an unknown index).
    pub fn load(&self, replica: usize) -> ReplicaLoad {
        self.replicas
            .get(replica)
            .map_or_else(ReplicaLoad::default, |counts| ReplicaLoad {
                premium: counts.premium.load(Ordering::Acquire),
                freemium: counts.freemium.load(Ordering::Acquire),
            })
    }

    /// Writes every replica's load into `out` (as many as fit), without allocating.
    pub fn snapshot_into(&self, out: &mut [ReplicaLoad]) {
        for (replica, slot) in out.iter_mut().enumerate().take(self.replicas.len()) {
            *slot = self.load(replica);
        }
    }

    /// Every replica's load.
    pub fn snapshot(&self) -> Vec<ReplicaLoad> {
        (0..self.replicas.len())
            .map(|replica| self.load(replica))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn open_close_by_class() {
        let counters = ReplicaLoadCounters::new(3);
        assert!(counters.open(1, ClassSetting::Premium));
        assert!(counters.open(1, ClassSetting::Freemium));
        assert!(counters.open(1, ClassSetting::Freemium));
        assert_eq!(
            counters.load(1),
            ReplicaLoad {
                premium: 1,
                freemium: 2
            }
        );
        assert!(counters.close(1, ClassSetting::Freemium));
        assert_eq!(counters.load(1).of(ClassSetting::Freemium), 1);
        assert_eq!(counters.load(1).total(), 2);
    }

    #[test]
    fn close_never_goes_below_zero() {
        let counters = ReplicaLoadCounters::new(1);
        assert!(!counters.close(0, ClassSetting::Premium));
        assert_eq!(counters.load(0), ReplicaLoad::default());
    }

    #[test]
    fn unknown_replica_is_refused() {
        let counters = ReplicaLoadCounters::new(1);
        assert!(!counters.open(5, ClassSetting::Premium));
        assert!(!counters.close(5, ClassSetting::Premium));
        assert_eq!(counters.load(5), ReplicaLoad::default());
    }

    #[test]
    fn snapshot_into_fills_plain_loads() {
        let counters = ReplicaLoadCounters::new(2);
        counters.open(0, ClassSetting::Premium);
        counters.open(1, ClassSetting::Freemium);
        let mut loads = [ReplicaLoad::default(); 2];
        counters.snapshot_into(&mut loads);
        assert_eq!(
            loads,
            [
                ReplicaLoad {
                    premium: 1,
                    freemium: 0
                },
                ReplicaLoad {
                    premium: 0,
                    freemium: 1
                }
            ]
        );
        assert_eq!(counters.snapshot(), loads);
    }

    #[test]
    fn balanced_open_close_under_threads_returns_to_zero() {
        let counters = Arc::new(ReplicaLoadCounters::new(4));
        let workers: Vec<_> = (0..8)
            .map(|worker| {
                let counters = Arc::clone(&counters);
                std::thread::spawn(move || {
                    let class = ClassSetting::ALL[worker % 2];
                    for round in 0..10_000 {
                        let replica = (worker + round) % 4;
                        assert!(counters.open(replica, class));
                        assert!(counters.close(replica, class));
                    }
                    counters.open(worker % 4, class);
                })
            })
            .collect();
        for worker in workers {
            worker.join().expect("worker panicked");
        }
        let total: u32 = counters.snapshot().iter().map(ReplicaLoad::total).sum();
        assert_eq!(total, 8);
    }

    #[test]
    fn replicas_sit_on_separate_cache_lines() {
        assert_eq!(std::mem::size_of::<CachePadded<ClassCounts>>(), 128);
    }
}
