//! Which databases a client's statement needs free of other sessions, so that the pooler's
//! own idle servers never make it fail.
//!
//! PostgreSQL refuses `DROP DATABASE x`, `ALTER DATABASE x RENAME TO y`, `ALTER DATABASE x
//! SET TABLESPACE t` and `CREATE DATABASE y TEMPLATE x` with 55006 ("database "x" is being
//! accessed by other users") while any other session is connected to `x` (it waits about
//! 5 s for them to leave first). Through a pooler, those sessions are often only its idle
//! pooled servers, left over from clients of `x` that have gone: [`targets`] names the
//! databases a Query or Parse text does this to, so that the pooler can close them first.
//!
//! What is recognized, in any case, with comments anywhere, in every statement of a text:
//! - `DROP DATABASE [IF EXISTS] name ...` (`WITH (FORCE)` too: PostgreSQL would end the
//!   servers itself, but closing them first is cleaner);
//! - `ALTER DATABASE name RENAME TO ...` and `ALTER DATABASE name SET TABLESPACE ...`;
//! - `CREATE DATABASE name [WITH] option [=] value ...`: its `TEMPLATE` (a name or a
//!   string), or `template1` when there is none or it is `DEFAULT`.
//!
//! Names are read as PostgreSQL reads identifiers: an unquoted one is folded to lower case
//! (ASCII letters only, as for a UTF-8 database), a quoted one is kept as written with `""`
//! undoubled, and both are cut to 63 bytes at a character boundary. A name that is not UTF-8
//! is left out, as is a `U&"..."` one (the lexer does not read it).
//!
//! A mistake here is cheap either way: a name read wrongly closes idle servers of a database
//! for nothing (they are opened again on demand), and a statement missed is answered by
//! PostgreSQL as it would be without the pooler's help. So the reading is short and never
//! guesses past what it understands: it reads no more of a statement once a token surprises
//! it. Plain strings are read with standard_conforming_strings on.
//!
//! # Cost
//! [`targets`] first checks, without lexing, that the text is long enough and contains the
//! word `database` in some case; only then is it lexed. The per-message path does not even
//! search: the session-state scanner, which lexes every Query and Parse text anyway, notes
//! whether the keyword `DATABASE` appears (`StateScanner::finish_noting_database`), and
//! [`targets`] runs only when it did. Texts longer than [`MAX_TEXT_BYTES`] are not read, and at most
//! [`MAX_TARGETS`] names are returned.

use memchr::memchr2_iter;

use crate::read_only::lexer::{Lexer, Tok};

/// Longer texts are not read: a statement of this kind is short.
pub const MAX_TEXT_BYTES: usize = 16 * 1024;

/// At most this many names from one text.
pub(crate) const MAX_TARGETS: usize = 8;

/// PostgreSQL's identifier limit (NAMEDATALEN - 1).
const MAX_NAME_BYTES: usize = 63;

/// The database PostgreSQL copies when `CREATE DATABASE` names no template.
const DEFAULT_TEMPLATE: &str = "template1";

/// The shortest text that can name a database this way: `drop database x`.
const MIN_TEXT_BYTES: usize = 15;

/// What a statement does to the database it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DatabaseCommand {
    /// `DROP DATABASE`.
    Drop,
    /// `ALTER DATABASE ... RENAME TO`.
    Rename,
    /// `ALTER DATABASE ... SET TABLESPACE`.
    SetTablespace,
    /// `CREATE DATABASE ... TEMPLATE`: the database named is the one copied.
    CopyTemplate,
}

impl DatabaseCommand {
    /// The statement, for logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            DatabaseCommand::Drop => "DROP DATABASE",
            DatabaseCommand::Rename => "ALTER DATABASE RENAME",
            DatabaseCommand::SetTablespace => "ALTER DATABASE SET TABLESPACE",
            DatabaseCommand::CopyTemplate => "CREATE DATABASE TEMPLATE",
        }
    }
}

/// A database a statement needs free of other sessions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub command: DatabaseCommand,
    /// The database's name as PostgreSQL stores it.
    pub database: String,
}

