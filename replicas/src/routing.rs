//! The engine's replica routing, served by the control shard's routers: a session on a
//! replica-set entry is admitted on the calling shard from the routers' snapshot (or by the
//! control shard, whose answer arrives in this shard's reply mailbox), re-pinned when its
//! replica goes Down, and every connection failure to a replica is reported to its router.
//! A read transaction of a reader entry is placed by the entry's
//! [`ReadRouter`](crate::ReadRouter) with this shard's own random source and alternation
//! state.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use ahash::AHashMap;
use arc_swap::ArcSwap;
use pgtier_engine::services::{
    Admission, AdmissionReply, ElectedServer, FailureCause, PrimaryNow, ReadRequest, ReadRoute,
    Refusal, ReplicaLease, Routing,
};
use pgtier_policy::tiers::Tier;
use pgtier_wire::SqlState;

use crate::{
    AdmissionError, ReadAsk, ReadLocal, ReadPlacement, ReplicaRouter, ReplyMailbox, RouterMap,
    ServerFailureCause, SessionLease,
};

/// Routing state every shard shares: the routers of the current configuration, replaced on
/// reload before the shards get the new configuration, and the latest write of each user
/// (read-your-writes with `read_your_writes_scope = "user"`).
pub struct SharedRouting {
    pub map: ArcSwap<RouterMap>,
    /// The fleet this process belongs to, as its fleet thread last saw it (mode `off`
    /// without `fleet_name`); kept across reloads.
    pub fleet: Arc<crate::fleet::FleetStatus>,
    /// database → user → end of that user's latest write transaction. Touched only by
    /// entries with the user scope; bounded by the users that can log in.
    user_writes: Mutex<AHashMap<String, AHashMap<String, Instant>>>,
}

impl SharedRouting {
    pub fn new(map: RouterMap) -> SharedRouting {
        SharedRouting::with_fleet(map, crate::fleet::FleetStatus::new())
    }

    /// Routing whose fleet thread (if any) writes to `fleet`.
    pub fn with_fleet(map: RouterMap, fleet: Arc<crate::fleet::FleetStatus>) -> SharedRouting {
        SharedRouting {
            fleet,
            map: ArcSwap::from_pointee(map),
            user_writes: Mutex::new(AHashMap::new()),
        }
    }

    fn user_writes(
        &self,
    ) -> std::sync::MutexGuard<'_, AHashMap<String, AHashMap<String, Instant>>> {
        self.user_writes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One shard's view: the shared routers, its own reply mailbox, the router each of its
/// pending admissions went to, and its own read-placement state (the engine calls in from the
/// shard's thread only, so `RefCell`s suffice).
pub struct ShardRouting {
    shared: Arc<SharedRouting>,
    replies: Arc<ReplyMailbox>,
    /// request id → the router asked. A reply carries only the lease, and a lease holds the
    /// router's shared state, not the router a re-pin needs; so the shard remembers which
    /// router it asked until the reply comes (one entry per client waiting for the control
    /// shard; request ids are unique per client lifetime).
    pending: RefCell<AHashMap<u64, Arc<ReplicaRouter>>>,
    reads: RefCell<ReadLocal>,
}

impl ShardRouting {
    pub fn new(shared: Arc<SharedRouting>, replies: Arc<ReplyMailbox>) -> ShardRouting {
        let mut seed = [0u8; 8];
        // Without OS randomness the shards still spread reads, only less independently.
        let seed = match pgtier_wire::auth::os_random(&mut seed) {
            Ok(()) => u64::from_le_bytes(seed),
            Err(_) => Arc::as_ptr(&replies) as u64,
        };
        ShardRouting {
            shared,
            replies,
            pending: RefCell::new(AHashMap::new()),
            reads: RefCell::new(ReadLocal::new(seed)),
        }
    }

