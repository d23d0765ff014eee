//! pgtier's ring driver: one shard's io_uring loop.
//!
//! Each shard is a pinned thread with its own ring and listeners ([`Shard`], `driver.rs`),
//! driving one `pgtier_engine::Engine`, which holds every protocol decision. What is here is
//! only how the ring is used: the ring itself and its bookkeeping (`io/`), each connection's
//! buffers and teardown (`conn_io.rs`), the one-shot cancel connections (`cancel_conn.rs`),
//! the listening sockets ([`listen`]) and the queue other threads post to a shard through
//! ([`Mailbox`]). The services the engine calls (replica routing, the console, name
//! resolution, randomness) are handed in with the engine by the process that starts the
//! shards (the `pgtier` crate); this crate knows none of them.
mod cancel_conn;
mod conn_io;
mod driver;
mod io;
pub mod listen;
mod mailbox;
mod sockets;
#[cfg(test)]
mod trap_tests;

pub use driver::{Shard, ShardParts};
pub use io::ring::Ring;
pub use io::uring::{RecvBuffers, RingFlavor, UringRing};
pub use mailbox::{Command, Mailbox, PauseSignal, ShutdownMode};
pub use sockets::peer_credentials;