/// The databases a Query body (NUL-terminated) or a Parse message's query string needs free
/// of other sessions, in the order of its statements; empty for almost every text.
pub fn targets(text: &[u8]) -> Vec<Target> {
    // Before any scan: most texts of a transaction-pooled workload are this short.
    if text.len() < MIN_TEXT_BYTES {
        return Vec::new();
    }
    let text = match memchr::memchr(0, text) {
        Some(nul) => &text[..nul],
        None => text,
    };
    let mut out = Vec::new();
    if text.len() > MAX_TEXT_BYTES || !may_name_a_database(text) {
        return out;
    }
    let mut lexer = Lexer::new(text, true);
    loop {
        let first = lexer.next_tok();
        match first {
            Tok::End | Tok::Bad => return out,
            Tok::Semi => continue,
            _ => {}
        }
        if let Some(target) = statement(&mut lexer, first)
            && out.len() < MAX_TARGETS
        {
            out.push(target);
        }
        if !skip_statement(&mut lexer) {
            return out;
        }
    }
}

/// The cheap sieve. Whether `text` may hold such a statement at all: it is long enough and has the word
/// `database` in some case (anywhere: in a name, a string or a comment too). [`targets`]
/// of a text for which this is false is empty, and so is that of any part of it; callers
/// that remember it per text (the engine's cache of classified texts) need not call
/// [`targets`] again.
pub fn may_name_a_database(text: &[u8]) -> bool {
    const WORD: &[u8] = b"database";
    // `b` is the rarest letter of the word in SQL texts: few places to look at.
    const B_AT: usize = 4;
    text.len() >= MIN_TEXT_BYTES
        && memchr2_iter(b'b', b'B', text).any(|at| {
            at >= B_AT
                && text
                    .get(at - B_AT..at - B_AT + WORD.len())
                    .is_some_and(|window| window.eq_ignore_ascii_case(WORD))
        })
}

/// Reads one statement up to where it stops understanding it; its target, if any.
fn statement(lexer: &mut Lexer<'_>, first: Tok<'_>) -> Option<Target> {
    let verb = if first.is("drop") {
        Verb::Drop
    } else if first.is("alter") {
        Verb::Alter
    } else if first.is("create") {
        Verb::Create
    } else {
        return None;
    };
    if !lexer.next_tok().is("database") {
        return None;
    }
    match verb {
        Verb::Drop => {
            let mut tok = lexer.next_tok();
            if tok.is("if") {
                if !lexer.next_tok().is("exists") {
                    return None;
                }
                tok = lexer.next_tok();
            }
            target(DatabaseCommand::Drop, name(tok)?)
        }
        Verb::Alter => {
            let database = name(lexer.next_tok())?;
            let next = lexer.next_tok();
            if next.is("rename") {
                target(DatabaseCommand::Rename, database)
            } else if next.is("set") && lexer.next_tok().is("tablespace") {
                target(DatabaseCommand::SetTablespace, database)
            } else {
                None
            }
        }
        Verb::Create => {
            name(lexer.next_tok())?;
            target(DatabaseCommand::CopyTemplate, create_template(lexer)?)
        }
    }
}

#[derive(Clone, Copy)]
enum Verb {
    Drop,
    Alter,
    Create,
}

fn target(command: DatabaseCommand, database: Vec<u8>) -> Option<Target> {
    let database = String::from_utf8(database).ok()?;
    Some(Target { command, database })
}

/// The template of `CREATE DATABASE name`, read from its options (the name is consumed):
/// `[WITH] option [=] value ...`, where an option is a word (or `CONNECTION LIMIT`) and a
/// value one token, or a signed number. None: an option list it cannot read.
fn create_template(lexer: &mut Lexer<'_>) -> Option<Vec<u8>> {
    let mut template = None;
    if lexer.peek().is("with") {
        lexer.next_tok();
    }
    loop {
        let option = lexer.peek();
        if option.ends_statement() {
            break;
        }
        lexer.next_tok();
        if !matches!(option, Tok::Word(_)) {
            return None;
        }
        if option.is("connection") && !lexer.next_tok().is("limit") {
            return None;
        }
        let mut value = lexer.next_tok();
        if value == Tok::Other && lexer.last_lexed() == b"=" {
            value = lexer.next_tok();
        }
        if value == Tok::Other && matches!(lexer.last_lexed(), b"-" | b"+") {
            value = lexer.next_tok();
        }
        if option.is("template") {
            template = Some(if value.is("default") {
                DEFAULT_TEMPLATE.as_bytes().to_vec()
            } else if value == Tok::Literal {
                plain_string(lexer.last_lexed())?
            } else {
                name(value)?
            });
        } else if !matches!(value, Tok::Word(_) | Tok::Quoted(_) | Tok::Literal) {
            return None;
        }
    }
    Some(template.unwrap_or_else(|| DEFAULT_TEMPLATE.as_bytes().to_vec()))
}

