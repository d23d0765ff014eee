//! The engine's `Console` service, served by this crate's answers ([`crate::answer`]): each
//! query of a session on the database `pgtier` (alias `pgbouncer`) is answered from the
//! routers, their health and events, the traffic statistics and query digests every shard
//! folds into the engine's shared state, the configuration and every shard's connection rows.

use std::sync::Arc;
use std::sync::mpsc::Sender;

use bytes::BytesMut;
use pgtier_engine::gates::AdminRequest;
use pgtier_engine::reconfigure::Order;
use pgtier_engine::services::Refusal;
use pgtier_engine::{Console, ConsoleRequest, StatementAnswer};

use crate::{AdminView, PoolerState, StatsView};
use pgtier_replicas::SharedRouting;

/// One shard's console.
pub struct ShardConsole {
    routing: Arc<SharedRouting>,
    shared: Arc<pgtier_engine::Shared>,
    /// Where RELOAD and SET go: the process's main thread, which reads the files and builds
    /// the new configuration (the same path as SIGHUP). `None`: no main loop carries them
    /// out (embedded proxies, tests), and they are refused.
    process: Option<Sender<Order>>,
}

impl ShardConsole {
    pub fn new(routing: Arc<SharedRouting>, shared: Arc<pgtier_engine::Shared>) -> ShardConsole {
        ShardConsole {
            routing,
            shared,
            process: None,
        }
    }

    /// RELOAD and SET are sent to `process`.
    pub fn with_process(mut self, process: Sender<Order>) -> ShardConsole {
        self.process = Some(process);
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
    fleet: &'a pgtier_replicas::FleetView,
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
        fleet: Some(fleet),
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
        let fleet = self.routing.fleet.view();
        let view = view(
            request,
            &map,
            &stats,
            &databases,
            &self.shared.digests,
            &fleet,
        );
        crate::answer(request.query, request.rights, &view, out);
    }

    fn answer_statement(&mut self, request: &ConsoleRequest<'_>) -> StatementAnswer {
        let stats = self.stats();
        let databases = self.shared.databases.stats();
        let map = self.routing.map.load_full();
        let fleet = self.routing.fleet.view();
        let view = view(
            request,
            &map,
            &stats,
            &databases,
            &self.shared.digests,
            &fleet,
        );
        crate::answer_statement(request.query, request.rights, request.formats, &view)
    }

    fn admin_command(
        &mut self,
        query: &str,
        admin: bool,
        config: &pgtier_core::config::Config,
    ) -> Option<Result<AdminRequest, Refusal>> {
        Some(crate::operations::parse(query, admin, config)?.map(crate::operations::into_request))
    }

    fn reconfigure(&mut self, order: Order) -> Result<(), Refusal> {
        let refused = |message: &str| Refusal {
            code: pgtier_wire::sqlstate::PROTOCOL_VIOLATION,
            message: message.to_string(),
        };
        match &self.process {
            Some(process) => process
                .send(order)
                .map_err(|_| refused("the process is shutting down")),
            None => Err(refused(
                "this pgtier has no main loop to change its configuration",
            )),
        }
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
