//! The normalized text of a query, for query digests: the same statement with other
//! constants gives the same text and the same 64-bit query id.
//!
//! What changes and what stays:
//! - every constant becomes a placeholder `$n`, PostgreSQL's `pg_stat_statements` style:
//!   numbers (with a unary minus where it can only be one: `abalance + -4177`), strings
//!   `'...'`, `E'...'`, `B'...'`, `X'...'`, `N'...'`, `U&'...'`, and dollar-quoted `$$...$$` /
//!   `$tag$...$tag$`. Placeholders are numbered after the largest `$n` parameter seen so far,
//!   so a text mixing both stays readable;
//! - `$n` parameters (the extended protocol's) are kept, so `pgbench -M extended` and
//!   `-M simple` meet in one digest;
//! - a list of constants after `IN` becomes `IN ($n, ...)`, however long it was;
//! - comments are dropped, each run of whitespace becomes one space (none is added where the
//!   client wrote none), a run of `;` between statements becomes `; `, and a `;` at the end
//!   goes;
//! - identifiers and keywords stay as written (not upper-cased: nothing is allocated to fold
//!   case, and the text reads as the application sent it; `select` and `SELECT` are two
//!   digests).
//!
//! Normalizing a normalized text gives it back unchanged. The query id is FNV-1a 64 of the
//! normalized bytes: the same for the same text in every process, so it can label a metric.
//! [`fingerprint`] computes it without writing the text (the per-query path); [`normalize`]
//! also writes the text, appended to the caller's buffer (nothing else is allocated). A text
//! longer than `max_bytes` is normalized up to there (cut at a character boundary) and ends
//! with [`TRUNCATION_MARK`]. The lexer assumes `standard_conforming_strings` is on (a `\'`
//! in a plain string ends it early: the digest may then be cut differently, never wrong
//! about the text it shows).

/// FNV-1a 64-bit offset basis and prime.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Ends a text that was cut at `max_bytes`.
pub(crate) const TRUNCATION_MARK: &str = "…";

/// What normalizing a text found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Normalized {
    /// FNV-1a 64 of the normalized text.
    pub query_id: u64,
    /// The text was longer than the limit: only its beginning was normalized.
    pub truncated: bool,
}

/// The query id of `text` normalized, without writing the text.
pub fn fingerprint(text: &[u8], max_bytes: usize) -> Normalized {
    let mut sink = Fnv(FNV_OFFSET);
    let truncated = run(text, max_bytes, &mut sink);
    Normalized {
        query_id: sink.0,
        truncated,
    }
}

/// Appends the normalized `text` to `out`; the query id is that of what was appended.
pub fn normalize(text: &[u8], max_bytes: usize, out: &mut Vec<u8>) -> Normalized {
    let mut sink = Written {
        hash: Fnv(FNV_OFFSET),
        out,
    };
    let truncated = run(text, max_bytes, &mut sink);
    Normalized {
        query_id: sink.hash.0,
        truncated,
    }
}

/// FNV-1a 64 of `bytes` (what [`normalize`] returns for a text that normalizes to them).
pub fn query_id_of(bytes: &[u8]) -> u64 {
    let mut hash = Fnv(FNV_OFFSET);
    hash.put(bytes);
    hash.0
}

