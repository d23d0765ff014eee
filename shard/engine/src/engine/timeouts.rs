//! PgBouncer's timeouts as the tables find them: the clients past a login, wait, idle,
//! query or transaction limit (and those whose final error lingered too long), and the
//! servers past their connect or drain limit. The engine closes what they report. A client's
//! wait, idle, query and transaction limits are its user's (`[users]`) and its database's
//! where they set their own, as PgBouncer 1.25 resolves them; the reasons are PgBouncer's
//! words, which is what its users' tools and its test suite match on.

use std::time::{Duration, Instant};

use pgtier_core::config::Config;
use pgtier_wire::SqlState;

use super::clients::ClientTable;
use super::servers::ServerTable;
use crate::client::ClientState;
use crate::ids::{ClientId, ServerId};
use crate::messages::sqlstate;
use crate::server::ServerState;

/// PgBouncer's client timeouts, `None` where disabled: the global ones, and the
/// configuration that may set a user's or a database's own.
pub(super) struct ClientTimeouts<'a> {
    /// Set when some `[users]` or database entry has its own timeouts.
    own: Option<&'a Config>,
    login: Option<Duration>,
    wait: Option<Duration>,
    idle: Option<Duration>,
    idle_in_transaction: Option<Duration>,
    query: Option<Duration>,
    /// The global `query_timeout` (a user's own does not apply): it also bounds the wait for
    /// a server, as PgBouncer's does.
    query_waiting: Option<Duration>,
    transaction: Option<Duration>,
    /// An `auth_query` lookup, from parking on the `auth_user` pool to its answer.
    lookup: Option<Duration>,
}

impl ClientTimeouts<'_> {
    /// The limits of `client`: its user's and database's where the configuration sets them.
    fn of(&self, client: &crate::client::ClientConn) -> ClientTimeouts<'static> {
        let global = ClientTimeouts {
            own: None,
            login: self.login,
            wait: self.wait,
            idle: self.idle,
            idle_in_transaction: self.idle_in_transaction,
            query: self.query,
            query_waiting: self.query_waiting,
            transaction: self.transaction,
            lookup: self.lookup,
        };
        let (Some(config), Some(session)) = (self.own, client.session()) else {
            return global;
        };
        let user = session.user();
        let own = config.client_timeouts(user);
        ClientTimeouts {
            wait: config
                .query_wait_timeout(config.database(session.database()), user)
                .enabled(),
            idle: own.client_idle_timeout.enabled(),
            idle_in_transaction: own.idle_transaction_timeout.enabled(),
            query: own.query_timeout.enabled(),
            transaction: own.transaction_timeout.enabled(),
            ..global
        }
    }

    /// The timeout a client ran past, with the SQLSTATE and reason it is closed with.
    fn expired(
        &self,
        client: &crate::client::ClientConn,
        server: LinkPhase,
        now: Instant,
    ) -> Option<(SqlState, &'static str)> {
        let limits = self.of(client);
        let over = |since: Instant, limit: Option<Duration>| {
            limit.is_some_and(|limit| now.saturating_duration_since(since) > limit)
        };
        let session = client.session();
        let started = Started {
            query: session.and_then(|s| s.query_started()),
            transaction: session.and_then(|s| s.transaction_started()),
            ready: session.and_then(|s| s.last_ready()),
        };
        limits.expired_with(client, server, started, &over)
    }

    /// [`Self::expired`] with this client's limits.
    fn expired_with(
        &self,
        client: &crate::client::ClientConn,
        server: LinkPhase,
        started: Started,
        over: &dyn Fn(Instant, Option<Duration>) -> bool,
    ) -> Option<(SqlState, &'static str)> {
        match *client.state() {
            ClientState::Startup
            | ClientState::Authenticating(_)
            | ClientState::Refused { .. }
            | ClientState::LookingUp { .. }
                if over(client.info().connected_at(), self.login) =>
            {
                Some((sqlstate::PROTOCOL_VIOLATION, "client_login_timeout"))
            }
            ClientState::LookingUp { since, .. } if over(since, self.lookup) => {
                Some((sqlstate::CONNECTION_FAILURE, "server_connect_timeout"))
            }
            ClientState::Routing { since, .. } if over(since, self.wait) => {
                Some((sqlstate::PROTOCOL_VIOLATION, "query_wait_timeout"))
            }
            // Waiting for a server counts against `query_timeout` too (its waiting spelling).
            ClientState::Joining { since, .. } | ClientState::Queued { since, .. }
                if over(since, self.query_waiting) =>
            {
                Some((sqlstate::PROTOCOL_VIOLATION, "query_timeout"))
            }
            ClientState::Idle { since }
                if over(since.max(client.info().last_active()), self.idle) =>
            {
                Some((sqlstate::IDLE_SESSION_TIMEOUT, "client_idle_timeout"))
            }
            ClientState::Console { .. } if over(client.info().last_active(), self.idle) => {
                Some((sqlstate::IDLE_SESSION_TIMEOUT, "client_idle_timeout"))
            }
            ClientState::Linked { .. } => self.linked_expired(client, server, started, over),
            _ => None,
        }
    }

    /// A linked client's query, idle-in-transaction and transaction limits, checked in
    /// PgBouncer's order; none applies once its server is idle outside a transaction.
    fn linked_expired(
        &self,
        client: &crate::client::ClientConn,
        server: LinkPhase,
        started: Started,
        over: &dyn Fn(Instant, Option<Duration>) -> bool,
    ) -> Option<(SqlState, &'static str)> {
        if server == LinkPhase::Idle {
            return None;
        }
        if started.query.is_some_and(|at| over(at, self.query)) {
            return Some((sqlstate::PROTOCOL_VIOLATION, "query timeout"));
        }
        // Idle since the later of its last message and its server's last ReadyForQuery.
        let idle_since = started.ready.map_or(client.info().last_active(), |ready| {
            ready.max(client.info().last_active())
        });
        if server == LinkPhase::IdleInTransaction && over(idle_since, self.idle_in_transaction) {
            return Some((sqlstate::PROTOCOL_VIOLATION, "idle transaction timeout"));
        }
        if started
            .transaction
            .is_some_and(|at| over(at, self.transaction))
        {
            return Some((sqlstate::PROTOCOL_VIOLATION, "transaction timeout"));
        }
        None
    }
}

