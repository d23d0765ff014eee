//! Server connections, the server table's side: the connect, the login (what it sends and
//! what the server's answers mean), draining a server that left its client, bytes from an
//! idle server. Each step says what happened and leaves the rest to the engine: the pool
//! learns of a login (`linker/opening.rs`), a failure is closed and reported there, and the
//! output of a server that serves a client is the linker's (`linker/to_client.rs`).

use std::time::Instant;

use bytes::Bytes;
use pgtier_core::config::Config;
use pgtier_pool::PoolId;

use super::clients::Logins;
use super::env::Env;
use super::linker::Linker;
use super::servers::ServerTable;
use crate::action::{Conn, Outbox};
use crate::ids::ServerId;
use crate::messages::{self, sqlstate};
use crate::random::Random;
use crate::server::ServerState;
use crate::server::login::{Credentials, LoginStep, ServerLogin};
use crate::services::FailureCause;

/// Why a connect failed, for the replica router.
fn connect_failure_cause(errno: i32) -> FailureCause {
    match errno {
        libc_like::ETIMEDOUT => FailureCause::ConnectTimeout,
        libc_like::ECONNRESET | libc_like::EPIPE => FailureCause::ConnectionReset,
        _ => FailureCause::ConnectionRefused,
    }
}

/// The errno values the engine tells apart (Linux's), without depending on libc.
pub(super) mod libc_like {
    pub const EPIPE: i32 = 32;
    pub const ECONNRESET: i32 = 104;
    pub const ETIMEDOUT: i32 = 110;
}

/// What a finished connect leads to.
pub(super) enum Connected {
    /// Not a server waiting for its connect (gone, or already past it).
    Ignored,
    /// It failed: this error for the pool's waiters, this cause for the replica router.
    Unreachable(Bytes, FailureCause),
    /// The SSLRequest went; its answer comes as bytes.
    Negotiating,
    /// Plain connection: the login starts now.
    StartLogin,
}

/// Where a server's login stands after its bytes.
pub(super) enum LoginProgress {
    /// More of the exchange to come (a reply may have been sent).
    Pending,
    /// The server refused: this error for the pool's waiters.
    Failed(Bytes),
    /// Logged in: the pool can have it.
    Done,
}

/// What a server without a client does next after its output was swallowed.
pub(super) enum Drained {
    Nothing,
    /// It sent something unusable: close it.
    Close,
    /// Its liveness check answered.
    FinishCheck,
    /// Its release can go on.
    AdvanceRelease,
}

/// What bytes from an idle server mean.
pub(super) struct IdleOutput {
    pub(super) pool: PoolId,
    /// Anything but parameter changes and notices: it cannot be used any more.
    pub(super) retire: bool,
    /// It announced its shutdown (the replica router hears of it).
    pub(super) shutting_down: bool,
}

impl ServerTable {
    /// Server `id`'s connect completed (or failed with `errno`); on a plain connection the
    /// caller starts the login, with TLS the SSLRequest is sent now.
    pub(super) fn connected(
        &mut self,
        id: ServerId,
        result: Result<(), i32>,
        now: Instant,
        outbox: &mut Outbox,
    ) -> Connected {
        let Some(server) = self.get_mut(id.0) else {
            return Connected::Ignored;
        };
        if !matches!(server.state(), ServerState::Connecting { .. }) {
            return Connected::Ignored;
        }
        if let Err(errno) = result {
            let message = format!(
                "could not connect to server {}: {}",
                server.info().addr(),
                std::io::Error::from_raw_os_error(errno)
            );
            let error = messages::fatal(sqlstate::CONNECTION_FAILURE, &message);
            return Connected::Unreachable(error, connect_failure_cause(errno));
        }
        if self.negotiate_tls(id, now, outbox) {
            return Connected::Negotiating;
        }
        Connected::StartLogin
    }

