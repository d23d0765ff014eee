//! The startup phase of a client: packets without a type byte, read until the
//! StartupMessage (an SSLRequest on the way is answered by `engine/tls_io.rs`, a
//! GSSENCRequest with 'N') or a
//! CancelRequest. Refusals are PostgreSQL's own: a length word out of range closes the
//! connection without a reply (the postmaster's "invalid length of startup packet"), an old
//! protocol version gets 0A000, a malformed packet 08P01.
//!
//! Protocol negotiation goes through `pgtier_wire::negotiate`: a client asking for 3.1+ or
//! sending `_pq_.*` options gets NegotiateProtocolVersion (3.0, every option listed), and
//! those options never reach the pool key or a server.

use bytes::{Buf, Bytes, BytesMut};
use pgtier_wire::messages::frontend::StartupPacket;
use pgtier_wire::{FrameLimits, ProtocolError, framing, negotiate};

use crate::cancel::CancelKey;
use crate::messages::{self, sqlstate};

/// Most parameters accepted in one StartupMessage (each becomes an owned pair).
pub(crate) const MAX_STARTUP_PARAMS: usize = 64;

/// What a login asked for, owned so the receive buffer can be dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LoginRequest {
    /// Every parameter but `_pq_.*` protocol options, in the order sent.
    pub params: Vec<(String, String)>,
    /// NegotiateProtocolVersion to send before anything else, when the client needs one.
    pub negotiation: Option<Bytes>,
}

/// The next step of a client in its startup phase.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum StartupStep {
    /// The packet is not complete yet.
    NeedMore,
    /// SSLRequest: answer 'S' and begin TLS when it is configured, else 'N'.
    SslRequest,
    /// GSSENCRequest: answer 'N' and read on.
    Decline,
    /// A CancelRequest: route it, close the connection without a reply.
    Cancel(CancelKey),
    /// A StartupMessage.
    Login(LoginRequest),
    /// Close the connection after sending this ErrorResponse, or without a reply.
    Refuse(Option<Bytes>),
}

/// Reads one startup-phase packet from the front of `input` (consumed when complete).
pub(crate) fn read_startup(input: &mut BytesMut, max_len: u32) -> StartupStep {
    let limits = FrameLimits {
        max_startup_len: max_len,
        ..FrameLimits::default()
    };
    let len = match framing::peek_startup_len(input, &limits) {
        Ok(Some(len)) => len as usize,
        Ok(None) => return StartupStep::NeedMore,
        Err(_) => return StartupStep::Refuse(None),
    };
    if input.len() < len {
        return StartupStep::NeedMore;
    }
    let step = match StartupPacket::decode(&input[..len]) {
        Ok(StartupPacket::SslRequest) => StartupStep::SslRequest,
        Ok(StartupPacket::GssEncRequest) => StartupStep::Decline,
        Ok(StartupPacket::Cancel(cancel)) => match <[u8; 4]>::try_from(cancel.secret_key) {
            Ok(secret) => StartupStep::Cancel(CancelKey {
                pid: cancel.process_id,
                secret: u32::from_be_bytes(secret),
            }),
            // A 3.2 client's longer key cannot be one of ours: nothing to cancel.
            Err(_) => StartupStep::Refuse(None),
        },
        Ok(StartupPacket::Startup(startup)) if startup.params.len() > MAX_STARTUP_PARAMS => {
            StartupStep::Refuse(Some(messages::fatal(
                sqlstate::PROTOCOL_VIOLATION,
                "invalid startup packet: too many parameters",
            )))
        }
        Ok(StartupPacket::Startup(startup)) => {
            let mut negotiation = BytesMut::new();
            let negotiation = negotiate::encode_negotiation(&mut negotiation, &startup)
                .then(|| negotiation.freeze());
            let params = startup
                .params
                .iter()
                .filter(|(name, _)| !negotiate::is_protocol_option(name))
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect();
            StartupStep::Login(LoginRequest {
                params,
                negotiation,
            })
        }
        Err(error) => StartupStep::Refuse(refusal(error)),
    };
    input.advance(len);
    step
}

