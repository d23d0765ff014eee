//! The engine of one shard: every client and server of the shard, their pools, cancel keys
//! and timers, driven by events and answering with actions.
//!
//! Inputs are the `handle_*` methods below, each given `now`; outputs are drained with
//! [`Engine::poll_action`], and [`Engine::poll_timeout`] says when to call
//! [`Engine::handle_timeout`] next. The engine never touches a socket, a clock or a thread.
//!
//! The engine holds owners, each with private state, and routes events between them:
//! - `clients.rs`, the client table: the client slab, the login caches (secrets,
//!   `auth_query` answers, texts, names), the cancel keys, client TLS;
//! - `servers.rs`, the server table: the server slab, the resolver, server TLS, the
//!   statement registry;
//! - `linker/`, the linker's state: the pools, the servers being put back, reads waiting
//!   for a replica, warm pools, vacated databases;
//! - `admin.rs`: the gates and admin commands in progress, the console, the listings
//!   (`listings.rs`), the shutdown;
//! - `stats.rs`, the stats sink: counters, per-database tally, digests, latency;
//! - `env.rs`: the configuration and what is derived from it.
//!
//! Reports read a borrowed view of the owners (`view.rs`: `list_rows.rs`, `gauges.rs`); timeouts
//! are found by the tables (`timeouts.rs`); a reader session's transaction is routed by a
//! borrow of the three owners it changes (`read_routing.rs`); the tables start, feed and seal TLS
//! sessions (`tls_io.rs`).
//!
//! The flows are the owners' steps, each saying what happened (a fact, not a side effect on
//! another owner), and the `Engine` routes them: inputs go to the owner that handles them,
//! its answer to the next owner or to an action. The steps, by owner:
//! - the client table: a client's login, from its startup packets to its welcome
//!   (`client_login.rs`);
//! - the server table: a server connection's connect, login, drain, retirement, check and
//!   hand-on (`backend.rs`);
//! - the linker, the one place that touches a client and a server together: a client that
//!   needs a server, the link, the client's bytes to its server, the release and the return
//!   to the pool (`linker/linking.rs`), the server's output to its client
//!   (`linker/to_client.rs`), servers opened for pools (`linker/opening.rs`), a logging-in
//!   client's welcome values and `auth_query` (`linker/joining.rs`), servers that move
//!   between shards (`moving.rs`), vacated databases (`linker/vacate.rs`);
//! - the admin side: console sessions and what an admin command does here (`admin_flows.rs`).
//!
//! The routing is in this file (the inputs, connections, logins, links) and in `upkeep.rs`
//! (timers, mailbox commands, cancel, shutdown, admin commands and console sessions). The
//! decisions themselves are in the state machines the owners call (`crate::client`,
//! `crate::server`), the pool (`pgtier_pool`) and the services.

mod admin;
mod admin_flows;
#[cfg(test)]
mod admin_flows_tests;
mod auth_delay;
#[cfg(test)]
mod auth_delay_tests;
#[cfg(test)]
mod auth_tests;
mod backend;
mod client_login;
mod clients;
#[cfg(test)]
mod digest_tests;
mod env;
mod gauges;
mod linker;
mod list_rows;
mod listings;
#[cfg(test)]
mod login_retry_tests;
mod moving;
#[cfg(test)]
mod moving_tests;
#[cfg(test)]
mod notice_tests;
#[cfg(test)]
mod prepared_tests;
mod primary_moves;
#[cfg(test)]
mod primary_moves_tests;
mod read_retry;
#[cfg(test)]
mod read_retry_tests;
mod read_routing;
#[cfg(test)]
mod read_routing_tests;
mod servers;
#[cfg(test)]
mod statement_mode_tests;
mod stats;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod timeout_tests;
mod timeouts;
mod tls_io;
#[cfg(test)]
mod tls_tests;
mod upkeep;
#[cfg(test)]
mod vacate_tests;
mod view;
#[cfg(test)]
mod waiting_tests;
#[cfg(test)]
mod warmup_tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use bytes::{Bytes, BytesMut};
use pgtier_core::config::Config;
use pgtier_pool::PoolSlice;
use tracing::{debug, info, warn};

use crate::action::{Action, CloseHow, Conn, Outbox};
use crate::addr::ClientAddr;
use crate::client::auth_method::Method;
use crate::client::forward::{ForwardEnd, Forwarded};
use crate::client::lookup::Found;
use crate::client::startup::LoginRequest;
use crate::client::{ClientConn, ClientState};
use crate::command::Command;
use crate::gates::ShutdownMode;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::random::Random;
use crate::server::ReleaseStep;
use crate::server::ServerState;
use crate::server::moved::{DetachedSocket, MovedServer};
use crate::services::{Admission, AdmissionReply, Refusal, ReplicaLease};
use crate::services::{Console, FailureCause, Routing};
use crate::settings::{CLOSE_LINGER, HOUSEKEEPING_PERIOD, Limits};
use crate::shared::Shared;
use crate::userlist::UserList;
use client_login::{AuthProgress, Authenticated, Exchange, Startup};
use linker::linking::{IdleBytes, LeftBehind, Linked, Prepared, Returned};
use linker::to_client::Relayed;
use moving::Arrived;
use pgtier_pool::Checkin;
use pgtier_pool::{Lease, PoolError, PoolId, PoolKey, ServerTarget};
use pgtier_wire::session_state::Effects;

/// Resolves a configured host name to an address (the driver's, as it may block).
pub trait Resolver {
    fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String>;
}

/// A resolver that accepts IP addresses only (tests, and hosts already resolved).
#[derive(Debug, Default, Clone, Copy)]
pub struct IpOnly;

impl Resolver for IpOnly {
    fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        host.parse()
            .map(|ip| SocketAddr::new(ip, port))
            .map_err(|_| format!("cannot resolve server host {host}"))
    }
}

/// What an engine is built from.
pub struct EngineParts {
    /// This shard's index; cancel secrets carry it.
    pub shard: usize,
    pub config: Arc<Config>,
    pub users: Arc<UserList>,
    pub shared: Arc<Shared>,
    pub routing: Box<dyn Routing>,
    pub console: Box<dyn Console>,
    pub resolver: Box<dyn Resolver>,
    pub random: Box<dyn Random>,
    /// The time of creation, twice: monotonic for every deadline, wall clock for the
    /// admin console's timestamps (derived from the monotonic time ever after).
    pub now: Instant,
    pub wall_now: SystemTime,
    /// The TLS configurations, as the driver loaded them from the files the settings name.
    pub tls: crate::tls::TlsSides,
}

/// One shard's session engine: an event router over its owners.
pub struct Engine {
    env: env::Env,
    clients: clients::ClientTable,
    servers: servers::ServerTable,
    linker: linker::Linker,
    admin: admin::Admin,
    stats: stats::StatsSink,
    routing: Box<dyn Routing>,
    random: Box<dyn Random>,
    outbox: Outbox,
    /// Failed logins whose error is held (`auth_failure_delay`).
    auth_delay: auth_delay::AuthDelay,
    next_housekeeping: Instant,
    /// The time of the event being handled.
    now: Instant,
}

/// Server slots per shard: every configured pool full several times over (pools are per
/// user too), or one per client, whichever is more.
fn max_servers(config: &Config) -> usize {
    // A [users] pool_size may be larger than any entry's.
    let user_pool_size = config
        .users
        .values()
        .filter_map(|user| user.pool_size)
        .max()
        .unwrap_or(0);
    let per_db: usize = config
        .databases
        .values()
        .map(|db| {
            db.pool_size
                .max(config.pgtier.default_pool_size)
                .max(user_pool_size) as usize
        })
        .sum();
    (per_db * 4)
        .max(config.pgtier.max_client_conn as usize)
        .max(256)
        + 64
}

impl Engine {
    pub fn new(parts: EngineParts) -> Engine {
        let config = parts.config;
        let limits = Limits::from_config(&config);
        let warm = linker::warmup::warm_pools(&config);
        let auth_delay = auth_delay::AuthDelay::new(
            config.pgtier.auth_failure_delay.enabled(),
            config.pgtier.auth_failure_delay_max_addresses as usize,
            auth_delay::longest_wait(&config),
        );
        let crate::tls::TlsSides {
            acceptor,
            connector,
        } = parts.tls;
        Engine {
            clients: clients::ClientTable::new(
                config.pgtier.max_client_conn as usize + 64,
                parts.shard,
                acceptor,
            ),
            servers: servers::ServerTable::new(
                parts.shard,
                max_servers(&config),
                parts.resolver,
                connector,
            ),
            linker: linker::Linker::new(
                {
                    let mut slice =
                        PoolSlice::new(limits.max_pools_per_worker, parts.shared.shards());
                    slice.set_idle_pool_timeout(config.pgtier.pool_idle_timeout.enabled());
                    slice.set_worker(parts.shard);
                    slice
                },
                warm,
            ),
            admin: admin::Admin::new(parts.console),
            stats: stats::StatsSink::new(&config.pgtier, &parts.shared, parts.now),
            env: env::Env::new(
                parts.shard,
                config,
                parts.users,
                parts.shared,
                (parts.now, parts.wall_now),
            ),
            routing: parts.routing,
            random: parts.random,
            outbox: Outbox::default(),
            auth_delay,
            next_housekeeping: parts.now + HOUSEKEEPING_PERIOD,
            now: parts.now,
        }
    }

    // ---- outputs ----

