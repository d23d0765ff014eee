//! The client side of a session: accepting, startup, password checks, the welcome, and moving
//! client messages to the server the client is linked to.

use std::sync::atomic::Ordering;

use bytes::{Buf, BytesMut};
use pgtier_core::config::{ADMIN_DATABASE, AuthType, PoolMode};
use pgtier_wire::auth::{KEY_LEN, ScramSecret, ScramServer};
use tracing::debug;

use crate::auth::{self, UserScram};
use crate::client::{Client, ClientAuth, ClientState};
use crate::io::errno::{ErrnoAction, classify};
use crate::io::ring::Ring;
use crate::io::slab::{ClientId, ServerId};
use crate::params::tracked_index;
use crate::proto::{self, StartupPacket, sqlstate};
use crate::routing::Placement;
use crate::shard::{CLIENT_RECV_CHUNK_BYTES, MAX_STARTUP_BYTES, Shard};
use crate::tracker::Tracker;
use pgtier_wire::ProtocolError;
use pgtier_wire::session_state::{Effects, StateScanner};

/// Longest password/SASL message accepted during authentication.
const MAX_AUTH_MESSAGE_BYTES: usize = 8192;

impl<R: Ring> Shard<R> {
    pub(crate) fn on_accept(&mut self, result: i32, more: bool) {
        if !more {
            // A multishot accept that ends must be re-armed, or the shard stops accepting.
            self.accept_armed = false;
            self.arm_accept();
        }
        if result < 0 {
            self.log_errno("accept", result);
            return;
        }
        self.admit_client(result);
    }

    /// Takes a freshly accepted socket in, or refuses it with 53300.
    pub fn admit_client(&mut self, fd: i32) {
        self.stats.clients_accepted += 1;
        set_nodelay(fd);
        let max = self.config.pgtier.max_client_conn;
        let over = self.shared.clients.fetch_add(1, Ordering::AcqRel) >= max;
        let Some(slot) = self
            .clients
            .insert(Client::new(fd, self.now, CLIENT_RECV_CHUNK_BYTES))
        else {
            self.shared.clients.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: the fd is ours alone; the slab is full so nothing will track it.
            unsafe { libc::close(fd) };
            return;
        };
        let id = ClientId(slot);
        if over {
            let error = proto::fatal(
                sqlstate::TOO_MANY_CONNECTIONS,
                "no more connections allowed (max_client_conn)",
            );
            self.close_client(id, Some(error));
            return;
        }
        if self.shutdown.is_some() {
            let error = proto::fatal(sqlstate::CANNOT_CONNECT_NOW, "pgtier is shutting down");
            self.close_client(id, Some(error));
            return;
        }
        self.arm_client_recv(id);
    }

    pub(crate) fn on_client_recv(&mut self, id: ClientId, result: i32) {
        let Some(client) = self.clients.get_mut(id.0) else {
            debug!(?id, "stale client recv completion");
            return;
        };
        if result <= 0 {
            client.recv.on_failed();
            if client.is_closing() {
                self.try_finish_client(id);
                return;
            }
            if result < 0 && classify(result) == ErrnoAction::Retry {
                self.arm_client_recv(id);
                return;
            }
            self.log_errno("client recv", result);
            self.close_client(id, None);
            return;
        }
        client.recv.on_received(result as usize);
        client.last_active = self.now;
        self.counters.record_bytes(result as u64, 0);
        match client.state {
            ClientState::Closing { .. } => {
                client.recv.data.clear();
                self.try_finish_client(id);
                return;
            }
            ClientState::Startup => self.on_startup_bytes(id),
            ClientState::Authenticating(_) => self.on_auth_bytes(id),
            ClientState::Idle { .. } => self.on_idle_client_bytes(id),
            ClientState::WaitingForServer { .. } | ClientState::WaitingForReplica { .. } => {}
            ClientState::Active { server } => self.forward_to_server(id, server),
        }
        self.arm_client_recv(id);
    }

