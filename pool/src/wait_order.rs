//! Which parked client of a pool gets the next server. A pool's waiters stand in two lanes,
//! premium and freemium, each first come first served; this decides between the two heads.
//!
//! Under [`WaitOrder::Class`] each waiter carries a *virtual arrival*: its parking time for
//! premium, its parking time plus `aging` for freemium, and the earlier virtual arrival goes
//! first (premium on a tie). That is one FIFO in which premium clients are given a head
//! start of `aging`, which makes the bounds exact and independent of when the server comes
//! back:
//! - within a class, waiters are served in parking order;
//! - a freemium waiter parked at `t` goes before every premium waiter parked after
//!   `t + aging`, so only premium waiters parked within `aging` after it can overtake it (a
//!   freemium client waits at most `aging` longer than a premium one parked at the same
//!   moment), and once `t + aging` has passed nobody new goes ahead of it;
//! - a premium waiter is overtaken only by freemium waiters parked more than `aging` before
//!   it (under a premium overload, freemium clients still get servers, `aging` behind).
//!
//! With no premium waiter the order is plain FIFO. [`WaitOrder::Fifo`] ignores the class and
//! serves in parking order (a sequence number, so waiters parked at the same instant keep
//! their order).

use std::time::{Duration, Instant};

/// The class a client waits in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WaitClass {
    Premium,
    /// Also every session without a premium class.
    Freemium,
}

impl WaitClass {
    /// Index of the class's lane in a pool's queue.
    pub(crate) const fn lane(self) -> usize {
        match self {
            WaitClass::Premium => 0,
            WaitClass::Freemium => 1,
        }
    }
}

/// How a pool chooses among its waiters (`waiter_policy`, `waiter_aging`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitOrder {
    /// Parking order, whatever the class.
    Fifo,
    /// Premium first, with freemium waiters aged: see the module doc.
    Class { aging: Duration },
}

impl WaitOrder {
    /// `waiter_aging`'s default: see docs/reader-pool.md, "Waiting by class".
    pub(crate) const DEFAULT_AGING: Duration = Duration::from_millis(20);

    /// The class order with the default aging.
    pub const DEFAULT: WaitOrder = WaitOrder::Class {
        aging: WaitOrder::DEFAULT_AGING,
    };

    /// Of the heads of the two lanes, the class whose head goes first; None when both are
    /// empty. Public so that other models of a pool (the simulator) serve in this order.
    pub fn first(self, premium: Option<Head>, freemium: Option<Head>) -> Option<WaitClass> {
        let (premium, freemium) = match (premium, freemium) {
            (None, None) => return None,
            (Some(_), None) => return Some(WaitClass::Premium),
            (None, Some(_)) => return Some(WaitClass::Freemium),
            (Some(premium), Some(freemium)) => (premium, freemium),
        };
        let premium_first = match self {
            WaitOrder::Fifo => premium.sequence < freemium.sequence,
            // An aged arrival past Instant's range never comes: premium goes first.
            WaitOrder::Class { aging } => freemium
                .parked_at
                .checked_add(aging)
                .is_none_or(|aged| premium.parked_at <= aged),
        };
        Some(if premium_first {
            WaitClass::Premium
        } else {
            WaitClass::Freemium
        })
    }
}

impl Default for WaitOrder {
    fn default() -> WaitOrder {
        WaitOrder::DEFAULT
    }
}

/// What the order needs of a lane's oldest waiter.
#[derive(Clone, Copy, Debug)]
pub struct Head {
    /// When it parked.
    pub parked_at: Instant,
    /// Parking order across the slice.
    pub sequence: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(t0: Instant, millis: u64, sequence: u64) -> Option<Head> {
        Some(Head {
            parked_at: t0 + Duration::from_millis(millis),
            sequence,
        })
    }

    #[test]
    fn premium_goes_first_until_the_freemium_head_has_aged() {
        let t0 = Instant::now();
        let order = WaitOrder::Class {
            aging: Duration::from_millis(100),
        };
        let freemium = head(t0, 0, 1);
        assert_eq!(
            order.first(head(t0, 50, 2), freemium),
            Some(WaitClass::Premium)
        );
        assert_eq!(
            order.first(head(t0, 100, 2), freemium),
            Some(WaitClass::Premium),
            "a tie goes to premium"
        );
        assert_eq!(
            order.first(head(t0, 101, 2), freemium),
            Some(WaitClass::Freemium),
            "parked after the freemium head aged: behind it"
        );
        assert_eq!(order.first(None, freemium), Some(WaitClass::Freemium));
        assert_eq!(order.first(head(t0, 0, 1), None), Some(WaitClass::Premium));
        assert_eq!(order.first(None, None), None);
    }

    #[test]
    fn fifo_follows_the_parking_order_even_at_one_instant() {
        let t0 = Instant::now();
        assert_eq!(
            WaitOrder::Fifo.first(head(t0, 0, 2), head(t0, 0, 1)),
            Some(WaitClass::Freemium)
        );
        assert_eq!(
            WaitOrder::Fifo.first(head(t0, 0, 1), head(t0, 0, 2)),
            Some(WaitClass::Premium)
        );
    }

    #[test]
    fn an_aging_past_the_clock_range_is_strict_priority() {
        let t0 = Instant::now();
        let order = WaitOrder::Class {
            aging: Duration::MAX,
        };
        assert_eq!(
            order.first(head(t0, 1_000_000, 2), head(t0, 0, 1)),
            Some(WaitClass::Premium)
        );
    }
}
