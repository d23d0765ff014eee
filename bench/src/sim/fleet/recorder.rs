//! A router wrapper that records where each session was placed, so that two runs on the same
//! arrivals can be compared session by session (the fleet experiment's placement agreement
//! with the single proxy).

use super::super::router::{ReplicaIndex, Router, SessionIndex};
use super::super::workload::Class;

/// `inner`, recording the replica of each session's latest admission (None: rejected).
pub struct Recorder<R> {
    /// The router deciding.
    pub inner: R,
    placed: Vec<Option<ReplicaIndex>>,
}

impl<R: Router> Recorder<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        Self {
            inner,
            placed: Vec::new(),
        }
    }

    /// The replica of each session, by session index.
    pub fn placements(&self) -> &[Option<ReplicaIndex>] {
        &self.placed
    }
}

/// Of the sessions placed in both runs, how many went to the same replica, and how many were
/// compared.
pub fn same_replica(a: &[Option<ReplicaIndex>], b: &[Option<ReplicaIndex>]) -> (u64, u64) {
    same_by(a, b, |r| r)
}

/// Of the sessions placed in both runs, how many went to the same group of `group`, and how
/// many were compared.
pub fn same_by(
    a: &[Option<ReplicaIndex>],
    b: &[Option<ReplicaIndex>],
    group: impl Fn(ReplicaIndex) -> usize,
) -> (u64, u64) {
    let mut same = 0;
    let mut compared = 0;
    for (x, y) in a.iter().zip(b) {
        if let (Some(x), Some(y)) = (x, y) {
            compared += 1;
            same += u64::from(group(*x) == group(*y));
        }
    }
    (same, compared)
}

impl<R: Router> Router for Recorder<R> {
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex> {
        self.inner.admit(class)
    }

    fn release(&mut self, replica: ReplicaIndex, class: Class) {
        self.inner.release(replica, class);
    }

    fn admit_session(&mut self, session: SessionIndex, class: Class) -> Option<ReplicaIndex> {
        let placed = self.inner.admit_session(session, class);
        if self.placed.len() <= session {
            self.placed.resize(session + 1, None);
        }
        self.placed[session] = placed;
        placed
    }

    fn release_session(&mut self, session: SessionIndex, replica: ReplicaIndex, class: Class) {
        self.inner.release_session(session, replica, class);
    }

    fn advance(&mut self, now_s: f64) {
        self.inner.advance(now_s);
    }

    fn query_started(&mut self, replica: ReplicaIndex, class: Class) {
        self.inner.query_started(replica, class);
    }

    fn query_done(&mut self, replica: ReplicaIndex, class: Class) {
        self.inner.query_done(replica, class);
    }

    fn drain_epoch(&self) -> u64 {
        self.inner.drain_epoch()
    }

    fn should_move(&mut self, replica: ReplicaIndex, class: Class) -> bool {
        self.inner.should_move(replica, class)
    }

    fn replica_down(&mut self, replica: ReplicaIndex, lost: &[Class]) {
        self.inner.replica_down(replica, lost);
    }

    fn replica_up(&mut self, replica: ReplicaIndex) {
        self.inner.replica_up(replica);
    }

    fn role_labels(&self) -> Vec<String> {
        self.inner.role_labels()
    }

    fn refused_role_changes(&self) -> u64 {
        self.inner.refused_role_changes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::strategies::PolicyRouter;
    use pgtier_policy::PlbParams;

    #[test]
    fn it_records_each_sessions_replica_and_changes_nothing() {
        let mut plain = PolicyRouter::plb(PlbParams::PAPER, 5).expect("router");
        let mut recorded = Recorder::new(PolicyRouter::plb(PlbParams::PAPER, 5).expect("r"));
        for session in 0..30 {
            let class = if session % 3 == 0 {
                Class::PREMIUM
            } else {
                Class::FREEMIUM
            };
            assert_eq!(
                recorded.admit_session(session, class),
                plain.admit_session(session, class)
            );
        }
        assert_eq!(recorded.placements().len(), 30);
        assert_eq!(recorded.inner.table(), plain.table());
        let placed = recorded.placements().to_vec();
        assert_eq!(same_replica(&placed, &placed), (30, 30));
        let mut other = placed.clone();
        other[0] = other[0].map(|r| (r + 1) % 5);
        other[1] = None;
        assert_eq!(same_replica(&placed, &other), (28, 29));
        assert_eq!(
            same_by(&placed, &other, |_| 0),
            (29, 29),
            "one group: all agree"
        );
    }
}
