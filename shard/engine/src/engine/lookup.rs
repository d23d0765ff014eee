//! `auth_query`: a client the auth file does not list, on a database with an `auth_user`,
//! parks on the pool of (database, auth_user) like any client waiting for a server; the
//! server it gets runs `auth_query` for the client's name and goes back to the pool, and
//! the client's password exchange checks the secret found. The lookup is bounded like any
//! use of a pool (its size, `query_wait_timeout` while parked) and as a whole by
//! `server_connect_timeout`; the secrets found are cached (`client::lookup`), so only a
//! login storm of new users reaches the server.

use pgtier_pool::{Lease, PoolError, PoolKey, ServerTarget, StartupProfile};
use tracing::warn;

use crate::action::Conn;
use crate::client::ClientState;
use crate::client::auth_method::Method;
use crate::client::lookup::{self, Answer, Found};
use crate::engine::Engine;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};

impl Engine {
    /// The `auth_user` whose server must look the client's secret up before `method` can
    /// check it: a password method, a user the auth file does not list, a database with an
    /// `auth_user`, and no secret found recently.
    pub(super) fn lookup_user_for(&self, id: ClientId, method: Method) -> Option<String> {
        if matches!(method, Method::Trust | Method::Cert) {
            return None;
        }
        let session = self.clients.get(id.0)?.session()?;
        if self.env.users().get(session.user()).is_some() {
            return None;
        }
        let auth_user = self
            .env
            .config()
            .database(session.database())?
            .auth_user
            .clone()?;
        if self
            .clients
            .logins()
            .lookups()
            .is_fresh(session.database(), session.user(), self.now)
        {
            return None;
        }
        Some(auth_user)
    }

    /// Parks the client on the `auth_user` pool of its database for a server to run the
    /// lookup on.
    pub(super) fn start_lookup(&mut self, id: ClientId, method: Method, auth_user: &str) {
        let Some(session) = self.clients.get(id.0).and_then(|c| c.session()) else {
            return;
        };
        let key = PoolKey::new(
            (**session.database()).into(),
            auth_user.into(),
            ServerTarget::Primary,
            StartupProfile::default(),
        );
        let limits = self.env.pool_limits(&key);
        let registered = match self.linker.pools_mut().register(&key, &limits, self.now) {
            Err(PoolError::TooManyPools { .. }) => {
                self.evict_a_pool();
                self.linker.pools_mut().register(&key, &limits, self.now)
            }
            registered => registered,
        };
        let pool = match registered {
            Ok(pool) => pool,
            Err(error) => {
                let error = messages::fatal(sqlstate::TOO_MANY_CONNECTIONS, &error.to_string());
                self.close_client(id, Some(error));
                return;
            }
        };
        let since = self.now;
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        if let Some(session) = client.session_mut() {
            session.joined(pool);
        }
        client.looking_up(since, Box::default(), method);
        if let Some(error) = self.linker.pools().login_failure(pool, self.now).cloned() {
            // The auth_user's own login failed moments ago (a wrong password for it).
            self.close_client(id, Some(error));
            return;
        }
        self.need_server(id);
    }

    /// A server of the `auth_user` pool for a client waiting to be looked up: the query
    /// goes out.
    pub(super) fn run_lookup(&mut self, id: ClientId, lease: Lease<ServerId>) {
        let server_id = lease.server;
        let query = self.env.config().pgtier.auth_query.clone();
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let user = client
            .session()
            .map(|session| session.user().clone())
            .unwrap_or_default();
        client.lookup_runs_on(server_id);
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        server.looks_up_for(id, lease);
        self.send(Conn::Server(server_id), lookup::request(&query, &user));
    }

    /// Bytes of the lookup's answer.
    pub(super) fn on_lookup_answer(&mut self, server_id: ServerId, client_id: ClientId) {
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let Some(client) = self.clients.get_mut(client_id.0) else {
            return;
        };
        let Some(answer) = client.lookup_answer_mut() else {
            return;
        };
        match answer.read(server.io_mut().input_mut().buffer_mut()) {
            Answer::NeedMore => {}
            Answer::Malformed => {
                self.server_failed(server_id, "server sent an invalid message", None);
            }
            Answer::Done(result) => self.finish_lookup(client_id, server_id, result),
        }
    }

    /// The answer is complete: the server goes back to its pool, the secret into the cache,
    /// and the client on to its password exchange.
    fn finish_lookup(&mut self, id: ClientId, server_id: ServerId, result: Result<Found, String>) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let ClientState::LookingUp { method, .. } = client.take_login_step() else {
            return;
        };
        let Some(session) = client.session_mut() else {
            return;
        };
        let auth_pool = session.leave_pool();
        let (database, user) = (session.database().clone(), session.user().clone());
        if let Some(server) = self.servers.get_mut(server_id.0) {
            server.start_releasing(self.now);
        }
        self.advance_release(server_id);
        if let Some(pool) = auth_pool {
            self.linker.pools_mut().unregister(pool);
        }
        match result {
            Ok(found) => {
                self.clients
                    .logins_mut()
                    .lookups_mut()
                    .store(&database, &user, found, self.now);
                self.begin_exchange(id, method);
            }
            Err(error) => {
                warn!(%database, %user, %error, "auth_query failed");
                let error = messages::fatal(
                    sqlstate::INVALID_AUTHORIZATION_SPECIFICATION,
                    "authentication lookup (auth_query) failed; see pgtier's log",
                );
                self.close_client(id, Some(error));
            }
        }
    }
}