/// Writes the *shape* of `text` into `hasher` and returns true, or returns false (having
/// written a part) when the shape cannot vouch for the text. Two texts of the same shape
/// normalize to the same bytes, so a query id found for one holds for the other: the
/// per-query path remembers ids by shape and lexes a text only when its shape is new.
///
/// The shape is the text with each constant the lexer is sure to read whole replaced by a
/// 0 byte: a run of digits with neither a letter, digit, `_` or `.` before it nor anything
/// but whitespace or an operator after it, and a plain `'...'` string not glued to a word
/// (the lexer's own [`string_end`] finds its end; a backslash in it leaves the text to the
/// lexer, as the string might end elsewhere in a session where
/// `standard_conforming_strings` is off). Every other byte is kept as it is, so
/// the lexer makes the same decisions for both texts around each masked constant.
///
/// Texts the shape leaves to the lexer: longer than `max_bytes` (where they are cut depends
/// on their digits), or holding a byte whose meaning depends on what follows in a way the
/// shape does not follow: `"`, `$`, `\`, `&`, NUL and other control bytes but whitespace,
/// `--` and `/*`, a `.` not between a word and a letter, a quote right after a word (`E'`,
/// `B'`, `X'`, `N'`), and any byte outside ASCII's printable set but letters of UTF-8.
pub fn shape<H: std::hash::Hasher>(text: &[u8], max_bytes: usize, hasher: &mut H) -> bool {
    if text.len() > max_bytes {
        return false;
    }
    let kind = |i: usize| text.get(i).map_or(S_END, |&b| SHAPES[usize::from(b)]);
    // Bytes up to `kept` are written; the next mask goes after them.
    let mut kept = 0;
    let mut masks = 0u32;
    // The byte before `i` glues what follows to it (a word's or a constant's last byte).
    let mut after_word = false;
    let mut i = 0;
    while i < text.len() {
        let this = SHAPES[usize::from(text[i])];
        if this & S_WORD != 0 {
            // A word, digits in it included: kept.
            i = run_end(text, i + 1, S_WORD | S_DIGIT);
            after_word = true;
            continue;
        }
        if this & S_OP != 0 {
            i = run_end(text, i + 1, S_OP);
            after_word = false;
            continue;
        }
        let next = kind(i + 1);
        match this {
            S_DIGIT => {
                let end = run_end(text, i + 1, S_DIGIT);
                if !after_word && kind(end) & (S_OP | S_DASH | S_SLASH | S_END) != 0 {
                    hasher.write(&text[kept..i]);
                    hasher.write_u8(0);
                    kept = end;
                    masks += 1;
                }
                i = end;
                after_word = true;
                continue;
            }
            S_QUOTE if !after_word => {
                let end = string_end(text, i, false);
                // With standard_conforming_strings off a backslash escapes a quote: the
                // string could end elsewhere for the session-state scanner.
                if text[i..end].contains(&b'\\') {
                    return false;
                }
                hasher.write(&text[kept..i]);
                hasher.write_u8(0);
                kept = end;
                masks += 1;
                i = end;
                after_word = false;
                continue;
            }
            S_DASH if next != S_DASH => after_word = false,
            S_SLASH if text.get(i + 1) != Some(&b'*') => after_word = false,
            S_DOT if after_word && next == S_WORD => after_word = false,
            _ => return false,
        }
        i += 1;
    }
    hasher.write(&text[kept..]);
    hasher.write_u32(masks);
    true
}

/// The first index from `from` whose byte is of none of the kinds in `mask`.
fn run_end(text: &[u8], from: usize, mask: u8) -> usize {
    let rest = text.get(from..).unwrap_or_default();
    from + rest
        .iter()
        .position(|&b| SHAPES[usize::from(b)] & mask == 0)
        .unwrap_or(rest.len())
}

// Byte kinds for [`shape`], one bit each (0: ends the shape).
/// Kept, and glues what follows: a letter, `_`, or a byte of a UTF-8 character.
const S_WORD: u8 = 1;
const S_DIGIT: u8 = 2;
/// Kept, and glues nothing: whitespace and the operators and punctuation that never start
/// anything longer.
const S_OP: u8 = 4;
const S_DASH: u8 = 8;
const S_SLASH: u8 = 16;
const S_DOT: u8 = 32;
const S_QUOTE: u8 = 64;
/// Past the text's end (for looking ahead only).
const S_END: u8 = 128;

const SHAPES: [u8; 256] = {
    let mut shapes = [0u8; 256];
    let mut byte = 0usize;
    while byte < 256 {
        let b = byte as u8;
        // Words and whitespace as the lexer reads them (its `CLASSES`).
        shapes[byte] = if CLASSES[byte] & IDENT_START != 0 {
            S_WORD
        } else if b.is_ascii_digit() {
            S_DIGIT
        } else if CLASSES[byte] & SPACE != 0
            || matches!(
                b,
                b'(' | b')'
                    | b','
                    | b';'
                    | b'='
                    | b'<'
                    | b'>'
                    | b'*'
                    | b'+'
                    | b'%'
                    | b'!'
                    | b'|'
                    | b':'
                    | b'['
                    | b']'
                    | b'^'
                    | b'~'
                    | b'@'
                    | b'#'
                    | b'?'
            )
        {
            S_OP
        } else if b == b'-' {
            S_DASH
        } else if b == b'/' {
            S_SLASH
        } else if b == b'.' {
            S_DOT
        } else if b == b'\'' {
            S_QUOTE
        } else {
            0
        };
        byte += 1;
    }
    shapes
};

/// Where the normalized bytes go.
trait Sink {
    fn put(&mut self, bytes: &[u8]);
}

struct Fnv(u64);

impl Sink for Fnv {
    fn put(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }
}

struct Written<'a> {
    hash: Fnv,
    out: &'a mut Vec<u8>,
}

impl Sink for Written<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.hash.put(bytes);
        self.out.extend_from_slice(bytes);
    }
}

