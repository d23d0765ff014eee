//! Health probes of one replica, run on a prober thread of the control plane.
//!
//! Between probes the prober watches its idle connection, so a server that dies closes it and
//! is probed again at once (see [`Prober::wait_for_close`]): a killed replica reaches its
//! failure threshold within milliseconds instead of within probe intervals.
//!
//! Budgets: the connect and the probe query each get `health_check_timeout`; the login of a
//! new connection gets [`LOGIN_BUDGET_FACTOR`] times that.
//!
//! The control shard is not on the query path, so probes use blocking std sockets with
//! timeouts on their own threads (one per replica, so a replica that black-holes packets
//! delays only its own probes) instead of a ring. A probe keeps one logged-in connection and
//! runs `SELECT 1, pg_is_in_recovery()` on it each interval: a server killed under it shows up
//! as a reset at once, a server that cannot be reached as a refused or timed-out reconnect,
//! and a replica that was promoted (no longer in recovery) is reported as failed, since a
//! replica set must only route to standbys. Without login credentials the probe only checks
//! that the postmaster answers an SSLRequest, which proves it accepts connections but cannot
//! see a promotion.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use pgtier_policy::ReplicaId;
use pgtier_wire::FrameLimits;
use pgtier_wire::auth::{ClientAuth, NONCE_RANDOM_LEN, os_random};
use pgtier_wire::framing::split_message;
use pgtier_wire::messages::backend::ErrorResponse;
use pgtier_wire::messages::frontend::{ProtocolVersion, Query, StartupMessage};
use pgtier_wire::messages::{BackendMessage, Message};

use crate::control::health::ProbeOutcome;

/// Probe query: `SELECT 1` proves the backend executes, the second column detects promotion.
pub const PROBE_SQL: &str = "SELECT 1, pg_is_in_recovery()";

/// A new connection's login may take this many probe timeouts. Logging in (a backend fork and
/// a SCRAM exchange) costs far more than the probe query and happens once per connection;
/// dead servers are still caught within one timeout, by the refused or timed-out connect.
pub const LOGIN_BUDGET_FACTOR: u32 = 4;

/// Largest server message a probe accepts; answers to the probe query are tiny.
const PROBE_MAX_MESSAGE_BYTES: u32 = 64 * 1024;

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

/// One probe result, sent from a prober thread to the control shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    /// Probed replica.
    pub replica: ReplicaId,
    /// When the probe finished.
    pub at: SystemTime,
    /// What it found.
    pub outcome: ProbeOutcome,
}

/// Probes one replica, keeping its connection between probes.
#[derive(Debug)]
pub struct Prober {
    addr: SocketAddr,
    login: Option<ProbeLogin>,
    timeout: Duration,
    connection: Option<TcpStream>,
    buffer: BytesMut,
}

impl Prober {
    /// A prober of `addr`; each probe must finish within `timeout`.
    pub fn new(addr: SocketAddr, login: Option<ProbeLogin>, timeout: Duration) -> Prober {
        Prober {
            addr,
            login,
            timeout,
            connection: None,
            buffer: BytesMut::with_capacity(1024),
        }
    }

    /// Runs one probe. Any failure drops the connection, so the next probe reconnects.
    pub fn probe(&mut self) -> ProbeOutcome {
        let started = Instant::now();
        let deadline = started + self.timeout.max(Duration::from_millis(1));
        match self.probe_until(deadline) {
            Ok(()) => ProbeOutcome::Healthy {
                round_trip: started.elapsed(),
            },
            Err(cause) => {
                self.connection = None;
                self.buffer.clear();
                ProbeOutcome::Failed { cause }
            }
        }
    }

    /// Watches the kept connection until `until`: returns true as soon as the server closes or
    /// resets it (a killed or restarting server does so at once), after dropping it. Bytes the
    /// server sends unprompted (e.g. a FATAL before closing) are kept for the next probe to
    /// read. Returns false when there is no connection or nothing happened.
    pub fn wait_for_close(&mut self, until: Instant) -> bool {
        loop {
            let Some(stream) = self.connection.as_mut() else {
                return false;
            };
            let Ok(budget) = remaining(until) else {
                return false;
            };
            if stream.set_read_timeout(Some(budget)).is_err() {
                return false;
            }
            let mut chunk = [0u8; 1024];
            match stream.read(&mut chunk) {
                Ok(0) => break,
                Ok(read) => self.buffer.extend_from_slice(&chunk[..read]),
                Err(error)
                    if matches!(
                        error.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return false;
                }
                Err(_) => break,
            }
        }
        self.connection = None;
        self.buffer.clear();
        true
    }

    fn probe_until(&mut self, deadline: Instant) -> Result<(), String> {
        let Some(login) = self.login.clone() else {
            return self.handshake_only(deadline);
        };
        if self.connection.is_none() {
            let stream = connect(self.addr, deadline)?;
            self.connection = Some(stream);
            self.buffer.clear();
            let login_deadline = Instant::now() + self.timeout * LOGIN_BUDGET_FACTOR;
            self.log_in(&login, login_deadline)?;
            return self.query(Instant::now() + self.timeout);
        }
        self.query(deadline)
    }

