//! The proxy's server pool in front of one replica, as the simulator models it: at most
//! `size` queries hold a server (run on the replica) at once; a query that finds every server
//! busy parks in one of two lanes, premium and freemium, and takes the next server that comes
//! back. Which lane's head goes first is the proxy's own rule, `pgtier_pool::WaitOrder::first`,
//! called on simulated times mapped onto `Instant`s (a fixed base plus the time in seconds).
//!
//! This file owns the bound's parameters ([`ServerPool`]) and one replica's waiters
//! ([`WaitQueue`]); the engine decides when a query parks and when a server comes back.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use pgtier_pool::{Head, WaitClass, WaitOrder};

use super::workload::Class;

/// The server pool every replica sits behind (`default_pool_size`, `waiter_policy`,
/// `waiter_aging`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerPool {
    /// Most queries running on one replica at once (at least 1; 0 counts as 1).
    pub size: usize,
    /// Which waiter gets a server that comes back.
    pub order: WaitOrder,
}

impl ServerPool {
    /// `bench/plb-live.sh`'s `WAIT_POOL`: the +wait variants hold each replica to 2 servers.
    pub const LIVE_WAIT_SIZE: usize = 2;

    /// The live +wait variants' pool in `order` (class order: the default 20 ms aging).
    pub fn live(order: WaitOrder) -> Self {
        Self {
            size: Self::LIVE_WAIT_SIZE,
            order,
        }
    }

    /// A pool that never makes a query wait (the same as no pool at all).
    pub fn unbounded() -> Self {
        Self {
            size: usize::MAX,
            order: WaitOrder::Fifo,
        }
    }

    /// Whether one more query may run on a replica where `running` already do.
    pub fn has_room(&self, running: usize) -> bool {
        running < self.size.max(1)
    }
}

/// The lane a session's queries wait in: rank 0 is premium, every other rank freemium's (as
/// the proxy's `wait_class`).
pub fn wait_class(class: Class) -> WaitClass {
    if class == Class::PREMIUM {
        WaitClass::Premium
    } else {
        WaitClass::Freemium
    }
}

/// Simulated time `t_s` (non-negative seconds) as the `Instant` the proxy's rule compares.
fn instant_at(t_s: f64) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now) + Duration::from_secs_f64(t_s)
}

/// A query waiting for a server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Parked<T> {
    /// What the engine parked (its session and the query's demand).
    pub item: T,
    /// When it parked (simulated seconds).
    pub parked_s: f64,
    /// Parking order on this replica.
    sequence: u64,
}

impl<T> Parked<T> {
    fn head(&self) -> Head {
        Head {
            parked_at: instant_at(self.parked_s),
            sequence: self.sequence,
        }
    }
}

/// The waiters of one replica's pool: two first-come-first-served lanes.
#[derive(Debug, Clone)]
pub struct WaitQueue<T> {
    order: WaitOrder,
    /// Premium's lane, then freemium's.
    lanes: [VecDeque<Parked<T>>; 2],
    next_sequence: u64,
    /// Waiters served so far.
    served: u64,
    /// Of those, the ones served while an earlier-parked waiter of the other class waited
    /// (never under FIFO).
    out_of_order: u64,
}

const fn lane(class: WaitClass) -> usize {
    match class {
        WaitClass::Premium => 0,
        WaitClass::Freemium => 1,
    }
}

impl<T> WaitQueue<T> {
    /// No waiters, served in `order`.
    pub fn new(order: WaitOrder) -> Self {
        Self {
            order,
            lanes: [VecDeque::new(), VecDeque::new()],
            next_sequence: 0,
            served: 0,
            out_of_order: 0,
        }
    }

    /// Waiters now.
    pub fn len(&self) -> usize {
        self.lanes.iter().map(VecDeque::len).sum()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.lanes.iter().all(VecDeque::is_empty)
    }

