//! The few PostgreSQL protocol pieces the shard builds and reads itself: startup packets,
//! authentication messages, ErrorResponse, ParameterStatus, BackendKeyData, ReadyForQuery.
//!
//! Kept private and minimal so the shard builds on its own; forwarding never goes through here
//! (forwarded bytes are only framed, see `frame.rs`).

use bytes::{BufMut, Bytes, BytesMut};

pub const PROTOCOL_3_0: u32 = 196_608;
pub const SSL_REQUEST: u32 = 80_877_103;
pub const GSSENC_REQUEST: u32 = 80_877_104;
pub const CANCEL_REQUEST: u32 = 80_877_102;

/// SQLSTATEs the shard produces itself.
pub mod sqlstate {
    pub const PROTOCOL_VIOLATION: &str = "08P01";
    pub const TOO_MANY_CONNECTIONS: &str = "53300";
    pub const INVALID_PASSWORD: &str = "28P01";
    pub const INVALID_AUTHORIZATION: &str = "28000";
    pub const INVALID_CATALOG_NAME: &str = "3D000";
    pub const CONNECTION_FAILURE: &str = "08006";
    pub const CANNOT_CONNECT_NOW: &str = "57P03";
    pub const ADMIN_SHUTDOWN: &str = "57P01";
    pub const QUERY_CANCELED: &str = "57014";
    pub const IDLE_IN_TRANSACTION_TIMEOUT: &str = "25P03";
    pub const IDLE_SESSION_TIMEOUT: &str = "57P05";
    pub const FEATURE_NOT_SUPPORTED: &str = "0A000";
}

/// A startup-phase packet from a client (no type byte).
#[derive(Debug, PartialEq, Eq)]
pub enum StartupPacket {
    Startup { params: Vec<(String, String)> },
    Ssl,
    GssEnc,
    Cancel { pid: u32, secret: u32 },
}

/// Why a startup packet was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum StartupError {
    BadLength(u32),
    UnsupportedProtocol(u32),
    Malformed,
}

/// Parses one startup packet if complete. `Ok(None)`: need more bytes. Returns its length.
pub fn parse_startup(
    buf: &[u8],
    max_len: u32,
) -> Result<Option<(StartupPacket, usize)>, StartupError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if !(8..=max_len).contains(&len) {
        return Err(StartupError::BadLength(len));
    }
    let len_usize = len as usize;
    if buf.len() < len_usize {
        return Ok(None);
    }
    let code = u32::from_be_bytes([buf[4], buf[5], buf[6], buf[7]]);
    let body = &buf[8..len_usize];
    let packet = match code {
        SSL_REQUEST if len == 8 => StartupPacket::Ssl,
        GSSENC_REQUEST if len == 8 => StartupPacket::GssEnc,
        CANCEL_REQUEST if len == 16 => StartupPacket::Cancel {
            pid: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
            secret: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
        },
        PROTOCOL_3_0 => StartupPacket::Startup {
            params: parse_params(body)?,
        },
        other if other >> 16 == 3 => StartupPacket::Startup {
            params: parse_params(body)?,
        },
        other => return Err(StartupError::UnsupportedProtocol(other)),
    };
    Ok(Some((packet, len_usize)))
}

fn parse_params(body: &[u8]) -> Result<Vec<(String, String)>, StartupError> {
    let mut params = Vec::new();
    let mut fields = body.split(|b| *b == 0);
    loop {
        let name = fields.next().ok_or(StartupError::Malformed)?;
        if name.is_empty() {
            return Ok(params);
        }
        let value = fields.next().ok_or(StartupError::Malformed)?;
        let name = std::str::from_utf8(name).map_err(|_| StartupError::Malformed)?;
        let value = std::str::from_utf8(value).map_err(|_| StartupError::Malformed)?;
        if params.len() >= 64 {
            return Err(StartupError::Malformed);
        }
        params.push((name.to_string(), value.to_string()));
    }
}