/// The ErrorResponse PostgreSQL sends for a startup packet it cannot use.
fn refusal(error: ProtocolError) -> Option<Bytes> {
    Some(match error {
        ProtocolError::LengthTooShort { .. } | ProtocolError::LengthTooLong { .. } => {
            return None;
        }
        ProtocolError::UnsupportedProtocol { major, minor } => messages::fatal(
            sqlstate::FEATURE_NOT_SUPPORTED,
            &format!("unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0"),
        ),
        other => messages::fatal(
            sqlstate::PROTOCOL_VIOLATION,
            &format!("invalid startup packet: {other}"),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_wire::messages::frontend::{ProtocolVersion, StartupMessage};

    fn startup(version: ProtocolVersion, params: &[(&str, &str)]) -> BytesMut {
        let mut out = BytesMut::new();
        StartupMessage::encode_parts(&mut out, version, params);
        out
    }

    fn sqlstate_of(step: &StartupStep) -> Option<Vec<u8>> {
        let StartupStep::Refuse(Some(error)) = step else {
            return None;
        };
        let at = error.windows(6).position(|w| w[0] == b'C')?;
        Some(error[at + 1..at + 6].to_vec())
    }

    #[test]
    fn a_login_is_read_whole_and_consumed() {
        let mut input = startup(
            ProtocolVersion::V3_0,
            &[("user", "alice"), ("database", "db")],
        );
        let whole = input.clone();
        let mut partial = BytesMut::from(&whole[..whole.len() - 1]);
        assert_eq!(read_startup(&mut partial, 10_000), StartupStep::NeedMore);
        assert_eq!(partial.len(), whole.len() - 1, "nothing consumed");
        input.extend_from_slice(b"Q");
        let step = read_startup(&mut input, 10_000);
        assert_eq!(
            step,
            StartupStep::Login(LoginRequest {
                params: vec![
                    ("user".into(), "alice".into()),
                    ("database".into(), "db".into())
                ],
                negotiation: None,
            })
        );
        assert_eq!(&input[..], b"Q", "bytes after the packet stay");
    }

    #[test]
    fn ssl_requests_go_to_tls_and_gssenc_requests_are_declined() {
        for (code, step) in [
            (80_877_103u32, StartupStep::SslRequest),
            (80_877_104, StartupStep::Decline),
        ] {
            let mut input = BytesMut::new();
            input.extend_from_slice(&8u32.to_be_bytes());
            input.extend_from_slice(&code.to_be_bytes());
            assert_eq!(read_startup(&mut input, 10_000), step);
            assert!(input.is_empty());
        }
    }

    #[test]
    fn a_cancel_request_is_read() {
        let mut input = BytesMut::from(&messages::cancel_request(42, 7)[..]);
        assert_eq!(
            read_startup(&mut input, 10_000),
            StartupStep::Cancel(CancelKey { pid: 42, secret: 7 })
        );
    }

    #[test]
    fn terminate_before_startup_is_closed_silently() {
        let mut input = BytesMut::from(&b"X\0\0\0\x04"[..]);
        assert_eq!(read_startup(&mut input, 10_000), StartupStep::Refuse(None));
        let mut short = BytesMut::from(&[0u8, 0, 0, 3][..]);
        assert_eq!(read_startup(&mut short, 10_000), StartupStep::Refuse(None));
    }

    #[test]
    fn an_old_protocol_gets_0a000_and_a_malformed_packet_08p01() {
        let mut input = startup(ProtocolVersion::new(2, 0), &[("user", "x")]);
        assert_eq!(
            sqlstate_of(&read_startup(&mut input, 10_000)).as_deref(),
            Some(&b"0A000"[..])
        );
        let mut input = BytesMut::from(&[0u8, 0, 0, 12, 0, 3, 0, 0, b'u', b's', b'e', b'r'][..]);
        assert_eq!(
            sqlstate_of(&read_startup(&mut input, 10_000)).as_deref(),
            Some(&b"08P01"[..])
        );
    }

    #[test]
    fn protocol_3_2_is_negotiated_and_options_never_pass() {
        let mut input = startup(
            ProtocolVersion::V3_2,
            &[
                ("user", "a"),
                ("_pq_.magic", "1"),
                ("application_name", "x"),
            ],
        );
        let StartupStep::Login(login) = read_startup(&mut input, 10_000) else {
            panic!("a login");
        };
        assert!(login.negotiation.is_some_and(|n| n[0] == b'v'));
        assert_eq!(
            login.params,
            vec![
                ("user".to_string(), "a".to_string()),
                ("application_name".to_string(), "x".to_string())
            ]
        );
    }

    #[test]
    fn too_many_parameters_are_refused() {
        let names: Vec<String> = (0..=MAX_STARTUP_PARAMS).map(|n| format!("p{n}")).collect();
        let params: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
        let mut input = startup(ProtocolVersion::V3_0, &params);
        assert_eq!(
            sqlstate_of(&read_startup(&mut input, 100_000)).as_deref(),
            Some(&b"08P01"[..])
        );
    }
}
