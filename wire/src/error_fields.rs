//! The field list of ErrorResponse and NoticeResponse: a builder for the errors the proxy
//! raises itself, and a borrowed parser for the ones servers send.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::{ERROR_RESPONSE, NOTICE_RESPONSE};
use crate::error::ProtocolError;
use crate::sqlstate::SqlState;

/// Field type bytes, as listed in the protocol's "Error and Notice Message Fields".
pub mod field {
    pub(crate) const SEVERITY: u8 = b'S';
    /// Severity, never localized (9.6+).
    pub(crate) const SEVERITY_NONLOCALIZED: u8 = b'V';
    pub const CODE: u8 = b'C';
    pub(crate) const MESSAGE: u8 = b'M';
    pub(crate) const DETAIL: u8 = b'D';
    pub(crate) const HINT: u8 = b'H';
    pub const POSITION: u8 = b'P';
    pub const INTERNAL_POSITION: u8 = b'p';
    pub const INTERNAL_QUERY: u8 = b'q';
    pub const WHERE: u8 = b'W';
    pub const SCHEMA_NAME: u8 = b's';
    pub const TABLE_NAME: u8 = b't';
    pub const COLUMN_NAME: u8 = b'c';
    pub const DATA_TYPE_NAME: u8 = b'd';
    pub const CONSTRAINT_NAME: u8 = b'n';
    pub const FILE: u8 = b'F';
    pub const LINE: u8 = b'L';
    pub const ROUTINE: u8 = b'R';
}

/// Severity of an error or notice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
    Panic,
    Warning,
    Notice,
    Debug,
    Info,
    Log,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Error => "ERROR",
            Self::Fatal => "FATAL",
            Self::Panic => "PANIC",
            Self::Warning => "WARNING",
            Self::Notice => "NOTICE",
            Self::Debug => "DEBUG",
            Self::Info => "INFO",
            Self::Log => "LOG",
        }
    }

    pub fn parse(text: &[u8]) -> Option<Self> {
        Some(match text {
            b"ERROR" => Self::Error,
            b"FATAL" => Self::Fatal,
            b"PANIC" => Self::Panic,
            b"WARNING" => Self::Warning,
            b"NOTICE" => Self::Notice,
            b"DEBUG" => Self::Debug,
            b"INFO" => Self::Info,
            b"LOG" => Self::Log,
            _ => return None,
        })
    }
}

/// An error or notice the proxy raises. Build it, then `encode_error` or `encode_notice`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorNotice<'a> {
    pub severity: Severity,
    pub code: SqlState,
    pub message: &'a str,
    pub detail: Option<&'a str>,
    pub hint: Option<&'a str>,
}

impl<'a> ErrorNotice<'a> {
    pub fn new(severity: Severity, code: SqlState, message: &'a str) -> Self {
        Self {
            severity,
            code,
            message,
            detail: None,
            hint: None,
        }
    }

    pub fn detail(mut self, detail: &'a str) -> Self {
        self.detail = Some(detail);
        self
    }

    pub fn hint(mut self, hint: &'a str) -> Self {
        self.hint = Some(hint);
        self
    }

    /// Appends an ErrorResponse ('E').
    pub fn encode_error(&self, out: &mut BytesMut) {
        self.encode(out, ERROR_RESPONSE);
    }

    /// Appends a NoticeResponse ('N').
    pub fn encode_notice(&self, out: &mut BytesMut) {
        self.encode(out, NOTICE_RESPONSE);
    }

