//! What a client's SQL does to session state: the check that decides pinning in transaction
//! pooling.
//!
//! In transaction pooling a server connection serves another client after every transaction.
//! State a client creates at session level — a plain `SET`, `LISTEN`, a temporary table, a
//! session advisory lock, a `WITH HOLD` cursor, SQL `PREPARE`, a named protocol-level prepared
//! statement — would leak to the next client of that server, so such a client must stay on its
//! server ("pinned"). The pooler sees the raw bodies of the client's Query ('Q') and Parse ('P')
//! messages, large ones in several pieces, and must decide cheaply and without trusting them.
//!
//! [`StateScanner`] is a lexer (PostgreSQL's rules: nested comments, `E''` strings, dollar
//! quotes, quoted identifiers) feeding a small per-statement grammar. Its state is a fixed-size
//! struct: it never allocates, never panics, accepts any split of the body, and gives exactly
//! the same [`Effects`] however the body was split. The rules below are checked against a real
//! PostgreSQL 15 in `tests/live_session_state.rs`.
//!
//! It runs on every Query and Parse of a pooled client, so it is built to pass over text
//! without looking at it twice. Byte classes come from 256-entry tables; a string, comment or
//! dollar quote is searched for its end (with `memchr` past a string's first bytes); a word is
//! compared with the keywords only if a sieve on its length and first three bytes says it may
//! be one that matters where it stands. Once a statement's first words have decided and
//! nothing is pending (the body is "quiet"), whitespace, symbols and words the sieve rules out
//! do nothing, and whole runs of them are skipped without reaching the grammar. A word that the
//! end of a chunk cuts is kept (its first 64 bytes), so that the split changes nothing.
//!
//! # What is recognised
//! Statements are separated by `;`; the effects of all of them are OR-ed.
//! - From a statement's first words: `SET` (see below), `RESET`, `DISCARD`, `LISTEN`,
//!   `UNLISTEN`, `DEALLOCATE`, `PREPARE` (not `PREPARE TRANSACTION 'gid'`), `LOAD`, `CLOSE ALL`.
//! - Anywhere in a statement: the identifiers `set_config`, `pg_advisory_lock`,
//!   `pg_advisory_lock_shared`, `pg_try_advisory_lock`, `pg_try_advisory_lock_shared`,
//!   `pg_advisory_unlock_all`, `pg_temp` (and `pg_temp_N`), quoted or not;
//!   `TEMP`/`TEMPORARY` right after `CREATE`, `REPLACE`, `GLOBAL`, `LOCAL` or `INTO` (every place
//!   PostgreSQL's grammar accepts it: `OptTemp` and `OptTempTableName`); `WITH HOLD` in a
//!   `DECLARE`.
//! - `SET [SESSION] name {TO | = | FROM CURRENT}` pins, except for the parameters the pooler
//!   re-applies itself (client_encoding, DateStyle, TimeZone, IntervalStyle,
//!   standard_conforming_strings, application_name, compared case-insensitively as PostgreSQL's
//!   GUC lookup does), which give [`Effects::SET_TRACKED`]; so do `SET NAMES` and
//!   `SET TIME ZONE`. `SET ROLE` and `SET SESSION AUTHORIZATION` (and `SET role`/
//!   `SET session_authorization` by name) give [`Effects::SET_ROLE`], which `RESET ALL` does
//!   not undo (PostgreSQL leaves both out of it). `SET SESSION CHARACTERISTICS`,
//!   `SET SCHEMA` and `SET XML OPTION` pin. `SET LOCAL`, `SET TRANSACTION` and
//!   `SET CONSTRAINTS` are transaction-scoped: nothing. As in PostgreSQL's grammar, `LOCAL` or
//!   `SESSION` followed by `.`, `=`, `TO` or `FROM` is the start of a parameter name
//!   (`SET local.x = 1` is a session-level SET of `local.x`).
//! - Not an effect: whether the keyword `DATABASE` appears, unquoted, outside strings and
//!   comments, which the database-DDL sieve asks ([`StateScanner::finish_noting_database`]).
//!
//! # What is deliberately not seen
//! Code that runs later or elsewhere: function and procedure bodies, `DO` blocks, `EXECUTE` of
//! dynamic SQL, triggers and rules can create any state; the SQL text does not show it. The
//! session's sequence cache (`currval`/`lastval` after `nextval`) is not tracked: every insert
//! into a serial column would pin. A caller needing a hard guarantee between clients must reset
//! the server (`DISCARD ALL`) when it is released, whatever this module says.
//!
//! # Conservative by construction
//! A false "pins" only costs pooling efficiency; a missed one leaks state. Where the scanner
//! cannot be exact within its fixed state it reports [`Effects::UNCERTAIN`], which pins: a
//! `U&"..."` identifier (its escapes, possibly with `UESCAPE`, could spell any name) and a
//! dollar-quote tag longer than 64 bytes (the closing tag is matched on its length and first 64
//! bytes). The clearing effects (`RESET ALL`, `DISCARD ALL`, ...) are the opposite: a false one
//! could unpin too early, so they come only from a statement's first words (and the name
//! `pg_advisory_unlock_all`), and [`Effects`] keeps no order (`SET x = 1; RESET ALL` and `RESET ALL; SET x = 1` give the same bits). A
//! caller should let [`Effects::pins`] win over a clear in the same message, and trust a clear
//! only once the server reports the command succeeded outside a transaction block (a rolled-back
//! `RESET ALL` resets nothing).
//!
//! Plain `'...'` strings are lexed with `standard_conforming_strings = on` (PostgreSQL's
//! default since 9.1); a session where it is off must say so with
//! [`StateScanner::standard_conforming_strings`], because there a backslash escapes the quote.
//! The server parses a whole Query message before running any of it, so the setting in force
//! when the message arrives holds for all of it.

use core::fmt;
use core::ops::{BitOr, BitOrAssign};

use memchr::{memchr, memchr2, memchr3};

/// Bit set of session-state effects found in one message's SQL.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Effects(u32);

impl Effects {
    pub const NONE: Effects = Effects(0);

    // Effects that create state. All but SET_TRACKED pin the client to its server.
    /// A session-level `SET` of a parameter the pooler does not re-apply, or
    /// `SET SESSION CHARACTERISTICS`, `SET SCHEMA`, `SET XML OPTION`.
    pub const SET: Effects = Effects(1 << 0);
    /// A session-level `SET` of a parameter the pooler re-applies itself (client_encoding, also
    /// as `SET NAMES`; DateStyle; TimeZone, also as `SET TIME ZONE`; IntervalStyle;
    /// standard_conforming_strings; application_name). Does not pin.
    pub const SET_TRACKED: Effects = Effects(1 << 1);
    /// `set_config` appears: treated as session-level, whatever its third argument.
    pub const SET_CONFIG: Effects = Effects(1 << 2);
    /// `LISTEN channel`.
    pub const LISTEN: Effects = Effects(1 << 3);
    /// A temporary object: `CREATE [GLOBAL | LOCAL] TEMP ...`, `SELECT ... INTO TEMP`, or the
    /// schema name `pg_temp`.
    pub const TEMP: Effects = Effects(1 << 4);
    /// A session-level advisory lock (`pg_advisory_lock`, `pg_try_advisory_lock` and their
    /// `_shared` forms; not the `_xact_` ones, released at commit).
    pub const ADVISORY_LOCK: Effects = Effects(1 << 5);
    /// `DECLARE ... WITH HOLD`: the cursor outlives its transaction.
    pub const HOLD_CURSOR: Effects = Effects(1 << 6);
    /// SQL-level `PREPARE name AS ...`.
    pub const PREPARE: Effects = Effects(1 << 7);
    /// `LOAD 'library'`.
    pub const LOAD: Effects = Effects(1 << 8);
    /// Parse only: the statement name is not empty.
    pub const NAMED_STATEMENT: Effects = Effects(1 << 9);
    /// Something the scanner cannot classify exactly in its fixed state (see the module doc).
    /// Pins.
    pub const UNCERTAIN: Effects = Effects(1 << 10);
    /// `SET [SESSION] ROLE`, `SET [SESSION] SESSION AUTHORIZATION`, or a `SET` of `role` or
    /// `session_authorization` by name. Unlike [`Effects::SET`], `RESET ALL` leaves it.
    pub const SET_ROLE: Effects = Effects(1 << 11);

    // Effects that clear state: informational, for unpinning later (see the module doc).
    /// `RESET ALL`.
    pub const RESET_ALL: Effects = Effects(1 << 16);
    /// `RESET name` (also `RESET ROLE`, `RESET SESSION AUTHORIZATION`, `RESET TIME ZONE`).
    pub const RESET: Effects = Effects(1 << 17);
    /// `DISCARD ALL`.
    pub const DISCARD_ALL: Effects = Effects(1 << 18);
    /// `DISCARD PLANS | SEQUENCES`.
    pub const DISCARD_OTHER: Effects = Effects(1 << 19);
    /// `UNLISTEN *`.
    pub const UNLISTEN_ALL: Effects = Effects(1 << 20);
    /// `UNLISTEN channel`.
    pub const UNLISTEN: Effects = Effects(1 << 21);
    /// `DEALLOCATE [PREPARE] ALL`.
    pub const DEALLOCATE_ALL: Effects = Effects(1 << 22);
    /// `DEALLOCATE [PREPARE] name`.
    pub const DEALLOCATE: Effects = Effects(1 << 23);
    /// `pg_advisory_unlock_all` appears.
    pub const ADVISORY_UNLOCK_ALL: Effects = Effects(1 << 24);
    /// `CLOSE ALL`.
    pub const CLOSE_ALL: Effects = Effects(1 << 25);
    /// `DISCARD TEMP | TEMPORARY`.
    pub const DISCARD_TEMP: Effects = Effects(1 << 26);

