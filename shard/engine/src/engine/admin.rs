//! The admin side of the shard: the gates PAUSE, KILL, SUSPEND and DISABLE leave and the
//! admin commands in progress (what they and the console sessions do over the tables: `admin_flows.rs`), the console that answers statements, the
//! listings its sessions gather from every shard, and the shutdown under way.

use std::time::Instant;

use crate::gates::AdminOp;
use crate::gates::Gates;
use crate::gates::ShutdownMode;
use crate::ids::ClientId;
use crate::services::{Console, Refusal};

/// The shard's admin state.
pub(crate) struct Admin {
    /// PAUSE/KILL/DISABLE gates and the admin commands in progress (`admin_flows.rs`).
    ops: AdminOps,
    listings: super::listings::Listings,
    console: Box<dyn Console>,
    shutdown: Option<ShutdownMode>,
    /// Under WAIT_FOR_SERVERS, this shard has counted itself among those with no server in
    /// use (`Shared::shard_transactions_over`).
    transactions_over: bool,
    /// This shard counts itself idle (`Shared::shard_idle`) during a graceful shutdown.
    idle_counted: bool,
}

impl Admin {
    pub(super) fn new(console: Box<dyn Console>) -> Admin {
        Admin {
            ops: Default::default(),
            listings: Default::default(),
            console,
            shutdown: None,
            transactions_over: false,
            idle_counted: false,
        }
    }

    /// Shutdown was asked for.
    pub(super) fn is_shutting_down(&self) -> bool {
        self.shutdown.is_some()
    }

    /// The shutdown under way, if any.
    pub(super) fn shutdown(&self) -> Option<ShutdownMode> {
        self.shutdown
    }

    /// A shutdown was asked for: the strictest mode asked so far applies.
    pub(super) fn shut_down(&mut self, mode: ShutdownMode) {
        self.shutdown = Some(self.shutdown.map_or(mode, |current| current.max(mode)));
    }

    /// This shard counted itself as having no server in use under WAIT_FOR_SERVERS.
    pub(super) fn transactions_over_counted(&self) -> bool {
        self.transactions_over
    }

    pub(super) fn count_transactions_over(&mut self) {
        self.transactions_over = true;
    }

    /// Whether this shard counts itself idle; `idle` is what it is now: returns whether
    /// the count changed (and the shared count must follow).
    pub(super) fn recount_idle(&mut self, idle: bool) -> bool {
        std::mem::replace(&mut self.idle_counted, idle) != idle
    }

    /// The shutdown under way refuses the login of a client of a pool (not the console's),
    /// connected on the Unix socket or over TCP.
    pub(super) fn refuses_login(&self, on_unix_socket: bool) -> bool {
        self.shutdown
            .is_some_and(|mode| mode.refuses_login(on_unix_socket))
    }

    /// The gates PAUSE, SUSPEND and DISABLE left.
    pub(super) fn gates(&self) -> &Gates {
        &self.ops.gates
    }

    pub(super) fn gates_mut(&mut self) -> &mut Gates {
        &mut self.ops.gates
    }

    /// The admin commands in progress.
    pub(super) fn ops(&self) -> &AdminOps {
        &self.ops
    }

    pub(super) fn ops_mut(&mut self) -> &mut AdminOps {
        &mut self.ops
    }

    /// The listings this shard's console sessions are gathering.
    pub(super) fn listings_mut(&mut self) -> &mut super::listings::Listings {
        &mut self.listings
    }

    /// The console service and the gates at once, for a session's statement.
    pub(super) fn console_and_gates(&mut self) -> (&mut dyn Console, &Gates) {
        (self.console.as_mut(), &self.ops.gates)
    }

    pub(super) fn console_mut(&mut self) -> &mut dyn Console {
        self.console.as_mut()
    }
}

/// A console session waiting for every shard's answer to its op.
#[derive(Debug)]
struct Asked {
    request_id: u64,
    client: ClientId,
    /// The CommandComplete tag of a success (`SET key=value` repeats what was set).
    tag: String,
    /// Shards that have not answered yet.
    missing: usize,
    /// The first refusal a shard answered with.
    error: Option<Refusal>,
    /// One shard's success answers the op (the refusals of the others are not errors).
    one_suffices: bool,
    /// Some shard answered without a refusal.
    succeeded: bool,
}

