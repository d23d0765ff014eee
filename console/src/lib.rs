//! pgtier's admin console: answers to queries on the virtual database `pgtier` (alias
//! `pgbouncer`), in PgBouncer's shapes, and [`ShardConsole`], the engine's `Console` service
//! that serves them on each shard.
//!
//! It is a pure function from the query text, the user's rights and a read-only
//! [`AdminView`] (the routers, their health and event logs, the traffic statistics, the
//! configuration and every shard's connection rows) to protocol messages. Simple queries go
//! through [`answer`] (the session sends ReadyForQuery itself); one extended-protocol
//! statement goes through [`answer_statement`], split into its RowDescription and the rest.
//! The answers do no I/O and change no state, so the console cannot disturb routing;
//! process-controlling commands (`operations.rs`) become requests the engine runs, and RELOAD
//! raises a flag the process's main thread reads.

mod command;
mod fleet;
mod format;
mod listing;
mod operations;
mod queries;
mod result;
mod rights;
mod service;
mod show;
mod stats;

use std::sync::Arc;

use bytes::BytesMut;
use pgtier_core::config::Config;
use pgtier_core::metrics::{DatabaseStats, TotalsSnapshot};
use pgtier_engine::{ConsoleRights, StatementAnswer};
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::EmptyQueryResponse;
use pgtier_wire::sqlstate;

use command::{AdminCommand, CommandError};
use listing::Listing;
use pgtier_replicas::router::ReplicaRouter;

/// The `version` row of `SHOW VERSION`.
pub const VERSION: &str = concat!("pgtier ", env!("CARGO_PKG_VERSION"));

pub use pgtier_engine::shared::IntervalStats;
pub use queries::query_id_label;
pub use service::ShardConsole;

/// Per-class traffic statistics for `SHOW CLASS_STATS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsView {
    /// Totals since start.
    pub totals: TotalsSnapshot,
    /// The last completed interval, once one has completed.
    pub interval: Option<IntervalStats>,
}

/// The pooler's own state, for `SHOW STATE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolerState {
    pub paused: bool,
    pub suspended: bool,
}

/// Everything the console reads.
#[derive(Clone, Copy, Debug)]
pub struct AdminView<'a> {
    /// Every replica router once.
    pub routers: &'a [Arc<ReplicaRouter>],
    /// The read sides of reader entries (each over one of `routers`).
    pub readers: &'a [Arc<pgtier_replicas::ReadRouter>],
    /// Traffic statistics, if the caller keeps them.
    pub stats: Option<&'a StatsView>,
    /// Text of `SHOW VERSION` (normally [`VERSION`]).
    pub version: &'a str,
    /// Client, server and pool rows gathered from every shard (`None`: the commands that
    /// read them answer with no rows).
    pub listing: Option<&'a Listing>,
    /// Per-database totals and averages, for `SHOW STATS` and its family.
    pub databases: &'a [DatabaseStats],
    /// The query digests, for `SHOW QUERIES` (`None`: no rows).
    pub digests: Option<&'a pgtier_core::metrics::DigestStore>,
    /// The running configuration (`None`: `SHOW CONFIG`/`DATABASES`/`USERS` have no rows).
    pub config: Option<&'a Config>,
    pub state: PoolerState,
    /// What PAUSE, KILL and DISABLE hold (`None`: nothing is paused or disabled).
    pub gates: Option<&'a pgtier_engine::gates::Gates>,
    /// The fleet as this host last saw it, for `SHOW FLEET` (`None`: no rows).
    pub fleet: Option<&'a pgtier_replicas::FleetView>,
}

/// What [`answer`] produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerSummary {
    /// Result sets written.
    pub results: usize,
    /// True when an ErrorResponse was written (the rest of the query string was skipped).
    pub failed: bool,
}

/// The command `statement` names, if `rights` may run it.
fn command_of(statement: &str, rights: ConsoleRights) -> Result<AdminCommand, CommandError> {
    rights::authorize(statement, command::parse(statement), rights)
}

