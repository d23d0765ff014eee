//! Welcoming a client that waited for a server at login. Its startup values of tracked
//! parameters are applied on that server first, so the ParameterStatus values it is told are
//! the server's own (`UTF8`, `ISO, DMY`) rather than its own spelling. What the server made
//! of each spelling is kept in the pool, so later logins with the same spellings are
//! welcomed from the pool's cached parameters without a server.

use bytes::BytesMut;
use pgtier_core::config::PoolMode;

use crate::io::ring::Ring;
use crate::io::slab::{ClientId, ServerId};
use crate::proto;
use crate::shard::Shard;

impl<R: Ring> Shard<R> {
    /// A client not yet welcomed was linked with `server_id`: apply its startup values on the
    /// server (the answer is swallowed; `finish_welcome` follows it), or welcome it at once
    /// when the server already shows them.
    pub(crate) fn start_welcome(&mut self, client_id: ClientId, server_id: ServerId) {
        let Some(client) = self.clients.get(client_id.0) else {
            return;
        };
        let Some(server) = self.servers.get_mut(server_id.0) else {
            return;
        };
        let defaults = &self.pools.get(server.pool).welcome_tracked;
        let mut sql = String::new();
        if !client
            .tracked
            .write_login_sets(defaults, &server.tracked, &mut sql)
        {
            self.finish_welcome(client_id, server_id);
            return;
        }
        let mut out = BytesMut::with_capacity(sql.len() + 8);
        proto::query(&mut out, &sql);
        server.send.push(out.freeze());
        server.swallow += 1;
        server.tracker.on_internal_query();
        self.flush_server(server_id);
    }

    /// The server shows the client's startup values now: the client is told the server's
    /// values, then its server goes back to the pool (transaction mode) or its session starts.
    pub(crate) fn finish_welcome(&mut self, client_id: ClientId, server_id: ServerId) {
        let Some(client) = self.clients.get_mut(client_id.0) else {
            return;
        };
        let Some(server) = self.servers.get(server_id.0) else {
            return;
        };
        let pool = self.pools.get_mut(server.pool);
        client
            .tracked
            .learn_spellings(&server.tracked, &mut pool.spellings);
        client.tracked = server.tracked.clone();
        let session = pool.mode == PoolMode::Session;
        self.welcome_from_server(client_id, server_id, session);
        if session {
            self.forward_to_server(client_id, server_id);
        } else {
            self.release_server(server_id);
        }
    }
}
