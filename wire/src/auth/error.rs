//! Authentication failures, each with the SQLSTATE PostgreSQL would report.

use core::fmt;

use crate::error::ProtocolError;
use crate::sqlstate::{self, SqlState};

/// Why an authentication exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthError {
    /// The peer's message is not a valid protocol message.
    Protocol(ProtocolError),
    /// A SCRAM message does not follow RFC 5802's grammar.
    MalformedScram { reason: &'static str },
    /// The client chose a mechanism we did not offer.
    UnsupportedMechanism,
    /// The client asked for channel binding ('p' flag), which we never offer.
    ChannelBindingNotSupported,
    /// The client sent an authorization identity, which PostgreSQL does not support either.
    AuthzidNotSupported,
    /// The channel-binding attribute does not repeat the client's GS2 header.
    ChannelBindingMismatch,
    /// The nonce in a later message does not extend the one exchanged earlier.
    NonceMismatch,
    /// The password (or proof) is wrong.
    InvalidPassword,
    /// The server's SCRAM signature is wrong: it does not know our password.
    ServerSignatureMismatch,
    /// The server's SCRAM iteration count is outside our accepted range.
    IterationsOutOfRange { iterations: u32 },
    /// The server asked for a method we cannot use (GSSAPI, SSPI, Kerberos, or an unknown one).
    UnsupportedMethod,
    /// A message arrived in a state that does not expect it.
    UnexpectedMessage,
    /// A stored secret (userlist entry) cannot be parsed.
    InvalidSecret,
    /// The OS RNG failed.
    RandomUnavailable,
}

impl AuthError {
    /// The SQLSTATE to report. Failures logging in to a server are reported by the proxy
    /// to its client as 08001 (it could not establish the server connection).
    pub fn sqlstate(&self) -> SqlState {
        match self {
            Self::Protocol(e) => e.sqlstate(),
            Self::InvalidPassword => sqlstate::INVALID_PASSWORD,
            Self::InvalidSecret => sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            Self::AuthzidNotSupported | Self::ChannelBindingNotSupported => {
                sqlstate::FEATURE_NOT_SUPPORTED
            }
            Self::ServerSignatureMismatch
            | Self::IterationsOutOfRange { .. }
            | Self::UnsupportedMethod => sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION,
            Self::RandomUnavailable => sqlstate::INTERNAL_ERROR,
            Self::MalformedScram { .. }
            | Self::UnsupportedMechanism
            | Self::ChannelBindingMismatch
            | Self::NonceMismatch
            | Self::UnexpectedMessage => sqlstate::PROTOCOL_VIOLATION,
        }
    }
}

impl From<ProtocolError> for AuthError {
    fn from(error: ProtocolError) -> Self {
        Self::Protocol(error)
    }
}

impl fmt::Display for AuthError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Protocol(e) => e.fmt(f),
            Self::MalformedScram { reason } => write!(f, "malformed SCRAM message: {reason}"),
            Self::UnsupportedMechanism => {
                f.write_str("client selected an invalid SASL authentication mechanism")
            }
            Self::ChannelBindingNotSupported => f.write_str("channel binding is not supported"),
            Self::AuthzidNotSupported => {
                f.write_str("client uses authorization identity, but it is not supported")
            }
            Self::ChannelBindingMismatch => f.write_str("SCRAM channel binding check failed"),
            Self::NonceMismatch => f.write_str("SCRAM nonce mismatch"),
            Self::InvalidPassword => f.write_str("password authentication failed"),
            Self::ServerSignatureMismatch => f.write_str("incorrect server signature"),
            Self::IterationsOutOfRange { iterations } => {
                write!(f, "SCRAM iteration count {iterations} is out of range")
            }
            Self::UnsupportedMethod => {
                f.write_str("unsupported authentication method requested by server")
            }
            Self::UnexpectedMessage => f.write_str("unexpected authentication message"),
            Self::InvalidSecret => f.write_str("invalid stored password secret"),
            Self::RandomUnavailable => f.write_str("could not generate random bytes"),
        }
    }
}

impl std::error::Error for AuthError {}
