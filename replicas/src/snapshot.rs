//! The immutable routing snapshot a router publishes for its shards.
//!
//! Data shards read it without a lock at every admission (through `arc_swap`), so it holds only
//! what a decision needs: the role table (with `Down` marking failed replicas) and the
//! generation that tells a shard whether the table changed under its decision.

use pgtier_policy::ReplicaId;

use crate::route_table::RouteTable;

/// One published state of a router's role table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutingSnapshot {
    /// Increases by one at every publish; a decision made on generation `g` is valid only while
    /// `g` is still the published generation.
    pub generation: u64,
    /// Role of every replica; failed replicas have [`Role::Down`].
    pub table: RouteTable,
    /// True when some replica is borrowed, i.e. a session close may enable a return.
    pub has_borrowed: bool,
}

impl RoutingSnapshot {
    /// The snapshot of `table` at `generation`.
    pub fn new(generation: u64, table: RouteTable) -> RoutingSnapshot {
        let has_borrowed = table.has_borrowed();
        RoutingSnapshot {
            generation,
            table,
            has_borrowed,
        }
    }

    /// True when `replica` is Down (or unknown) in this snapshot.
    pub fn is_down(&self, replica: ReplicaId) -> bool {
        self.table.role(replica).is_none_or(|role| role.is_down())
    }
}
