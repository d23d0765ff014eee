//! pgtier's shared vocabulary: the configuration file, the PgBouncer-style auth file, the
//! configured service class, and the metrics every shard writes, plus the launcher of throw-away
//! local PostgreSQL servers used by the demo and the tests. Nothing here does I/O on the data
//! path; the other crates build on these types.

pub mod auth_file;
pub mod class;
pub mod config;
pub mod hba;
pub mod ident;
pub mod localpg;
pub mod metrics;
