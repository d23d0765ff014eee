//! Tiered PLB in the simulator: the layout and parameters of a three-class run, and the
//! `Router` adapter onto `pgtier_policy::tiers`, which keeps per-rank session counters and
//! applies the role changes the policy returns (as `strategies::PolicyRouter` does for the
//! two-class policies).

use pgtier_policy::tiers::{Tier, TierLoad, TierTable, TieredPlb};
use pgtier_policy::{PlbParams, ReplicaId, ServiceClass};

use super::class::Class;
use super::router::{ReplicaIndex, Router};

/// The initial pools and parameters of a tiered run.
#[derive(Debug, Clone, PartialEq)]
pub struct TierSetup {
    /// Initial pool of each rank (replica indices); replicas in none start Mixed.
    pub pools: Vec<Vec<usize>>,
    /// The policy's parameters (θ, α, κ, K per rank).
    pub params: PlbParams,
}

impl TierSetup {
    /// The paper's two classes as ranks on PLB's layout for `replicas` (the first ⌊2K/5⌋
    /// premium, the next ⌊2K/5⌋ freemium, as `strategies::PolicyRouter::plb`), with reclaim
    /// on or off; off, it decides exactly as the paper's PLB.
    pub fn two_of(plb: &PlbParams, replicas: usize, reclaim: bool) -> TierSetup {
        let pool = (2 * replicas / 5).max(1);
        TierSetup {
            pools: vec![
                (0..pool).collect(),
                (pool..(2 * pool).min(replicas)).collect(),
            ],
            params: PlbParams { reclaim, ..*plb },
        }
    }

    /// Three ranks on the paper's five replicas, pools in proportion to the experiment's
    /// 20 / 30 / 50 % mix: rank 0 {0}, rank 1 {1}, rank 2 {2, 3}, replica 4 Mixed. θ for every
    /// rank is the paper's θ_P; α rises with rank (0.6, 0.7, 0.8: the paper's α_P and α_F with
    /// the middle rank between them); κ = 1 keeps ranks 1 and 2 a replica each; K = (1, 1, 2)
    /// are the initial pool sizes, as the paper's K_P and K_F are; reclaim on (a more
    /// important rank may take Mixed back). A (2, 1, 1) split strands rank 0's second replica
    /// at that mix (u 0.64 against 0.68 at T = 1000).
    pub fn three_of(plb: &PlbParams) -> TierSetup {
        let theta = plb.theta(ServiceClass::Premium);
        TierSetup {
            pools: vec![vec![0], vec![1], vec![2, 3]],
            params: PlbParams {
                tiers: 3,
                theta: [theta; 4],
                alpha: [
                    plb.alpha(ServiceClass::Premium),
                    0.7,
                    plb.alpha(ServiceClass::Freemium),
                    1.0,
                ],
                floor: [0, 1, 1, 0],
                target: [1, 1, 2, 0],
                reclaim: true,
            },
        }
    }
}

/// `pgtier_policy::tiers::TieredPlb` driven as the proxy would drive it.
pub struct TieredRouter {
    plb: TieredPlb,
    table: TierTable,
    loads: Vec<TierLoad>,
    /// Role changes the table refused (stays 0: decisions and applies are sequential).
    pub conflicts: u64,
    /// Role changes applied, by admissions and by failure handling.
    pub role_changes: u64,
}

impl TieredRouter {
    /// The router of `setup` on `replicas` replicas.
    pub fn new(setup: &TierSetup, replicas: usize) -> Result<Self, String> {
        let pools: Vec<Vec<ReplicaId>> = setup
            .pools
            .iter()
            .map(|pool| {
                pool.iter()
                    .map(|&i| {
                        ReplicaId::from_index(i).ok_or_else(|| format!("replica {i} out of range"))
                    })
                    .collect()
            })
            .collect::<Result<_, _>>()?;
        let slices: Vec<&[ReplicaId]> = pools.iter().map(Vec::as_slice).collect();
        let table =
            TierTable::new(replicas, setup.params.tiers, &slices).map_err(|e| e.to_string())?;
        let plb = TieredPlb::new(setup.params, &table).map_err(|e| e.to_string())?;
        Ok(Self {
            plb,
            loads: vec![TierLoad::default(); replicas],
            table,
            conflicts: 0,
            role_changes: 0,
        })
    }

    /// The role table now.
    pub fn table(&self) -> &TierTable {
        &self.table
    }
}

impl Router for TieredRouter {
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex> {
        let admission = self
            .plb
            .admit(&self.table, &self.loads, Tier(class.0))
            .ok()?;
        for change in admission.role_changes.iter() {
            match self.table.apply(change, self.plb.params()) {
                Ok(()) => self.role_changes += 1,
                Err(_) => self.conflicts += 1,
            }
        }
        let load = self.loads.get_mut(admission.replica.index())?;
        load.admitted(Tier(class.0))
            .then_some(admission.replica.index())
    }

    fn release(&mut self, replica: ReplicaIndex, class: Class) {
        if let Some(load) = self.loads.get_mut(replica) {
            let released = load.released(Tier(class.0));
            debug_assert!(released, "released a session the policy never counted");
        }
    }

    fn replica_down(&mut self, replica: ReplicaIndex, _lost: &[Class]) {
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        if let Some(load) = self.loads.get_mut(replica) {
            *load = TierLoad::default();
        }
        if let Ok(changes) = self.plb.handle_down(&mut self.table, id, &self.loads) {
            self.role_changes += changes.len() as u64;
        }
    }

    fn replica_up(&mut self, replica: ReplicaIndex) {
        let Some(id) = ReplicaId::from_index(replica) else {
            return;
        };
        if let Ok(changes) = self.plb.handle_rejoin(&mut self.table, id, &self.loads) {
            self.role_changes += changes.len() as u64;
        }
    }

    fn role_labels(&self) -> Vec<String> {
        self.table.roles().iter().map(|r| r.to_string()).collect()
    }

    fn refused_role_changes(&self) -> u64 {
        self.conflicts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_ranks_without_reclaim_route_as_the_papers_plb() {
        use crate::sim::engine;
        use crate::sim::scenario::GridSpec;
        use crate::sim::strategies::{PolicyRouter, Strategy};
        let spec = GridSpec::quick(1);
        let config = spec.run_config(1000.0, 0.5, 0);
        let setup = TierSetup::two_of(&config.cluster.plb, 5, false);
        let mut tiered = TieredRouter::new(&setup, 5).expect("router");
        let mut paper = PolicyRouter::new(Strategy::Plb, 5).expect("router");
        let a = engine::run(&config, &mut tiered);
        let b = engine::run(&config, &mut paper);
        assert_eq!(a.phases, b.phases, "same placements, same latencies");
    }

    #[test]
    fn the_three_rank_layout_starts_from_its_pools_and_counts_each_rank() {
        let mut router =
            TieredRouter::new(&TierSetup::three_of(&PlbParams::PAPER), 5).expect("router");
        assert_eq!(router.table().vector().owned[..3], [1, 1, 2]);
        assert_eq!(router.admit(Class(2)), Some(2));
        assert_eq!(router.admit(Class(1)), Some(1));
        assert_eq!(router.admit(Class::PREMIUM), Some(0));
        router.release(2, Class(2));
        router.replica_down(2, &[]);
        assert!(router.table().owned(Tier(2)) >= 1, "rank 2 keeps a replica");
        router.replica_up(2);
        assert_eq!(router.table().vector(), router.plb.reference());
        assert_eq!(router.refused_role_changes(), 0);
    }
}