    /// Connects and sends an SSLRequest; any one-byte answer proves the postmaster is up.
    fn handshake_only(&mut self, deadline: Instant) -> Result<(), String> {
        let mut stream = connect(self.addr, deadline)?;
        set_deadline(&stream, deadline)?;
        const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        stream
            .write_all(&SSL_REQUEST)
            .map_err(|e| io_cause("send", &e))?;
        let mut answer = [0u8; 1];
        stream
            .read_exact(&mut answer)
            .map_err(|e| io_cause("receive", &e))?;
        match answer[0] {
            b'N' | b'S' => Ok(()),
            other => Err(format!("unexpected answer {other:#04x} to SSLRequest")),
        }
    }

    fn log_in(&mut self, login: &ProbeLogin, deadline: Instant) -> Result<(), String> {
        let mut out = BytesMut::with_capacity(256);
        StartupMessage::encode_parts(
            &mut out,
            ProtocolVersion::V3_0,
            &[
                ("user", &login.user),
                ("database", &login.dbname),
                ("application_name", "pgtier-health"),
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

    fn query(&mut self, deadline: Instant) -> Result<(), String> {
        let mut out = BytesMut::with_capacity(64);
        Query {
            sql: PROBE_SQL.as_bytes(),
        }
        .encode(&mut out);
        self.send(&out, deadline)?;
        let mut in_recovery = None;
        loop {
            let frame = self.receive(deadline)?;
            match BackendMessage::decode(&frame).map_err(|e| e.to_string())? {
                BackendMessage::DataRow(row) => {
                    in_recovery = row.values.iter().nth(1).flatten().map(|v| v == b"t");
                }
                BackendMessage::ErrorResponse(error) => return Err(server_error(&error)),
                BackendMessage::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match in_recovery {
            Some(true) => Ok(()),
            Some(false) => Err("promoted: pg_is_in_recovery() is false".to_string()),
            None => Err("probe query returned no row".to_string()),
        }
    }

    fn send(&mut self, bytes: &[u8], deadline: Instant) -> Result<(), String> {
        let stream = self.connection.as_mut().ok_or("not connected")?;
        set_deadline(stream, deadline)?;
        stream.write_all(bytes).map_err(|e| io_cause("send", &e))
    }

    /// The next complete server message, as bytes.
    fn receive(&mut self, deadline: Instant) -> Result<bytes::Bytes, String> {
        let limits = FrameLimits {
            max_message_len: PROBE_MAX_MESSAGE_BYTES,
            ..FrameLimits::default()
        };
        loop {
            if let Some(frame) =
                split_message(&mut self.buffer, &limits).map_err(|e| e.to_string())?
            {
                return Ok(frame.bytes);
            }
            let stream = self.connection.as_mut().ok_or("not connected")?;
            set_deadline(stream, deadline)?;
            let mut chunk = [0u8; 1024];
            let read = stream
                .read(&mut chunk)
                .map_err(|e| io_cause("receive", &e))?;
            if read == 0 {
                return Err("server closed the connection".to_string());
            }
            self.buffer.extend_from_slice(&chunk[..read]);
        }
    }
}

fn connect(addr: SocketAddr, deadline: Instant) -> Result<TcpStream, String> {
    let budget = remaining(deadline)?;
    let stream = TcpStream::connect_timeout(&addr, budget).map_err(|e| io_cause("connect", &e))?;
    // Probes are tiny request/response exchanges: do not let Nagle delay them.
    stream
        .set_nodelay(true)
        .map_err(|e| io_cause("set TCP_NODELAY", &e))?;
    Ok(stream)
}

fn set_deadline(stream: &TcpStream, deadline: Instant) -> Result<(), String> {
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

fn io_cause(step: &str, error: &io::Error) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn refused_connection_fails_fast() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let mut prober = Prober::new(addr, None, Duration::from_millis(500));
        let started = Instant::now();
        let outcome = prober.probe();
        assert!(!outcome.is_healthy(), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_millis(400));
    }

    #[test]
    fn silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut prober = Prober::new(addr, None, Duration::from_millis(100));
        match prober.probe() {
            ProbeOutcome::Failed { cause } => assert!(cause.contains("timed out"), "{cause}"),
            healthy => panic!("a server that never answers is not healthy: {healthy:?}"),
        }
    }

    #[test]
    fn closed_idle_connection_is_noticed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut prober = Prober::new(addr, None, Duration::from_millis(500));
        prober.connection = Some(TcpStream::connect(addr).expect("connect"));
        let (server_side, _) = listener.accept().expect("accept");
        let quiet_until = Instant::now() + Duration::from_millis(20);
        assert!(
            !prober.wait_for_close(quiet_until),
            "an idle open connection is fine"
        );
        drop(server_side);
        let started = Instant::now();
        assert!(prober.wait_for_close(Instant::now() + Duration::from_secs(2)));
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(prober.connection.is_none());
    }
}
