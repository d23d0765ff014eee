//! Helpers shared by the policy integration tests: compact layouts and load vectors.
#![allow(dead_code)]

use pgtier_policy::{
    Admission, Plb, PlbParams, ReplicaId, ReplicaLoad, Role, RoleTable, ServiceClass,
};

pub const P: ServiceClass = ServiceClass::Premium;
pub const F: ServiceClass = ServiceClass::Freemium;

pub fn r(index: u8) -> ReplicaId {
    ReplicaId(index)
}

pub fn ids(indices: &[u8]) -> Vec<ReplicaId> {
    indices.iter().map(|&i| ReplicaId(i)).collect()
}

/// `(premium, freemium)` per replica.
pub fn loads(per_replica: &[(u32, u32)]) -> Vec<ReplicaLoad> {
    per_replica
        .iter()
        .map(|&(premium, freemium)| ReplicaLoad { premium, freemium })
        .collect()
}

pub fn layout(k: usize, premium: &[u8], freemium: &[u8]) -> RoleTable {
    RoleTable::new(k, &ids(premium), &ids(freemium)).expect("valid layout")
}

/// The paper's five-replica deployment: R_P = {0, 1}, R_F = {2, 3}, R_M = {4}.
pub fn paper_table() -> RoleTable {
    layout(5, &[0, 1], &[2, 3])
}

pub fn paper_plb() -> Plb {
    Plb::new(PlbParams::PAPER, &paper_table()).expect("paper parameters are valid")
}

pub fn plb_with(params: PlbParams, table: &RoleTable) -> Plb {
    Plb::new(params, table).expect("valid parameters")
}

/// Sets roles directly (through validated changes) to build mid-run states.
pub fn with_roles(table: &RoleTable, roles: &[(u8, Role)]) -> RoleTable {
    let mut table = table.clone();
    let params = PlbParams::PAPER.with_floor(F, 0).with_target(P, 0);
    for &(index, to) in roles {
        let from = table.role(r(index)).expect("replica exists");
        let change = pgtier_policy::RoleChange {
            replica: r(index),
            from,
            to,
            reason: pgtier_policy::ChangeReason::RepairToTarget,
        };
        table
            .apply(&change, &params)
            .expect("test role change applies");
    }
    table
}

/// Applies every change of an admission; panics on conflict (single-threaded tests).
pub fn apply_all(table: &mut RoleTable, admission: &Admission, params: &PlbParams) {
    for change in admission.role_changes.iter() {
        table.apply(change, params).expect("fresh decision applies");
    }
}

/// A single-threaded stand-in for the proxy: one table owner applying every decision at once,
/// with real per-replica session counters.
pub struct Cluster {
    pub plb: Plb,
    pub table: RoleTable,
    pub loads: Vec<ReplicaLoad>,
}

impl Cluster {
    pub fn new(plb: Plb, table: RoleTable) -> Cluster {
        let loads = vec![ReplicaLoad::default(); table.len()];
        Cluster { plb, table, loads }
    }

    pub fn paper() -> Cluster {
        Cluster::new(paper_plb(), paper_table())
    }

    /// Admits one session, applies the decision's role changes, counts the session.
    pub fn open(&mut self, class: ServiceClass) -> Admission {
        let admission = self
            .plb
            .admit(&self.table, &self.loads, class)
            .expect("admission");
        apply_all(&mut self.table, &admission, self.plb.params());
        self.loads[admission.replica.index()]
            .admitted(class)
            .expect("counter in range");
        admission
    }

    pub fn open_many(&mut self, class: ServiceClass, count: usize) -> Vec<Admission> {
        (0..count).map(|_| self.open(class)).collect()
    }

    pub fn close(&mut self, replica: ReplicaId, class: ServiceClass, count: u32) {
        for _ in 0..count {
            self.loads[replica.index()]
                .released(class)
                .expect("session exists");
        }
    }

    pub fn role(&self, index: u8) -> Role {
        self.table.role(r(index)).expect("replica exists")
    }
}
