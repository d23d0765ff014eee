//! The control shard's event log: every role change (borrow, return, canonicalization, repair)
//! and every health transition (Down, Rejoin), numbered and kept in a bounded ring.
//!
//! It exists so an operator can see why the layout is what it is (`SHOW ROLE_EVENTS`,
//! `SHOW EVENTS`), and so tests can prove that no role change was lost or applied twice: the
//! sequence numbers are gapless per database and replaying the role changes over the initial
//! table gives the current one. Only the control shard appends; readers take a copy.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use pgtier_policy::RoleChange;
use pgtier_policy::tiers::{TierChange, TierReason};
use pgtier_policy::{ReplicaId, ServiceClass};

use crate::route_table::{RouteRole, class_name};

/// A health transition of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthTransition {
    /// The replica stopped receiving new sessions.
    Down,
    /// The replica is reachable again and was added back as shared capacity.
    Rejoin,
}

impl HealthTransition {
    /// Spelling in logs and the admin console.
    pub const fn as_str(self) -> &'static str {
        match self {
            HealthTransition::Down => "down",
            HealthTransition::Rejoin => "rejoin",
        }
    }
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A role change was applied to the authoritative table. `class` is the class that borrowed
    /// (borrow) or had borrowed (return); `None` for repair and canonicalization steps.
    Role {
        change: RoleChange,
        class: Option<ServiceClass>,
    },
    /// A role change of a tiered table (`tiers = [...]`); the class is the borrower in
    /// `change.to` or `change.from`.
    TierRole { change: TierChange },
    /// A health transition with its cause (probe error, shard report, recovery).
    Health {
        replica: ReplicaId,
        transition: HealthTransition,
        cause: String,
    },
}

/// One numbered event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlEvent {
    /// Gapless per database, starting at 1.
    pub seq: u64,
    /// Wall-clock time of the event.
    pub at: SystemTime,
    /// Database entry name.
    pub database: Arc<str>,
    /// What happened.
    pub kind: EventKind,
}

impl ControlEvent {
    /// True for borrows and returns (what `SHOW ROLE_EVENTS` lists).
    pub fn is_borrow_or_return(&self) -> bool {
        match &self.kind {
            EventKind::Role { change, .. } => !is_failure_step(change),
            EventKind::TierRole { change } => !is_tier_failure_step(change),
            EventKind::Health { .. } => false,
        }
    }

    /// True for Down/Rejoin and the repair steps they cause (what `SHOW EVENTS` lists).
    pub fn is_failure_handling(&self) -> bool {
        match &self.kind {
            EventKind::Role { change, .. } => is_failure_step(change),
            EventKind::TierRole { change } => is_tier_failure_step(change),
            EventKind::Health { .. } => true,
        }
    }
}

fn is_failure_step(change: &RoleChange) -> bool {
    use pgtier_policy::ChangeReason as R;
    matches!(
        change.reason,
        R::Down
            | R::Rejoin
            | R::CanonicalMixedSessions
            | R::CanonicalPremiumOnly
            | R::CanonicalFreemiumOnly
            | R::CanonicalIdleReturn
            | R::RepairToTarget
    )
}

fn is_tier_failure_step(change: &TierChange) -> bool {
    matches!(
        change.reason,
        TierReason::Down
            | TierReason::Rejoin
            | TierReason::CanonicalMixedSessions
            | TierReason::CanonicalSingleTier
            | TierReason::CanonicalIdleReturn
            | TierReason::RepairToTarget
    )
}

#[derive(Debug)]
struct Ring {
    events: VecDeque<ControlEvent>,
    next_seq: u64,
    /// Borrows and returns ever recorded (the metrics endpoint's role-event counter).
    role_events: u64,
}

/// Bounded, numbered event log of one database.
#[derive(Debug)]
pub struct EventLog {
    database: Arc<str>,
    capacity: usize,
    ring: Mutex<Ring>,
}

impl EventLog {
    /// An empty log keeping the newest `capacity` events (at least one).
    pub fn new(database: Arc<str>, capacity: usize) -> EventLog {
        let capacity = capacity.max(1);
        EventLog {
            database,
            capacity,
            ring: Mutex::new(Ring {
                events: VecDeque::with_capacity(capacity),
                next_seq: 1,
                role_events: 0,
            }),
        }
    }

