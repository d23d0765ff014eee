//! The admin console: answers to simple queries on the virtual database `pgtier`.
//!
//! It is a pure function from the query text and a read-only [`AdminView`] of the routers,
//! their health and event logs, and the traffic statistics, to protocol messages appended to
//! the session's output buffer. The session layer checks that the user is in `admin_users`
//! (or `stats_users`), calls [`answer`], then sends ReadyForQuery('I') itself. Nothing here
//! does I/O or changes state, so the console cannot disturb routing.

pub mod command;
pub mod format;
pub mod listing;
pub mod result;
pub mod show;

use std::sync::Arc;

use bytes::BytesMut;
use pgtier_core::metrics::TotalsSnapshot;
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::EmptyQueryResponse;
use pgtier_wire::sqlstate;

use crate::control::router::ReplicaRouter;
use command::{AdminCommand, CommandError};
use listing::Listing;

/// The `version` row of `SHOW VERSION`.
pub const VERSION: &str = concat!("pgtier ", env!("CARGO_PKG_VERSION"));

pub use pgtier_engine::shared::IntervalStats;

/// Traffic statistics for `SHOW STATS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatsView {
    /// Totals since start.
    pub totals: TotalsSnapshot,
    /// The last completed interval, once one has completed.
    pub interval: Option<IntervalStats>,
}

/// Everything the console reads.
#[derive(Clone, Copy, Debug)]
pub struct AdminView<'a> {
    /// Every replica router once.
    pub routers: &'a [Arc<ReplicaRouter>],
    /// Traffic statistics, if the caller keeps them.
    pub stats: Option<&'a StatsView>,
    /// Text of `SHOW VERSION` (normally [`VERSION`]).
    pub version: &'a str,
    /// Client and pool rows gathered from every shard, for `SHOW CLIENTS`/`SHOW POOLS`
    /// (`None`: those commands answer with no rows).
    pub listing: Option<&'a Listing>,
}

/// What [`answer`] produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AnswerSummary {
    /// Result sets written.
    pub results: usize,
    /// True when an ErrorResponse was written (the rest of the query string was skipped).
    pub failed: bool,
}

/// Answers one simple-query string: for each `;`-separated statement a RowDescription,
/// DataRows and CommandComplete, stopping at the first ErrorResponse as PostgreSQL does; an
/// empty string gets EmptyQueryResponse. The caller appends ReadyForQuery.
pub fn answer(query: &str, view: &AdminView<'_>, out: &mut BytesMut) -> AnswerSummary {
    let mut summary = AnswerSummary::default();
    for statement in command::statements(query) {
        match command::parse(statement) {
            Ok(command) => {
                if command.needs_listing() {
                    encode_missing_notice(view.listing, out);
                }
                let set = show::result_set(command, view);
                result::encode_header(out, set.columns);
                for row in &set.rows {
                    result::encode_row(out, row);
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
    let code = match error {
        CommandError::Syntax(_) => sqlstate::SYNTAX_ERROR,
        CommandError::Unsupported(_) => sqlstate::FEATURE_NOT_SUPPORTED,
    };
    let message = error.to_string();
    ErrorNotice::new(Severity::Error, code, &message)
        .hint("SHOW HELP lists the admin commands")
        .encode_error(out);
}

#[cfg(test)]
mod tests;