/// A name as PostgreSQL stores it (see the module doc); None if `tok` is not a name.
fn name(tok: Tok<'_>) -> Option<Vec<u8>> {
    let mut name = match tok {
        Tok::Word(word) => word.to_ascii_lowercase(),
        Tok::Quoted(quoted) if !quoted.is_empty() => undouble(quoted, b'"'),
        _ => return None,
    };
    truncate_identifier(&mut name);
    Some(name)
}

/// The contents of a plain `'...'` string; None for any other literal (a number, an
/// `E'...'` or dollar-quoted string).
fn plain_string(raw: &[u8]) -> Option<Vec<u8>> {
    let inner = raw.strip_prefix(b"'")?.strip_suffix(b"'")?;
    let mut value = undouble(inner, b'\'');
    truncate_identifier(&mut value);
    Some(value)
}

/// `quote` doubled becomes one.
fn undouble(bytes: &[u8], quote: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut previous_was_quote = false;
    for &byte in bytes {
        if byte == quote && previous_was_quote {
            previous_was_quote = false;
            continue;
        }
        previous_was_quote = byte == quote;
        out.push(byte);
    }
    out
}

/// PostgreSQL's `truncate_identifier`: at most 63 bytes, never half a UTF-8 character.
fn truncate_identifier(name: &mut Vec<u8>) {
    if name.len() <= MAX_NAME_BYTES {
        return;
    }
    let mut end = MAX_NAME_BYTES;
    // A continuation byte (10xxxxxx) at `end` means a character straddles the limit.
    while end > 0 && name.get(end).is_some_and(|&b| b & 0xC0 == 0x80) {
        end -= 1;
    }
    name.truncate(end);
}