/// Answers one simple-query string: for each `;`-separated statement a RowDescription,
/// DataRows and CommandComplete, stopping at the first ErrorResponse as PostgreSQL does; an
/// empty string gets EmptyQueryResponse. The caller appends ReadyForQuery.
pub fn answer(
    query: &str,
    rights: ConsoleRights,
    view: &AdminView<'_>,
    out: &mut BytesMut,
) -> AnswerSummary {
    let mut summary = AnswerSummary::default();
    for statement in command::statements(query) {
        match command_of(statement, rights) {
            Ok(command) => {
                if command.needs_listing() {
                    encode_missing_notice(view.listing, out);
                }
                let set = show::result_set(command, view);
                let formats = vec![0; set.columns.len()];
                result::encode_header(out, &set.columns, &formats);
                for row in &set.rows {
                    result::encode_row(out, &set.columns, &formats, row);
                }
                result::encode_complete(out);
                summary.results += 1;
            }
            Err(error) => {
                encode_command_error(&error, out);
                summary.failed = true;
                return summary;
            }
        }
    }
    if summary.results == 0 {
        EmptyQueryResponse.encode(out);
    }
    summary
}

/// Answers one extended-protocol statement (no `;`-separated list) with Bind's result
/// `formats`: the RowDescription apart from the rows, as Describe and Execute need them.
pub fn answer_statement(
    query: &str,
    rights: ConsoleRights,
    formats: &[i16],
    view: &AdminView<'_>,
) -> StatementAnswer {
    let mut answer = StatementAnswer::default();
    let Some(statement) = command::statements(query).next() else {
        EmptyQueryResponse.encode(&mut answer.body);
        return answer;
    };
    let command = match command_of(statement, rights) {
        Ok(command) => command,
        Err(error) => {
            encode_command_error(&error, &mut answer.body);
            answer.failed = true;
            return answer;
        }
    };
    let set = show::result_set(command, view);
    let Some(formats) = result::resolve_formats(formats, set.columns.len()) else {
        let message = format!(
            "bind message has {} result formats but query has {} columns",
            formats.len(),
            set.columns.len()
        );
        ErrorNotice::new(Severity::Error, sqlstate::PROTOCOL_VIOLATION, &message)
            .encode_error(&mut answer.body);
        answer.failed = true;
        return answer;
    };
    let mut description = BytesMut::new();
    result::encode_header(&mut description, &set.columns, &formats);
    answer.description = Some(description);
    if command.needs_listing() {
        encode_missing_notice(view.listing, &mut answer.body);
    }
    for row in &set.rows {
        result::encode_row(&mut answer.body, &set.columns, &formats, row);
    }
    result::encode_complete(&mut answer.body);
    answer
}

/// True when some statement of `query` needs a [`Listing`] gathered from every shard.
pub fn needs_listing(query: &str) -> bool {
    command::statements(query)
        .filter_map(|statement| command::parse(statement).ok())
        .any(AdminCommand::needs_listing)
}

/// A NOTICE naming the shards whose rows are missing, before the result set.
fn encode_missing_notice(listing: Option<&Listing>, out: &mut BytesMut) {
    if let Some(message) = listing.and_then(Listing::missing_notice) {
        ErrorNotice::new(Severity::Warning, sqlstate::WARNING, &message).encode_notice(out);
    }
}

fn encode_command_error(error: &CommandError, out: &mut BytesMut) {
    let message = error.to_string();
    let code = match error {
        CommandError::Syntax(_) => sqlstate::SYNTAX_ERROR,
        CommandError::Unsupported(_) => sqlstate::FEATURE_NOT_SUPPORTED,
        CommandError::AdminOnly => {
            ErrorNotice::new(Severity::Error, sqlstate::PROTOCOL_VIOLATION, &message)
                .encode_error(out);
            return;
        }
    };
    ErrorNotice::new(Severity::Error, code, &message)
        .hint("SHOW HELP lists the admin commands")
        .encode_error(out);
}

#[cfg(test)]
mod tests;
