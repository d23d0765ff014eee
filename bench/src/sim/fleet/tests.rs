//! The fleet model's pieces: one proxy of either kind is the single proxy, run for run; θ
//! split by N is what the split proxies run; the shared view's reports, versions and
//! agreement behave as `shared`'s model says.

use pgtier_policy::{PlbParams, ServiceClass};

use super::experiment::{FleetSpec, Variant, fleet_csv, fleet_summary, run_fleet, run_variant};
use super::independent::{IndependentProxies, split_theta};
use super::leader::{
    FleetConfig, HostView, LeaderBorrows, LeaderFleet, next_table, next_table_with,
};
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
    for variant in [
        Variant::Fleet { interval_s: 1.0 },
        Variant::Forwarding { interval_s: 1.0 },
    ] {
        run_variant(&config, variant, 3, config.cluster.plb)
            .expect("no placement on the down replica");
    }
}

#[test]
fn the_experiment_runs_every_variant_and_summarises_it() {
    let mut spec = FleetSpec::live(3, 1);
    spec.intervals_s = vec![0.5, 2.0];
    let mut runs = 0;
    let points = run_fleet(&spec, &mut || runs += 1).expect("runs");
    assert_eq!(runs, spec.run_count());
    assert_eq!(points.len(), 9);
    assert!(points[0].variant == Variant::Single && points[0].shared.is_none());
    assert_eq!(
        points[0].same_replica, 1.0,
        "the single proxy against itself"
    );
    assert!(points.iter().all(|p| (0.0..=1.0).contains(&p.same_replica)));
    let shared = points.last().and_then(|p| p.shared).expect("shared stats");
    assert!(shared.versions > 0 && shared.observed_s > 0.0);
    let summary = fleet_summary(&points, &spec);
    for label in [
        "| 1 proxy, PLB |",
        "| 1 proxy, 5RR |",
        "| 3 independent |",
        "| 3 independent, θ/3 |",
        "| 3 fleet, 0.5 s |",
        "| 3 forwarding, 2 s |",
    ] {
        assert!(summary.contains(label), "{label} missing:\n{summary}");
    }
    assert!(
        summary.contains("(1.00×)"),
        "the single proxy against itself"
    );
    let csv = fleet_csv(&points, &spec);
    assert_eq!(csv.lines().count(), 10, "{csv}");
}

fn fleet(hosts: usize, interval_s: f64) -> FleetConfig {
    FleetConfig {
        hosts,
        view: HostView::Fleet,
        borrows: LeaderBorrows::Both,
        report_interval_s: interval_s,
        staleness_s: interval_s,
        seed: 7,
    }
}

#[test]
fn a_fleet_that_never_publishes_is_independent_proxies() {
    let config = live_config(0);
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    for hosts in [1, 3] {
        let mut independent = IndependentProxies::new(hosts, params, replicas).expect("fleet");
        let expected = engine::run(&config, &mut independent);
        // Reports and recomputations every 10^9 s: the leader's only step is at 0 s, on an
        // idle sum, and changes nothing.
        let mut silent = LeaderFleet::new(fleet(hosts, 1e9), params, replicas).expect("fleet");
        let observed = engine::run(&config, &mut silent);
        // Every observation but the role trace, which shows the leader's table here and the
        // hosts' own tables there.
        assert_eq!(observed.phases, expected.phases, "{hosts} hosts");
        assert_eq!(observed.events, expected.events);
        assert_eq!(silent.stats().versions, 0);
        assert!(silent.stats().local_changes > 0, "the hosts borrowed alone");
    }
}

