//! Errors from decoding bytes a peer sent: every variant maps to a SQLSTATE.
//!
//! Bad input from the network is never a panic. The proxy turns a [`ProtocolError`] into an
//! ErrorResponse with [`ProtocolError::sqlstate`] and closes the connection.

use core::fmt;

use crate::sqlstate::{self, SqlState};

/// A peer sent bytes that are not a valid protocol message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolError {
    /// The length word is below its minimum (4 for typed messages, 8 for startup packets).
    LengthTooShort { code: u8, len: u32 },
    /// The length word exceeds the configured maximum.
    LengthTooLong { code: u8, len: u32, max_len: u32 },
    /// The frame's type byte is not the one the decoder was asked for.
    UnexpectedCode { expected: u8, found: u8 },
    /// The type byte names no message of this direction.
    UnknownCode { code: u8 },
    /// The body ends before a field of `message` is complete.
    Truncated { message: &'static str },
    /// The body has bytes left over after the last field of `message`.
    TrailingBytes { message: &'static str },
    /// A string field of `message` has no terminating NUL.
    MissingNul { message: &'static str },
    /// A text field of `message` that must be UTF-8 is not.
    InvalidUtf8 { message: &'static str },
    /// A field has a value the protocol does not allow.
    InvalidValue {
        message: &'static str,
        field: &'static str,
    },
    /// The startup packet asks for a protocol major version we do not speak.
    UnsupportedProtocol { major: u16, minor: u16 },
}

impl ProtocolError {
    /// The SQLSTATE to report to the peer.
    pub fn sqlstate(&self) -> SqlState {
        match self {
            Self::UnsupportedProtocol { .. } => sqlstate::FEATURE_NOT_SUPPORTED,
            _ => sqlstate::PROTOCOL_VIOLATION,
        }
    }
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::LengthTooShort { code, len } => {
                write!(
                    f,
                    "invalid message length {len} for message type {:?}",
                    code as char
                )
            }
            Self::LengthTooLong { code, len, max_len } => write!(
                f,
                "message length {len} of type {:?} exceeds the limit of {max_len} bytes",
                code as char
            ),
            Self::UnexpectedCode { expected, found } => write!(
                f,
                "expected message type {:?}, got {:?}",
                expected as char, found as char
            ),
            Self::UnknownCode { code } => write!(f, "invalid message type {:?}", code as char),
            Self::Truncated { message } => write!(f, "{message} message is truncated"),
            Self::TrailingBytes { message } => write!(f, "{message} message has trailing bytes"),
            Self::MissingNul { message } => {
                write!(f, "{message} message has an unterminated string")
            }
            Self::InvalidUtf8 { message } => write!(f, "{message} message has invalid UTF-8"),
            Self::InvalidValue { message, field } => {
                write!(f, "{message} message has an invalid {field}")
            }
            Self::UnsupportedProtocol { major, minor } => {
                write!(f, "unsupported frontend protocol {major}.{minor}")
            }
        }
    }
}

impl std::error::Error for ProtocolError {}
