//! A driver without a kernel, for the engine's tests and its fuzz target: it records every
//! action, completes teardowns and sends at once (unless told to hold them), and plays
//! PostgreSQL's part on each server connection with [`FakeBackend`], a small scripted
//! server that logs in, answers simple and extended queries, tracks its transaction status
//! and session state, and can be told to fail.

use crate::addr::{ClientAddr, ServerAddr};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use pgtier_core::config::Config;

use crate::action::{Action, CloseHow, Conn};
use crate::command::Command;
use crate::engine::{Engine, EngineParts, IpOnly};
use crate::ids::{ClientId, ServerId};
use crate::random::SeededRandom;
use crate::services::{NoConsole, NoRouting};
use crate::shared::Shared;
use crate::userlist::UserList;

/// One backend message: its type byte and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Msg {
    pub tag: u8,
    pub body: Vec<u8>,
}

impl Msg {
    /// The value of an ErrorResponse/NoticeResponse field (`b'C'` = SQLSTATE).
    pub fn field(&self, code: u8) -> Option<String> {
        let mut rest = self.body.as_slice();
        while let Some((&kind, tail)) = rest.split_first() {
            if kind == 0 {
                return None;
            }
            let end = tail.iter().position(|&b| b == 0)?;
            if kind == code {
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

/// Splits typed messages off the front of `bytes` (a trailing partial one stays).
pub fn split_messages(bytes: &mut BytesMut) -> Vec<Msg> {
    let mut out = Vec::new();
    while bytes.len() >= 5 {
        let len = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
        if len < 4 || bytes.len() < len + 1 {
            break;
        }
        let frame = bytes.split_to(len + 1);
        out.push(Msg {
            tag: frame[0],
            body: frame[5..].to_vec(),
        });
    }
    out
}

/// A typed frontend or backend message.
pub fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
    out.extend_from_slice(body);
    out
}

pub fn query(sql: &str) -> Vec<u8> {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    frame(b'Q', &body)
}

pub fn startup(params: &[(&str, &str)]) -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for (name, value) in params {
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    out.extend(body);
    out
}

pub fn parse(name: &str, sql: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for text in [name, sql] {
        body.extend_from_slice(text.as_bytes());
        body.push(0);
    }
    body.extend_from_slice(&[0, 0]);
    frame(b'P', &body)
}

pub fn bind(statement: &str) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(statement.as_bytes());
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0]);
    frame(b'B', &body)
}

/// A Describe ('S' statement or 'P' portal) of `name`.
pub fn describe(kind: u8, name: &str) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    frame(b'D', &body)
}

/// A Close ('S' statement or 'P' portal) of `name`.
pub fn close(kind: u8, name: &str) -> Vec<u8> {
    let mut body = vec![kind];
    body.extend_from_slice(name.as_bytes());
    body.push(0);
    frame(b'C', &body)
}

pub fn execute() -> Vec<u8> {
    frame(b'E', &[0, 0, 0, 0, 0])
}

pub fn sync() -> Vec<u8> {
    frame(b'S', &[])
}

pub fn terminate() -> Vec<u8> {
    frame(b'X', &[])
}

/// PostgreSQL's part on one server connection.
#[derive(Debug, Default)]
pub struct FakeBackend {
    input: BytesMut,
    logged_in: bool,
    /// 'I', 'T' or 'E'.
    status: u8,
    /// Session settings changed with SET (cleared by DISCARD ALL / RESET ALL).
    pub settings: Vec<String>,
    /// Named statements prepared (cleared by DISCARD ALL).
    pub statements: Vec<String>,
    /// The pid it reports.
    pub pid: u32,
    /// Queries it saw, in order.
    pub seen: Vec<String>,
    /// Skipping messages until Sync after an error in an extended sequence.
    skipping: bool,
    /// Answers held back (a query that "runs" until `finish_running`).
    held: VecDeque<Vec<u8>>,
    /// Queries containing this text are held (they run until released).
    pub hold_queries_with: Option<String>,
    /// In COPY FROM STDIN.
    copy_in: bool,
    /// Terminate arrived: PostgreSQL closes the connection after it.
    pub terminated: bool,
    /// (user, password) rows an `auth_query` (over pg_shadow or pg_authid) finds.
    pub shadow: Vec<(String, String)>,
    /// The first parameter of the last Bind.
    bound: Option<String>,
    /// The unnamed statement's text (dropped by a simple Query and a Close of it).
    pub unnamed: Option<String>,
}

impl FakeBackend {
    pub fn new(pid: u32) -> FakeBackend {
        FakeBackend {
            status: b'I',
            pid,
            ..FakeBackend::default()
        }
    }