    /// Appends an event, numbers it, logs it at info level and returns its number.
    pub fn record(&self, at: SystemTime, kind: EventKind) -> u64 {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let seq = ring.next_seq;
        ring.next_seq += 1;
        let event = ControlEvent {
            seq,
            at,
            database: Arc::clone(&self.database),
            kind,
        };
        trace_event(&event);
        ring.role_events += u64::from(event.is_borrow_or_return());
        if ring.events.len() == self.capacity {
            ring.events.pop_front();
        }
        ring.events.push_back(event);
        seq
    }

    /// Copy of the kept events, oldest first.
    pub fn events(&self) -> Vec<ControlEvent> {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.events.iter().cloned().collect()
    }

    /// Number of events ever recorded (kept or dropped by the ring).
    pub fn recorded(&self) -> u64 {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.next_seq - 1
    }

    /// Borrows and returns ever recorded (kept or dropped by the ring).
    pub fn role_events_recorded(&self) -> u64 {
        let ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        ring.role_events
    }

    /// Most events kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A role change as the admin console and the log name it, whichever vocabulary the table
/// decides in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleEventParts {
    /// The replica whose role changed.
    pub replica: ReplicaId,
    /// Its role before.
    pub from: &'static str,
    /// Its role after.
    pub to: &'static str,
    /// The class that borrowed or had borrowed; `None` for repair steps.
    pub class: Option<&'static str>,
    /// Why.
    pub reason: &'static str,
}

impl EventKind {
    /// The role change this event is, `None` for a health transition.
    pub fn role_parts(&self) -> Option<RoleEventParts> {
        match self {
            EventKind::Role { change, class } => Some(RoleEventParts {
                replica: change.replica,
                from: change.from.as_str(),
                to: change.to.as_str(),
                class: class.map(ServiceClass::as_str),
                reason: change.reason.as_str(),
            }),
            EventKind::TierRole { change } => Some(RoleEventParts {
                replica: change.replica,
                from: RouteRole::Tier(change.from).as_str(),
                to: RouteRole::Tier(change.to).as_str(),
                class: change
                    .to
                    .borrower()
                    .or(change.from.borrower())
                    .map(class_name),
                reason: change.reason.as_str(),
            }),
            EventKind::Health { .. } => None,
        }
    }
}

fn trace_event(event: &ControlEvent) {
    match (&event.kind, event.kind.role_parts()) {
        (_, Some(role)) => tracing::info!(
            database = %event.database,
            seq = event.seq,
            replica = role.replica.0,
            from = role.from,
            to = role.to,
            class = role.class.unwrap_or("-"),
            reason = role.reason,
            "role change"
        ),
        (
            EventKind::Health {
                replica,
                transition,
                cause,
            },
            None,
        ) => tracing::info!(
            database = %event.database,
            seq = event.seq,
            replica = replica.0,
            transition = transition.as_str(),
            cause = %cause,
            "replica health"
        ),
        (_, None) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_policy::{ChangeReason, Pool, Role};

    fn borrow(replica: u8) -> EventKind {
        EventKind::Role {
            change: RoleChange {
                replica: ReplicaId(replica),
                from: Role::Mixed,
                to: Role::BorrowedToPremium { from: Pool::Mixed },
                reason: ChangeReason::BorrowMixedForPremium,
            },
            class: Some(ServiceClass::Premium),
        }
    }

    #[test]
    fn sequence_numbers_are_gapless_and_ring_is_bounded() {
        let log = EventLog::new(Arc::from("db"), 2);
        for replica in 0..3 {
            log.record(SystemTime::UNIX_EPOCH, borrow(replica));
        }
        let kept: Vec<u64> = log.events().iter().map(|e| e.seq).collect();
        assert_eq!(kept, vec![2, 3]);
        assert_eq!(log.recorded(), 3);
        assert_eq!(
            log.role_events_recorded(),
            3,
            "dropped events still counted"
        );
    }

    #[test]
    fn borrows_and_health_events_are_told_apart() {
        let log = EventLog::new(Arc::from("db"), 8);
        log.record(SystemTime::UNIX_EPOCH, borrow(0));
        log.record(
            SystemTime::UNIX_EPOCH,
            EventKind::Health {
                replica: ReplicaId(1),
                transition: HealthTransition::Down,
                cause: "connection refused".to_string(),
            },
        );
        let events = log.events();
        assert!(events[0].is_borrow_or_return() && !events[0].is_failure_handling());
        assert!(!events[1].is_borrow_or_return() && events[1].is_failure_handling());
        assert_eq!(
            log.role_events_recorded(),
            1,
            "a health event is no role event"
        );
    }
}
