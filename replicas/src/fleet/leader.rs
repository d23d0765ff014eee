//! What the fleet's leader decides each interval: the next role table of one router, from the
//! previous one and the live members' summed reports, with the very PLB code a single proxy
//! runs ([`pgtier_policy::Plb`], [`TieredPlb`]).
//!
//! One interval is, in order: the fleet's health (a replica some live member sees Down goes
//! Down, one nobody sees Down rejoins; failure repair as on a single proxy), the returns due on
//! the summed load, then for each class the borrow Algorithm 1 would make for its next arrival
//! on that load. A class whose pool has headroom borrows nothing, so an idle or balanced fleet
//! keeps its table; a class past θ gets its borrow now rather than at the next arrival on some
//! host, which is what the hosts' arrivals would have caused one interval later.

use pgtier_policy::tiers::{Tier, TierLoad, TierTable, TieredPlb};
use pgtier_policy::{LoadSignal, Loads, ReplicaId, ReplicaLoad, RoleTable, ServiceClass, Strategy};

use super::report::Summed;
use crate::route_table::RouteTable;
use crate::router_config::RouterPolicy;

/// The next table of a router under `policy`, from `table` and the fleet's `summed` view.
/// A table of another vocabulary than the policy's (a configuration that changed under the
/// stored row) is returned unchanged.
pub fn next_table(policy: &RouterPolicy, table: &RouteTable, summed: &Summed) -> RouteTable {
    match (policy, table) {
        (RouterPolicy::Classes(strategy), RouteTable::Classes(table)) => {
            RouteTable::Classes(next_classes(strategy, table.clone(), summed))
        }
        (RouterPolicy::Tiers(plb), RouteTable::Tiers(table)) => {
            RouteTable::Tiers(next_tiers(plb, table.clone(), summed))
        }
        _ => table.clone(),
    }
}

fn two_class(load: TierLoad) -> ReplicaLoad {
    ReplicaLoad {
        premium: load.sessions[0],
        freemium: load.sessions[1..]
            .iter()
            .fold(0u32, |sum, &n| sum.saturating_add(n)),
    }
}

fn next_classes(strategy: &Strategy, mut table: RoleTable, summed: &Summed) -> RoleTable {
    let count = table.len();
    if summed.sessions.len() != count {
        return table;
    }
    let sessions: Vec<ReplicaLoad> = summed.sessions.iter().copied().map(two_class).collect();
    let in_flight: Vec<ReplicaLoad> = summed.in_flight.iter().copied().map(two_class).collect();
    for (index, &down) in summed.down.iter().enumerate() {
        let Some(replica) = ReplicaId::from_index(index) else {
            break;
        };
        // Errors leave the table as it was (the replica's event is a no-op, or a bug the
        // single proxy would log too); the next interval tries again.
        if down && table.is_up(replica) {
            let _ = strategy.handle_down(&mut table, replica, &sessions);
        } else if !down && !table.is_up(replica) {
            let _ = strategy.handle_rejoin(&mut table, replica, &sessions);
        }
    }
    let Strategy::Plb(plb) = strategy else {
        return table;
    };
    let loads = match plb.load_signal() {
        LoadSignal::InFlight => Loads {
            signal: &in_flight,
            sessions: &sessions,
        },
        _ => Loads::sessions(&sessions),
    };
    let params = *plb.params();
    if let Ok(changes) = plb.returns_loads(&table, loads) {
        for change in changes.iter() {
            let _ = table.apply(change, &params);
        }
    }
    for class in [ServiceClass::Premium, ServiceClass::Freemium] {
        if let Ok(admission) = plb.admit_loads(&table, loads, class) {
            for change in admission.role_changes.iter() {
                let _ = table.apply(change, &params);
            }
        }
    }
    table
}

fn next_tiers(plb: &TieredPlb, mut table: TierTable, summed: &Summed) -> TierTable {
    let count = table.len();
    if summed.sessions.len() != count {
        return table;
    }
    let sessions = &summed.sessions;
    for (index, &down) in summed.down.iter().enumerate() {
        let Some(replica) = ReplicaId::from_index(index) else {
            break;
        };
        let up = table.role(replica).is_some_and(|role| role.is_up());
        if down && up {
            let _ = plb.handle_down(&mut table, replica, sessions);
        } else if !down && !up {
            let _ = plb.handle_rejoin(&mut table, replica, sessions);
        }
    }
    let params = *plb.params();
    if let Ok(changes) = plb.returns(&table, sessions) {
        for change in changes.iter() {
            let _ = table.apply(change, &params);
        }
    }
    for tier in Tier::all(table.tiers()) {
        if let Ok(admission) = plb.admit(&table, sessions, tier) {
            for change in admission.role_changes.iter() {
                let _ = table.apply(change, &params);
            }
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router_config::policy_and_table;
    use pgtier_core::config::Routing;

    /// The paper's layout (0,1 premium, 2,3 freemium, 4 mixed) with θ = 100.
    fn plb_router(count: usize) -> (RouterPolicy, RouteTable) {
        let routing = Routing::Plb(crate::test_support::paper_settings(100));
        policy_and_table(count, &routing).expect("valid routing")
    }

    fn load(premium: u32, freemium: u32) -> TierLoad {
        TierLoad {
            sessions: [premium, freemium, 0, 0],
        }
    }

    fn summed(loads: &[TierLoad], down: &[bool]) -> Summed {
        Summed {
            sessions: loads.to_vec(),
            in_flight: vec![TierLoad::default(); loads.len()],
            down: down.to_vec(),
            reporters: 2,
        }
    }

    #[test]
    fn an_idle_fleet_keeps_its_table() {
        let (policy, table) = plb_router(5);
        let idle = summed(&[TierLoad::default(); 5], &[false; 5]);
        assert_eq!(next_table(&policy, &table, &idle), table);
    }

    #[test]
    fn premium_past_theta_on_the_sum_borrows_though_no_host_alone_would() {
        let (policy, table) = plb_router(5);
        // Each of three hosts holds a third of this: below θ alone, past it together.
        let heavy = summed(
            &[
                load(120, 0),
                load(120, 0),
                load(0, 10),
                load(0, 10),
                load(0, 0),
            ],
            &[false; 5],
        );
        let next = next_table(&policy, &table, &heavy);
        let borrowed = next.iter().filter(|(_, role)| role.is_borrowed()).count();
        assert_eq!(borrowed, 1, "{next:?}");
        // The same load again: the borrowed replica has headroom, nothing more changes.
        assert_eq!(next_table(&policy, &next, &heavy), next);
    }

    #[test]
    fn a_replica_any_member_sees_down_goes_down_and_rejoins_when_none_does() {
        let (policy, table) = plb_router(5);
        let loads = [TierLoad::default(); 5];
        let down = next_table(
            &policy,
            &table,
            &summed(&loads, &[false, true, false, false, false]),
        );
        assert!(down.role(ReplicaId(1)).is_some_and(|role| role.is_down()));
        let back = next_table(&policy, &down, &summed(&loads, &[false; 5]));
        assert!(back.role(ReplicaId(1)).is_some_and(|role| !role.is_down()));
        assert_eq!(
            back.classes()
                .and_then(|t| t.role(ReplicaId(1)))
                .map(|r| r.is_up()),
            Some(true)
        );
    }

    #[test]
    fn a_sum_of_another_shape_leaves_the_table_alone() {
        let (policy, table) = plb_router(5);
        let short = summed(&[load(500, 500)], &[true]);
        assert_eq!(next_table(&policy, &table, &short), table);
    }
}