    /// Every effect that leaves state behind on the server.
    pub const PINNING: Effects = Effects(
        Self::SET.0
            | Self::SET_CONFIG.0
            | Self::LISTEN.0
            | Self::TEMP.0
            | Self::ADVISORY_LOCK.0
            | Self::HOLD_CURSOR.0
            | Self::PREPARE.0
            | Self::LOAD.0
            | Self::NAMED_STATEMENT.0
            | Self::UNCERTAIN.0
            | Self::SET_ROLE.0,
    );

    /// Every effect that clears state.
    pub(crate) const CLEARING: Effects = Effects(
        Self::RESET_ALL.0
            | Self::RESET.0
            | Self::DISCARD_ALL.0
            | Self::DISCARD_OTHER.0
            | Self::DISCARD_TEMP.0
            | Self::UNLISTEN_ALL.0
            | Self::UNLISTEN.0
            | Self::DEALLOCATE_ALL.0
            | Self::DEALLOCATE.0
            | Self::ADVISORY_UNLOCK_ALL.0
            | Self::CLOSE_ALL.0,
    );

    /// Names for `Debug`, in bit order.
    const NAMES: [(Effects, &'static str); 23] = [
        (Self::SET, "SET"),
        (Self::SET_TRACKED, "SET_TRACKED"),
        (Self::SET_CONFIG, "SET_CONFIG"),
        (Self::LISTEN, "LISTEN"),
        (Self::TEMP, "TEMP"),
        (Self::ADVISORY_LOCK, "ADVISORY_LOCK"),
        (Self::HOLD_CURSOR, "HOLD_CURSOR"),
        (Self::PREPARE, "PREPARE"),
        (Self::LOAD, "LOAD"),
        (Self::NAMED_STATEMENT, "NAMED_STATEMENT"),
        (Self::UNCERTAIN, "UNCERTAIN"),
        (Self::SET_ROLE, "SET_ROLE"),
        (Self::RESET_ALL, "RESET_ALL"),
        (Self::RESET, "RESET"),
        (Self::DISCARD_ALL, "DISCARD_ALL"),
        (Self::DISCARD_OTHER, "DISCARD_OTHER"),
        (Self::UNLISTEN_ALL, "UNLISTEN_ALL"),
        (Self::UNLISTEN, "UNLISTEN"),
        (Self::DEALLOCATE_ALL, "DEALLOCATE_ALL"),
        (Self::DEALLOCATE, "DEALLOCATE"),
        (Self::ADVISORY_UNLOCK_ALL, "ADVISORY_UNLOCK_ALL"),
        (Self::CLOSE_ALL, "CLOSE_ALL"),
        (Self::DISCARD_TEMP, "DISCARD_TEMP"),
    ];

    /// The raw bits (for metrics and logs; the layout is not a stable format).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Every bit of `other` is set in `self`.
    pub const fn contains(self, other: Effects) -> bool {
        self.0 & other.0 == other.0
    }

    /// Some bit of `other` is set in `self`.
    pub const fn intersects(self, other: Effects) -> bool {
        self.0 & other.0 != 0
    }

    pub const fn union(self, other: Effects) -> Effects {
        Effects(self.0 | other.0)
    }

    pub const fn intersection(self, other: Effects) -> Effects {
        Effects(self.0 & other.0)
    }

    /// The bits of `self` that are not in `other`.
    pub const fn difference(self, other: Effects) -> Effects {
        Effects(self.0 & !other.0)
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// State is left behind on the server: the client must stay on it (any of
    /// [`Effects::PINNING`], which is everything that creates state except `SET_TRACKED`).
    pub const fn pins(self) -> bool {
        self.intersects(Self::PINNING)
    }

    /// Some state may have been cleared (any of [`Effects::CLEARING`]).
    pub const fn clears(self) -> bool {
        self.intersects(Self::CLEARING)
    }
}

impl BitOr for Effects {
    type Output = Effects;

    fn bitor(self, other: Effects) -> Effects {
        self.union(other)
    }
}

impl BitOrAssign for Effects {
    fn bitor_assign(&mut self, other: Effects) {
        *self = self.union(other);
    }
}

impl fmt::Debug for Effects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Effects(")?;
        let mut separator = "";
        for (effect, name) in Self::NAMES {
            if self.contains(effect) {
                write!(f, "{separator}{name}")?;
                separator = " | ";
            }
        }
        if self.is_empty() {
            f.write_str("NONE")?;
        }
        f.write_str(")")
    }
}

/// Classifies a whole Query body (SQL text, NUL-terminated) at once.
pub fn classify_query(body: &[u8]) -> Effects {
    let mut scanner = StateScanner::query();
    scanner.feed(body);
    scanner.close()
}

/// Classifies a whole Parse body (statement name, SQL text, parameter types) at once.
pub fn classify_parse(body: &[u8]) -> Effects {
    let mut scanner = StateScanner::parse();
    scanner.feed(body);
    scanner.close()
}

/// Bytes of a word or dollar-quote tag kept for comparison. Every name this module looks for
/// is shorter, and PostgreSQL truncates identifiers to NAMEDATALEN - 1 = 63 bytes, so a longer
/// word cannot name any of them; 64 also holds every tag of up to 63 bytes exactly.
const WORD_CAP: usize = 64;

/// Incremental classifier of one Query or Parse message body; see the module doc.
///
/// Fixed size (96 bytes on x86-64; a test bounds it at 128), no heap allocation, ever.
#[derive(Clone, Debug)]
pub struct StateScanner {
    /// The current quoted identifier or dollar-quote tag, or an unquoted word that a chunk
    /// boundary cut: its first `WORD_CAP` bytes. A word that ends in the chunk it starts in is
    /// classified where it lies and never copied here.
    word: [u8; WORD_CAP],
    /// Length of the current word or tag, saturating; above `WORD_CAP` only a prefix is kept.
    word_len: u32,
    /// Nesting depth of `/* */` comments while in a `Block*` state (saturating).
    depth: u32,
    found: Effects,
    lex: Lex,
    /// Kind of the string that just ended, while only whitespace and comments follow: a `'`
    /// then continues it (PostgreSQL joins `'a'<newline>'b'` and keeps E-string rules; without
    /// the newline two adjacent strings are a syntax error, so nothing runs either way).
    continues: Option<StrKind>,
    /// How a plain `'...'` string is lexed (depends on standard_conforming_strings).
    plain: StrKind,
    statement: Statement,
    /// An unquoted word `DATABASE` was read: the text may be database DDL.
    database: bool,
}

/// How a quoted string treats backslashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StrKind {
    /// Only `''` escapes a quote (plain strings when standard_conforming_strings is on,
    /// `U&'...'`, `B'...'`, `X'...'`).
    Standard,
    /// A backslash also escapes the next byte (`E'...'`, plain strings when
    /// standard_conforming_strings is off).
    Escape,
}

/// Where the lexer is. `Normal` consumes whole runs of words, whitespace and punctuation,
/// and whole strings; most other states are where the end of a chunk cut a token. Each state
/// that "may" become something looks at one more byte and either consumes it or hands it back
/// to `Normal`. (`repr(u8)`: the state is a byte of its own, tested with one comparison.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Lex {
    /// Parse only: inside the statement name, before its NUL.
    Name,
    /// Between tokens.
    Normal,
    /// After a `-` that may start a `--` comment.
    Dash,
    /// After a `/` that may start a `/*` comment.
    Slash,
    /// Inside `-- ...`, up to the end of the line.
    LineComment,
    /// Inside `/* */`, `depth` levels deep.
    Block,
    /// Inside a comment after a `/`: a `*` opens one more level.
    BlockSlash,
    /// Inside a comment after one or more `*`: a `/` closes one level.
    BlockStar,
    /// Inside an unquoted word that the previous chunk ended, its bytes in `word`.
    Word,
    /// Inside `"..."` (`U&"..."` when `unicode`), the name so far in `word`.
    Quoted { unicode: bool },
    /// After a `"` inside a quoted identifier: `""` is a quote, anything else ends it.
    QuotedEnd { unicode: bool },
    /// Inside a `'...'` string.
    Str(StrKind),
    /// After a `'` inside a string: `''` is a quote, anything else ends it.
    StrEnd(StrKind),
    /// After a backslash in an escape string: the next byte is literal.
    StrBackslash,
    /// After the one-letter word `u` (in `word`) ended by `&`: `U&'...'` or `U&"..."` may
    /// follow.
    UAmp,
    /// After a `$` outside a word: a dollar-quote delimiter, a parameter (`$1`) or a lone `$`.
    Dollar,
    /// Reading an opening delimiter's tag into `word`.
    DollarTag,
    /// Inside a dollar quote whose tag is in `word`. After a `$`, `candidate` counts the tag
    /// bytes matched so far; `None` when no closing delimiter can be in progress.
    DollarBody { candidate: Option<u32> },
    /// The SQL text ended (its NUL): the rest of the body is ignored.
    Done,
}

/// One token, as the statement grammar sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Word(Kw),
    /// Any single byte of punctuation, an operator byte or a digit.
    Symbol(u8),
    /// A string constant of any kind, dollar-quoted included.
    Str,
}

impl Token {
    /// Once a statement's first words have decided (`Head::Rest`), this token can neither
    /// reveal anything nor change what the next one means: [`Statement::anywhere`] gives
    /// nothing for it and [`Prev::of`] gives `Other`. Most tokens are so.
    fn inert_in_rest(self) -> bool {
        match self {
            Token::Word(kw) => !kw.matters_in_rest(),
            Token::Symbol(b) => b != b';',
            Token::Str => true,
        }
    }

    /// As a statement's first token, this one decides it (`Head::Rest`) and is otherwise
    /// inert: no statement head (`SELECT`, `UPDATE`, `(`...).
    fn inert_at_start(self) -> bool {
        match self {
            Token::Word(kw) => !kw.matters_at_start(),
            _ => self.inert_in_rest(),
        }
    }
}