    fn encode(&self, out: &mut BytesMut, code: u8) {
        let severity = self.severity.as_str().as_bytes();
        let optional = [(field::DETAIL, self.detail), (field::HINT, self.hint)];
        let hint = 2 * (severity.len() + 2)
            + 7
            + self.message.len()
            + 2
            + optional
                .iter()
                .map(|(_, v)| v.map_or(0, |v| v.len() + 2))
                .sum::<usize>()
            + 1;
        let at = begin_message(out, code, hint);
        put_field(out, field::SEVERITY, severity);
        put_field(out, field::SEVERITY_NONLOCALIZED, severity);
        put_field(out, field::CODE, self.code.as_bytes());
        put_field(out, field::MESSAGE, self.message.as_bytes());
        for (kind, value) in optional {
            if let Some(value) = value {
                put_field(out, kind, value.as_bytes());
            }
        }
        out.put_u8(0);
        end_message(out, at);
    }
}

fn put_field(out: &mut BytesMut, kind: u8, value: &[u8]) {
    out.put_u8(kind);
    // A NUL inside a value would end the field early; cut the value there instead.
    let value = value.split(|b| *b == 0).next().unwrap_or_default();
    put_cstr(out, value);
}

/// The validated field list of a received ErrorResponse or NoticeResponse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    /// Fields and the final terminating NUL.
    raw: &'a [u8],
}

impl<'a> ErrorFields<'a> {
    pub(crate) fn decode(body: &'a [u8], message: &'static str) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, message);
        while reader.u8()? != 0 {
            reader.cstr()?;
        }
        reader.finish()?;
        Ok(Self { raw: body })
    }

    pub(crate) fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Every `(field type, value)` in order.
    pub fn iter(&self) -> impl Iterator<Item = (u8, &'a [u8])> + 'a {
        let mut reader = Reader::new(self.raw, "ErrorFields");
        core::iter::from_fn(move || match reader.u8() {
            Ok(0) | Err(_) => None,
            Ok(kind) => reader.cstr().ok().map(|value| (kind, value)),
        })
    }

    pub fn get(&self, kind: u8) -> Option<&'a [u8]> {
        self.iter().find(|(k, _)| *k == kind).map(|(_, v)| v)
    }

    /// The non-localized severity if present, else the localized one.
    pub fn severity(&self) -> Option<Severity> {
        self.get(field::SEVERITY_NONLOCALIZED)
            .or_else(|| self.get(field::SEVERITY))
            .and_then(Severity::parse)
    }

    pub fn code(&self) -> Option<SqlState> {
        self.get(field::CODE).and_then(SqlState::parse)
    }

    pub fn message(&self) -> Option<&'a [u8]> {
        self.get(field::MESSAGE)
    }

    pub fn detail(&self) -> Option<&'a [u8]> {
        self.get(field::DETAIL)
    }

    pub fn hint(&self) -> Option<&'a [u8]> {
        self.get(field::HINT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Message;
    use crate::messages::backend::ErrorResponse;
    use crate::sqlstate;

    #[test]
    fn builder_writes_what_libpq_reads() {
        let mut out = BytesMut::new();
        ErrorNotice::new(Severity::Fatal, sqlstate::TOO_MANY_CONNECTIONS, "pool full")
            .hint("raise pool_size")
            .encode_error(&mut out);
        let expected: &[u8] =
            b"E\0\0\0\x36SFATAL\0VFATAL\0C53300\0Mpool full\0Hraise pool_size\0\0";
        assert_eq!(&out[..], expected);
        let decoded = ErrorResponse::decode_frame(&out).unwrap();
        assert_eq!(decoded.fields.severity(), Some(Severity::Fatal));
        assert_eq!(decoded.fields.code(), Some(sqlstate::TOO_MANY_CONNECTIONS));
        assert_eq!(decoded.fields.hint(), Some(&b"raise pool_size"[..]));
        assert_eq!(decoded.fields.detail(), None);
    }

    #[test]
    fn parser_rejects_unterminated_lists() {
        assert!(ErrorFields::decode(b"SERROR\0", "ErrorResponse").is_err());
        assert!(ErrorFields::decode(b"SERROR", "ErrorResponse").is_err());
        assert!(ErrorFields::decode(b"\0\0", "ErrorResponse").is_err());
        assert!(ErrorFields::decode(b"\0", "ErrorResponse").is_ok());
    }
}