    /// Reads what the engine sent and returns the answer bytes.
    pub fn receive(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.input.extend_from_slice(bytes);
        let mut out = Vec::new();
        if !self.logged_in {
            if self.input.len() < 4 {
                return out;
            }
            let len =
                u32::from_be_bytes([self.input[0], self.input[1], self.input[2], self.input[3]])
                    as usize;
            if self.input.len() < len {
                return out;
            }
            let packet = self.input.split_to(len);
            if packet[..] == [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f] {
                // An SSLRequest: this backend has no TLS.
                out.push(b'N');
                return out;
            }
            self.logged_in = true;
            out.extend(frame(b'R', &0u32.to_be_bytes()));
            for (name, value) in [
                ("server_version", "15.4"),
                ("client_encoding", "UTF8"),
                ("DateStyle", "ISO, MDY"),
                ("TimeZone", "UTC"),
                ("application_name", ""),
                ("standard_conforming_strings", "on"),
                ("IntervalStyle", "postgres"),
            ] {
                let mut body = name.as_bytes().to_vec();
                body.push(0);
                body.extend_from_slice(value.as_bytes());
                body.push(0);
                out.extend(frame(b'S', &body));
            }
            let mut key = self.pid.to_be_bytes().to_vec();
            key.extend_from_slice(&7u32.to_be_bytes());
            out.extend(frame(b'K', &key));
            out.extend(frame(b'Z', b"I"));
        }
        for message in split_messages(&mut self.input) {
            self.answer(&message, &mut out);
        }
        out
    }

    /// Releases the answers of held queries.
    pub fn finish_running(&mut self) -> Vec<u8> {
        self.held.drain(..).flatten().collect()
    }

    /// Whether a held query still runs.
    pub fn is_running(&self) -> bool {
        !self.held.is_empty()
    }

    /// Acts on a CancelRequest: held queries end with 57014.
    pub fn cancel(&mut self) -> Vec<u8> {
        if self.held.is_empty() {
            return Vec::new();
        }
        self.held.clear();
        let mut out = error("ERROR", "57014", "canceling statement due to user request");
        if self.status == b'T' {
            self.status = b'E';
        }
        out.extend(frame(b'Z', &[self.status]));
        out
    }