/// The kind of the last token written: it decides whether a `-` before a digit is a sign
/// and whether a `(` opens an `IN` list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Prev {
    /// Nothing written yet.
    Start,
    /// A name or keyword: `text[start..end]` (what it is matters only before a `-` and a
    /// digit, or a `(`, so it is looked at only then). `end == start` for a word that is no
    /// keyword in any case (a quoted identifier, the truncation mark).
    Word { start: usize, end: usize },
    /// A placeholder or a parameter.
    Value,
    /// A `)`.
    Close,
    /// An operator or punctuation (`(`, `,`, `=`...).
    Punct,
}

/// Writes tokens with the spacing rules.
struct Writer<'s, S: Sink> {
    sink: &'s mut S,
    prev: Prev,
    /// Whitespace or a comment since the last token.
    space: bool,
    /// A `;` since the last token (written only if another token follows).
    semicolon: bool,
    /// Largest parameter or placeholder number so far.
    last_number: u32,
    /// The last token was a lone `$`: the next one is spaced off, or `$` `a` `$1` would read
    /// as the dollar quote `$a$` when normalized again.
    after_dollar: bool,
}

impl<S: Sink> Writer<'_, S> {
    fn separate(&mut self) {
        self.space |= self.after_dollar;
        if self.prev != Prev::Start {
            if self.semicolon {
                self.sink.put(b"; ");
            } else if self.space {
                self.sink.put(b" ");
            }
        }
        self.space = false;
        self.semicolon = false;
    }

    fn token(&mut self, bytes: &[u8], kind: Prev) {
        self.separate();
        self.sink.put(bytes);
        self.prev = kind;
        self.after_dollar = bytes == b"$";
    }

    /// A constant: the next placeholder.
    fn placeholder(&mut self) {
        self.last_number = self.last_number.saturating_add(1);
        self.separate();
        let mut digits = [0u8; 11];
        digits[0] = b'$';
        let len = write_decimal(self.last_number, &mut digits[1..]);
        self.sink.put(&digits[..=len]);
        self.prev = Prev::Value;
        self.after_dollar = false;
    }

    /// A `$n` parameter, kept as written.
    fn parameter(&mut self, bytes: &[u8]) {
        let number = bytes[1..].iter().fold(0u32, |n, digit| {
            n.saturating_mul(10)
                .saturating_add(u32::from(digit.wrapping_sub(b'0')))
        });
        self.last_number = self.last_number.max(number);
        self.token(bytes, Prev::Value);
    }
}

/// Writes `value` in decimal at the start of `out`; returns the digits written.
fn write_decimal(mut value: u32, out: &mut [u8]) -> usize {
    let mut reversed = [0u8; 10];
    let mut len = 0;
    loop {
        reversed[len] = b'0' + (value % 10) as u8;
        len += 1;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    for (slot, digit) in out.iter_mut().zip(reversed[..len].iter().rev()) {
        *slot = *digit;
    }
    len
}

/// Byte classes, one table lookup per byte on the hot path.
const SPACE: u8 = 1;
const IDENT_START: u8 = 2;
const IDENT_CHAR: u8 = 4;
/// A letter that may open a prefixed string (`E'..'`, `B'..'`, `X'..'`, `N'..'`, `U&'..'`).
const PREFIX: u8 = 8;

const CLASSES: [u8; 256] = {
    let mut classes = [0u8; 256];
    let mut byte = 0usize;
    while byte < 256 {
        let b = byte as u8;
        let mut class = 0;
        if matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c) {
            class |= SPACE;
        }
        if b.is_ascii_alphabetic() || b == b'_' || b >= 0x80 {
            class |= IDENT_START | IDENT_CHAR;
        }
        if b.is_ascii_digit() || b == b'$' {
            class |= IDENT_CHAR;
        }
        if matches!(
            b,
            b'e' | b'E' | b'b' | b'B' | b'x' | b'X' | b'n' | b'N' | b'u' | b'U'
        ) {
            class |= PREFIX;
        }
        classes[byte] = class;
        byte += 1;
    }
    classes
};

fn is_space(byte: u8) -> bool {
    CLASSES[usize::from(byte)] & SPACE != 0
}

fn is_ident_start(byte: u8) -> bool {
    CLASSES[usize::from(byte)] & IDENT_START != 0
}

fn is_ident_char(byte: u8) -> bool {
    CLASSES[usize::from(byte)] & IDENT_CHAR != 0
}

fn is_prefix(byte: u8) -> bool {
    CLASSES[usize::from(byte)] & PREFIX != 0
}

fn at(text: &[u8], index: usize) -> u8 {
    text.get(index).copied().unwrap_or(0)
}

/// Words after which a `-` before a digit is a sign.
fn is_value_keyword(word: &[u8]) -> bool {
    const KEYWORDS: [&[u8]; 22] = [
        b"and", b"or", b"not", b"select", b"where", b"then", b"else", b"when", b"case", b"by",
        b"limit", b"offset", b"values", b"set", b"in", b"is", b"as", b"between", b"like", b"ilike",
        b"having", b"return",
    ];
    KEYWORDS
        .iter()
        .any(|keyword| word.eq_ignore_ascii_case(keyword))
}

