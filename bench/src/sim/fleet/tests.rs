//! The fleet model's pieces: one proxy of either kind is the single proxy, run for run; θ
//! split by N is what the split proxies run; the shared view's reports, versions and
//! agreement behave as `shared`'s model says.

use pgtier_policy::{PlbParams, ServiceClass};

use super::experiment::{FleetSpec, Variant, fleet_csv, fleet_summary, run_fleet, run_variant};
use super::independent::{IndependentProxies, split_theta};
use super::shared::{SharedConfig, SharedView};
use crate::sim::engine::{self, FaultAction, FaultEvent, RunConfig};
use crate::sim::router::Router;
use crate::sim::scenario::{FaultCase, FaultShape, FaultSpec, GridSpec};
use crate::sim::strategies::PolicyRouter;
use crate::sim::workload::Class;

fn live_config(seed_index: u64) -> RunConfig {
    GridSpec::live(1).run_config(150.0, 0.25, seed_index)
}

/// The paper's cascade (two premium replicas down, then back) at contention.
fn cascade_config() -> RunConfig {
    let case = FaultCase {
        shape: FaultShape::Cascade,
        terminals: 1000.0,
        premium_share: 0.25,
    };
    FaultSpec::paper(1).run_config(&case, 0)
}

fn sharing(proxies: usize, interval_s: f64) -> SharedConfig {
    SharedConfig {
        proxies,
        report_interval_s: interval_s,
        staleness_s: interval_s,
        seed: 7,
    }
}

#[test]
fn one_proxy_sharing_is_the_single_proxy() {
    for config in [live_config(0), live_config(1), cascade_config()] {
        let params = config.cluster.plb;
        let replicas = config.cluster.replicas;
        let mut single = PolicyRouter::plb(params, replicas).expect("router");
        let expected = engine::run(&config, &mut single);
        assert!(expected.events > 1000, "a real run");
        for interval_s in [0.1, 1.0, 2.0] {
            let mut fleet =
                SharedView::new(sharing(1, interval_s), params, replicas).expect("fleet");
            let observed = engine::run(&config, &mut fleet);
            assert_eq!(observed, expected, "interval {interval_s} s");
            assert_eq!(fleet.leader_table(), single.table());
            assert_eq!(fleet.stats().stale_placements, 0);
            assert_eq!(fleet.stats().redecided, 0);
            assert_eq!(fleet.stats().agreement(), 1.0);
        }
    }
}

#[test]
fn one_independent_proxy_is_the_single_proxy() {
    let config = cascade_config();
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    let expected = engine::run(
        &config,
        &mut PolicyRouter::plb(params, replicas).expect("r"),
    );
    let mut fleet = IndependentProxies::new(1, params, replicas).expect("fleet");
    assert_eq!(engine::run(&config, &mut fleet), expected);
}

#[test]
fn the_theta_split_variant_runs_independent_proxies_on_theta_over_n() {
    let config = live_config(0);
    let params = config.cluster.plb;
    assert_eq!(params.theta(ServiceClass::Premium), 3, "the live θ");
    let split = split_theta(params, 3);
    assert_eq!(split.theta(ServiceClass::Premium), 1);
    let mut by_hand = IndependentProxies::new(3, split, config.cluster.replicas).expect("fleet");
    let expected = engine::run(&config, &mut by_hand);
    let (observed, shared) = run_variant(&config, Variant::ThetaSplit, 3, params).expect("run");
    assert_eq!(observed, expected);
    assert!(shared.is_none());
    let (unsplit, _) = run_variant(&config, Variant::Independent, 3, params).expect("run");
    assert_ne!(unsplit, expected, "θ = 3 and θ = 1 route differently");
}

#[test]
fn a_proxy_sees_the_others_sessions_only_from_their_reports() {
    let params = PlbParams::PAPER;
    let mut fleet = SharedView::new(sharing(2, 1.0), params, 5).expect("fleet");
    // Proxy 0 reports at 0, 1, 2 s; proxy 1 at 0.5, 1.5 s.
    fleet.advance(0.1);
    let placed = fleet.admit_session(0, Class::PREMIUM).expect("placed");
    let premium = |view: Vec<pgtier_policy::ReplicaLoad>| view[placed].premium;
    assert_eq!(premium(fleet.view(0)), 1, "its own session, exact");
    fleet.advance(0.9);
    assert_eq!(premium(fleet.view(1)), 0, "not reported yet");
    fleet.advance(1.0);
    assert_eq!(premium(fleet.view(1)), 1, "proxy 0 reported at 1 s");
    fleet.release_session(0, placed, Class::PREMIUM);
    assert_eq!(premium(fleet.view(0)), 0);
    assert_eq!(premium(fleet.view(1)), 1, "the release is reported at 2 s");
    fleet.advance(2.0);
    assert_eq!(premium(fleet.view(1)), 0);
}

