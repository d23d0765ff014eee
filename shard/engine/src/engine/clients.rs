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
    pub(super) logins: Logins,
}

/// What logins consult, beside the clients themselves.
pub(crate) struct Logins {
    pub(super) secrets: SecretCache,
    /// Secrets found with `auth_query`.
    pub(super) lookups: crate::client::lookup::LookupCache,
    /// Session-state effects of recently classified texts.
    pub(super) texts: crate::client::texts::TextCache,
    /// Sessions' user and database names, shared.
    pub(super) names: crate::names::Names,
    pub(super) keys: CancelKeys,
    /// TLS for clients (replaced on reload).
    pub(super) acceptor: Option<TlsAcceptor>,
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
