//! The engine's admin console, served by `crate::admin`: each simple query of a session on
//! the database `pgtier` is answered from the routers, their health and events, and the
//! traffic statistics every shard folds into the engine's shared state.

use std::sync::Arc;

use bytes::BytesMut;
use pgtier_engine::Console;
use pgtier_engine::listing::Listing;

use crate::admin::{self, AdminView, StatsView};
use crate::routing::SharedRouting;

/// One shard's console.
pub struct ShardConsole {
    routing: Arc<SharedRouting>,
    shared: Arc<pgtier_engine::Shared>,
}

impl ShardConsole {
    pub fn new(routing: Arc<SharedRouting>, shared: Arc<pgtier_engine::Shared>) -> ShardConsole {
        ShardConsole { routing, shared }
    }
}

impl Console for ShardConsole {
    fn needs_listing(&self, query: &str) -> bool {
        admin::needs_listing(query)
    }

    fn answer(&mut self, query: &str, listing: Option<&Listing>, out: &mut BytesMut) {
        let stats = StatsView {
            totals: self.shared.totals.snapshot(),
            interval: self.shared.last_interval(),
        };
        let map = self.routing.map.load_full();
        let view = AdminView {
            routers: map.routers(),
            stats: Some(&stats),
            version: admin::VERSION,
            listing,
        };
        admin::answer(query, &view, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::RouterMap;

    #[test]
    fn the_console_answers_from_the_admin_module() {
        let shared = Arc::new(pgtier_engine::Shared::new(1));
        let routing = Arc::new(SharedRouting::new(RouterMap::default()));
        let mut console = ShardConsole::new(routing, shared);
        assert!(console.needs_listing("SHOW CLIENTS"));
        assert!(!console.needs_listing("SHOW VERSION"));
        let mut out = BytesMut::new();
        console.answer("SHOW VERSION", None, &mut out);
        assert_eq!(out[0], b'T', "a result set");
        assert!(out.windows(6).any(|w| w == b"pgtier"));
    }
}
