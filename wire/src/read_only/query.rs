//! The body of a query (`SELECT`, `VALUES`, `TABLE`, `WITH ... SELECT`, a parenthesized
//! query): read-only unless a token says otherwise.
//!
//! The scan is flat, with one recursion per parenthesis (to find each group's end and to know
//! what stands before a `(`). What makes a query a write:
//! - a data-modifying word anywhere (`INSERT`, `UPDATE`, `DELETE`, `MERGE`), `INTO`, and
//!   `FOR` followed by a row-locking word;
//! - a function call that is neither on the allow-list (`names.rs`) nor answered read-only by
//!   the caller's [`Functions`](super::Functions): a word or quoted identifier followed by
//!   `(`, unless the token before it shows the `(` is not a call (below). A qualified name is
//!   asked about only in `pg_catalog` (`pg_catalog.lower(`); in any other schema it is a
//!   write (we do not resolve schemas);
//! - anything the scan cannot follow: a `WITH` list of an unexpected shape, parentheses that
//!   do not balance within the statement, nesting deeper than [`MAX_DEPTH`].
//!
//! A `(` is not a call after `::` or `AS` (a type modifier, `x::varchar(10)`,
//! `CAST(x AS numeric(10,2))`, or an alias's column list, `AS t(a, b)`), or right after a
//! `)`: there an expression or a table has just ended, and PostgreSQL's grammar (15 has no
//! postfix operators and no juxtaposition) lets no call follow; a name and `(` there is an
//! alias with its column list (`FROM unnest(a) u(x)`), a clause (`OVER (`, `FILTER (`,
//! `REPEATABLE (`) or an infix keyword (`AND (`, `OPERATOR(`). Unreserved keywords that may also name a user's function are
//! accepted before `(` only after the word that makes them a keyword: `BY` after `ORDER`,
//! `GROUP` or `PARTITION`; `JOIN` after a join type (or a `)` or quoted name); `ROLLUP` and
//! `CUBE` after `BY`; `SETS` after `GROUPING`; `SYSTEM` and `BERNOULLI` after
//! `TABLESAMPLE`; `VARYING` after `CHARACTER`, `CHAR` or `BIT`.

use super::functions::{CalleeSchema, Calls};
use super::lexer::{Lexer, Tok};
use super::names::{is_construct, is_locking_after_for, is_write_word};
use super::{MAX_DEPTH, Write};

/// Scans a query statement whose first token (`SELECT`, `VALUES`, `TABLE`, `WITH` or `(`) was
/// already read, up to and including its `;` (or the end of the text).
pub(super) fn statement<'a>(
    lexer: &mut Lexer<'a>,
    first: Tok<'a>,
    calls: Calls<'_>,
) -> Result<(), Write> {
    let mut scan = Scan {
        lexer,
        prev: Tok::Other,
        before_prev: Tok::Other,
        calls,
    };
    if scan.token(first, 0)?.is_some() {
        // The statement is a lone `)` or `;`: not a query.
        return Err(Write);
    }
    scan.group(0).map(|_| ())
}

/// Scans a parenthesized query whose `(` was already read, up to and including its `)`.
pub(super) fn parenthesized(lexer: &mut Lexer<'_>, calls: Calls<'_>) -> Result<(), Write> {
    let mut scan = Scan {
        lexer,
        prev: Tok::Open,
        before_prev: Tok::Other,
        calls,
    };
    scan.group(1).map(|_| ())
}

struct Scan<'l, 'a, 'f> {
    lexer: &'l mut Lexer<'a>,
    /// The token before the current one (`)` after a whole group).
    prev: Tok<'a>,
    /// The token before `prev`: the schema of a qualified name (`pg_catalog` `.` `name`).
    before_prev: Tok<'a>,
    calls: Calls<'f>,
}