    fn answer(&mut self, message: &Msg, out: &mut Vec<u8>) {
        if self.copy_in {
            match message.tag {
                b'd' => return,
                b'c' => {
                    self.copy_in = false;
                    out.extend(frame(b'C', b"COPY 1\0"));
                    out.extend(frame(b'Z', &[self.status]));
                    return;
                }
                b'f' => {
                    self.copy_in = false;
                    out.extend(error("ERROR", "57014", "COPY from stdin failed"));
                    out.extend(frame(b'Z', &[self.status]));
                    return;
                }
                _ => return,
            }
        }
        if self.skipping && message.tag != b'S' {
            return;
        }
        match message.tag {
            b'Q' => {
                self.unnamed = None;
                let sql = String::from_utf8_lossy(
                    message.body.split(|&b| b == 0).next().unwrap_or_default(),
                )
                .into_owned();
                self.seen.push(sql.clone());
                let mut answer = Vec::new();
                if sql.trim().is_empty() {
                    answer.extend(frame(b'I', b""));
                }
                for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                    if !self.statement(statement, &mut answer) {
                        break;
                    }
                }
                // In COPY FROM STDIN the ReadyForQuery comes after the copy ends.
                if !self.copy_in {
                    answer.extend(frame(b'Z', &[self.status]));
                }
                match &self.hold_queries_with {
                    Some(text) if sql.contains(text.as_str()) => self.held.push_back(answer),
                    _ => out.extend(answer),
                }
            }
            b'P' => {
                let mut parts = message.body.split(|&b| b == 0);
                let name = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                let sql = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                self.seen.push(sql.clone());
                let upper = sql.to_ascii_uppercase();
                if self.status == b'E' && !upper.starts_with("ROLLBACK") {
                    self.extended_error("25P02", "current transaction is aborted", out);
                } else if upper.starts_with("FAIL") {
                    self.extended_error("42601", "syntax error", out);
                } else if !name.is_empty() && self.statements.contains(&name) {
                    let message = format!("prepared statement \"{name}\" already exists");
                    self.extended_error("42P05", &message, out);
                } else {
                    if name.is_empty() {
                        self.unnamed = Some(sql);
                    } else {
                        self.statements.push(name);
                    }
                    out.extend(frame(b'1', &[]));
                }
            }
            b'B' => {
                let mut parts = message.body.split(|&b| b == 0);
                let _portal = parts.next();
                let name = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
                if !name.is_empty() && !self.statements.contains(&name) {
                    let message = format!("prepared statement \"{name}\" does not exist");
                    self.extended_error("26000", &message, out);
                } else if name.is_empty() && self.unnamed.is_none() {
                    let message = "unnamed prepared statement does not exist";
                    self.extended_error("26000", message, out);
                } else if self.status == b'E' {
                    self.extended_error("25P02", "current transaction is aborted", out);
                } else {
                    self.bound = first_parameter(&message.body);
                    out.extend(frame(b'2', &[]));
                }
            }
            b'D' => {
                let kind = message.body.first().copied();
                let name = String::from_utf8_lossy(
                    message.body[1..]
                        .split(|&b| b == 0)
                        .next()
                        .unwrap_or_default(),
                )
                .into_owned();
                if kind == Some(b'S') && !name.is_empty() && !self.statements.contains(&name) {
                    let message = format!("prepared statement \"{name}\" does not exist");
                    self.extended_error("26000", &message, out);
                } else if kind == Some(b'S') && name.is_empty() && self.unnamed.is_none() {
                    let message = "unnamed prepared statement does not exist";
                    self.extended_error("26000", message, out);
                } else {
                    if kind == Some(b'S') {
                        out.extend(frame(b't', &[0, 0]));
                    }
                    out.extend(frame(b'n', &[]));
                }
            }
            b'E' if self.seen.last().is_some_and(|sql| is_lookup(sql)) => {
                let user = self.bound.clone().unwrap_or_default();
                let rows: Vec<(String, String)> = self
                    .shadow
                    .iter()
                    .filter(|(name, _)| *name == user)
                    .cloned()
                    .collect();
                for (name, password) in &rows {
                    let mut row = BytesMut::new();
                    pgtier_wire::messages::backend::DataRow::encode_parts(
                        &mut row,
                        &[Some(name.as_bytes()), Some(password.as_bytes())],
                    );
                    out.extend_from_slice(&row);
                }
                out.extend(frame(b'C', format!("SELECT {}\0", rows.len()).as_bytes()));
            }
            b'E' => out.extend(frame(b'C', b"SELECT 1\0")),
            b'C' => {
                if message.body.first() == Some(&b'S') {
                    let name = String::from_utf8_lossy(
                        message.body[1..]
                            .split(|&b| b == 0)
                            .next()
                            .unwrap_or_default(),
                    )
                    .into_owned();
                    if name.is_empty() {
                        self.unnamed = None;
                    }
                    self.statements.retain(|held| *held != name);
                }
                out.extend(frame(b'3', &[]));
            }
            b'H' => {}
            b'S' => {
                self.skipping = false;
                out.extend(frame(b'Z', &[self.status]));
            }
            b'X' => self.terminated = true,
            _ => {}
        }
    }

    /// The auth_query rows this backend finds.
    pub fn with_shadow(mut self, shadow: &[(String, String)]) -> FakeBackend {
        self.shadow = shadow.to_vec();
        self
    }

    /// An error in an extended sequence: the rest is skipped until Sync.
    fn extended_error(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        out.extend(error("ERROR", code, message));
        if self.status == b'T' {
            self.status = b'E';
        }
        self.skipping = true;
    }

    /// Answers one statement; false when it failed (the rest of the query is skipped).
    fn statement(&mut self, statement: &str, out: &mut Vec<u8>) -> bool {
        let upper = statement.to_ascii_uppercase();
        if self.status == b'E' && !upper.starts_with("ROLLBACK") {
            out.extend(error("ERROR", "25P02", "current transaction is aborted"));
            return false;
        }
        if upper.starts_with("BEGIN") {
            self.status = b'T';
            out.extend(frame(b'C', b"BEGIN\0"));
        } else if upper.starts_with("COMMIT") || upper.starts_with("ROLLBACK") {
            self.status = b'I';
            out.extend(frame(b'C', b"COMMIT\0"));
        } else if upper.starts_with("DISCARD ALL") || upper.starts_with("RESET ALL") {
            let discard = upper.starts_with("DISCARD");
            if discard && self.status != b'I' {
                out.extend(error(
                    "ERROR",
                    "25001",
                    "DISCARD ALL cannot run inside a transaction block",
                ));
                return false;
            }
            self.settings.clear();
            if discard {
                self.statements.clear();
                out.extend(frame(b'C', b"DISCARD ALL\0"));
            } else {
                out.extend(frame(b'C', b"RESET\0"));
            }
        } else if upper.starts_with("SET ") && upper.contains("'FOO'") {
            out.extend(error("ERROR", "22023", "invalid value for parameter"));
            if self.status == b'T' {
                self.status = b'E';
            }
            return false;
        } else if upper.starts_with("SET APPLICATION_NAME") {
            // A tracked parameter: the server reports its new value.
            let value = statement.split('\'').nth(1).unwrap_or_default();
            let mut body = b"application_name\0".to_vec();
            body.extend_from_slice(value.as_bytes());
            body.push(0);
            out.extend(frame(b'S', &body));
            out.extend(frame(b'C', b"SET\0"));
        } else if upper.starts_with("DEALLOCATE ALL") {
            self.statements.clear();
            out.extend(frame(b'C', b"DEALLOCATE ALL\0"));
        } else if let Some(name) = upper.strip_prefix("DEALLOCATE ") {
            let name = name.trim().to_ascii_lowercase();
            if !self.statements.contains(&name) {
                let message = format!("prepared statement \"{name}\" does not exist");
                out.extend(error("ERROR", "26000", &message));
                if self.status == b'T' {
                    self.status = b'E';
                }
                return false;
            }
            self.statements.retain(|held| *held != name);
            out.extend(frame(b'C', b"DEALLOCATE\0"));
        } else if upper.starts_with("LISTEN") || upper.starts_with("UNLISTEN") {
            out.extend(frame(b'C', b"LISTEN\0"));
        } else if upper.starts_with("RESET ") {
            out.extend(frame(b'C', b"RESET\0"));
        } else if upper.starts_with("SET ") {
            self.settings.push(statement.to_string());
            out.extend(frame(b'C', b"SET\0"));
        } else if upper.starts_with("COPY") && upper.contains("FROM STDIN") {
            self.copy_in = true;
            out.extend(frame(b'G', &[0, 0, 0]));
        } else if upper.starts_with("FAIL") {
            out.extend(error("ERROR", "42601", "syntax error"));
            if self.status == b'T' {
                self.status = b'E';
            }
            return false;
        } else if upper.starts_with("FATAL") {
            out.extend(error(
                "FATAL",
                "57P01",
                "terminating connection due to administrator command",
            ));
            return false;
        } else {
            out.extend(frame(
                b'T',
                b"\0\x01x\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
            ));
            out.extend(frame(b'D', b"\0\x01\0\0\0\x011"));
            out.extend(frame(b'C', b"SELECT 1\0"));
        }
        true
    }
}

