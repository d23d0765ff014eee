//! Servers that move whole between shards (`crate::server::moved`): a server this shard
//! gives to another shard's waiting clients leaves with its socket when it is clean, and a
//! server another shard gave arrives here and is placed in its pool like one coming back.
//! The slot moves with the server: the budgets count it throughout, on the giving shard as
//! leaving, then in the `Command::ServerMoved` in transit, then on the taking shard.
//!
//! The steps here are the server table's and the linker's: a server is packed for its new
//! shard, and one that arrives is placed in its pool; the engine posts, closes and hands
//! the arrival to its pool's waiters (`mod.rs`).

use std::time::Instant;

use pgtier_pool::{Checkin, Lease, PoolId};
use tracing::debug;

use super::env::Env;
use super::linker::Linker;
use super::servers::ServerTable;
use crate::action::{Action, Outbox};
use crate::ids::{ClientId, ServerId};
use crate::server::moved::{DetachedSocket, MovedServer};
use crate::server::{ServerConn, ServerState};

/// A detached server, packed or not.
pub(super) enum Packed {
    /// It is not moving any more (it was closed in between): the engine closes it.
    NotMoving,
    /// It or its pool is gone.
    Gone,
    /// Its parcel, for shard `to` (boxed as `Command::ServerMoved` carries it).
    Parcel { to: usize, parcel: Box<MovedServer> },
}

/// A server that arrived, placed.
pub(super) enum Arrived {
    /// No server slot here: the engine closes its socket and gives its slot back.
    NoSlot(DetachedSocket),
    /// It may hold statements named by the shard it left: `DEALLOCATE ALL` goes first, and
    /// it joins its pool once that is answered.
    Deallocate { id: ServerId, bytes: bytes::Bytes },
    /// It is in the table, nothing more to do.
    Placed,
    /// The pool decided where it goes.
    Checkin {
        id: ServerId,
        checkin: Checkin<ServerId, ClientId>,
    },
}

impl Linker {
    /// Another shard waits for a server of `key`: give it one of ours, an idle one now if
    /// nobody waits here, else the next one to come back (moved whole when clean, else
    /// ended for its slot: `ServerTable::hand_on`).
    pub(super) fn release_idle_for(
        &mut self,
        servers: &mut ServerTable,
        key: &pgtier_pool::PoolKey,
        from: usize,
        shard: usize,
        now: Instant,
        outbox: &mut Outbox,
    ) {
        if let pgtier_pool::Release::Now(lease) = self.pools_mut().release_for(key, from) {
            let id = lease.server;
            if let Some(server) = servers.get_mut(id.0) {
                server.hold_lease(lease);
            }
            servers.hand_on(id, from, shard, now, outbox);
        }
    }

    /// Shard `from` would open a server of `key` and has none idle: lend it our most
    /// recently used idle server of that pool that can move whole (clean, see `is_movable`),
    /// unless clients wait for it here. False: nothing to lend; tell `from`.
    pub(super) fn lend_idle_to(
        &mut self,
        servers: &mut ServerTable,
        key: &pgtier_pool::PoolKey,
        from: usize,
        shard: usize,
        now: Instant,
        outbox: &mut Outbox,
    ) -> bool {
        let movable = |id: &ServerId| servers.get(id.0).is_some_and(ServerConn::is_movable);
        let Some(lease) = self.pools_mut().lend(key, from, movable) else {
            return false;
        };
        let id = lease.server;
        if let Some(server) = servers.get_mut(id.0) {
            server.hold_lease(lease);
        }
        servers.hand_on(id, from, shard, now, outbox);
        true
    }

    /// The driver detached moving server `id`'s socket: the server leaves the table with
    /// what it knows of its backend, and its pool counts it as moved.
    pub(super) fn pack(&mut self, servers: &mut ServerTable, id: ServerId, now: Instant) -> Packed {
        let moving = servers.get(id.0).and_then(|server| match *server.state() {
            ServerState::Moving { to, .. } => Some((to, server.pool())),
            _ => None,
        });
        let Some((to, pool)) = moving else {
            return Packed::NotMoving;
        };
        let (Some(key), Some(server)) = (self.pools().key(pool).cloned(), servers.remove(id.0))
        else {
            return Packed::Gone;
        };
        let welcome = self
            .pools()
            .welcome(pool)
            .map(|welcome| welcome.params.clone());
        let parcel = server.into_parcel(key, welcome, now);
        self.pools_mut().moved(pool, to);
        Packed::Parcel {
            to,
            parcel: Box::new(parcel),
        }
    }

    /// A server arrived from another shard (or came back undelivered) for `pool`: it
    /// becomes a server of the pool here.
    pub(super) fn arrive(
        &mut self,
        servers: &mut ServerTable,
        outbox: &mut Outbox,
        env: &Env,
        now: Instant,
        pool: PoolId,
        (parcel, socket): (MovedServer, DetachedSocket),
    ) -> Arrived {
        let mode = env.pool_mode_of(&parcel.key.database, &parcel.key.server_user);
        let prepared = mode.releases_at_idle_ready() && env.limits().max_prepared_statements > 0;
        let (server, parcel) = ServerConn::adopted(pool, parcel, mode, prepared, now);
        let Some(slot) = servers.insert(server) else {
            debug!(
                shard = env.shard(),
                "no server slot for a server that moved here"
            );
            return Arrived::NoSlot(socket);
        };
        let id = ServerId(slot);
        outbox.push(Action::Adopt { server: id, socket });
        if let Some(params) = parcel.welcome {
            self.pools_mut().learn_welcome(pool, &params);
        }
        let lease = Lease {
            server: id,
            opened_at: parcel.opened_at,
            idle_since: parcel.idle_since,
        };
        if parcel.statements && self.pools_mut().adopt_checked_out(pool) {
            // Statements named by the shard it left would collide with this shard's names:
            // they go first, and the server joins its pool once that is answered, by the
            // release path (its lease counted as checked out meanwhile).
            if let Some(server) = servers.get_mut(id.0) {
                let bytes = server.backend_mut().internal_query("DEALLOCATE ALL");
                server.hold_lease(lease);
                server.start_releasing(now);
                return Arrived::Deallocate { id, bytes };
            }
            // Not reached: the server was inserted just now.
            return Arrived::Placed;
        }
        // Idle past `server_check_delay` on the shard it left: checked before a client here
        // gets it, as a server idle here would be (it joins its pool once the check passes).
        if self.pools().key(pool).is_some()
            && servers.start_check_if_stale(&lease, env.config(), now, outbox)
        {
            self.pools_mut().adopt_checked_out(pool);
            return Arrived::Placed;
        }
        let checkin = self.pools_mut().adopt_server(pool, lease, now);
        Arrived::Checkin { id, checkin }
    }
}
