//! Opening server connections and logging them in: connect, StartupMessage, the password
//! exchange the server asks for, ParameterStatus/BackendKeyData, and what a failed login
//! means for the clients waiting on the pool.

use std::os::fd::IntoRawFd;

use bytes::{Bytes, BytesMut};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::{debug, info};

use crate::auth::{self, ScramClient};
use crate::io::op_key::OpKind;
use crate::io::recv_buf::RecvBuf;
use crate::io::ring::{Op, Ring};
use crate::io::send_queue::SendQueue;
use crate::io::slab::ServerId;
use crate::params::TrackedParams;
use crate::pool::{LoginFailure, PoolId};
use crate::proto::{self, sqlstate};
use crate::server::{Server, ServerState};
use crate::shard::Shard;
use crate::tracker::Tracker;

/// Largest message accepted from a server during login.
const MAX_LOGIN_MESSAGE_BYTES: usize = 1 << 20;

impl<R: Ring> Shard<R> {
    /// Opens a TCP connection for `pool_id`; the caller reserved its budget slot.
    pub(crate) fn open_server(&mut self, pool_id: PoolId) -> Result<(), String> {
        let addr = self.pools.get(pool_id).key.addr;
        let socket = Socket::new(
            Domain::for_address(addr),
            Type::STREAM.nonblocking().cloexec(),
            Some(Protocol::TCP),
        )
        .map_err(|error| format!("cannot create a socket for {addr}: {error}"))?;
        let _ = socket.set_tcp_nodelay(true);
        let fd = socket.into_raw_fd();
        let server = Server {
            fd,
            state: ServerState::Connecting { since: self.now },
            pool: pool_id,
            recv: RecvBuf::new(self.limits.server_recv_chunk_bytes),
            send: SendQueue::new(),
            addr: Box::new(SockAddr::from(addr)),
            connect_in_flight: false,
            tracker: Tracker::default(),
            params: Vec::new(),
            tracked: TrackedParams::default(),
            backend_key: None,
            swallow: 0,
            skip_bytes: 0,
            recv_paused: false,
            cancels_pending: 0,
            rollback_sent: false,
            created_at: self.now,
        };
        let Some(slot) = self.servers.insert(server) else {
            // SAFETY: the fd was never handed to the kernel ring; we own it alone.
            unsafe { libc::close(fd) };
            return Err("too many server connections on this worker".to_string());
        };
        let id = ServerId(slot);
        self.pools.get_mut(pool_id).connecting += 1;
        self.stats.servers_opened += 1;
        let Some(server) = self.servers.get_mut(id.0) else {
            return Ok(());
        };
        let op = Op::Connect {
            fd,
            addr: server.addr.as_ptr().cast(),
            len: server.addr.len(),
        };
        server.connect_in_flight = true;
        if !self.submit(Self::server_key(OpKind::ServerConnect, id), op) {
            if let Some(server) = self.servers.get_mut(id.0) {
                server.connect_in_flight = false;
            }
            self.close_server(id);
        }
        Ok(())
    }