#[test]
fn with_no_staleness_every_proxy_holds_the_leaders_table() {
    let config = live_config(0);
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    let mut fleet = SharedView::new(
        SharedConfig {
            staleness_s: 0.0,
            ..sharing(3, 1.0)
        },
        params,
        replicas,
    )
    .expect("fleet");
    engine::run(&config, &mut fleet);
    let stats = fleet.stats();
    assert!(
        stats.versions > 0,
        "PLB borrowed and returned at contention"
    );
    assert_eq!(stats.agreement(), 1.0);
    assert_eq!(stats.redecided, 0, "the requester's table is the leader's");
    assert_eq!(stats.stale_placements, 0);
}

#[test]
fn stale_proxies_disagree_for_a_while_and_versions_never_go_back() {
    let config = live_config(0);
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    let mut fleet = SharedView::new(sharing(3, 2.0), params, replicas).expect("fleet");
    // Drive the fleet by hand: load rises (an arrival every 50 ms) then falls (a release
    // every 50 ms), three times, so that PLB borrows and returns; after every step no
    // proxy's version may have gone back.
    let mut held = fleet.versions();
    let mut open: Vec<(usize, usize, Class)> = Vec::new();
    for step in 0..1200usize {
        fleet.advance(step as f64 * 0.05);
        if step % 400 < 200 {
            let class = if step % 4 == 0 {
                Class::PREMIUM
            } else {
                Class::FREEMIUM
            };
            if let Some(replica) = fleet.admit_session(step, class) {
                open.push((step, replica, class));
            }
        } else if !open.is_empty() {
            let (session, replica, class) = open.remove(step % open.len());
            fleet.release_session(session, replica, class);
        }
        let now = fleet.versions();
        assert!(
            now.iter().zip(&held).all(|(a, b)| a >= b),
            "{now:?} after {held:?}"
        );
        held = now;
    }
    let stats = fleet.stats();
    assert!(stats.versions > 1);
    assert!(
        stats.agreement() < 1.0,
        "a version takes up to 2 s to arrive"
    );
    assert!(stats.agreement() > 0.0);
    assert_eq!(stats.refused, 0, "the leader serializes every change");
}

#[test]
fn a_failure_reaches_every_proxy_at_once() {
    let params = PlbParams::PAPER;
    let mut fleet = SharedView::new(sharing(3, 1.0), params, 5).expect("fleet");
    fleet.advance(0.0);
    fleet.replica_down(0, &[]);
    let versions = fleet.versions();
    assert!(versions.iter().all(|&v| v == versions[0]), "{versions:?}");
    for session in 0..30 {
        let class = if session % 2 == 0 {
            Class::PREMIUM
        } else {
            Class::FREEMIUM
        };
        assert_ne!(fleet.admit_session(session, class), Some(0));
    }
    let config = RunConfig {
        faults: vec![
            FaultEvent {
                at_s: 20.0,
                replica: 0,
                action: FaultAction::Down,
            },
            FaultEvent {
                at_s: 40.0,
                replica: 0,
                action: FaultAction::Rejoin,
            },
        ],
        ..live_config(0)
    };
    run_variant(
        &config,
        Variant::Shared { interval_s: 1.0 },
        3,
        config.cluster.plb,
    )
    .expect("no placement on the down replica");
}

#[test]
fn the_experiment_runs_every_variant_and_summarises_it() {
    let mut spec = FleetSpec::live(3, 1);
    spec.intervals_s = vec![0.5, 2.0];
    let mut runs = 0;
    let points = run_fleet(&spec, &mut || runs += 1).expect("runs");
    assert_eq!(runs, spec.run_count());
    assert_eq!(points.len(), 6);
    assert!(points[0].variant == Variant::Single && points[0].shared.is_none());
    let shared = points.last().and_then(|p| p.shared).expect("shared stats");
    assert!(shared.versions > 0 && shared.observed_s > 0.0);
    let summary = fleet_summary(&points, &spec);
    for label in [
        "| 1 proxy, PLB |",
        "| 1 proxy, 5RR |",
        "| 3 independent |",
        "| 3 independent, θ/3 |",
        "| 3 shared, 2 s |",
    ] {
        assert!(summary.contains(label), "{label} missing:\n{summary}");
    }
    assert!(
        summary.contains("(1.00×)"),
        "the single proxy against itself"
    );
    let csv = fleet_csv(&points, &spec);
    assert_eq!(csv.lines().count(), 7, "{csv}");
}
