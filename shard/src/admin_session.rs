//! Sessions on the admin console (database `pgtier`): a welcome of pgtier's own, then each
//! simple query answered by `crate::admin::answer` from a read-only view of the shard's
//! statistics. Only users in `admin_users`/`stats_users` get here (checked at startup).
//! A query naming `SHOW CLIENTS`/`SHOW POOLS` is held until `crate::admin_listing` gathered
//! every shard's rows; the queries after it wait behind it, so answers keep their order.

use bytes::BytesMut;

use crate::admin::{self, AdminView, StatsView};
use crate::client::ClientState;
use crate::io::ring::Ring;
use crate::io::slab::ClientId;
use crate::proto::{self, sqlstate};
use crate::shard::Shard;

/// Longest admin query accepted.
const MAX_ADMIN_QUERY_BYTES: usize = 64 * 1024;

impl<R: Ring> Shard<R> {
    pub(crate) fn welcome_admin(&mut self, id: ClientId) {
        let mut out = BytesMut::with_capacity(256);
        proto::auth_ok(&mut out);
        for (name, value) in [
            ("server_version", "15.0 (pgtier)"),
            ("server_encoding", "UTF8"),
            ("client_encoding", "UTF8"),
            ("DateStyle", "ISO, MDY"),
            ("integer_datetimes", "on"),
            ("standard_conforming_strings", "on"),
        ] {
            proto::parameter_status(&mut out, name, value);
        }
        let key = self.new_cancel_key(id, None);
        proto::backend_key_data(&mut out, key.0, key.1);
        proto::ready_for_query(&mut out, b'I');
        if let Some(client) = self.clients.get_mut(id.0) {
            client.welcomed = true;
            client.state = ClientState::Idle { since: self.now };
        }
        self.send_to_client(id, out.freeze());
    }

    /// Answers every complete simple query in the admin client's buffer.
    pub(crate) fn on_admin_bytes(&mut self, id: ClientId) {
        self.fold_counters();
        let routing = &self.shared.routing;
        let stats = StatsView {
            totals: self.shared.totals.snapshot(),
            interval: routing.last_interval(),
        };
        let map = routing.map.load_full();
        let mut listing = self.admin_listings.take_ready(id);
        let mut out = BytesMut::new();
        loop {
            let Some(client) = self.clients.get_mut(id.0) else {
                return;
            };
            let data = &client.recv.data;
            if data.len() < 5 {
                break;
            }
            let code = data[0];
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if code == b'X' {
                self.close_client(id, None);
                return;
            }
            if code != b'Q' || !(5..=MAX_ADMIN_QUERY_BYTES).contains(&len) {
                let message = "the admin console accepts only simple queries";
                let error = proto::fatal(sqlstate::FEATURE_NOT_SUPPORTED, message);
                self.close_client(id, Some(error));
                return;
            }
            if data.len() < len + 1 {
                break;
            }
            let query = proto::query_text(&data[5..len + 1]).unwrap_or("");
            if admin::needs_listing(query) && listing.is_none() {
                // Held until every shard sent its rows; the listing resumes this function.
                if !self.admin_listings.is_gathering(id) {
                    self.start_listing(id);
                    listing = self.admin_listings.take_ready(id);
                }
                if listing.is_none() {
                    break;
                }
                continue;
            }
            let message = client.recv.data.split_to(len + 1);
            let query = proto::query_text(&message[5..]).unwrap_or("");
            let view = AdminView {
                routers: map.routers(),
                stats: Some(&stats),
                version: admin::VERSION,
                listing: listing.as_ref(),
            };
            admin::answer(query, &view, &mut out);
            proto::ready_for_query(&mut out, b'I');
            if admin::needs_listing(query) {
                listing = None;
            }
        }
        if !out.is_empty() {
            self.send_to_client(id, out.freeze());
        }
    }
}
