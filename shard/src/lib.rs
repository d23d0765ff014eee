//! pgtier's shard crate: the io_uring thread-per-core proxy.
//!
//! Each shard is a pinned thread with its own ring and listener (`driver.rs`), driving one
//! `pgtier_engine::Engine`, which holds every protocol decision. Around it: the services
//! the engine calls (replica routing over the control shard in `routing.rs`, the admin
//! console in `console.rs`, name resolution, the OS random generator), the control shard
//! itself (`control`), and `proxy.rs`, which starts the shards and turns signals into
//! reloads and shutdowns.
pub mod admin;
pub mod cli;
pub mod control;

mod cancel_conn;
mod conn_io;
mod console;
mod driver;
pub mod io;
pub mod listen;
mod mailbox;
pub mod metrics;
mod os_random;
mod proxy;
mod resolve;
mod routing;
#[cfg(test)]
mod routing_tests;
pub mod tls_files;
#[cfg(test)]
mod trap_tests;

pub use mailbox::ShutdownMode;
pub use pgtier_engine::shared::StatsSnapshot;
pub use proxy::{ProxyHandle, start};

/// Runs the proxy until shutdown. `config_path` is kept for SIGHUP reloads.
pub fn run(config_path: &std::path::Path) -> Result<(), String> {
    proxy::run(config_path)
}
