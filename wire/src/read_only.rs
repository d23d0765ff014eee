//! Which transactions may run on a hot standby: the classifier of a transaction's first
//! Query or Parse text for reader entries (a primary plus replicas).
//!
//! A reader entry sends a transaction to a replica when its first text is known to be
//! read-only, and everything else to the primary. The two mistakes are not alike: a read sent
//! to the primary costs only capacity, but a write (or anything a standby refuses) sent to a
//! replica fails there with an error the primary would not give: 25006 "cannot execute ... in
//! a read-only transaction", 0A000 "cannot use serializable mode in a hot standby", 55000
//! "recovery is in progress". So [`classify`] says [`Access::ReadOnly`] only for texts it
//! fully understands, and [`Access::Write`] for everything else, including anything it cannot
//! read. `tests/live_read_only.rs` runs every read-only case of the test table on a real
//! streaming replica.
//!
//! # What is read-only
//! A text is read-only when every statement (empty ones between `;` are ignored) is one of
//! the following, and one at least is a query or opens a read-only block (`COMMIT` or `END`
//! alone is a write: pgbench's `END;`):
//! - a query: `SELECT`, `VALUES`, `TABLE name`, `WITH ... SELECT`, or one in parentheses,
//!   with no `INSERT`, `UPDATE`, `DELETE`, `MERGE` (so no data-modifying `WITH`), no `INTO`
//!   (`SELECT ... INTO` creates a table), no `FOR UPDATE | NO KEY UPDATE | SHARE | KEY SHARE`,
//!   anywhere in it, and no function call but the built-ins of an allow-list (`names.rs`)
//!   and the names the caller's [`Functions`] answers read-only for ([`classify_using`];
//!   pgtier answers from configured overrides and the primary's `pg_proc`). Without an
//!   answer, `nextval`, `txid_current`, advisory locks, `set_config`, `pg_notify`, a user's
//!   function or a quoted name are writes; a name qualified by any schema but `pg_catalog`
//!   always is. Keywords before a `(` that is not a call
//!   (`IN (`, `EXISTS (`, `CAST (`, `OVER (`, `x::numeric(10,2)`...) are told apart by the
//!   rules in `query.rs`;
//! - `SHOW name`, except `SHOW transaction_read_only`, `SHOW in_hot_standby` and `SHOW ALL`,
//!   which would tell the client it is on a standby;
//! - `EXPLAIN` of such a query without `ANALYZE` (in any form: `ANALYZE false` counts too);
//! - `COPY (query) TO STDOUT` and `COPY table [(columns)] TO STDOUT` (to a file or program it
//!   would write on the replica's host; `COPY FROM` writes);
//! - `BEGIN` / `START TRANSACTION` with `READ ONLY`, or without any access mode when the next
//!   statement is `SET TRANSACTION ... READ ONLY`: the whole transaction is then read-only,
//!   and PostgreSQL itself refuses a later write in it with the 25006 the primary would give.
//!   Isolation levels `READ COMMITTED`, `REPEATABLE READ`, `READ UNCOMMITTED` (run as read
//!   committed) and `[NOT] DEFERRABLE` may go with it; `SERIALIZABLE` (refused by a standby)
//!   and `READ WRITE` make it a write. A plain `BEGIN` is a write: what follows is unknown;
//! - inside such a read-only block: `SET TRANSACTION` (same restrictions), `SAVEPOINT`,
//!   `RELEASE`, `ROLLBACK TO`, `COMMIT AND CHAIN`; and anywhere `COMMIT`, `END`, `ROLLBACK`,
//!   `ABORT` (not `... PREPARED`). A text that opens a block must open a read-only one, and a
//!   statement after a `COMMIT` must be read-only by itself.
//!
//! Everything else is a write: DML, DDL, `SET` (other than `SET TRANSACTION`), `CALL`, `DO`,
//! `LOCK`, `LISTEN`, `NOTIFY`, `PREPARE`, `EXECUTE`, `DECLARE`, `VACUUM`, `ANALYZE`... and an
//! empty text.
//!
//! # Lexing
//! PostgreSQL's rules (`lexer.rs`): `--` and nested `/* */` comments, `'...'` with `''`,
//! `E'...'` with backslash escapes, `B'...'`/`X'...'`, `N'...'`, `U&'...'`, dollar quotes
//! (`$$...$$`, `$tag$...$tag$`), `"..."` identifiers, numbers, `::`, `$n` parameters,
//! keywords in any case. Plain strings follow standard_conforming_strings = on (the default);
//! a session that turned it off needs [`classify_with`]. Unterminated strings, comments and
//! quoted identifiers, and `U&"..."` identifiers (their escapes can spell any name), are
//! writes. The text may end with the Query message's NUL; PostgreSQL reads a text up to its
//! first NUL, and so does the classifier.
//!
//! This lexer is not shared with `session_state`: that one is an incremental scanner fed in
//! pieces, with its keyword sieve fused into the lexing, and this one reads a whole text with
//! one token of look-ahead. Both follow the same PostgreSQL rules.
//!
//! # Cost
//! One pass with one token of look-ahead, no allocation, recursion only per parenthesis (at
//! most [`MAX_DEPTH`] deep, deeper is a write). Texts longer than [`MAX_TEXT_BYTES`] are
//! writes without being read: a fixed bound on the work per message, not a setting, because
//! it only decides where a rare huge text runs, never whether it runs.
//!
//! # What the text does not show
//! The classifier reads the text, not the catalog. A query is read-only as written, but it can
//! still run code the text does not name: a view or a row-level-security policy that calls a
//! writing function, a user-defined operator or cast, a domain check, a type's input function,
//! or a function named like a built-in that a search_path ahead of `pg_catalog` (or a closer
//! overload) makes win. Such a query fails on a replica (25006) though the primary would run
//! it; a database that has them should not use a reader entry for those clients. Session
//! state is out of its sight too: an unlogged table (a standby refuses to read one, 0A000), a
//! temporary table, a `currval` after `nextval`, or a
//! session's `default_transaction_isolation = serializable` (from `SET`, the role or the
//! database), which makes every transaction on a standby fail with 0A000.

