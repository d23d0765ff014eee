//! pgtier-engine: the session engine of one shard, sans I/O.
//!
//! # Contract
//! - **No sockets, no clocks, no threads.** The engine is driven by events, each carrying
//!   `now`: a client connected, bytes arrived, bytes were sent, a connect finished, a
//!   connection ended, a timer fired, another shard sent a command. It answers with
//!   [`Action`]s its driver drains with [`Engine::poll_action`] — send these `Bytes` on that
//!   connection, connect there, close this one, pause or resume a receive, send a cancel,
//!   post to a shard — and says with [`Engine::poll_timeout`] when to wake it next.
//! - **The driver decides nothing.** Which server a client gets, when a server is released,
//!   reset or closed, what a client is told: all here. The driver only turns actions into
//!   ring operations and completions into events.
//! - **Randomness, name resolution, replica routing and the admin console are services**
//!   the driver provides ([`Random`], [`Resolver`], [`Routing`], [`Console`]); tests and the
//!   fuzz target use deterministic ones.
//! - **Hostile input is an answer, never a panic.** Every client gets what PostgreSQL would
//!   send it: a result, an ErrorResponse with a SQLSTATE, or a close.
//!
//! # Owners
//! - [`client`]: one client's state enum and its startup, password exchange and
//!   forwarding; [`server`]: one server's state enum, its login, its output walk and how it
//!   leaves a client ([`server::release`]).
//! - [`pgtier_pool::PoolSlice`]: the shard's pools, waiters and cross-shard budgets.
//! - [`prepared`]: a transaction-mode client's named statements, carried between servers.
//! - [`cancel`]: cancel keys; [`credentials`]: what the auth file's entries prove.
//! - [`engine`]: the coordinator, which owns the slabs and links clients with servers.
//!
//! The life of one query, hop by hop, is in the repository's `docs/architecture.md`.

pub mod action;
pub mod addr;
pub mod auto_databases;
pub mod cancel;
pub mod class;
pub mod client;
pub mod client_counts;
pub mod command;
pub(crate) mod console_session;
pub mod credentials;
pub mod digests;
pub mod engine;
pub mod gates;
pub mod ids;
pub mod inbox;
pub mod listing;
pub mod log_lines;
pub(crate) mod login_options;
pub mod messages;
pub mod names;
mod nul;
pub mod params;
pub mod pool_gauges;
pub mod prepared;
pub mod random;
pub(crate) mod read_functions;
pub mod reconfigure;
pub mod server;
pub mod services;
pub mod settings;
pub mod shared;
mod take;
pub mod tls;
pub mod tracker;
pub mod userlist;

#[cfg(test)]
mod test_support;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use action::{Action, CloseHow, Conn};
pub use addr::{ClientAddr, ServerAddr};
pub use command::Command;
pub use engine::{Engine, EngineParts, IpOnly, Resolver};
pub use gates::{PauseSignal, ShutdownMode};
pub use ids::{ClientId, ServerId, SlotRef, SocketId};
pub use random::{Random, RandomUnavailable};
pub use server::moved::DetachedSocket;
pub use server::moved::MovedServer;
pub use services::{Console, ConsoleRequest, ConsoleRights, Routing, StatementAnswer};
pub use shared::Shared;
