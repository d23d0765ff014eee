//! One statement of a text, from its first word: what kind it is as far as the read-only
//! classifier cares, or [`Write`].

use super::Write;
use super::functions::Calls;
use super::lexer::{Lexer, Tok};
use super::query;

/// A statement that may run on a hot standby, by what it does to the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stmt {
    /// A read-only query, `SHOW`, `EXPLAIN` (without `ANALYZE`) of one, `COPY ... TO STDOUT`.
    Read,
    /// `BEGIN` / `START TRANSACTION` without `READ WRITE` or `SERIALIZABLE`; `read_only` if it
    /// says `READ ONLY`.
    Begin { read_only: bool },
    /// `SET TRANSACTION` with the same restrictions.
    SetTransaction { read_only: bool },
    /// `COMMIT`, `END`, `ROLLBACK`, `ABORT`; `chain` with `AND CHAIN`.
    End { chain: bool },
    /// `SAVEPOINT`, `RELEASE [SAVEPOINT]`, `ROLLBACK TO [SAVEPOINT]`.
    Savepoint,
}

/// Reads one statement whose first token `first` (neither `;` nor the end) was read, up to and
/// including its `;` or the end of the text.
pub(super) fn statement<'a>(
    lexer: &mut Lexer<'a>,
    first: Tok<'a>,
    calls: Calls<'_>,
) -> Result<Stmt, Write> {
    let Tok::Word(_) = first else {
        return match first {
            Tok::Open => query::statement(lexer, first, calls).map(|()| Stmt::Read),
            _ => Err(Write),
        };
    };
    let is = |word: &str| first.is(word);
    if is("select") || is("values") || is("table") || is("with") {
        query::statement(lexer, first, calls).map(|()| Stmt::Read)
    } else if is("show") {
        show(lexer)
    } else if is("explain") {
        explain(lexer, calls)
    } else if is("copy") {
        copy(lexer, calls)
    } else if is("begin") {
        let mut tok = lexer.next_tok();
        if tok.is("work") || tok.is("transaction") {
            tok = lexer.next_tok();
        }
        modes(lexer, tok).map(|read_only| Stmt::Begin { read_only })
    } else if is("start") {
        expect(lexer, "transaction")?;
        let tok = lexer.next_tok();
        modes(lexer, tok).map(|read_only| Stmt::Begin { read_only })
    } else if is("set") {
        // Only `SET TRANSACTION`: every other SET changes the session, or its snapshot.
        expect(lexer, "transaction")?;
        let tok = lexer.next_tok();
        modes(lexer, tok).map(|read_only| Stmt::SetTransaction { read_only })
    } else if is("commit") || is("end") || is("abort") || is("rollback") {
        end(lexer, is("rollback"))
    } else if is("savepoint") {
        let name = lexer.next_tok();
        name_then_end(lexer, name)
    } else if is("release") {
        let mut tok = lexer.next_tok();
        if tok.is("savepoint") {
            tok = lexer.next_tok();
        }
        name_then_end(lexer, tok)
    } else {
        Err(Write)
    }
}

fn expect(lexer: &mut Lexer<'_>, word: &str) -> Result<(), Write> {
    if lexer.next_tok().is(word) {
        Ok(())
    } else {
        Err(Write)
    }
}

fn expect_end(lexer: &mut Lexer<'_>) -> Result<(), Write> {
    if lexer.next_tok().ends_statement() {
        Ok(())
    } else {
        Err(Write)
    }
}

/// `SHOW name`: read-only, except the names whose value tells a standby from the primary
/// (`transaction_read_only`, `in_hot_standby`; libpq's `target_session_attrs` asks the first),
/// and `SHOW ALL`, which lists them.
fn show(lexer: &mut Lexer<'_>) -> Result<Stmt, Write> {
    const STANDBY_TELLING: [&[u8]; 3] = [b"transaction_read_only", b"in_hot_standby", b"all"];
    let mut named = false;
    loop {
        let tok = lexer.next_tok();
        match tok {
            Tok::Semi | Tok::End if named => return Ok(Stmt::Read),
            Tok::Word(name) | Tok::Quoted(name) => {
                if STANDBY_TELLING.iter().any(|s| s.eq_ignore_ascii_case(name)) {
                    return Err(Write);
                }
                named = true;
            }
            Tok::Dot => {}
            _ => return Err(Write),
        }
    }
}

