//! Opening server connections and logging them in: connect, StartupMessage, the password
//! exchange the server asks for, ParameterStatus/BackendKeyData, and what a failed login
//! means for the clients waiting on the pool.

use std::os::fd::IntoRawFd;

use bytes::{Bytes, BytesMut};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{Authentication, BackendKeyData};
use pgtier_wire::{FrameLimits, framing};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tracing::{debug, info};

use crate::auth;
use crate::io::op_key::OpKind;
use crate::io::recv_buf::RecvBuf;
use crate::io::ring::{Op, Ring};
use crate::io::send_queue::SendQueue;
use crate::io::slab::ServerId;
use crate::params::TrackedParams;
use crate::pool::{LoginFailure, PoolId};
use crate::proto::{self, sqlstate};
use crate::server::{Reset, Server, ServerState};
use crate::shard::Shard;
use crate::tracker::Tracker;

/// Largest message accepted from a server during login.
const MAX_LOGIN_MESSAGE_BYTES: u32 = 1 << 20;

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
            swallowed_error: None,
            skip_bytes: 0,
            recv_paused: false,
            cancels_pending: 0,
            rollback_sent: false,
            reset: Reset::None,
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
            let error = proto::fatal(sqlstate::CONNECTION_FAILURE, &message);
            self.server_unreachable(id, error, connect_failure_cause(result));
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
            auth: None,
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
        info!(database = %self.pools.get(pool_id).key.database, "server login failed");
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
            let limits = FrameLimits {
                max_message_len: MAX_LOGIN_MESSAGE_BYTES,
                ..FrameLimits::default()
            };
            let message = match framing::split_message(&mut server.recv.data, &limits) {
                Ok(Some(frame)) => frame.bytes,
                Ok(None) => return,
                Err(_) => {
                    let error =
                        proto::fatal(sqlstate::PROTOCOL_VIOLATION, "invalid message from server");
                    self.login_failed(id, error);
                    return;
                }
            };
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
                b'K' => {
                    // We ask for protocol 3.0, whose cancel keys are four bytes.
                    if let Ok(key) = BackendKeyData::decode_body(body)
                        && let Ok(secret) = <[u8; 4]>::try_from(key.secret_key)
                    {
                        server.backend_key = Some((key.process_id, u32::from_be_bytes(secret)));
                    }
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

    /// Answers one Authentication request ('R' body) with the pool's configured password.
    fn on_server_auth_request(&mut self, id: ServerId, body: &[u8]) -> Result<(), String> {
        let Some(server) = self.servers.get_mut(id.0) else {
            return Ok(());
        };
        let ServerState::LoggingIn { auth, .. } = &mut server.state else {
            return Err("authentication request out of order".to_string());
        };
        let request = Authentication::decode_body(body).map_err(|error| error.to_string())?;
        let login = match auth {
            Some(login) => login,
            // A trust login needs no password.
            None if matches!(request, Authentication::Ok) => return Ok(()),
            None => {
                let pool = self.pools.get(server.pool);
                let user = pool.key.user.as_str();
                let password = pool.login.password.as_deref().ok_or_else(|| {
                    format!("no password configured for server login of user \"{user}\"")
                })?;
                let client_key = self.scram_secrets.get(user).and_then(|s| s.client_key);
                auth.insert(Box::new(auth::server_login(user, password, client_key)))
            }
        };
        let mut out = BytesMut::with_capacity(128);
        login
            .handle(request, &mut out)
            .map_err(|error| error.to_string())?;
        if !out.is_empty() {
            server.send.push(out.freeze());
            self.flush_server(id);
        }
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

/// Why a connect failed, for the replica router.
fn connect_failure_cause(result: i32) -> crate::control::ServerFailureCause {
    use crate::control::ServerFailureCause;
    match -result {
        libc::ETIMEDOUT => ServerFailureCause::ConnectTimeout,
        libc::ECONNRESET | libc::EPIPE => ServerFailureCause::ConnectionReset,
        _ => ServerFailureCause::ConnectionRefused,
    }
}