/// The first parameter value of a Bind body, as text.
fn first_parameter(body: &[u8]) -> Option<String> {
    let mut at = body.iter().position(|&b| b == 0)? + 1;
    at += body[at..].iter().position(|&b| b == 0)? + 1;
    let formats = u16::from_be_bytes([*body.get(at)?, *body.get(at + 1)?]) as usize;
    at += 2 + 2 * formats;
    let count = u16::from_be_bytes([*body.get(at)?, *body.get(at + 1)?]);
    if count == 0 {
        return None;
    }
    at += 2;
    let len = i32::from_be_bytes(body.get(at..at + 4)?.try_into().ok()?);
    let value = body.get(at + 4..at + 4 + usize::try_from(len).ok()?)?;
    Some(String::from_utf8_lossy(value).into_owned())
}

/// An ErrorResponse from a server.
pub fn error(severity: &str, code: &str, message: &str) -> Vec<u8> {
    let mut body = Vec::new();
    for (kind, value) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', code),
        (b'M', message),
    ] {
        body.push(kind);
        body.extend_from_slice(value.as_bytes());
        body.push(0);
    }
    body.push(0);
    frame(b'E', &body)
}

/// A kernel-less driver around one engine.
pub struct Harness {
    pub engine: Engine,
    pub now: Instant,
    /// Bytes the engine sent on each connection and the test has not read yet.
    pub output: HashMap<Conn, BytesMut>,
    /// Connections the engine closed, with how.
    pub closed: Vec<(Conn, CloseHow)>,
    /// Servers whose connect is pending.
    pub connecting: Vec<(ServerId, ServerAddr)>,
    /// Every connect asked for, in order.
    pub connects: Vec<(ServerId, ServerAddr)>,
    /// The fake backend of each connected server.
    pub backends: HashMap<ServerId, FakeBackend>,
    /// Cancel requests sent, for which server.
    pub cancels: Vec<ServerId>,
    /// CancelRequests forwarded to peers: where, and the request.
    pub forwarded_cancels: Vec<(ServerAddr, [u8; 16])>,
    /// Commands posted to other shards.
    pub posts: Vec<(usize, Command)>,
    /// Connections whose receive is paused.
    pub paused: Vec<Conn>,
    /// When false, sends to clients are not reported sent (a slow client).
    pub clients_read: bool,
    /// When false, the harness does not answer for servers on its own.
    pub auto_backend: bool,
    /// The pg_shadow rows every new fake backend finds for `auth_query`.
    pub shadow: Vec<(String, String)>,
    /// Backends whose socket was detached (by fake descriptor), until a harness adopts them:
    /// [`Pair::exchange`] carries them to the other shard's harness with the posts.
    pub in_transit: HashMap<i32, FakeBackend>,
    /// When true, `Action::Detach` is only recorded in `detaching` (a receive still in
    /// flight): the test completes it with [`Harness::complete_detaches`], or lets the server
    /// speak first.
    pub hold_detaches: bool,
    pub detaching: Vec<ServerId>,
    /// Sockets the engine adopted (server, fake descriptor) and closed without a connection.
    pub adopted: Vec<(ServerId, i32)>,
    pub closed_sockets: Vec<i32>,
    /// Queries containing this text are held by every backend connected from now on.
    pub hold_new_backends: Option<String>,
    next_pid: u32,
}

/// Fake descriptors of detached sockets, unique across the harnesses of a test.
static NEXT_FAKE_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(10_000);