/// Writes a typed message: code, length placeholder, body from `body`, then patches the length.
pub fn put_message(out: &mut BytesMut, code: u8, body: impl FnOnce(&mut BytesMut)) {
    out.put_u8(code);
    let at = out.len();
    out.put_u32(0);
    body(out);
    let len = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn put_cstr(out: &mut BytesMut, s: &str) {
    out.put_slice(s.as_bytes());
    out.put_u8(0);
}

pub fn auth_ok(out: &mut BytesMut) {
    put_message(out, b'R', |b| b.put_u32(0));
}

pub fn auth_md5(out: &mut BytesMut, salt: [u8; 4]) {
    put_message(out, b'R', |b| {
        b.put_u32(5);
        b.put_slice(&salt);
    });
}

pub fn auth_sasl(out: &mut BytesMut) {
    put_message(out, b'R', |b| {
        b.put_u32(10);
        put_cstr(b, "SCRAM-SHA-256");
        b.put_u8(0);
    });
}

pub fn auth_sasl_continue(out: &mut BytesMut, data: &[u8]) {
    put_message(out, b'R', |b| {
        b.put_u32(11);
        b.put_slice(data);
    });
}

pub fn auth_sasl_final(out: &mut BytesMut, data: &[u8]) {
    put_message(out, b'R', |b| {
        b.put_u32(12);
        b.put_slice(data);
    });
}

pub fn parameter_status(out: &mut BytesMut, name: &str, value: &str) {
    put_message(out, b'S', |b| {
        put_cstr(b, name);
        put_cstr(b, value);
    });
}

pub fn backend_key_data(out: &mut BytesMut, pid: u32, secret: u32) {
    put_message(out, b'K', |b| {
        b.put_u32(pid);
        b.put_u32(secret);
    });
}

pub fn ready_for_query(out: &mut BytesMut, status: u8) {
    put_message(out, b'Z', |b| b.put_u8(status));
}

/// ErrorResponse (severity ERROR or FATAL) with SQLSTATE and message.
pub fn error_response(out: &mut BytesMut, severity: &str, code: &str, message: &str) {
    put_message(out, b'E', |b| {
        b.put_u8(b'S');
        put_cstr(b, severity);
        b.put_u8(b'V');
        put_cstr(b, severity);
        b.put_u8(b'C');
        put_cstr(b, code);
        b.put_u8(b'M');
        put_cstr(b, message);
        b.put_u8(0);
    });
}

pub fn fatal(code: &str, message: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(64 + message.len());
    error_response(&mut out, "FATAL", code, message);
    out.freeze()
}

pub fn startup_message(out: &mut BytesMut, params: &[(&str, &str)]) {
    let at = out.len();
    out.put_u32(0);
    out.put_u32(PROTOCOL_3_0);
    for (name, value) in params {
        put_cstr(out, name);
        put_cstr(out, value);
    }
    out.put_u8(0);
    let len = (out.len() - at) as u32;
    out[at..at + 4].copy_from_slice(&len.to_be_bytes());
}

pub fn cancel_request(pid: u32, secret: u32) -> [u8; 16] {
    let mut packet = [0u8; 16];
    packet[0..4].copy_from_slice(&16u32.to_be_bytes());
    packet[4..8].copy_from_slice(&CANCEL_REQUEST.to_be_bytes());
    packet[8..12].copy_from_slice(&pid.to_be_bytes());
    packet[12..16].copy_from_slice(&secret.to_be_bytes());
    packet
}

pub fn password_message(out: &mut BytesMut, data: &[u8], nul_terminated: bool) {
    put_message(out, b'p', |b| {
        b.put_slice(data);
        if nul_terminated {
            b.put_u8(0);
        }
    });
}

pub fn sasl_initial_response(out: &mut BytesMut, mechanism: &str, data: &[u8]) {
    put_message(out, b'p', |b| {
        put_cstr(b, mechanism);
        b.put_u32(data.len() as u32);
        b.put_slice(data);
    });
}

pub fn query(out: &mut BytesMut, sql: &str) {
    put_message(out, b'Q', |b| put_cstr(b, sql));
}

/// Splits a NUL-terminated string off the front of `body`.
pub fn take_cstr(body: &[u8]) -> Option<(&str, &[u8])> {
    let end = memchr::memchr(0, body)?;
    let s = std::str::from_utf8(&body[..end]).ok()?;
    Some((s, &body[end + 1..]))
}

/// ParameterStatus body → (name, value).
pub fn parse_parameter_status(body: &[u8]) -> Option<(&str, &str)> {
    let (name, rest) = take_cstr(body)?;
    let (value, _) = take_cstr(rest)?;
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
        assert_eq!(
            parse_startup(&[0, 0, 0, 3], 10_000),
            Err(StartupError::BadLength(3))
        );
        assert_eq!(
            parse_startup(&[0x7f, 0, 0, 0], 10_000),
            Err(StartupError::BadLength(0x7f00_0000))
        );
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        assert_eq!(
            parse_startup(&ssl, 10_000),
            Ok(Some((StartupPacket::Ssl, 8)))
        );
        let bad = [0, 0, 0, 9, 0, 3, 0, 0, b'x'];
        assert_eq!(parse_startup(&bad, 10_000), Err(StartupError::Malformed));
    }

    #[test]
    fn cancel_request_parses() {
        let packet = cancel_request(42, 7);
        assert_eq!(
            parse_startup(&packet, 10_000),
            Ok(Some((StartupPacket::Cancel { pid: 42, secret: 7 }, 16)))
        );
    }
}