    fn protocol_error(&mut self, id: ClientId, message: &str) {
        debug!(?id, message, "client protocol error");
        self.close_client(
            id,
            Some(proto::fatal(sqlstate::PROTOCOL_VIOLATION, message)),
        );
    }

    fn on_startup_bytes(&mut self, id: ClientId) {
        loop {
            let Some(client) = self.clients.get_mut(id.0) else {
                return;
            };
            let parsed = proto::parse_startup(&client.recv.data, MAX_STARTUP_BYTES);
            let (packet, len) = match parsed {
                Ok(Some(parsed)) => parsed,
                Ok(None) => return,
                Err(error) => {
                    self.bad_startup_packet(id, error);
                    return;
                }
            };
            client.recv.data.advance(len);
            match packet {
                StartupPacket::Ssl | StartupPacket::GssEnc => {
                    self.send_to_client(id, bytes::Bytes::from_static(b"N"));
                }
                StartupPacket::Cancel { pid, secret } => {
                    self.close_client(id, None);
                    self.route_cancel(pid, secret);
                    return;
                }
                StartupPacket::Startup { params } => {
                    self.on_startup(id, params);
                    return;
                }
            }
        }
    }

    /// A startup packet PostgreSQL itself would refuse, refused the same way: a length word
    /// out of range (a client that sends Terminate or TLS bytes first, a port scanner) is
    /// closed without a reply, as the postmaster does ("invalid length of startup packet");
    /// an unsupported protocol version gets 0A000 and a malformed packet 08P01.
    fn bad_startup_packet(&mut self, id: ClientId, error: ProtocolError) {
        let reply = match error {
            ProtocolError::LengthTooShort { .. } | ProtocolError::LengthTooLong { .. } => {
                debug!(?id, "invalid length of startup packet");
                None
            }
            ProtocolError::UnsupportedProtocol { major, minor } => Some(proto::fatal(
                sqlstate::FEATURE_NOT_SUPPORTED,
                &format!(
                    "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0"
                ),
            )),
            other => Some(proto::fatal(
                sqlstate::PROTOCOL_VIOLATION,
                &format!("invalid startup packet: {other}"),
            )),
        };
        self.close_client(id, reply);
    }

