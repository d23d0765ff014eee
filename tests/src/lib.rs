//! Harness for pgtier's black-box end-to-end tests.
//!
//! The tests treat pgtier as a user would: they start real PostgreSQL servers
//! (`pgtier_core::localpg`), write a config and a userlist, run the built binary as a child
//! process, and talk to it with real clients (psql, pgbench, rust-postgres, or raw bytes when
//! a test needs to misbehave on purpose). Nothing here knows the proxy's internals.
//!
//! Every wait is bounded: each started proxy has a watchdog that kills it when a test runs
//! past its deadline, so a client blocked on a hung proxy gets an error instead of hanging.
//!
//! Run: `cargo test -p pgtier-tests -- --test-threads=2`, as root (servers then run as the
//! `postgres` user) or as a user that may run initdb; PostgreSQL's server binaries, psql and
//! pgbench must be installed (`scripts/install-deps.sh`). The proxy binary is built by that
//! same command (see `proxy`); `PGTIER_BIN` tests another one. A failing test prints the
//! last lines of the proxy's log.

pub mod config;
pub mod differential;
pub mod faults;
pub mod fixtures;
pub mod hostile;
pub mod netns;
pub mod pki;
pub mod process;
pub mod protofuzz;
pub mod proxy;
pub mod rawwire;
pub mod shared_server;
pub mod soak;
pub mod tempdir;
pub mod wait;

pub use config::{DatabaseEntry, ProxyConfig};
pub use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions, PgTls, free_port, pg_bindir};
pub use proxy::Pgtier;
pub use tempdir::TempDir;
