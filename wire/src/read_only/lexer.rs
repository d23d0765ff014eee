//! The tokenizer of the whole-text classifiers (the read-only classifier, and
//! `database_ddl`): PostgreSQL's lexical rules, reduced to what they need to see.
//!
//! It works on a whole text (the classifier is handed complete Query and Parse texts), has
//! one token of look-ahead (lexed once), and never allocates. Where PostgreSQL would
//! reject the text (an unterminated string, comment or quoted identifier) or where the text
//! cannot be read exactly (a `U&"..."` identifier, whose escapes could spell any name), it
//! yields [`Tok::Bad`], which the classifier turns into a write.

use memchr::{memchr, memchr2, memmem};

/// One token. Words and quoted identifiers keep their bytes (as written, not case-folded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tok<'a> {
    /// An unquoted identifier or keyword.
    Word(&'a [u8]),
    /// A `"..."` identifier: its bytes between the quotes (a doubled `""` is left doubled).
    Quoted(&'a [u8]),
    /// A string or dollar-quoted string, a number, a `$n` parameter: data, never a name.
    Literal,
    /// `(`
    Open,
    /// `)`
    Close,
    /// `;`
    Semi,
    /// `,`
    Comma,
    /// `.`
    Dot,
    /// `::`
    Cast,
    /// Any other symbol (operator characters, brackets, `:`, a lone `$`...).
    Other,
    /// Something the classifier must not guess about (see the module doc).
    Bad,
    /// The end of the text.
    End,
}

impl Tok<'_> {
    /// Whether this is the unquoted word `keyword` (given in lower case), in any case.
    pub(crate) fn is(self, keyword: &str) -> bool {
        matches!(self, Tok::Word(w) if w.eq_ignore_ascii_case(keyword.as_bytes()))
    }

    /// Whether this ends a statement.
    pub(crate) fn ends_statement(self) -> bool {
        matches!(self, Tok::Semi | Tok::End)
    }
}

/// How plain `'...'` strings treat a backslash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Escapes {
    /// Only `''` escapes a quote (plain strings with standard_conforming_strings on, `U&'...'`).
    Doubled,
    /// A backslash escapes the next byte, too (`E'...'`, plain strings with it off).
    Backslash,
    /// No escapes at all: the first quote ends it (`B'...'`, `X'...'`).
    None,
}