    /// The next thing the driver must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        loop {
            let (action, wire) = self.outbox.pop()?;
            // On a TLS connection protocol bytes leave as TLS records (`tls_io.rs`).
            match tls_io::seal(
                &mut self.clients,
                &mut self.servers,
                &mut self.outbox,
                action,
                wire,
            ) {
                Ok(Some(action)) => return Some(action),
                Ok(None) => {}
                Err(Conn::Client(id)) => self.close_client_after_flush(id),
                Err(Conn::Server(id)) => self.server_tls_failed(id, "TLS send refused"),
            }
        }
    }

    /// When `handle_timeout` must run next.
    pub fn poll_timeout(&self) -> Instant {
        let next = match self.linker.read_recheck_at() {
            Some(at) => at.min(self.next_housekeeping),
            None => self.next_housekeeping,
        };
        let next = match self.linker.pools().next_borrow_deadline() {
            Some(at) => at.min(next),
            None => next,
        };
        match self.auth_delay.next_answer() {
            Some(at) => at.min(next),
            None => next,
        }
    }

    /// Shutdown was asked for and nothing is left: here, and during a graceful shutdown on
    /// every shard (they end together, see `count_idle`).
    pub fn is_finished(&self) -> bool {
        self.admin.is_shutting_down()
            && self.clients.is_empty()
            && self.servers.is_empty()
            && (self.admin.shutdown() == Some(ShutdownMode::Immediate)
                || self.env.shared().is_done())
    }

    /// A shutdown began: the TCP listeners close.
    pub fn is_shutting_down(&self) -> bool {
        self.admin.is_shutting_down()
    }

    /// Whether a TCP client the kernel still has queued for this shard would only be refused
    /// ("pooler is shutting down"): under `WAIT_FOR_SERVERS` and an immediate shutdown, not
    /// under `WAIT_FOR_CLIENTS`, which serves it.
    pub fn refuses_queued_tcp_clients(&self) -> bool {
        self.admin
            .shutdown()
            .is_some_and(|mode| mode.refuses_login(false))
    }

    /// Whether the shard accepts on the Unix socket: during a graceful shutdown too, until
    /// the shard is done, so the admin console stays reachable (PgBouncer's behaviour; a
    /// client of a pool is refused at login); not once an immediate one began.
    pub fn accepts_on_unix_socket(&self) -> bool {
        match self.admin.shutdown() {
            None => true,
            Some(mode) => mode.keeps_unix_socket() && !self.is_finished(),
        }
    }

    pub fn client_count(&self) -> usize {
        self.clients.len()
    }

    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    // ---- inputs: clients ----

    /// A client connected (`peer` is its address, for listings). `None`: refused at once,
    /// the driver closes the socket itself (this shard has no room for another).
    pub fn handle_accept(&mut self, now: Instant, peer: Option<ClientAddr>) -> Option<ClientId> {
        self.now = now;
        self.stats.client_accepted();
        // Counted now, refused at its StartupMessage when past max_client_conn
        // (`client_login.rs`), as PgBouncer does: after the SSLRequest is answered, so the
        // client reads the reason (libpq shows an error sent instead of the SSLRequest's
        // answer only as "error response during SSL exchange").
        self.env.shared().clients.fetch_add(1, Ordering::AcqRel);
        let on_unix_socket = matches!(peer, Some(ClientAddr::Unix { .. }));
        let mut client = ClientConn::new(peer, now);
        client
            .info_mut()
            .set_socket_id(self.env.shared().next_socket_id());
        let Some(slot) = self.clients.insert(client) else {
            self.env.shared().clients.fetch_sub(1, Ordering::AcqRel);
            return None;
        };
        let id = ClientId(slot);
        if self.env.shared().is_done() {
            // The process is done: its listeners are closing.
            self.close_client(id, Some(messages::pooler_shutting_down()));
        } else if self.admin.shutdown() > Some(ShutdownMode::WaitForClients) && !on_unix_socket {
            // Under WAIT_FOR_CLIENTS a client that was in the listener's queue when it closed
            // is served like the others (a rolling restart loses no connection). One on the
            // Unix socket, which stays open for the console, is told at login.
            self.close_client(id, Some(messages::pooler_shutting_down()));
        }
        Some(id)
    }

    /// Bytes arrived from a client.
    pub fn handle_client_data(&mut self, now: Instant, id: ClientId, data: BytesMut) {
        self.now = now;
        let Some(client) = self.clients.get_mut(id.0) else {
            self.stats.bytes(None, data.len() as u64, 0);
            return;
        };
        let database = client.session().and_then(|session| session.stats());
        self.stats.bytes(database, data.len() as u64, 0);
        if client.is_closing() {
            return;
        }
        client.info_mut().active(now);
        let direct_tls = client.tls().is_none()
            && matches!(client.state(), ClientState::Startup)
            && client.input().is_empty()
            && data.first() == Some(&tls_io::TLS_HANDSHAKE_RECORD);
        if direct_tls {
            match self.clients.begin_direct_tls(id) {
                tls_io::TlsStart::Started => {}
                tls_io::TlsStart::NotConfigured | tls_io::TlsStart::Refused => {
                    self.close_client(id, None);
                    return;
                }
                tls_io::TlsStart::Gone => return,
            }
        }
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.tls().is_some() {
            // Ciphertext: its plaintext joins the input (`tls_io.rs`).
            let more = match self.clients.tls_received(id, &data, &mut self.outbox) {
                tls_io::ClientTlsRead::Plaintext(more) => more,
                tls_io::ClientTlsRead::Failed => {
                    self.close_client_after_flush(id);
                    false
                }
                tls_io::ClientTlsRead::Closed => {
                    self.close_client(id, None);
                    false
                }
                tls_io::ClientTlsRead::Gone => false,
            };
            if !more {
                self.release_consumed_client_input(id);
                return;
            }
        } else {
            client.input_mut().received(data);
        }
        self.process_client(id);
        self.release_consumed_client_input(id);
    }

    /// An input consumed to the end is dropped: even empty, it would keep its allocation (and
    /// the chunks split off it, until they are sent, shared), and an idle client should hold
    /// no input memory.
    fn release_consumed_client_input(&mut self, id: ClientId) {
        if let Some(client) = self.clients.get_mut(id.0) {
            client.input_mut().release_if_consumed();
        }
    }

    /// The client's connection ended (it closed, or the socket failed).
    pub fn handle_client_gone(&mut self, now: Instant, id: ClientId) {
        self.now = now;
        self.close_client(id, None);
    }

    /// `bytes` queued for the client were sent.
    pub fn handle_client_sent(&mut self, now: Instant, id: ClientId, bytes: usize) {
        self.now = now;
        let resume = self.env.limits().client_buffer_limit_bytes / 2;
        let Some(client) = self.clients.get_mut(id.0) else {
            self.stats.bytes(None, 0, bytes as u64);
            return;
        };
        let database = client.session().and_then(|session| session.stats());
        self.stats.bytes(database, 0, bytes as u64);
        let queued = client.backlog_mut().sent(bytes);
        if let Some(server) = client.server()
            && queued <= resume
        {
            self.resume_server(server);
        }
    }

    /// The driver learned the local address of a connection's socket (for listings).
    /// The system user a Unix-socket client's peer process runs as (for `peer`
    /// authentication), read by the driver at accept.
    pub fn handle_peer_user(&mut self, id: ClientId, user: Option<String>) {
        if let Some(client) = self.clients.get_mut(id.0) {
            client.info_mut().set_peer_user(user);
        }
    }

    pub fn handle_local_addr(&mut self, conn: Conn, addr: Option<SocketAddr>) {
        match conn {
            Conn::Client(id) => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    client.info_mut().set_local_addr(addr);
                }
            }
            Conn::Server(id) => {
                if let Some(server) = self.servers.get_mut(id.0) {
                    server.info_mut().set_local_addr(addr);
                }
            }
        }
    }

    // ---- inputs: servers ----

    /// The connect asked for by `Action::Connect` finished; `Err` carries the errno.
    pub fn handle_server_connected(&mut self, now: Instant, id: ServerId, result: Result<(), i32>) {
        self.now = now;
        self.on_server_connected(id, result);
    }

    /// Bytes arrived from a server.
    pub fn handle_server_data(&mut self, now: Instant, id: ServerId, data: BytesMut) {
        self.now = now;
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.is_closing() {
            return;
        }
        if server.io().tls().is_some() {
            match self.servers.tls_received(id, &data, &mut self.outbox) {
                Ok(true) => {}
                Ok(false) => return,
                Err(why) => {
                    self.server_tls_failed(id, &why);
                    return;
                }
            }
        } else {
            server.io_mut().input_mut().received(data);
        }
        self.process_server(id);
        if let Some(server) = self.servers.get_mut(id.0) {
            // As for clients: release the driver's receive buffer.
            server.io_mut().input_mut().release_if_consumed();
        }
    }

    /// The driver detached the socket of a server that moves to another shard
    /// (`Action::Detach`) and took it out of its table. Returns the socket when the server
    /// does not move after all (it was closed meanwhile): the driver closes it, and the
    /// server's slot is free, as after `handle_closed`.
    pub fn handle_detached(
        &mut self,
        now: Instant,
        id: ServerId,
        socket: crate::server::moved::DetachedSocket,
    ) -> Option<crate::server::moved::DetachedSocket> {
        self.now = now;
        match self.linker.pack(&mut self.servers, id, now) {
            moving::Packed::NotMoving => {
                // Closed while the driver detached it: its accounting is settled (or is
                // now); the connection is gone from the driver's table, so nothing else
                // frees it.
                self.close_server(id);
                self.servers.remove(id.0);
                Some(socket)
            }
            moving::Packed::Gone => Some(socket),
            moving::Packed::Parcel { to, parcel } => {
                self.outbox.push(Action::Post {
                    shard: to,
                    command: Command::ServerMoved {
                        server: parcel,
                        socket,
                    },
                });
                // A PAUSE or WAIT_CLOSE may have waited for this one.
                self.progress_admin_ops();
                None
            }
        }
    }

    /// The server's connection ended or failed (`errno` when the socket reported one).
    pub fn handle_server_gone(&mut self, now: Instant, id: ServerId, errno: Option<i32>) {
        self.now = now;
        self.on_server_gone(id, errno);
    }

    /// A cancel request asked for with `Action::SendCancel` finished (or failed).
    pub fn handle_cancel_done(&mut self, now: Instant, server: ServerId) {
        self.now = now;
        self.on_cancel_done(server);
    }

    // ---- inputs: both ----

    /// The driver finished tearing a connection down: its slot is freed.
    pub fn handle_closed(&mut self, now: Instant, conn: Conn) {
        self.now = now;
        match conn {
            Conn::Client(id) => {
                if self.clients.remove(id.0).is_some() {
                    self.env.shared().clients.fetch_sub(1, Ordering::AcqRel);
                }
            }
            Conn::Server(id) => {
                self.servers.remove(id.0);
                // A PAUSE or WAIT_CLOSE may have waited for this one.
                self.progress_admin_ops();
            }
        }
    }

    /// Housekeeping: timeouts, warmup, expiring waiters and listings, counter folds.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = now;
        if self.linker.read_recheck_at().is_some_and(|at| now >= at) {
            self.recheck_read_waits();
        }
        if self
            .linker
            .pools()
            .next_borrow_deadline()
            .is_some_and(|at| now >= at)
        {
            self.expire_borrows();
        }
        if self.auth_delay.next_answer().is_some_and(|at| now >= at) {
            self.answer_held_failures();
        }
        if now < self.next_housekeeping {
            return;
        }
        self.housekeeping();
        self.next_housekeeping = now + HOUSEKEEPING_PERIOD;
    }

    /// A message from another shard (or from the process: reload, shutdown).
    pub fn handle_command(&mut self, now: Instant, command: Command) {
        self.now = now;
        self.on_command(command);
    }

    /// The control shard may have answered admissions (its wake arrived).
    pub fn handle_routing_replies(&mut self, now: Instant) {
        self.now = now;
        while let Some(reply) = self.routing.poll_reply() {
            self.on_admission_reply(reply);
        }
    }

    /// Folds every pending count into the shared totals (at exit, and before the console
    /// answers).
    pub fn fold_counters(&mut self) {
        let interval = (self.env.shard() == 0).then(|| {
            let period = self.env.config().pgtier.stats_period.duration();
            (period, self.now, self.wall_time())
        });
        self.stats.fold(self.env.shared(), interval);
    }

    // ---- shared helpers of the flows ----

    fn send(&mut self, conn: Conn, bytes: Bytes) {
        if let Conn::Client(id) = conn
            && let Some(client) = self.clients.get_mut(id.0)
        {
            client.backlog_mut().queued_for_send(bytes.len());
        }
        self.outbox.send(conn, bytes);
    }

    fn wall_time(&self) -> SystemTime {
        self.env.wall_time(self.now)
    }

    /// The shard as the reports read it.
    fn view(&self) -> view::ShardView<'_> {
        view::ShardView {
            env: &self.env,
            clients: &self.clients,
            servers: &self.servers,
            linker: &self.linker,
            now: self.now,
        }
    }

    /// This shard's client, server and pool rows (the console's listings).
    pub(crate) fn list_sessions(&self) -> crate::listing::ShardListing {
        self.view().list_sessions()
    }

    /// This shard's pool gauges, one per (database, server user).
    pub(crate) fn pool_gauges(&self) -> Vec<crate::pool_gauges::PoolGauge> {
        self.view().pool_gauges()
    }

    /// Publishes this shard's gauges for the metrics endpoint.
    fn publish_pool_gauges(&self) {
        let gauges = self.pool_gauges();
        self.env
            .shared()
            .pool_gauges
            .publish(self.env.shard(), gauges);
    }

    /// A timeout setting, `None` when disabled.
    fn enabled(seconds: pgtier_core::config::Seconds) -> Option<Duration> {
        seconds.enabled()
    }

    /// Begins a client's teardown; `error` (an ErrorResponse) is sent before the socket
    /// closes. Everything it held is given back now: its wait, its server, its pool
    /// registration, its cancel key and its replica lease.
    fn close_client(&mut self, id: ClientId, error: Option<Bytes>) {
        if let Some(error) = &error {
            // PgBouncer's line for a client it closes with an error, with its age (operators
            // and its test suite look for it).
            let age = self.clients.get(id.0).map_or(0, |client| {
                self.now
                    .saturating_duration_since(client.info().connected_at())
                    .as_secs()
            });
            info!(
                client = id.index(),
                "closing because: {} (age={age}s)",
                messages::error_text(error)
            );
        }
        let linger = error.is_some();
        self.begin_client_close(id, error, linger);
    }

    /// Closes a client after what is already queued for it (a server's own FATAL error):
    /// it sees exactly what the server said, then the close.
    fn close_client_after_flush(&mut self, id: ClientId) {
        self.begin_client_close(id, None, true);
    }

    fn begin_client_close(&mut self, id: ClientId, error: Option<Bytes>, linger: bool) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.is_closing() {
            return;
        }
        let linger_until = linger.then_some(self.now + CLOSE_LINGER);
        let (previous, session) = client.begin_closing(linger_until);
        match previous {
            ClientState::Joining { ticket, .. } | ClientState::Queued { ticket, .. } => {
                if let Some(ticket) = ticket {
                    self.linker.pools_mut().cancel_wait(ticket);
                }
            }
            ClientState::Welcoming { server } | ClientState::Linked { server } => {
                self.client_left_server(id, server);
            }
            ClientState::Refused { answer_at } => self.auth_delay.forget(id, answer_at),
            ClientState::LookingUp { ticket, server, .. } => {
                if let Some(ticket) = ticket {
                    self.linker.pools_mut().cancel_wait(ticket);
                }
                // Its lookup's answer may still be on the way: the server cannot be reused.
                if let Some(server) = server {
                    self.close_server(server);
                }
            }
            _ => {}
        }
        if let Some(session) = session {
            if let Some(key) = session.key() {
                self.clients.logins_mut().keys_mut().forget(key);
            }
            match session.reads() {
                // A reader session registered its pool on the primary and each replica pool
                // it read from (`session.pool` is one of them).
                Some(reads) => {
                    for pool in reads.pools() {
                        self.linker.pools_mut().unregister(pool);
                    }
                }
                None => {
                    if let Some(pool) = session.pool() {
                        self.linker.pools_mut().unregister(pool);
                    }
                }
            }
            // Its replica lease (and a read's replica ticket) drops here, giving the replica's session count back.
        }
        if let Some(error) = error {
            self.send(Conn::Client(id), error);
        }
        let how = if linger {
            CloseHow::Flush
        } else {
            CloseHow::Now
        };
        self.outbox.push(Action::Close {
            conn: Conn::Client(id),
            how,
        });
    }

    /// A protocol violation by a client: 08P01 and a close.
    fn protocol_error(&mut self, id: ClientId, message: &str) {
        debug!(?id, message, "client protocol error");
        let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, message);
        self.close_client(id, Some(error));
    }

    /// Begins a server's teardown. Its pool accounting is settled by the caller's state
    /// (see `settle_closed_server`); here the driver is told and the server stops taking part.
    /// PgBouncer's line for a server it closes on purpose, `database/user closing because:
    /// reason` (operators and its test suite look for it).
    fn log_server_closing(&self, id: ServerId, reason: &str) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        if let Some(key) = self.linker.pools().key(server.pool()) {
            info!(
                server = id.index(),
                "{}/{} closing because: {reason}", key.database, key.server_user
            );
        }
    }

    fn close_server(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.is_closing() {
            return;
        }
        let (previous, lease) = server.begin_closing();
        let pool = server.pool();
        self.outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
        self.settle_closed_server(id, pool, previous, lease);
    }

    /// Where a client's bytes go next, by its state.
    fn process_client(&mut self, id: ClientId) {
        let Some(client) = self.clients.get(id.0) else {
            return;
        };
        match *client.state() {
            ClientState::Startup => self.on_startup_bytes(id),
            ClientState::Authenticating(_) => self.on_auth_bytes(id),
            ClientState::Idle { .. } => self.on_idle_client_bytes(id),
            ClientState::Linked { server } => self.forward(id, server),
            ClientState::Console { .. } => self.on_console_bytes(id),
            ClientState::Routing { .. }
            | ClientState::Joining { .. }
            | ClientState::LookingUp { .. }
            | ClientState::Welcoming { .. }
            | ClientState::Queued { .. }
            | ClientState::Refused { .. } => self.hold_client_input(id),
            ClientState::Closing { .. } => {}
        }
    }

    /// A client that sends while it waits keeps its bytes until it has a server; past the
    /// input limit it is paused, so a pipeline cannot make the engine hold unbounded data.
    fn hold_client_input(&mut self, id: ClientId) {
        let limit = self.env.limits().client_input_limit_bytes;
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.pause_if_over(limit) {
            self.outbox.push(Action::PauseRecv(Conn::Client(id)));
        }
    }

    /// Receives from a client paused by `hold_client_input` again.
    fn resume_client(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if client.backlog_mut().unpause() {
            // Under SUSPEND it stays unread; RESUME reads it again.
            if !self.admin.gates().is_suspended() {
                self.outbox.push(Action::ResumeRecv(Conn::Client(id)));
            }
        }
    }

    /// Receives from a server paused by its client's backlog again.
    fn resume_server(&mut self, id: ServerId) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if server.io_mut().unpause() && !self.admin.gates().is_suspended() {
            self.outbox.push(Action::ResumeRecv(Conn::Server(id)));
        }
    }

    /// Where a server's bytes go next, by its state.
    fn process_server(&mut self, id: ServerId) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        match *server.state() {
            ServerState::Negotiating { .. } => self.on_negotiation_answer(id),
            ServerState::LoggingIn { .. } => self.on_login_bytes(id),
            ServerState::Busy { client } => self.relay_to_client(id, client),
            ServerState::Releasing { .. } | ServerState::Checking { .. } => self.drain_server(id),
            ServerState::Idle { .. } => self.on_idle_server_bytes(id),
            ServerState::Connecting { .. } => {
                debug!(?id, "bytes from a server before its connect completed");
                self.close_server(id);
            }
            ServerState::Leaving { .. } => {
                if let Some(server) = self.servers.get_mut(id.0) {
                    server.io_mut().input_mut().clear();
                }
            }
            // It spoke before its socket was detached: it is not clean any more, so it
            // does not move (it closes, and its slot goes on once it is closed).
            ServerState::Moving { .. } => self.close_server(id),
            ServerState::Closing => {}
        }
    }

    // ---- server connections: the server table's steps (`backend.rs`), routed ----

    fn on_server_connected(&mut self, id: ServerId, result: Result<(), i32>) {
        if result.is_ok() && self.env.config().pgtier.log_connections {
            self.log_server_connected(id);
        }
        match self
            .servers
            .connected(id, result, self.now, &mut self.outbox)
        {
            backend::Connected::Ignored | backend::Connected::Negotiating => {}
            backend::Connected::Unreachable(error, cause) => {
                self.server_unreachable(id, error, cause);
            }
            backend::Connected::StartLogin => self.start_server_login(id),
        }
    }

    /// PgBouncer's `log_connections` line for a server socket that connected: its pool,
    /// the server's address and the local end (operators and PgBouncer's test suite read it).
    fn log_server_connected(&self, id: ServerId) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let Some(key) = self.linker.pools().key(server.pool()) else {
            return;
        };
        let info = server.info();
        let line = crate::log_lines::server_connected(
            &key.database,
            &key.server_user,
            info.addr(),
            info.local_addr(),
        );
        info!(server = id.index(), "{line}");
    }

    fn start_server_login(&mut self, id: ServerId) {
        self.servers.start_login(
            id,
            &self.linker,
            self.env.config(),
            self.now,
            &mut self.outbox,
        );
    }

    fn on_login_bytes(&mut self, id: ServerId) {
        let progress = self.servers.login_step(
            id,
            &self.linker,
            &self.env,
            self.clients.logins(),
            self.random.as_mut(),
            &mut self.outbox,
        );
        match progress {
            backend::LoginProgress::Pending => {}
            backend::LoginProgress::Failed(error) => self.login_failed(id, error),
            backend::LoginProgress::Done => {
                if let Some((pool, checkin)) =
                    self.linker
                        .logged_in(&mut self.servers, id, self.now, self.env.shared())
                {
                    self.act_on_checkin(id, pool, checkin);
                }
            }
        }
    }

    /// A login failed: every client waiting on the pool gets `error` now, and new ones get
    /// it until `server_login_retry` passes.
    fn login_failed(&mut self, id: ServerId, error: Bytes) {
        // A server starting up or shutting down (57P01..57P03) may take logins moments
        // later: its pool's waiters wait for the next attempt, as PgBouncer's do.
        if crate::server::relay::is_shutdown_error(error.get(5..).unwrap_or_default()) {
            self.server_unreachable(id, error, FailureCause::ServerShutdown);
            return;
        }
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let age = self
            .now
            .saturating_duration_since(server.info().connected_at());
        let replication = self.linker.pools().key(server.pool()).is_some_and(|key| {
            key.profile
                .parameters()
                .any(|(name, _)| name == "replication")
        });
        // A replication login fails for reasons of its own (no REPLICATION role, no
        // pg_hba.conf line for it) that say nothing of ordinary logins: its client gets
        // PgBouncer's "login failed", the server's text staying in the log.
        let told = if replication {
            messages::fatal(sqlstate::CONNECTION_FAILURE, "login failed")
        } else {
            error.clone()
        };
        // PgBouncer's line for the server it closes, with what its clients are told.
        info!(
            "closing because: {} (age={}s)",
            messages::error_text(&told),
            age.as_secs()
        );
        if replication {
            info!(
                "replication server login failed: FATAL {}",
                messages::error_text(&error)
            );
        }
        let error = told;
        let retry_at = self.env.login_retry_at(self.now);
        let fail = self.linker.login_failed(
            &mut self.servers,
            id,
            error,
            retry_at,
            &mut self.stats,
            &mut self.outbox,
        );
        if let Some(fail) = fail {
            self.fail_waiters(fail.pool, fail.error);
        }
    }

    /// A server could not be reached: its pool's waiters stay queued for the next attempt
    /// (or, on a replica, a re-route); new clients get `error` meanwhile.
    fn server_unreachable(&mut self, id: ServerId, error: Bytes, cause: FailureCause) {
        let retry_at = self.env.login_retry_at(self.now);
        let other_hosts = self
            .servers
            .get(id.0)
            .is_some_and(|server| self.linker.has_other_hosts(&self.env, server.pool()));
        self.linker.unreachable(
            &mut self.servers,
            id,
            error,
            cause,
            other_hosts,
            &*self.routing,
            retry_at,
            &mut self.stats,
            &mut self.outbox,
        );
    }

    /// Server output for its linked client (`linker/to_client.rs`), and what follows it.
    fn relay_to_client(&mut self, server_id: ServerId, client_id: ClientId) {
        if self.clients.is_looking_up(client_id) {
            self.on_lookup_answer(server_id, client_id);
            return;
        }
        let relayed = linker::to_client::relay_to_client(
            &mut self.clients,
            &mut self.servers,
            &mut self.stats,
            &*self.routing,
            &self.env,
            self.now,
            &mut self.outbox,
            server_id,
            client_id,
        );
        match relayed {
            Relayed::Nothing => {}
            Relayed::Orphaned => self.close_server(server_id),
            Relayed::Fatal { pool, shutdown } => {
                if shutdown {
                    self.linker.report_replica_failure(
                        pool,
                        FailureCause::ServerShutdown,
                        &*self.routing,
                    );
                }
                self.close_server(server_id);
                self.close_client_after_flush(client_id);
            }
            Relayed::Died { shutdown } => {
                let cause = shutdown.then_some(FailureCause::ServerShutdown);
                self.server_failed(
                    server_id,
                    "server closed the connection unexpectedly",
                    cause,
                );
            }
            Relayed::Malformed => {
                self.server_failed(server_id, "server sent an invalid message", None);
            }
            Relayed::TooLong(len) => self.server_message_too_long(server_id, client_id, len),
            Relayed::BlockRefused => self.transaction_block_refused(server_id, client_id),
            Relayed::ForwardHeld => self.forward_held_input(server_id, client_id),
            Relayed::Welcome => self.finish_welcome(client_id, server_id),
            Relayed::Idle {
                releasable,
                ready_seen,
            } => {
                let shutting_down =
                    self.admin.shutdown() >= Some(ShutdownMode::WaitForTransactions);
                if releasable || shutting_down {
                    self.release_server(server_id);
                } else if ready_seen {
                    // The server stays with its client (pinned, or session mode): input
                    // that waited for this ReadyForQuery goes now.
                    self.forward_held_input(server_id, client_id);
                }
            }
        }
    }

    /// Client input held back while the server answered a segment that changed statements
    /// goes on now, if the server still serves this client.
    fn forward_held_input(&mut self, server_id: ServerId, client_id: ClientId) {
        if linker::to_client::held_input_ready(&self.clients, &self.servers, server_id, client_id) {
            self.forward(client_id, server_id);
        }
    }

    /// The server sent a message longer than `max_server_message_bytes`: what came before
    /// is with the client already; the server closes (its result cannot be skipped safely)
    /// and the client gets 54000, since its response is cut short.
    fn server_message_too_long(&mut self, server_id: ServerId, client_id: ClientId, len: usize) {
        warn!(
            len,
            "server message over max_server_message_bytes: closing the server"
        );
        self.close_server(server_id);
        let message = format!(
            "server message of {len} bytes exceeds max_server_message_bytes ({})",
            self.env.limits().max_server_message_bytes
        );
        let error = messages::fatal(sqlstate::PROGRAM_LIMIT_EXCEEDED, &message);
        self.close_client(client_id, Some(error));
    }

    /// A statement-mode client opened a transaction block, as PgBouncer refuses: its server
    /// closes (PostgreSQL rolls the block back when the connection ends; it is never pooled
    /// inside it) and the client gets PgBouncer's FATAL 08P01 and the end of its connection.
    /// `close_client` logs PgBouncer's "closing because: ..." line for it.
    fn transaction_block_refused(&mut self, server_id: ServerId, client_id: ClientId) {
        debug!(
            ?server_id,
            "closing a server inside a refused transaction block"
        );
        self.close_server(server_id);
        let error = messages::fatal(
            sqlstate::PROTOCOL_VIOLATION,
            "transaction blocks not allowed in statement pooling mode",
        );
        self.close_client(client_id, Some(error));
    }

    /// Swallows everything from a server without a client, then takes its next step.
    fn drain_server(&mut self, id: ServerId) {
        let max = self.env.limits().max_server_message_bytes;
        match self.servers.drain(id, max) {
            backend::Drained::Nothing => {}
            backend::Drained::Close => self.close_server(id),
            backend::Drained::FinishCheck => self.finish_check(id),
            backend::Drained::AdvanceRelease => self.advance_release(id),
        }
    }

    /// Bytes from a server nobody uses: a shutdown notice goes to the replica router;
    /// anything unusable retires the server.
    fn on_idle_server_bytes(&mut self, id: ServerId) {
        let Some(output) = self.servers.idle_output(id) else {
            return;
        };
        if output.shutting_down {
            self.linker.report_replica_failure(
                output.pool,
                FailureCause::ServerShutdown,
                &*self.routing,
            );
        }
        if output.retire {
            self.close_server(id);
        }
    }

    /// The server connection ended or failed.
    fn on_server_gone(&mut self, id: ServerId, errno: Option<i32>) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        match server.state() {
            ServerState::Closing => {}
            // Terminated on purpose: its backend is gone, its slot moves on.
            ServerState::Leaving { .. } | ServerState::Moving { .. } => self.close_server(id),
            ServerState::Connecting { .. } => {
                let errno = errno.unwrap_or(backend::libc_like::ECONNRESET);
                self.on_server_connected(id, Err(errno));
            }
            _ => self.server_failed(
                id,
                "server closed the connection unexpectedly",
                Some(FailureCause::ConnectionReset),
            ),
        }
    }

    /// The server connection broke. Its client (if any) gets `message` as a FATAL error.
    /// With a `cause`, a server on a replica is reported to its router (the replica goes
    /// Down at once) and the clients waiting on its pool are re-routed rather than failed.
    fn server_failed(&mut self, id: ServerId, message: &str, cause: Option<FailureCause>) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool = server.pool();
        match *server.state() {
            ServerState::Connecting { .. }
            | ServerState::Negotiating { .. }
            | ServerState::LoggingIn { .. } => {
                let error = messages::fatal(sqlstate::CONNECTION_FAILURE, message);
                match cause {
                    Some(cause) => self.server_unreachable(id, error, cause),
                    None => self.login_failed(id, error),
                }
            }
            ServerState::Busy { client } => {
                let on_replica = cause.is_some_and(|cause| {
                    self.linker
                        .report_replica_failure(pool, cause, &*self.routing)
                });
                self.close_server(id);
                if self.run_read_again(client, pool) {
                    return;
                }
                let message = if on_replica {
                    format!("the replica serving this connection failed: {message}")
                } else {
                    message.to_string()
                };
                let error = messages::fatal(sqlstate::CONNECTION_FAILURE, &message);
                self.close_client(client, Some(error));
            }
            _ => {
                if let Some(cause) = cause {
                    self.linker
                        .report_replica_failure(pool, cause, &*self.routing);
                }
                self.close_server(id);
            }
        }
    }

    /// The server under client `id`'s kept read (`client::retry`) died on a replica before
    /// any of its answer reached the client: the read goes back in front of the client's
    /// input and runs on another server of its class, at most `read_retries` times. False
    /// when it may not: the client is told as before.
    fn run_read_again(&mut self, id: ClientId, pool: PoolId) -> bool {
        let Some(ServerTarget::Replica(replica)) =
            self.linker.pools().key(pool).map(|key| key.target)
        else {
            return false;
        };
        let max = self.env.config().pgtier.read_retries;
        let Some(again) = self.clients.put_read_back(id, max, replica, self.now) else {
            return false;
        };
        info!(
            client = id.index(),
            %replica,
            "a read's server died before it answered: running it again on another server"
        );
        self.stats.read_run_again();
        match again {
            // Routed again, not to that replica (`read_routing.rs`).
            read_retry::Again::Reader => self.need_server(id),
            read_retry::Again::Leased => self.wait_for_another_server(id, pool, replica),
        }
        true
    }

    /// A replica-set session whose read runs again: once its replica is Down it moves (as
    /// sessions between transactions do); until then it waits on the replica's pool for a
    /// server other than the idle ones, which may have died with the one that failed: a new
    /// one, or one another session gives back. The replica's failure was reported, so it is
    /// Down moments later unless only that backend died, and the housekeeping moves the
    /// pool's waiters off a Down replica.
    fn wait_for_another_server(&mut self, id: ClientId, pool: PoolId, replica: SocketAddr) {
        let Some(session) = self.clients.get(id.0).and_then(|c| c.session()) else {
            return;
        };
        if self.routing.is_down(session.database(), replica) {
            self.repin(id);
            return;
        }
        let class = crate::class::wait_class(session.class());
        self.linker.park(
            &mut self.clients,
            self.env.config(),
            id,
            class,
            pool,
            self.now,
        );
        self.open_for_waiters(pool);
    }

    fn on_cancel_done(&mut self, id: ServerId) {
        if self.servers.cancel_done(id) {
            self.advance_release(id);
        }
    }

    /// The server's one-byte answer to the SSLRequest (`tls_io.rs`).
    fn on_negotiation_answer(&mut self, id: ServerId) {
        let mode = self.env.config().pgtier.server_tls_sslmode;
        let (env, linker) = (&self.env, &self.linker);
        let name =
            |server: &crate::server::ServerConn| tls_io::tls_server_name(env, linker, server);
        match self
            .servers
            .negotiation_answer(id, mode, name, &mut self.outbox)
        {
            tls_io::Negotiation::Wait => {}
            tls_io::Negotiation::StartLogin => self.start_server_login(id),
            tls_io::Negotiation::Failed(why) => self.server_tls_failed(id, &why),
        }
    }

    /// TLS with a server failed. During its login the pool's waiters keep waiting for the
    /// next attempt (`Linker::tls_failed`); later, its client gets the reason (08006).
    fn server_tls_failed(&mut self, id: ServerId, why: &str) {
        debug!(?id, why, "server TLS failed");
        let logging_in = self.servers.get(id.0).is_some_and(|server| {
            matches!(
                server.state(),
                ServerState::Negotiating { .. } | ServerState::LoggingIn { .. }
            )
        });
        if !logging_in {
            self.server_failed(id, why, None);
            return;
        }
        let retry_at = self.env.login_retry_at(self.now);
        self.linker.tls_failed(
            &mut self.servers,
            id,
            why,
            retry_at,
            &mut self.stats,
            &mut self.outbox,
        );
    }

    // ---- servers given to clients and taken back: the linker's steps, routed ----
    // (`linker/linking.rs`: need, link, forward, release; `linker/opening.rs`: opening;
    // `moving.rs`: servers between shards)

    /// A welcomed client between transactions sent bytes: it needs a server (or it left).
    fn on_idle_client_bytes(&mut self, id: ClientId) {
        let bytes = linker::linking::idle_client_bytes(
            &mut self.clients,
            &self.env,
            &*self.routing,
            id,
            self.now,
        );
        match bytes {
            IdleBytes::Nothing => {}
            IdleBytes::Quit => self.close_client(id, None),
            IdleBytes::Invalid(code) => {
                self.protocol_error(id, &format!("invalid frontend message type {code}"));
            }
            IdleBytes::Malformed => self.protocol_error(id, "invalid message length or sequence"),
            IdleBytes::Queued => self.need_server(id),
        }
    }

    /// A `Joining` or `Queued` client needs a server: an idle one of its pool (after a
    /// check when it sat idle long), else it parks in the pool's FIFO and a server is
    /// opened for it when the budgets allow.
    fn need_server(&mut self, id: ClientId) {
        if self.admin.shutdown() >= Some(ShutdownMode::WaitForTransactions) {
            // WAIT_FOR_SERVERS lets running transactions finish and starts no new one.
            self.close_client(id, Some(messages::server_shutting_down()));
            return;
        }
        let (class, reader) =
            match linker::linking::prepare_transaction(&mut self.clients, &self.env, id) {
                Prepared::Gone => return,
                Prepared::Repin => {
                    self.repin(id);
                    return;
                }
                Prepared::Go { class, reader } => (class, reader),
            };
        if self.admin.held_by_pause(&self.clients, id, self.now) {
            return;
        }
        // Only a reader session's transaction is routed; the others keep their pool.
        if reader {
            let mut router = read_routing::TxnRouter {
                clients: &mut self.clients,
                linker: &mut self.linker,
                stats: &mut self.stats,
                env: &self.env,
                routing: &*self.routing,
                now: self.now,
                evicted: Vec::new(),
            };
            let route = router.route_transaction(id);
            for closing in router.evicted {
                self.retire(closing);
            }
            if let read_routing::TxnRoute::Wait = route {
                return;
            }
        }
        let Some(pool) = self
            .clients
            .get(id.0)
            .and_then(|c| c.session())
            .and_then(|s| s.pool())
        else {
            return;
        };
        let lease = self.linker.checkout(
            &mut self.servers,
            self.env.config(),
            pool,
            self.now,
            &mut self.outbox,
        );
        if let Some(lease) = lease {
            self.link(id, lease);
            return;
        }
        // The pool's last login failed moments ago and it has no server: the client is
        // told at once rather than queued (PgBouncer's fast fail); those already waiting
        // wait for the next attempt. Unless another shard holds an idle server of the pool
        // to lend, which PgBouncer's one pool would have given the client.
        if let Some(error) = self.linker.failed_login_for(&self.servers, pool, self.now) {
            if !self.linker.lendable(pool, self.now) {
                self.close_client(id, Some(error));
                return;
            }
        }
        self.linker.park(
            &mut self.clients,
            self.env.config(),
            id,
            class,
            pool,
            self.now,
        );
        self.open_for_waiters(pool);
    }

    /// Opens servers while a pool's waiters outnumber the servers being opened for them
    /// and the budgets allow; a refusal makes room where it can (another shard's idle
    /// server, an idle server of another pool under a full cap).
    fn open_for_waiters(&mut self, pool: PoolId) {
        loop {
            let counts = self.linker.pools().counts(pool);
            let borrowing = u32::from(self.linker.pools().borrowing(pool));
            if counts.opening + borrowing >= counts.waiting {
                return;
            }
            // A refused login (not an unreachable server, whose waiters wait for the
            // next attempt) fails the waiters while no server that will serve them is
            // left; within `server_login_retry` an open is refused (`NotNow`).
            if let Some(error) = self.linker.failed_login_for(&self.servers, pool, self.now) {
                self.fail_waiters(pool, error);
                return;
            }
            if self.borrow_idle_server(pool) {
                continue;
            }
            match self.linker.pools_mut().try_open(pool, self.now) {
                Ok(()) => self.open_server(pool),
                Err(pgtier_pool::Refusal::NotNow) => return,
                Err(pgtier_pool::Refusal::PoolFull) => {
                    if self.make_room_for_replication(pool) {
                        return;
                    }
                    self.linker
                        .warn_if_pinned_out(pool, &self.clients, self.now);
                    self.linker.ask_other_shards_for_a_server(
                        &self.env,
                        &mut self.outbox,
                        pool,
                        self.now,
                    );
                    return;
                }
                Err(pgtier_pool::Refusal::SharedFull { budget }) => {
                    let closing = self.linker.make_room_under_cap(
                        &self.env,
                        &mut self.outbox,
                        pool,
                        budget,
                        self.now,
                    );
                    if let Some(closing) = closing {
                        self.retire(closing);
                    }
                    return;
                }
            }
        }
    }

    /// A login of `pool` was refused, another shard published an idle server of it and none
    /// is idle here: ask that shard to lend one (moved whole) rather than fail the waiters,
    /// as PgBouncer's one pool would reuse it (`pgtier_pool`'s `borrow.rs`). True: asked;
    /// the borrow counts as one open on its way until it is answered or `BORROW_WAIT`
    /// passes.
    fn borrow_idle_server(&mut self, pool: PoolId) -> bool {
        let Some(from) = self.linker.pools().borrow_from(pool, self.now) else {
            return false;
        };
        let Some(key) = self.linker.pools().key(pool).cloned().map(Arc::new) else {
            return false;
        };
        debug!(
            shard = self.env.shard(),
            from, "borrowing an idle server of another shard"
        );
        self.outbox.push(Action::Post {
            shard: from,
            command: Command::LendIdle {
                key,
                from: self.env.shard(),
            },
        });
        self.linker
            .pools_mut()
            .start_borrow(pool, self.now + crate::settings::BORROW_WAIT);
        true
    }

    /// A borrow of pool `key` was refused: its waiters get servers opened.
    fn borrow_refused(&mut self, key: &pgtier_pool::PoolKey) {
        let Some(pool) = self.linker.pools().find(key) else {
            return;
        };
        self.linker.pools_mut().end_borrow(pool, true, self.now);
        self.open_for_waiters(pool);
    }

    /// Borrows that went unanswered: their waiters get a server opened, or the refusal.
    fn expire_borrows(&mut self) {
        let mut expired = Vec::new();
        self.linker
            .pools_mut()
            .expired_borrows(self.now, &mut expired);
        for pool in expired {
            debug!(
                shard = self.env.shard(),
                "a borrow went unanswered: opening"
            );
            self.open_for_waiters(pool);
        }
    }

    /// A replication pool is full: its budget is shared with the ordinary pool of its
    /// database and user, and as PgBouncer does, an idle server of that pool is evicted to
    /// make room (here, else on another shard through the budget). False: not a
    /// replication pool.
    fn make_room_for_replication(&mut self, pool: PoolId) -> bool {
        let replication = self
            .linker
            .pools()
            .key(pool)
            .is_some_and(|key| key.profile.is_replication());
        if !replication {
            return false;
        }
        match self.linker.pools_mut().evict_idle_sibling(pool) {
            Some(closing) => self.retire(closing),
            None => self.linker.pools_mut().request_release_of_pool_budget(pool),
        }
        true
    }

    /// Fails every client waiting on a pool with `error` (a refused login), unless another
    /// shard lends them an idle server of the pool first (`pgtier_pool`'s `borrow.rs`):
    /// they wait for the borrow, and get `error` if it is refused or unanswered.
    fn fail_waiters(&mut self, pool: PoolId, error: Bytes) {
        if self.linker.pools().borrowing(pool) || self.borrow_idle_server(pool) {
            return;
        }
        while let Some(waiter) = self.linker.pools_mut().next_waiter(pool) {
            self.clients.clear_ticket(waiter);
            self.close_client(waiter, Some(error.clone()));
        }
    }

    /// Opens a server for `pool`; its budget slot was taken by `try_open`.
    fn open_server(&mut self, pool: PoolId) {
        let failed = self.linker.open_server(
            &mut self.servers,
            &self.env,
            &*self.routing,
            &mut self.stats,
            &mut self.outbox,
            pool,
            self.now,
        );
        if let Some(fail) = failed {
            self.fail_waiters(fail.pool, fail.error);
        }
    }

    /// A check was answered: a server that passed goes back to the pool (to the oldest
    /// waiter), one that failed closes (the pool replaces it for waiters).
    fn finish_check(&mut self, id: ServerId) {
        match self.servers.check_failed(id) {
            None => {}
            Some(true) => {
                debug!(
                    shard = self.env.shard(),
                    "server_check_query failed: closing the server"
                );
                self.close_server(id);
            }
            Some(false) => self.return_to_pool(id),
        }
    }

    /// Gives `lease`'s server to client `id` (which waited for it, or found it idle).
    fn link(&mut self, id: ClientId, lease: Lease<ServerId>) {
        let linked = linker::linking::link(
            &mut self.clients,
            &mut self.servers,
            &mut self.stats,
            &self.env,
            id,
            lease,
            self.now,
            &mut self.outbox,
        );
        match linked {
            Linked::GiveBack(lease) => self.give_back(lease),
            Linked::Lookup(lease) => self.run_lookup(id, lease),
            Linked::Gone => {}
            Linked::Welcoming(server_id) => {
                let at_once = linker::linking::start_welcome(
                    &self.clients,
                    &mut self.servers,
                    &self.linker,
                    id,
                    server_id,
                    &mut self.outbox,
                );
                if at_once {
                    self.finish_welcome(id, server_id);
                }
            }
            Linked::Serving {
                server: server_id,
                cancel,
            } => {
                self.resume_client(id);
                self.forward(id, server_id);
                if cancel {
                    // Sent after the query, so that it finds the query running (or, if that
                    // already ended, is ignored by the idle backend, as PostgreSQL ignores a
                    // late cancel).
                    self.cancel_running(id);
                }
            }
        }
    }

    /// A server that was handed out to nobody after all goes back.
    fn give_back(&mut self, lease: Lease<ServerId>) {
        let id = lease.server;
        if let Some(server) = self.servers.get_mut(id.0) {
            server.hold_lease(lease);
            server.start_releasing(self.now);
        }
        self.advance_release(id);
    }

    /// Moves the client's complete (or streaming) messages to its server.
    fn forward(&mut self, id: ClientId, server_id: ServerId) {
        let mut out = Forwarded::default();
        let keep = self.clients.read_to_keep(id, &self.env, &*self.routing);
        if let read_retry::Keep::Unit(_) = keep {
            out.kept = Some(crate::client::retry::KeptBytes::new());
        }
        let options = linker::linking::forward_options(&self.env, self.now);
        if !linker::linking::forward(
            &mut self.clients,
            &mut self.servers,
            &mut self.stats,
            id,
            server_id,
            options,
            &mut out,
        ) {
            return;
        }
        if !matches!(keep, read_retry::Keep::Nothing) {
            let seen = read_retry::ForwardSeen {
                keep,
                out: &mut out,
            };
            self.clients.read_forwarded(id, seen);
        }
        if !out.vacate.is_empty() {
            // Before the statement goes: the closes are on their way when it arrives.
            self.linker.vacate_databases(
                &mut self.servers,
                &self.env,
                out.vacate,
                self.now,
                &mut self.outbox,
            );
        }
        for chunk in out.chunks {
            self.outbox.send(Conn::Server(server_id), chunk);
        }
        if self.env.limits().pin_session_state && !out.effects.is_empty() {
            self.pin_client(id, server_id, out.effects);
        }
        match out.end {
            None => {}
            Some(ForwardEnd::Terminate) => self.close_client(id, None),
            Some(ForwardEnd::InvalidType(code)) => {
                self.protocol_error(id, &format!("invalid frontend message type {code}"));
            }
            Some(ForwardEnd::Malformed) => {
                self.protocol_error(id, "invalid message length or sequence");
            }
            Some(ForwardEnd::TooManyStatements) => {
                let message = format!(
                    "prepared statements of this connection exceed max_client_prepared_bytes ({})",
                    self.env.limits().max_client_prepared_bytes
                );
                let error = messages::fatal(sqlstate::OUT_OF_MEMORY, &message);
                self.close_client(id, Some(error));
            }
        }
    }

    /// A transaction-mode client sent text with session-state effects (`to_client::pin_client`).
    fn pin_client(&mut self, id: ClientId, server_id: ServerId, effects: Effects) {
        linker::to_client::pin_client(&mut self.clients, &mut self.servers, id, server_id, effects);
    }

    /// The server finished a transaction (or a welcome, or a shutdown waits): its client
    /// goes idle (or away, at shutdown) and the server goes through the release path.
    fn release_server(&mut self, server_id: ServerId) {
        let Some(client_id) = linker::linking::release(
            &mut self.clients,
            &mut self.servers,
            &self.env,
            &*self.routing,
            server_id,
            self.now,
        ) else {
            return;
        };
        self.advance_release(server_id);
        let Some(client_id) = client_id else {
            return;
        };
        // A pipelined next transaction is already here (under WAIT_FOR_SERVERS it closes
        // the client, in `need_server`).
        self.on_idle_client_bytes(client_id);
    }

    /// A client left while linked to `server_id`: the server drains what it still owes (a
    /// running query cancelled), then takes the release path.
    fn client_left_server(&mut self, client_id: ClientId, server_id: ServerId) {
        let cancel_on_disconnect = self.env.config().pgtier.cancel_on_client_disconnect;
        match self.servers.client_left(
            server_id,
            client_id,
            cancel_on_disconnect,
            self.now,
            &mut self.outbox,
        ) {
            LeftBehind::Nothing => {}
            LeftBehind::CloseNow => self.close_server(server_id),
            LeftBehind::Releasing => self.advance_release(server_id),
        }
    }

    /// Takes the next step of a releasing server (see `crate::server::release`).
    fn advance_release(&mut self, id: ServerId) {
        // Borrowed field by field, not cloned: this runs at the end of every transaction.
        let reset_query = &self.env.config().pgtier.server_reset_query;
        match self.servers.release_step(id, reset_query, &mut self.outbox) {
            ReleaseStep::Wait | ReleaseStep::Query(_) => {}
            ReleaseStep::Pool => self.return_to_pool(id),
            ReleaseStep::Close(why) => {
                debug!(?id, why, "closing a released server");
                self.close_server(id);
            }
        }
    }

    /// Puts a clean server back: to the pool's oldest waiter, into its idle list, closed
    /// (lifetime, a shrunk pool, a shutdown), or handed to another shard. Iterative: a server
    /// released while another is being put back waits for it, so the chain of hand-offs a
    /// burst of logins makes stays one call deep.
    fn return_to_pool(&mut self, id: ServerId) {
        if !self.linker.begin_return(id) {
            return;
        }
        let mut next = Some(id);
        while let Some(id) = next {
            self.return_one(id);
            next = self.linker.next_return();
        }
        self.linker.end_returns();
    }

    fn return_one(&mut self, id: ServerId) {
        match self
            .linker
            .return_one(&mut self.servers, &self.admin, id, self.now)
        {
            Returned::Nothing => {}
            Returned::Close => {
                if self.servers.get(id.0).is_some_and(|s| s.close_needed()) {
                    self.log_server_closing(id, "obsolete connection");
                }
                self.close_server(id);
            }
            Returned::Checkin(pool, checkin) => self.act_on_checkin(id, pool, checkin),
        }
    }

    /// Acts on what the pool decided for a server that came back or was just opened.
    fn act_on_checkin(&mut self, id: ServerId, pool: PoolId, checkin: Checkin<ServerId, ClientId>) {
        match checkin {
            Checkin::Handoff { waiter, lease } => {
                self.clients.clear_ticket(waiter);
                self.link(waiter, lease);
            }
            Checkin::Pooled => {
                if let Some(server) = self.servers.get_mut(id.0) {
                    server.idle(self.now);
                }
            }
            Checkin::Close {
                lease: _,
                reason,
                open_replacement,
            } => {
                log_eviction(id, reason);
                debug!(
                    ?id,
                    reason = reason.as_str(),
                    "closing a server the pool gave up"
                );
                self.close_unpooled(id);
                if open_replacement {
                    self.open_server(pool);
                }
            }
            Checkin::HandOver { lease, to } => {
                if let Some(server) = self.servers.get_mut(id.0) {
                    server.hold_lease(lease);
                }
                self.hand_on(id, to);
            }
        }
    }

    /// Closes a server whose budget the pool already settled (it decided the close).
    fn close_unpooled(&mut self, id: ServerId) {
        self.servers.close_unpooled(id, &mut self.outbox);
    }

    /// A checked-out server of `pool` closed: a replacement opens for its waiters, unless
    /// a login of the pool was just refused (here or on another shard), whose error they
    /// get now instead.
    fn replace_closed(&mut self, pool: PoolId) {
        if self.linker.pools_mut().closed(pool, self.now) {
            self.open_server(pool);
        } else if let Some(error) = self.linker.failed_login_for(&self.servers, pool, self.now) {
            self.fail_waiters(pool, error);
        }
    }

    /// The pool accounting of a server that is closing, by the state it was in.
    fn settle_closed_server(
        &mut self,
        id: ServerId,
        pool: PoolId,
        previous: ServerState,
        lease: Option<Lease<ServerId>>,
    ) {
        match previous {
            ServerState::Connecting { .. }
            | ServerState::Negotiating { .. }
            | ServerState::LoggingIn { .. } => {
                // Counted as opening: an open that did not finish.
                self.linker.pools_mut().open_failed(pool, self.now, None);
                self.open_for_waiters(pool);
            }
            ServerState::Idle { .. } => {
                if self.linker.pools_mut().take_idle(pool, &id).is_some() {
                    self.replace_closed(pool);
                }
            }
            ServerState::Leaving { .. } | ServerState::Moving { .. } => {
                if let Some(grant) = self.linker.pools_mut().left(pool) {
                    let command = Command::SlotGranted {
                        key: Arc::new(grant.key),
                    };
                    self.outbox.push(Action::Post {
                        shard: grant.to,
                        command,
                    });
                }
                self.open_for_waiters_under_caps(pool);
            }
            ServerState::Checking { .. }
            | ServerState::Busy { .. }
            | ServerState::Releasing { .. } => {
                if lease.is_some() {
                    self.replace_closed(pool);
                }
                self.open_for_waiters_under_caps(pool);
            }
            ServerState::Closing => {}
        }
        let _ = id;
    }

    /// A server of `pool` closed and gave its database and user counts back: pools of this
    /// shard under the same caps whose clients wait may open a server now.
    fn open_for_waiters_under_caps(&mut self, pool: PoolId) {
        for other in self.linker.waiting_under_caps_of(pool) {
            self.open_for_waiters(other);
        }
    }

    /// `max_pools_per_worker` is reached: an unused pool's idle servers go.
    fn evict_a_pool(&mut self) {
        self.linker
            .evict_a_pool(&mut self.servers, self.now, &mut self.outbox);
    }

    /// Ends an idle server the pool took out to close (`ServerTable::retire`).
    fn retire(&mut self, closing: pgtier_pool::Closing<ServerId>) {
        log_eviction(closing.lease.server, closing.reason);
        self.servers.retire(closing, self.now, &mut self.outbox);
    }

    /// Another shard handed this one a slot of `key`: open a server with it for the
    /// waiters, or give it back when nobody here needs it any more.
    fn adopt_granted_slot(&mut self, key: &pgtier_pool::PoolKey) {
        let Some(pool) = self.linker.pools().find(key) else {
            pgtier_pool::give_back_slot(&self.env.pool_limits(key));
            return;
        };
        debug!(
            shard = self.env.shard(),
            "a server slot was handed to this shard"
        );
        self.linker.pools_mut().adopt_slot(key);
        // A lent server that could not move after all (it spoke while its socket was being
        // detached) is ended and its slot comes instead: that answers the borrow too.
        self.linker.pools_mut().end_borrow(pool, true, self.now);
        self.open_for_waiters(pool);
        self.linker.pools_mut().return_unused_slots(pool);
    }

    /// The timer: reads waiting for a replica to catch up are routed again.
    fn recheck_read_waits(&mut self) {
        let waiting = self.linker.take_read_waits();
        for id in waiting {
            let waits = self
                .clients
                .get(id.0)
                .and_then(|c| c.session())
                .and_then(|s| s.reads())
                .is_some_and(|reads| {
                    matches!(
                        reads.txn,
                        crate::client::reads::ReadTxn::AwaitingReplica { .. }
                    )
                });
            if waits {
                self.need_server(id);
            }
        }
    }

    /// Clients taken off the pool of a replica that went Down: a reader session's read is
    /// routed again (elsewhere); other sessions move with their lease.
    fn reroute(&mut self, id: ClientId) {
        match self.clients.reads_mut(id) {
            Some(reads) => {
                reads.txn = crate::client::reads::ReadTxn::Between;
                self.need_server(id);
            }
            None => self.repin(id),
        }
    }

    /// Server `id` goes to shard `to` (`ServerTable::hand_on`).
    fn hand_on(&mut self, id: ServerId, to: usize) {
        self.servers
            .hand_on(id, to, self.env.shard(), self.now, &mut self.outbox);
    }

    /// A server arrived from another shard (or came back undelivered): it becomes a server
    /// of its pool here (`moving.rs`), given to the oldest waiter or kept idle. Without a
    /// pool it cannot join (too many pools, no server slot), its socket is closed and its
    /// slot given back.
    fn adopt_moved_server(&mut self, parcel: Box<MovedServer>, socket: DetachedSocket) {
        let parcel = *parcel;
        let limits = self.env.pool_limits(&parcel.key);
        let (pool, registered) = match self.linker.pools().find(&parcel.key) {
            Some(pool) => (pool, false),
            None => {
                let registered =
                    match self
                        .linker
                        .pools_mut()
                        .register(&parcel.key, &limits, self.now)
                    {
                        Err(PoolError::TooManyPools { .. }) => {
                            self.evict_a_pool();
                            self.linker
                                .pools_mut()
                                .register(&parcel.key, &limits, self.now)
                        }
                        registered => registered,
                    };
                match registered {
                    Ok(pool) => (pool, true),
                    Err(_) => {
                        debug!(
                            shard = self.env.shard(),
                            "no pool for a server that moved here"
                        );
                        pgtier_pool::give_back_slot(&limits);
                        self.outbox.push(Action::CloseSocket(socket));
                        return;
                    }
                }
            }
        };
        // Whether it was borrowed or handed over, the pool's borrow is answered: what the
        // server does not cover is opened below (`act_on_checkin` serves one waiter).
        let was_borrowing = self.linker.pools().borrowing(pool);
        self.linker.pools_mut().end_borrow(pool, false, self.now);
        let arrived = self.linker.arrive(
            &mut self.servers,
            &mut self.outbox,
            &self.env,
            self.now,
            pool,
            (parcel, socket),
        );
        match arrived {
            Arrived::NoSlot(socket) => {
                pgtier_pool::give_back_slot(&limits);
                self.outbox.push(Action::CloseSocket(socket));
            }
            Arrived::Placed => self.stats.server_moved_in(),
            Arrived::Deallocate { id, bytes } => {
                self.stats.server_moved_in();
                self.send(Conn::Server(id), bytes);
            }
            Arrived::Checkin { id, checkin } => {
                self.stats.server_moved_in();
                self.act_on_checkin(id, pool, checkin);
                if was_borrowing {
                    // Closed on arrival (lifetime, a lowered limit): its waiter still needs
                    // a server.
                    self.open_for_waiters(pool);
                }
            }
        }
        if registered {
            // The pool lives on while it holds the server (or a waiter), as any pool does.
            self.linker.pools_mut().unregister(pool);
        }
    }

    // ---- clients logging in: the client table's steps (`client_login.rs`), routed ----

    pub(super) fn on_startup_bytes(&mut self, id: ClientId) {
        match self.clients.read_startup(id, &mut self.outbox) {
            Startup::Wait => {}
            Startup::ProtocolError(message) => self.protocol_error(id, message),
            Startup::Close(error) => self.close_client(id, error),
            Startup::Cancel(key) => {
                self.close_client(id, None);
                self.route_cancel(key);
            }
            Startup::Login(request) => self.on_login(id, request),
        }
    }

    fn on_login(&mut self, id: ClientId, request: LoginRequest) {
        let started =
            self.clients
                .start_session(id, request, &self.env, &mut self.stats, &mut self.outbox);
        match started {
            Ok(true) if self.shutdown_refuses_login(id) => {
                self.close_client(id, Some(messages::pooler_shutting_down()));
            }
            Ok(true) => self.start_authentication(id),
            Ok(false) => {}
            Err(error) => self.close_client(id, Some(error)),
        }
    }

    /// A shutdown is under way and the client logs in to a pool, not to the console.
    fn shutdown_refuses_login(&self, id: ClientId) -> bool {
        let Some(client) = self.clients.get(id.0) else {
            return false;
        };
        let console = client
            .session()
            .is_some_and(|session| &**session.database() == pgtier_core::config::ADMIN_DATABASE);
        let on_unix_socket = matches!(client.info().peer(), Some(ClientAddr::Unix { .. }));
        !console && self.admin.refuses_login(on_unix_socket)
    }

    fn start_authentication(&mut self, id: ClientId) {
        let method = match self.clients.auth_method(id, &self.env) {
            Ok(method) => method,
            Err(error) => {
                self.close_client(id, Some(error));
                return;
            }
        };
        match self.clients.lookup_user_for(id, method, &self.env) {
            Some(auth_user) => self.start_lookup(id, method, &auth_user),
            None => self.begin_exchange(id, method),
        }
    }

    /// The password exchange of `method` (none for trust).
    pub(super) fn begin_exchange(&mut self, id: ClientId, method: Method) {
        let exchange = self.clients.begin_exchange(
            id,
            method,
            &self.env,
            self.random.as_mut(),
            &mut self.outbox,
        );
        match exchange {
            Exchange::Gone => {}
            Exchange::Passed => self.on_authenticated(id),
            Exchange::Started => self.on_auth_bytes(id),
            Exchange::Failed(error) => self.refuse_login(id, error),
        }
    }

    pub(super) fn on_auth_bytes(&mut self, id: ClientId) {
        let progress =
            self.clients
                .auth_step(id, &self.env, self.random.as_mut(), &mut self.outbox);
        match progress {
            AuthProgress::Pending => {}
            AuthProgress::Passed => self.on_authenticated(id),
            AuthProgress::Failed(error) => self.refuse_login(id, error),
        }
    }

    /// Its authentication failed: the error now, or held for `auth_failure_delay`.
    fn refuse_login(&mut self, id: ClientId, error: Bytes) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let peer = client.info().peer().copied();
        match self.auth_delay.hold(id, peer, error, self.now) {
            Ok(answer_at) => client.refused(answer_at),
            Err(error) => self.close_client(id, Some(error)),
        }
    }

    /// The held failures now due get their errors.
    fn answer_held_failures(&mut self) {
        for (id, error) in self.auth_delay.take_due(self.now) {
            // A client gone meanwhile took its entry with it (`begin_client_close`); a slot
            // reused since has another generation.
            if self.clients.get(id.0).is_some_and(|c| c.is_refused()) {
                self.close_client(id, Some(error));
            }
        }
    }

    /// The password is right: the console's welcome, or the admission and the pool.
    fn on_authenticated(&mut self, id: ClientId) {
        match self
            .clients
            .authenticated(id, &self.env, self.admin.gates(), &*self.routing)
        {
            Authenticated::Gone => {}
            Authenticated::Console => self.welcome_console(id),
            Authenticated::Unrouted => self.join_pool(id),
            Authenticated::Refused(error) => self.close_client(id, Some(error)),
            Authenticated::Admission(admission) => self.apply_admission(id, admission),
        }
    }

    /// Acts on an admission decided at once or answered by the control shard.
    fn apply_admission(&mut self, id: ClientId, admission: Admission) {
        match admission {
            Admission::Placed(lease) => self.admitted(id, lease),
            Admission::Pending => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    client.routing(self.now, client_login::request_id(id));
                }
            }
            Admission::Refused(refusal) => self.refused(id, &refusal),
        }
    }

    /// No replica for the session (`client_login::refused`).
    fn refused(&mut self, id: ClientId, refusal: &Refusal) {
        match client_login::refused(&mut self.clients, id, refusal, &self.env, self.now) {
            client_login::Refused::Gone => {}
            client_login::Refused::Close(error) => self.close_client(id, Some(error)),
            client_login::Refused::JoinPool => self.join_pool(id),
            client_login::Refused::Queued => self.need_server(id),
        }
    }

    /// The client holds a replica now: a first login continues to its welcome; a client
    /// moved off a failed replica queues on its new replica's pool.
    fn admitted(&mut self, id: ClientId, lease: Box<dyn ReplicaLease>) {
        match client_login::admitted(&mut self.clients, id, lease, self.now) {
            client_login::Admitted::Gone => {}
            client_login::Admitted::Queued => self.need_server(id),
            client_login::Admitted::JoinPool => self.join_pool(id),
            client_login::Admitted::Moved { old, welcomed } => {
                self.linker.pools_mut().unregister(old);
                if self.register_pool(id).is_some() {
                    let since = self.now;
                    if let Some(client) = self.clients.get_mut(id.0) {
                        if welcomed {
                            client.queued(since);
                        } else {
                            client.joining(since);
                        }
                    }
                    self.need_server(id);
                }
            }
        }
    }

    fn on_admission_reply(&mut self, reply: AdmissionReply) {
        let id = client_login::client_of(reply.request_id);
        if !client_login::awaits_admission(&self.clients, id, reply.request_id) {
            // The client left: dropping the lease gives its count back.
            return;
        }
        match reply.result {
            Ok(lease) => self.admitted(id, lease),
            Err(refusal) => self.refused(id, &refusal),
        }
    }

    /// Finds or creates the client's pool and registers the client with it. `None` when
    /// it was refused (and is closing).
    fn register_pool(&mut self, id: ClientId) -> Option<PoolId> {
        let (key, reader_entry) = match client_login::pool_key(&self.clients, id, &self.env) {
            Ok(found) => found?,
            Err(error) => {
                self.close_client(id, Some(error));
                return None;
            }
        };
        match self.register(&key) {
            Ok(pool) => {
                self.clients.set_pool(id, pool);
                if reader_entry {
                    self.clients.start_reader_session(id, pool);
                }
                Some(pool)
            }
            Err(error) => {
                let error = messages::fatal(sqlstate::TOO_MANY_CONNECTIONS, &error.to_string());
                self.close_client(id, Some(error));
                None
            }
        }
    }

    /// Registers a pool for `key`, making room (an idle pool evicted) when the shard has
    /// as many pools as it may.
    fn register(&mut self, key: &PoolKey) -> Result<PoolId, PoolError> {
        let limits = self.env.pool_limits(key);
        match self.linker.pools_mut().register(key, &limits, self.now) {
            Err(PoolError::TooManyPools { .. }) => {
                self.evict_a_pool();
                self.linker.pools_mut().register(key, &limits, self.now)
            }
            registered => registered,
        }
    }

    /// PgBouncer's line for the first client of a database name the `*` entry serves.
    fn note_auto_database(&self, pool: PoolId) {
        let Some(key) = self.linker.pools().key(pool) else {
            return;
        };
        let config = self.env.config();
        let through_fallback =
            config.fallback.is_some() && !config.databases.contains_key(&*key.database);
        if through_fallback && self.env.shared().auto_databases.register(&key.database) {
            info!(
                "{}",
                crate::log_lines::registered_auto_database(&key.database)
            );
        }
    }

    /// A logged-in client joins its pool: welcomed from the pool's cached parameters when
    /// it can be, else parked for a server whose login makes its welcome.
    fn join_pool(&mut self, id: ClientId) {
        let Some(pool) = self.register_pool(id) else {
            return;
        };
        self.note_auto_database(pool);
        // A refused login that stands, or (PgBouncer's fast fail) this worker's last attempt
        // to reach the server failed and it holds no server of the pool; unless another
        // shard can lend an idle server of it.
        let failed_now = |engine: &Engine| {
            engine
                .linker
                .failed_login_for(&engine.servers, pool, engine.now)
                .or_else(|| engine.linker.pools().login_failure(pool, engine.now))
        };
        let mut failed = failed_now(self);
        // The failure may be the old primary's, and a new one elected since the last
        // housekeeping pass: follow the move now rather than fail this client for it.
        if failed.is_some() && self.follow_primary_move_of(pool) {
            failed = failed_now(self);
        }
        if let Some(error) = failed.filter(|_| !self.linker.lendable(pool, self.now)) {
            self.close_client(id, Some(error));
            return;
        }
        self.adopt_shared_welcome(pool);
        match linker::joining::welcome_cached(&mut self.clients, &self.linker, id, pool) {
            None => {}
            Some(true) => self.welcome_from_pool(id, pool),
            Some(false) => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    client.joining(self.now);
                }
                self.need_server(id);
            }
        }
    }

    /// This shard's slice of `pool` has logged no server in yet: it takes the welcome
    /// another shard's server login reported, so the client needs no server to log in.
    fn adopt_shared_welcome(&mut self, pool: PoolId) {
        if self.linker.pools().welcome(pool).is_some() {
            return;
        }
        let Some(key) = self.linker.pools().key(pool) else {
            return;
        };
        if let Some(params) = self.env.shared().shared_welcome(key) {
            self.linker.pools_mut().learn_welcome(pool, &params);
        }
    }

    /// The welcome (`ClientTable::welcome`); false when the client is gone or closing.
    fn welcome(&mut self, id: ClientId, params: &[(String, String)], pid: Option<u32>) -> bool {
        let welcomed = self.clients.welcome(
            id,
            params,
            pid,
            &self.env,
            self.random.as_mut(),
            &mut self.outbox,
        );
        match welcomed {
            Ok(welcomed) => {
                if welcomed {
                    self.count_login(id);
                }
                welcomed
            }
            Err(error) => {
                self.close_client(id, Some(error));
                false
            }
        }
    }

    /// A login succeeded (`SHOW STATS`' `total_client_login_count`).
    fn count_login(&mut self, id: ClientId) {
        if let Some(database) = self
            .clients
            .get(id.0)
            .and_then(|client| client.session())
            .and_then(|session| session.stats())
        {
            self.stats.logged_in(database);
        }
    }

    /// The welcome from the pool's cached parameters: no server needed.
    fn welcome_from_pool(&mut self, id: ClientId, pool: PoolId) {
        let Some(welcome) = self.linker.pools().welcome(pool).cloned() else {
            return;
        };
        if let Some(session) = self.clients.get_mut(id.0).and_then(|c| c.session_mut()) {
            session.tracked_mut().fill_from(&welcome.tracked);
        }
        if !self.welcome(id, &welcome.params, None) {
            return;
        }
        if let Some(client) = self.clients.get_mut(id.0) {
            client.idle(self.now);
        }
        self.on_idle_client_bytes(id);
    }

    /// A client's first server shows its startup values now: it is welcomed with the
    /// server's values (and, in session mode, the server's real pid); in transaction mode
    /// the server goes back at once.
    fn finish_welcome(&mut self, id: ClientId, server_id: ServerId) {
        let welcome = linker::joining::server_welcome(
            &mut self.clients,
            &mut self.servers,
            &mut self.linker,
            id,
            server_id,
        );
        let (params, pid, keeps_server) = match welcome {
            linker::joining::ServerWelcome::Gone => return,
            linker::joining::ServerWelcome::Refused(error) => {
                self.release_server(server_id);
                self.close_client(id, Some(error));
                return;
            }
            linker::joining::ServerWelcome::Ready {
                params,
                pid,
                keeps_server,
            } => (params, pid, keeps_server),
        };
        if !self.welcome(id, &params, pid) {
            return;
        }
        if keeps_server {
            if let Some(client) = self.clients.get_mut(id.0) {
                // It was joining, not queued: no cancel can have been held for it.
                let _ = client.linked(server_id);
                let database = client.session().and_then(|session| session.stats());
                self.stats.assigned(database);
            }
            self.forward(id, server_id);
        } else {
            self.release_server(server_id);
        }
    }

    /// The admin console's welcome, once the password is right.
    fn welcome_console(&mut self, id: ClientId) {
        let welcomed =
            self.clients
                .welcome_console(id, &self.env, self.random.as_mut(), &mut self.outbox);
        match welcomed {
            Ok(true) => {
                self.count_login(id);
                self.on_console_bytes(id);
            }
            Ok(false) => {}
            Err(error) => self.close_client(id, Some(error)),
        }
    }

    /// Moves a client off its replica, which went Down: a welcomed transaction-mode client
    /// with `repin_idle_sessions` is admitted again elsewhere; anyone else gets 08006.
    fn repin(&mut self, id: ClientId) {
        match self.clients.take_lease_to_move(id, &self.env) {
            client_login::Repin::Gone => {}
            client_login::Repin::Close(error) => self.close_client(id, Some(error)),
            client_login::Repin::Move(lease) => {
                let admission = self.routing.repin(lease, client_login::request_id(id));
                self.apply_admission(id, admission);
            }
        }
    }

    // ---- auth_query: a client's secret looked up on a server of the auth_user pool ----

    /// Parks the client on the `auth_user` pool of its database for a server to run the
    /// lookup on.
    fn start_lookup(&mut self, id: ClientId, method: Method, auth_user: &str) {
        let looked_up =
            client_login::lookup_key(&self.clients, id, auth_user, &self.env, self.admin.gates());
        let key = match looked_up {
            Ok(Some(key)) => key,
            Ok(None) => return,
            Err(error) => {
                self.close_client(id, Some(error));
                return;
            }
        };
        let pool = match self.register(&key) {
            Ok(pool) => pool,
            Err(error) => {
                let error = messages::fatal(sqlstate::TOO_MANY_CONNECTIONS, &error.to_string());
                self.close_client(id, Some(error));
                return;
            }
        };
        if !client_login::start_looking_up(&mut self.clients, id, pool, method, self.now) {
            return;
        }
        if let Some(error) = self.linker.pools().login_failure(pool, self.now) {
            // The auth_user's own login failed moments ago (a wrong password for it).
            self.close_client(id, Some(error));
            return;
        }
        self.need_server(id);
    }

    /// A server of the `auth_user` pool for a client waiting to be looked up.
    fn run_lookup(&mut self, id: ClientId, lease: Lease<ServerId>) {
        linker::joining::run_lookup(
            &mut self.clients,
            &mut self.servers,
            &self.env,
            id,
            lease,
            &mut self.outbox,
        );
    }

    /// Bytes of the lookup's answer.
    fn on_lookup_answer(&mut self, server_id: ServerId, client_id: ClientId) {
        match linker::joining::read_lookup(
            &mut self.clients,
            &mut self.servers,
            server_id,
            client_id,
        ) {
            linker::joining::LookupRead::Pending => {}
            linker::joining::LookupRead::Malformed => {
                self.server_failed(server_id, "server sent an invalid message", None);
            }
            linker::joining::LookupRead::Done(result) => {
                self.finish_lookup(client_id, server_id, result);
            }
        }
    }

    /// The answer is complete: the server goes back to its pool, the secret into the cache,
    /// and the client on to its password exchange.
    fn finish_lookup(&mut self, id: ClientId, server_id: ServerId, result: Result<Found, String>) {
        let Some(ended) = linker::joining::end_lookup(
            &mut self.clients,
            &mut self.servers,
            id,
            server_id,
            self.now,
        ) else {
            return;
        };
        self.advance_release(server_id);
        if let Some(pool) = ended.auth_pool {
            self.linker.pools_mut().unregister(pool);
        }
        match result {
            Ok(found) => {
                let no_user = found == Found::NoUser;
                self.clients.logins_mut().lookups_mut().store(
                    &ended.database,
                    &ended.user,
                    found,
                    self.now,
                );
                if no_user {
                    // PgBouncer's answer (it runs no decoy exchange after `auth_query`):
                    // clients and tools of a PgBouncer deployment see this text.
                    info!(database = %ended.database, user = %ended.user, "no such user");
                    let error = messages::fatal(
                        sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                        "no such user",
                    );
                    self.close_client(id, Some(error));
                    return;
                }
                self.begin_exchange(id, ended.method);
            }
            Err(error) => {
                let (database, user) = (&ended.database, &ended.user);
                warn!(%database, %user, %error, "auth_query failed");
                // PgBouncer's words for a lookup the server refused: the configuration
                // (the query, the auth_user's rights) is wrong, not the client's login.
                let error = messages::fatal(sqlstate::PROTOCOL_VIOLATION, "bouncer config error");
                self.close_client(id, Some(error));
            }
        }
    }
}

