//! The pgtier process: the command line ([`cli`]), and starting and stopping the proxy
//! ([`start`], [`run`]).
//!
//! The proxy is one pinned shard thread per worker, each a `pgtier_shard::Shard` ring
//! driving one `pgtier_engine::Engine`, and around them the services this crate wires in:
//! replica routing over the control plane (`pgtier_replicas`), the admin console
//! (`pgtier_console`), the metrics endpoint (`pgtier_metrics`), server name resolution off
//! the shard threads (`resolve.rs`), the OS random generator (`os_random.rs`) and the TLS
//! files (`tls_files.rs`). `proxy.rs` starts the shards and turns signals into reloads and
//! shutdowns, telling systemd of each (`sd_notify.rs`).
pub mod cli;
mod os_random;
mod proxy;
mod reconfigure;
mod resolve;
mod sd_notify;
mod tls_files;

pub use pgtier_engine::shared::StatsSnapshot;
pub use pgtier_shard::ShutdownMode;
pub use proxy::{ProxyHandle, start};

/// Runs the proxy until shutdown. `config_path` is kept for SIGHUP reloads.
pub fn run(config_path: &std::path::Path) -> Result<(), String> {
    proxy::run(config_path)
}
