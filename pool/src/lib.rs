//! pgtier's server pool, one slice per worker: exact-match keys ([`PoolKey`]), one owner per
//! server connection ([`Lease`]), most-recently-used reuse, FIFO waiters with deadlines, and
//! the decisions of when to open and close servers.
//!
//! Contract: no I/O, no clocks — every method that depends on time takes `now`. The only state
//! shared between workers is [`PoolBudget`], the cross-worker count that makes a configured
//! pool size hold across all workers.
//!
//! Typical use by a worker:
//! 1. At login, build the [`PoolKey`] and call [`PoolSlice::register`] once; keep the [`PoolId`].
//! 2. Per transaction (or session): [`PoolSlice::checkout`]; on a miss, [`PoolSlice::try_open`]
//!    and connect, or [`PoolSlice::park`] the client until a server comes back.
//! 3. On release: [`PoolSlice::checkin`] and act on the [`Checkin`] (hand off, keep, close).
//! 4. On the timer: [`PoolSlice::poll_expired`], [`PoolSlice::collect_closable`],
//!    [`PoolSlice::collect_opens`].

mod budget;
mod housekeeping;
mod key;
mod lease;
mod slice;
mod waiters;

pub use budget::PoolBudget;
pub use key::{PoolKey, ServerTarget, StartupProfile, TRACKED_PARAMETERS, is_tracked_parameter};
pub use lease::{CloseReason, Lease};
pub use slice::{Checkin, Closing, Expired, PoolCounts, PoolError, PoolId, PoolLimits, PoolSlice};
pub use waiters::WaitTicket;

#[cfg(test)]
mod tests;
