//! The data shard's side of replica routing: a session on a replica-set entry gets its class
//! and a lease on one replica at login (decided on the shard, or by the control shard with the
//! reply arriving in this shard's reply mailbox), is re-pinned between transactions when its
//! replica went Down, and every connection failure to a replica is reported to the router.
//!
//! The control shard (`crate::control`) owns roles and health; this file only asks it and
//! applies the answers to clients and pools. A client holds its `SessionLease` from admission
//! until `close_client`, so its count is released exactly once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use bytes::Bytes;
use pgtier_core::class::ClassSetting;
use pgtier_core::config::PoolMode;
use pgtier_core::metrics::{LatencyHistogram, SharedHistogram};
use pgtier_policy::ServiceClass;
use pgtier_wire::SqlState;
use pgtier_wire::startup_options::{StartupOption, parse_options};
use tracing::debug;

use crate::admin::IntervalStats;
use crate::client::ClientState;
use crate::control::class_tag::{CLASS_OPTION, MAX_OPTION_ARGUMENTS};
use crate::control::{
    Admission, AdmissionReply, ReplyMailbox, RouterMap, ServerFailureCause, session_class,
};
use crate::io::ring::Ring;
use crate::io::slab::{ClientId, ServerId, SlotRef};
use crate::pool::{LoginFailure, PoolId};
use crate::proto::{self, sqlstate};
use crate::shard::Shard;

/// Routing state every shard shares: the routers of the current configuration, each shard's
/// reply mailbox, and the per-class latency of the current observation interval.
pub struct SharedRouting {
    /// Replaced on reload before the shards get the new configuration.
    pub map: ArcSwap<RouterMap>,
    /// Indexed by shard; each rings its shard's eventfd.
    pub replies: Vec<Arc<ReplyMailbox>>,
    /// Query latency of the current interval per class (premium = 0), folded in by shards.
    pub latency: [SharedHistogram; 2],
    /// The last completed interval (`stats_period`), published by shard 0.
    pub interval: Mutex<Option<IntervalStats>>,
    /// Interval rollovers so far (tests wait on it).
    pub intervals: AtomicU64,
}

impl SharedRouting {
    pub fn new(map: RouterMap, replies: Vec<Arc<ReplyMailbox>>) -> SharedRouting {
        SharedRouting {
            map: ArcSwap::from_pointee(map),
            replies,
            latency: [SharedHistogram::new(), SharedHistogram::new()],
            interval: Mutex::new(None),
            intervals: AtomicU64::new(0),
        }
    }

