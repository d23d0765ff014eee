//! Parked clients: per pool a [`Queue`] of two FIFO lanes (premium, freemium; the pool's
//! [`WaitOrder`] picks between their heads) and, threaded through the same nodes, one list of
//! every waiter with a deadline in parking order. Nodes live in a slab with an intrusive free
//! list, so park, pop, cancel and expiry are O(1) and allocate nothing once the slab has grown
//! to the peak number of waiters.
//!
//! Expiry reads the head of the deadline list. That is exact while every waiter gets
//! `now + query_wait_timeout` with one timeout; after a reload shortens the timeout, a newer
//! waiter can expire later than its deadline by at most the old timeout.

use crate::wait_order::{Head, WaitClass, WaitOrder};
use std::time::Instant;

const NIL: u32 = u32::MAX;

/// Handle of a parked waiter, for cancelling it (client disconnected). Stale after the waiter
/// left the queue; using a stale ticket is harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WaitTicket {
    slot: u32,
    generation: u32,
}

/// A waiter taken out of the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Unparked<W> {
    pub waiter: W,
    /// Index of its pool in the slice.
    pub(crate) pool: u32,
    /// When it was parked.
    pub parked_at: Instant,
}

/// Ends of one doubly-linked list of slab slots.
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    pub(crate) const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        len: 0,
    };

    pub(crate) fn len(&self) -> u32 {
        self.len
    }
}

/// One pool's waiters: a FIFO lane per [`WaitClass`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Queue {
    lanes: [List; 2],
}

impl Queue {
    pub(crate) const EMPTY: Queue = Queue {
        lanes: [List::EMPTY; 2],
    };

    /// Waiters of both lanes.
    pub(crate) fn len(&self) -> u32 {
        self.lanes.iter().map(List::len).sum()
    }
}

#[derive(Debug)]
struct Parked<W> {
    waiter: W,
    pool: u32,
    class: WaitClass,
    parked_at: Instant,
    /// Parking order across the slice, for [`WaitOrder::Fifo`].
    sequence: u64,
    deadline: Option<Instant>,
    /// Neighbours in its lane of the pool's queue.
    prev: u32,
    next: u32,
    /// Neighbours in the deadline list (NIL when there is no deadline).
    deadline_prev: u32,
    deadline_next: u32,
}

#[derive(Debug)]
struct Node<W> {
    generation: u32,
    parked: Option<Parked<W>>,
    next_free: u32,
}

/// The slab of waiter nodes and the deadline list.
#[derive(Debug)]
pub(crate) struct Waiters<W> {
    nodes: Vec<Node<W>>,
    free_head: u32,
    by_deadline: List,
    /// The sequence number of the next park.
    next_sequence: u64,
}

impl<W: Copy> Waiters<W> {
    pub(crate) fn new() -> Waiters<W> {
        Waiters {
            nodes: Vec::new(),
            free_head: NIL,
            by_deadline: List::EMPTY,
            next_sequence: 0,
        }
    }

    /// Appends a waiter to its class's lane of `queue` (the queue of pool `pool`).
    pub(crate) fn park(
        &mut self,
        queue: &mut Queue,
        pool: u32,
        waiter: W,
        class: WaitClass,
        parked_at: Instant,
        deadline: Option<Instant>,
    ) -> WaitTicket {
        let slot = self.allocate();
        let fifo = &mut queue.lanes[class.lane()];
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        let parked = Parked {
            waiter,
            pool,
            class,
            parked_at,
            sequence,
            deadline,
            prev: fifo.tail,
            next: NIL,
            deadline_prev: NIL,
            deadline_next: NIL,
        };
        self.nodes[slot as usize].parked = Some(parked);
        self.link_fifo_tail(fifo, slot);
        if deadline.is_some() {
            self.link_deadline_tail(slot);
        }
        WaitTicket {
            slot,
            generation: self.nodes[slot as usize].generation,
        }
    }

    /// Removes and returns the waiter of `queue` that `order` serves first.
    pub(crate) fn pop_next(&mut self, queue: &mut Queue, order: WaitOrder) -> Option<Unparked<W>> {
        let class = order.first(
            self.head(&queue.lanes[WaitClass::Premium.lane()]),
            self.head(&queue.lanes[WaitClass::Freemium.lane()]),
        )?;
        let slot = queue.lanes[class.lane()].head;
        Some(self.unlink(queue, slot))
    }

    /// When the longest-waiting client of `queue`, of either class, was parked.
    pub(crate) fn oldest_parked_at(&self, queue: &Queue) -> Option<Instant> {
        queue
            .lanes
            .iter()
            .filter_map(|lane| self.head(lane))
            .map(|head| head.parked_at)
            .min()
    }

    /// The pool of the waiter behind `ticket`, if it is still parked.
    pub(crate) fn pool_of(&self, ticket: WaitTicket) -> Option<u32> {
        let node = self.nodes.get(ticket.slot as usize)?;
        if node.generation != ticket.generation {
            return None;
        }
        node.parked.as_ref().map(|parked| parked.pool)
    }

    /// Removes the waiter behind `ticket` from `queue` (its pool's queue).
    pub(crate) fn cancel(&mut self, queue: &mut Queue, ticket: WaitTicket) -> Option<W> {
        self.pool_of(ticket)?;
        Some(self.unlink(queue, ticket.slot).waiter)
    }

