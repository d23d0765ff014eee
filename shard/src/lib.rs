//! pgtier's shard crate: the io_uring thread-per-core proxy.
//!
//! Each shard is a pinned thread with its own ring, listener, clients and pool slices
//! (`shard.rs`); `proxy.rs` starts them and turns signals into reloads and shutdowns.
pub mod admin;
pub mod cli;
pub mod control;

mod admin_listing;
mod admin_session;
mod auth;
mod backend;
mod cancel;
mod client;
mod housekeeping;
pub mod io;
mod login;
mod mailbox;
mod params;
mod pool;
mod pooling;
mod proto;
mod proxy;
mod relay;
mod routing;
#[cfg(test)]
mod routing_tests;
mod server;
mod server_caps;
mod server_check;
mod session;
mod shard;
mod stats;
mod tracker;
#[cfg(test)]
mod trap_tests;
mod userlist;
mod welcome;

pub use mailbox::ShutdownMode;
pub use proxy::{ProxyHandle, start};
pub use stats::StatsSnapshot;

/// Runs the proxy until shutdown. `config_path` is kept for SIGHUP reloads.
pub fn run(config_path: &std::path::Path) -> Result<(), String> {
    proxy::run(config_path)
}