    /// Parks `item` in `class`'s lane at `now_s` (times never go back).
    pub fn park(&mut self, item: T, class: WaitClass, now_s: f64) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.lanes[lane(class)].push_back(Parked {
            item,
            parked_s: now_s,
            sequence,
        });
    }

    /// Removes and returns the waiter a server that comes back goes to, by the proxy's rule.
    pub fn serve(&mut self) -> Option<Parked<T>> {
        let [premium, freemium] = &self.lanes;
        let first = self.order.first(
            premium.front().map(Parked::head),
            freemium.front().map(Parked::head),
        )?;
        let [chosen, other] = match first {
            WaitClass::Premium => [0, 1],
            WaitClass::Freemium => [1, 0],
        };
        let parked = self.lanes[chosen].pop_front()?;
        self.served += 1;
        if self.lanes[other]
            .front()
            .is_some_and(|head| head.sequence < parked.sequence)
        {
            self.out_of_order += 1;
        }
        Some(parked)
    }

    /// Waiters served so far, and how many of them went ahead of an earlier-parked waiter of
    /// the other class (the choices in which the order differed from arrival order).
    pub fn served(&self) -> (u64, u64) {
        (self.served, self.out_of_order)
    }

    /// Removes the first waiter matching `is` (its session went away).
    pub fn remove(&mut self, is: impl Fn(&T) -> bool) -> Option<Parked<T>> {
        self.lanes.iter_mut().find_map(|lane| {
            let at = lane.iter().position(|p| is(&p.item))?;
            lane.remove(at)
        })
    }

    /// Drops every waiter (the replica failed).
    pub fn clear(&mut self) {
        self.lanes.iter_mut().for_each(VecDeque::clear);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::rng::SimRng;

    const AGING: WaitOrder = WaitOrder::DEFAULT;

    fn drain(queue: &mut WaitQueue<&'static str>) -> Vec<&'static str> {
        std::iter::from_fn(|| queue.serve().map(|p| p.item)).collect()
    }

    #[test]
    fn the_default_class_order_ages_freemium_by_20_ms() {
        assert_eq!(
            AGING,
            WaitOrder::Class {
                aging: Duration::from_millis(20)
            }
        );
    }

    #[test]
    fn fifo_serves_in_parking_order_whatever_the_class() {
        let mut queue = WaitQueue::new(WaitOrder::Fifo);
        queue.park("f0", WaitClass::Freemium, 0.000);
        queue.park("p1", WaitClass::Premium, 0.001);
        queue.park("f2", WaitClass::Freemium, 0.001);
        queue.park("p3", WaitClass::Premium, 0.500);
        assert_eq!(queue.len(), 4);
        assert_eq!(drain(&mut queue), ["f0", "p1", "f2", "p3"]);
        assert!(queue.is_empty());
        assert_eq!(queue.served(), (4, 0));
    }

    /// The proxy's rule (pool/src/wait_order.rs) on a hand-built case, 20 ms aging: a
    /// freemium waiter parked at t goes before every premium waiter parked after t + 20 ms,
    /// premium first on a tie, and each lane in parking order.
    #[test]
    fn class_order_is_premium_first_with_freemium_aged() {
        let mut queue = WaitQueue::new(AGING);
        queue.park("f@0", WaitClass::Freemium, 0.000);
        queue.park("p@10ms", WaitClass::Premium, 0.010); // within f@0's aging: ahead of it
        queue.park("f@15ms", WaitClass::Freemium, 0.015);
        queue.park("p@20ms", WaitClass::Premium, 0.020); // a tie with f@0: premium ahead
        queue.park("p@30ms", WaitClass::Premium, 0.030); // after f@0 aged, before f@15ms did
        queue.park("p@40ms", WaitClass::Premium, 0.040); // after f@15ms aged (35 ms)
        assert_eq!(
            drain(&mut queue),
            ["p@10ms", "p@20ms", "f@0", "p@30ms", "f@15ms", "p@40ms"]
        );
        assert_eq!(
            queue.served(),
            (6, 3),
            "p@10ms, p@20ms, p@30ms overtook a freemium"
        );
    }

    /// The rule as a specification (one FIFO on virtual arrivals: parking time, plus the
    /// aging for freemium; premium first on a tie) against the queue, with parks and serves
    /// interleaved at random.
    #[test]
    fn class_order_matches_the_virtual_arrival_specification() {
        let aging_s = 0.020;
        let mut rng = SimRng::new(7);
        for _ in 0..200 {
            let mut queue = WaitQueue::new(AGING);
            let mut model: Vec<(f64, usize, u64)> = Vec::new(); // (virtual, lane, sequence)
            let mut now_s = 0.0;
            for sequence in 0..40u64 {
                now_s += rng.exponential(0.01);
                let premium = rng.bernoulli(0.4);
                let (class, virtual_s) = if premium {
                    (WaitClass::Premium, now_s)
                } else {
                    (WaitClass::Freemium, now_s + aging_s)
                };
                queue.park(sequence, class, now_s);
                model.push((virtual_s, lane(class), sequence));
                if rng.bernoulli(0.3) {
                    let expected = model
                        .iter()
                        .enumerate()
                        .min_by(|(_, a), (_, b)| {
                            a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
                        })
                        .map(|(at, _)| at);
                    let expected = expected.map(|at| model.remove(at).2);
                    assert_eq!(queue.serve().map(|p| p.item), expected);
                }
            }
        }
    }

    #[test]
    fn remove_and_clear_forget_waiters() {
        let mut queue = WaitQueue::new(AGING);
        queue.park("a", WaitClass::Premium, 0.0);
        queue.park("b", WaitClass::Freemium, 0.1);
        queue.park("c", WaitClass::Premium, 0.2);
        let removed = queue
            .remove(|&item| item == "c")
            .map(|p| (p.item, p.parked_s));
        assert_eq!(removed, Some(("c", 0.2)));
        assert!(queue.remove(|&item| item == "c").is_none());
        assert_eq!(queue.len(), 2);
        queue.clear();
        assert!(queue.serve().is_none());
    }

    #[test]
    fn the_bound_admits_up_to_its_size() {
        let pool = ServerPool::live(WaitOrder::Fifo);
        assert!(pool.has_room(0) && pool.has_room(1) && !pool.has_room(2));
        assert!(ServerPool::unbounded().has_room(1 << 40));
        let empty = ServerPool {
            size: 0,
            order: WaitOrder::Fifo,
        };
        assert!(empty.has_room(0) && !empty.has_room(1));
    }

    #[test]
    fn ranks_above_premium_wait_in_freemiums_lane() {
        assert_eq!(wait_class(Class::PREMIUM), WaitClass::Premium);
        for rank in 1..Class::MAX {
            assert_eq!(wait_class(Class(rank as u8)), WaitClass::Freemium);
        }
    }
}
