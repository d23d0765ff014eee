//! The narrow interface through which the engine asks a routing strategy where a session
//! goes. Adapters in `strategies` implement it on top of `pgtier_policy`, so the simulator
//! never re-implements a policy; the engine only knows this trait.

use super::class::Class;

/// Index of a replica, 0..K.
pub type ReplicaIndex = usize;

/// Index of a session in the order the engine admitted them (0, 1, 2, ...): the same
/// session has the same index under every strategy of a common-random-numbers comparison.
pub type SessionIndex = usize;

/// A session-level routing strategy as the engine sees it.
pub trait Router {
    /// Chooses the replica for a new session of `class`, or None when no replica can take
    /// it (every replica is down). The strategy counts the session as active on it.
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex>;

    /// A session of `class` on `replica` ended normally.
    fn release(&mut self, replica: ReplicaIndex, class: Class);

    /// [`Router::admit`] for the session that will get index `session` (a re-admission by the
    /// drain passes the session's own index). Routers that keep state per session, such as a
    /// fleet of proxies each holding its clients, override it.
    fn admit_session(&mut self, _session: SessionIndex, class: Class) -> Option<ReplicaIndex> {
        self.admit(class)
    }

    /// [`Router::release`] of the session admitted as `session`.
    fn release_session(&mut self, _session: SessionIndex, replica: ReplicaIndex, class: Class) {
        self.release(replica, class);
    }

    /// Simulated time moved to `now_s`; called before every event is handled, so a router
    /// with timers of its own (reports, publications) runs them in order. The state it
    /// observes is the one just before the event: nothing changes between events.
    fn advance(&mut self, _now_s: f64) {}

    /// A query of a `class` session started running on `replica` (its transaction is in
    /// flight until `query_done`). Strategies that count sessions ignore it.
    fn query_started(&mut self, _replica: ReplicaIndex, _class: Class) {}

    /// The query started by `query_started` finished or was abandoned.
    fn query_done(&mut self, _replica: ReplicaIndex, _class: Class) {}

    /// Changes whenever sessions should ask [`Router::should_move`] again (the recovery-tail
    /// drain after a rejoin); constant for strategies without one.
    fn drain_epoch(&self) -> u64 {
        0
    }

    /// Whether a `class` session on `replica`, between two queries, should leave it; the
    /// engine then releases it and admits it again.
    fn should_move(&mut self, _replica: ReplicaIndex, _class: Class) -> bool {
        false
    }

    /// `replica` failed; `lost` lists the classes of the sessions that were on it, which the
    /// engine has already terminated (they are never released through `release`).
    fn replica_down(&mut self, replica: ReplicaIndex, lost: &[Class]);

    /// `replica` is reachable again and empty.
    fn replica_up(&mut self, replica: ReplicaIndex);

    /// The current role of each replica, as labels for traces.
    fn role_labels(&self) -> Vec<String>;

    /// Role changes the strategy decided but its role table refused; a sequential simulation
    /// must see none (each decision is applied before the next is made).
    fn refused_role_changes(&self) -> u64 {
        0
    }
}