    /// Sends the StartupMessage (over TLS when the server accepted it).
    pub(super) fn start_login(
        &mut self,
        id: ServerId,
        linker: &Linker,
        config: &Config,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        let Some(server) = self.get_mut(id.0) else {
            return;
        };
        let pool = server.pool();
        let Some(key) = linker.pools().key(pool) else {
            return;
        };
        let entry = config.database(&key.database);
        let dbname = super::linker::vacate::server_dbname(config, key);
        let mut params: Vec<(&str, &str)> = key.profile.parameters().collect();
        // The entry's connect parameters (pgbouncer.ini's client_encoding, datestyle,
        // timezone) open every server of the entry. These are tracked parameters, so a client
        // that sent its own value gets it with SET when linked; a duplicate is never sent.
        for (name, value) in entry.map_or(&[][..], |db| db.connect_params.as_slice()) {
            if !params
                .iter()
                .any(|(given, _)| given.eq_ignore_ascii_case(name))
            {
                params.push((name, value));
            }
        }
        let startup = ServerLogin::startup_message(&key.server_user, dbname, &params);
        server.logging_in(now, entry.and_then(|db| db.connect_query.as_deref()));
        outbox.send(Conn::Server(id), startup);
    }

    /// The server's login answers so far: the exchange's next reply is sent; says whether
    /// the login is over. The password comes from the database entry, the auth file or
    /// an `auth_query` answer (`logins`), in that order.
    pub(super) fn login_step(
        &mut self,
        id: ServerId,
        linker: &Linker,
        env: &Env,
        logins: &Logins,
        random: &mut dyn Random,
        outbox: &mut Outbox,
    ) -> LoginProgress {
        let Some(server) = self.get_mut(id.0) else {
            return LoginProgress::Pending;
        };
        let Some(key) = linker.pools().key(server.pool()) else {
            return LoginProgress::Pending;
        };
        let channel_binding = server
            .io()
            .tls()
            .filter(|session| !session.is_handshaking())
            .and_then(|session| session.peer_certificate_der())
            .and_then(|der| pgtier_wire::auth::ChannelBinding::from_certificate(der).ok());
        let password = env
            .config()
            .database(&key.database)
            .and_then(|db| db.password.clone())
            .or_else(|| env.users().get(&key.server_user))
            .or_else(|| {
                logins
                    .lookups()
                    .secret(&key.database, &key.server_user)
                    .map(str::to_string)
            });
        let client_key = logins
            .secrets()
            .client_key(&key.server_user)
            .or_else(|| logins.lookups().client_key(&key.database, &key.server_user));
        let credentials = Credentials {
            user: &key.server_user,
            password: password.as_deref(),
            client_key,
            channel_binding,
            key_cache: Some(&env.shared().scram_keys),
        };
        let Some((login, input)) = server.login_mut() else {
            return LoginProgress::Pending;
        };
        match login.step(input.buffer_mut(), credentials, random) {
            LoginStep::Continue { reply } => {
                if let Some(reply) = reply {
                    outbox.send(Conn::Server(id), reply);
                }
                LoginProgress::Pending
            }
            LoginStep::Failed { error, .. } => LoginProgress::Failed(error),
            LoginStep::Done => LoginProgress::Done,
        }
    }

    /// Swallows everything from a server without a client; says its next step.
    pub(super) fn drain(&mut self, id: ServerId, max_message_bytes: usize) -> Drained {
        let Some(server) = self.get_mut(id.0) else {
            return Drained::Nothing;
        };
        // Its client is gone: what the answers decided for its names concerns no one.
        let scan = server.drain_output(max_message_bytes);
        if scan.malformed || scan.oversized.is_some() {
            return Drained::Close;
        }
        match server.state() {
            ServerState::Checking { .. } if scan.idle => Drained::FinishCheck,
            ServerState::Releasing { .. } => Drained::AdvanceRelease,
            _ => Drained::Nothing,
        }
    }

    /// Reads the bytes of a server nobody uses: parameter changes and notices are fine;
    /// anything else (typically a FATAL before the backend exits) retires it.
    pub(super) fn idle_output(&mut self, id: ServerId) -> Option<IdleOutput> {
        let server = self.get_mut(id.0)?;
        let pool = server.pool();
        let (retire, shutting_down) = server.read_idle_output();
        Some(IdleOutput {
            pool,
            retire,
            shutting_down,
        })
    }

    /// The server answered its CancelRequest's connection (it closed): false when the
    /// server is gone.
    pub(super) fn cancel_done(&mut self, id: ServerId) -> bool {
        let Some(server) = self.get_mut(id.0) else {
            return false;
        };
        server.backend_mut().cancel_done();
        true
    }
}

// ---- servers the pool gives up, checks before use, servers handed to another shard ----

impl ServerTable {
    /// Closes a server whose budget the pool already settled (it decided the close).
    pub(super) fn close_unpooled(&mut self, id: ServerId, outbox: &mut Outbox) {
        if let Some(server) = self.get_mut(id.0) {
            server.take_lease();
        }
        self.close_settled(id, outbox);
    }

