//! Following a reader entry's primary when pgtier elects it (a replica promoted, the old
//! primary demoted or fenced; `pgtier_replicas::primary_election`): at each housekeeping
//! pass the shard compares the election's epoch with the one it last acted on, and on a move
//! ends every server of the entry's primary pools that is not on the new primary.
//!
//! Why close them rather than let them finish: a server on a host that is no longer primary
//! either is dead already (its clients learn it from the socket), or is alive on a demoted or
//! fenced host, where a write would fail (in recovery) or, worse, succeed on a timeline that
//! is being abandoned (split brain). A client in a transaction on one gets 08006, as from a
//! server that failed; idle servers simply go. The pools forget their failed logins, so the
//! clients waiting for a server connect to the new primary at once instead of after
//! `server_login_retry`.

use std::sync::Arc;

use pgtier_core::config::ServerSet;
use pgtier_pool::{PoolId, ServerTarget};
use tracing::warn;

use crate::addr::ServerAddr;
use crate::engine::Engine;
use crate::ids::{ClientId, ServerId};
use crate::messages::{self, sqlstate};
use crate::server::ServerState;
use crate::services::ElectedServer;

impl Engine {
    /// Acts on every primary move this shard has not acted on yet.
    pub(super) fn follow_primary_moves(&mut self) {
        let mut databases: Vec<Arc<str>> = Vec::new();
        for (_, key, _) in self.linker.pools().pools() {
            if key.target == ServerTarget::Primary && !databases.contains(&key.database) {
                databases.push(Arc::clone(&key.database));
            }
        }
        for database in databases {
            let Some(now) = self.routing.primary(&database) else {
                continue;
            };
            if self.linker.primary_moved(&database, now.epoch) {
                self.leave_old_primary(&database, now.server);
            }
        }
    }

    /// Acts on a move of `pool`'s entry's primary, if `pool` is a primary pool and its entry
    /// moved since this shard last looked; true when it did.
    pub(super) fn follow_primary_move_of(&mut self, pool: PoolId) -> bool {
        let Some(key) = self.linker.pools().key(pool) else {
            return false;
        };
        if key.target != ServerTarget::Primary {
            return false;
        }
        let database = Arc::clone(&key.database);
        let Some(now) = self.routing.primary(&database) else {
            return false;
        };
        if !self.linker.primary_moved(&database, now.epoch) {
            return false;
        }
        self.leave_old_primary(&database, now.server);
        true
    }

    /// Closes `database`'s primary-pool servers not on `primary` (all of them when there is
    /// no primary) and lets the pools open again at once. A host list's servers are told
    /// apart by the host name they were opened for, a reader entry's by address.
    fn leave_old_primary(&mut self, database: &Arc<str>, primary: Option<ElectedServer>) {
        let listed_name: Option<String> = match primary {
            Some(ElectedServer::Listed(index)) => {
                match self.env.config().database(database).map(|db| &db.servers) {
                    Some(ServerSet::Hosts(list)) => list.hosts.get(index).map(|h| h.host.clone()),
                    _ => None,
                }
            }
            _ => None,
        };
        let on_primary = |server: &crate::server::ServerConn| match primary {
            None => false,
            Some(ElectedServer::Addr(addr)) => *server.info().addr() == ServerAddr::Tcp(addr),
            Some(ElectedServer::Listed(_)) => {
                listed_name.is_some() && server.info().listed_host() == listed_name.as_deref()
            }
        };
        let pools: Vec<PoolId> = self
            .linker
            .pools()
            .pools()
            .filter(|(_, key, _)| key.target == ServerTarget::Primary && key.database == *database)
            .map(|(pool, _, _)| pool)
            .collect();
        warn!(
            shard = self.env.shard(),
            %database,
            primary = ?primary,
            "the entry's primary moved: closing servers on the old one"
        );
        for pool in &pools {
            self.linker.pools_mut().forget_login_failure(*pool);
        }
        let stale: Vec<(ServerId, Option<ClientId>)> = self
            .servers
            .iter()
            .filter(|(_, server)| {
                pools.contains(&server.pool()) && !server.is_closing() && !on_primary(server)
            })
            .map(|(slot, server)| {
                let client = match server.state() {
                    ServerState::Busy { client } => Some(*client),
                    _ => None,
                };
                (ServerId(slot), client)
            })
            .collect();
        for (id, client) in stale {
            self.log_server_closing(id, "the primary moved to another host");
            self.close_server(id);
            if let Some(client) = client {
                let error = messages::fatal(
                    sqlstate::CONNECTION_FAILURE,
                    "the server serving this connection is no longer the primary",
                );
                self.close_client(client, Some(error));
            }
        }
    }
}