/// When a linked client's current query and transaction started, if they run, and when its
/// server last said ReadyForQuery.
#[derive(Clone, Copy)]
struct Started {
    query: Option<Instant>,
    transaction: Option<Instant>,
    ready: Option<Instant>,
}

/// Where a client's server stands, as the timeouts see it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LinkPhase {
    /// No server, or one idle outside a transaction block.
    Idle,
    /// Nothing running, inside a transaction block.
    IdleInTransaction,
    /// Running something.
    Busy,
}

impl ClientTimeouts<'_> {
    pub(super) fn from_config(config: &Config) -> ClientTimeouts<'_> {
        let s = &config.pgtier;
        ClientTimeouts {
            own: config.has_own_client_timeouts().then_some(config),
            login: s.client_login_timeout.enabled(),
            wait: s.query_wait_timeout.enabled(),
            idle: s.client_idle_timeout.enabled(),
            idle_in_transaction: s.idle_transaction_timeout.enabled(),
            query: s.query_timeout.enabled(),
            query_waiting: s.query_timeout.enabled(),
            transaction: s.transaction_timeout.enabled(),
            lookup: s.server_connect_timeout.enabled(),
        }
    }
}

/// The clients past a timeout, with the SQLSTATE and reason each is closed with.
pub(super) type Expired = Vec<(ClientId, SqlState, &'static str)>;

impl ClientTable {
    /// The clients past a timeout at `now` (`servers`: where a linked one's server stands),
    /// and the closing ones whose final error lingered past its time.
    pub(super) fn timed_out(
        &self,
        limits: &ClientTimeouts<'_>,
        servers: &ServerTable,
        now: Instant,
    ) -> (Expired, Vec<ClientId>) {
        let mut expired: Expired = Vec::new();
        let mut linger_over = Vec::new();
        for (slot, client) in self.iter() {
            let id = ClientId(slot);
            if let ClientState::Closing {
                linger_until: Some(until),
            } = *client.state()
            {
                if until <= now {
                    linger_over.push(id);
                }
                continue;
            }
            let phase = match client.server().and_then(|server| servers.get(server.0)) {
                None => LinkPhase::Idle,
                Some(server) => {
                    let tracker = server.backend().tracker();
                    if tracker.idle_in_transaction() {
                        LinkPhase::IdleInTransaction
                    } else if tracker.is_idle() {
                        LinkPhase::Idle
                    } else {
                        LinkPhase::Busy
                    }
                }
            };
            if let Some((code, name)) = limits.expired(client, phase, now) {
                expired.push((id, code, name));
            }
        }
        (expired, linger_over)
    }
}

/// What a client waiting past `query_wait_notify` is told, once per wait (PgBouncer's words).
const WAIT_NOTICE: &str = "No server connection available in postgres backend, client being queued";

impl ClientTable {
    /// Tells each welcomed client that has waited for a server longer than `after` (once
    /// per wait) that it is queued, as a NOTICE.
    pub(super) fn notify_long_waits(
        &mut self,
        after: Duration,
        now: Instant,
        outbox: &mut crate::action::Outbox,
    ) {
        let owed: Vec<ClientId> = self
            .iter()
            .filter(|(_, client)| client.owes_wait_notice(after, now))
            .map(|(slot, _)| ClientId(slot))
            .collect();
        for id in owed {
            if let Some(client) = self.get_mut(id.0) {
                client.wait_notified();
            }
            let mut notice = bytes::BytesMut::new();
            crate::messages::notice(&mut notice, WAIT_NOTICE);
            self.send(id, notice.freeze(), outbox);
        }
    }
}

impl ServerTable {
    /// The servers past `server_connect_timeout` while connecting or logging in (they
    /// failed), and those draining, checked or leaving past `drain_limit` (they retire).
    pub(super) fn timed_out(
        &self,
        connect: Option<Duration>,
        drain_limit: Duration,
        now: Instant,
    ) -> (Vec<ServerId>, Vec<ServerId>) {
        let over = |since: Instant, limit: Duration| now.saturating_duration_since(since) > limit;
        let mut failed = Vec::new();
        let mut retire = Vec::new();
        for (slot, server) in self.iter() {
            let id = ServerId(slot);
            match server.state() {
                ServerState::Connecting { since }
                | ServerState::Negotiating { since }
                | ServerState::LoggingIn { since, .. }
                    if connect.is_some_and(|limit| over(*since, limit)) =>
                {
                    failed.push(id);
                }
                ServerState::Releasing { since, .. }
                | ServerState::Checking { since }
                | ServerState::Leaving { since, .. }
                | ServerState::Moving { since, .. }
                    if over(*since, drain_limit) =>
                {
                    retire.push(id);
                }
                _ => {}
            }
        }
        (failed, retire)
    }
}
