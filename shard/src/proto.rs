//! The few messages the shard builds and reads itself (startup packets, the welcome sequence,
//! FATAL errors, server-side queries), as thin helpers over `pgtier_wire`'s message types so
//! call sites stay one line. Forwarded bytes never go through here (they are only framed).

use bytes::{Bytes, BytesMut};
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{
    Authentication, BackendKeyData, ParameterStatus, ReadyForQuery, TransactionStatus,
};
use pgtier_wire::messages::frontend::startup::{ProtocolVersion, StartupPacket as WirePacket};
use pgtier_wire::messages::frontend::{CancelRequest, Query, StartupMessage};
use pgtier_wire::{FrameLimits, ProtocolError, SqlState, framing};

pub use pgtier_wire::sqlstate;

/// The cancel keys the shard hands out are protocol 3.0's four bytes.
const CANCEL_KEY_LEN: usize = 4;

/// Most parameters accepted in one StartupMessage (each becomes an owned pair).
const MAX_STARTUP_PARAMS: usize = 64;

/// A startup-phase packet from a client (no type byte), owned so the caller can drop the
/// receive buffer's bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum StartupPacket {
    Startup { params: Vec<(String, String)> },
    Ssl,
    GssEnc,
    Cancel { pid: u32, secret: u32 },
}

/// Parses one startup packet if complete. `Ok(None)`: need more bytes. Returns its length.
pub fn parse_startup(
    buf: &[u8],
    max_len: u32,
) -> Result<Option<(StartupPacket, usize)>, ProtocolError> {
    let limits = FrameLimits {
        max_startup_len: max_len,
        ..FrameLimits::default()
    };
    let Some(len) = framing::peek_startup_len(buf, &limits)? else {
        return Ok(None);
    };
    let Some(packet) = buf.get(..len as usize) else {
        return Ok(None);
    };
    let packet = match WirePacket::decode(packet)? {
        WirePacket::SslRequest => StartupPacket::Ssl,
        WirePacket::GssEncRequest => StartupPacket::GssEnc,
        WirePacket::Cancel(cancel) => StartupPacket::Cancel {
            pid: cancel.process_id,
            secret: cancel_secret(cancel.secret_key)?,
        },
        WirePacket::Startup(startup) if startup.params.len() > MAX_STARTUP_PARAMS => {
            return Err(ProtocolError::InvalidValue {
                message: "StartupMessage",
                field: "parameter count",
            });
        }
        WirePacket::Startup(startup) => StartupPacket::Startup {
            params: startup
                .params
                .iter()
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect(),
        },
    };
    Ok(Some((packet, len as usize)))
}

/// A 3.2 client's longer cancel key cannot be one of ours.
fn cancel_secret(key: &[u8]) -> Result<u32, ProtocolError> {
    let key: [u8; CANCEL_KEY_LEN] = key.try_into().map_err(|_| ProtocolError::InvalidValue {
        message: "CancelRequest",
        field: "secret key length",
    })?;
    Ok(u32::from_be_bytes(key))
}

pub fn auth_ok(out: &mut BytesMut) {
    Authentication::Ok.encode(out);
}

pub fn parameter_status(out: &mut BytesMut, name: &str, value: &str) {
    ParameterStatus {
        name: name.as_bytes(),
        value: value.as_bytes(),
    }
    .encode(out);
}

pub fn backend_key_data(out: &mut BytesMut, pid: u32, secret: u32) {
    BackendKeyData {
        process_id: pid,
        secret_key: &secret.to_be_bytes(),
    }
    .encode(out);
}

/// ReadyForQuery with the transaction status byte `status` ('I', 'T' or 'E').
pub fn ready_for_query(out: &mut BytesMut, status: u8) {
    debug_assert!(TransactionStatus::from_byte(status).is_some());
    ReadyForQuery {
        status: TransactionStatus::from_byte(status).unwrap_or(TransactionStatus::Idle),
    }
    .encode(out);
}

/// A FATAL ErrorResponse, sent just before the shard closes a connection.
pub fn fatal(code: SqlState, message: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(64 + message.len());
    ErrorNotice::new(Severity::Fatal, code, message).encode_error(&mut out);
    out.freeze()
}