mod catalog_change;
mod functions;
pub(crate) mod lexer;
mod names;
mod query;
mod statement;

pub use catalog_change::changes_functions;
pub(crate) use functions::BuiltInsOnly;
pub use functions::{Callee, CalleeSchema, Functions};

use functions::Calls;
use lexer::{Lexer, Tok};
use statement::Stmt;

/// Parentheses nested deeper are a write: it bounds the recursion (PostgreSQL accepts
/// deeper ones).
pub const MAX_DEPTH: u32 = 64;

/// Longer texts are [`Access::Write`] without being read (see the module doc).
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// What the first statement(s) of a transaction say about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Known to write nothing and to behave the same on a standby: it may run on a replica.
    ReadOnly,
    /// Anything else (a write, a function pgtier does not know, a plain BEGIN, a text it could
    /// not read): it runs on the primary.
    Write,
}

/// The verdict of any part of the classifier that found a reason to run the text on the
/// primary. (An error type, so that `?` ends the classification.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Write;

/// Classifies a Query message body (the SQL text, NUL-terminated) or a Parse message's query
/// string (not the whole Parse body, which starts with the statement's name), with
/// standard_conforming_strings on.
pub fn classify(text: &[u8]) -> Access {
    classify_with(text, true)
}

/// [`classify`] for a session whose standard_conforming_strings is `on` or not (then a
/// backslash escapes a quote in a plain `'...'` string).
pub fn classify_with(text: &[u8], standard_conforming_strings: bool) -> Access {
    classify_using(text, standard_conforming_strings, &BuiltInsOnly)
}

/// [`classify_with`], asking `functions` about every called function the allow-list does
/// not know (and about the allow-listed ones too when it
/// [checks built-ins](Functions::checks_built_ins)).
pub fn classify_using(
    text: &[u8],
    standard_conforming_strings: bool,
    functions: &dyn Functions,
) -> Access {
    let text = match memchr::memchr(0, text) {
        Some(nul) => &text[..nul],
        None => text,
    };
    if text.len() > MAX_TEXT_BYTES {
        return Access::Write;
    }
    let calls = Calls::new(functions);
    match statements(&mut Lexer::new(text, standard_conforming_strings), calls) {
        Ok(()) => Access::ReadOnly,
        Err(Write) => Access::Write,
    }
}

/// Where a text stands with respect to a transaction block, between two statements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    /// No block opened by this text (or it was ended): each statement stands alone.
    Outside,
    /// A `BEGIN` without an access mode: only `SET TRANSACTION READ ONLY` may follow.
    AwaitingReadOnly,
    /// A block known to be read-only.
    ReadOnly,
}

/// Reads every statement of a text: `Ok` if the text is read-only.
fn statements(lexer: &mut Lexer<'_>, calls: Calls<'_>) -> Result<(), Write> {
    let mut block = Block::Outside;
    // A read or a read-only BEGIN was seen: a text of only COMMITs is not worth a replica.
    let mut reads = false;
    loop {
        let first = lexer.next_tok();
        match first {
            Tok::End => break,
            Tok::Semi => continue,
            _ => {}
        }
        let stmt = statement::statement(lexer, first, calls)?;
        block = next_block(block, stmt)?;
        reads |= stmt == Stmt::Read || block == Block::ReadOnly;
    }
    if !reads || block == Block::AwaitingReadOnly {
        return Err(Write);
    }
    Ok(())
}

/// The transaction-block rules of the module doc.
fn next_block(block: Block, stmt: Stmt) -> Result<Block, Write> {
    match (block, stmt) {
        (Block::AwaitingReadOnly, Stmt::SetTransaction { read_only: true }) => Ok(Block::ReadOnly),
        (Block::AwaitingReadOnly, _) => Err(Write),
        (_, Stmt::Read) => Ok(block),
        (Block::Outside, Stmt::Begin { read_only: true }) => Ok(Block::ReadOnly),
        (Block::Outside, Stmt::Begin { read_only: false }) => Ok(Block::AwaitingReadOnly),
        (Block::ReadOnly, Stmt::SetTransaction { .. } | Stmt::Savepoint) => Ok(block),
        (Block::ReadOnly, Stmt::End { chain: true }) => Ok(block),
        (_, Stmt::End { chain: false }) => Ok(Block::Outside),
        // A BEGIN inside a block, SET TRANSACTION or a savepoint outside one, COMMIT AND
        // CHAIN of no read-only block.
        _ => Err(Write),
    }
}
