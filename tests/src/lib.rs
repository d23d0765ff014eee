//! Harness for pgtier's black-box end-to-end tests.
//!
//! The tests treat pgtier as a user would: they start real PostgreSQL servers
//! (`pgtier_core::localpg`), write a config and a userlist, run the built binary as a child
//! process, and talk to it with real clients (psql, pgbench, rust-postgres, or raw bytes when
//! a test needs to misbehave on purpose). Nothing here knows the proxy's internals.
//!
//! Every wait is bounded: each started proxy has a watchdog that kills it when a test runs
//! past its deadline, so a client blocked on a hung proxy gets an error instead of hanging.

pub mod config;
pub mod fixtures;
pub mod process;
pub mod proxy;
pub mod rawwire;
pub mod tempdir;
pub mod wait;

pub use config::{DatabaseEntry, ProxyConfig};
pub use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions, free_port, pg_bindir};
pub use proxy::Pgtier;
pub use tempdir::TempDir;