#[derive(Debug)]
pub(crate) struct Lexer<'a> {
    text: &'a [u8],
    at: usize,
    /// standard_conforming_strings: whether a backslash in a plain string is an ordinary byte.
    standard_strings: bool,
    /// A [`Tok::Bad`] was returned: every later token is `Bad` too.
    failed: bool,
    /// The token [`Lexer::peek`] read and the offset after it, so that it is lexed only once.
    peeked: Option<(Tok<'a>, usize)>,
    /// Where the token lexed last starts and ends (see [`Lexer::last_lexed`]).
    span: (usize, usize),
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(text: &'a [u8], standard_conforming_strings: bool) -> Self {
        Lexer {
            text,
            at: 0,
            standard_strings: standard_conforming_strings,
            failed: false,
            peeked: None,
            span: (0, 0),
        }
    }

    /// The bytes of the token lexed last, as written (a string with its quotes): the token
    /// [`Lexer::next_tok`] just returned, unless [`Lexer::peek`] lexed another since.
    pub(crate) fn last_lexed(&self) -> &'a [u8] {
        self.text.get(self.span.0..self.span.1).unwrap_or_default()
    }

    /// The next token without consuming it.
    pub(crate) fn peek(&mut self) -> Tok<'a> {
        if let Some((tok, _)) = self.peeked {
            return tok;
        }
        let start = self.at;
        let tok = self.next_tok();
        self.peeked = Some((tok, self.at));
        self.at = start;
        tok
    }

    /// The next token. After [`Tok::End`] or [`Tok::Bad`] it keeps returning the same.
    pub(crate) fn next_tok(&mut self) -> Tok<'a> {
        if let Some((tok, after)) = self.peeked.take() {
            self.at = after;
            return tok;
        }
        if self.failed {
            return Tok::Bad;
        }
        let tok = self.lex();
        self.failed = tok == Tok::Bad;
        tok
    }

    fn lex(&mut self) -> Tok<'a> {
        loop {
            let Some(&b) = self.text.get(self.at) else {
                return Tok::End;
            };
            let next = self.text.get(self.at + 1).copied();
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => self.at += 1,
                b'-' if next == Some(b'-') => self.skip_line_comment(),
                b'/' if next == Some(b'*') => {
                    if !self.skip_block_comment() {
                        return Tok::Bad;
                    }
                }
                _ => {
                    let start = self.at;
                    let tok = self.token(b, next);
                    self.span = (start, self.at);
                    return tok;
                }
            }
        }
    }

    fn token(&mut self, b: u8, next: Option<u8>) -> Tok<'a> {
        let start = self.at;
        self.at += 1;
        match b {
            b'(' => Tok::Open,
            b')' => Tok::Close,
            b';' => Tok::Semi,
            b',' => Tok::Comma,
            b':' if next == Some(b':') => {
                self.at += 1;
                Tok::Cast
            }
            b'.' if next.is_some_and(|n| n.is_ascii_digit()) => self.number(),
            b'.' => Tok::Dot,
            b'0'..=b'9' => self.number(),
            b'\'' => {
                let escapes = if self.standard_strings {
                    Escapes::Doubled
                } else {
                    Escapes::Backslash
                };
                self.string(escapes)
            }
            b'"' => match self.quoted() {
                Some(name) => Tok::Quoted(name),
                None => Tok::Bad,
            },
            b'$' => self.dollar(),
            _ if is_ident_start(b) => self.word(start),
            _ => Tok::Other,
        }
    }

    /// A word, or the prefix of a special string (`E'...'`, `B'...'`, `X'...'`, `N'...'`,
    /// `U&'...'`) or of a `U&"..."` identifier.
    fn word(&mut self, start: usize) -> Tok<'a> {
        while self.text.get(self.at).is_some_and(|&c| is_ident_cont(c)) {
            self.at += 1;
        }
        let word = &self.text[start..self.at];
        let after = self.text.get(self.at).copied();
        if let [letter] = word {
            match (letter.to_ascii_lowercase(), after) {
                (b'e', Some(b'\'')) => {
                    self.at += 1;
                    return self.string(Escapes::Backslash);
                }
                (b'b' | b'x', Some(b'\'')) => {
                    self.at += 1;
                    return self.string(Escapes::None);
                }
                (b'n', Some(b'\'')) => {
                    self.at += 1;
                    let escapes = if self.standard_strings {
                        Escapes::Doubled
                    } else {
                        Escapes::Backslash
                    };
                    return self.string(escapes);
                }
                (b'u', Some(b'&')) => match self.text.get(self.at + 1) {
                    Some(b'\'') => {
                        self.at += 2;
                        return self.string(Escapes::Doubled);
                    }
                    Some(b'"') => return Tok::Bad,
                    _ => {}
                },
                _ => {}
            }
        }
        Tok::Word(word)
    }

    /// The rest of a string whose opening quote was consumed.
    fn string(&mut self, escapes: Escapes) -> Tok<'a> {
        loop {
            let rest = &self.text[self.at..];
            let found = match escapes {
                Escapes::Backslash => memchr2(b'\'', b'\\', rest),
                Escapes::Doubled | Escapes::None => memchr(b'\'', rest),
            };
            let Some(i) = found else {
                return Tok::Bad;
            };
            self.at += i + 1;
            if rest[i] == b'\\' {
                // The escaped byte, whatever it is (a quote included).
                if self.at >= self.text.len() {
                    return Tok::Bad;
                }
                self.at += 1;
                continue;
            }
            if escapes != Escapes::None && self.text.get(self.at) == Some(&b'\'') {
                self.at += 1;
                continue;
            }
            return Tok::Literal;
        }
    }

    /// The rest of a `"..."` identifier; `None` if it does not end.
    fn quoted(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        loop {
            let i = memchr(b'"', &self.text[self.at..])?;
            self.at += i + 1;
            if self.text.get(self.at) == Some(&b'"') {
                self.at += 1;
                continue;
            }
            return Some(&self.text[start..self.at - 1]);
        }
    }

    /// After a `$`: a parameter `$n`, a dollar-quoted string, or a lone `$`.
    fn dollar(&mut self) -> Tok<'a> {
        let rest = &self.text[self.at..];
        if rest.first().is_some_and(|c| c.is_ascii_digit()) {
            let digits = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            self.at += digits;
            return Tok::Literal;
        }
        let tag_len = match rest.first() {
            Some(&c) if is_ident_start(c) => rest.iter().take_while(|&&c| is_tag_cont(c)).count(),
            _ => 0,
        };
        if rest.get(tag_len) != Some(&b'$') {
            // Not a dollar quote: PostgreSQL, too, takes the `$` alone.
            return Tok::Other;
        }
        // The delimiter is `$tag$`, starting at the `$` already consumed.
        let delimiter = &self.text[self.at - 1..self.at + tag_len + 1];
        self.at += tag_len + 1;
        match memmem::find(&self.text[self.at..], delimiter) {
            Some(i) => {
                self.at += i + delimiter.len();
                Tok::Literal
            }
            None => Tok::Bad,
        }
    }

    /// A number; its first byte (a digit, or a `.` before a digit) was consumed. Letters right
    /// after it are left for the next token, so that they are still looked at.
    fn number(&mut self) -> Tok<'a> {
        let text = self.text;
        let digits = |at: &mut usize| {
            while text
                .get(*at)
                .is_some_and(|c| c.is_ascii_digit() || *c == b'_')
            {
                *at += 1;
            }
        };
        digits(&mut self.at);
        if text.get(self.at) == Some(&b'.') && text.get(self.at + 1) != Some(&b'.') {
            self.at += 1;
            digits(&mut self.at);
        }
        if matches!(text.get(self.at), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(text.get(self.at + 1), Some(b'+' | b'-')));
            if text.get(self.at + 1 + sign).is_some_and(u8::is_ascii_digit) {
                self.at += 1 + sign;
                digits(&mut self.at);
            }
        }
        Tok::Literal
    }

    fn skip_line_comment(&mut self) {
        match memchr2(b'\n', b'\r', &self.text[self.at..]) {
            Some(i) => self.at += i + 1,
            None => self.at = self.text.len(),
        }
    }

    /// Skips a (nested) block comment; false if it does not end.
    fn skip_block_comment(&mut self) -> bool {
        let mut depth = 0usize;
        while let Some(i) = memchr2(b'/', b'*', &self.text[self.at..]) {
            self.at += i;
            match (self.text[self.at], self.text.get(self.at + 1)) {
                (b'/', Some(b'*')) => {
                    depth += 1;
                    self.at += 2;
                }
                (b'*', Some(b'/')) => {
                    depth -= 1;
                    self.at += 2;
                    if depth == 0 {
                        return true;
                    }
                }
                _ => self.at += 1,
            }
        }
        self.at = self.text.len();
        false
    }
}