    fn on_startup(&mut self, id: ClientId, params: Vec<(String, String)>) {
        let mut user = None;
        let mut database = None;
        let mut forwarded = Vec::new();
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        for (name, value) in params {
            match name.as_str() {
                "user" => user = Some(value),
                "database" => database = Some(value),
                "replication" => {
                    let error = proto::fatal(
                        sqlstate::FEATURE_NOT_SUPPORTED,
                        "replication connections are not supported by pgtier",
                    );
                    self.close_client(id, Some(error));
                    return;
                }
                _ if self.config.pgtier.ignores_startup_parameter(&name) => {}
                _ => {
                    if !client.tracked.set(&name, &value) {
                        forwarded.push((name, value));
                    }
                }
            }
        }
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            let error = proto::fatal(
                sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                "no PostgreSQL user name specified in startup packet",
            );
            self.close_client(id, Some(error));
            return;
        };
        let database = database
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| user.clone());
        forwarded.sort();
        client.user = user;
        client.database = database;
        let auth_type = self.config.pgtier.auth_type;
        client.admin = client.database == ADMIN_DATABASE;
        if client.admin && !self.config.pgtier.is_stats_user(&client.user) {
            let message = format!("user \"{}\" may not use the admin console", client.user);
            let error = proto::fatal(sqlstate::INVALID_AUTHORIZATION_SPECIFICATION, &message);
            self.close_client(id, Some(error));
            return;
        }
        if !client.admin && self.config.database(&client.database).is_none() {
            let message = format!("database \"{}\" does not exist", client.database);
            self.close_client(
                id,
                Some(proto::fatal(sqlstate::INVALID_CATALOG_NAME, &message)),
            );
            return;
        }
        client.startup_params = forwarded;
        let mut out = BytesMut::with_capacity(64);
        let next = match auth_type {
            AuthType::Trust => None,
            AuthType::Md5 => {
                let stored = self.users.get(&client.user);
                let server = auth::md5_server_for(&client.user, stored.as_deref());
                server.encode_request(&mut out);
                Some(ClientAuth::Md5(server))
            }
            AuthType::ScramSha256 => {
                ScramServer::encode_request(&mut out);
                Some(ClientAuth::ScramStart)
            }
        };
        match next {
            None => self.on_client_authenticated(id),
            Some(auth) => {
                client.state = ClientState::Authenticating(auth);
                self.send_to_client(id, out.freeze());
            }
        }
    }

    fn on_auth_bytes(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let data = &client.recv.data;
        if data.len() < 5 {
            return;
        }
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        if data[0] != b'p' || !(4..=MAX_AUTH_MESSAGE_BYTES).contains(&len) {
            self.protocol_error(id, "expected a password message");
            return;
        }
        if data.len() < len + 1 {
            return;
        }
        let message = client.recv.data.split_to(len + 1);
        let body = &message[5..];
        let ClientState::Authenticating(auth) =
            std::mem::replace(&mut client.state, ClientState::Startup)
        else {
            return;
        };
        let stored = self.users.get(&client.user);
        let user = client.user.clone();
        match auth {
            ClientAuth::Md5(server) => {
                let ok = server.handle_password(body).is_ok();
                self.finish_password_check(id, ok);
            }
            ClientAuth::ScramStart => self.on_sasl_initial(id, body, stored),
            ClientAuth::ScramFinal(mut server) => {
                let mut out = BytesMut::with_capacity(128);
                match server.handle_response(body, &mut out) {
                    Ok(verified) => {
                        self.remember_client_key(&user, verified.client_key);
                        self.send_to_client(id, out.freeze());
                        self.finish_password_check(id, true);
                    }
                    Err(_) => self.finish_password_check(id, false),
                }
            }
        }
    }

    fn on_sasl_initial(&mut self, id: ClientId, body: &[u8], stored: Option<String>) {
        let user = self
            .clients
            .get(id.0)
            .map(|c| c.user.clone())
            .unwrap_or_default();
        let secret = self.scram_secret(&user, stored.as_deref());
        let mut server = ScramServer::new(secret, auth::random_bytes());
        let mut out = BytesMut::with_capacity(128);
        match server.handle_initial_response(body, &mut out) {
            Ok(()) => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    client.state =
                        ClientState::Authenticating(ClientAuth::ScramFinal(Box::new(server)));
                }
                self.send_to_client(id, out.freeze());
            }
            Err(_) => self.protocol_error(id, "malformed SCRAM client-first message"),
        }
    }

    fn finish_password_check(&mut self, id: ClientId, ok: bool) {
        if ok {
            self.on_client_authenticated(id);
            return;
        }
        let user = self
            .clients
            .get(id.0)
            .map(|c| c.user.clone())
            .unwrap_or_default();
        let message = format!("password authentication failed for user \"{user}\"");
        self.close_client(id, Some(proto::fatal(sqlstate::INVALID_PASSWORD, &message)));
    }

    /// Auth passed: find the pool and either welcome the client from the pool's cached
    /// parameters or queue it for a server whose login provides them.
    fn on_client_authenticated(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.admin {
            self.welcome_admin(id);
            return;
        }
        match self.place_session(id) {
            Placement::Unrouted => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    if let Some(db) = self.config.database(&client.database) {
                        client.class = self.config.class(db, &client.user);
                    }
                }
                self.join_pool(id);
            }
            Placement::Placed => self.join_pool(id),
            Placement::Waiting | Placement::Closed => {}
        }
    }

    /// A logged-in client (placed on its replica, if routed) joins its pool and is welcomed
    /// from the pool's cached parameters or queued for a server whose login provides them.
    pub(crate) fn join_pool(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let params = std::mem::take(&mut client.startup_params);
        let pool_id = match self.pool_for_client(id, params) {
            Ok(pool_id) => pool_id,
            Err(error) => {
                self.close_client(id, Some(error));
                return;
            }
        };
        let pool = self.pools.get(pool_id);
        if let Some(failure) = pool.failure.as_ref().filter(|_| pool.replica.is_none()) {
            if failure.retry_at > self.now && pool.idle.is_empty() && pool.open_here == 0 {
                let error = failure.error.clone();
                self.close_client(id, Some(error));
                return;
            }
        }
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        // The cached welcome serves only a client whose startup spellings the pool has seen
        // a server answer: it must be told the server's own values.
        let cached_welcome = pool.mode == PoolMode::Transaction
            && pool.welcome.is_some()
            && client
                .tracked
                .canonicalize(&pool.welcome_tracked, &pool.spellings);
        client.pool = Some(pool_id);
        if cached_welcome {
            self.welcome_from_pool(id);
        } else {
            self.enqueue_waiter(id);
        }
    }

    /// AuthenticationOk, the pool's ParameterStatus set (with the client's own tracked
    /// values), BackendKeyData and ReadyForQuery.
    fn welcome_from_pool(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let Some(pool_id) = client.pool else { return };
        let pool = self.pools.get(pool_id);
        let Some(welcome) = &pool.welcome else { return };
        client.tracked.fill_from(&pool.welcome_tracked);
        let mut out = BytesMut::with_capacity(512);
        proto::auth_ok(&mut out);
        for (name, value) in welcome {
            let value = tracked_index(name)
                .and_then(|i| client.tracked.get(i))
                .unwrap_or(value);
            proto::parameter_status(&mut out, name, value);
        }
        let key = self.new_cancel_key(id, None);
        proto::backend_key_data(&mut out, key.0, key.1);
        proto::ready_for_query(&mut out, b'I');
        if let Some(client) = self.clients.get_mut(id.0) {
            client.welcomed = true;
            client.state = ClientState::Idle { since: self.now };
        }
        self.send_to_client(id, out.freeze());
    }

    /// Welcome for a client that waited for a server: the server's own ParameterStatus values
    /// (the client's tracked values win), and in session mode the server's real pid.
    pub(crate) fn welcome_from_server(&mut self, id: ClientId, server_id: ServerId, session: bool) {
        let Some(server) = self.servers.get(server_id.0) else {
            return;
        };
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        client.tracked.fill_from(&server.tracked);
        let mut out = BytesMut::with_capacity(512);
        proto::auth_ok(&mut out);
        for (name, value) in &server.params {
            let value = tracked_index(name)
                .and_then(|i| client.tracked.get(i))
                .unwrap_or(value);
            proto::parameter_status(&mut out, name, value);
        }
        let real_pid = if session {
            server.backend_key.map(|(pid, _)| pid)
        } else {
            None
        };
        let key = self.new_cancel_key(id, real_pid);
        proto::backend_key_data(&mut out, key.0, key.1);
        proto::ready_for_query(&mut out, b'I');
        if let Some(client) = self.clients.get_mut(id.0) {
            client.welcomed = true;
        }
        self.send_to_client(id, out.freeze());
    }

    /// An idle (transaction mode, between transactions) client sent bytes: it needs a server.
    fn on_idle_client_bytes(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        match client.recv.data.first() {
            None => {}
            Some(b'X') => self.close_client(id, None),
            Some(_) if client.admin => self.on_admin_bytes(id),
            // Refused before it takes a server: garbage never reaches one.
            Some(&code) if !Tracker::is_client_message(code) => {
                self.protocol_error(id, &format!("invalid frontend message type {code}"));
            }
            Some(_) => self.enqueue_waiter(id),
        }
    }

    /// Moves every complete (or streaming) client message to the server, tracking what the
    /// server owes. A 'X' ends the client; a bad length ends it with 08P01.
    pub(crate) fn forward_to_server(&mut self, id: ClientId, server_id: ServerId) {
        let max_message = self.limits.max_client_message_bytes;
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        // Until its welcome is sent, a client's early bytes wait: the server is still
        // answering the login's own SETs.
        if server.client() != Some(id) || !client.welcomed {
            return;
        }
        // In transaction mode, a client's Query and Parse texts are classified until it
        // creates session state; from then on it keeps its server (`Client::pinned`).
        let watch_state =
            client.pinned.is_empty() && self.pools.get(server.pool).mode == PoolMode::Transaction;
        let data = &client.recv.data;
        let mut pos = 0usize;
        let mut terminate = false;
        let mut malformed = false;
        let mut invalid_type = None;
        let mut effects = Effects::NONE;
        while pos < data.len() {
            if client.skip_bytes > 0 {
                let take = client.skip_bytes.min(data.len() - pos);
                client.skip_bytes -= take;
                if let Some(scanner) = client.state_scan.as_mut() {
                    scanner.feed(&data[pos..pos + take]);
                    if client.skip_bytes == 0 {
                        effects = effects.union(
                            client
                                .state_scan
                                .take()
                                .map_or(Effects::NONE, StateScanner::finish),
                        );
                    }
                }
                pos += take;
                continue;
            }
            if data.len() - pos < 5 {
                break;
            }
            let code = data[pos];
            let len =
                u32::from_be_bytes([data[pos + 1], data[pos + 2], data[pos + 3], data[pos + 4]])
                    as usize;
            if len < 4 || len > max_message {
                malformed = true;
                break;
            }
            if code == b'X' {
                terminate = true;
                break;
            }
            if !Tracker::is_client_message(code) {
                invalid_type = Some(code);
                break;
            }
            if server.tracker.on_client_message(code).is_err() {
                malformed = true;
                break;
            }
            if matches!(code, b'Q' | b'S' | b'F') {
                client.query_started.get_or_insert(self.now);
            }
            pos += 5;
            client.skip_bytes = len - 4;
            if watch_state {
                let scanner = match code {
                    b'Q' => Some(StateScanner::query()),
                    b'P' => Some(StateScanner::parse()),
                    _ => None,
                };
                let conforming = client.tracked.standard_conforming_strings();
                client.state_scan =
                    scanner.map(|scanner| scanner.standard_conforming_strings(conforming));
            }
        }
        let pin = effects.pins();
        if pos > 0 {
            let chunk = client.recv.data.split_to(pos).freeze();
            server.send.push(chunk);
        }
        if pin {
            self.pin_client(id, server_id, effects);
        }
        self.flush_server(server_id);
        if let Some(code) = invalid_type {
            self.protocol_error(id, &format!("invalid frontend message type {code}"));
        } else if malformed {
            self.protocol_error(id, "invalid message length or sequence");
        } else if terminate {
            if let Some(client) = self.clients.get_mut(id.0) {
                client.recv.data.clear();
            }
            self.close_client(id, None);
        }
    }
}