/// End of a `--` or `/* */` comment starting at `i`, if one does.
fn comment_end(text: &[u8], i: usize) -> Option<usize> {
    match (at(text, i), at(text, i + 1)) {
        (b'-', b'-') => {
            Some(memchr::memchr(b'\n', &text[i..]).map_or(text.len(), |newline| i + newline + 1))
        }
        (b'/', b'*') => {
            // PostgreSQL's block comments nest.
            let mut depth = 1usize;
            let mut j = i + 2;
            while j < text.len() {
                match (text[j], at(text, j + 1)) {
                    (b'/', b'*') => {
                        depth += 1;
                        j += 2;
                    }
                    (b'*', b'/') => {
                        depth -= 1;
                        j += 2;
                        if depth == 0 {
                            return Some(j);
                        }
                    }
                    _ => j += 1,
                }
            }
            Some(text.len())
        }
        _ => None,
    }
}

/// Skips whitespace and comments from `i`.
fn skip_blank(text: &[u8], mut i: usize) -> usize {
    while i < text.len() {
        if is_space(text[i]) {
            i += 1;
        } else if let Some(end) = comment_end(text, i) {
            i = end;
        } else {
            break;
        }
    }
    i
}

/// End of a quoted string whose opening quote is at `i` (`''` escapes a quote; with
/// `backslash`, so does `\`). Unterminated: the end of the text.
fn string_end(text: &[u8], i: usize, backslash: bool) -> usize {
    let mut j = i + 1;
    while j < text.len() {
        match text[j] {
            b'\\' if backslash => j += 2,
            b'\'' if at(text, j + 1) == b'\'' => j += 2,
            b'\'' => return j + 1,
            _ => j += 1,
        }
    }
    text.len()
}

/// End of a quoted identifier opening at `i`.
fn quoted_ident_end(text: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while j < text.len() {
        match text[j] {
            b'"' if at(text, j + 1) == b'"' => j += 2,
            b'"' => return j + 1,
            _ => j += 1,
        }
    }
    text.len()
}

/// End of a dollar-quoted string whose tag starts at `i`, if a tag does.
fn dollar_quote_end(text: &[u8], i: usize) -> Option<usize> {
    let mut j = i + 1;
    if at(text, j) != b'$' {
        if !is_ident_start(at(text, j)) {
            return None;
        }
        while j < text.len() && is_ident_char(text[j]) && text[j] != b'$' {
            j += 1;
        }
        if at(text, j) != b'$' {
            return None;
        }
    }
    let tag = &text[i..=j];
    let body = j + 1;
    Some(
        memchr::memmem::find(&text[body..], tag)
            .map_or(text.len(), |found| body + found + tag.len()),
    )
}

/// End of a number starting at `i` (digits, or `.` then digits), with its fraction,
/// exponent, PostgreSQL 16's `0x`/`0o`/`0b` forms and `_` separators; trailing letters
/// (junk to PostgreSQL) are taken with it.
fn number_end(text: &[u8], i: usize) -> usize {
    let mut j = i;
    let digits = |j: &mut usize| {
        while *j < text.len() && (text[*j].is_ascii_digit() || text[*j] == b'_') {
            *j += 1;
        }
    };
    digits(&mut j);
    if at(text, j) == b'.' && at(text, j + 1) != b'.' {
        j += 1;
        digits(&mut j);
    }
    if matches!(at(text, j), b'e' | b'E') {
        let sign = usize::from(matches!(at(text, j + 1), b'+' | b'-'));
        if at(text, j + 1 + sign).is_ascii_digit() {
            j += 1 + sign;
            digits(&mut j);
        }
    }
    while j < text.len() && (text[j].is_ascii_alphanumeric() || text[j] == b'_') {
        j += 1;
    }
    j
}

/// End of the identifier starting at `i`.
fn ident_end(text: &[u8], i: usize) -> usize {
    let rest = &text[i + 1..];
    i + 1
        + rest
            .iter()
            .position(|byte| !is_ident_char(*byte))
            .unwrap_or(rest.len())
}

