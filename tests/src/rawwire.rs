//! The few frontend messages the tests send by hand, and a reader for backend messages.
//! Real drivers are used wherever they can be; raw bytes are for what no driver will do:
//! hang up mid-query, send garbage or truncated packets, or read BackendKeyData.
//! Deliberately independent of pgtier-wire, so a codec bug cannot hide itself.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Protocol 3.0.
const PROTOCOL_VERSION: i32 = 196_608;
/// CancelRequest code.
const CANCEL_REQUEST_CODE: i32 = 80_877_102;
/// Largest backend message these tests accept (a test never reads huge results raw).
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// One backend message: its type byte and body (without the length).
#[derive(Debug, Clone)]
pub struct Message {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl Message {
    /// For ErrorResponse / NoticeResponse: the value of field `code` (`b'C'` = SQLSTATE,
    /// `b'M'` = message, `b'S'` = severity).
    pub fn field(&self, code: u8) -> Option<String> {
        let mut rest = self.body.as_slice();
        while let Some((&field, tail)) = rest.split_first() {
            if field == 0 {
                return None;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            if field == code {
                return Some(String::from_utf8_lossy(&tail[..end]).into_owned());
            }
            rest = &tail[end + 1..];
        }
        None
    }

    pub fn sqlstate(&self) -> Option<String> {
        self.field(b'C')
    }
}

/// StartupMessage with `user`, `database` and any further parameters.
pub fn startup_message(user: &str, database: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut body = PROTOCOL_VERSION.to_be_bytes().to_vec();
    for (key, value) in [("user", user), ("database", database)].iter().chain(extra) {
        body.extend_from_slice(key.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    with_length(None, &body)
}

/// Simple Query.
pub fn query_message(sql: &str) -> Vec<u8> {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    with_length(Some(b'Q'), &body)
}

/// Parse of `sql` as statement `name` ("" = unnamed), no parameter types.
pub fn parse_message(name: &str, sql: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(name.len() + sql.len() + 4);
    for text in [name, sql] {
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    body.extend_from_slice(&0u16.to_be_bytes());
    with_length(Some(b'P'), &body)
}

/// Bind of statement `statement` to the unnamed portal with text parameters `params`.
pub fn bind_message(statement: &str, params: &[&str]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(statement.as_bytes());
    body.push(0);
    body.extend_from_slice(&0u16.to_be_bytes());
    let count = u16::try_from(params.len()).unwrap_or(u16::MAX);
    body.extend_from_slice(&count.to_be_bytes());
    for param in params {
        let length = i32::try_from(param.len()).unwrap_or(i32::MAX);
        body.extend_from_slice(&length.to_be_bytes());
        body.extend_from_slice(param.as_bytes());
    }
    body.extend_from_slice(&0u16.to_be_bytes());
    with_length(Some(b'B'), &body)
}

/// Describe of the unnamed portal.
pub fn describe_portal_message() -> Vec<u8> {
    with_length(Some(b'D'), b"P\0")
}

/// Execute of the unnamed portal, all rows.
pub fn execute_message() -> Vec<u8> {
    with_length(Some(b'E'), &[0, 0, 0, 0, 0])
}

/// Parse of `sql` as statement `name` with explicit parameter type OIDs (0 = unspecified).
pub fn parse_typed_message(name: &str, sql: &str, parameter_types: &[u32]) -> Vec<u8> {
    let mut body = Vec::with_capacity(name.len() + sql.len() + 4 + 4 * parameter_types.len());
    for text in [name, sql] {
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    let count = u16::try_from(parameter_types.len()).unwrap_or(u16::MAX);
    body.extend_from_slice(&count.to_be_bytes());
    for oid in parameter_types {
        body.extend_from_slice(&oid.to_be_bytes());
    }
    with_length(Some(b'P'), &body)
}

/// Bind of statement `statement` to portal `portal` ("" = unnamed) with text parameters,
/// `None` being SQL NULL, and text results.
pub fn bind_portal_message(portal: &str, statement: &str, params: &[Option<&str>]) -> Vec<u8> {
    let mut body = Vec::new();
    for name in [portal, statement] {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
    }
    body.extend_from_slice(&0u16.to_be_bytes());
    let count = u16::try_from(params.len()).unwrap_or(u16::MAX);
    body.extend_from_slice(&count.to_be_bytes());
    for param in params {
        match param {
            Some(value) => {
                let length = i32::try_from(value.len()).unwrap_or(i32::MAX);
                body.extend_from_slice(&length.to_be_bytes());
                body.extend_from_slice(value.as_bytes());
            }
            None => body.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    body.extend_from_slice(&0u16.to_be_bytes());
    with_length(Some(b'B'), &body)
}

/// Describe of prepared statement `name` ("" = unnamed).
pub fn describe_statement_message(name: &str) -> Vec<u8> {
    named_target_message(b'D', b'S', name)
}

/// Describe of portal `name` ("" = unnamed).
pub fn describe_named_portal_message(name: &str) -> Vec<u8> {
    named_target_message(b'D', b'P', name)
}

/// Execute of portal `portal` ("" = unnamed), at most `max_rows` rows (0 = all).
pub fn execute_portal_message(portal: &str, max_rows: u32) -> Vec<u8> {
    let mut body = portal.as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&max_rows.to_be_bytes());
    with_length(Some(b'E'), &body)
}

/// Close of prepared statement `name` ("" = unnamed).
pub fn close_statement_message(name: &str) -> Vec<u8> {
    named_target_message(b'C', b'S', name)
}

/// Close of portal `name` ("" = unnamed).
pub fn close_portal_message(name: &str) -> Vec<u8> {
    named_target_message(b'C', b'P', name)
}

/// Describe or Close (`tag`) of a statement (`kind` `S`) or portal (`P`) called `name`.
fn named_target_message(tag: u8, kind: u8, name: &str) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    with_length(Some(tag), &body)
}

/// Sync.
pub fn sync_message() -> Vec<u8> {
    with_length(Some(b'S'), &[])
}

/// Flush.
pub fn flush_message() -> Vec<u8> {
    with_length(Some(b'H'), &[])
}

/// CopyData carrying `data`.
pub fn copy_data_message(data: &[u8]) -> Vec<u8> {
    with_length(Some(b'd'), data)
}

/// CopyDone.
pub fn copy_done_message() -> Vec<u8> {
    with_length(Some(b'c'), &[])
}

/// CopyFail with its reason.
pub fn copy_fail_message(reason: &str) -> Vec<u8> {
    let mut body = reason.as_bytes().to_vec();
    body.push(0);
    with_length(Some(b'f'), &body)
}

/// Terminate.
pub fn terminate_message() -> Vec<u8> {
    with_length(Some(b'X'), &[])
}

/// PasswordMessage with a cleartext password (the answer to AuthenticationCleartextPassword).
pub fn password_message(password: &str) -> Vec<u8> {
    let mut body = password.as_bytes().to_vec();
    body.push(0);
    with_length(Some(b'p'), &body)
}

/// CancelRequest for the key a client was given.
pub fn cancel_message(process_id: i32, secret_key: i32) -> Vec<u8> {
    let mut body = CANCEL_REQUEST_CODE.to_be_bytes().to_vec();
    body.extend_from_slice(&process_id.to_be_bytes());
    body.extend_from_slice(&secret_key.to_be_bytes());
    with_length(None, &body)
}

fn with_length(tag: Option<u8>, body: &[u8]) -> Vec<u8> {
    let mut message = Vec::with_capacity(body.len() + 5);
    message.extend(tag);
    let length = u32::try_from(body.len() + 4).unwrap_or(u32::MAX);
    message.extend_from_slice(&length.to_be_bytes());
    message.extend_from_slice(body);
    message
}

/// Reads one backend message. `Ok(None)` means the peer closed the connection cleanly.
pub fn read_message(stream: &mut TcpStream) -> io::Result<Option<Message>> {
    let mut header = [0u8; 5];
    let mut filled = 0;
    while filled < header.len() {
        let read = match stream.read(&mut header[filled..]) {
            // EINTR after a stop and continue (a read with a timeout): read again.
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            other => other?,
        };
        match read {
            0 if filled == 0 => return Ok(None),
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated header",
                ));
            }
            n => filled += n,
        }
    }
    let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
    if !(4..=MAX_MESSAGE_BYTES).contains(&length) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("backend message length {length}"),
        ));
    }
    let mut body = vec![0u8; length - 4];
    stream.read_exact(&mut body)?;
    Ok(Some(Message {
        tag: header[0],
        body,
    }))
}

