//! The client table: every client connection of the shard, and what logins consult — the
//! secrets and `auth_query` answers cached, the session-state effects of recent texts, the
//! interned user and database names, the cancel keys handed out, and the client TLS
//! configuration.

use crate::cancel::CancelKeys;
use crate::client::ClientConn;
use crate::client::auth::SecretCache;
use crate::ids::{Slab, SlotRef};
use crate::tls::TlsAcceptor;

/// The shard's clients and their login caches.
pub(crate) struct ClientTable {
    slab: Slab<ClientConn>,
    logins: Logins,
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