/// A constant or a parameter starting at `i`: its end, and whether it is a parameter.
/// `sign` allows a leading `-` before a digit.
fn value_at(text: &[u8], i: usize, sign: bool) -> Option<(usize, bool)> {
    let (first, second) = (at(text, i), at(text, i + 1));
    match first {
        b'\'' => Some((string_end(text, i, false), false)),
        b'$' if second.is_ascii_digit() => {
            let mut j = i + 1;
            while j < text.len() && text[j].is_ascii_digit() {
                j += 1;
            }
            Some((j, true))
        }
        b'$' => dollar_quote_end(text, i).map(|end| (end, false)),
        b'0'..=b'9' => Some((number_end(text, i), false)),
        b'.' if second.is_ascii_digit() => Some((number_end(text, i), false)),
        b'-' if sign
            && (second.is_ascii_digit()
                || (second == b'.' && at(text, i + 2).is_ascii_digit())) =>
        {
            Some((number_end(text, i + 1), false))
        }
        b'e' | b'E' if second == b'\'' => Some((string_end(text, i + 1, true), false)),
        b'b' | b'B' | b'x' | b'X' | b'n' | b'N' if second == b'\'' => {
            Some((string_end(text, i + 1, false), false))
        }
        b'u' | b'U' if second == b'&' && at(text, i + 2) == b'\'' => {
            Some((string_end(text, i + 2, false), false))
        }
        _ => None,
    }
}

/// A `(` at `i` opening a list of constants and parameters only: the list's end and its
/// first element.
fn constant_list(text: &[u8], i: usize) -> Option<(usize, (usize, usize, bool))> {
    let mut j = i + 1;
    let mut first = None;
    loop {
        j = skip_blank(text, j);
        let (end, parameter) = value_at(text, j, true)?;
        first.get_or_insert((j, end, parameter));
        j = skip_blank(text, end);
        match at(text, j) {
            b',' if j < text.len() => j += 1,
            b')' if j < text.len() => return first.map(|first| (j + 1, first)),
            _ => return None,
        }
    }
}