#[test]
fn the_leader_borrows_on_the_sum_where_no_host_alone_would() {
    let params = PlbParams::PAPER
        .with_theta(ServiceClass::Premium, 3)
        .with_theta(ServiceClass::Freemium, 3);
    let mut fleet = LeaderFleet::new(fleet(3, 1.0), params, 5).expect("fleet");
    // Three hosts, each with two premium sessions (one per premium replica): each host sees
    // 1 per replica, below θ = 3; the fleet has 3 per replica, at θ.
    fleet.advance(0.0);
    for session in 0..6 {
        let replica = fleet
            .admit_session(session, Class::PREMIUM)
            .expect("placed");
        assert!(replica < 2, "premium replicas first");
    }
    for q in 0..3 {
        assert_eq!(fleet.host(q).table(), fleet.published(), "no host borrowed");
    }
    // Host 0 reports at 0 (before the sessions), 1, 2 s; hosts 1 and 2 at 1/3 and 2/3 s.
    fleet.advance(0.99);
    assert_eq!(
        fleet.stats().versions,
        0,
        "the leader has not seen the others yet"
    );
    fleet.advance(1.0);
    assert_eq!(
        fleet.stats().versions,
        1,
        "one more premium arrival would need a borrow"
    );
    let borrowed = fleet
        .published()
        .roles()
        .iter()
        .filter(|r| r.to_string().contains("borrowed"))
        .count();
    assert_eq!(borrowed, 1, "{:?}", fleet.published());
    assert_eq!(
        fleet.versions()[0],
        2,
        "the leader holds its version at once"
    );
    fleet.advance(2.0);
    assert_eq!(
        fleet.versions(),
        [2, 2, 2],
        "delivered within the staleness bound"
    );
    assert!(fleet.stats().agreement() < 1.0);
    // The same step by hand: the published table is next_table of the summed load.
    let plb = pgtier_policy::Plb::new(params, fleet.host(1).table()).expect("plb");
    assert_eq!(
        &next_table(&plb, fleet.published(), &sum_of(&fleet)),
        fleet.published(),
        "a fixed point"
    );
}

fn sum_of(fleet: &LeaderFleet) -> Vec<pgtier_policy::ReplicaLoad> {
    let mut sum = vec![pgtier_policy::ReplicaLoad::default(); 5];
    for q in 0..3 {
        for (s, l) in sum.iter_mut().zip(fleet.host(q).loads()) {
            s.premium += l.premium;
            s.freemium += l.freemium;
        }
    }
    sum
}

#[test]
fn hosts_apply_only_newer_versions_and_drop_their_local_borrows() {
    let config = live_config(0);
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    let mut fleet = LeaderFleet::new(fleet(3, 1.0), params, replicas).expect("fleet");
    // Load rises for 7.5 s, falls to nothing over 7.5 s, then idles 5 s, three times.
    let mut held = fleet.versions();
    let mut open: Vec<(usize, usize, Class)> = Vec::new();
    for step in 0..1200usize {
        fleet.advance(step as f64 * 0.05);
        let now = fleet.versions();
        assert!(
            now.iter().zip(&held).all(|(a, b)| a >= b),
            "{now:?} after {held:?}"
        );
        for q in 0..3 {
            if now[q] != held[q] && now[q] == now[0] {
                assert_eq!(fleet.host(q).table(), fleet.published(), "host {q} adopted");
            }
        }
        held = now;
        if step % 400 < 150 {
            let class = if step % 4 == 0 {
                Class::PREMIUM
            } else {
                Class::FREEMIUM
            };
            if let Some(replica) = fleet.admit_session(step, class) {
                open.push((step, replica, class));
            }
        } else if step % 400 < 300 && !open.is_empty() {
            let (session, replica, class) = open.remove(step % open.len());
            fleet.release_session(session, replica, class);
        }
    }
    let stats = fleet.stats();
    assert!(
        stats.versions > 1,
        "borrows and returns on the sum: {stats:?} {:?}",
        fleet.published()
    );
    assert!(
        stats.local_changes > 0,
        "hosts borrowed on their own share between versions"
    );
    assert!(stats.agreement() < 1.0 && stats.agreement() > 0.5);
}

#[test]
fn hosts_undo_the_leaders_borrow_on_their_own_share_and_keep_their_table() {
    // The fleet's first design (h27fleet ff287c2), hosts deciding on their own counts: ten
    // hosts each see a tenth of the live load. The leader borrows
    // Mixed for freemium on the sum; each host, at its next admission, returns it on its own
    // counts; no further version comes, so the hosts route with their own tables while every
    // host holds the latest version.
    let config = live_config(0);
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    let own = FleetConfig {
        view: HostView::Own,
        ..fleet(10, 1.0)
    };
    let mut ten = LeaderFleet::new(own, params, replicas).expect("fleet");
    engine::run(&config, &mut ten);
    let stats = ten.stats();
    assert!(stats.versions >= 1, "the leader borrowed on the sum");
    assert!(fleet_has_borrow(ten.published()), "{:?}", ten.published());
    let diverged = (0..10)
        .filter(|&q| ten.host(q).table() != ten.published())
        .count();
    assert!(
        diverged >= 5,
        "{diverged} of 10 hosts route with their own table"
    );
    assert!(stats.agreement() > 0.9, "versions agree: {stats:?}");
    assert!(
        stats.tables_agreed_s < 0.5 * stats.observed_s,
        "tables do not: {stats:?}"
    );
    // Forwarding keeps versions and tables together (hosts change nothing alone).
    let (_, sharing) =
        run_variant(&config, Variant::Forwarding { interval_s: 1.0 }, 10, params).expect("run");
    let sharing = sharing.expect("sharing");
    assert_eq!(sharing.table_agreement(), sharing.agreement());
}

