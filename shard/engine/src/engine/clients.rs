//! The client table: every client connection of the shard, and what logins consult — the
//! secrets and `auth_query` answers cached, the session-state effects of recent texts, the
//! interned user and database names, the cancel keys handed out, the client TLS
//! configuration, and each client's place in the per-database and per-user client counts.

use crate::cancel::CancelKeys;
use crate::client::ClientConn;
use crate::client::auth::SecretCache;
use crate::ids::{Slab, SlotRef};
use crate::tls::TlsAcceptor;

/// The shard's clients and their login caches.
pub(crate) struct ClientTable {
    slab: Slab<ClientConn>,
    logins: Logins,
    /// The places in the per-database and per-user client counts of the clients a
    /// `max_*_client_connections` limit counts (kept beside the slab so a `Session` stays
    /// small), given back when the client is removed.
    counted: std::collections::HashMap<SlotRef, crate::client_counts::Counted>,
}

/// What logins consult, beside the clients themselves.
pub(crate) struct Logins {
    secrets: SecretCache,
    /// Secrets found with `auth_query`.
    lookups: crate::client::lookup::LookupCache,
    /// Session-state effects of recently classified texts.
    texts: crate::client::texts::TextCache,
    /// Sessions' user and database names, shared.
    names: crate::names::Names,
    keys: CancelKeys,
    /// TLS for clients (replaced on reload).
    acceptor: Option<TlsAcceptor>,
}

impl ClientTable {
    pub(super) fn new(capacity: usize, shard: usize, acceptor: Option<TlsAcceptor>) -> ClientTable {
        ClientTable {
            slab: Slab::with_capacity(capacity),
            logins: Logins {
                secrets: SecretCache::default(),
                lookups: Default::default(),
                texts: Default::default(),
                names: Default::default(),
                keys: CancelKeys::new(shard),
                acceptor,
            },
            counted: std::collections::HashMap::new(),
        }
    }

    /// Client `slot` holds `counted` until it is removed.
    pub(super) fn hold_counts(&mut self, slot: SlotRef, counted: crate::client_counts::Counted) {
        if !counted.is_empty() {
            self.counted.insert(slot, counted);
        }
    }

    pub(super) fn logins(&self) -> &Logins {
        &self.logins
    }

    pub(super) fn logins_mut(&mut self) -> &mut Logins {
        &mut self.logins
    }

    /// A client and the login caches at once, for the steps that read the one into the
    /// other.
    pub(super) fn get_with_logins(
        &mut self,
        slot: SlotRef,
    ) -> Option<(&mut ClientConn, &mut Logins)> {
        Some((self.slab.get_mut(slot)?, &mut self.logins))
    }

    /// Queues `bytes` for client `id` (its backlog counts them until they are sent).
    pub(super) fn send(
        &mut self,
        id: crate::ids::ClientId,
        bytes: bytes::Bytes,
        outbox: &mut crate::action::Outbox,
    ) {
        if let Some(client) = self.get_mut(id.0) {
            client.backlog_mut().queued_for_send(bytes.len());
        }
        outbox.send(crate::action::Conn::Client(id), bytes);
    }

    pub(crate) fn get(&self, slot: SlotRef) -> Option<&ClientConn> {
        self.slab.get(slot)
    }

