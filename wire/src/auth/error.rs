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
    /// The client chose a mechanism we did not offer (`SCRAM-SHA-256-PLUS` without binding
    /// data, or an unknown one).
    UnsupportedMechanism,
    /// The client sent GS2 flag 'y' (it supports channel binding but thinks we do not) while
    /// we offered `SCRAM-SHA-256-PLUS`: a downgrade, so the exchange stops (28000).
    ChannelBindingNegotiation,
    /// The client asked for a channel-binding type other than `tls-server-end-point`.
    UnsupportedChannelBindingType { name: PeerText },
    /// The client sent an authorization identity, which PostgreSQL does not support either.
    AuthzidNotSupported,
    /// With `SCRAM-SHA-256-PLUS`, the client-final-message's `c=` is not our GS2 header and
    /// binding data: the client sees another TLS server certificate (28000).
    ChannelBindingMismatch,
    /// Without channel binding, `c=` does not repeat the client's GS2 header (`biws` for
    /// 'n', `eSws` for 'y').
    UnexpectedChannelBindingAttribute,
    /// Logging in to a server with `channel_binding=require` and the server (or our
    /// transport) cannot bind; `reason` is libpq's message.
    ChannelBindingRequired { reason: &'static str },
    /// The TLS server certificate is not DER we can read, or its signature algorithm is not
    /// one we know, so it has no `tls-server-end-point` hash.
    UnknownCertificateSignatureAlgorithm,
    /// The TLS server certificate's signature algorithm has no hash function (Ed25519,
    /// Ed448), so `tls-server-end-point` is undefined for it (RFC 5929 section 4.1).
    CertificateHashUndefined,
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
    /// The SQLSTATE to report, PostgreSQL's for the errors a server reports. Failures
    /// logging in to a server (including reading its certificate) are reported by the proxy
    /// to its client as 08001 (it could not establish the server connection).
    pub fn sqlstate(&self) -> SqlState {
        match self {
            Self::Protocol(e) => e.sqlstate(),
            Self::InvalidPassword => sqlstate::INVALID_PASSWORD,
            Self::InvalidSecret
            | Self::ChannelBindingNegotiation
            | Self::ChannelBindingMismatch => sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
            Self::AuthzidNotSupported => sqlstate::FEATURE_NOT_SUPPORTED,
            Self::ServerSignatureMismatch
            | Self::IterationsOutOfRange { .. }
            | Self::UnsupportedMethod
            | Self::ChannelBindingRequired { .. }
            | Self::UnknownCertificateSignatureAlgorithm
            | Self::CertificateHashUndefined => {
                sqlstate::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
            }
            Self::RandomUnavailable => sqlstate::INTERNAL_ERROR,
            Self::MalformedScram { .. }
            | Self::UnsupportedMechanism
            | Self::UnsupportedChannelBindingType { .. }
            | Self::UnexpectedChannelBindingAttribute
            | Self::NonceMismatch
            | Self::UnexpectedMessage => sqlstate::PROTOCOL_VIOLATION,
        }
    }
}

/// A peer-supplied name quoted in an error: at most 30 bytes, anything but printable ASCII
/// replaced by '?'. PostgreSQL quotes client strings this way so that an unauthenticated
/// peer cannot put arbitrary bytes into logs; a fixed array keeps [`AuthError`] `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PeerText {
    bytes: [u8; PeerText::MAX_LEN],
    len: u8,
}

impl PeerText {
    const MAX_LEN: usize = 30;

    pub(crate) fn new(raw: &[u8]) -> Self {
        let mut text = Self {
            bytes: [0; Self::MAX_LEN],
            len: 0,
        };
        for (slot, &byte) in text.bytes.iter_mut().zip(raw) {
            *slot = if (0x21..=0x7e).contains(&byte) {
                byte
            } else {
                b'?'
            };
            text.len += 1;
        }
        text
    }

    /// The sanitized text (printable ASCII only).
    pub fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

impl fmt::Debug for PeerText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
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
            Self::ChannelBindingNegotiation => {
                f.write_str("SCRAM channel binding negotiation error")
            }
            Self::UnsupportedChannelBindingType { name } => write!(
                f,
                "unsupported SCRAM channel-binding type \"{}\"",
                name.as_str()
            ),
            Self::AuthzidNotSupported => {
                f.write_str("client uses authorization identity, but it is not supported")
            }
            Self::ChannelBindingMismatch => f.write_str("SCRAM channel binding check failed"),
            Self::UnexpectedChannelBindingAttribute => {
                f.write_str("unexpected SCRAM channel-binding attribute in client-final-message")
            }
            Self::ChannelBindingRequired { reason } => f.write_str(reason),
            Self::UnknownCertificateSignatureAlgorithm => {
                f.write_str("could not determine server certificate signature algorithm")
            }
            Self::CertificateHashUndefined => f.write_str(
                "server certificate signature algorithm has no hash function, so \
                 tls-server-end-point channel binding is undefined for it",
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_text_is_short_and_printable() {
        assert_eq!(PeerText::new(b"tls-unique").as_str(), "tls-unique");
        assert_eq!(PeerText::new(b"a b\xff\0c").as_str(), "a?b??c");
        assert_eq!(PeerText::new(&[b'x'; 100]).as_str().len(), 30);
        let error = AuthError::UnsupportedChannelBindingType {
            name: PeerText::new(b"tls-unique"),
        };
        assert_eq!(
            error.to_string(),
            "unsupported SCRAM channel-binding type \"tls-unique\""
        );
        assert_eq!(error.sqlstate(), sqlstate::PROTOCOL_VIOLATION);
    }

    #[test]
    fn channel_binding_sqlstates_are_postgresql_s() {
        let auth = sqlstate::INVALID_AUTHORIZATION_SPECIFICATION;
        assert_eq!(AuthError::ChannelBindingNegotiation.sqlstate(), auth);
        assert_eq!(AuthError::ChannelBindingMismatch.sqlstate(), auth);
        assert_eq!(
            AuthError::UnexpectedChannelBindingAttribute.sqlstate(),
            sqlstate::PROTOCOL_VIOLATION
        );
        assert_eq!(
            AuthError::ChannelBindingMismatch.to_string(),
            "SCRAM channel binding check failed"
        );
    }
}