/// A server's ErrorResponse (`message`: type byte, length, fields) with its severity raised
/// to FATAL: the error a login gets when PostgreSQL itself refuses a startup value.
pub fn error_as_fatal(message: &[u8]) -> Bytes {
    let fields = message.get(5..).unwrap_or_default();
    let mut body = BytesMut::with_capacity(message.len() + 8);
    for field in fields.split(|b| *b == 0).filter(|f| !f.is_empty()) {
        match field[0] {
            b'S' | b'V' => {
                body.extend_from_slice(&field[..1]);
                body.extend_from_slice(b"FATAL");
            }
            _ => body.extend_from_slice(field),
        }
        body.extend_from_slice(&[0]);
    }
    body.extend_from_slice(&[0]);
    let mut out = BytesMut::with_capacity(body.len() + 5);
    out.extend_from_slice(b"E");
    out.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out.freeze()
}

pub fn startup_message(out: &mut BytesMut, params: &[(&str, &str)]) {
    StartupMessage::encode_parts(out, ProtocolVersion::V3_0, params);
}

pub fn cancel_request(pid: u32, secret: u32) -> [u8; 16] {
    let mut out = BytesMut::with_capacity(16);
    CancelRequest {
        process_id: pid,
        secret_key: &secret.to_be_bytes(),
    }
    .encode(&mut out);
    let mut packet = [0u8; 16];
    packet.copy_from_slice(&out);
    packet
}

pub fn query(out: &mut BytesMut, sql: &str) {
    Query {
        sql: sql.as_bytes(),
    }
    .encode(out);
}

/// The SQL text of a Query body; `None` if malformed or not UTF-8.
pub fn query_text(body: &[u8]) -> Option<&str> {
    std::str::from_utf8(Query::decode_body(body).ok()?.sql).ok()
}

/// ParameterStatus body → (name, value); `None` if malformed or not UTF-8.
pub fn parse_parameter_status(body: &[u8]) -> Option<(&str, &str)> {
    let status = ParameterStatus::decode_body(body).ok()?;
    let name = std::str::from_utf8(status.name).ok()?;
    let value = std::str::from_utf8(status.value).ok()?;
    Some((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_round_trip() {
        let mut out = BytesMut::new();
        startup_message(&mut out, &[("user", "alice"), ("database", "db")]);
        let (packet, len) = parse_startup(&out, 10_000).expect("ok").expect("complete");
        assert_eq!(len, out.len());
        assert_eq!(
            packet,
            StartupPacket::Startup {
                params: vec![
                    ("user".into(), "alice".into()),
                    ("database".into(), "db".into())
                ]
            }
        );
    }

    #[test]
    fn truncated_and_hostile_startups() {
        assert_eq!(parse_startup(&[0, 0], 10_000), Ok(None));
        assert!(parse_startup(&[0, 0, 0, 3], 10_000).is_err());
        assert!(parse_startup(&[0x7f, 0, 0, 0], 10_000).is_err());
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(
            parse_startup(&ssl, 10_000),
            Ok(Some((StartupPacket::Ssl, 8)))
        );
        let bad = [0, 0, 0, 9, 0, 3, 0, 0, b'x'];
        assert!(parse_startup(&bad, 10_000).is_err());
        let version_2 = [0, 0, 0, 9, 0, 2, 0, 0, 0];
        assert!(parse_startup(&version_2, 10_000).is_err());
    }

    #[test]
    fn cancel_request_parses() {
        let packet = cancel_request(42, 7);
        assert_eq!(
            parse_startup(&packet, 10_000),
            Ok(Some((StartupPacket::Cancel { pid: 42, secret: 7 }, 16)))
        );
    }

    #[test]
    fn helpers_read_what_they_write() {
        let mut out = BytesMut::new();
        parameter_status(&mut out, "TimeZone", "UTC");
        assert_eq!(parse_parameter_status(&out[5..]), Some(("TimeZone", "UTC")));
        let mut out = BytesMut::new();
        query(&mut out, "SHOW POOLS");
        assert_eq!(query_text(&out[5..]), Some("SHOW POOLS"));
        let error = fatal(sqlstate::INVALID_PASSWORD, "no");
        assert_eq!(error[0], b'E');
        assert!(error.windows(6).any(|w| w == b"C28P01"));
    }
}