fn fleet_has_borrow(table: &pgtier_policy::RoleTable) -> bool {
    table
        .roles()
        .iter()
        .any(|role| role.to_string().starts_with("borrowed"))
}

#[test]
fn placements_are_compared_with_the_single_proxys_session_by_session() {
    let mut spec = FleetSpec::live(1, 1);
    spec.intervals_s = vec![1.0];
    let points = run_fleet(&spec, &mut || {}).expect("runs");
    for p in &points {
        match p.variant {
            // One proxy of any kind, or a forwarding fleet of one, is the single proxy.
            Variant::Single
            | Variant::Independent
            | Variant::ThetaSplit
            | Variant::Forwarding { .. } => {
                assert_eq!(
                    (p.same_replica, p.same_group),
                    (1.0, 1.0),
                    "{:?}",
                    p.variant
                )
            }
            _ => assert!(p.same_group >= p.same_replica, "{:?}", p.variant),
        }
    }
}

#[test]
fn hosts_deciding_on_the_fleets_load_keep_the_leaders_borrow() {
    // The design since h27fleet 0095e23: the same ten hosts add the others' reports to their
    // own counts, so the leader's borrow is not returned at the next admission.
    let config = live_config(0);
    let (params, replicas) = (config.cluster.plb, config.cluster.replicas);
    let run = |view| {
        let config_view = FleetConfig {
            view,
            ..fleet(10, 1.0)
        };
        let mut fleet = LeaderFleet::new(config_view, params, replicas).expect("fleet");
        let observations = engine::run(&config, &mut fleet);
        (observations, fleet.stats())
    };
    let (own, own_stats) = run(HostView::Own);
    let (shared, shared_stats) = run(HostView::Fleet);
    assert!(
        shared_stats.tables_agreed_s > 2.0 * own_stats.tables_agreed_s,
        "{shared_stats:?} against {own_stats:?}"
    );
    let busy = |o: &crate::sim::engine::RunObservations| -> f64 {
        o.phases[0].busy_fraction.iter().flatten().sum()
    };
    assert!(busy(&shared) > busy(&own), "the borrowed replica works");
}

#[test]
fn the_leader_makes_only_the_borrows_it_is_given() {
    let params = PlbParams::PAPER
        .with_theta(ServiceClass::Premium, 1)
        .with_theta(ServiceClass::Freemium, 1)
        .with_alpha(ServiceClass::Premium, 1.0)
        .with_alpha(ServiceClass::Freemium, 1.0);
    let fleet = LeaderFleet::new(fleet(1, 1.0), params, 5).expect("fleet");
    let table = fleet.published().clone();
    let plb = pgtier_policy::Plb::new(params, &table).expect("plb");
    // Both classes past θ = 1 on every replica of their pools.
    let full = |p, f| pgtier_policy::ReplicaLoad {
        premium: p,
        freemium: f,
    };
    let summed = [full(1, 0), full(1, 0), full(0, 1), full(0, 1), full(0, 0)];
    let borrowed_by = |t: &pgtier_policy::RoleTable| {
        t.roles()
            .iter()
            .map(|r| r.to_string())
            .find(|r| r.starts_with("borrowed"))
    };
    let both = next_table(&plb, &table, &summed);
    assert_eq!(
        borrowed_by(&both).as_deref(),
        Some("borrowed_to_premium(from mixed)"),
        "premium's borrow is evaluated first and takes Mixed"
    );
    let freemium = next_table_with(&plb, &table, &summed, LeaderBorrows::FreemiumOnly);
    assert_eq!(
        borrowed_by(&freemium).as_deref(),
        Some("borrowed_to_freemium(from mixed)")
    );
    assert_eq!(
        next_table_with(&plb, &table, &summed, LeaderBorrows::None),
        table
    );
}