/// A connection that completed startup with trust authentication.
#[derive(Debug)]
pub struct RawSession {
    pub stream: TcpStream,
    /// BackendKeyData as the client saw it.
    pub process_id: i32,
    pub secret_key: i32,
    /// ParameterStatus pairs in arrival order.
    pub parameters: Vec<(String, String)>,
}

/// Opens a TCP connection to 127.0.0.1:`port` with a read/write timeout.
pub fn connect(port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let stream = TcpStream::connect_timeout(&address, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Connects and logs in (trust); fails on any ErrorResponse or another authentication request.
pub fn login(port: u16, user: &str, database: &str, timeout: Duration) -> io::Result<RawSession> {
    login_with(port, user, database, &[], timeout)
}

/// As `login`, with further startup parameters.
pub fn login_with(
    port: u16,
    user: &str,
    database: &str,
    parameters: &[(&str, &str)],
    timeout: Duration,
) -> io::Result<RawSession> {
    let mut stream = connect(port, timeout)?;
    stream.write_all(&startup_message(user, database, parameters))?;
    let mut session = RawSession {
        stream,
        process_id: 0,
        secret_key: 0,
        parameters: Vec::new(),
    };
    loop {
        let message = read_message(&mut session.stream)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed during login"))?;
        match message.tag {
            b'R' if message.body.get(..4) == Some(&[0, 0, 0, 0]) => {}
            b'R' => return Err(io::Error::other("server asked for a password")),
            b'K' if message.body.len() == 8 => {
                session.process_id = i32::from_be_bytes(fixed4(&message.body[..4]));
                session.secret_key = i32::from_be_bytes(fixed4(&message.body[4..]));
            }
            b'S' => session.parameters.push(parameter_status(&message.body)),
            b'Z' => return Ok(session),
            b'E' => {
                return Err(io::Error::other(format!(
                    "login failed: {} {}",
                    message.sqlstate().unwrap_or_default(),
                    message.field(b'M').unwrap_or_default()
                )));
            }
            b'N' => {}
            other => {
                return Err(io::Error::other(format!(
                    "unexpected message {:?} during login",
                    other as char
                )));
            }
        }
    }
}

impl RawSession {
    /// Sends a simple query and collects messages up to ReadyForQuery.
    pub fn simple_query(&mut self, sql: &str) -> io::Result<Vec<Message>> {
        self.stream.write_all(&query_message(sql))?;
        self.read_until_ready()
    }

    /// Reads messages up to and including the next ReadyForQuery.
    pub fn read_until_ready(&mut self) -> io::Result<Vec<Message>> {
        let mut messages = Vec::new();
        loop {
            let message = read_message(&mut self.stream)?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed mid-query"))?;
            let done = message.tag == b'Z';
            messages.push(message);
            if done {
                return Ok(messages);
            }
        }
    }

    /// Reads messages until one with type byte `tag` (included) arrives.
    pub fn read_until(&mut self, tag: u8) -> io::Result<Vec<Message>> {
        let mut messages = Vec::new();
        loop {
            let message = read_message(&mut self.stream)?
                .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "closed early"))?;
            let done = message.tag == tag;
            messages.push(message);
            if done {
                return Ok(messages);
            }
        }
    }

    /// The value of the first column of the first DataRow of `messages`, as text.
    pub fn first_value(messages: &[Message]) -> Option<String> {
        let row = messages.iter().find(|m| m.tag == b'D')?;
        let length = i32::from_be_bytes(fixed4(row.body.get(2..6)?));
        let length = usize::try_from(length).ok()?;
        let value = row.body.get(6..6 + length)?;
        Some(String::from_utf8_lossy(value).into_owned())
    }
}

fn parameter_status(body: &[u8]) -> (String, String) {
    let mut parts = body.split(|&b| b == 0);
    let name = parts.next().unwrap_or_default();
    let value = parts.next().unwrap_or_default();
    (
        String::from_utf8_lossy(name).into_owned(),
        String::from_utf8_lossy(value).into_owned(),
    )
}

fn fixed4(bytes: &[u8]) -> [u8; 4] {
    let mut out = [0u8; 4];
    let n = bytes.len().min(4);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

/// Reads until the peer closes or `timeout` passes; returns the messages seen and whether the
/// connection was closed (EOF or reset) within the time.
pub fn read_until_closed(stream: &mut TcpStream, timeout: Duration) -> (Vec<Message>, bool) {
    let deadline = std::time::Instant::now() + timeout;
    let mut messages = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return (messages, false);
        }
        if stream.set_read_timeout(Some(left)).is_err() {
            return (messages, true);
        }
        match read_message(stream) {
            Ok(Some(message)) => messages.push(message),
            Ok(None) => return (messages, true),
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return (messages, false);
            }
            Err(_) => return (messages, true),
        }
    }
}
