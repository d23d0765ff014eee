//! Walking a server's receive buffer: which bytes go to the client, which are swallowed
//! (answers to pgtier's own queries, or everything while draining), and what the messages
//! mean for the server's state (ReadyForQuery, ParameterStatus).
//!
//! Only ReadyForQuery and ParameterStatus are read whole; every other message streams through
//! as it arrives, so a 50 MB row never has to sit in memory in one piece.

use bytes::Bytes;

use crate::client::Client;
use crate::proto;
use crate::server::Server;
use crate::tracker::{Tracker, TxStatus};

/// Largest ReadyForQuery/ParameterStatus accepted (they are read whole).
const MAX_INSPECTED_MESSAGE_BYTES: usize = 64 * 1024;

/// What one walk found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// Bytes at the front to drop (swallowed responses).
    pub drop_bytes: usize,
    /// Bytes after those to forward to the client.
    pub forward_bytes: usize,
    /// ReadyForQuery messages forwarded (queries or Syncs completed).
    pub completed: u64,
    /// ReadyForQuery 'I' messages forwarded (transactions completed).
    pub transactions: u64,
    /// The server ended up idle with nothing owed (it may be released).
    pub idle: bool,
    /// The server broke the protocol.
    pub malformed: bool,
    /// Length of a message over `max_server_message_bytes` (nothing from it on is consumed).
    pub oversized: Option<usize>,
    /// A FATAL or PANIC ErrorResponse was forwarded: the backend is exiting, and the client
    /// must see the connection end right after it, as it would from PostgreSQL itself.
    pub fatal_forwarded: bool,
    /// That FATAL said the server is shutting down (57P01..57P03).
    pub shutdown_forwarded: bool,
    /// The server reported a new value of a parameter pgtier does not re-apply per client
    /// (default_transaction_read_only, session_authorization...): the client changed its
    /// session, perhaps inside a function no statement scan can see into.
    pub session_param_changed: bool,
}

/// Walks `server.recv.data`. With `client == None` everything consumed is dropped. A message
/// longer than `max_message_bytes` stops the walk (`oversized`).
pub fn scan(
    server: &mut Server,
    mut client: Option<&mut Client>,
    max_message_bytes: usize,
) -> Scan {
    let data = &server.recv.data;
    let mut out = Scan::default();
    let mut pos = 0usize;
    let drain_all = client.is_none();
    while pos < data.len() {
        let dropping = drain_all || server.swallow > 0;
        if server.skip_bytes > 0 {
            let take = server.skip_bytes.min(data.len() - pos);
            server.skip_bytes -= take;
            pos += take;
            if dropping {
                out.drop_bytes = pos;
            }
            continue;
        }
        if data.len() - pos < 5 {
            break;
        }
        let code = data[pos];
        let len = u32::from_be_bytes([data[pos + 1], data[pos + 2], data[pos + 3], data[pos + 4]])
            as usize;
        if len < 4 {
            out.malformed = true;
            break;
        }
        if len > max_message_bytes {
            out.oversized = Some(len);
            break;
        }
        match code {
            b'Z' | b'S' => {
                if len > MAX_INSPECTED_MESSAGE_BYTES {
                    out.malformed = true;
                    break;
                }
                if data.len() - pos < len + 1 {
                    break;
                }
                let body = &data[pos + 5..pos + 1 + len];
                pos += len + 1;
                if code == b'S' {
                    if let Some((name, value)) = proto::parse_parameter_status(body) {
                        let tracked = server.tracked.set(name, value);
                        out.session_param_changed |= !tracked && !dropping;
                        if !dropping {
                            if let Some(client) = client.as_deref_mut() {
                                client.tracked.set(name, value);
                            }
                        }
                    }
                } else {
                    let status = body.first().copied().and_then(TxStatus::from_byte);
                    let counted = server.tracker.on_server_message(b'Z', body);
                    let (Some(status), Ok(())) = (status, counted) else {
                        out.malformed = true;
                        break;
                    };
                    if server.swallow > 0 && !drain_all {
                        server.swallow -= 1;
                        out.drop_bytes = pos;
                        continue;
                    }
                    if drain_all && server.swallow > 0 {
                        server.swallow -= 1;
                    }
                    if !dropping {
                        out.completed += 1;
                        if status == TxStatus::Idle {
                            out.transactions += 1;
                        }
                        if !server.tracker.has_outstanding() {
                            if let Some(client) = client.as_deref_mut() {
                                client.query_started = None;
                            }
                        }
                    }
                }
                if dropping {
                    out.drop_bytes = pos;
                }
            }
            b'E' if !dropping && len <= MAX_INSPECTED_MESSAGE_BYTES => {
                // Read whole to learn its severity; the bytes still go to the client as is.
                if data.len() - pos < len + 1 {
                    break;
                }
                if server.tracker.on_server_message(code, &[]).is_err() {
                    out.malformed = true;
                    break;
                }
                let body = &data[pos + 5..pos + 1 + len];
                if is_fatal(body) {
                    out.fatal_forwarded = true;
                    out.shutdown_forwarded |= is_shutdown_error(body);
                }
                pos += len + 1;
            }
            b'E' if dropping && server.swallow > 0 && len <= MAX_INSPECTED_MESSAGE_BYTES => {
                // An error in an answer pgtier swallows is kept whole: the code that sent
                // the query decides (refuse a login, close a server that failed its check).
                if data.len() - pos < len + 1 {
                    break;
                }
                if Tracker::wants(code) && server.tracker.on_server_message(code, &[]).is_err() {
                    out.malformed = true;
                    break;
                }
                if server.swallowed_error.is_none() {
                    server.swallowed_error =
                        Some(Bytes::copy_from_slice(&data[pos..pos + 1 + len]));
                }
                pos += len + 1;
                out.drop_bytes = pos;
            }
            _ => {
                if Tracker::wants(code) && server.tracker.on_server_message(code, &[]).is_err() {
                    out.malformed = true;
                    break;
                }
                pos += 5;
                server.skip_bytes = len - 4;
                if dropping {
                    out.drop_bytes = pos;
                }
            }
        }
    }
    out.forward_bytes = pos - out.drop_bytes;
    out.idle = server.tracker.is_idle() && server.swallow == 0;
    out
}

/// Whether an ErrorResponse body reports a FATAL or PANIC error (the backend ends after it).
pub fn is_fatal(body: &[u8]) -> bool {
    use pgtier_wire::error_fields::Severity;
    use pgtier_wire::messages::Message;
    use pgtier_wire::messages::backend::ErrorResponse;
    ErrorResponse::decode_body(body).is_ok_and(|error| {
        matches!(
            error.fields.severity(),
            Some(Severity::Fatal | Severity::Panic)
        )
    })
}

/// An ErrorResponse body whose SQLSTATE says the server is going away (57P01 admin shutdown,
/// 57P02 crash shutdown, 57P03 cannot connect now), as every backend of a stopped server says.
pub fn is_shutdown_error(body: &[u8]) -> bool {
    body.split(|b| *b == 0)
        .any(|field| matches!(field, [b'C', b'5', b'7', b'P', b'0', b'1' | b'2' | b'3']))
}