/// The words the grammar distinguishes; everything else is `Ident`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kw {
    Ident,
    // Statement heads.
    Set,
    Reset,
    Discard,
    Listen,
    Unlisten,
    Deallocate,
    Prepare,
    Load,
    Declare,
    Close,
    // Inside statements.
    Local,
    Session,
    To,
    From,
    Time,
    Zone,
    Names,
    Transaction,
    Constraints,
    All,
    /// `TEMP` or `TEMPORARY`.
    Temp,
    Plans,
    Sequences,
    Create,
    Replace,
    Global,
    Into,
    With,
    Hold,
    /// `ROLE`, and `AUTHORIZATION` after `SET SESSION`.
    Role,
    Authorization,
    // Names that count quoted too (identifiers, not keywords).
    /// A parameter the pooler re-applies itself.
    Tracked,
    PgTemp,
    SetConfig,
    AdvisoryLock,
    AdvisoryUnlockAll,
    /// The parameter `role` or `session_authorization` by name.
    SessionAuthorization,
    /// `DATABASE`: no rule here reads it. The scanner notes it for the database-DDL sieve
    /// ([`StateScanner::finish_noting_database`]) and hands the grammar an `Ident`.
    Database,
}

/// The spelling of every [`Kw`] but `Ident`, lowercase, shortest first (checked at compile
/// time, in [`BY_SHAPE`]). `pg_temp_<digits>` is matched apart, in [`Kw::of`].
const KEYWORDS: &[(&[u8], Kw)] = &[
    (b"to", Kw::To),
    (b"set", Kw::Set),
    (b"all", Kw::All),
    (b"load", Kw::Load),
    (b"from", Kw::From),
    (b"time", Kw::Time),
    (b"zone", Kw::Zone),
    (b"temp", Kw::Temp),
    (b"into", Kw::Into),
    (b"with", Kw::With),
    (b"hold", Kw::Hold),
    (b"role", Kw::Role),
    (b"reset", Kw::Reset),
    (b"close", Kw::Close),
    (b"local", Kw::Local),
    (b"names", Kw::Names),
    (b"plans", Kw::Plans),
    (b"listen", Kw::Listen),
    (b"create", Kw::Create),
    (b"global", Kw::Global),
    (b"discard", Kw::Discard),
    (b"prepare", Kw::Prepare),
    (b"declare", Kw::Declare),
    (b"session", Kw::Session),
    (b"replace", Kw::Replace),
    (b"pg_temp", Kw::PgTemp),
    (b"unlisten", Kw::Unlisten),
    (b"database", Kw::Database),
    (b"timezone", Kw::Tracked),
    (b"temporary", Kw::Temp),
    (b"sequences", Kw::Sequences),
    (b"datestyle", Kw::Tracked),
    (b"deallocate", Kw::Deallocate),
    (b"set_config", Kw::SetConfig),
    (b"transaction", Kw::Transaction),
    (b"constraints", Kw::Constraints),
    (b"intervalstyle", Kw::Tracked),
    (b"authorization", Kw::Authorization),
    (b"client_encoding", Kw::Tracked),
    (b"application_name", Kw::Tracked),
    (b"pg_advisory_lock", Kw::AdvisoryLock),
    (b"pg_try_advisory_lock", Kw::AdvisoryLock),
    (b"session_authorization", Kw::SessionAuthorization),
    (b"pg_advisory_unlock_all", Kw::AdvisoryUnlockAll),
    (b"pg_advisory_lock_shared", Kw::AdvisoryLock),
    (b"standard_conforming_strings", Kw::Tracked),
    (b"pg_try_advisory_lock_shared", Kw::AdvisoryLock),
];

/// The longest spelling in [`KEYWORDS`].
const LONGEST_KEYWORD: usize = {
    let mut longest = 0;
    let mut i = 0;
    while i < KEYWORDS.len() {
        if KEYWORDS[i].0.len() > longest {
            longest = KEYWORDS[i].0.len();
        }
        i += 1;
    }
    longest
};

/// `BY_SHAPE[n][l]`: the index in [`KEYWORDS`] of the first keyword of `n` bytes whose first
/// letter is `b'a' + l`, or `NO_KEYWORD`; the others of that shape follow it before the next
/// length starts. So a word is compared with one or two keywords at most. Building it checks
/// [`KEYWORDS`]' order and spelling.
const BY_SHAPE: [[u8; 26]; LONGEST_KEYWORD + 1] = {
    assert!(KEYWORDS.len() < NO_KEYWORD as usize);
    let mut shapes = [[NO_KEYWORD; 26]; LONGEST_KEYWORD + 1];
    let mut i = KEYWORDS.len();
    while i > 0 {
        i -= 1;
        let name = KEYWORDS[i].0;
        assert!(!name.is_empty() && name.len() <= WORD_CAP);
        assert!(
            i == 0 || KEYWORDS[i - 1].0.len() <= name.len(),
            "KEYWORDS: shortest first"
        );
        let mut at = 0;
        while at < name.len() {
            assert!(!name[at].is_ascii_uppercase(), "KEYWORDS: lowercase");
            at += 1;
        }
        assert!(name[0].is_ascii_lowercase(), "KEYWORDS: a letter first");
        // From the last to the first, so the first of a shape stays.
        shapes[name.len()][(name[0] - b'a') as usize] = i as u8;
    }
    shapes
};

const NO_KEYWORD: u8 = u8::MAX;

impl Kw {
    /// Classifies a word, ASCII case-insensitively (as PostgreSQL folds unquoted words; a
    /// quoted identifier is folded too, which can only over-report).
    fn of(word: &[u8]) -> Kw {
        let Some(first) = word.first().map(u8::to_ascii_lowercase) else {
            return Kw::Ident;
        };
        let start = BY_SHAPE
            .get(word.len())
            .and_then(|by_letter| by_letter.get(usize::from(first.wrapping_sub(b'a'))))
            .map_or(usize::MAX, |&start| usize::from(start));
        for &(name, kw) in KEYWORDS.get(start..).unwrap_or_default() {
            if name.len() != word.len() {
                break;
            }
            if name.first() == Some(&first) && name.eq_ignore_ascii_case(word) {
                return kw;
            }
        }
        // A session's temporary schema by its real name, pg_temp_<backend slot>.
        match word.split_at_checked(b"pg_temp_".len()) {
            Some((prefix, digits))
                if prefix.eq_ignore_ascii_case(b"pg_temp_")
                    && !digits.is_empty()
                    && digits.iter().all(u8::is_ascii_digit) =>
            {
                Kw::PgTemp
            }
            _ => Kw::Ident,
        }
    }

    /// A quoted identifier is never a keyword, but still names a function, schema or parameter.
    fn quoted(self) -> Kw {
        match self {
            Kw::Tracked
            | Kw::PgTemp
            | Kw::SetConfig
            | Kw::AdvisoryLock
            | Kw::AdvisoryUnlockAll
            | Kw::SessionAuthorization => self,
            Kw::Role => Kw::SessionAuthorization,
            _ => Kw::Ident,
        }
    }

    /// Whether this word can count as a statement's first: a statement head, or a word that
    /// counts anywhere ([`Statement::first`] looks at no others).
    const fn matters_at_start(self) -> bool {
        self.matters_in_rest()
            || matches!(
                self,
                Kw::Set
                    | Kw::Reset
                    | Kw::Discard
                    | Kw::Listen
                    | Kw::Unlisten
                    | Kw::Deallocate
                    | Kw::Prepare
                    | Kw::Load
                    | Kw::Declare
                    | Kw::Close
            )
    }

    /// Whether this word can count after a statement's first words have decided: the names
    /// counted anywhere, `TEMP`, and the words that make a `TEMP` after them count
    /// ([`Statement::anywhere`] and [`Prev::of`] look at no others).
    const fn matters_in_rest(self) -> bool {
        matches!(
            self,
            Kw::SetConfig
                | Kw::AdvisoryLock
                | Kw::AdvisoryUnlockAll
                | Kw::PgTemp
                | Kw::Database
                | Kw::Temp
                | Kw::Create
                | Kw::Replace
                | Kw::Global
                | Kw::Local
                | Kw::Into
                | Kw::With
        )
    }
}

/// Cheap tests that rule out almost every word that cannot matter where it is, so that most
/// words are not looked up at all. One sieve is for a statement's first word
/// ([`Kw::matters_at_start`]), one for its body (`Head::Rest`, [`Kw::matters_in_rest`]). Each
/// spelling that matters there (those [`KEYWORDS`], and `pg_temp_<digits>`) owns one bit, set
/// for its lengths and for each of its first three bytes (in either case): a word can be one
/// of them only if some bit is set for its length and for all three bytes.
///
/// Three more bits serve [`skip_inert_word`], which skips the words of a quiet body: `PUNCT`
/// flags a byte that cannot start a word, `PREFIX` a one-letter word before a quote or `&`
/// (`E'...'`, `U&'...'`), both of which do something; `WORD3` says that all three bytes are
/// the word's, so its end is looked for after them. They have no length, so
/// [`Sieve::passes`] never sees them. The tests never reject what matters; what passes is
/// looked at exactly.
struct Sieve {
    by_len: [u32; WORD_CAP + 1],
    by_byte: [[u32; 256]; 3],
}

const START_SIEVE: Sieve = Sieve::build(true);
const REST_SIEVE: Sieve = Sieve::build(false);

impl Sieve {
    const PUNCT: u32 = 1 << 31;
    const PREFIX: u32 = 1 << 30;
    const WORD3: u32 = 1 << 29;