    pub(crate) fn get_mut(&mut self, slot: SlotRef) -> Option<&mut ClientConn> {
        self.slab.get_mut(slot)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlotRef, &ClientConn)> {
        self.slab.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut ClientConn> {
        self.slab.values_mut()
    }

    pub(super) fn insert(&mut self, client: ClientConn) -> Option<SlotRef> {
        self.slab.insert(client)
    }

    pub(super) fn remove(&mut self, slot: SlotRef) -> Option<ClientConn> {
        self.counted.remove(&slot);
        self.slab.remove(slot)
    }

    pub(super) fn slots(&self) -> Vec<SlotRef> {
        self.slab.slots()
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    /// Whether `client_id` is waiting for its lookup's answer (`relay_to_client` hands the
    /// server's bytes here instead of to the client).
    pub(super) fn is_looking_up(&self, client_id: crate::ids::ClientId) -> bool {
        self.get(client_id.0).is_some_and(|client| {
            matches!(client.state(), crate::client::ClientState::LookingUp { .. })
        })
    }

    /// A waiter left the pool's queue (handed a server, failed, moved): its ticket is spent.
    pub(super) fn clear_ticket(&mut self, id: crate::ids::ClientId) {
        if let Some(client) = self.get_mut(id.0) {
            client.parked(None);
        }
    }

    pub(super) fn reads_mut(
        &mut self,
        id: crate::ids::ClientId,
    ) -> Option<&mut crate::client::reads::ReaderSession> {
        self.get_mut(id.0)?.session_mut()?.reads_mut()
    }

    pub(super) fn set_pool(&mut self, id: crate::ids::ClientId, pool: pgtier_pool::PoolId) {
        if let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) {
            session.joined(pool);
        }
    }

    /// A reader entry's session registered its pool on the primary.
    pub(super) fn start_reader_session(
        &mut self,
        id: crate::ids::ClientId,
        primary: pgtier_pool::PoolId,
    ) {
        if let Some(session) = self.get_mut(id.0).and_then(|c| c.session_mut()) {
            session.become_reader(primary);
        }
    }

    /// The SCRAM channel binding of pgtier's certificate, for a client on TLS.
    pub(super) fn channel_binding_of(
        &self,
        id: crate::ids::ClientId,
    ) -> Option<pgtier_wire::auth::ChannelBinding> {
        let tls = self.get(id.0)?.tls()?;
        pgtier_wire::auth::ChannelBinding::from_certificate(tls.session.local_certificate_der()?)
            .ok()
    }

    pub(super) fn is_pinned(&self, id: crate::ids::ClientId) -> bool {
        self.get(id.0)
            .and_then(|client| client.session())
            .is_some_and(|session| session.pins_server())
    }

    /// Gives back the call logs that remember nothing, so an idle client holds none. Done
    /// here rather than at each answer: a busy session keeps its log from one transaction to
    /// the next instead of allocating one per transaction.
    pub(super) fn drop_empty_call_logs(&mut self) {
        for client in self.values_mut() {
            if let Some(session) = client.session_mut() {
                if session.calls_mut().is_some_and(|calls| calls.is_empty()) {
                    session.drop_calls();
                }
            }
        }
    }

    /// A client of the admin console (logged in, or logging in to it): KILL spares it.
    pub(super) fn is_console_client(&self, id: crate::ids::ClientId) -> bool {
        self.get(id.0).is_some_and(|client| {
            client.is_console()
                || client.session().is_some_and(|session| {
                    pgtier_core::config::is_admin_database(session.database())
                })
        })
    }

    pub(super) fn client_in(&self, id: crate::ids::ClientId, scope: &crate::gates::Scope) -> bool {
        self.get(id.0)
            .and_then(|client| client.session())
            .is_some_and(|session| scope.covers(session.database()))
    }
}

impl Logins {
    /// The secrets of the auth file's users, and what their logins taught.
    pub(super) fn secrets(&self) -> &SecretCache {
        &self.secrets
    }

    /// The secrets found with `auth_query`.
    pub(super) fn lookups(&self) -> &crate::client::lookup::LookupCache {
        &self.lookups
    }

    pub(super) fn lookups_mut(&mut self) -> &mut crate::client::lookup::LookupCache {
        &mut self.lookups
    }

    /// What a password exchange of `user` on `database` reads: the secret `auth_query`
    /// found, if any, and the secret cache it may learn into.
    pub(super) fn auth_caches(
        &mut self,
        database: &str,
        user: &str,
    ) -> (Option<&str>, &mut SecretCache) {
        (self.lookups.secret(database, user), &mut self.secrets)
    }

    /// Session-state effects of recently classified texts.
    pub(super) fn texts_mut(&mut self) -> &mut crate::client::texts::TextCache {
        &mut self.texts
    }

    /// A user or database name, shared with every session of the same name.
    pub(super) fn intern(&mut self, name: &str) -> std::sync::Arc<str> {
        self.names.intern(name)
    }

    /// The cancel keys handed to this shard's clients.
    pub(super) fn keys(&self) -> &CancelKeys {
        &self.keys
    }

    pub(super) fn keys_mut(&mut self) -> &mut CancelKeys {
        &mut self.keys
    }

    /// TLS for clients, when configured.
    pub(super) fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.acceptor.as_ref()
    }

    /// A reload: new connections use the new TLS configuration, and secrets are read
    /// again from the new auth file and `auth_query`.
    pub(super) fn reloaded(&mut self, acceptor: Option<TlsAcceptor>) {
        self.acceptor = acceptor;
        self.secrets.clear();
        self.lookups.clear();
    }
}
