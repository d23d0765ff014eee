//! The server table: every server connection of the shard, and what opening and feeding
//! them needs — the resolver of configured hosts, the server TLS configuration, the
//! registry of named statements interned for transaction-mode clients, and the scratch
//! buffer pgtier's own messages are built in.

use bytes::Bytes;

use crate::action::{Action, CloseHow, Conn, Outbox};
use crate::engine::Resolver;
use crate::ids::{ServerId, Slab, SlotRef};
use crate::server::ServerConn;
use crate::tls::TlsConnector;

/// A Terminate message: a server ended on purpose closes its connection after it.
const TERMINATE: &[u8] = b"X\0\0\0\x04";

/// The shard's servers and what connects them.
pub(crate) struct ServerTable {
    /// This shard's index, for the log.
    shard: usize,
    slab: Slab<ServerConn>,
    /// Named statements of this shard's transaction-mode clients, interned.
    statements: crate::prepared::Registry,
    /// Where the messages pgtier writes of its own are built.
    scratch: bytes::BytesMut,
    resolver: Box<dyn Resolver>,
    /// TLS for servers (replaced on reload).
    connector: Option<TlsConnector>,
}

impl ServerTable {
    pub(super) fn new(
        shard: usize,
        capacity: usize,
        resolver: Box<dyn Resolver>,
        connector: Option<TlsConnector>,
    ) -> ServerTable {
        ServerTable {
            shard,
            slab: Slab::with_capacity(capacity),
            statements: Default::default(),
            scratch: bytes::BytesMut::new(),
            resolver,
            connector,
        }
    }

    pub(crate) fn get(&self, slot: SlotRef) -> Option<&ServerConn> {
        self.slab.get(slot)
    }

    pub(crate) fn get_mut(&mut self, slot: SlotRef) -> Option<&mut ServerConn> {
        self.slab.get_mut(slot)
    }

    /// A server with the statement registry and the scratch buffer, for a forward that
    /// rewrites statements on it.
    pub(super) fn get_with_statements(
        &mut self,
        slot: SlotRef,
    ) -> Option<(
        &mut ServerConn,
        &mut crate::prepared::Registry,
        &mut bytes::BytesMut,
    )> {
        Some((
            self.slab.get_mut(slot)?,
            &mut self.statements,
            &mut self.scratch,
        ))
    }

    /// Resolves a configured host name (the driver's resolver).
    pub(super) fn resolve(&self, host: &str, port: u16) -> Result<std::net::SocketAddr, String> {
        self.resolver.resolve(host, port)
    }

    /// TLS for servers, when configured.
    pub(super) fn connector(&self) -> Option<&TlsConnector> {
        self.connector.as_ref()
    }

    /// A reload: new server connections use the new TLS configuration.
    pub(super) fn reloaded(&mut self, connector: Option<TlsConnector>) {
        self.connector = connector;
    }

    /// The server TLS settings changed: every server is marked to close when released (its
    /// TLS was set up under the old settings); the idle ones are returned, to close now.
    pub(super) fn recycle_all(&mut self) -> Vec<ServerId> {
        let mut idle = Vec::new();
        for slot in self.slab.slots() {
            let Some(server) = self.slab.get_mut(slot) else {
                continue;
            };
            server.mark_close_needed();
            if matches!(server.state(), crate::server::ServerState::Idle { .. }) {
                idle.push(ServerId(slot));
            }
        }
        idle
    }

    /// The servers of `pools` still finishing with a departed client close once released
    /// instead of going back (a database is being vacated): how many.
    pub(super) fn close_when_released(&mut self, pools: &[pgtier_pool::PoolId]) -> usize {
        let mut releasing = 0usize;
        for server in self.slab.values_mut() {
            if pools.contains(&server.pool())
                && matches!(server.state(), crate::server::ServerState::Releasing { .. })
            {
                server.mark_close_needed();
                releasing += 1;
            }
        }
        releasing
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (SlotRef, &ServerConn)> {
        self.slab.iter()
    }

    pub(super) fn insert(&mut self, server: ServerConn) -> Option<SlotRef> {
        self.slab.insert(server)
    }

    pub(super) fn remove(&mut self, slot: SlotRef) -> Option<ServerConn> {
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

    /// Closes a server without touching pool accounting (already settled).
    pub(super) fn close_settled(&mut self, id: ServerId, outbox: &mut Outbox) {
        let Some(server) = self.get_mut(id.0) else {
            return;
        };
        if server.is_closing() {
            return;
        }
        server.mark_closing();
        outbox.push(Action::Close {
            conn: Conn::Server(id),
            how: CloseHow::Now,
        });
    }

    /// Sends a CancelRequest with the server's real key for what it is running; it is not
    /// given to anyone else until the cancel connection finishes.
    pub(super) fn send_cancel(&mut self, id: ServerId, outbox: &mut Outbox) {
        let Some(server) = self.get_mut(id.0) else {
            return;
        };
        let Some(key) = server.backend_mut().cancel_sent() else {
            return;
        };
        let addr = server.info().addr().clone();
        outbox.push(Action::SendCancel {
            server: id,
            addr,
            request: crate::messages::cancel_request(key.pid, key.secret),
        });
    }

    /// Ends `id` so its slot goes to shard `to` (`None`: back to the budgets, to make room
    /// under a cap): Terminate now; the slot moves when the server closes the connection.
    pub(super) fn leave_for(
        &mut self,
        id: ServerId,
        to: Option<usize>,
        now: std::time::Instant,
        outbox: &mut Outbox,
    ) {
        let Some(server) = self.slab.get_mut(id.0) else {
            return;
        };
        tracing::debug!(
            shard = self.shard,
            ?to,
            "ending a server to hand its slot on"
        );
        server.leaving(now, to);
        outbox.push(Action::ResumeRecv(Conn::Server(id)));
        outbox.send(Conn::Server(id), Bytes::from_static(TERMINATE));
    }
}
