//! Protocol version negotiation: pgtier speaks protocol 3.0 to clients.
//!
//! A client asking for 3.1+ (PostgreSQL 18's libpq can ask for 3.2, whose cancel keys are
//! variable length) or sending `_pq_.*` protocol options gets a NegotiateProtocolVersion
//! naming 3.0 and listing every `_pq_.*` option as unrecognised, exactly as a PostgreSQL
//! server older than the client would answer. Like PostgreSQL, the version field carries the
//! full version word (`3 << 16 | 0`), which is what libpq expects. The client then continues with 3.0 semantics,
//! so BackendKeyData keeps 4-byte keys end to end.

use bytes::BytesMut;

use crate::messages::backend::NegotiateProtocolVersion;
use crate::messages::frontend::{ProtocolVersion, StartupMessage};

/// The newest minor version of protocol 3 that pgtier speaks.
pub(crate) const NEWEST_MINOR: u16 = 0;

/// Startup parameters with this prefix are protocol options, not settings.
pub(crate) const PROTOCOL_OPTION_PREFIX: &str = "_pq_.";

/// Whether a startup parameter is a protocol option rather than a setting.
pub fn is_protocol_option(name: &str) -> bool {
    name.starts_with(PROTOCOL_OPTION_PREFIX)
}

/// Whether the client must be told that we speak an older version or ignore its options.
pub(crate) fn needs_negotiation(startup: &StartupMessage<'_>) -> bool {
    startup.version > ProtocolVersion::new(3, NEWEST_MINOR)
        || startup
            .params
            .iter()
            .any(|(name, _)| is_protocol_option(name))
}

/// Appends a NegotiateProtocolVersion if the client needs one (see the module doc) and
/// returns whether it did. Send it right after the startup packet, before authentication.
pub fn encode_negotiation(out: &mut BytesMut, startup: &StartupMessage<'_>) -> bool {
    if !needs_negotiation(startup) {
        return false;
    }
    let options = startup
        .params
        .iter()
        .filter(|(name, _)| is_protocol_option(name))
        .map(|(name, _)| name.as_bytes());
    NegotiateProtocolVersion::encode_parts(out, ProtocolVersion::new(3, NEWEST_MINOR).0, options);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::Message;
    use crate::messages::frontend::StartupPacket;

    fn startup(out: &mut BytesMut, version: ProtocolVersion, params: &[(&str, &str)]) {
        StartupMessage::encode_parts(out, version, params);
    }

    fn decoded(packet: &[u8]) -> StartupMessage<'_> {
        match StartupPacket::decode(packet).unwrap() {
            StartupPacket::Startup(s) => s,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn protocol_3_0_without_options_is_accepted_silently() {
        let mut packet = BytesMut::new();
        startup(&mut packet, ProtocolVersion::V3_0, &[("user", "a")]);
        let mut out = BytesMut::new();
        assert!(!encode_negotiation(&mut out, &decoded(&packet)));
        assert!(out.is_empty());
    }

    #[test]
    fn protocol_3_2_is_negotiated_down_with_options_listed() {
        let mut packet = BytesMut::new();
        let params = [
            ("user", "a"),
            ("_pq_.compression", "on"),
            ("database", "d"),
            ("_pq_.x", ""),
        ];
        startup(&mut packet, ProtocolVersion::V3_2, &params);
        let mut out = BytesMut::new();
        assert!(encode_negotiation(&mut out, &decoded(&packet)));
        let message = NegotiateProtocolVersion::decode_frame(&out).unwrap();
        assert_eq!(message.newest_version, ProtocolVersion::V3_0.0);
        assert_eq!(
            message.unrecognized().collect::<Vec<_>>(),
            vec![&b"_pq_.compression"[..], &b"_pq_.x"[..]]
        );
    }

    #[test]
    fn protocol_options_alone_trigger_negotiation() {
        let mut packet = BytesMut::new();
        startup(
            &mut packet,
            ProtocolVersion::V3_0,
            &[("user", "a"), ("_pq_.opt", "1")],
        );
        let mut out = BytesMut::new();
        assert!(encode_negotiation(&mut out, &decoded(&packet)));
        assert_eq!(&out[..], b"v\0\0\0\x15\0\x03\0\0\0\0\0\x01_pq_.opt\0");
    }
}