    /// The sieve for a statement's first word (`start`) or for its body.
    const fn build(start: bool) -> Sieve {
        let mut sieve = Sieve {
            by_len: [0; WORD_CAP + 1],
            by_byte: [[0; 256]; 3],
        };
        let mut bit = 0;
        let mut i = 0;
        while i < KEYWORDS.len() {
            let (name, kw) = KEYWORDS[i];
            if (start && kw.matters_at_start()) || kw.matters_in_rest() {
                sieve = sieve.with(name, name.len(), name.len(), 1 << bit);
                bit += 1;
            }
            i += 1;
        }
        // pg_temp_<digits>: 9 bytes or more (a word longer than WORD_CAP names nothing).
        sieve = sieve.with(b"pg_", b"pg_temp_0".len(), WORD_CAP, 1 << bit);
        assert!(1 << bit < Self::WORD3, "Sieve: at most 29 spellings");
        let mut b = 0;
        while b < 256 {
            let byte = b as u8;
            // Each of the three bits is set for every byte at the positions it does not test.
            sieve.by_byte[0][b] |= if is_ident_start(byte) {
                Self::WORD3
            } else {
                Self::PUNCT
            };
            sieve.by_byte[1][b] |= Self::PUNCT;
            sieve.by_byte[2][b] |= Self::PUNCT | Self::PREFIX;
            if matches!(byte.to_ascii_lowercase(), b'e' | b'b' | b'x' | b'n' | b'u') {
                sieve.by_byte[0][b] |= Self::PREFIX;
            }
            if matches!(byte, b'\'' | b'&') {
                sieve.by_byte[1][b] |= Self::PREFIX;
            }
            if is_ident_cont(byte) {
                sieve.by_byte[1][b] |= Self::WORD3;
                sieve.by_byte[2][b] |= Self::WORD3;
            }
            b += 1;
        }
        sieve
    }

    /// Marks the spelling that starts with `name`'s first three bytes and has `shortest` to
    /// `longest` bytes with `bit`.
    const fn with(mut self, name: &[u8], shortest: usize, longest: usize, bit: u32) -> Sieve {
        assert!(name.len() >= 3, "Sieve: spellings of 3 bytes or more");
        let mut len = shortest;
        while len <= longest {
            self.by_len[len] |= bit;
            len += 1;
        }
        let mut at = 0;
        while at < 3 {
            self.by_byte[at][name[at] as usize] |= bit;
            self.by_byte[at][name[at].to_ascii_uppercase() as usize] |= bit;
            at += 1;
        }
        self
    }

    /// False only if the word `word` is none of the spellings that matter.
    fn passes(&self, word: &[u8]) -> bool {
        let [a, b, c, ..] = *word else {
            return false;
        };
        self.by_len_of(word.len()) & self.starts(a, b, c) != 0
    }

    /// The spellings of `len` bytes.
    fn by_len_of(&self, len: usize) -> u32 {
        self.by_len.get(len).copied().unwrap_or(0)
    }

    /// The spellings (and `PUNCT`, `PREFIX`, `WORD3`) that a token starting with the bytes
    /// `a`, `b`, `c` may be.
    fn starts(&self, a: u8, b: u8, c: u8) -> u32 {
        self.by_byte[0][usize::from(a)]
            & self.by_byte[1][usize::from(b)]
            & self.by_byte[2][usize::from(c)]
    }
}

/// What a word (quoted or not, as written) means to the grammar at `head`. A word longer than
/// `WORD_CAP` is longer than anything we look for (and than PostgreSQL keeps).
fn word_kw(head: Head, word: &[u8]) -> Kw {
    let sieve = match head {
        Head::Start => &START_SIEVE,
        Head::Rest => &REST_SIEVE,
        _ => {
            if word.len() > WORD_CAP {
                return Kw::Ident;
            }
            return Kw::of(word);
        }
    };
    // The sieves know no spelling longer than `WORD_CAP`.
    if !sieve.passes(word) {
        return Kw::Ident;
    }
    Kw::of(word)
}

/// The statement grammar: what a statement's first words, and a few words anywhere in it, say.
/// Fed one token at a time; returns what each token revealed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Statement {
    head: Head,
    /// What the previous token allows the next to mean.
    prev: Prev,
}

/// Progress through a statement's first words. (`repr(u8)` keeps the variant in a byte of its
/// own, so that testing for `Rest` or `Start` on the hot path is one comparison.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Head {
    /// No token yet.
    Start,
    Set,
    /// `SET LOCAL`: transaction-scoped, unless a name follows (`SET local.x = 1`).
    SetLocal,
    /// `SET SESSION`: session-scoped; or the start of a name (`SET session.x = 1`).
    SetSession,
    /// `SET [SESSION] word`: the next token says whether `word` was a name or a keyword.
    SetName(SetWord),
    Reset,
    Discard,
    Unlisten,
    Deallocate,
    DeallocatePrepare,
    Prepare,
    /// `PREPARE TRANSACTION`: two-phase commit if a string follows, else a statement named
    /// `transaction`.
    PrepareTransaction,
    Close,
    /// A `DECLARE`, for the whole statement: `WITH HOLD` may come anywhere before `FOR`.
    Declare,
    /// The first words have decided; only words anywhere still count.
    Rest,
}

/// The word after `SET [SESSION]`, as far as the decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetWord {
    Tracked,
    Time,
    Names,
    Transaction,
    Constraints,
    /// `ROLE`, `AUTHORIZATION` (after `SESSION`), `role` or `session_authorization`.
    Role,
    /// Any other name, or SCHEMA, SESSION, XML, CATALOG...: all pin.
    Other,
}

impl SetWord {
    fn of(kw: Kw) -> SetWord {
        match kw {
            Kw::Tracked => SetWord::Tracked,
            Kw::Time => SetWord::Time,
            Kw::Names => SetWord::Names,
            Kw::Transaction => SetWord::Transaction,
            Kw::Constraints => SetWord::Constraints,
            Kw::Role | Kw::Authorization | Kw::SessionAuthorization => SetWord::Role,
            _ => SetWord::Other,
        }
    }

    /// `SET word` with nothing after it (the statement ended).
    fn alone(self) -> Effects {
        match self {
            // `SET NAMES` alone sets client_encoding to its default.
            SetWord::Tracked | SetWord::Names => Effects::SET_TRACKED,
            SetWord::Transaction | SetWord::Constraints => Effects::NONE,
            SetWord::Role => Effects::SET_ROLE,
            SetWord::Time | SetWord::Other => Effects::SET,
        }
    }

    /// `SET word next ...`.
    fn then(self, next: Token) -> Effects {
        if next == Token::Symbol(b'.') {
            // A dotted (extension) name; none of the tracked parameters has one.
            return Effects::SET;
        }
        if assigns(next) {
            return match self {
                SetWord::Tracked => Effects::SET_TRACKED,
                SetWord::Role => Effects::SET_ROLE,
                _ => Effects::SET,
            };
        }
        match (self, next) {
            (SetWord::Time, Token::Word(Kw::Zone)) | (SetWord::Names, _) => Effects::SET_TRACKED,
            (SetWord::Transaction | SetWord::Constraints, _) => Effects::NONE,
            (SetWord::Role, _) => Effects::SET_ROLE,
            _ => Effects::SET,
        }
    }
}

/// The token after a parameter name in `SET name {TO | = | FROM CURRENT}`.
fn assigns(token: Token) -> bool {
    matches!(
        token,
        Token::Symbol(b'=') | Token::Word(Kw::To) | Token::Word(Kw::From)
    )
}

/// What the previous token of the statement was, for the rules on words anywhere.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prev {
    Other,
    /// CREATE, REPLACE, GLOBAL, LOCAL or INTO: a TEMP here makes a temporary object.
    TempIntro,
    With,
}

impl Prev {
    fn of(token: Token) -> Prev {
        match token {
            Token::Word(Kw::Create | Kw::Replace | Kw::Global | Kw::Local | Kw::Into) => {
                Prev::TempIntro
            }
            Token::Word(Kw::With) => Prev::With,
            _ => Prev::Other,
        }
    }
}

impl Statement {
    const NEW: Statement = Statement {
        head: Head::Start,
        prev: Prev::Other,
    };

    /// One token of the statement, or the `;` that ends it.
    fn token(&mut self, token: Token) -> Effects {
        if token == Token::Symbol(b';') {
            return self.end();
        }
        let anywhere = self.anywhere(token);
        let (head, first_words) = self.advance(token);
        self.head = head;
        self.prev = Prev::of(token);
        anywhere | first_words
    }

    /// The statement ended (`;`, or the end of the SQL text): what a pending head means alone.
    fn end(&mut self) -> Effects {
        let found = match self.head {
            Head::Set | Head::SetSession => Effects::SET,
            Head::Prepare | Head::PrepareTransaction => Effects::PREPARE,
            Head::SetName(word) => word.alone(),
            // `DEALLOCATE prepare`: the statement named "prepare".
            Head::DeallocatePrepare => Effects::DEALLOCATE,
            _ => Effects::NONE,
        };
        *self = Statement::NEW;
        found
    }

    /// The words that count wherever they are.
    fn anywhere(&self, token: Token) -> Effects {
        let Token::Word(kw) = token else {
            return Effects::NONE;
        };
        match kw {
            Kw::SetConfig => Effects::SET_CONFIG,
            Kw::AdvisoryLock => Effects::ADVISORY_LOCK,
            Kw::AdvisoryUnlockAll => Effects::ADVISORY_UNLOCK_ALL,
            Kw::PgTemp => Effects::TEMP,
            Kw::Temp if self.prev == Prev::TempIntro => Effects::TEMP,
            Kw::Hold if self.prev == Prev::With && self.head == Head::Declare => {
                Effects::HOLD_CURSOR
            }
            _ => Effects::NONE,
        }
    }

