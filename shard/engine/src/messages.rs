//! The few messages the engine builds and reads itself (the welcome sequence, FATAL errors,
//! its own queries to servers), as thin helpers over `pgtier_wire`'s message types so call
//! sites stay one line. Forwarded bytes never go through here: they are only framed.

use bytes::{Bytes, BytesMut};
use pgtier_wire::SqlState;
use pgtier_wire::error_fields::{ErrorNotice, Severity};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{
    Authentication, BackendKeyData, ParameterStatus, ReadyForQuery, TransactionStatus,
};
use pgtier_wire::messages::frontend::startup::ProtocolVersion;
use pgtier_wire::messages::frontend::{CancelRequest, Query, StartupMessage};

pub use pgtier_wire::sqlstate;

pub(crate) fn auth_ok(out: &mut BytesMut) {
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

/// A NoticeResponse (severity NOTICE, SQLSTATE 00000) carrying `message`.
pub fn notice(out: &mut BytesMut, message: &str) {
    ErrorNotice::new(Severity::Notice, sqlstate::SUCCESSFUL_COMPLETION, message).encode_notice(out);
}

/// A FATAL ErrorResponse, sent just before the shard closes a connection.
pub fn fatal(code: SqlState, message: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(64 + message.len());
    ErrorNotice::new(Severity::Fatal, code, message).encode_error(&mut out);
    out.freeze()
}

/// What a client gets when a `WAIT_FOR_SERVERS` shutdown closes it instead of giving it a
/// server (PgBouncer's words).
pub(crate) fn server_shutting_down() -> Bytes {
    fatal(sqlstate::ADMIN_SHUTDOWN, "server shutting down")
}

/// What a client logging in to a pool during a shutdown gets (PgBouncer's words).
pub(crate) fn pooler_shutting_down() -> Bytes {
    fatal(sqlstate::CANNOT_CONNECT_NOW, "pooler is shutting down")
}

/// The message field of an ErrorResponse (`message`: type byte, length, fields), for the
/// log; empty when it has none.
pub(crate) fn error_text(message: &[u8]) -> std::borrow::Cow<'_, str> {
    let fields = message.get(5..).unwrap_or_default();
    let text = fields
        .split(|b| *b == 0)
        .find_map(|field| field.strip_prefix(b"M"))
        .unwrap_or_default();
    String::from_utf8_lossy(text)
}

/// The SQLSTATE field of an ErrorResponse (`message`: type byte, length, fields); empty
/// when it has none.
pub(crate) fn error_code(message: &[u8]) -> &[u8] {
    let fields = message.get(5..).unwrap_or_default();
    fields
        .split(|b| *b == 0)
        .find_map(|field| field.strip_prefix(b"C"))
        .unwrap_or_default()
}

/// A server refused a login because of the state it is in (57P03: starting up, shutting
/// down, in recovery...), not because of the login: pgtier tries again after
/// `server_login_retry` and its clients wait (PgBouncer does not fail the waiting clients
/// for it either).
pub(crate) fn is_transient_login_error(message: &[u8]) -> bool {
    error_code(message) == sqlstate::CANNOT_CONNECT_NOW.as_bytes()
}

/// A server's ErrorResponse (`message`: type byte, length, fields) with its severity raised
/// to FATAL: the error a login gets when PostgreSQL itself refuses a startup value.
pub(crate) fn error_as_fatal(message: &[u8]) -> Bytes {
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
pub(crate) fn query_text(body: &[u8]) -> Option<&str> {
    std::str::from_utf8(Query::decode_body(body).ok()?.sql).ok()
}

/// ParameterStatus body → (name, value); `None` if malformed or not UTF-8.
pub(crate) fn parse_parameter_status(body: &[u8]) -> Option<(&str, &str)> {
    let status = ParameterStatus::decode_body(body).ok()?;
    let name = std::str::from_utf8(status.name).ok()?;
    let value = std::str::from_utf8(status.value).ok()?;
    Some((name, value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_is_the_message_field() {
        let error = fatal(sqlstate::PROTOCOL_VIOLATION, "no such database: x");
        assert_eq!(error_text(&error), "no such database: x");
        assert_eq!(error_text(b"E\0\0\0\x05\0"), "");
    }

    #[test]
    fn a_server_error_raised_to_fatal_keeps_its_other_fields() {
        let mut out = BytesMut::new();
        ErrorNotice::new(
            Severity::Error,
            pgtier_wire::SqlState::new(b"22023"),
            "bad value",
        )
        .encode_error(&mut out);
        let fatal = error_as_fatal(&out);
        assert!(fatal.windows(6).any(|w| w == b"SFATAL"));
        assert!(fatal.windows(6).any(|w| w == b"C22023"));
        assert!(fatal.windows(10).any(|w| w == b"Mbad value"));
        assert_eq!(
            u32::from_be_bytes([fatal[1], fatal[2], fatal[3], fatal[4]]) as usize,
            fatal.len() - 1
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