/// A configuration with one database `db` on 127.0.0.1:5432, trust auth, and `extra`
/// lines in `[pgtier]`.
pub fn config(extra: &str) -> String {
    format!(
        "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\nadmin_users = [\"admin\"]\n{extra}\n\
         [databases.db]\nhost = \"127.0.0.1\"\nport = 5432\ndbname = \"db\"\n"
    )
}

impl Harness {
    pub fn new(config_text: &str) -> Harness {
        Harness::with_users(config_text, UserList::new())
    }

    /// A harness whose engine routes replica-set entries with `routing`.
    pub fn with_routing(config_text: &str, routing: Box<dyn crate::services::Routing>) -> Harness {
        Harness::with_services(config_text, UserList::new(), routing)
    }

    pub fn with_users(config_text: &str, users: UserList) -> Harness {
        Harness::with_services(config_text, users, Box::new(NoRouting))
    }

    /// A harness whose engine has these TLS configurations.
    pub fn with_tls(config_text: &str, users: UserList, tls: crate::tls::TlsSides) -> Harness {
        Harness::build(config_text, users, Box::new(NoRouting), tls)
    }

    fn with_services(
        config_text: &str,
        users: UserList,
        routing: Box<dyn crate::services::Routing>,
    ) -> Harness {
        Harness::build(config_text, users, routing, Default::default())
    }

    /// A harness whose engine answers its admin console with `console`.
    pub fn with_console(config_text: &str, console: Box<dyn crate::services::Console>) -> Harness {
        Harness::build_with_console(
            config_text,
            UserList::new(),
            Box::new(NoRouting),
            Default::default(),
            console,
        )
    }

    /// A harness whose engine answers its admin console with `console` and checks logins
    /// against `users`.
    pub fn with_console_and_users(
        config_text: &str,
        users: UserList,
        console: Box<dyn crate::services::Console>,
    ) -> Harness {
        Harness::build_with_console(
            config_text,
            users,
            Box::new(NoRouting),
            Default::default(),
            console,
        )
    }

    fn build(
        config_text: &str,
        users: UserList,
        routing: Box<dyn crate::services::Routing>,
        tls: crate::tls::TlsSides,
    ) -> Harness {
        Harness::build_with_console(config_text, users, routing, tls, Box::new(NoConsole))
    }