/// Consumes the rest of the statement; false when the text cannot be read further.
fn skip_statement(lexer: &mut Lexer<'_>) -> bool {
    loop {
        match lexer.next_tok() {
            Tok::Semi => return true,
            Tok::End | Tok::Bad => return false,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_state::StateScanner;

    fn names(sql: &str) -> Vec<(DatabaseCommand, String)> {
        targets(sql.as_bytes())
            .into_iter()
            .map(|target| (target.command, target.database))
            .collect()
    }

    fn one(command: DatabaseCommand, database: &str) -> Vec<(DatabaseCommand, String)> {
        vec![(command, database.to_string())]
    }

    use DatabaseCommand::*;

    #[test]
    fn drop_database_in_its_forms() {
        assert_eq!(names("DROP DATABASE x"), one(Drop, "x"));
        assert_eq!(names("drop database IF EXISTS Shop\0"), one(Drop, "shop"));
        assert_eq!(names("DROP DATABASE x WITH (FORCE);"), one(Drop, "x"));
        assert_eq!(names("DROP DATABASE \"My DB\" (force)"), one(Drop, "My DB"));
        assert_eq!(
            names("DROP DATABASE IF EXISTS \"say \"\"hi\"\"\""),
            one(Drop, "say \"hi\"")
        );
        assert_eq!(
            names("/* tool */ DrOp -- why\n DATABASE /* x */ \"Ünï\""),
            one(Drop, "Ünï")
        );
    }

    #[test]
    fn rename_set_tablespace_and_templates() {
        assert_eq!(
            names("ALTER DATABASE Old RENAME TO new"),
            one(Rename, "old")
        );
        assert_eq!(
            names("alter database \"Old\" set tablespace fast"),
            one(SetTablespace, "Old")
        );
        assert_eq!(
            names("CREATE DATABASE y TEMPLATE x"),
            one(CopyTemplate, "x")
        );
        assert_eq!(
            names(
                "CREATE DATABASE y WITH OWNER = bob CONNECTION LIMIT -1 \
                 ENCODING 'UTF8' TEMPLATE = \"Tpl\" IS_TEMPLATE false"
            ),
            one(CopyTemplate, "Tpl")
        );
        assert_eq!(
            names("CREATE DATABASE y TEMPLATE 'it''s'"),
            one(CopyTemplate, "it's")
        );
        assert_eq!(names("CREATE DATABASE y"), one(CopyTemplate, "template1"));
        assert_eq!(
            names("CREATE DATABASE y TEMPLATE DEFAULT"),
            one(CopyTemplate, "template1")
        );
        assert_eq!(
            names("CREATE DATABASE y OWNER template"),
            one(CopyTemplate, "template1"),
            "a value is not an option"
        );
    }

    #[test]
    fn every_statement_of_a_text_is_read() {
        assert_eq!(
            names("SELECT 'DROP DATABASE a'; DROP DATABASE b;; ALTER DATABASE c RENAME TO d"),
            vec![(Drop, "b".to_string()), (Rename, "c".to_string())]
        );
        assert_eq!(
            names("DROP DATABASE x; SELECT 1; CREATE DATABASE z TEMPLATE t"),
            vec![(Drop, "x".to_string()), (CopyTemplate, "t".to_string())]
        );
        let many = "DROP DATABASE x;".repeat(MAX_TARGETS + 3);
        assert_eq!(names(&many).len(), MAX_TARGETS);
    }

    #[test]
    fn other_texts_name_nothing() {
        for sql in [
            "SELECT 1",
            "SELECT * FROM database_sizes WHERE name = 'x'",
            "ALTER DATABASE x SET work_mem = '1MB'",
            "ALTER DATABASE x OWNER TO bob",
            "DROP TABLE database",
            "DROP DATABASE",
            "DROP DATABASE IF x",
            "COMMENT ON DATABASE x IS 'DROP DATABASE y'",
            "-- DROP DATABASE x\nSELECT 1",
            "SELECT $$; DROP DATABASE x; $$",
            "DROP DATABASE 'x'",
            "DROP DATABASE U&\"x\"",
            "CREATE DATABASE y TEMPLATE E'x'",
            "CREATE DATABASE y TEMPLATE (x)",
            "DROP DATABASE \"open",
            "",
        ] {
            assert_eq!(names(sql), [], "{sql}");
        }
    }

    #[test]
    fn text_after_a_nul_or_past_the_limit_is_not_read() {
        assert_eq!(names("SELECT 1\0DROP DATABASE x"), []);
        let long = format!("DROP DATABASE x; SELECT '{}'", "a".repeat(MAX_TEXT_BYTES));
        assert_eq!(names(&long), []);
    }

    #[test]
    fn names_are_cut_as_postgresql_cuts_them() {
        let long = "a".repeat(70);
        assert_eq!(
            names(&format!("DROP DATABASE {long}")),
            one(Drop, &"a".repeat(63))
        );
        // 62 ASCII bytes, then a two-byte character across the limit: it goes whole.
        let straddling = format!("\"{}é\"", "a".repeat(62));
        assert_eq!(
            names(&format!("DROP DATABASE {straddling}")),
            one(Drop, &"a".repeat(62))
        );
    }

    /// What the per-message path asks instead of [`may_name_a_database`]: the state
    /// scanner's note of the keyword, fed in any split.
    fn noted(sql: &str) -> bool {
        let bytes = sql.as_bytes();
        let whole = {
            let mut scanner = StateScanner::query();
            scanner.feed(bytes);
            scanner.finish_noting_database().1
        };
        for split in 1..bytes.len() {
            let mut scanner = StateScanner::query();
            scanner.feed(&bytes[..split]);
            scanner.feed(&bytes[split..]);
            assert_eq!(
                scanner.finish_noting_database().1,
                whole,
                "{sql} at {split}"
            );
        }
        whole
    }

    #[test]
    fn the_scanner_notes_the_keyword_of_every_text_that_names_a_database() {
        for sql in [
            "DROP DATABASE x",
            "drop database IF EXISTS Shop\0",
            "/* tool */ DrOp -- why\n DATABASE /* x */ \"Ünï\"",
            "ALTER DATABASE Old RENAME TO new",
            "alter database \"Old\" set tablespace fast",
            "CREATE DATABASE y TEMPLATE 'it''s'",
            "SELECT 'DROP DATABASE a'; DROP DATABASE b;; ALTER DATABASE c RENAME TO d",
            "SET x = 1; CREATE DATABASE z",
        ] {
            assert!(!names(sql).is_empty(), "{sql}");
            assert!(noted(sql), "{sql}");
        }
        // Only where the keyword is no keyword does the note differ from the byte search.
        for sql in [
            "SELECT abalance FROM pgbench_accounts WHERE aid = 1",
            "SELECT * FROM database_sizes WHERE name = 'x'",
            "SELECT 'DROP DATABASE a'",
            "-- DROP DATABASE x\nSELECT 1",
            "SELECT $$; DROP DATABASE x; $$",
            "DROP TABLE \"database\"",
            "SELECT 1\0DROP DATABASE x",
        ] {
            assert_eq!(names(sql), [], "{sql}");
            assert!(!noted(sql), "{sql}");
        }
    }

    #[test]
    fn the_sieve_needs_the_word() {
        assert!(may_name_a_database(b"drop DataBase xyz"));
        assert!(!may_name_a_database(b"DROP DATA BASE xyz"));
        assert!(!may_name_a_database(b"database"), "too short to name one");
        assert!(!may_name_a_database(b"bbbbbbbbbbbbbbbbbbbb"));
    }
}
