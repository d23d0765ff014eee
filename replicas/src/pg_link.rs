//! One logged-in PostgreSQL connection on a blocking std socket, for the control plane's own
//! queries: the health probes ([`crate::probe`]) and the LSN poller
//! ([`crate::lsn_poll`]). Every call takes a deadline; errors are short texts for
//! logs and `SHOW REPLICAS`, and any error means the caller drops the link.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgtier_wire::FrameLimits;
use pgtier_wire::auth::{ClientAuth, NONCE_RANDOM_LEN, os_random};
use pgtier_wire::framing::split_message;
use pgtier_wire::messages::backend::ErrorResponse;
use pgtier_wire::messages::frontend::{ProtocolVersion, Query, StartupMessage};
use pgtier_wire::messages::{BackendMessage, Message};

/// How probes log in to a replica.
#[derive(Clone, PartialEq, Eq)]
pub struct ProbeLogin {
    /// Role to log in as (a dedicated health user, or the database's forced user).
    pub user: String,
    /// Its password; `None` when the server trusts the role.
    pub password: Option<String>,
    /// Database to connect to.
    pub dbname: String,
}

impl std::fmt::Debug for ProbeLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeLogin")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("dbname", &self.dbname)
            .finish()
    }
}

/// Largest server message accepted; the control plane's answers are tiny.
const MAX_MESSAGE_BYTES: u32 = 64 * 1024;

/// The values of one row, `None` for SQL NULL.
pub type Row = Vec<Option<Vec<u8>>>;

/// A connection to one server.
#[derive(Debug)]
pub(crate) struct PgLink {
    stream: TcpStream,
    /// Bytes received and not yet consumed as messages.
    buffer: BytesMut,
}

impl PgLink {
    /// Connects to `addr` (no login yet).
    pub fn connect(addr: SocketAddr, deadline: Instant) -> Result<PgLink, String> {
        Ok(PgLink::from_stream(connect(addr, deadline)?))
    }

    /// A link over an already connected stream.
    pub(crate) fn from_stream(stream: TcpStream) -> PgLink {
        PgLink {
            stream,
            buffer: BytesMut::with_capacity(1024),
        }
    }

    /// Connects and logs in as `login`.
    pub fn open(
        addr: SocketAddr,
        login: &ProbeLogin,
        application_name: &str,
        connect_deadline: Instant,
        login_deadline: Instant,
    ) -> Result<PgLink, String> {
        let mut link = PgLink::connect(addr, connect_deadline)?;
        link.log_in(login, application_name, login_deadline)?;
        Ok(link)
    }

    /// Sends the startup message and answers authentication until ReadyForQuery.
    pub(crate) fn log_in(
        &mut self,
        login: &ProbeLogin,
        application_name: &str,
        deadline: Instant,
    ) -> Result<(), String> {
        let mut out = BytesMut::with_capacity(256);
        StartupMessage::encode_parts(
            &mut out,
            ProtocolVersion::V3_0,
            &[
                ("user", &login.user),
                ("database", &login.dbname),
                ("application_name", application_name),
            ],
        );
        self.send(&out, deadline)?;
        let mut nonce = [0u8; NONCE_RANDOM_LEN];
        os_random(&mut nonce).map_err(|e| format!("authentication: {e}"))?;
        let password = login.password.as_deref().unwrap_or("");
        let mut auth = ClientAuth::new(login.user.as_bytes(), password.as_bytes(), nonce);
        loop {
            let frame = self.receive(deadline)?;
            out.clear();
            match BackendMessage::decode(&frame).map_err(|e| e.to_string())? {
                BackendMessage::Authentication(request) => {
                    auth.handle(request, &mut out)
                        .map_err(|e| format!("authentication: {e}"))?;
                    if !out.is_empty() {
                        self.send(&out, deadline)?;
                    }
                }
                BackendMessage::ErrorResponse(error) => return Err(server_error(&error)),
                BackendMessage::ReadyForQuery(_) => return Ok(()),
                _ => {}
            }
        }
    }

    /// Runs `sql` as a simple query and returns its first row (`None`: no row).
    pub(crate) fn query_row(
        &mut self,
        sql: &str,
        deadline: Instant,
    ) -> Result<Option<Row>, String> {
        Ok(self.query_rows(sql, 1, deadline)?.into_iter().next())
    }

