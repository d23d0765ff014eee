//! Deadlines for the shard loop: a min-heap of (instant, event). Stale entries are not
//! removed; the handler checks whether the event still applies when it fires.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

pub struct Timers<E: Ord> {
    heap: BinaryHeap<Reverse<(Instant, E)>>,
}

impl<E: Ord> Default for Timers<E> {
    fn default() -> Self {
        Timers {
            heap: BinaryHeap::new(),
        }
    }
}

impl<E: Ord> Timers<E> {
    pub fn schedule(&mut self, at: Instant, event: E) {
        self.heap.push(Reverse((at, event)));
    }

    /// How long the loop may sleep before the next deadline.
    pub fn next_timeout(&self, now: Instant) -> Option<Duration> {
        self.heap
            .peek()
            .map(|Reverse((at, _))| at.saturating_duration_since(now))
    }

    /// The next event due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<E> {
        match self.heap.peek() {
            Some(Reverse((at, _))) if *at <= now => self.heap.pop().map(|Reverse((_, e))| e),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_deadline_order() {
        let mut timers = Timers::default();
        let now = Instant::now();
        timers.schedule(now + Duration::from_millis(20), 2);
        timers.schedule(now + Duration::from_millis(10), 1);
        assert_eq!(timers.pop_due(now), None);
        assert_eq!(timers.next_timeout(now), Some(Duration::from_millis(10)));
        let later = now + Duration::from_millis(25);
        assert_eq!(timers.pop_due(later), Some(1));
        assert_eq!(timers.pop_due(later), Some(2));
        assert_eq!(timers.pop_due(later), None);
    }
}
