//! Servers that move whole between shards (`crate::server::moved`): a server this shard
//! gives to another shard's waiting clients leaves with its socket when it is clean, and a
//! server another shard gave arrives here and is placed in its pool like one coming back.
//! The slot moves with the server: the budgets count it throughout, on the giving shard as
//! leaving, then in the `Command::ServerMoved` in transit, then on the taking shard.

use pgtier_core::config::PoolMode;
use pgtier_pool::{Lease, PoolError};
use tracing::debug;

use crate::action::Action;
use crate::command::Command;
use crate::engine::Engine;
use crate::ids::ServerId;
use crate::server::moved::{DetachedSocket, MovedServer};
use crate::server::{ServerConn, ServerState};

impl Engine {
    /// Server `id` (holding its lease, counted as leaving for shard `to`) goes to shard `to`:
    /// whole when it is clean (its socket is detached first), else it is ended and its slot
    /// goes once its connection is closed.
    pub(super) fn hand_on(&mut self, id: ServerId, to: usize) {
        let Some(server) = self.servers.get_mut(id.0) else {
            return;
        };
        if !server.is_movable() {
            self.leave_for(id, Some(to));
            return;
        }
        debug!(
            shard = self.env.shard(),
            to, "moving an idle server to another shard"
        );
        server.moving(self.now, to);
        self.outbox.push(Action::Detach(id));
    }

    /// The driver detached moving server `id`'s socket: the server leaves this shard with
    /// what it knows of its backend. The socket comes back (for the driver to close) when
    /// the server is not moving any more (it was closed in between).
    pub(super) fn on_detached(
        &mut self,
        id: ServerId,
        socket: DetachedSocket,
    ) -> Option<DetachedSocket> {
        let moving = self
            .servers
            .get(id.0)
            .and_then(|server| match *server.state() {
                ServerState::Moving { to, .. } => Some((to, server.pool())),
                _ => None,
            });
        let Some((to, pool)) = moving else {
            // Closed while the driver detached it: its accounting is settled (or is now);
            // the connection is gone from the driver's table, so nothing else frees it.
            self.close_server(id);
            self.servers.remove(id.0);
            return Some(socket);
        };
        let (Some(key), Some(server)) = (
            self.linker.pools().key(pool).cloned(),
            self.servers.remove(id.0),
        ) else {
            return Some(socket);
        };
        let welcome = self
            .linker
            .pools()
            .welcome(pool)
            .map(|welcome| welcome.params.clone());
        let parcel = server.into_parcel(key, welcome, self.now);
        self.linker.pools_mut().moved(pool, to);
        self.outbox.push(Action::Post {
            shard: to,
            command: Command::ServerMoved {
                server: Box::new(parcel),
                socket,
            },
        });
        // A PAUSE or WAIT_CLOSE may have waited for this one.
        self.progress_admin_ops();
        None
    }

    /// A server arrived from another shard (or came back undelivered): it becomes a server
    /// of its pool here, given to the oldest waiter or kept idle. Without a pool it cannot
    /// join (too many pools, no server slot), its socket is closed and its slot given back.
    pub(super) fn adopt_moved_server(&mut self, parcel: Box<MovedServer>, socket: DetachedSocket) {
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
        let mode = self
            .env
            .pool_mode_of(&parcel.key.database, &parcel.key.server_user);
        let prepared =
            mode == PoolMode::Transaction && self.env.limits().max_prepared_statements > 0;
        let (server, parcel) = ServerConn::adopted(pool, parcel, mode, prepared, self.now);
        let Some(slot) = self.servers.insert(server) else {
            debug!(
                shard = self.env.shard(),
                "no server slot for a server that moved here"
            );
            pgtier_pool::give_back_slot(&limits);
            self.outbox.push(Action::CloseSocket(socket));
            if registered {
                self.linker.pools_mut().unregister(pool);
            }
            return;
        };
        let id = ServerId(slot);
        self.stats.server_moved_in();
        self.outbox.push(Action::Adopt { server: id, socket });
        if let Some(params) = parcel.welcome {
            self.linker.pools_mut().learn_welcome(pool, &params);
        }
        let lease = Lease {
            server: id,
            opened_at: parcel.opened_at,
            idle_since: parcel.idle_since,
        };
        if parcel.statements && self.linker.pools_mut().adopt_checked_out(pool) {
            // Statements named by the shard it left would collide with this shard's names:
            // they go first, and the server joins its pool once that is answered, by the
            // release path (its lease counted as checked out meanwhile).
            if let Some(server) = self.servers.get_mut(id.0) {
                let bytes = server.backend_mut().internal_query("DEALLOCATE ALL");
                server.hold_lease(lease);
                server.start_releasing(self.now);
                self.send(crate::action::Conn::Server(id), bytes);
            }
        } else {
            let checkin = self.linker.pools_mut().adopt_server(pool, lease, self.now);
            self.act_on_checkin(id, pool, checkin);
        }
        if registered {
            // The pool lives on while it holds the server (or a waiter), as any pool does.
            self.linker.pools_mut().unregister(pool);
        }
    }
}