    /// The first words: the next head state and what it revealed.
    fn advance(&self, token: Token) -> (Head, Effects) {
        use Effects as E;
        match (self.head, token) {
            (Head::Start, Token::Word(kw)) => Self::first(kw),
            (Head::Start, _) => (Head::Rest, E::NONE),

            (Head::Set, Token::Word(Kw::Local)) => (Head::SetLocal, E::NONE),
            (Head::Set, Token::Word(Kw::Session)) => (Head::SetSession, E::NONE),
            // LOCAL or SESSION starting a name: `SET local.x = 1`, `SET session TO 1`.
            (Head::SetLocal | Head::SetSession, t) if assigns(t) || t == Token::Symbol(b'.') => {
                (Head::Rest, E::SET)
            }
            (Head::SetLocal, _) => (Head::Rest, E::NONE),
            (Head::Set | Head::SetSession, Token::Word(kw)) => {
                (Head::SetName(SetWord::of(kw)), E::NONE)
            }
            (Head::Set | Head::SetSession, _) => (Head::Rest, E::SET),
            (Head::SetName(word), t) => (Head::Rest, word.then(t)),

            (Head::Reset, Token::Word(Kw::All)) => (Head::Rest, E::RESET_ALL),
            (Head::Reset, _) => (Head::Rest, E::RESET),
            (Head::Discard, Token::Word(Kw::All)) => (Head::Rest, E::DISCARD_ALL),
            (Head::Discard, Token::Word(Kw::Temp)) => (Head::Rest, E::DISCARD_TEMP),
            (Head::Discard, Token::Word(Kw::Plans | Kw::Sequences)) => {
                (Head::Rest, E::DISCARD_OTHER)
            }
            (Head::Discard, _) => (Head::Rest, E::NONE),
            (Head::Unlisten, Token::Symbol(b'*')) => (Head::Rest, E::UNLISTEN_ALL),
            (Head::Unlisten, Token::Word(_)) => (Head::Rest, E::UNLISTEN),
            (Head::Unlisten, _) => (Head::Rest, E::NONE),
            (Head::Deallocate, Token::Word(Kw::Prepare)) => (Head::DeallocatePrepare, E::NONE),
            (Head::Deallocate | Head::DeallocatePrepare, Token::Word(Kw::All)) => {
                (Head::Rest, E::DEALLOCATE_ALL)
            }
            (Head::Deallocate | Head::DeallocatePrepare, Token::Word(_)) => {
                (Head::Rest, E::DEALLOCATE)
            }
            (Head::Deallocate | Head::DeallocatePrepare, _) => (Head::Rest, E::NONE),
            (Head::Prepare, Token::Word(Kw::Transaction)) => (Head::PrepareTransaction, E::NONE),
            (Head::PrepareTransaction, Token::Str) => (Head::Rest, E::NONE),
            (Head::Prepare | Head::PrepareTransaction, _) => (Head::Rest, E::PREPARE),
            (Head::Close, Token::Word(Kw::All)) => (Head::Rest, E::CLOSE_ALL),
            (Head::Close, _) => (Head::Rest, E::NONE),

            (Head::Declare, _) => (Head::Declare, E::NONE),
            (Head::Rest, _) => (Head::Rest, E::NONE),
        }
    }

    /// A statement's first word.
    fn first(kw: Kw) -> (Head, Effects) {
        match kw {
            Kw::Set => (Head::Set, Effects::NONE),
            Kw::Reset => (Head::Reset, Effects::NONE),
            Kw::Discard => (Head::Discard, Effects::NONE),
            Kw::Listen => (Head::Rest, Effects::LISTEN),
            Kw::Unlisten => (Head::Unlisten, Effects::NONE),
            Kw::Deallocate => (Head::Deallocate, Effects::NONE),
            Kw::Prepare => (Head::Prepare, Effects::NONE),
            Kw::Load => (Head::Rest, Effects::LOAD),
            Kw::Declare => (Head::Declare, Effects::NONE),
            Kw::Close => (Head::Close, Effects::NONE),
            _ => (Head::Rest, Effects::NONE),
        }
    }
}

/// PostgreSQL's `ident_start`: a letter, `_` or any byte of a multibyte character.
const fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// `dolq_cont`: a dollar-quote tag byte after the first.
const fn is_tag_cont(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

/// `ident_cont`: a word byte after the first (unlike a tag, a word may contain `$`).
const fn is_ident_cont(b: u8) -> bool {
    is_tag_cont(b) || b == b'$'
}

/// Whitespace between tokens (`\v` too, as PostgreSQL 16 does; PostgreSQL 15 rejects it).
const fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// What a byte does between tokens (in `Lex::Normal`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Space,
    /// Punctuation, an operator byte or a digit, but not `;`: a token of its own (a number's
    /// digits too: the grammar never needs a number).
    Symbol,
    /// `ident_start`: a word begins.
    Word,
    Semicolon,
    /// The end of the SQL text.
    Nul,
    Quote,
    DoubleQuote,
    Dollar,
    Dash,
    Slash,
}

impl Class {
    const fn of(b: u8) -> Class {
        if is_space(b) {
            return Class::Space;
        }
        if is_ident_start(b) {
            return Class::Word;
        }
        match b {
            b';' => Class::Semicolon,
            0 => Class::Nul,
            b'\'' => Class::Quote,
            b'"' => Class::DoubleQuote,
            b'$' => Class::Dollar,
            b'-' => Class::Dash,
            b'/' => Class::Slash,
            _ => Class::Symbol,
        }
    }
}

/// The byte predicates the hot loops ask, as tables: one load per byte instead of a chain of
/// comparisons.
const CLASS: [Class; 256] = {
    let mut table = [Class::Symbol; 256];
    let mut b = 0;
    while b < table.len() {
        table[b] = Class::of(b as u8);
        b += 1;
    }
    table
};
const IDENT_CONT: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < table.len() {
        table[b] = is_ident_cont(b as u8);
        b += 1;
    }
    table
};

/// Where the word bytes (`ident_cont`) starting at `at` end: the index of the first other
/// byte, or `input.len()`.
fn word_end(input: &[u8], mut at: usize) -> usize {
    let is_word = |b: u8| IDENT_CONT[usize::from(b)];
    // Four bytes per loop test: most words are longer than a byte or two.
    while at + 4 <= input.len() {
        if !is_word(input[at]) {
            return at;
        }
        if !is_word(input[at + 1]) {
            return at + 1;
        }
        if !is_word(input[at + 2]) {
            return at + 2;
        }
        if !is_word(input[at + 3]) {
            return at + 3;
        }
        at += 4;
    }
    while at < input.len() && is_word(input[at]) {
        at += 1;
    }
    at
}

/// Whitespace or a symbol: nothing, in a quiet statement body.
fn is_quiet_byte(b: u8) -> bool {
    matches!(CLASS[usize::from(b)], Class::Space | Class::Symbol)
}

/// In a quiet statement body (see [`StateScanner::is_quiet`]): how many bytes at the start of
/// `input` can do nothing. Whitespace and symbols do nothing there, and neither does a word
/// that [`REST_SIEVE`] rules out. A word that may go on in the next chunk is left to the
/// caller, as PostgreSQL would read it together with what follows.
#[inline(never)]
fn skip_quiet(input: &[u8]) -> usize {
    let mut at = 0;
    loop {
        while let Some(&b) = input.get(at) {
            if !is_quiet_byte(b) {
                break;
            }
            at += 1;
        }
        match skip_inert_word(input, at, &REST_SIEVE) {
            Some(end) => at = end,
            None => return at,
        }
    }
}

/// At a statement's start, with nothing pending: how many bytes at the start of `input` are
/// whitespace and then a first word that [`START_SIEVE`] rules out, or 0. Such a word decides
/// the statement (it is no head: `SELECT`, `UPDATE`...) and does nothing else.
fn skip_first_word(input: &[u8]) -> usize {
    let mut at = 0;
    while at < input.len() && CLASS[usize::from(input[at])] == Class::Space {
        at += 1;
    }
    skip_inert_word(input, at, &START_SIEVE).unwrap_or(0)
}

/// If a word that `sieve` rules out starts at `input[at]` and ends in `input`, the index of
/// the byte after it. Most words are ruled out by their first three bytes, before their end
/// is even looked for; for the others, their length decides. `None` for anything else.
#[inline(always)]
fn skip_inert_word(input: &[u8], at: usize, sieve: &Sieve) -> Option<usize> {
    let [b, b1, b2, ..] = *input.get(at..)? else {
        return None;
    };
    let starts = sieve.starts(b, b1, b2);
    if starts & (Sieve::PUNCT | Sieve::PREFIX) != 0 {
        return None;
    }
    let from = if starts & Sieve::WORD3 != 0 {
        at + 3
    } else {
        at + 1
    };
    let end = word_end(input, from);
    let spellings = starts & !Sieve::WORD3;
    if end == input.len() || (spellings != 0 && sieve.by_len_of(end - at) & spellings != 0) {
        return None;
    }
    Some(end)
}

/// Where the body of a string of `kind`, from the start of `input`, ends.
enum StrScan {
    /// Its closing quote is the byte before `input[len]`, which exists and is no quote.
    Closed(usize),
    /// The SQL text ends (its NUL) inside the string.
    Nul,
    /// `input` ends inside the string; the lexer goes on in this state.
    Open(Lex),
}

/// Strings shorter than this are searched byte by byte: their end is found before `memchr`
/// would have set up.
const SHORT_STR: usize = 16;

fn scan_str(input: &[u8], kind: StrKind) -> StrScan {
    let mut at = 0;
    loop {
        let Some(special) = find_in_str(input.get(at..).unwrap_or_default(), kind) else {
            return StrScan::Open(Lex::Str(kind));
        };
        at += special;
        match (input.get(at), input.get(at + 1)) {
            (Some(b'\''), Some(b'\'')) => at += 2,
            (Some(b'\''), Some(_)) => return StrScan::Closed(at + 1),
            (Some(b'\''), None) => return StrScan::Open(Lex::StrEnd(kind)),
            // A backslash of an escape string: the next byte is the string's, whatever it is.
            (Some(b'\\'), Some(0)) => return StrScan::Nul,
            (Some(b'\\'), Some(_)) => at += 2,
            (Some(b'\\'), None) => return StrScan::Open(Lex::StrBackslash),
            _ => return StrScan::Nul,
        }
    }
}