    pub(crate) fn on_server_connect(&mut self, id: ServerId, result: i32) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        assert!(
            server.connect_in_flight,
            "connect completion without a connect in flight"
        );
        server.connect_in_flight = false;
        if server.is_closing() {
            self.try_finish_server(id);
            return;
        }
        if result < 0 {
            let addr = server
                .addr
                .as_socket()
                .map(|a| a.to_string())
                .unwrap_or_default();
            let message = format!(
                "could not connect to server {addr}: {}",
                std::io::Error::from_raw_os_error(-result)
            );
            self.login_failed(id, proto::fatal(sqlstate::CONNECTION_FAILURE, &message));
            return;
        }
        let pool = self.pools.get(server.pool);
        let mut params: Vec<(&str, &str)> = vec![
            ("user", pool.key.user.as_str()),
            ("database", pool.login.dbname.as_str()),
        ];
        params.extend(
            pool.key
                .startup_params
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str())),
        );
        let mut out = BytesMut::with_capacity(128);
        proto::startup_message(&mut out, &params);
        server.send.push(out.freeze());
        server.state = ServerState::LoggingIn {
            since: self.now,
            scram: None,
        };
        self.flush_server(id);
        self.arm_server_recv(id);
    }

    /// A login failed: every client waiting on the pool gets `error` now, and new ones get it
    /// until `server_login_retry` passes.
    pub(crate) fn login_failed(&mut self, id: ServerId, error: Bytes) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool_id = server.pool;
        self.stats.login_failures += 1;
        let retry = self.config.pgtier.server_login_retry.duration();
        self.pools.get_mut(pool_id).failure = Some(LoginFailure {
            error: error.clone(),
            retry_at: self.now + retry,
        });
        info!(pool = ?self.pools.get(pool_id).key.database, "server login failed");
        self.close_server(id);
        if self.pools.get(pool_id).open_here == 0 {
            self.fail_waiters(pool_id, error);
        }
    }

    pub(crate) fn on_login_bytes(&mut self, id: ServerId) {
        loop {
            let Some(server) = self.servers.get_mut(id.0) else {
                return;
            };
            let data = &server.recv.data;
            if data.len() < 5 {
                return;
            }
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if !(4..=MAX_LOGIN_MESSAGE_BYTES).contains(&len) {
                let error =
                    proto::fatal(sqlstate::PROTOCOL_VIOLATION, "invalid message from server");
                self.login_failed(id, error);
                return;
            }
            if data.len() < len + 1 {
                return;
            }
            let message = server.recv.data.split_to(len + 1).freeze();
            let body = &message[5..];
            match message[0] {
                b'R' => {
                    if let Err(reason) = self.on_server_auth_request(id, body) {
                        self.login_failed(id, proto::fatal(sqlstate::INVALID_PASSWORD, &reason));
                        return;
                    }
                }
                b'S' => {
                    if let Some((name, value)) = proto::parse_parameter_status(body) {
                        server.tracked.set(name, value);
                        match server.params.iter_mut().find(|(n, _)| n == name) {
                            Some(entry) => entry.1 = value.to_string(),
                            None => server.params.push((name.to_string(), value.to_string())),
                        }
                    }
                }
                b'K' if body.len() >= 8 => {
                    let pid = u32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                    let secret = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                    server.backend_key = Some((pid, secret));
                }
                b'E' => {
                    self.login_failed(id, message);
                    return;
                }
                b'Z' => {
                    self.on_login_done(id);
                    return;
                }
                _ => {}
            }
        }
    }

    fn on_server_auth_request(&mut self, id: ServerId, body: &[u8]) -> Result<(), String> {
        let Some(server) = self.servers.get_mut(id.0) else {
            return Ok(());
        };
        let pool = self.pools.get(server.pool);
        let user = pool.key.user.clone();
        let password = pool.login.password.clone();
        let need_password = || {
            password.clone().ok_or_else(|| {
                format!("no password configured for server login of user \"{user}\"")
            })
        };
        let kind = body
            .get(..4)
            .map_or(u32::MAX, |k| u32::from_be_bytes([k[0], k[1], k[2], k[3]]));
        let payload = body.get(4..).unwrap_or(&[]);
        let mut out = BytesMut::with_capacity(128);
        match kind {
            0 => return Ok(()),
            3 => proto::password_message(&mut out, need_password()?.as_bytes(), true),
            5 => {
                let salt: [u8; 4] = payload
                    .get(..4)
                    .and_then(|s| s.try_into().ok())
                    .ok_or("bad md5 salt")?;
                let answer = auth::md5_client_answer(&need_password()?, &user, salt);
                proto::password_message(&mut out, answer.as_bytes(), true);
            }
            10 => {
                let offers_scram = payload.split(|b| *b == 0).any(|m| m == b"SCRAM-SHA-256");
                if !offers_scram {
                    return Err("server offers no supported SASL mechanism".to_string());
                }
                let (client, first) = ScramClient::start(&need_password()?);
                proto::sasl_initial_response(&mut out, "SCRAM-SHA-256", first.as_bytes());
                server.state = ServerState::LoggingIn {
                    since: self.now,
                    scram: Some(Box::new(client)),
                };
            }
            11 | 12 => {
                let ServerState::LoggingIn {
                    scram: Some(scram), ..
                } = &mut server.state
                else {
                    return Err("SASL message out of order".to_string());
                };
                let text = std::str::from_utf8(payload).map_err(|_| "bad SASL message")?;
                if kind == 11 {
                    let reply = scram
                        .on_server_first(text)
                        .map_err(|e| format!("SCRAM: {e:?}"))?;
                    proto::password_message(&mut out, reply.as_bytes(), false);
                } else {
                    scram
                        .on_server_final(text)
                        .map_err(|_| "server SCRAM signature is wrong")?;
                    return Ok(());
                }
            }
            other => return Err(format!("unsupported server authentication request {other}")),
        }
        server.send.push(out.freeze());
        self.flush_server(id);
        Ok(())
    }

    fn on_login_done(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        let pool = self.pools.get_mut(server.pool);
        pool.connecting = pool.connecting.saturating_sub(1);
        pool.failure = None;
        if pool.welcome.is_none() {
            pool.welcome = Some(server.params.clone());
            pool.welcome_tracked = server.tracked.clone();
        }
        debug!(pid = ?server.backend_key.map(|k| k.0), "server login done");
        self.return_to_pool(id);
    }
}