    fn build_with_console(
        config_text: &str,
        users: UserList,
        routing: Box<dyn crate::services::Routing>,
        tls: crate::tls::TlsSides,
        console: Box<dyn crate::services::Console>,
    ) -> Harness {
        let config = match Config::from_str(config_text, "/tmp/pgtier-engine-test.toml") {
            Ok(config) => config,
            Err(error) => panic!("test config: {error}"),
        };
        Harness::of_shard(
            0,
            Arc::new(config),
            Arc::new(Shared::new(1)),
            users,
            routing,
            tls,
            console,
            Instant::now(),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn of_shard(
        shard: usize,
        config: Arc<Config>,
        shared: Arc<Shared>,
        users: UserList,
        routing: Box<dyn crate::services::Routing>,
        tls: crate::tls::TlsSides,
        console: Box<dyn crate::services::Console>,
        now: Instant,
    ) -> Harness {
        let engine = Engine::new(EngineParts {
            shard,
            config,
            users: Arc::new(users),
            shared,
            routing,
            console,
            resolver: Box::new(IpOnly),
            random: Box::new(SeededRandom::new(42)),
            now,
            wall_now: SystemTime::UNIX_EPOCH,
            tls,
        });
        Harness {
            engine,
            now,
            output: HashMap::new(),
            closed: Vec::new(),
            connecting: Vec::new(),
            connects: Vec::new(),
            backends: HashMap::new(),
            cancels: Vec::new(),
            forwarded_cancels: Vec::new(),
            posts: Vec::new(),
            paused: Vec::new(),
            clients_read: true,
            auto_backend: true,
            shadow: Vec::new(),
            in_transit: HashMap::new(),
            hold_detaches: false,
            detaching: Vec::new(),
            adopted: Vec::new(),
            closed_sockets: Vec::new(),
            hold_new_backends: None,
            next_pid: 1000 + 1000 * shard as u32,
        }
    }

    /// Completes every held detach (`hold_detaches`): each socket goes to the engine.
    pub fn complete_detaches(&mut self) {
        for server in std::mem::take(&mut self.detaching) {
            self.detach(server);
        }
        self.pump();
    }

    fn detach(&mut self, server: ServerId) {
        let fd = NEXT_FAKE_FD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(backend) = self.backends.remove(&server) {
            self.in_transit.insert(fd, backend);
        }
        let socket = crate::server::moved::DetachedSocket::from_raw(fd);
        if let Some(socket) = self.engine.handle_detached(self.now, server, socket) {
            let fd = socket.into_raw();
            self.in_transit.remove(&fd);
            self.closed_sockets.push(fd);
        }
    }

    /// Drains the engine's actions until it has none, playing the kernel and the servers.
    pub fn pump(&mut self) {
        for _ in 0..10_000 {
            let Some(action) = self.engine.poll_action() else {
                return;
            };
            self.act(action);
        }
        panic!("the engine never ran out of actions");
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Send { conn, bytes } => self.deliver(conn, bytes),
            Action::Close { conn, how } => {
                self.closed.push((conn, how));
                if let Conn::Server(id) = conn {
                    self.backends.remove(&id);
                }
                // A client that does not read keeps a flushing close open: its final bytes
                // are never sent, and only the engine's linger deadline ends it.
                let held =
                    matches!(conn, Conn::Client(_)) && how == CloseHow::Flush && !self.clients_read;
                if !held {
                    self.engine.handle_closed(self.now, conn);
                }
            }
            Action::Connect { server, addr } => {
                self.connects.push((server, addr.clone()));
                self.connecting.push((server, addr));
                if self.auto_backend {
                    self.complete_connects();
                }
            }
            Action::PauseRecv(conn) => self.paused.push(conn),
            Action::ResumeRecv(conn) => self.paused.retain(|c| *c != conn),
            Action::SendCancel { server, .. } => {
                self.cancels.push(server);
                if self.auto_backend {
                    let answer = self
                        .backends
                        .get_mut(&server)
                        .map(FakeBackend::cancel)
                        .unwrap_or_default();
                    if !answer.is_empty() {
                        self.engine.handle_server_data(
                            self.now,
                            server,
                            BytesMut::from(&answer[..]),
                        );
                    }
                    self.engine.handle_cancel_done(self.now, server);
                }
            }
            Action::ForwardCancel { addr, request } => self.forwarded_cancels.push((addr, request)),
            Action::Post { shard, command } => self.posts.push((shard, command)),
            Action::Detach(server) => {
                if self.hold_detaches {
                    self.detaching.push(server);
                } else {
                    self.detach(server);
                }
            }
            Action::Adopt { server, socket } => {
                let fd = socket.into_raw();
                if let Some(backend) = self.in_transit.remove(&fd) {
                    self.backends.insert(server, backend);
                }
                self.adopted.push((server, fd));
            }
            Action::CloseSocket(socket) => {
                let fd = socket.into_raw();
                self.in_transit.remove(&fd);
                self.closed_sockets.push(fd);
            }
        }
    }

    fn deliver(&mut self, conn: Conn, bytes: Bytes) {
        match conn {
            Conn::Client(id) => {
                self.output
                    .entry(conn)
                    .or_default()
                    .extend_from_slice(&bytes);
                if self.clients_read {
                    self.engine.handle_client_sent(self.now, id, bytes.len());
                }
            }
            Conn::Server(id) => {
                self.output
                    .entry(conn)
                    .or_default()
                    .extend_from_slice(&bytes);
                if !self.auto_backend {
                    return;
                }
                let Some(backend) = self.backends.get_mut(&id) else {
                    return;
                };
                let answer = backend.receive(&bytes);
                let terminated = backend.terminated;
                if !answer.is_empty() {
                    self.engine
                        .handle_server_data(self.now, id, BytesMut::from(&answer[..]));
                }
                if terminated {
                    self.backends.remove(&id);
                    self.engine.handle_server_gone(self.now, id, None);
                }
            }
        }
    }

    /// Completes every pending connect with success.
    pub fn complete_connects(&mut self) {
        let pending = std::mem::take(&mut self.connecting);
        for (server, _) in pending {
            self.next_pid += 1;
            let mut backend = FakeBackend::new(self.next_pid).with_shadow(&self.shadow);
            backend.hold_queries_with = self.hold_new_backends.clone();
            self.backends.insert(server, backend);
            self.engine
                .handle_server_connected(self.now, server, Ok(()));
        }
    }

    /// Fails every pending connect with `errno` (111: refused, 110: timed out).
    pub fn refuse_connects(&mut self, errno: i32) {
        let pending = std::mem::take(&mut self.connecting);
        for (server, _) in pending {
            self.engine
                .handle_server_connected(self.now, server, Err(errno));
        }
        self.pump();
    }

    /// Completes every pending connect with success, with no fake backend behind it: the
    /// test plays the server itself with `server_sends`.
    pub fn complete_connects_without_backend(&mut self) {
        let pending = std::mem::take(&mut self.connecting);
        for (server, _) in pending {
            self.engine
                .handle_server_connected(self.now, server, Ok(()));
        }
        self.pump();
    }

    /// A client connects and logs in as `user` to `database` (trust); returns its id with
    /// the login's messages read.
    pub fn login(&mut self, user: &str, database: &str) -> (ClientId, Vec<Msg>) {
        let id = self.accept();
        self.client_sends(id, &startup(&[("user", user), ("database", database)]));
        let messages = self.client_output(id);
        (id, messages)
    }

    pub fn accept(&mut self) -> ClientId {
        self.accept_from(None)
    }

    /// A TCP client from `peer` (`None`: its address could not be read).
    pub fn accept_from(&mut self, peer: Option<SocketAddr>) -> ClientId {
        let accepted = self
            .engine
            .handle_accept(self.now, peer.map(ClientAddr::Tcp));
        self.accepted(accepted)
    }

    /// A client on the Unix-domain socket.
    pub fn accept_unix(&mut self) -> ClientId {
        let accepted = self.engine.handle_accept(
            self.now,
            Some(ClientAddr::Unix {
                port: 6432,
                own_user: false,
            }),
        );
        self.accepted(accepted)
    }

    fn accepted(&mut self, accepted: Option<ClientId>) -> ClientId {
        let id = match accepted {
            Some(id) => id,
            None => panic!("the engine refused a client slot"),
        };
        self.pump();
        id
    }

    pub fn client_sends(&mut self, id: ClientId, bytes: &[u8]) {
        self.engine
            .handle_client_data(self.now, id, BytesMut::from(bytes));
        self.pump();
    }

    pub fn client_leaves(&mut self, id: ClientId) {
        self.engine.handle_client_gone(self.now, id);
        self.pump();
    }

    pub fn server_sends(&mut self, id: ServerId, bytes: &[u8]) {
        self.engine
            .handle_server_data(self.now, id, BytesMut::from(bytes));
        self.pump();
    }

    pub fn server_gone(&mut self, id: ServerId) {
        self.backends.remove(&id);
        self.engine.handle_server_gone(self.now, id, None);
        self.pump();
    }

    /// The messages the engine sent to client `id` since last asked.
    pub fn client_output(&mut self, id: ClientId) -> Vec<Msg> {
        let Some(bytes) = self.output.get_mut(&Conn::Client(id)) else {
            return Vec::new();
        };
        split_messages(bytes)
    }

    /// The raw bytes sent to client `id` since last asked.
    pub fn client_bytes(&mut self, id: ClientId) -> Vec<u8> {
        self.output
            .remove(&Conn::Client(id))
            .map(|bytes| bytes.to_vec())
            .unwrap_or_default()
    }

    /// Message tags the client got since last asked.
    /// Every byte the engine sent to a server so far.
    pub fn output_to(&self, id: ServerId) -> Vec<u8> {
        self.output
            .get(&Conn::Server(id))
            .map(|bytes| bytes.to_vec())
            .unwrap_or_default()
    }

    pub fn client_tags(&mut self, id: ClientId) -> String {
        self.client_output(id)
            .iter()
            .map(|message| message.tag as char)
            .collect()
    }

    pub fn is_closed(&self, conn: Conn) -> bool {
        self.closed.iter().any(|(closed, _)| *closed == conn)
    }

    /// Moves time on and runs the timer.
    pub fn advance(&mut self, by: Duration) {
        self.now += by;
        self.engine.handle_timeout(self.now);
        self.pump();
    }

    /// Whether a new client is refused now (the engine is shutting down).
    pub fn accept_refused_while_shutting_down(&mut self) -> bool {
        let id = self.accept();
        let refused = self
            .client_output(id)
            .iter()
            .any(|m| m.sqlstate().as_deref() == Some("57P03"));
        refused && self.is_closed(Conn::Client(id))
    }

    /// The servers with a live fake backend.
    pub fn live_servers(&self) -> Vec<ServerId> {
        let mut servers: Vec<ServerId> = self.backends.keys().copied().collect();
        servers.sort();
        servers
    }

    pub fn backend(&mut self, id: ServerId) -> &mut FakeBackend {
        match self.backends.get_mut(&id) {
            Some(backend) => backend,
            None => panic!("no backend for {id:?}"),
        }
    }

    /// Releases every held query of every backend.
    pub fn finish_running(&mut self) {
        let servers = self.live_servers();
        for id in servers {
            let answer = self.backend(id).finish_running();
            if !answer.is_empty() {
                self.server_sends(id, &answer);
            }
        }
    }
}

/// Two shards' engines over one shared state (budgets, shard count 2), each behind its own
/// kernel-less driver; [`Pair::exchange`] delivers what they posted to each other, with the
/// backends of the servers that moved.
pub struct Pair {
    pub shards: [Harness; 2],
}

impl Pair {
    pub fn new(config_text: &str) -> Pair {
        let config = match Config::from_str(config_text, "/tmp/pgtier-engine-test.toml") {
            Ok(config) => Arc::new(config),
            Err(error) => panic!("test config: {error}"),
        };
        let shared = Arc::new(Shared::new(2));
        let now = Instant::now();
        let shard = |index: usize| {
            Harness::of_shard(
                index,
                config.clone(),
                shared.clone(),
                UserList::new(),
                Box::new(NoRouting),
                Default::default(),
                Box::new(NoConsole),
                now,
            )
        };
        Pair {
            shards: [shard(0), shard(1)],
        }
    }