/// The first byte in `input` that may end a string of `kind`: a quote, a NUL, or a backslash
/// in an escape string.
fn find_in_str(input: &[u8], kind: StrKind) -> Option<usize> {
    let escapes = kind == StrKind::Escape;
    let head = input.get(..SHORT_STR).unwrap_or(input);
    if let Some(at) = head
        .iter()
        .position(|&b| b == b'\'' || b == 0 || (escapes && b == b'\\'))
    {
        return Some(at);
    }
    let tail = input.get(head.len()..).unwrap_or_default();
    let found = if escapes {
        memchr3(b'\'', b'\\', 0, tail)
    } else {
        memchr2(b'\'', 0, tail)
    };
    found.map(|at| head.len() + at)
}

/// `usize` to the saturating `u32` lengths kept in the scanner.
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl StateScanner {
    /// For a Query body: the SQL text, NUL-terminated.
    pub fn query() -> Self {
        Self::starting(Lex::Normal)
    }

    /// For a Parse body: the statement name (NUL-terminated), the SQL text (NUL-terminated),
    /// then parameter types, which are ignored.
    pub fn parse() -> Self {
        Self::starting(Lex::Name)
    }

    fn starting(lex: Lex) -> Self {
        StateScanner {
            word: [0; WORD_CAP],
            word_len: 0,
            depth: 0,
            found: Effects::NONE,
            lex,
            continues: None,
            plain: StrKind::Standard,
            statement: Statement::NEW,
            database: false,
        }
    }

    /// The session's standard_conforming_strings (default on). When off, a backslash in a plain
    /// `'...'` string escapes the next byte, as in `E'...'`. Set it before the first `feed`.
    pub fn standard_conforming_strings(mut self, on: bool) -> Self {
        self.plain = if on {
            StrKind::Standard
        } else {
            StrKind::Escape
        };
        self
    }

    /// Feeds the next bytes of the message body (any split, including 1 byte at a time).
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut at = 0;
        while let Some(rest) = chunk.get(at..).filter(|rest| !rest.is_empty()) {
            // A step consumes nothing only when it hands its byte to another state, and every
            // such chain ends in a state that consumes it (Normal always does).
            at += self.step(rest);
        }
    }

    /// The message body ended: everything found. A statement still open when the body ends
    /// counts too (a missing NUL is treated as the end of the SQL text).
    pub fn finish(mut self) -> Effects {
        self.close()
    }

    /// [`StateScanner::finish`], and whether the body holds the keyword `DATABASE` (unquoted,
    /// outside strings and comments): when it does not, no statement in it is one that
    /// `crate::database_ddl::targets` names a database for. The per-message path asks this
    /// instead of searching the body a second time.
    pub fn finish_noting_database(mut self) -> (Effects, bool) {
        let effects = self.close();
        (effects, self.database)
    }

    /// `finish`, in place (the one-shot classifiers use it so as not to move the scanner).
    fn close(&mut self) -> Effects {
        // Most bodies end with their NUL, which already closed the SQL text.
        if self.lex != Lex::Done {
            self.end_of_sql();
        }
        self.found
    }

    /// What has been found so far (a statement still open may add more).
    pub fn found(&self) -> Effects {
        self.found
    }

    /// Handles the start of `input` (never empty) in the current state; returns the bytes used.
    fn step(&mut self, input: &[u8]) -> usize {
        let Some(&b) = input.first() else {
            return 0;
        };
        match self.lex {
            Lex::Name => self.step_name(input),
            Lex::Normal => self.step_normal(input),
            Lex::Dash => self.step_maybe_comment(b, b'-', Lex::LineComment),
            Lex::Slash => self.step_maybe_comment(b, b'*', Lex::Block),
            Lex::LineComment => self.step_line_comment(input),
            Lex::Block => self.step_block(input),
            Lex::BlockSlash => self.step_block_slash(b),
            Lex::BlockStar => self.step_block_star(b),
            Lex::Word => self.step_word(input),
            Lex::Quoted { unicode } => self.step_quoted(input, unicode),
            Lex::QuotedEnd { unicode } => self.step_quoted_end(b, unicode),
            Lex::Str(kind) => self.step_str(input, kind),
            Lex::StrEnd(kind) => self.step_str_end(input, kind),
            Lex::StrBackslash => self.step_str_backslash(input),
            Lex::UAmp => self.step_u_amp(b),
            Lex::Dollar => self.step_dollar(b),
            Lex::DollarTag => self.step_dollar_tag(input),
            Lex::DollarBody { candidate } => self.step_dollar_body(input, candidate),
            Lex::Done => input.len(),
        }
    }

    /// Parse's statement name: any byte before the first NUL makes it a named statement.
    fn step_name(&mut self, input: &[u8]) -> usize {
        let end = memchr(0, input);
        if end.unwrap_or(input.len()) > 0 {
            self.found |= Effects::NAMED_STATEMENT;
        }
        match end {
            Some(at) => {
                self.lex = Lex::Normal;
                at + 1
            }
            None => input.len(),
        }
    }

    /// Between tokens: consumes whitespace, punctuation, whole words and whole strings in one
    /// loop (quiet stretches in [`skip_quiet`]), and returns at the first byte that enters
    /// another state (or the end of `input`).
    fn step_normal(&mut self, input: &[u8]) -> usize {
        let mut at = 0;
        loop {
            if self.is_quiet() {
                at += skip_quiet(input.get(at..).unwrap_or_default());
            } else if self.is_fresh() {
                let first = skip_first_word(input.get(at..).unwrap_or_default());
                if first > 0 {
                    // What `token` does with such a word.
                    self.statement.head = Head::Rest;
                    at += first + skip_quiet(input.get(at + first..).unwrap_or_default());
                }
            }
            let Some(&b) = input.get(at) else {
                return input.len();
            };
            at += 1;
            match CLASS[usize::from(b)] {
                Class::Space => {}
                Class::Symbol | Class::Semicolon => {
                    self.token(Token::Symbol(b));
                }
                Class::Word => {
                    let start = at - 1;
                    at = word_end(input, at);
                    let Some(&next) = input.get(at) else {
                        // The word may go on in the next chunk.
                        self.word_len = 0;
                        self.push_word(&input[start..]);
                        self.lex = Lex::Word;
                        return at;
                    };
                    at += self.end_word(&input[start..at], next);
                    if !matches!(self.lex, Lex::Normal) {
                        return at;
                    }
                }
                Class::Nul => {
                    // Nothing after the SQL text counts.
                    self.end_of_sql();
                    return input.len();
                }
                Class::DoubleQuote => {
                    self.word_len = 0;
                    self.lex = Lex::Quoted { unicode: false };
                    return at;
                }
                Class::Quote => {
                    // The whole string, when it ends in this chunk.
                    let kind = match self.continues.take() {
                        Some(kind) => kind,
                        None => {
                            self.token(Token::Str);
                            self.plain
                        }
                    };
                    let body = input.get(at..).unwrap_or_default();
                    at = self.after_str(scan_str(body, kind), kind, at, input);
                    if !matches!(self.lex, Lex::Normal) {
                        return at;
                    }
                }
                // Decided here when the next byte is in this chunk and cannot continue them
                // (the common `$1`, `a - b`, `a / b`); the states decide otherwise.
                Class::Dollar => match input.get(at) {
                    Some(&next) if next != b'$' && !is_ident_start(next) => {
                        self.token(Token::Symbol(b));
                    }
                    _ => {
                        self.lex = Lex::Dollar;
                        return at;
                    }
                },
                Class::Dash => match input.get(at) {
                    Some(&next) if next != b'-' => {
                        self.token(Token::Symbol(b));
                    }
                    _ => {
                        self.lex = Lex::Dash;
                        return at;
                    }
                },
                Class::Slash => match input.get(at) {
                    Some(&next) if next != b'*' => {
                        self.token(Token::Symbol(b));
                    }
                    _ => {
                        self.lex = Lex::Slash;
                        return at;
                    }
                },
            }
        }
    }

    /// A statement body where only a word that matters or a byte that starts a string, a
    /// comment, a quoted identifier or a dollar sign (or ends the statement or the text) can
    /// change anything: the first words have decided, the previous token allows nothing, and
    /// no string may continue. [`skip_quiet`] runs over the rest.
    fn is_quiet(&self) -> bool {
        self.statement.head == Head::Rest
            && self.statement.prev == Prev::Other
            && self.continues.is_none()
    }

    /// A statement's start, where a first word that is no head makes it quiet.
    fn is_fresh(&self) -> bool {
        self.statement == Statement::NEW && self.continues.is_none()
    }

    /// After `-` or `/`: the comment opener's second byte, or the first byte was a symbol.
    fn step_maybe_comment(&mut self, b: u8, second: u8, comment: Lex) -> usize {
        if b == second {
            self.depth = 1;
            self.lex = comment;
            return 1;
        }
        let first = if comment == Lex::Block { b'/' } else { b'-' };
        self.token(Token::Symbol(first));
        self.lex = Lex::Normal;
        0
    }

    fn step_line_comment(&mut self, input: &[u8]) -> usize {
        match memchr3(b'\n', b'\r', 0, input) {
            Some(at) => {
                if input[at] == 0 {
                    self.end_of_sql();
                } else {
                    self.lex = Lex::Normal;
                }
                at + 1
            }
            None => input.len(),
        }
    }

    fn step_block(&mut self, input: &[u8]) -> usize {
        match memchr3(b'*', b'/', 0, input) {
            Some(at) => {
                match input[at] {
                    b'*' => self.lex = Lex::BlockStar,
                    b'/' => self.lex = Lex::BlockSlash,
                    _ => self.end_of_sql(),
                }
                at + 1
            }
            None => input.len(),
        }
    }

    fn step_block_slash(&mut self, b: u8) -> usize {
        match b {
            // Comments nest in PostgreSQL.
            b'*' => {
                self.depth = self.depth.saturating_add(1);
                self.lex = Lex::Block;
            }
            b'/' => {}
            0 => self.end_of_sql(),
            _ => self.lex = Lex::Block,
        }
        1
    }

    fn step_block_star(&mut self, b: u8) -> usize {
        match b {
            b'/' => {
                self.depth = self.depth.saturating_sub(1);
                self.lex = if self.depth == 0 {
                    Lex::Normal
                } else {
                    Lex::Block
                };
            }
            b'*' => {}
            0 => self.end_of_sql(),
            _ => self.lex = Lex::Block,
        }
        1
    }

    /// The rest of a word the previous chunk cut.
    fn step_word(&mut self, input: &[u8]) -> usize {
        let len = word_end(input, 0);
        self.push_word(&input[..len]);
        let Some(&b) = input.get(len) else {
            return len;
        };
        if self.word_len == 1 && self.one_letter_prefix(self.word[0], b) {
            return len + 1;
        }
        self.emit_word(false);
        self.lex = Lex::Normal;
        len
    }

    /// The unquoted word `word` (all of it, as written) ended in `Normal` before the byte `b`;
    /// returns 1 if the word's end used `b`.
    fn end_word(&mut self, word: &[u8], b: u8) -> usize {
        if let [letter] = *word {
            if self.one_letter_prefix(letter, b) {
                return 1;
            }
        }
        let kw = word_kw(self.statement.head, word);
        let kw = self.note_database(kw);
        self.token(Token::Word(kw));
        0
    }

    /// `DATABASE` is noted and goes on as an identifier (no rule reads it).
    fn note_database(&mut self, kw: Kw) -> Kw {
        if kw == Kw::Database {
            self.database = true;
            Kw::Ident
        } else {
            kw
        }
    }

    /// A one-letter word `letter` ended by `b`: whether the two start a string or a Unicode
    /// literal (then `b` is used and the word is no token).
    fn one_letter_prefix(&mut self, letter: u8, b: u8) -> bool {
        match (letter.to_ascii_lowercase(), b) {
            // E'...' escape string; B'...', X'...' bit strings; N'...' national (plain).
            (b'e', b'\'') => self.start_string(StrKind::Escape),
            (b'b' | b'x', b'\'') => self.start_string(StrKind::Standard),
            (b'n', b'\'') => self.start_string(self.plain),
            (b'u', b'&') => {
                // Kept: if no quote follows, `u` is a word after all.
                self.start_word(letter);
                self.lex = Lex::UAmp;
            }
            _ => return false,
        }
        true
    }

    fn step_quoted(&mut self, input: &[u8], unicode: bool) -> usize {
        match memchr2(b'"', 0, input) {
            Some(at) => {
                self.push_word(&input[..at]);
                if input[at] == 0 {
                    // An unterminated identifier: a syntax error, nothing runs.
                    self.lex = Lex::Normal;
                    self.end_of_sql();
                } else {
                    self.lex = Lex::QuotedEnd { unicode };
                }
                at + 1
            }
            None => {
                self.push_word(input);
                input.len()
            }
        }
    }

    fn step_quoted_end(&mut self, b: u8, unicode: bool) -> usize {
        if b == b'"' {
            self.push_word(b"\"");
            self.lex = Lex::Quoted { unicode };
            return 1;
        }
        if unicode {
            self.found |= Effects::UNCERTAIN;
        }
        self.emit_word(true);
        self.lex = Lex::Normal;
        0
    }

    fn step_str(&mut self, input: &[u8], kind: StrKind) -> usize {
        self.after_str(scan_str(input, kind), kind, 0, input)
    }

    fn step_str_end(&mut self, input: &[u8], kind: StrKind) -> usize {
        if let Some((b'\'', body)) = input.split_first() {
            // `''`: a quote inside the string.
            return self.after_str(scan_str(body, kind), kind, 1, input);
        }
        self.lex = Lex::Normal;
        self.continues = Some(kind);
        0
    }

    fn step_str_backslash(&mut self, input: &[u8]) -> usize {
        match input.split_first() {
            Some((0, _)) | None => {
                self.end_of_sql();
                input.len()
            }
            // The escaped byte is the string's, whatever it is.
            Some((_, body)) => {
                let kind = StrKind::Escape;
                self.after_str(scan_str(body, kind), kind, 1, input)
            }
        }
    }

    /// Acts on how a string's body that starts `offset` bytes into `input` ended; returns the
    /// bytes of `input` used.
    fn after_str(&mut self, scan: StrScan, kind: StrKind, offset: usize, input: &[u8]) -> usize {
        match scan {
            StrScan::Closed(len) => {
                self.lex = Lex::Normal;
                self.continues = Some(kind);
                offset + len
            }
            StrScan::Nul => {
                self.end_of_sql();
                input.len()
            }
            StrScan::Open(lex) => {
                self.lex = lex;
                input.len()
            }
        }
    }

    fn step_u_amp(&mut self, b: u8) -> usize {
        match b {
            b'\'' => self.start_string(StrKind::Standard),
            b'"' => {
                self.word_len = 0;
                self.lex = Lex::Quoted { unicode: true };
            }
            _ => {
                // Not a Unicode literal: the word `u`, then the operator `&`.
                self.emit_word(false);
                self.token(Token::Symbol(b'&'));
                self.lex = Lex::Normal;
                return 0;
            }
        }
        1
    }

    fn step_dollar(&mut self, b: u8) -> usize {
        if b == b'$' {
            self.word_len = 0;
            self.open_dollar_quote();
            return 1;
        }
        if is_ident_start(b) {
            self.start_word(b);
            self.lex = Lex::DollarTag;
            return 1;
        }
        // A parameter (`$1`; its digits follow as symbols) or a lone `$`.
        self.token(Token::Symbol(b'$'));
        self.lex = Lex::Normal;
        0
    }

    fn step_dollar_tag(&mut self, input: &[u8]) -> usize {
        let len = input
            .iter()
            .position(|&b| !is_tag_cont(b))
            .unwrap_or(input.len());
        self.push_word(&input[..len]);
        match input.get(len) {
            Some(b'$') => {
                self.open_dollar_quote();
                len + 1
            }
            Some(_) => {
                // Not a delimiter: a lone `$`, then the tag's bytes are a word (which may still
                // prefix a string, as in `$e'...'`); the word state sees the byte that ended it.
                self.token(Token::Symbol(b'$'));
                self.lex = Lex::Word;
                len
            }
            None => len,
        }
    }

    fn open_dollar_quote(&mut self) {
        if self.word_len as usize > WORD_CAP {
            self.found |= Effects::UNCERTAIN;
        }
        self.token(Token::Str);
        self.lex = Lex::DollarBody { candidate: None };
    }

    fn step_dollar_body(&mut self, input: &[u8], mut candidate: Option<u32>) -> usize {
        let mut at = 0;
        if candidate.is_none() {
            match memchr2(b'$', 0, input) {
                Some(next) => at = next,
                None => return input.len(),
            }
        }
        while let Some(&b) = input.get(at) {
            at += 1;
            candidate = match (b, candidate) {
                (0, _) => {
                    self.end_of_sql();
                    return at;
                }
                (b'$', Some(matched)) if matched == self.word_len => {
                    self.lex = Lex::Normal;
                    return at;
                }
                (b'$', _) => Some(0),
                (_, Some(matched)) if self.tag_continues(matched, b) => Some(matched + 1),
                _ => {
                    self.lex = Lex::DollarBody { candidate: None };
                    return at;
                }
            };
        }
        self.lex = Lex::DollarBody { candidate };
        at
    }

    /// `b` is byte `matched` of the open quote's tag (past `WORD_CAP`: any tag byte).
    fn tag_continues(&self, matched: u32, b: u8) -> bool {
        if matched >= self.word_len || !is_tag_cont(b) {
            return false;
        }
        self.word.get(matched as usize).is_none_or(|&t| t == b)
    }

    fn start_string(&mut self, kind: StrKind) {
        self.token(Token::Str);
        self.lex = Lex::Str(kind);
    }

    fn start_word(&mut self, b: u8) {
        self.word_len = 0;
        self.push_word(&[b]);
    }

    /// Appends to the current word, keeping at most `WORD_CAP` bytes.
    fn push_word(&mut self, bytes: &[u8]) {
        let at = (self.word_len as usize).min(WORD_CAP);
        let kept = bytes.len().min(WORD_CAP - at);
        self.word[at..at + kept].copy_from_slice(&bytes[..kept]);
        self.word_len = self.word_len.saturating_add(len_u32(bytes.len()));
    }

    /// Hands the word in `word` to the grammar.
    fn emit_word(&mut self, quoted: bool) {
        // A word longer than `WORD_CAP` was not kept whole: an identifier (see `word_kw`).
        let kw = self
            .word
            .get(..self.word_len as usize)
            .map_or(Kw::Ident, |word| word_kw(self.statement.head, word));
        let kw = self.note_database(if quoted { kw.quoted() } else { kw });
        self.token(Token::Word(kw));
    }

    /// Hands a token to the grammar.
    #[inline(always)]
    fn token(&mut self, token: Token) -> &mut Self {
        self.continues = None;
        // The common cases, short-cut: what `Statement::token` would do (a test checks).
        match self.statement.head {
            Head::Rest if token.inert_in_rest() => self.statement.prev = Prev::Other,
            Head::Start if token.inert_at_start() => {
                self.statement = Statement {
                    head: Head::Rest,
                    prev: Prev::Other,
                };
            }
            // A statement that decided nothing ends with nothing pending.
            Head::Rest | Head::Start if token == Token::Symbol(b';') => {
                self.statement = Statement::NEW;
            }
            _ => self.found |= self.statement.token(token),
        }
        self
    }

    /// The SQL text ended (NUL or end of body): flush what is pending, close the statement.
    fn end_of_sql(&mut self) {
        match self.lex {
            Lex::Word => self.emit_word(false),
            Lex::UAmp => {
                self.emit_word(false);
                self.token(Token::Symbol(b'&'));
            }
            Lex::QuotedEnd { unicode } => {
                if unicode {
                    self.found |= Effects::UNCERTAIN;
                }
                self.emit_word(true);
            }
            Lex::Dash => {
                self.token(Token::Symbol(b'-'));
            }
            Lex::Slash => {
                self.token(Token::Symbol(b'/'));
            }
            Lex::Dollar => {
                self.token(Token::Symbol(b'$'));
            }
            Lex::DollarTag => {
                self.token(Token::Symbol(b'$')).emit_word(false);
            }
            // A Parse body cut inside its name has no SQL at all.
            Lex::Name | Lex::Done => return,
            _ => {}
        }
        self.found |= self.statement.end();
        self.lex = Lex::Done;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scanner_is_small() {
        assert!(
            size_of::<StateScanner>() <= 128,
            "{}",
            size_of::<StateScanner>()
        );
    }

    #[test]
    fn effects_set_operations() {
        let both = Effects::SET | Effects::RESET;
        assert!(both.contains(Effects::SET) && both.contains(Effects::RESET));
        assert!(!both.contains(Effects::SET | Effects::LISTEN));
        assert!(both.intersects(Effects::SET | Effects::LISTEN));
        assert!(both.pins() && both.clears());
        assert!(!Effects::SET_TRACKED.pins() && !Effects::SET_TRACKED.clears());
        assert!(Effects::NONE.is_empty() && Effects::default().is_empty());
        let mut acc = Effects::NONE;
        acc |= Effects::TEMP;
        assert_eq!(acc, Effects::TEMP);
        assert_eq!(both.intersection(Effects::CLEARING), Effects::RESET);
        assert!(!Effects::PINNING.intersects(Effects::CLEARING));
        assert!(!Effects::PINNING.contains(Effects::SET_TRACKED));
        let all = Effects::NAMES
            .iter()
            .fold(Effects::NONE, |acc, (e, _)| acc | *e);
        assert_eq!(
            all,
            Effects::PINNING | Effects::CLEARING | Effects::SET_TRACKED
        );
    }

    #[test]
    fn effects_debug_names_bits() {
        assert_eq!(format!("{:?}", Effects::NONE), "Effects(NONE)");
        assert_eq!(
            format!("{:?}", Effects::SET | Effects::CLOSE_ALL),
            "Effects(SET | CLOSE_ALL)"
        );
    }

    #[test]
    fn keyword_table() {
        assert_eq!(Kw::of(b"pg_temp_12"), Kw::PgTemp);
        assert_eq!(Kw::of(b"pg_temp_"), Kw::Ident);
        assert_eq!(Kw::of(b"pg_temp_1x"), Kw::Ident);
        assert_eq!(Kw::of(b"pg_toast_temp_1"), Kw::Ident);
        assert_eq!(Kw::Set.quoted(), Kw::Ident);
        assert_eq!(Kw::Tracked.quoted(), Kw::Tracked);
    }

    #[test]
    fn keywords_are_found_in_any_case() {
        for &(name, kw) in KEYWORDS {
            assert_eq!(Kw::of(name), kw, "{}", name.escape_ascii());
            assert_eq!(Kw::of(&name.to_ascii_uppercase()), kw);
            let mut mixed = name.to_vec();
            mixed[0] = mixed[0].to_ascii_uppercase();
            assert_eq!(Kw::of(&mixed), kw);
            assert_eq!(Kw::of(&name[1..]), Kw::Ident, "{}", name.escape_ascii());
            assert_eq!(Kw::of(&[name, b"x"].concat()), Kw::Ident);
        }
        for (i, &(name, _)) in KEYWORDS.iter().enumerate() {
            assert!(KEYWORDS[..i].iter().all(|&(other, _)| other != name));
        }
        assert_eq!(Kw::of(b"PG_TEMP_3"), Kw::PgTemp);
        assert_eq!(Kw::of(b""), Kw::Ident);
        assert_eq!(Kw::of(b"s\xc3\xa9t"), Kw::Ident);
    }

    #[test]
    fn the_sieves_pass_every_word_that_matters() {
        type Matters = fn(Kw) -> bool;
        let sieves: [(&Sieve, Matters, usize); 2] = [
            (&START_SIEVE, Kw::matters_at_start, 26),
            (&REST_SIEVE, Kw::matters_in_rest, 16),
        ];
        for (sieve, matters, count) in sieves {
            let mut counted = 0;
            for &(name, kw) in KEYWORDS {
                if matters(kw) {
                    counted += 1;
                    for word in [name.to_vec(), name.to_ascii_uppercase()] {
                        assert!(sieve.passes(&word), "{}", word.escape_ascii());
                        let starts = sieve.starts(word[0], word[1], word[2]);
                        assert_eq!(starts & (Sieve::PUNCT | Sieve::PREFIX), 0);
                    }
                }
            }
            assert_eq!(counted, count);
            let mut pg_temp_n = b"pg_temp_".to_vec();
            while pg_temp_n.len() < WORD_CAP {
                pg_temp_n.push(b'7');
                assert!(sieve.passes(&pg_temp_n));
                assert!(sieve.passes(&pg_temp_n.to_ascii_uppercase()));
            }
            // What they are for: the words of ordinary statements do not pass.
            for word in [
                &b"pgbench_accounts"[..],
                b"abalance",
                b"column_00",
                b"where",
            ] {
                assert!(!sieve.passes(word), "{}", word.escape_ascii());
            }
        }
        for word in [
            &b"select"[..],
            b"UPDATE",
            b"insert",
            b"Delete",
            b"begin",
            b"commit",
        ] {
            assert!(!START_SIEVE.passes(word), "{}", word.escape_ascii());
        }
        assert!(START_SIEVE.passes(b"SET") && !REST_SIEVE.passes(b"SET"));
    }

    /// The bits with which `skip_inert_word` tells a word it may skip from anything else.
    #[test]
    fn the_sieves_flag_what_a_quiet_body_must_not_skip() {
        let some_bytes = [
            0, b'\t', b' ', b'$', b'&', b'\'', b'(', b'0', b'9', b';', b'A', b'E', b'U', b'_',
            b'a', b'e', b'n', b'p', b'u', b'z', 0x7f, 0x80, 0xff,
        ];
        for sieve in [&START_SIEVE, &REST_SIEVE] {
            for a in 0..=u8::MAX {
                for b in some_bytes {
                    for c in some_bytes {
                        let starts = sieve.starts(a, b, c);
                        assert_eq!(starts & Sieve::PUNCT != 0, !is_ident_start(a));
                        let prefix =
                            matches!(a.to_ascii_lowercase(), b'e' | b'b' | b'x' | b'n' | b'u')
                                && matches!(b, b'\'' | b'&');
                        assert_eq!(starts & Sieve::PREFIX != 0, prefix, "{a} {b}");
                        let word3 = is_ident_start(a) && is_ident_cont(b) && is_ident_cont(c);
                        assert_eq!(starts & Sieve::WORD3 != 0, word3, "{a} {b} {c}");
                    }
                }
            }
        }
    }

    /// `StateScanner::token`'s short cuts for inert tokens give what `Statement::token` would.
    #[test]
    fn inert_tokens_change_nothing() {
        let mut tokens = vec![Token::Str, Token::Word(Kw::Ident)];
        tokens.extend(KEYWORDS.iter().map(|&(_, kw)| Token::Word(kw)));
        tokens.extend((0..=u8::MAX).map(Token::Symbol));
        let decided = Statement {
            head: Head::Rest,
            prev: Prev::Other,
        };
        let mut matters = Vec::new();
        for token in tokens {
            for prev in [Prev::Other, Prev::TempIntro, Prev::With] {
                let mut statement = Statement {
                    head: Head::Rest,
                    prev,
                };
                let found = statement.token(token);
                if token.inert_in_rest() {
                    assert_eq!(
                        (found, statement),
                        (Effects::NONE, decided),
                        "{token:?} {prev:?}"
                    );
                } else if (found, statement) != (Effects::NONE, decided) {
                    matters.push(token);
                }
                if token == Token::Symbol(b';') {
                    assert_eq!((found, statement), (Effects::NONE, Statement::NEW));
                }
            }
            let mut statement = Statement::NEW;
            let found = statement.token(token);
            if token.inert_at_start() {
                assert_eq!(
                    (found, statement),
                    (Effects::NONE, decided),
                    "{token:?} first"
                );
            }
            if token == Token::Symbol(b';') {
                assert_eq!((found, statement), (Effects::NONE, Statement::NEW));
            }
        }
        // And no word of a body takes the general path for nothing. (`DATABASE` is
        // looked at for the database-DDL sieve and reaches the grammar as an `Ident`.)
        for &(_, kw) in KEYWORDS.iter().filter(|(_, kw)| *kw != Kw::Database) {
            let token = Token::Word(kw);
            assert_eq!(!token.inert_in_rest(), matters.contains(&token), "{kw:?}");
        }
    }

    #[test]
    fn byte_tables_match_the_predicates() {
        for b in 0..=u8::MAX {
            assert_eq!(IDENT_CONT[usize::from(b)], is_ident_cont(b));
            assert_eq!(CLASS[usize::from(b)] == Class::Space, is_space(b));
            assert_eq!(CLASS[usize::from(b)] == Class::Word, is_ident_start(b));
        }
    }

    #[test]
    fn long_word_keeps_a_prefix_and_never_matches() {
        let mut sql = b"SELECT ".to_vec();
        sql.extend_from_slice(&[b'x'; 200]);
        sql.extend_from_slice(b" pg_advisory_lock(1)");
        assert_eq!(classify_query(&sql), Effects::ADVISORY_LOCK);
        let mut sql = b"SELECT pg_advisory_lock".to_vec();
        sql.extend_from_slice(&[b'x'; 60]);
        assert_eq!(classify_query(&sql), Effects::NONE);
    }

    #[test]
    fn found_so_far() {
        let mut scanner = StateScanner::query();
        scanner.feed(b"LISTEN a; SET x");
        assert_eq!(scanner.found(), Effects::LISTEN);
        assert_eq!(scanner.finish(), Effects::LISTEN | Effects::SET);
    }
}