    /// The earliest deadline and the pool of its waiter.
    pub(crate) fn earliest_deadline(&self) -> Option<(Instant, u32)> {
        let parked = self.parked(self.by_deadline.head)?;
        parked.deadline.map(|deadline| (deadline, parked.pool))
    }

    /// Removes the waiter with the earliest deadline if it is due at `now`. The caller passes
    /// the queue of the pool named by [`Waiters::earliest_deadline`].
    pub(crate) fn pop_expired(&mut self, queue: &mut Queue, now: Instant) -> Option<Unparked<W>> {
        let slot = self.by_deadline.head;
        let deadline = self.parked(slot)?.deadline?;
        (deadline <= now).then(|| self.unlink(queue, slot))
    }

    /// The oldest waiter of a lane.
    fn head(&self, lane: &List) -> Option<Head> {
        self.parked(lane.head).map(|parked| Head {
            parked_at: parked.parked_at,
            sequence: parked.sequence,
        })
    }

    fn parked(&self, slot: u32) -> Option<&Parked<W>> {
        self.nodes.get(slot as usize)?.parked.as_ref()
    }

    fn parked_mut(&mut self, slot: u32) -> Option<&mut Parked<W>> {
        self.nodes.get_mut(slot as usize)?.parked.as_mut()
    }

    fn allocate(&mut self) -> u32 {
        if self.free_head != NIL {
            let slot = self.free_head;
            self.free_head = self.nodes[slot as usize].next_free;
            return slot;
        }
        let slot = u32::try_from(self.nodes.len()).unwrap_or(NIL - 1);
        self.nodes.push(Node {
            generation: 0,
            parked: None,
            next_free: NIL,
        });
        slot
    }

    fn link_fifo_tail(&mut self, fifo: &mut List, slot: u32) {
        match self.parked_mut(fifo.tail) {
            Some(tail) => tail.next = slot,
            None => fifo.head = slot,
        }
        fifo.tail = slot;
        fifo.len += 1;
    }

    fn link_deadline_tail(&mut self, slot: u32) {
        let tail = self.by_deadline.tail;
        if let Some(parked) = self.parked_mut(slot) {
            parked.deadline_prev = tail;
        }
        match self.parked_mut(tail) {
            Some(tail) => tail.deadline_next = slot,
            None => self.by_deadline.head = slot,
        }
        self.by_deadline.tail = slot;
        self.by_deadline.len += 1;
    }

    /// Takes `slot` out of its lane of `queue` and of the deadline list, and frees it.
    fn unlink(&mut self, queue: &mut Queue, slot: u32) -> Unparked<W> {
        let node = &mut self.nodes[slot as usize];
        let Some(parked) = node.parked.take() else {
            unreachable!("unlink of a free waiter slot");
        };
        node.generation = node.generation.wrapping_add(1);
        node.next_free = self.free_head;
        self.free_head = slot;
        self.relink(
            &mut queue.lanes[parked.class.lane()],
            parked.prev,
            parked.next,
            |p| &mut p.next,
            |p| &mut p.prev,
        );
        if parked.deadline.is_some() {
            let mut list = self.by_deadline;
            self.relink(
                &mut list,
                parked.deadline_prev,
                parked.deadline_next,
                |p| &mut p.deadline_next,
                |p| &mut p.deadline_prev,
            );
            self.by_deadline = list;
        }
        Unparked {
            waiter: parked.waiter,
            pool: parked.pool,
            parked_at: parked.parked_at,
        }
    }

    /// Joins `prev` and `next` around a removed node of `list`.
    fn relink(
        &mut self,
        list: &mut List,
        prev: u32,
        next: u32,
        next_of: fn(&mut Parked<W>) -> &mut u32,
        prev_of: fn(&mut Parked<W>) -> &mut u32,
    ) {
        match self.parked_mut(prev) {
            Some(node) => *next_of(node) = next,
            None => list.head = next,
        }
        match self.parked_mut(next) {
            Some(node) => *prev_of(node) = prev,
            None => list.tail = prev,
        }
        list.len -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_slab_stops_growing_at_the_peak_number_of_waiters() {
        let t0 = Instant::now();
        let mut waiters: Waiters<u32> = Waiters::new();
        let mut queue = Queue::EMPTY;
        let classes = [WaitClass::Premium, WaitClass::Freemium];
        for round in 0..100u32 {
            let now = t0 + Duration::from_millis(u64::from(round));
            for waiter in 0..4 {
                let class = classes[(waiter + round) as usize % 2];
                waiters.park(&mut queue, 0, waiter, class, now, Some(now));
            }
            assert_eq!(queue.len(), 4);
            waiters.pop_next(&mut queue, WaitOrder::DEFAULT);
            waiters.pop_expired(&mut queue, now);
            while waiters.pop_next(&mut queue, WaitOrder::Fifo).is_some() {}
            assert_eq!(queue.len(), 0);
            assert_eq!(waiters.by_deadline.len(), 0);
        }
        assert_eq!(waiters.nodes.len(), 4, "freed nodes are reused");
    }
}