#[cfg(any(test, feature = "testing"))]
impl Engine {
    /// What must hold between any two events: a server in its pool's idle list owes nothing
    /// and carries nothing of its last client; a linked client and its server point at each
    /// other. For the fuzz target and the tests.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (slot, server) in self.servers.iter() {
            let id = ServerId(slot);
            match *server.state() {
                ServerState::Idle { .. } => {
                    if !server.backend().tracker().is_idle()
                        || server.backend().relay().owes_internal()
                    {
                        return Err(format!("{id:?} is idle in its pool but owes answers"));
                    }
                    if server.backend().reset() != crate::server::Reset::None {
                        return Err(format!("{id:?} is idle in its pool with a reset pending"));
                    }
                    if server.lease().is_some() {
                        return Err(format!("{id:?} is idle but its lease is not the pool's"));
                    }
                }
                ServerState::Busy { client } => {
                    let linked = self.clients.get(client.0).and_then(|c| c.server());
                    if linked != Some(id) {
                        return Err(format!(
                            "{id:?} serves {client:?}, which is not linked to it"
                        ));
                    }
                    if server.lease().is_none() {
                        return Err(format!("{id:?} is busy without its lease"));
                    }
                }
                _ => {}
            }
        }
        for (slot, client) in self.clients.iter() {
            let id = ClientId(slot);
            if let Some(server) = client.server() {
                let serves = self.servers.get(server.0).and_then(|s| s.client());
                if serves != Some(id) {
                    return Err(format!(
                        "{id:?} is linked to {server:?}, which does not serve it"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Every budget slot is back (everyone left and every server closed).
    pub fn check_budgets_released(&self) -> Result<(), String> {
        match self.env.shared().budgets.in_use() {
            0 => Ok(()),
            held => Err(format!("{held} budget slots are still held")),
        }
    }
}

/// PgBouncer's line for a server closed to make room for other clients (operators and its
/// test suite look for it).
fn log_eviction(id: ServerId, reason: pgtier_pool::CloseReason) {
    if reason.is_eviction() {
        info!(server = id.index(), "closing because: evicted");
    }
}