    /// `admission` as the engine's; a pending one is remembered with `router` until its reply.
    fn admission(
        &self,
        router: &Arc<ReplicaRouter>,
        request_id: u64,
        admission: crate::Admission,
    ) -> Admission {
        match admission {
            crate::Admission::Placed(lease) => {
                Admission::Placed(EngineLease::boxed(lease, Arc::clone(router)))
            }
            crate::Admission::Pending => {
                // Only this shard's thread calls in, and never re-entrantly.
                if let Ok(mut pending) = self.pending.try_borrow_mut() {
                    pending.insert(request_id, Arc::clone(router));
                }
                Admission::Pending
            }
            crate::Admission::Refused(error) => Admission::Refused(refusal(&error)),
        }
    }
}

/// A control-plane refusal as the engine's, with its SQLSTATE.
fn refusal(error: &AdmissionError) -> Refusal {
    Refusal {
        code: SqlState::parse(error.sqlstate().as_bytes())
            .unwrap_or(pgtier_wire::sqlstate::INTERNAL_ERROR),
        message: error.to_string(),
    }
}

/// A session's lease, the router that granted it (to re-pin on), and the failure epoch it
/// last saw.
#[derive(Debug)]
struct EngineLease {
    lease: SessionLease,
    router: Arc<ReplicaRouter>,
    epoch_seen: u64,
}

impl EngineLease {
    fn boxed(lease: SessionLease, router: Arc<ReplicaRouter>) -> Box<dyn ReplicaLease> {
        let epoch_seen = lease.router_state().failure_epoch();
        Box::new(EngineLease {
            lease,
            router,
            epoch_seen,
        })
    }
}

impl ReplicaLease for EngineLease {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }

    fn addr(&self) -> SocketAddr {
        self.lease
            .replica_addr()
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    fn class(&self) -> Tier {
        self.lease.class()
    }

    fn replica_failed(&mut self) -> bool {
        // Through the lease's state, one `Arc` away, rather than the router's: asked between
        // every two transactions.
        let state = self.lease.router_state();
        let epoch = state.failure_epoch();
        if epoch == self.epoch_seen {
            return false;
        }
        self.epoch_seen = epoch;
        state.is_down(self.lease.replica())
    }

    fn transaction_started(&mut self) {
        self.lease.begin_transaction();
    }

    fn transaction_ended(&mut self) {
        self.lease.end_transaction();
    }

    fn should_move(&mut self) -> bool {
        self.lease.should_move()
    }
}

impl Routing for ShardRouting {
    fn is_routed(&self, database: &str) -> bool {
        self.shared.map.load().router(database).is_some()
    }

    fn admit(&self, database: &str, class: Tier, request_id: u64) -> Admission {
        let map = self.shared.map.load();
        let Some(router) = map.router(database) else {
            return Admission::Refused(refusal(&AdmissionError::NoReplicaUp));
        };
        self.admission(
            router,
            request_id,
            router.admit_session(class, &self.replies, request_id),
        )
    }

    fn repin(&self, lease: Box<dyn ReplicaLease>, request_id: u64) -> Admission {
        match lease.into_any().downcast::<EngineLease>() {
            Ok(lease) => {
                let EngineLease { lease, router, .. } = *lease;
                let admission = router.repin(lease, &self.replies, request_id);
                self.admission(&router, request_id, admission)
            }
            // Not one of ours (a bug): refuse rather than guess.
            Err(_) => Admission::Refused(refusal(&AdmissionError::Internal(
                "a session's lease is not from this router".to_string(),
            ))),
        }
    }

    fn poll_reply(&self) -> Option<AdmissionReply> {
        let reply = self.replies.poll_reply()?;
        let router = match self.pending.try_borrow_mut() {
            Ok(mut pending) => pending.remove(&reply.request_id),
            Err(_) => None,
        };
        let result = match (reply.result, router) {
            (Ok(lease), Some(router)) => Ok(EngineLease::boxed(lease, router)),
            (Err(error), _) => Err(refusal(&error)),
            // A reply to nothing this shard asked (a bug): the lease is dropped, releasing its
            // count, and the client refused rather than left without a router to re-pin on.
            (Ok(_), None) => Err(refusal(&AdmissionError::Internal(
                "an admission reply this shard did not ask for".to_string(),
            ))),
        };
        Some(AdmissionReply {
            request_id: reply.request_id,
            result,
        })
    }