    /// Ends an idle server the pool took out to close: one that still holds its slots
    /// leaves (Terminate, slots given back once its backend is gone); the others close.
    pub(super) fn retire(
        &mut self,
        closing: pgtier_pool::Closing<ServerId>,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        let id = closing.lease.server;
        if closing.leaving {
            if let Some(server) = self.get_mut(id.0) {
                server.hold_lease(closing.lease);
            }
            self.leave_for(id, None, now, outbox);
        } else {
            self.close_unpooled(id, outbox);
        }
    }

    /// Server `id` (holding its lease, counted as leaving for shard `to`) goes to shard
    /// `to`: whole when it is clean (its socket is detached first, `moving.rs`), else it is
    /// ended and its slot goes once its connection is closed.
    pub(super) fn hand_on(
        &mut self,
        id: ServerId,
        to: usize,
        shard: usize,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        let Some(server) = self.get_mut(id.0) else {
            return;
        };
        if !server.is_movable() {
            self.leave_for(id, Some(to), now, outbox);
            return;
        }
        tracing::debug!(shard, to, "moving an idle server to another shard");
        server.moving(now, to);
        outbox.push(crate::action::Action::Detach(id));
    }

    /// A server idle longer than `server_check_delay` runs `server_check_query` before a
    /// client gets it (PgBouncer's check): true when the check was started.
    pub(super) fn start_check_if_stale(
        &mut self,
        lease: &pgtier_pool::Lease<ServerId>,
        config: &Config,
        now: Instant,
        outbox: &mut Outbox,
    ) -> bool {
        if !self.is_stale(lease, config, now) {
            return false;
        }
        self.start_check(lease, config, now, outbox);
        true
    }

    /// Whether the idle server of `lease` is due for `server_check_query` before a client
    /// gets it (`start_check_if_stale`).
    pub(super) fn is_stale(
        &self,
        lease: &pgtier_pool::Lease<ServerId>,
        config: &Config,
        now: Instant,
    ) -> bool {
        let settings = &config.pgtier;
        if settings.server_check_query.is_empty() {
            return false;
        }
        // Strictly longer: a server that just passed its check (idle since this pass) is
        // not checked again, even with `server_check_delay = 0`. Written as a deadline
        // compare, cheaper than a clock subtraction on every checkout; a delay too long to
        // add never comes due.
        let delay = settings.server_check_delay.duration();
        if lease
            .idle_since
            .checked_add(delay)
            .is_none_or(|due| now <= due)
        {
            return false;
        }
        let Some(server) = self.get(lease.server.0) else {
            return false;
        };
        // With no delay PgBouncer checks the servers its clients released, not one that
        // has only logged in (or passed its check) since.
        if delay.is_zero() && !server.used_since_check() {
            return false;
        }
        true
    }

    /// Sends `server_check_query` to the server of `lease`, which holds the lease until the
    /// answer (`is_stale` said it is due).
    pub(super) fn start_check(
        &mut self,
        lease: &pgtier_pool::Lease<ServerId>,
        config: &Config,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        let settings = &config.pgtier;
        let id = lease.server;
        let Some(server) = self.get_mut(id.0) else {
            return;
        };
        let bytes = server
            .backend_mut()
            .internal_query(check_query_text(&settings.server_check_query));
        server.checking(
            now,
            pgtier_pool::Lease {
                server: lease.server,
                opened_at: lease.opened_at,
                idle_since: lease.idle_since,
            },
        );
        outbox.send(Conn::Server(id), bytes);
    }

    /// Whether server `id`'s check failed (an error, or not idle after it); `None` when it
    /// is gone.
    pub(super) fn check_failed(&mut self, id: ServerId) -> Option<bool> {
        let server = self.get_mut(id.0)?;
        Some(
            server
                .backend_mut()
                .relay_mut()
                .take_swallowed_error()
                .is_some()
                || !server.backend().tracker().is_idle(),
        )
    }
}

/// The text `server_check_query` sends: PgBouncer's `<empty>` is the empty query (the
/// cheapest round trip, answered with EmptyQueryResponse).
fn check_query_text(setting: &str) -> &str {
    if setting == EMPTY_CHECK_QUERY {
        ""
    } else {
        setting
    }
}

/// PgBouncer's spelling of "send an empty query" in `server_check_query`.
const EMPTY_CHECK_QUERY: &str = "<empty>";