    /// Delivers every post between the two shards (and what they post in answer) until
    /// none is left; the backends of detached sockets travel with them.
    pub fn exchange(&mut self) {
        for _ in 0..100 {
            let mut delivered = false;
            for from in 0..2 {
                let to = 1 - from;
                let posts = std::mem::take(&mut self.shards[from].posts);
                let transit = std::mem::take(&mut self.shards[from].in_transit);
                self.shards[to].in_transit.extend(transit);
                for (shard, command) in posts {
                    assert_eq!(shard, to, "a post to a shard that does not exist");
                    let now = self.shards[to].now;
                    self.shards[to].engine.handle_command(now, command);
                    self.shards[to].pump();
                    delivered = true;
                }
            }
            if !delivered {
                return;
            }
        }
        panic!("the shards never stopped posting to each other");
    }

    /// Moves both shards' time on and runs their timers, then delivers their posts.
    pub fn advance(&mut self, by: Duration) {
        for shard in &mut self.shards {
            shard.advance(by);
        }
        self.exchange();
    }
}

/// TLS for clients (`prefer`-style acceptor over the shared test PKI), no server TLS: what
/// the engine gets when `client_tls_sslmode` is on.
pub fn client_tls(mode: pgtier_core::config::SslMode) -> crate::tls::TlsSides {
    use crate::tls::{AcceptorParams, PemFile, TlsAcceptor};
    use pgtier_core::config::{TlsCiphers, TlsProtocols};
    let pki = crate::tls::test_pki::TestPki::shared();
    let ciphers = TlsCiphers::parse("default").expect("default ciphers parse");
    let acceptor = TlsAcceptor::new(&AcceptorParams {
        mode,
        protocols: TlsProtocols::parse("secure").expect("secure parses"),
        ciphers: &ciphers,
        cert_chain: PemFile::new("server.crt", pki.server_cert_pem.as_bytes()),
        key: PemFile::new("server.key", pki.server_key_pem.as_bytes()),
        ca: None,
    })
    .expect("the test PKI builds an acceptor");
    crate::tls::TlsSides {
        acceptor: Some(acceptor),
        connector: None,
    }
}

/// A configuration with one reader entry `db`: a primary on 127.0.0.1:5000 and replicas on
/// 5001 and 5002, trust auth, and `extra` lines in `[pgtier]`.
pub fn reader_config(extra: &str) -> String {
    format!(
        "[pgtier]\nlisten_port = 6432\nauth_type = \"trust\"\n{extra}\n\
         [databases.db]\nprimary = \"127.0.0.1:5000\"\n\
         replicas = [\"127.0.0.1:5001\", \"127.0.0.1:5002\"]\nread_your_writes_timeout = 0.05\n"
    )
}

/// Read routing for harness engines: reads cycle through the first replica, the second, a
/// "not yet" (the read waits) and the primary. It counts the tickets it gave out that were
/// not dropped yet (`in_flight`), so a test can check each was given back once.
#[derive(Debug, Default)]
pub struct CyclingReads {
    next: std::sync::atomic::AtomicUsize,
    pub in_flight: Arc<std::sync::atomic::AtomicIsize>,
}

#[derive(Debug)]
struct CycleTicket {
    addr: SocketAddr,
    in_flight: Arc<std::sync::atomic::AtomicIsize>,
}

impl crate::services::ReadTicket for CycleTicket {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for CycleTicket {
    fn drop(&mut self) {
        self.in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl crate::services::Routing for CyclingReads {
    fn is_routed(&self, _database: &str) -> bool {
        false
    }
    fn admit(
        &self,
        database: &str,
        class: pgtier_policy::tiers::Tier,
        request_id: u64,
    ) -> crate::services::Admission {
        NoRouting.admit(database, class, request_id)
    }
    fn repin(
        &self,
        lease: Box<dyn crate::services::ReplicaLease>,
        request_id: u64,
    ) -> crate::services::Admission {
        NoRouting.repin(lease, request_id)
    }
    fn poll_reply(&self) -> Option<crate::services::AdmissionReply> {
        None
    }
    fn report_failure(
        &self,
        _database: &str,
        _replica: SocketAddr,
        _cause: crate::services::FailureCause,
    ) {
    }
    fn is_down(&self, _database: &str, _replica: SocketAddr) -> bool {
        false
    }
    fn route_read(
        &self,
        _request: &crate::services::ReadRequest<'_>,
    ) -> crate::services::ReadRoute {
        use crate::services::ReadRoute;
        let step = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 4;
        let port = match step {
            0 => 5001,
            1 => 5002,
            2 => return ReadRoute::NotYet,
            _ => return ReadRoute::Primary,
        };
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ReadRoute::Replica(Box::new(CycleTicket {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            in_flight: Arc::clone(&self.in_flight),
        }))
    }
}

/// Whether `sql` is an `auth_query` the fake backends answer from their `shadow` rows:
/// PgBouncer's default (over pg_authid) or the classic one over pg_shadow.
pub fn is_lookup(sql: &str) -> bool {
    sql.contains("pg_shadow") || sql.contains("pg_authid")
}