fn set_nodelay(fd: i32) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads an int from a live local; failure only costs latency.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
}

impl<R: Ring> Shard<R> {
    /// The SCRAM secret to check `user` against, derived once per user and shard (PBKDF2 is
    /// deliberately slow; a login storm must not redo it per login). An unknown user, or one
    /// whose stored password cannot do SCRAM, gets a random secret so the exchange fails at
    /// the proof, as PostgreSQL's does.
    fn scram_secret(&mut self, user: &str, stored: Option<&str>) -> ScramSecret {
        if let Some(cached) = self.scram_secrets.get(user) {
            return cached.secret.clone();
        }
        let (key, secret) = match stored.and_then(auth::scram_secret_for) {
            Some(secret) => (user, secret),
            None => ("", auth::decoy_scram_secret()),
        };
        let cached = self
            .scram_secrets
            .entry(key.to_string())
            .or_insert(UserScram {
                secret,
                client_key: None,
            });
        cached.secret.clone()
    }

    /// Keeps the ClientKey `user` just proved, so a server login for a SCRAM-secret auth-file
    /// entry can reuse it (the proxy never learns the password).
    fn remember_client_key(&mut self, user: &str, client_key: [u8; KEY_LEN]) {
        if let Some(cached) = self.scram_secrets.get_mut(user) {
            cached.client_key = Some(client_key);
        }
    }
}
