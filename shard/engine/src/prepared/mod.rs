//! Named prepared statements in transaction mode.
//!
//! A transaction-mode client holds a server only for one transaction, but the statements it
//! prepares by name (psycopg after a query's fifth run, asyncpg and pgjdbc always,
//! `pgbench -M prepared`) must outlive it. So a client's statements belong to the client
//! ([`ClientStatements`]), each interned per worker ([`Registry`]) under one server-side
//! name, `pgtier_<id>`; each server keeps a bounded cache of the ones it holds
//! ([`ServerStatements`], `max_prepared_statements`); the client's Parse, Bind, Describe and
//! Close are rewritten to those names, and a statement is prepared on demand on whichever
//! server the client gets ([`rewrite`]). The server's answers are followed message by message
//! ([`Ledger`]), so that pgtier's own messages are answered out of sight, a failed or
//! skipped Parse is known not to exist, and errors read with the client's names
//! ([`errors`]). The outcome the client sees is what PostgreSQL itself would answer,
//! pipelines and errors in them included; `docs/compatibility.md` lists where it is not.

pub(crate) mod client_statements;
pub mod errors;
pub(crate) mod ledger;
pub mod rewrite;
pub(crate) mod server_statements;
pub(crate) mod sql_names;
pub mod statement;
pub mod unnamed;

pub use client_statements::ClientStatements;

pub(crate) use ledger::Fallout;
pub(crate) use ledger::Verdict;
pub use rewrite::Chunks;
pub(crate) use rewrite::Rewrite;
pub(crate) use rewrite::Rewriter;
pub(crate) use rewrite::ServerPrepared;
pub(crate) use rewrite::StatementCounts;
pub(crate) use rewrite::StatementLimits;
pub use statement::{Registry, Statement};
