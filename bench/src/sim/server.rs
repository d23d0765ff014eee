//! One replica as an egalitarian processor-sharing server with `cores` cores.
//!
//! With `n` queries running, each progresses at `min(parallelism, cores / n)` core-seconds
//! per second: a query uses at most `parallelism` cores (PostgreSQL's leader plus parallel
//! workers), and an overloaded replica shares its cores equally. The
//! server tracks the service every running query has received so far as one number
//! (`attained_s`, identical for all of them), so arrivals and completions cost O(log n).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Index of a query in the engine's query table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueryId(pub u32);

/// A processor-sharing replica.
#[derive(Debug, Clone)]
pub struct PsServer {
    cores: f64,
    /// Most cores one query can use at once.
    parallelism: f64,
    /// Service received by every running query since the server started, in core-seconds.
    attained_s: f64,
    /// Simulated time up to which `attained_s` and `busy_core_s` are accounted.
    accounted_until_s: f64,
    /// Integral of busy cores over time (core-seconds), for CPU utilisation.
    busy_core_s: f64,
    /// Running queries keyed by the value of `attained_s` at which they finish.
    running: BinaryHeap<Reverse<(OrdF64, QueryId)>>,
    /// Bumped on every change of the running set; completion events carry it so that a
    /// completion computed for an older running set is recognised as stale.
    generation: u64,
}

/// An `f64` with a total order, for heap keys (never NaN in this simulator).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OrdF64(pub f64);

impl Eq for OrdF64 {}

impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF64 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PsServer {
    /// An idle server with `cores` cores on which one query uses at most one core.
    pub fn new(cores: f64) -> Self {
        Self::with_parallelism(cores, 1.0)
    }

    /// An idle server with `cores` cores on which one query uses at most `parallelism` cores
    /// (both must be positive).
    pub fn with_parallelism(cores: f64, parallelism: f64) -> Self {
        assert!(cores > 0.0, "a replica needs at least some cores");
        assert!(parallelism > 0.0, "a query needs at least some of a core");
        Self {
            cores,
            parallelism,
            attained_s: 0.0,
            accounted_until_s: 0.0,
            busy_core_s: 0.0,
            running: BinaryHeap::new(),
            generation: 0,
        }
    }

    /// Number of queries running now.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// The current generation (see the field's doc).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Integral of busy cores up to the last `advance` (core-seconds).
    pub fn busy_core_s(&self) -> f64 {
        self.busy_core_s
    }

    /// Number of cores.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// Per-query progress rate with the current running set.
    fn rate(&self) -> f64 {
        let n = self.running.len() as f64;
        if n == 0.0 {
            0.0
        } else {
            (self.cores / n).min(self.parallelism)
        }
    }

    /// Accounts service and busy cores up to `now_s`.
    pub fn advance(&mut self, now_s: f64) {
        let dt = now_s - self.accounted_until_s;
        debug_assert!(dt >= -1e-9, "time went backwards by {dt}");
        if dt > 0.0 {
            self.attained_s += self.rate() * dt;
            self.busy_core_s += (self.running.len() as f64 * self.rate()).min(self.cores) * dt;
            self.accounted_until_s = now_s;
        }
    }

    /// Starts a query needing `demand_s` core-seconds at `now_s`.
    pub fn start(&mut self, query: QueryId, demand_s: f64, now_s: f64) {
        self.advance(now_s);
        let finish = OrdF64(self.attained_s + demand_s.max(0.0));
        self.running.push(Reverse((finish, query)));
        self.generation += 1;
    }

    /// When the next running query finishes if nothing else changes, or None when idle.
    pub fn next_completion_s(&self) -> Option<f64> {
        let Reverse((finish, _)) = self.running.peek()?;
        let remaining = (finish.0 - self.attained_s).max(0.0);
        Some(self.accounted_until_s + remaining / self.rate())
    }

    /// Removes and returns the query finishing first; call at its completion time.
    pub fn complete_next(&mut self, now_s: f64) -> Option<QueryId> {
        self.advance(now_s);
        let Reverse((_, query)) = self.running.pop()?;
        self.generation += 1;
        Some(query)
    }

    /// Removes one running query (its session went away); O(n), used rarely.
    pub fn remove(&mut self, query: QueryId, now_s: f64) -> bool {
        self.advance(now_s);
        let before = self.running.len();
        let kept: Vec<_> = self
            .running
            .drain()
            .filter(|Reverse((_, q))| *q != query)
            .collect();
        self.running = kept.into();
        self.generation += 1;
        self.running.len() != before
    }

    /// Aborts every running query (the replica failed); returns them.
    pub fn abort_all(&mut self, now_s: f64) -> Vec<QueryId> {
        self.advance(now_s);
        self.generation += 1;
        self.running.drain().map(|Reverse((_, q))| q).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// Two cores, three queries of demands 1, 2, 4 started together at t=0.
    /// Rate 2/3 each until the first finishes at attained 1 (t=1.5); then two queries at
    /// rate 1: the second finishes at attained 2 (t=2.5), the last at attained 4 (t=4.5).
    #[test]
    fn processor_sharing_matches_hand_computation() {
        let mut s = PsServer::new(2.0);
        s.start(QueryId(0), 1.0, 0.0);
        s.start(QueryId(1), 2.0, 0.0);
        s.start(QueryId(2), 4.0, 0.0);
        let expected = [(0, 1.5), (1, 2.5), (2, 4.5)];
        for (id, t) in expected {
            let next = s.next_completion_s().unwrap();
            assert!(close(next, t), "query {id}: {next} vs {t}");
            assert_eq!(s.complete_next(next), Some(QueryId(id)));
        }
        assert_eq!(s.next_completion_s(), None);
        // Busy cores: 2 cores for 2.5 s, then 1 core for 2 s.
        assert!(close(s.busy_core_s(), 2.0 * 2.5 + 2.0));
    }

    /// A late arrival slows down the running query: one core, query A (demand 2) at t=0,
    /// query B (demand 1) at t=1. A has 1 left at t=1; both run at rate 1/2, so B finishes
    /// at t=3 and A (1 - 1 = 0 left then) also at t=3; ties resolve by id.
    #[test]
    fn late_arrival_shares_the_core() {
        let mut s = PsServer::new(1.0);
        s.start(QueryId(0), 2.0, 0.0);
        s.start(QueryId(1), 1.0, 1.0);
        let t = s.next_completion_s().unwrap();
        assert!(close(t, 3.0), "{t}");
        assert_eq!(s.complete_next(t), Some(QueryId(0)));
        let t = s.next_completion_s().unwrap();
        assert!(close(t, 3.0), "{t}");
        assert_eq!(s.complete_next(t), Some(QueryId(1)));
    }

    #[test]
    fn underloaded_queries_run_at_full_speed() {
        let mut s = PsServer::new(4.0);
        s.start(QueryId(0), 3.0, 10.0);
        s.start(QueryId(1), 5.0, 10.0);
        assert!(close(s.next_completion_s().unwrap(), 13.0));
        s.complete_next(13.0);
        assert!(close(s.next_completion_s().unwrap(), 15.0));
    }

    /// Parallel queries: 6 cores, at most 2 per query. Two queries run at rate 2; a third
    /// and fourth bring the rate down to 6/4 = 1.5.
    #[test]
    fn parallel_queries_use_several_cores_until_the_replica_is_full() {
        let mut s = PsServer::with_parallelism(6.0, 2.0);
        s.start(QueryId(0), 4.0, 0.0);
        s.start(QueryId(1), 4.0, 0.0);
        assert!(close(s.next_completion_s().unwrap(), 2.0));
        s.start(QueryId(2), 3.0, 1.0);
        s.start(QueryId(3), 3.0, 1.0);
        // At t=1 queries 0 and 1 have 2 left, 2 and 3 have 3 left; all run at 1.5.
        let t = s.next_completion_s().unwrap();
        assert!(close(t, 1.0 + 2.0 / 1.5), "{t}");
        s.advance(2.0);
        // Busy: 4 cores for 1 s, then 6 cores for 1 s.
        assert!(close(s.busy_core_s(), 4.0 + 6.0));
    }

    #[test]
    fn abort_returns_all_and_bumps_generation() {
        let mut s = PsServer::new(1.0);
        s.start(QueryId(3), 1.0, 0.0);
        s.start(QueryId(4), 1.0, 0.0);
        let g = s.generation();
        let mut lost = s.abort_all(0.5);
        lost.sort();
        assert_eq!(lost, vec![QueryId(3), QueryId(4)]);
        assert!(s.generation() > g);
        assert_eq!(s.running(), 0);
    }
}