    fn report_failure(&self, database: &str, replica: SocketAddr, cause: FailureCause) {
        let map = self.shared.map.load();
        let Some(router) = map.router(database) else {
            return;
        };
        let Some(id) = router.replica_id(replica) else {
            return;
        };
        let cause = match cause {
            FailureCause::ConnectionRefused => ServerFailureCause::ConnectionRefused,
            FailureCause::ConnectTimeout => ServerFailureCause::ConnectTimeout,
            FailureCause::ConnectionReset => ServerFailureCause::ConnectionReset,
            FailureCause::ServerShutdown => ServerFailureCause::ServerShutdown,
        };
        router.report_server_failure(id, cause);
    }

    fn is_down(&self, database: &str, replica: SocketAddr) -> bool {
        let map = self.shared.map.load();
        map.router(database)
            .and_then(|router| Some(router.is_down(router.replica_id(replica)?)))
            .unwrap_or(false)
    }

    fn function_read_only(
        &self,
        database: &str,
        schema: pgtier_wire::read_only::CalleeSchema,
        name: &[u8],
    ) -> Option<bool> {
        let map = self.shared.map.load();
        map.reader(database)?.functions().read_only(schema, name)
    }

    fn primary(&self, database: &str) -> Option<PrimaryNow> {
        let map = self.shared.map.load();
        if let Some(watch) = map.host_primary(database) {
            let elected = watch.elected();
            return Some(PrimaryNow {
                server: elected.host.map(ElectedServer::Listed),
                epoch: elected.epoch,
            });
        }
        // Without a probe login nothing polls the hosts: the configured primary stands.
        let reader = map.reader(database).filter(|r| r.probe_login().is_some())?;
        let elected = reader.elected_primary();
        Some(PrimaryNow {
            server: elected.addr.map(ElectedServer::Addr),
            epoch: elected.epoch,
        })
    }

    fn functions_changed(&self, database: &str) {
        let map = self.shared.map.load();
        if let Some(reader) = map.reader(database) {
            reader.functions().forget();
        }
    }

    fn route_read(&self, request: &ReadRequest<'_>) -> ReadRoute {
        let map = self.shared.map.load();
        let Some(reader) = map.reader(request.database) else {
            return ReadRoute::Primary;
        };
        let ask = ReadAsk {
            class: request.class,
            leased: request.leased,
            after: request.after,
            avoid: request.avoid,
        };
        // Only this shard's thread calls in, and never re-entrantly; a busy cell would be a
        // bug, answered safely with the primary.
        let Ok(mut local) = self.reads.try_borrow_mut() else {
            return ReadRoute::Primary;
        };
        match reader.route(&ask, &mut local) {
            ReadPlacement::Replica(ticket) => ReadRoute::Replica(Box::new(ticket)),
            ReadPlacement::Primary => ReadRoute::Primary,
            ReadPlacement::NotYet => ReadRoute::NotYet,
        }
    }

    fn note_user_write(&self, database: &str, user: &str, at: Instant) {
        let mut writes = self.shared.user_writes();
        let users = match writes.get_mut(database) {
            Some(users) => users,
            None => writes.entry(database.to_string()).or_default(),
        };
        match users.get_mut(user) {
            Some(latest) => *latest = (*latest).max(at),
            None => {
                users.insert(user.to_string(), at);
            }
        }
    }

    fn user_write(&self, database: &str, user: &str) -> Option<Instant> {
        self.shared.user_writes().get(database)?.get(user).copied()
    }
}