impl<'a> Scan<'_, 'a, '_> {
    /// Scans until the end of the group at `depth`: its `)`, or at depth 0 the end of the
    /// statement. Returns that token.
    fn group(&mut self, depth: u32) -> Result<Tok<'a>, Write> {
        loop {
            let tok = self.lexer.next_tok();
            if let Some(end) = self.token(tok, depth)? {
                return Ok(end);
            }
        }
    }

    /// One token inside a group at `depth`; `Some` if it ends the group.
    fn token(&mut self, tok: Tok<'a>, depth: u32) -> Result<Option<Tok<'a>>, Write> {
        let prev = self.prev;
        let before_prev = self.before_prev;
        self.before_prev = prev;
        self.prev = tok;
        match tok {
            Tok::Semi | Tok::End if depth == 0 => return Ok(Some(tok)),
            Tok::Close if depth > 0 => return Ok(Some(tok)),
            Tok::Semi | Tok::End | Tok::Close | Tok::Bad => return Err(Write),
            Tok::Open => self.open(depth)?,
            Tok::Word(word) => self.word(word, prev, before_prev, depth)?,
            Tok::Quoted(name) => {
                if self.lexer.peek() == Tok::Open
                    && !opens_no_call(prev)
                    && !self.quoted_call_allowed(name, prev, before_prev)
                {
                    return Err(Write);
                }
            }
            Tok::Literal | Tok::Comma | Tok::Dot | Tok::Cast | Tok::Other => {}
        }
        Ok(None)
    }

    /// A nested group, whose `(` was just read; afterwards the previous token is its `)`.
    fn open(&mut self, depth: u32) -> Result<(), Write> {
        if depth >= MAX_DEPTH {
            return Err(Write);
        }
        self.prev = Tok::Open;
        self.group(depth + 1)?;
        Ok(())
    }

    fn word(
        &mut self,
        word: &'a [u8],
        prev: Tok<'a>,
        before_prev: Tok<'a>,
        depth: u32,
    ) -> Result<(), Write> {
        if is_write_word(word) {
            return Err(Write);
        }
        let next = self.lexer.peek();
        let kw = Tok::Word(word);
        if kw.is("for") && matches!(next, Tok::Word(w) if is_locking_after_for(w)) {
            return Err(Write);
        }
        if kw.is("with") && !(next.is("ordinality") || next.is("time") || next.is("ties")) {
            return self.ctes(depth);
        }
        if next == Tok::Open && !self.call_allowed(word, prev, before_prev) {
            return Err(Write);
        }
        Ok(())
    }

    /// Whether `word (` may stand after `prev` (and `before_prev`) in a read-only query.
    fn call_allowed(&self, word: &[u8], prev: Tok<'_>, before_prev: Tok<'_>) -> bool {
        if prev == Tok::Dot {
            return schema_of(before_prev)
                .is_some_and(|schema| self.calls.allows_word(word, schema));
        }
        opens_no_call(prev)
            || is_construct(word)
            || self.calls.is_plain_built_in(word)
            || keyword_opens_no_call(word, prev)
            || self.calls.allows_word(word, CalleeSchema::Unqualified)
    }

    /// Whether `"name" (` may stand after `prev` (and `before_prev`) in a read-only query:
    /// a call of the function spelled exactly `name`.
    fn quoted_call_allowed(&self, name: &[u8], prev: Tok<'_>, before_prev: Tok<'_>) -> bool {
        let schema = if prev == Tok::Dot {
            schema_of(before_prev)
        } else {
            Some(CalleeSchema::Unqualified)
        };
        schema.is_some_and(|schema| self.calls.allows_quoted(name, schema))
    }

    /// A `WITH [RECURSIVE]` list: `name [(columns)] AS [[NOT] MATERIALIZED] (query)`, comma
    /// separated. The query after it is left to the caller's scan.
    fn ctes(&mut self, depth: u32) -> Result<(), Write> {
        let mut tok = self.lexer.next_tok();
        if tok.is("recursive") {
            tok = self.lexer.next_tok();
        }
        loop {
            match tok {
                Tok::Word(name) if !is_write_word(name) => {}
                Tok::Quoted(_) => {}
                _ => return Err(Write),
            }
            tok = self.lexer.next_tok();
            if tok == Tok::Open {
                self.open(depth)?;
                tok = self.lexer.next_tok();
            }
            if !tok.is("as") {
                return Err(Write);
            }
            tok = self.lexer.next_tok();
            if tok.is("not") {
                tok = self.lexer.next_tok();
                if !tok.is("materialized") {
                    return Err(Write);
                }
                tok = self.lexer.next_tok();
            } else if tok.is("materialized") {
                tok = self.lexer.next_tok();
            }
            if tok != Tok::Open {
                return Err(Write);
            }
            self.open(depth)?;
            if self.lexer.peek() != Tok::Comma {
                return Ok(());
            }
            self.lexer.next_tok();
            tok = self.lexer.next_tok();
        }
    }
}

/// Whether a `(` after this token, following a name, cannot make the name a call (see the
/// module doc).
fn opens_no_call(prev: Tok<'_>) -> bool {
    matches!(prev, Tok::Cast | Tok::Close) || prev.is("as")
}

/// The schema a qualifier names, if calls in it may be looked up: only `pg_catalog` (a
/// user's schema is not resolved; such a call is a write).
fn schema_of(qualifier: Tok<'_>) -> Option<CalleeSchema> {
    let is_pg_catalog = match qualifier {
        Tok::Word(word) => word.eq_ignore_ascii_case(b"pg_catalog"),
        Tok::Quoted(name) => name == b"pg_catalog",
        _ => false,
    };
    is_pg_catalog.then_some(CalleeSchema::PgCatalog)
}

/// Whether `word (` after `prev` is an unreserved keyword in the place that makes it one
/// (see the module doc), not a call.
fn keyword_opens_no_call(word: &[u8], prev: Tok<'_>) -> bool {
    let after = |words: &[&str]| words.iter().any(|w| prev.is(w));
    let kw = Tok::Word(word);
    if kw.is("by") {
        after(&["order", "group", "partition"])
    } else if kw.is("join") {
        matches!(prev, Tok::Quoted(_))
            || after(&[
                "inner", "outer", "cross", "left", "right", "full", "natural",
            ])
    } else if kw.is("rollup") || kw.is("cube") {
        prev.is("by")
    } else if kw.is("sets") {
        prev.is("grouping")
    } else if kw.is("system") || kw.is("bernoulli") {
        prev.is("tablesample")
    } else if kw.is("varying") {
        after(&["character", "char", "bit"])
    } else {
        false
    }
}