/// PostgreSQL's `ident_start`: a letter, `_`, or any byte with the high bit set.
const fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

/// PostgreSQL's `ident_cont`: also digits and `$`.
const fn is_ident_cont(b: u8) -> bool {
    is_tag_cont(b) || b == b'$'
}

/// A dollar-quote tag continues with what an identifier does, except `$`.
const fn is_tag_cont(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<Tok<'_>> {
        let mut lexer = Lexer::new(text.as_bytes(), true);
        let mut out = Vec::new();
        loop {
            let tok = lexer.next_tok();
            out.push(tok);
            if matches!(tok, Tok::End | Tok::Bad) {
                return out;
            }
        }
    }

    #[test]
    fn words_symbols_and_literals() {
        use Tok::*;
        assert_eq!(
            tokens("SELECT a.b::int, f(1.5e-3) FROM \"T\"\"x\" ;"),
            [
                Word(b"SELECT"),
                Word(b"a"),
                Dot,
                Word(b"b"),
                Cast,
                Word(b"int"),
                Comma,
                Word(b"f"),
                Open,
                Literal,
                Close,
                Word(b"FROM"),
                Quoted(b"T\"\"x"),
                Semi,
                End
            ]
        );
        assert_eq!(tokens("1.x"), [Literal, Word(b"x"), End]);
        assert_eq!(tokens("a$b $1 $"), [Word(b"a$b"), Literal, Other, End]);
        assert_eq!(tokens(".5 .e"), [Literal, Dot, Word(b"e"), End]);
    }

    #[test]
    fn strings_comments_and_dollar_quotes() {
        use Tok::*;
        assert_eq!(tokens("'it''s' x"), [Literal, Word(b"x"), End]);
        assert_eq!(tokens(r"'a\' x"), [Literal, Word(b"x"), End]);
        assert_eq!(tokens(r"E'a\'b' x"), [Literal, Word(b"x"), End]);
        assert_eq!(tokens("B'1'' x"), [Literal, Bad]);
        assert_eq!(tokens("U&'a' U&\"b\""), [Literal, Bad]);
        assert_eq!(
            tokens("a /* x /* y */ z */ b -- c\n d"),
            [Word(b"a"), Word(b"b"), Word(b"d"), End]
        );
        assert_eq!(tokens("$q$ $$ ' $q$ x"), [Literal, Word(b"x"), End]);
        assert_eq!(tokens("$$a$$b"), [Literal, Word(b"b"), End]);
        assert_eq!(
            tokens("a+--x\n-b"),
            [Word(b"a"), Other, Other, Word(b"b"), End]
        );
        for bad in ["'open", "\"open", "/* /* */", "$x$ open", "E'\\", "x E'\\'"] {
            assert_eq!(tokens(bad).last(), Some(&Bad), "{bad}");
        }
    }

    #[test]
    fn peeking_lexes_once_and_consumes_nothing() {
        let mut lexer = Lexer::new(b"a 'b' (", true);
        assert_eq!(lexer.peek(), Tok::Word(b"a"));
        assert_eq!(lexer.peek(), Tok::Word(b"a"));
        assert_eq!(lexer.next_tok(), Tok::Word(b"a"));
        assert_eq!(lexer.peek(), Tok::Literal);
        assert_eq!(lexer.next_tok(), Tok::Literal);
        assert_eq!(lexer.next_tok(), Tok::Open);
        assert_eq!(lexer.peek(), Tok::End);
        assert_eq!(lexer.next_tok(), Tok::End);
        let mut lexer = Lexer::new(b"'open", true);
        assert_eq!(lexer.peek(), Tok::Bad);
        assert_eq!(lexer.next_tok(), Tok::Bad);
        assert_eq!(lexer.next_tok(), Tok::Bad);
    }

    #[test]
    fn standard_conforming_strings_off() {
        let mut lexer = Lexer::new(br"'a\' x' y", false);
        assert_eq!(lexer.next_tok(), Tok::Literal);
        assert_eq!(lexer.next_tok(), Tok::Word(b"y"));
    }
}