/// `EXPLAIN [(options)] [VERBOSE] query`: `ANALYZE` runs the query, whatever it is, so any
/// mention of it (or a quoted option name) is a write; the statement explained must be a read-only query (planning an
/// `INSERT` is not worth telling apart).
fn explain(lexer: &mut Lexer<'_>, calls: Calls<'_>) -> Result<Stmt, Write> {
    let is_analyze = |tok: Tok<'_>| tok.is("analyze") || tok.is("analyse");
    let mut tok = lexer.next_tok();
    if tok == Tok::Open {
        loop {
            match lexer.next_tok() {
                Tok::Close => break,
                option if is_analyze(option) => return Err(Write),
                // A quoted option name is matched as written: `("analyze")` runs the query.
                Tok::Word(_) | Tok::Literal | Tok::Comma => {}
                _ => return Err(Write),
            }
        }
        tok = lexer.next_tok();
    }
    while tok.is("verbose") {
        tok = lexer.next_tok();
    }
    let is = |word: &str| tok.is(word);
    if tok == Tok::Open || is("select") || is("values") || is("table") || is("with") {
        query::statement(lexer, tok, calls).map(|()| Stmt::Read)
    } else {
        Err(Write)
    }
}

/// `COPY (query) TO STDOUT ...` or `COPY table [(columns)] TO STDOUT ...`. A file or a
/// program would be written on the replica's host, and `COPY ... FROM` writes the table.
fn copy(lexer: &mut Lexer<'_>, calls: Calls<'_>) -> Result<Stmt, Write> {
    match lexer.next_tok() {
        Tok::Open => query::parenthesized(lexer, calls)?,
        Tok::Word(_) | Tok::Quoted(_) => {
            while lexer.peek() == Tok::Dot {
                lexer.next_tok();
                if !matches!(lexer.next_tok(), Tok::Word(_) | Tok::Quoted(_)) {
                    return Err(Write);
                }
            }
            if lexer.peek() == Tok::Open {
                lexer.next_tok();
                loop {
                    match lexer.next_tok() {
                        Tok::Close => break,
                        Tok::Word(_) | Tok::Quoted(_) | Tok::Comma => {}
                        _ => return Err(Write),
                    }
                }
            }
        }
        _ => return Err(Write),
    }
    expect(lexer, "to")?;
    expect(lexer, "stdout")?;
    // Options (`WITH (FORMAT csv)`, `CSV HEADER`...) are names and constants, never evaluated.
    loop {
        match lexer.next_tok() {
            Tok::Semi | Tok::End => return Ok(Stmt::Read),
            Tok::Bad => return Err(Write),
            _ => {}
        }
    }
}

/// Transaction modes after `BEGIN`, `START TRANSACTION` or `SET TRANSACTION`, up to the end
/// of the statement; `tok` is the first token after the keywords. True if they say
/// `READ ONLY`. `READ WRITE` could write, and `SERIALIZABLE` is refused by a standby (0A000).
fn modes<'a>(lexer: &mut Lexer<'a>, mut tok: Tok<'a>) -> Result<bool, Write> {
    let mut read_only = false;
    loop {
        if tok.ends_statement() {
            return Ok(read_only);
        } else if tok.is("read") {
            let next = lexer.next_tok();
            if !next.is("only") {
                return Err(Write);
            }
            read_only = true;
        } else if tok.is("isolation") {
            expect(lexer, "level")?;
            let level = lexer.next_tok();
            if level.is("repeatable") {
                expect(lexer, "read")?;
            } else if level.is("read") {
                let next = lexer.next_tok();
                if !(next.is("committed") || next.is("uncommitted")) {
                    return Err(Write);
                }
            } else {
                return Err(Write);
            }
        } else if tok.is("not") {
            expect(lexer, "deferrable")?;
        } else if !(tok.is("deferrable") || tok == Tok::Comma) {
            return Err(Write);
        }
        tok = lexer.next_tok();
    }
}

/// `COMMIT | END | ABORT | ROLLBACK [WORK | TRANSACTION] [AND [NO] CHAIN]`, and
/// `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`. `COMMIT PREPARED` and
/// `ROLLBACK PREPARED` (two-phase commit) are writes.
fn end(lexer: &mut Lexer<'_>, rollback: bool) -> Result<Stmt, Write> {
    let mut tok = lexer.next_tok();
    if tok.is("work") || tok.is("transaction") {
        tok = lexer.next_tok();
    }
    if rollback && tok.is("to") {
        tok = lexer.next_tok();
        if tok.is("savepoint") {
            tok = lexer.next_tok();
        }
        return name_then_end(lexer, tok);
    }
    let mut chain = false;
    if tok.is("and") {
        tok = lexer.next_tok();
        if tok.is("no") {
            tok = lexer.next_tok();
        } else {
            chain = true;
        }
        if !tok.is("chain") {
            return Err(Write);
        }
        tok = lexer.next_tok();
    }
    if tok.ends_statement() {
        Ok(Stmt::End { chain })
    } else {
        Err(Write)
    }
}

/// A savepoint's name, then the end of the statement.
fn name_then_end<'a>(lexer: &mut Lexer<'a>, name: Tok<'a>) -> Result<Stmt, Write> {
    match name {
        Tok::Word(_) | Tok::Quoted(_) => {
            expect_end(lexer)?;
            Ok(Stmt::Savepoint)
        }
        _ => Err(Write),
    }
}