    /// Runs `sql` as a simple query and returns its rows, at most `max_rows` (the rest are
    /// read and dropped).
    pub(crate) fn query_rows(
        &mut self,
        sql: &str,
        max_rows: usize,
        deadline: Instant,
    ) -> Result<Vec<Row>, String> {
        let mut out = BytesMut::with_capacity(64 + sql.len());
        Query {
            sql: sql.as_bytes(),
        }
        .encode(&mut out);
        self.send(&out, deadline)?;
        let mut rows = Vec::new();
        let mut failure = None;
        loop {
            let frame = match self.receive(deadline) {
                Ok(frame) => frame,
                Err(cause) => return Err(failure.unwrap_or(cause)),
            };
            match BackendMessage::decode(&frame).map_err(|e| e.to_string())? {
                BackendMessage::DataRow(row) if rows.len() < max_rows => {
                    rows.push(row.values.iter().map(|v| v.map(<[u8]>::to_vec)).collect());
                }
                BackendMessage::ErrorResponse(error) => failure = Some(server_error(&error)),
                BackendMessage::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match failure {
            Some(failure) => Err(failure),
            None => Ok(rows),
        }
    }

    /// Watches the idle link until `until`: true as soon as the server closes or resets it
    /// (the link is then useless). Bytes the server sends unprompted (e.g. a FATAL before
    /// closing) are kept for the next read. False when nothing happened.
    pub(crate) fn closed_before(&mut self, until: Instant) -> bool {
        loop {
            let Ok(budget) = remaining(until) else {
                return false;
            };
            if self.stream.set_read_timeout(Some(budget)).is_err() {
                return false;
            }
            let mut chunk = [0u8; 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return true,
                Ok(read) => self.buffer.extend_from_slice(&chunk[..read]),
                // A stop and continue (SIGSTOP/SIGCONT) interrupts a read that has a timeout
                // even without a handler: it says nothing about the link.
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return false;
                }
                Err(_) => return true,
            }
        }
    }

    /// Waits on the idle link until `until` for the server to send something unprompted (a
    /// NOTIFY): `Ok(true)` as soon as bytes arrive (kept for the next read), `Ok(false)` when
    /// nothing did, an error when the server closed or reset the link.
    pub(crate) fn wait_for_bytes(&mut self, until: Instant) -> Result<bool, String> {
        if !self.buffer.is_empty() {
            return Ok(true);
        }
        loop {
            let Ok(budget) = remaining(until) else {
                return Ok(false);
            };
            self.stream
                .set_read_timeout(Some(budget))
                .map_err(|e| io_cause("set timeout", &e))?;
            let mut chunk = [0u8; 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("server closed the connection".to_string()),
                Ok(read) => {
                    self.buffer.extend_from_slice(&chunk[..read]);
                    return Ok(true);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(false);
                }
                Err(error) => return Err(io_cause("receive", &error)),
            }
        }
    }

    /// Drops whole messages the server sent unprompted (notifications, notices), so the
    /// next wait sees only new ones.
    pub(crate) fn discard_unprompted(&mut self) {
        let limits = FrameLimits {
            max_message_len: MAX_MESSAGE_BYTES,
            ..FrameLimits::default()
        };
        while let Ok(Some(_)) = split_message(&mut self.buffer, &limits) {}
    }

    fn send(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), String> {
        set_deadline(&self.stream, deadline)?;
        self.stream
            .write_all(bytes)
            .map_err(|e| io_cause("send", &e))
    }

    /// The next complete server message, as bytes.
    fn receive(&mut self, deadline: Instant) -> Result<bytes::Bytes, String> {
        let limits = FrameLimits {
            max_message_len: MAX_MESSAGE_BYTES,
            ..FrameLimits::default()
        };
        loop {
            if let Some(frame) =
                split_message(&mut self.buffer, &limits).map_err(|e| e.to_string())?
            {
                return Ok(frame.bytes);
            }
            set_deadline(&self.stream, deadline)?;
            let mut chunk = [0u8; 1024];
            let read = match self.stream.read(&mut chunk) {
                Ok(read) => read,
                // Interrupted by a stop and continue: try again within the same deadline.
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(io_cause("receive", &error)),
            };
            if read == 0 {
                return Err("server closed the connection".to_string());
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}

/// A TCP connection to `addr` within `deadline`, Nagle off (tiny request/response exchanges).
pub fn connect(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, String> {
    let budget = remaining(deadline)?;
    let stream = TcpStream::connect_timeout(&addr, budget).map_err(|e| io_cause("connect", &e))?;
    stream
        .set_nodelay(true)
        .map_err(|e| io_cause("set TCP_NODELAY", &e))?;
    Ok(stream)
}

/// Sets both socket timeouts to what is left until `deadline`.
pub(crate) fn set_deadline(stream: &TcpStream, deadline: Instant) -> Result<(), String> {
    let budget = remaining(deadline)?;
    stream
        .set_read_timeout(Some(budget))
        .and_then(|()| stream.set_write_timeout(Some(budget)))
        .map_err(|e| io_cause("set timeout", &e))
}

fn remaining(deadline: Instant) -> Result<Duration, String> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err("timed out".to_string())
    } else {
        Ok(left)
    }
}

/// A socket error as a short cause.
pub(crate) fn io_cause(step: &str, error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!("{step}: timed out"),
        _ => format!("{step}: {error}"),
    }
}

fn server_error(error: &ErrorResponse<'_>) -> String {
    let code = error
        .fields
        .code()
        .map_or_else(String::new, |c| format!("{c} "));
    let message = error
        .fields
        .message()
        .map_or_else(String::new, |m| String::from_utf8_lossy(m).into_owned());
    format!("server error: {code}{message}")
}