/// Normalizes `text` (up to `max_bytes`) into `sink`; true when it was cut.
fn run<S: Sink>(text: &[u8], max_bytes: usize, sink: &mut S) -> bool {
    let truncated = text.len() > max_bytes;
    let mut cut = text.len().min(max_bytes);
    if truncated {
        // Not inside a UTF-8 character.
        while cut > 0 && text[cut] & 0xc0 == 0x80 {
            cut -= 1;
        }
    }
    let text = &text[..cut];
    let mut w = Writer {
        sink,
        prev: Prev::Start,
        space: false,
        semicolon: false,
        last_number: 0,
        after_dollar: false,
    };
    let mut i = 0;
    while i < text.len() {
        let byte = text[i];
        if is_space(byte) {
            w.space = true;
            i += 1;
            continue;
        }
        // The common case first: a name or keyword (not a string's prefix letter).
        if is_ident_start(byte)
            && !(is_prefix(byte)
                && matches!(at(text, i + 1), b'\'' | b'&')
                && (i == 0 || !is_ident_char(text[i - 1])))
        {
            let end = ident_end(text, i);
            w.token(&text[i..end], Prev::Word { start: i, end });
            i = end;
            continue;
        }
        if let Some(end) = comment_end(text, i) {
            w.space = true;
            i = end;
            continue;
        }
        if byte == b';' {
            w.semicolon = w.prev != Prev::Start;
            i += 1;
            continue;
        }
        // Only a `-` asks whether it may be a sign: the keyword scan is not paid for every
        // `=` or `,` after a name.
        let sign = byte == b'-'
            && match w.prev {
                Prev::Start | Prev::Punct => true,
                Prev::Word { start, end } => is_value_keyword(&text[start..end]),
                Prev::Value | Prev::Close => false,
            };
        // A `.5` right after a name is `t.5`, not a number.
        let number_may_start = byte != b'.' || !matches!(w.prev, Prev::Word { .. } | Prev::Close);
        if number_may_start && let Some((end, parameter)) = value_at(text, i, sign) {
            if parameter {
                w.parameter(&text[i..end]);
            } else {
                w.placeholder();
            }
            i = end;
            continue;
        }
        let after_in = byte == b'('
            && matches!(w.prev, Prev::Word { start, end } if text[start..end].eq_ignore_ascii_case(b"in"));
        match byte {
            b'"' => {
                let end = quoted_ident_end(text, i);
                w.token(&text[i..end], Prev::Word { start: i, end: i });
                i = end;
            }
            b'(' if after_in => match constant_list(text, i) {
                Some((end, (start, first_end, parameter))) => {
                    w.token(b"(", Prev::Punct);
                    if parameter {
                        w.parameter(&text[start..first_end]);
                    } else {
                        w.placeholder();
                    }
                    w.sink.put(b", ...)");
                    w.prev = Prev::Close;
                    w.after_dollar = false;
                    i = end;
                }
                None => {
                    w.token(b"(", Prev::Punct);
                    i += 1;
                }
            },
            b')' => {
                w.token(b")", Prev::Close);
                i += 1;
            }
            // A prefix letter whose quote did not open a string after all.
            _ if is_ident_start(byte) => {
                let end = ident_end(text, i);
                w.token(&text[i..end], Prev::Word { start: i, end });
                i = end;
            }
            _ => {
                w.token(&text[i..=i], Prev::Punct);
                i += 1;
            }
        }
    }
    if truncated {
        w.space = true;
        w.token(
            TRUNCATION_MARK.as_bytes(),
            Prev::Word {
                start: cut,
                end: cut,
            },
        );
    }
    truncated
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNLIMITED: usize = usize::MAX;

    fn norm(text: &str) -> String {
        norm_at(text, UNLIMITED)
    }

    fn norm_at(text: &str, max_bytes: usize) -> String {
        let mut out = Vec::new();
        let normalized = normalize(text.as_bytes(), max_bytes, &mut out);
        assert_eq!(
            fingerprint(text.as_bytes(), max_bytes),
            normalized,
            "the fingerprint is the normalized text's"
        );
        assert_eq!(normalized.query_id, query_id_of(&out));
        let out = String::from_utf8(out).expect("utf-8 in, utf-8 out");
        let mut again = Vec::new();
        normalize(out.as_bytes(), UNLIMITED, &mut again);
        assert_eq!(String::from_utf8_lossy(&again), out, "idempotent");
        out
    }

    #[test]
    fn pgbench_tpcb_statements() {
        assert_eq!(
            norm("UPDATE pgbench_accounts SET abalance = abalance + -4177 WHERE aid = 81424;"),
            "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2"
        );
        assert_eq!(
            norm("SELECT abalance FROM pgbench_accounts WHERE aid = 81424;"),
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
        );
        assert_eq!(
            norm("UPDATE pgbench_tellers SET tbalance = tbalance + 2390 WHERE tid = 7;"),
            "UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2"
        );
        assert_eq!(
            norm(
                "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
                 VALUES (7, 1, 81424, -4177, CURRENT_TIMESTAMP);"
            ),
            "INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) \
             VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)"
        );
        assert_eq!(norm("BEGIN;"), "BEGIN");
        assert_eq!(norm("END;"), "END");
    }

    #[test]
    fn the_extended_protocols_text_meets_the_simple_one() {
        let simple = "UPDATE pgbench_accounts SET abalance = abalance + -4177 WHERE aid = 81424;";
        let extended = "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;";
        assert_eq!(norm(simple), norm(extended));
        assert_eq!(
            fingerprint(simple.as_bytes(), UNLIMITED),
            fingerprint(extended.as_bytes(), UNLIMITED)
        );
        let other = "UPDATE pgbench_accounts SET abalance = abalance + 12 WHERE aid = 3";
        assert_eq!(
            fingerprint(simple.as_bytes(), UNLIMITED),
            fingerprint(other.as_bytes(), UNLIMITED),
            "other constants, same digest"
        );
    }

    #[test]
    fn every_kind_of_string_is_a_constant() {
        assert_eq!(
            norm(
                r"SELECT 'it''s', E'a\'b', $$x'y$$, $fn$ $$ $fn$, B'101', X'ff', N'n', U&'d\0061t'"
            ),
            "SELECT $1, $2, $3, $4, $5, $6, $7, $8"
        );
        assert_eq!(norm("SELECT 'unterminated"), "SELECT $1");
        assert_eq!(
            norm("SELECT name'x', e FROM t"),
            "SELECT name$1, e FROM t",
            "a prefix letter only as a whole word"
        );
    }

    #[test]
    fn numbers_in_every_form() {
        assert_eq!(
            norm("SELECT 1, 1.5, .5, 1e10, 2.5E-3, 0x1F, 1_000, 12abc"),
            "SELECT $1, $2, $3, $4, $5, $6, $7, $8"
        );
        assert_eq!(norm("SELECT t1.c2 FROM t1"), "SELECT t1.c2 FROM t1");
        assert_eq!(norm("SELECT a -1, a - -1"), "SELECT a -$1, a - $2");
        assert_eq!(norm("SELECT -1 WHERE x = -2.5"), "SELECT $1 WHERE x = $2");
        assert_eq!(norm("SELECT 1-2"), "SELECT $1-$2");
        assert_eq!(norm("SELECT x::int4"), "SELECT x::int4");
    }

    #[test]
    fn whitespace_comments_and_semicolons() {
        assert_eq!(
            norm("  SELECT\n\t a /* note /* nested */ still */,b -- trailing\n FROM   t ;  "),
            "SELECT a ,b FROM t"
        );
        assert_eq!(
            norm("SELECT 1;SELECT 2 ; ;SELECT 3;;"),
            "SELECT $1; SELECT $2; SELECT $3"
        );
        assert_eq!(norm(";; -- only\n"), "");
        assert_eq!(norm("a+b"), "a+b", "no space where none was written");
    }

    #[test]
    fn parameters_are_kept_and_constants_numbered_after_them() {
        assert_eq!(
            norm("SELECT * FROM t WHERE a = $1 AND b = 5"),
            "SELECT * FROM t WHERE a = $1 AND b = $2"
        );
        assert_eq!(norm("SELECT $3, 'x'"), "SELECT $3, $4");
        assert_eq!(norm("SELECT a$1, $"), "SELECT a$1, $");
        assert_eq!(
            norm("SELECT $'x'"),
            "SELECT $ $1",
            "never a `$$` of our own"
        );
        assert_eq!(norm("SELECT $a'x'"), "SELECT $ a$1", "nor a `$a$`");
    }

    #[test]
    fn in_lists_collapse_to_one_placeholder() {
        assert_eq!(
            norm("SELECT * FROM t WHERE id IN (1, 2, 3) AND x NOT IN ('a','b')"),
            "SELECT * FROM t WHERE id IN ($1, ...) AND x NOT IN ($2, ...)"
        );
        assert_eq!(
            norm("SELECT 1 WHERE id in (7)"),
            norm("SELECT 1 WHERE id in (7, 8, 9)")
        );
        assert_eq!(norm("WHERE id IN ($1, $2, $3)"), "WHERE id IN ($1, ...)");
        assert_eq!(
            norm("WHERE id IN (SELECT 1)"),
            "WHERE id IN (SELECT $1)",
            "a subquery is no list"
        );
        assert_eq!(norm("WHERE id IN (1, a)"), "WHERE id IN ($1, a)");
        assert_eq!(norm("WHERE id IN (1,"), "WHERE id IN ($1,");
    }

    #[test]
    fn identifiers_and_keywords_stay_as_written() {
        assert_eq!(
            norm(r#"select "Weird ""name""" from Tab where "x" = 'v'"#),
            r#"select "Weird ""name""" from Tab where "x" = $1"#
        );
        assert_ne!(
            fingerprint(b"select 1", UNLIMITED),
            fingerprint(b"SELECT 1", UNLIMITED)
        );
    }

    #[test]
    fn long_texts_are_cut_and_marked() {
        let long = format!("SELECT '{}', x FROM t", "a".repeat(100));
        assert_eq!(norm_at(&long, 20), "SELECT $1 …");
        let normalized = fingerprint(long.as_bytes(), 20);
        assert!(normalized.truncated);
        assert!(!fingerprint(long.as_bytes(), long.len()).truncated);
        assert_eq!(norm_at("SELECT éé", 9), "SELECT é …", "cut at a character");
        assert_eq!(norm_at("SELECT abcdef", 9), "SELECT ab …");
    }

    #[test]
    fn placeholders_past_nine_have_more_digits() {
        let values: Vec<String> = (0..12).map(|n| n.to_string()).collect();
        let text = format!("VALUES ({})", values.join(", "));
        let out = norm(&text);
        assert!(out.ends_with("$11, $12)"), "{out}");
    }

    /// The shape's hash with fixed keys (the engine keys it per process).
    fn shape_of(text: &str) -> Option<u64> {
        use std::hash::Hasher;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        shape(text.as_bytes(), UNLIMITED, &mut hasher).then(|| hasher.finish())
    }

    #[test]
    fn texts_that_differ_in_their_constants_have_one_shape() {
        let same = [
            (
                "SELECT abalance FROM pgbench_accounts WHERE aid = 1;",
                "SELECT abalance FROM pgbench_accounts WHERE aid = 9876543;",
            ),
            (
                "UPDATE t SET v = v + -5, w = 'it''s' WHERE id IN (1, 2)",
                "UPDATE t SET v = v + -17, w = '' WHERE id IN (30, 4)",
            ),
            (
                "select u.name from users u where u.id=7 and u.tag='x'::text",
                "select u.name from users u where u.id=12 and u.tag='yz'::text",
            ),
            ("SELECT 1/2, 3-4, 'a' 'b'", "SELECT 10/20, 30-40, 'c' 'd'"),
        ];
        for (a, b) in same {
            assert!(shape_of(a).is_some(), "{a}");
            assert_eq!(shape_of(a), shape_of(b), "{a} / {b}");
            assert_eq!(norm(a), norm(b));
        }
        // Constants that are not whole on their own keep their digits in the shape.
        let apart = [
            ("SELECT t1 FROM x", "SELECT t2 FROM x"),
            ("SELECT 1e5", "SELECT 2e5"),
            ("SELECT 0x1F", "SELECT 5x1F"),
            ("SELECT 1_000", "SELECT 2_000"),
            ("SELECT 1.x", "SELECT 2.x"),
        ];
        for (a, b) in apart {
            assert_ne!(shape_of(a), shape_of(b), "{a} / {b}");
        }
        // What the shape leaves to the lexer.
        for text in [
            "SELECT $1",
            "SELECT 1.5",
            "SELECT .5",
            "SELECT E'a'",
            "SELECT x'1F'",
            "SELECT \"t\".x",
            "SELECT 1 -- why",
            "SELECT /* c */ 1",
            "SELECT $$a$$",
            "SELECT U&'a'",
            "SELECT 1\0",
            "SELECT 'a\\'",
        ] {
            assert_eq!(shape_of(text), None, "{text}");
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        assert!(!shape(b"SELECT 1", 7, &mut hasher), "longer than the limit");
    }

    /// `text` with every run of digits replaced by `digits` (cycled, a run of 1 to 3) and
    /// every byte inside quotes other than a quote replaced by `fill`.
    fn other_constants(text: &str, digits: &[u8], fill: u8) -> String {
        let mut out = Vec::new();
        let mut in_string = false;
        let mut run = 0usize;
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b'\'' {
                in_string = !in_string;
                out.push(b);
            } else if in_string {
                out.push(fill);
            } else if b.is_ascii_digit() {
                while i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit() {
                    i += 1;
                }
                let len = 1 + digits[run % digits.len()] as usize % 3;
                for k in 0..len {
                    out.push(b'0' + (digits[(run + k) % digits.len()] % 10));
                }
                run += 1;
            } else {
                out.push(b);
            }
            i += 1;
        }
        String::from_utf8(out).unwrap_or_default()
    }

    proptest::proptest! {
        // About one case in ten gives two texts of one shape: enough cases for a few
        // hundred such pairs per run.
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// The promise the digest cache relies on: one shape, one normalized text.
        #[test]
        fn one_shape_normalizes_one_way(
            text in "([a-zA-Z_]{1,4}|[0-9]{1,3}|'[a-z0-9 ';-]{0,4}'|[ ,;()=<>*+:eExX'-]|/|\\.|\n|\\$|\"){0,30}",
            digits in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..8),
            fill in proptest::sample::select(b"a0 ;-$.\\x".to_vec()),
        ) {
            let other = other_constants(&text, &digits, fill);
            if let (Some(a), Some(b)) = (shape_of(&text), shape_of(&other)) {
                if a == b {
                    proptest::prop_assert_eq!(norm(&text), norm(&other), "{} / {}", text, other);
                }
            }
        }
    }

    /// What the session-state scanner finds in a Query text: effects and the `DATABASE`
    /// note, with the string setting on and off.
    fn scanned(text: &str) -> Vec<(crate::session_state::Effects, bool)> {
        [true, false]
            .into_iter()
            .map(|conforming| {
                let mut scanner = crate::session_state::StateScanner::query()
                    .standard_conforming_strings(conforming);
                scanner.feed(text.as_bytes());
                scanner.feed(b"\0");
                scanner.finish_noting_database()
            })
            .collect()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

        /// The text cache's promise: texts of one shape have one set of session-state facts.
        #[test]
        fn one_shape_scans_one_way(
            text in "(SET |set |LISTEN |RESET ALL|DISCARD ALL|select |pg_advisory_lock|set_config\
                     |TEMP |CREATE |DATABASE |DROP |LOCAL |WITH HOLD|PREPARE |[a-z_]{1,4}\
                     |[0-9]{1,3}|'[a-z0-9 ';-]{0,4}'|[ ,;()=<>*+:'.-]|/|\n|\\$|\"|\\\\){0,24}",
            digits in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..8),
            fill in proptest::sample::select(b"a0 ;-$.\\x".to_vec()),
        ) {
            let other = other_constants(&text, &digits, fill);
            if let (Some(a), Some(b)) = (shape_of(&text), shape_of(&other)) {
                if a == b {
                    proptest::prop_assert_eq!(scanned(&text), scanned(&other), "{} / {}", text, other);
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_normalize_once_and_for_all(
            text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            max_bytes in 0usize..256,
        ) {
            let mut out = Vec::new();
            let first = normalize(&text, max_bytes, &mut out);
            proptest::prop_assert_eq!(fingerprint(&text, max_bytes), first);
            let mut again = Vec::new();
            let second = normalize(&out, usize::MAX, &mut again);
            proptest::prop_assert_eq!(&again, &out);
            proptest::prop_assert_eq!(second.query_id, first.query_id);
        }

        #[test]
        fn sql_like_text_normalizes_once_and_for_all(
            text in "[a-zA-Z0-9 ,;()'\\\\$+.*/\n\"eExXin-]{0,120}",
        ) {
            let mut out = Vec::new();
            normalize(text.as_bytes(), usize::MAX, &mut out);
            let mut again = Vec::new();
            normalize(&out, usize::MAX, &mut again);
            proptest::prop_assert_eq!(again, out);
        }
    }
}
