//! pgtier's server pool, one slice per worker: exact-match keys ([`PoolKey`]), one owner per
//! server connection ([`Lease`]), most-recently-used reuse, waiters with deadlines served by
//! class ([`WaitOrder`]), the decisions of when to open and close servers, the movement of
//! budget slots between workers, and what a pool remembers of its logins (the welcome cache,
//! a login failure).
//!
//! Contract: no I/O, no clocks, no threads — every method that depends on time takes `now`,
//! and outputs are returned or pushed into caller-owned vectors. The only state shared
//! between workers is [`PoolBudget`], the cross-worker count that makes a configured pool
//! size (and `max_db_connections`, `max_user_connections`) hold across all workers; messages
//! between workers are the caller's to carry.
//!
//! Typical use by a worker:
//! 1. At login, build the [`PoolKey`] and call [`PoolSlice::register`] once (on
//!    [`PoolError::TooManyPools`], [`PoolSlice::evict_for_room`] and register again); keep
//!    the [`PoolId`]. Fail the client with [`PoolSlice::login_failure`] if there is one;
//!    welcome it from [`PoolSlice::welcome`] and [`PoolSlice::spellings`] once learned.
//! 2. Per transaction (or session): [`PoolSlice::checkout`]; on a miss,
//!    [`PoolSlice::park_as`] the client with its [`WaitClass`] and [`PoolSlice::try_open`]. A
//!    [`Refusal`] says why no slot was taken.
//! 3. On release: [`PoolSlice::checkin`] and act on the [`Checkin`] (hand off, keep, close,
//!    hand over to another worker).
//! 4. On the timer: [`PoolSlice::poll_expired`], [`PoolSlice::collect_closable`],
//!    [`PoolSlice::collect_opens`], [`PoolSlice::collect_idle_pools`].
//!
//! Between workers (the caller carries the messages): a worker whose open is refused with
//! [`Refusal::PoolFull`] asks the others when [`PoolSlice::should_ask_others`] says so; each
//! answers with [`PoolSlice::release_for`] (an idle server now, or the next one that comes
//! back, as [`Checkin::HandOver`]). A server handed over, or taken out by
//! [`PoolSlice::evict_idle_sharing`], [`PoolSlice::release_idle_sharing`] or
//! [`PoolSlice::evict_for_room`], is *leaving*: it keeps its budget slots until the caller has
//! ended it and reports [`PoolSlice::left`], so the backend is gone before its slot is used
//! again and PostgreSQL never sees more servers than a limit allows. `left` returns the
//! [`SlotGrant`] to send, if the slot goes to another worker; that one runs
//! [`PoolSlice::adopt_slot`], opens with it, and [`PoolSlice::return_unused_slots`] (or
//! [`give_back_slot`] without the pool). A slot is thus counted exactly once at all times: by
//! a server of one slice, as adopted by one slice, or by the one message carrying it.

mod borrow;
mod budget;
mod eviction;
mod handover;
mod host_turn;
mod housekeeping;
mod idle_board;
mod idle_list;
mod idle_pools;
mod key;
mod lease;
mod pool;
mod slice;
mod vacate;
mod wait_order;
mod waiters;
mod welcome;

pub use budget::{PoolBudget, fleet_share};
pub use handover::{Release, give_back_slot};
pub use host_turn::{HostBalance, HostTurn};
pub use idle_board::IdleBoard;
pub use idle_pools::FreedPool;
pub use key::{PoolKey, ServerTarget, StartupProfile};
pub use lease::{CloseReason, Lease};

pub use pool::PoolLimits;
pub use slice::{Checkin, Closing, PoolError, PoolId, PoolSlice, Refusal};
pub use wait_order::{Head, WaitClass, WaitOrder};
pub use waiters::WaitTicket;
pub use welcome::{Spellings, TrackedParams, tracked_index};

#[cfg(test)]
mod tests;
