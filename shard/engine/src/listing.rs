//! The rows of `SHOW CLIENTS`, `SHOW SERVERS` and `SHOW POOLS` one shard reports about itself.
//!
//! Each shard owns its clients and pools, so no shard can read another's. On request the
//! engine copies its own rows into a [`ShardListing`] (values only, no references into its
//! slabs); the admin session's shard merges the parts into a [`Listing`], which the console
//! renders. Nothing on the query path is involved.

use std::net::SocketAddr;

use crate::addr::{ClientAddr, ServerAddr};
use std::time::{Duration, SystemTime};

use crate::ids::{ClientId, ServerId, SocketId};

/// One client connection as its shard saw it when asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRow {
    /// Its id on its shard (`SHOW CLIENTS`' `ptr`, with the shard).
    pub id: ClientId,
    /// Its number in the process (`SHOW CLIENTS`' `id`, what `KILL_CLIENT` takes).
    pub socket_id: SocketId,
    /// The client's peer address, if the socket still has one.
    pub addr: Option<ClientAddr>,
    /// The local end of its socket (the listener it came through).
    pub local_addr: Option<SocketAddr>,
    pub database: String,
    pub user: String,
    /// `none`, `logical` or `physical` (PgBouncer's `replication` column).
    pub replication: &'static str,
    /// `login`, `idle`, `active`, `waiting`, `waiting_for_replica` or `closing`.
    pub state: &'static str,
    /// `premium`/`freemium` on a replica-set entry; `None` elsewhere.
    pub class: Option<&'static str>,
    /// The replica the session is pinned to, once admitted.
    pub replica: Option<SocketAddr>,
    pub connected_at: SystemTime,
    /// How long it has been connected when listed.
    pub connected_for: Duration,
    /// When bytes last arrived from it.
    pub request_at: SystemTime,
    /// How long it has waited for a server (or a replica), while it waits.
    pub waiting_for: Option<Duration>,
    /// The server it is linked to.
    pub server: Option<ServerId>,
    /// The PostgreSQL backend pid of the server it is linked to.
    pub backend_pid: Option<u32>,
    /// Why a transaction-mode client keeps its server between transactions
    /// (`listen,set`...), empty when it does not.
    pub pinned: String,
    /// Named statements the client has prepared (kept by pgtier in transaction mode).
    pub prepared_statements: usize,
    /// Its TLS connection as PgBouncer prints it (`TLSv1.3/TLS_AES_256_GCM_SHA384/...`),
    /// `None` in plain text.
    pub tls: Option<String>,
    /// Its `application_name`, if it set one.
    pub application_name: Option<String>,
}

/// One server connection as its shard saw it when asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerRow {
    /// Its id on its shard (`SHOW SERVERS`' `ptr`, with the shard).
    pub id: ServerId,
    /// Its number in the process (`SHOW SERVERS`' `id`).
    pub socket_id: SocketId,
    /// Statements pgtier prepared on it (named statements in transaction mode).
    pub prepared_statements: usize,
    pub database: String,
    /// The user it logged in as.
    pub user: String,
    /// `none`, `logical` or `physical` (PgBouncer's `replication` column).
    pub replication: &'static str,
    /// PgBouncer's names: `login`, `idle`, `tested`, `active`, `used`, `closing`.
    pub state: &'static str,
    pub addr: ServerAddr,
    pub local_addr: Option<SocketAddr>,
    pub connected_at: SystemTime,
    /// When a client last got it (its connect time if none has).
    pub request_at: SystemTime,
    /// The client it serves.
    pub client: Option<ClientId>,
    pub backend_pid: Option<u32>,
    pub tls: Option<String>,
    /// The backend's `application_name`, as last reported.
    pub application_name: Option<String>,
    /// It will be closed instead of reused (it is leaving its pool).
    pub close_needed: bool,
    /// Cancel requests sent for it are still running.
    pub being_canceled: bool,
}

/// One pool slice (exact pool key) on one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRow {
    pub database: String,
    pub user: String,
    /// The server, or the replica on a replica-set entry.
    pub addr: ServerAddr,
    /// `session` or `transaction`.
    pub mode: &'static str,
    /// Logged-in clients of the pool that are idle or linked to a server.
    pub clients_active: u32,
    /// Clients queued for a server.
    pub clients_waiting: u32,
    /// Servers linked to a client.
    pub servers_active: u32,
    /// Servers in the idle list.
    pub servers_idle: u32,
    /// Servers connecting, logging in or running the check query.
    pub servers_opening: u32,
    /// Servers back from a client, being cleaned before they go idle.
    pub servers_used: u32,
    /// Servers running `server_check_query`.
    pub servers_tested: u32,
    /// Servers connecting or logging in.
    pub servers_login: u32,
    /// Servers with a cancel request in flight.
    pub servers_being_canceled: u32,
    /// How long its oldest waiting client has waited.
    pub max_wait: Option<Duration>,
}

/// What one shard answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardListing {
    pub shard: usize,
    pub clients: Vec<ClientRow>,
    pub servers: Vec<ServerRow>,
    pub pools: Vec<PoolRow>,
}

/// Every shard's answer, gathered by the admin session's shard.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// One part per shard that answered, in shard order.
    pub parts: Vec<ShardListing>,
    /// Shards that did not answer in time (their rows are absent).
    pub missing_shards: Vec<usize>,
}

impl Listing {
    /// A listing from `parts` (any order) with `missing_shards` absent.
    pub fn new(mut parts: Vec<ShardListing>, missing_shards: Vec<usize>) -> Listing {
        parts.sort_by_key(|part| part.shard);
        Listing {
            parts,
            missing_shards,
        }
    }

    /// The NOTICE text when some shard did not answer.
    pub fn missing_notice(&self) -> Option<String> {
        if self.missing_shards.is_empty() {
            return None;
        }
        let shards: Vec<String> = self.missing_shards.iter().map(usize::to_string).collect();
        Some(format!(
            "shard(s) {} did not answer in time; their rows are missing",
            shards.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(shard: usize) -> ShardListing {
        ShardListing {
            shard,
            ..ShardListing::default()
        }
    }

    #[test]
    fn parts_are_in_shard_order_and_missing_shards_are_named() {
        let listing = Listing::new(vec![part(2), part(0)], vec![1]);
        let shards: Vec<usize> = listing.parts.iter().map(|p| p.shard).collect();
        assert_eq!(shards, [0, 2]);
        assert_eq!(
            listing.missing_notice().as_deref(),
            Some("shard(s) 1 did not answer in time; their rows are missing")
        );
        assert_eq!(Listing::new(vec![part(0)], vec![]).missing_notice(), None);
    }
}
