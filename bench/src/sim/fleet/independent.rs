//! N proxies that know nothing of each other: each runs its own PLB, with its own role table,
//! on the sessions of its own clients only. This is what a fleet of today's poolers does,
//! and the baseline of issue 27's shared view.
//!
//! Each proxy is the simulator's ordinary [`PolicyRouter`], so a fleet of one is exactly the
//! single proxy; the load balancer in front sends session `i` to proxy `i mod N`.

use pgtier_policy::{PlbParams, ServiceClass};

use super::super::router::{ReplicaIndex, Router, SessionIndex};
use super::super::strategies::PolicyRouter;
use super::super::workload::Class;

/// θ of every class divided by `proxies`, rounded to the nearest integer and at least 1, with
/// α raised where ⌊α·θ⌋ would fall to 0 (the configuration refuses a zero return watermark):
/// what an operator writes into each of N proxies' configuration so that the fleet as a whole
/// borrows near the single proxy's θ.
pub fn split_theta(params: PlbParams, proxies: usize) -> PlbParams {
    let mut split = params;
    for class in [ServiceClass::Premium, ServiceClass::Freemium] {
        let theta = f64::from(params.theta(class)) / proxies.max(1) as f64;
        let theta = (theta.round() as u32).max(1);
        split = split.with_theta(class, theta);
        if split.return_watermark(class) == 0 {
            split = split.with_alpha(class, 1.0 / f64::from(theta));
        }
    }
    split
}

/// N independent PLB proxies in front of the same replicas.
pub struct IndependentProxies {
    proxies: Vec<PolicyRouter>,
}

impl IndependentProxies {
    /// `proxies` proxies, each running PLB with `params` on `replicas` replicas (the paper's
    /// layout, as the single proxy).
    pub fn new(proxies: usize, params: PlbParams, replicas: usize) -> Result<Self, String> {
        if proxies == 0 {
            return Err("a fleet needs at least one proxy".into());
        }
        let proxies = (0..proxies)
            .map(|_| PolicyRouter::plb(params, replicas))
            .collect::<Result<_, _>>()?;
        Ok(Self { proxies })
    }

    /// The proxy holding session `session`: the load balancer's round robin.
    fn proxy_of(&self, session: SessionIndex) -> usize {
        session % self.proxies.len()
    }

    /// Each proxy's router (its table, its counters).
    pub fn proxies(&self) -> &[PolicyRouter] {
        &self.proxies
    }
}

impl Router for IndependentProxies {
    fn admit(&mut self, class: Class) -> Option<ReplicaIndex> {
        self.admit_session(0, class)
    }

    fn release(&mut self, replica: ReplicaIndex, class: Class) {
        self.release_session(0, replica, class);
    }

    fn admit_session(&mut self, session: SessionIndex, class: Class) -> Option<ReplicaIndex> {
        let proxy = self.proxy_of(session);
        self.proxies[proxy].admit(class)
    }

    fn release_session(&mut self, session: SessionIndex, replica: ReplicaIndex, class: Class) {
        let proxy = self.proxy_of(session);
        self.proxies[proxy].release(replica, class);
    }

    fn replica_down(&mut self, replica: ReplicaIndex, lost: &[Class]) {
        // Every proxy loses its own sessions on the replica; each repairs its own table.
        for proxy in &mut self.proxies {
            proxy.replica_down(replica, lost);
        }
    }

    fn replica_up(&mut self, replica: ReplicaIndex) {
        for proxy in &mut self.proxies {
            proxy.replica_up(replica);
        }
    }

    fn role_labels(&self) -> Vec<String> {
        // One label per replica: the proxies' roles for it, "/"-separated.
        let tables: Vec<Vec<String>> = self.proxies.iter().map(|p| p.role_labels()).collect();
        (0..tables.first().map_or(0, Vec::len))
            .map(|r| {
                tables
                    .iter()
                    .map(|t| t[r].as_str())
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .collect()
    }

    fn refused_role_changes(&self) -> u64 {
        self.proxies.iter().map(|p| p.refused_role_changes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_theta_divides_and_keeps_the_configuration_valid() {
        let live = PlbParams::PAPER
            .with_theta(ServiceClass::Premium, 3)
            .with_theta(ServiceClass::Freemium, 3);
        let two = split_theta(live, 2);
        assert_eq!(two.theta(ServiceClass::Premium), 2, "3 / 2 rounds to 2");
        assert_eq!(two.alpha(ServiceClass::Premium), 0.6, "⌊0.6·2⌋ = 1: kept");
        let three = split_theta(live, 3);
        assert_eq!(three.theta(ServiceClass::Premium), 1);
        assert_eq!(three.theta(ServiceClass::Freemium), 1);
        assert_eq!(three.return_watermark(ServiceClass::Premium), 1);
        assert_eq!(three.return_watermark(ServiceClass::Freemium), 1);
        assert_eq!(split_theta(live, 1), live, "one proxy: unchanged");
        assert_eq!(
            split_theta(PlbParams::PAPER, 3).theta(ServiceClass::Premium),
            3,
            "10 / 3"
        );
        assert_eq!(split_theta(live, 10).theta(ServiceClass::Premium), 1);
    }

    #[test]
    fn clients_are_spread_round_robin_and_each_proxy_counts_only_its_own() {
        let mut fleet = IndependentProxies::new(3, PlbParams::PAPER, 5).expect("fleet");
        for session in 0..6 {
            fleet
                .admit_session(session, Class::PREMIUM)
                .expect("placed");
        }
        for proxy in fleet.proxies() {
            let premium: u32 = proxy.loads().iter().map(|l| l.premium).sum();
            assert_eq!(premium, 2, "sessions 0..6 over 3 proxies");
        }
        let placed = fleet.proxies()[1]
            .loads()
            .iter()
            .position(|l| l.premium > 0)
            .expect("proxy 1 holds sessions 1 and 4");
        fleet.release_session(4, placed, Class::PREMIUM);
        let left: u32 = fleet.proxies()[1].loads().iter().map(|l| l.premium).sum();
        assert_eq!(left, 1, "session 4's proxy released it");
    }
}
