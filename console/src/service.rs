//! The engine's `Console` service, served by this crate's answers ([`crate::answer`]): each
//! query of a session on the database `pgtier` (alias `pgbouncer`) is answered from the
//! routers, their health and events, the traffic statistics and query digests every shard
//! folds into the engine's shared state, the configuration and every shard's connection rows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;
use pgtier_engine::gates::AdminRequest;
use pgtier_engine::services::Refusal;
use pgtier_engine::{Console, ConsoleRequest, StatementAnswer};

use crate::{AdminView, PoolerState, StatsView};
use pgtier_replicas::SharedRouting;

/// One shard's console.
pub struct ShardConsole {
    routing: Arc<SharedRouting>,
    shared: Arc<pgtier_engine::Shared>,
    /// Set by RELOAD; the process's main thread rereads the files when it sees it (the same
    /// path as SIGHUP). `None`: no main loop watches it (embedded proxies, tests).
    reload: Option<Arc<AtomicBool>>,
}

impl ShardConsole {
    pub fn new(routing: Arc<SharedRouting>, shared: Arc<pgtier_engine::Shared>) -> ShardConsole {
        ShardConsole {
            routing,
            shared,
            reload: None,
        }
    }

    /// RELOAD sets `flag` for the main thread.
    pub fn with_reload(mut self, flag: Arc<AtomicBool>) -> ShardConsole {
        self.reload = Some(flag);
        self
    }
}

impl ShardConsole {
    fn stats(&self) -> StatsView {
        StatsView {
            totals: self.shared.totals.snapshot(),
            interval: self.shared.last_interval(),
        }
    }
}

fn view<'a>(
    request: &ConsoleRequest<'a>,
    map: &'a pgtier_replicas::RouterMap,
    stats: &'a StatsView,
    databases: &'a [pgtier_core::metrics::DatabaseStats],
    digests: &'a pgtier_core::metrics::DigestStore,
) -> AdminView<'a> {
    AdminView {
        routers: map.routers(),
        readers: map.readers(),
        stats: Some(stats),
        version: crate::VERSION,
        listing: request.listing,
        databases,
        digests: Some(digests),
        config: Some(request.config),
        state: PoolerState {
            paused: request.gates.is_paused_all(),
            suspended: request.gates.is_suspended(),
        },
        gates: Some(request.gates),
    }
}

impl Console for ShardConsole {
    fn needs_listing(&self, query: &str) -> bool {
        crate::needs_listing(query)
    }

    fn answer(&mut self, request: &ConsoleRequest<'_>, out: &mut BytesMut) {
        let stats = self.stats();
        let databases = self.shared.databases.stats();
        let map = self.routing.map.load_full();
        let view = view(request, &map, &stats, &databases, &self.shared.digests);
        crate::answer(request.query, request.rights, &view, out);
    }

    fn answer_statement(&mut self, request: &ConsoleRequest<'_>) -> StatementAnswer {
        let stats = self.stats();
        let databases = self.shared.databases.stats();
        let map = self.routing.map.load_full();
        let view = view(request, &map, &stats, &databases, &self.shared.digests);
        crate::answer_statement(request.query, request.rights, request.formats, &view)
    }

    fn admin_command(
        &mut self,
        query: &str,
        admin: bool,
        config: &pgtier_core::config::Config,
    ) -> Option<Result<AdminRequest, Refusal>> {
        let parsed = match crate::operations::parse(query, admin, config)? {
            Ok(parsed) => parsed,
            Err(refusal) => return Some(Err(refusal)),
        };
        let reload = self.reload.clone();
        Some(crate::operations::into_request(
            parsed,
            config,
            move || match reload {
                Some(flag) => {
                    flag.store(true, Ordering::Release);
                    Ok(())
                }
                None => Err("this pgtier has no configuration file to reload".to_string()),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_engine::ConsoleRights;
    use pgtier_replicas::RouterMap;

    #[test]
    fn the_console_answers_from_the_admin_module() {
        let shared = Arc::new(pgtier_engine::Shared::new(1));
        let routing = Arc::new(SharedRouting::new(RouterMap::default()));
        let mut console = ShardConsole::new(routing, shared);
        assert!(console.needs_listing("SHOW CLIENTS"));
        assert!(!console.needs_listing("SHOW VERSION"));
        let config = pgtier_core::config::Config::from_str(
            "[pgtier]\nauth_type = \"trust\"\n",
            "pgtier.toml",
        )
        .expect("config");
        let gates = pgtier_engine::gates::Gates::default();
        let request = ConsoleRequest {
            query: "SHOW VERSION",
            rights: ConsoleRights::Stats,
            formats: &[],
            listing: None,
            config: &config,
            gates: &gates,
        };
        let mut out = BytesMut::new();
        console.answer(&request, &mut out);
        assert_eq!(out[0], b'T', "a result set");
        assert!(out.windows(6).any(|w| w == b"pgtier"));
        let answer = console.answer_statement(&request);
        assert!(!answer.failed && answer.description.is_some());
    }
}