/// An op applied here whose condition does not hold yet; answered to shard `from`.
#[derive(Debug)]
struct Waiting {
    from: usize,
    request_id: u64,
    op: AdminOp,
}

/// This shard's part of the admin commands.
#[derive(Debug, Default)]
pub(crate) struct AdminOps {
    gates: Gates,
    next_request_id: u64,
    asked: Vec<Asked>,
    waiting: Vec<Waiting>,
    /// Clients whose next transaction (or welcome) waits for a RESUME, since when.
    paused_clients: Vec<(ClientId, Instant)>,
}

impl AdminOps {
    /// Whether console session `client` waits for an op's answer.
    pub(super) fn is_asking(&self, client: ClientId) -> bool {
        self.asked.iter().any(|asked| asked.client == client)
    }

    /// Clients held by a pause (for the listings).
    pub(super) fn is_paused_client(&self, client: ClientId) -> bool {
        self.paused_clients.iter().any(|(id, _)| *id == client)
    }

    /// A console session asks `missing` shards to run an op (`tag`): the request id their
    /// answers carry. `one_suffices`: the op succeeds when any one shard succeeds (a
    /// KILL_CLIENT by id, which only the client's own shard finds).
    pub(super) fn ask(
        &mut self,
        client: ClientId,
        tag: String,
        missing: usize,
        one_suffices: bool,
    ) -> u64 {
        self.next_request_id += 1;
        let request_id = self.next_request_id;
        self.asked.push(Asked {
            request_id,
            client,
            tag,
            missing,
            error: None,
            one_suffices,
            succeeded: false,
        });
        request_id
    }

    /// One shard answered `request_id` (with a refusal, perhaps): once all did, the console
    /// session to answer, the op's tag and the first refusal.
    pub(super) fn answered(
        &mut self,
        request_id: u64,
        error: Option<Refusal>,
    ) -> Option<(ClientId, String, Option<Refusal>)> {
        let index = self
            .asked
            .iter()
            .position(|asked| asked.request_id == request_id)?;
        let asked = &mut self.asked[index];
        asked.missing = asked.missing.saturating_sub(1);
        match error {
            None => asked.succeeded = true,
            Some(error) if asked.error.is_none() => asked.error = Some(error),
            Some(_) => {}
        }
        if asked.missing > 0 {
            return None;
        }
        let asked = self.asked.swap_remove(index);
        let error = asked
            .error
            .filter(|_| !(asked.one_suffices && asked.succeeded));
        Some((asked.client, asked.tag, error))
    }

    /// An op applied here waits for its condition; answered to shard `from`.
    pub(super) fn wait(&mut self, from: usize, request_id: u64, op: AdminOp) {
        self.waiting.push(Waiting {
            from,
            request_id,
            op,
        });
    }

    /// The ops waiting here, to be checked again (each waits again with `wait`).
    pub(super) fn take_waiting(&mut self) -> Vec<(usize, u64, AdminOp)> {
        std::mem::take(&mut self.waiting)
            .into_iter()
            .map(|waiting| (waiting.from, waiting.request_id, waiting.op))
            .collect()
    }

    /// A pause holds `client`'s next transaction since `since` (once).
    pub(super) fn hold(&mut self, client: ClientId, since: Instant) {
        if !self.is_paused_client(client) {
            self.paused_clients.push((client, since));
        }
    }

    /// The clients a pause held, to be let go or held again.
    pub(super) fn take_held(&mut self) -> Vec<(ClientId, Instant)> {
        std::mem::take(&mut self.paused_clients)
    }

    /// Held clients that no longer wait (`waiting` says which still do) are forgotten;
    /// those held past `timeout` are let go: the ones to close.
    pub(super) fn expire_held(
        &mut self,
        now: Instant,
        timeout: Option<std::time::Duration>,
        waiting: impl Fn(ClientId) -> bool,
    ) -> Vec<ClientId> {
        let mut expired = Vec::new();
        self.paused_clients.retain(|(id, since)| {
            if !waiting(*id) {
                return false;
            }
            if timeout.is_some_and(|limit| now.saturating_duration_since(*since) > limit) {
                expired.push(*id);
                return false;
            }
            true
        });
        expired
    }
}