    pub fn last_interval(&self) -> Option<IntervalStats> {
        *self.interval.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for SharedRouting {
    fn default() -> SharedRouting {
        SharedRouting::new(RouterMap::default(), Vec::new())
    }
}

/// What a routing step left the client in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Not a replica-set entry: use the configured server.
    Unrouted,
    /// Holds a lease: its pool is on the leased replica.
    Placed,
    /// In `WaitingForReplica` until the control shard answers.
    Waiting,
    /// Refused; the client is closing with an ErrorResponse.
    Closed,
}

/// A control-plane SQLSTATE as the wire crate's type (those codes are all well formed).
fn sqlstate_of(code: &str) -> SqlState {
    SqlState::parse(code.as_bytes()).unwrap_or(sqlstate::INTERNAL_ERROR)
}

/// The request id of a client's admission: its slot, so a reply finds the client (or finds
/// it gone: a stale generation) without a table.
fn request_id(id: ClientId) -> u64 {
    (u64::from(id.0.generation) << 32) | u64::from(id.0.index)
}

fn client_of(request_id: u64) -> ClientId {
    ClientId(SlotRef {
        index: request_id as u32,
        generation: (request_id >> 32) as u32,
    })
}

pub(crate) const fn class_setting(class: ServiceClass) -> ClassSetting {
    match class {
        ServiceClass::Premium => ClassSetting::Premium,
        ServiceClass::Freemium => ClassSetting::Freemium,
    }
}

/// `options` without `pgtier.class` settings, re-escaped as PostgreSQL splits them (returned
/// as is when it has none); `None` when nothing is left. pgtier consumes the setting: PostgreSQL would accept it as a
/// placeholder GUC, but forwarding it would split one pool per requested class for nothing.
pub(crate) fn strip_class_option(options: &str) -> Option<String> {
    let Ok(parsed) = parse_options(options, MAX_OPTION_ARGUMENTS) else {
        return Some(options.to_string());
    };
    let mut kept = Vec::new();
    let mut consumed = false;
    for option in parsed {
        match option {
            StartupOption::Setting { name, .. } if name.eq_ignore_ascii_case(CLASS_OPTION) => {
                consumed = true;
            }
            StartupOption::Setting { name, value } => {
                kept.push(format!("-c {}", escape(&format!("{name}={value}"))));
            }
            StartupOption::Other(arg) => kept.push(escape(&arg)),
        }
    }
    if !consumed {
        // Untouched, so equal options keep sharing one pool key however they were spelled.
        return Some(options.to_string());
    }
    (!kept.is_empty()).then(|| kept.join(" "))
}

fn escape(arg: &str) -> String {
    let mut out = String::with_capacity(arg.len());
    for c in arg.chars() {
        if c == '\\' || c.is_ascii_whitespace() {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl<R: Ring> Shard<R> {
    fn reply_mailbox(&self) -> Option<Arc<ReplyMailbox>> {
        self.shared.routing.replies.get(self.index).cloned()
    }

    /// Login on a replica-set entry: the session's class (the `pgtier.class` option is
    /// consumed here), then a lease on a replica. Other entries are `Unrouted`.
    pub(crate) fn place_session(&mut self, id: ClientId) -> Placement {
        let map = self.shared.routing.map.load();
        let Some(client) = self.clients.get_mut(id.0) else {
            return Placement::Closed;
        };
        let Some(router) = map.router(&client.database).cloned() else {
            return Placement::Unrouted;
        };
        let Some(db) = self.config.database(&client.database) else {
            return Placement::Unrouted;
        };
        let options = client
            .startup_params
            .iter()
            .position(|(name, _)| name == "options");
        let raw = options.map(|i| client.startup_params[i].1.as_str());
        let class = match session_class(&self.config, db, &client.user, raw) {
            Ok(class) => class,
            Err(error) => {
                let message = error.to_string();
                self.close_client(
                    id,
                    Some(proto::fatal(sqlstate_of(error.sqlstate()), &message)),
                );
                return Placement::Closed;
            }
        };
        if let Some(i) = options {
            match strip_class_option(&client.startup_params[i].1) {
                Some(rest) => client.startup_params[i].1 = rest,
                None => {
                    client.startup_params.remove(i);
                }
            }
        }
        client.class = class_setting(class);
        let Some(mailbox) = self.reply_mailbox() else {
            let error = proto::fatal(sqlstate::CANNOT_CONNECT_NOW, "replica routing is off");
            self.close_client(id, Some(error));
            return Placement::Closed;
        };
        let epoch = router.failure_epoch();
        let admission = router.admit_session(class, &mailbox, request_id(id));
        self.apply_admission(id, admission, epoch)
    }

    fn apply_admission(&mut self, id: ClientId, admission: Admission, epoch: u64) -> Placement {
        let now = self.now;
        let Some(client) = self.clients.get_mut(id.0) else {
            return Placement::Closed;
        };
        match admission {
            Admission::Placed(lease) => {
                log_admission(client, &lease);
                client.lease = Some(lease);
                client.failure_epoch_seen = epoch;
                Placement::Placed
            }
            Admission::Pending => {
                client.state = ClientState::WaitingForReplica {
                    since: now,
                    request_id: request_id(id),
                    epoch,
                };
                Placement::Waiting
            }
            Admission::Refused(error) => {
                let message = error.to_string();
                self.close_client(
                    id,
                    Some(proto::fatal(sqlstate_of(error.sqlstate()), &message)),
                );
                Placement::Closed
            }
        }
    }

    /// Hands every admission reply in this shard's mailbox to its client; a reply whose
    /// client left is dropped (its lease releases the count).
    pub(crate) fn drain_replies(&mut self) {
        let Some(mailbox) = self.reply_mailbox() else {
            return;
        };
        while let Some(reply) = mailbox.poll_reply() {
            self.on_admission_reply(reply);
        }
    }

    fn on_admission_reply(&mut self, reply: AdmissionReply) {
        let id = client_of(reply.request_id);
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let ClientState::WaitingForReplica {
            request_id, epoch, ..
        } = client.state
        else {
            return;
        };
        if request_id != reply.request_id {
            return;
        }
        match reply.result {
            Ok(lease) => {
                log_admission(client, &lease);
                client.lease = Some(lease);
                client.failure_epoch_seen = epoch;
                self.join_leased_pool(id);
            }
            Err(error) => {
                let message = error.to_string();
                self.close_client(
                    id,
                    Some(proto::fatal(sqlstate_of(error.sqlstate()), &message)),
                );
            }
        }
    }

    /// A placed client joins its replica's pool: a first login continues with its welcome;
    /// a re-pinned client keeps its startup parameters and queues on the new pool.
    fn join_leased_pool(&mut self, id: ClientId) {
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let Some(old_pool) = client.pool else {
            self.join_pool(id);
            return;
        };
        let params = self.pools.get(old_pool).key.startup_params.clone();
        match self.pool_for_client(id, params) {
            Ok(pool) => {
                if let Some(client) = self.clients.get_mut(id.0) {
                    client.pool = Some(pool);
                    client.state = ClientState::Idle { since: self.now };
                }
                self.enqueue_waiter(id);
            }
            Err(error) => self.close_client(id, Some(error)),
        }
    }

    /// Called before a client between transactions gets a server: true when it was moved off
    /// a Down replica (or is waiting for that move, or was closed), so the caller must not
    /// queue it on its old pool. One atomic load when nothing failed.
    pub(crate) fn repin_if_replica_down(&mut self, id: ClientId) -> bool {
        let Some(client) = self.clients.get_mut(id.0) else {
            return true;
        };
        let Some(lease) = &client.lease else {
            return false;
        };
        let epoch = lease.router().failure_epoch();
        if epoch == client.failure_epoch_seen {
            return false;
        }
        let down = lease.router().is_down(lease.replica());
        client.failure_epoch_seen = epoch;
        if !down {
            return false;
        }
        self.repin(id);
        true
    }

    /// Moves a client off its Down replica: a welcomed client in transaction mode with
    /// `repin_idle_sessions` is re-admitted; anyone else is closed with 08006.
    fn repin(&mut self, id: ClientId) {
        let mode = self.client_pool_mode(id);
        let allowed = self.config.pgtier.repin_idle_sessions && mode != Some(PoolMode::Session);
        let Some(client) = self.clients.get_mut(id.0) else {
            return;
        };
        let welcomed = client.welcomed;
        let Some(lease) = client.lease.take() else {
            return;
        };
        if welcomed && !allowed {
            drop(lease);
            let error = proto::fatal(
                sqlstate::CONNECTION_FAILURE,
                "the replica serving this session failed; reconnect",
            );
            self.close_client(id, Some(error));
            return;
        }
        client.state = ClientState::Idle { since: self.now };
        let Some(mailbox) = self.reply_mailbox() else {
            let error = proto::fatal(sqlstate::CANNOT_CONNECT_NOW, "replica routing is off");
            self.close_client(id, Some(error));
            return;
        };
        let router = lease.router().clone();
        let epoch = router.failure_epoch();
        let admission = router.repin(lease, &mailbox, request_id(id));
        if self.apply_admission(id, admission, epoch) == Placement::Placed {
            self.join_leased_pool(id);
        }
    }

    fn client_pool_mode(&self, id: ClientId) -> Option<PoolMode> {
        let client = self.clients.get(id.0)?;
        let db = self.config.database(&client.database)?;
        Some(self.config.pool_mode(db, &client.user))
    }

    /// A connection to a pool's replica failed: tell its router (the replica goes Down at
    /// once). Returns false when the pool is not on a replica.
    pub(crate) fn report_replica_failure(
        &mut self,
        pool_id: PoolId,
        cause: ServerFailureCause,
    ) -> bool {
        let Some((router, replica)) = &self.pools.get(pool_id).replica else {
            return false;
        };
        debug!(
            replica = replica.0,
            ?cause,
            "server connection to a replica failed"
        );
        router.report_server_failure(*replica, cause);
        true
    }

    /// A server could not be reached (connect refused or timed out, reset during login). On
    /// a replica the router hears of it and the pool's waiters stay queued, to be re-routed
    /// once the replica is Down; elsewhere it is an ordinary failed login.
    pub(crate) fn server_unreachable(
        &mut self,
        id: ServerId,
        error: Bytes,
        cause: ServerFailureCause,
    ) {
        let Some(server) = self.servers.get(id.0) else {
            return;
        };
        let pool_id = server.pool;
        if !self.report_replica_failure(pool_id, cause) {
            self.login_failed(id, error);
            return;
        }
        self.stats.login_failures += 1;
        let retry = self.config.pgtier.server_login_retry.duration();
        self.pools.get_mut(pool_id).failure = Some(LoginFailure {
            error,
            retry_at: self.now + retry,
        });
        self.close_server(id);
    }

    /// Clients queued on pools of Down replicas are routed elsewhere, not failed.
    pub(crate) fn reroute_waiters_of_down_replicas(&mut self) {
        for pool_id in self.pools.ids() {
            let pool = self.pools.get(pool_id);
            if pool.waiters.is_empty() {
                continue;
            }
            let down = pool
                .replica
                .as_ref()
                .is_some_and(|(router, replica)| router.is_down(*replica));
            if !down {
                continue;
            }
            let waiters: Vec<ClientId> = self.pools.get_mut(pool_id).waiters.drain(..).collect();
            for id in waiters {
                let waiting = self
                    .clients
                    .get(id.0)
                    .is_some_and(|c| matches!(c.state, ClientState::WaitingForServer { .. }));
                if waiting {
                    self.repin(id);
                }
            }
        }
    }

    /// Folds this shard's latency histograms into the shared ones; shard 0 also closes the
    /// observation interval when `stats_period` has passed.
    pub(crate) fn fold_latency(&mut self) {
        let shared = &self.shared.routing;
        let mut recorded = false;
        for class in ClassSetting::ALL {
            let local = self.latency.of(class);
            if local.count() > 0 {
                shared.latency[class.index()].merge_from(local);
                recorded = true;
            }
        }
        if recorded {
            self.latency.reset();
        }
        if self.index == 0 {
            self.maybe_close_interval();
        }
    }

    fn maybe_close_interval(&mut self) {
        let period = self.config.pgtier.stats_period.duration();
        let started = *self.interval_started.get_or_insert(self.now);
        if self.now.saturating_duration_since(started) < period {
            return;
        }
        let shared = &self.shared.routing;
        let mut histogram = LatencyHistogram::new();
        let mut latency = [Default::default(); 2];
        for (class, summary) in latency.iter_mut().enumerate() {
            shared.latency[class].take_into(&mut histogram);
            *summary = histogram.summary();
        }
        let stats = IntervalStats {
            ended_at: SystemTime::now(),
            length: self.now.saturating_duration_since(started),
            latency,
        };
        *shared
            .interval
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(stats);
        shared.intervals.fetch_add(1, Ordering::AcqRel);
        self.interval_started = Some(self.now);
    }
}

/// One debug line per admitted session, so an operator can follow where sessions land.
fn log_admission(client: &crate::client::Client, lease: &crate::control::SessionLease) {
    debug!(
        database = %client.database,
        user = %client.user,
        class = lease.class().as_str(),
        replica = ?lease.replica_addr(),
        "session admitted to a replica"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_option_is_consumed_and_others_kept() {
        assert_eq!(strip_class_option("-c pgtier.class=freemium"), None);
        assert_eq!(
            strip_class_option("-c search_path=a\\ b --pgtier.class=freemium -c work_mem=64kB"),
            Some("-c search_path=a\\ b -c work_mem=64kB".to_string())
        );
        assert_eq!(strip_class_option("-cPGTIER.CLASS=premium"), None);
        assert_eq!(
            strip_class_option("--work-mem=64kB"),
            Some("--work-mem=64kB".to_string())
        );
    }

    #[test]
    fn request_id_finds_the_slot() {
        let id = ClientId(SlotRef {
            index: 7,
            generation: 0xabcdef,
        });
        assert_eq!(client_of(request_id(id)), id);
    }
}
