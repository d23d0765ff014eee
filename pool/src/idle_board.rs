//! Which workers hold idle servers of a pool, for a worker about to open one: PgBouncer has one
//! pool per (database, user), so a second client reuses the first one's idle server; here the
//! pool is split into one slice per worker, and a worker with none idle borrows another's
//! idle server (see `borrow.rs`) rather than connecting again. Each worker writes only its own
//! cache-line-padded count, so publishing costs one uncontended store when a server goes idle
//! or leaves the idle list; other workers read the counts only when they would open a server.

use std::sync::atomic::{AtomicU32, Ordering};

/// One worker's count, alone on its cache line.
#[repr(align(128))]
#[derive(Debug, Default)]
struct Count(AtomicU32);

/// Idle servers of one pool key per worker, shared by every worker's slice of the pool.
#[derive(Debug, Default)]
pub struct IdleBoard {
    counts: Box<[Count]>,
}

impl IdleBoard {
    /// A board for `workers` workers (0: nothing is published, nothing is ever found).
    pub fn new(workers: usize) -> IdleBoard {
        IdleBoard {
            counts: (0..workers).map(|_| Count::default()).collect(),
        }
    }

    /// Worker `worker` has one more idle server (`up`) or one fewer. Only that worker writes
    /// its count, so a load and a store suffice (no read-modify-write on a shared line).
    pub(crate) fn step(&self, worker: usize, up: bool) {
        let Some(count) = self.counts.get(worker) else {
            return;
        };
        let now = count.0.load(Ordering::Relaxed);
        let next = if up {
            now.saturating_add(1)
        } else {
            now.saturating_sub(1)
        };
        count.0.store(next, Ordering::Relaxed);
    }

    /// A worker other than `me` that holds an idle server now, the one with the most (a
    /// hint: it may have used it by the time it is asked).
    pub fn holder_besides(&self, me: usize) -> Option<usize> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(worker, _)| *worker != me)
            .map(|(worker, count)| (worker, count.0.load(Ordering::Relaxed)))
            .filter(|(_, idle)| *idle > 0)
            .max_by_key(|(_, idle)| *idle)
            .map(|(worker, _)| worker)
    }

    /// Idle servers worker `worker` published.
    pub fn idle_of(&self, worker: usize) -> u32 {
        self.counts
            .get(worker)
            .map_or(0, |count| count.0.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_another_worker_with_idle_servers() {
        let board = IdleBoard::new(3);
        assert_eq!(board.holder_besides(0), None);
        board.step(0, true);
        assert_eq!(
            board.holder_besides(0),
            None,
            "its own idle servers are not borrowed"
        );
        board.step(2, true);
        assert_eq!(board.holder_besides(0), Some(2));
        board.step(2, false);
        assert_eq!(board.holder_besides(0), None);
        board.step(2, false);
        assert_eq!(board.idle_of(2), 0, "never below zero");
    }

    #[test]
    fn a_board_without_workers_publishes_nothing() {
        let board = IdleBoard::new(0);
        board.step(0, true);
        assert_eq!(board.holder_besides(1), None);
    }

    #[test]
    fn counts_are_cache_line_padded() {
        assert_eq!(std::mem::align_of::<Count>(), 128);
    }
}
