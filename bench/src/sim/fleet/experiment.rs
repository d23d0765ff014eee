//! The fleet experiment (`pgtier-sim fleet`): N proxies in front of the same five replicas at
//! the live harness's calibration and contention point (`grid --live`, 2.5 sessions/s, P25),
//! against one big proxy, on the same arrivals (common random numbers).
//!
//! Variants: the single proxy (today's model, the reference of every ratio) and 5RR through
//! it (the contention reference); N independent proxies with θ unchanged; N independent
//! proxies with θ split by N; the fleet as pgtier builds it ([`super::leader`]) at each report
//! interval, each host applying a version stale by up to that interval; and a design
//! alternative, hosts that also see each other's reports and forward their role changes to
//! the leader ([`super::shared`]).

use std::fmt::Write as _;

use pgtier_policy::PlbParams;

use super::super::engine::{self, RunConfig, RunObservations};
use super::super::router::Router;
use super::super::scenario::GridSpec;
use super::super::stats::{PhaseSummary, mean_of};
use super::super::strategies::{PolicyRouter, Strategy};
use super::independent::{IndependentProxies, split_theta};
use super::leader::{FleetConfig, HostView, LeaderBorrows, LeaderFleet};
use super::recorder::{Recorder, same_by, same_replica};
use super::shared::{SharedConfig, SharedView};

/// One way of running the proxies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Variant {
    /// One proxy holding every client, PLB (today's model).
    Single,
    /// One proxy, 5RR: how contended the point is.
    SingleRoundRobin,
    /// N proxies, each PLB on its own clients, θ unchanged.
    Independent,
    /// N proxies, each PLB on its own clients, θ divided by N ([`split_theta`]).
    ThetaSplit,
    /// The fleet: N hosts deciding on their own counts plus the others' reports, a leader
    /// recomputing the table on the summed reports every `interval_s`, hosts applying its
    /// versions stale by up to `interval_s`.
    Fleet {
        /// The report interval (and the staleness bound).
        interval_s: f64,
    },
    /// The fleet's first version: hosts decide on their own counts only.
    FleetOwnCounts {
        /// The report interval (and the staleness bound).
        interval_s: f64,
    },
    /// The fleet with the leader's step making only some borrows (which part of the step
    /// costs what).
    FleetLeaderBorrows {
        /// The report interval (and the staleness bound).
        interval_s: f64,
        /// The borrows the leader makes.
        borrows: LeaderBorrows,
    },
    /// The alternative: hosts deciding on their own counts plus the others' reports, and
    /// forwarding every role change to the leader, which re-decides it at once.
    Forwarding {
        /// The report interval (and the staleness bound).
        interval_s: f64,
    },
}

impl Variant {
    /// The report interval of a sharing variant.
    pub fn interval_s(self) -> Option<f64> {
        match self {
            Variant::Fleet { interval_s }
            | Variant::FleetOwnCounts { interval_s }
            | Variant::FleetLeaderBorrows { interval_s, .. }
            | Variant::Forwarding { interval_s } => Some(interval_s),
            _ => None,
        }
    }
}

/// What the sharing did, summed over seeds (fleet and forwarding variants).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sharing {
    /// Versions the leader published.
    pub versions: u64,
    /// Fleet: role changes hosts made on their own tables between versions. Forwarding: role
    /// changes hosts forwarded to the leader.
    pub local_changes: u64,
    /// Forwarding: requests the leader decided differently from the host (stale table).
    pub redecided: u64,
    /// Forwarding: placements on a replica whose role the leader had already changed.
    pub stale_placements: u64,
    /// Seconds in which every host held the latest version.
    pub agreed_s: f64,
    /// Seconds in which every host routed with the latest published table.
    pub tables_agreed_s: f64,
    /// Seconds observed.
    pub observed_s: f64,
}

impl Sharing {
    /// Share of the time in which every host held the latest version.
    pub fn agreement(&self) -> f64 {
        if self.observed_s > 0.0 {
            self.agreed_s / self.observed_s
        } else {
            1.0
        }
    }

    /// Share of the time in which every host routed with the latest published table.
    pub fn table_agreement(&self) -> f64 {
        if self.observed_s > 0.0 {
            self.tables_agreed_s / self.observed_s
        } else {
            1.0
        }
    }

    fn add(&mut self, other: Sharing) {
        self.tables_agreed_s += other.tables_agreed_s;
        self.versions += other.versions;
        self.local_changes += other.local_changes;
        self.redecided += other.redecided;
        self.stale_placements += other.stale_placements;
        self.agreed_s += other.agreed_s;
        self.observed_s += other.observed_s;
    }
}

impl Variant {
    /// A short name for tables and the CSV.
    pub fn label(self, proxies: usize) -> String {
        match self {
            Variant::Single => "1 proxy, PLB".into(),
            Variant::SingleRoundRobin => "1 proxy, 5RR".into(),
            Variant::Independent => format!("{proxies} independent"),
            Variant::ThetaSplit => format!("{proxies} independent, θ/{proxies}"),
            Variant::Fleet { interval_s } => format!("{proxies} fleet, {interval_s} s"),
            Variant::FleetOwnCounts { interval_s } => {
                format!("{proxies} fleet, own counts, {interval_s} s")
            }
            Variant::FleetLeaderBorrows {
                interval_s,
                borrows,
            } => {
                let which = match borrows {
                    LeaderBorrows::Both => "premium and freemium",
                    LeaderBorrows::FreemiumOnly => "freemium only",
                    LeaderBorrows::PremiumOnly => "premium only",
                    LeaderBorrows::None => "none",
                };
                format!("{proxies} fleet, leader borrows {which}, {interval_s} s")
            }
            Variant::Forwarding { interval_s } => {
                format!("{proxies} forwarding, {interval_s} s")
            }
        }
    }
}

/// The experiment's point and what it compares.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSpec {
    /// The live calibration: cluster, workload, warm-up, seeds.
    pub grid: GridSpec,
    /// T (60 × sessions per second).
    pub terminals: f64,
    /// Premium share.
    pub premium_share: f64,
    /// Proxies in the fleet.
    pub proxies: usize,
    /// Report intervals of the fleet.
    pub intervals_s: Vec<f64>,
    /// Also run the forwarding alternative at each interval.
    pub forwarding: bool,
    /// Also run the fleet with the leader's step making only some borrows (1 s).
    pub leader_borrows: bool,
}

impl FleetSpec {
    /// docs/plb-live.md's contention point (2.5 sessions/s, P25, θ = 3) with `proxies`
    /// proxies, the fleet (and the forwarding alternative) at 0.1, 0.5, 1 and 2 s.
    pub fn live(proxies: usize, seeds: u64) -> Self {
        Self {
            grid: GridSpec::live(seeds),
            terminals: 2.5 * 60.0,
            premium_share: 0.25,
            proxies,
            intervals_s: vec![0.1, 0.5, 1.0, 2.0],
            forwarding: true,
            leader_borrows: false,
        }
    }

    /// Every variant, the single proxy first.
    pub fn variants(&self) -> Vec<Variant> {
        let mut variants = vec![
            Variant::Single,
            Variant::SingleRoundRobin,
            Variant::Independent,
            Variant::ThetaSplit,
        ];
        variants.extend(
            self.intervals_s
                .iter()
                .map(|&interval_s| Variant::Fleet { interval_s }),
        );
        // The first version of the fleet, at the default interval only.
        variants.push(Variant::FleetOwnCounts { interval_s: 1.0 });
        if self.leader_borrows {
            for borrows in [
                LeaderBorrows::FreemiumOnly,
                LeaderBorrows::PremiumOnly,
                LeaderBorrows::None,
            ] {
                variants.push(Variant::FleetLeaderBorrows {
                    interval_s: 1.0,
                    borrows,
                });
            }
        }
        if self.forwarding {
            variants.extend(
                self.intervals_s
                    .iter()
                    .map(|&interval_s| Variant::Forwarding { interval_s }),
            );
        }
        variants
    }

    /// Simulation runs the experiment performs.
    pub fn run_count(&self) -> u64 {
        self.variants().len() as u64 * self.grid.seeds
    }

    fn params(&self) -> PlbParams {
        self.grid.cluster.plb
    }
}

/// One variant, aggregated over seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetPoint {
    /// Which variant.
    pub variant: Variant,
    /// Means over seeds of the per-run summaries.
    pub summary: PhaseSummary,
    /// What the sharing did, summed over seeds (fleet and forwarding variants only).
    pub shared: Option<Sharing>,
    /// Share of the sessions placed on the same replica as by the single proxy on the same
    /// arrivals, over all seeds.
    pub same_replica: f64,
    /// Share placed in the same group of the initial layout (R_P, R_F or Mixed) as by the
    /// single proxy: whether the borrowing decisions agreed, whichever replica of a group
    /// the least-loaded choice took.
    pub same_group: f64,
}

/// Runs `variant` on one configuration; the observations and, for the sharing variants, what
/// the sharing did.
pub fn run_variant(
    config: &RunConfig,
    variant: Variant,
    proxies: usize,
    params: PlbParams,
) -> Result<(RunObservations, Option<Sharing>), String> {
    run_recorded(config, variant, proxies, params).map(|run| (run.observations, run.sharing))
}

/// One variant's run on one configuration.
pub struct VariantRun {
    /// What the engine observed.
    pub observations: RunObservations,
    /// What the sharing did (fleet and forwarding variants).
    pub sharing: Option<Sharing>,
    /// The replica of each session, by session index.
    pub placements: Vec<Option<usize>>,
}

/// Runs `router` recording each session's replica.
fn recorded<R: Router>(config: &RunConfig, router: R) -> (RunObservations, Recorder<R>) {
    let mut recorder = Recorder::new(router);
    let observations = engine::run(config, &mut recorder);
    (observations, recorder)
}

/// [`run_variant`], also recording where each session went.
pub fn run_recorded(
    config: &RunConfig,
    variant: Variant,
    proxies: usize,
    params: PlbParams,
) -> Result<VariantRun, String> {
    let replicas = config.cluster.replicas;
    let (observations, shared, refused, placements) = match variant {
        Variant::Single => {
            let (obs, r) = recorded(config, PolicyRouter::plb(params, replicas)?);
            let refused = r.refused_role_changes();
            (obs, None, refused, r.placements().to_vec())
        }
        Variant::SingleRoundRobin => {
            let router = PolicyRouter::new(Strategy::RoundRobin, replicas)?;
            let (obs, r) = recorded(config, router);
            (obs, None, 0, r.placements().to_vec())
        }
        Variant::Independent | Variant::ThetaSplit => {
            let params = if variant == Variant::ThetaSplit {
                split_theta(params, proxies)
            } else {
                params
            };
            let (obs, r) = recorded(config, IndependentProxies::new(proxies, params, replicas)?);
            let refused = r.refused_role_changes();
            (obs, None, refused, r.placements().to_vec())
        }
        Variant::Fleet { interval_s }
        | Variant::FleetOwnCounts { interval_s }
        | Variant::FleetLeaderBorrows { interval_s, .. } => {
            let fleet = FleetConfig {
                hosts: proxies,
                view: if matches!(variant, Variant::FleetOwnCounts { .. }) {
                    HostView::Own
                } else {
                    HostView::Fleet
                },
                borrows: match variant {
                    Variant::FleetLeaderBorrows { borrows, .. } => borrows,
                    _ => LeaderBorrows::Both,
                },
                report_interval_s: interval_s,
                staleness_s: interval_s,
                seed: config.seed,
            };
            let (obs, r) = recorded(config, LeaderFleet::new(fleet, params, replicas)?);
            let stats = r.inner.stats();
            let sharing = Sharing {
                versions: stats.versions,
                local_changes: stats.local_changes,
                agreed_s: stats.agreed_s,
                tables_agreed_s: stats.tables_agreed_s,
                observed_s: stats.observed_s,
                ..Sharing::default()
            };
            let refused = r.refused_role_changes();
            (obs, Some(sharing), refused, r.placements().to_vec())
        }
        Variant::Forwarding { interval_s } => {
            let sharing = SharedConfig {
                proxies,
                report_interval_s: interval_s,
                staleness_s: interval_s,
                seed: config.seed,
            };
            let (obs, r) = recorded(config, SharedView::new(sharing, params, replicas)?);
            let stats = r.inner.stats();
            let sharing = Sharing {
                versions: stats.versions,
                local_changes: stats.requests,
                redecided: stats.redecided,
                stale_placements: stats.stale_placements,
                agreed_s: stats.agreed_s,
                // No host changes its table alone: holding the version is holding the table.
                tables_agreed_s: stats.agreed_s,
                observed_s: stats.observed_s,
            };
            let refused = r.refused_role_changes();
            (obs, Some(sharing), refused, r.placements().to_vec())
        }
    };
    if observations.placements_on_down_replica > 0 || refused > 0 {
        return Err(format!(
            "{}: {} placements on a down replica, {refused} refused role changes",
            variant.label(proxies),
            observations.placements_on_down_replica
        ));
    }
    Ok(VariantRun {
        observations,
        sharing: shared,
        placements,
    })
}

/// Runs every variant of `spec` over its seeds; `on_run` is called after each simulation.
pub fn run_fleet(spec: &FleetSpec, on_run: &mut dyn FnMut()) -> Result<Vec<FleetPoint>, String> {
    let configs: Vec<RunConfig> = (0..spec.grid.seeds)
        .map(|seed_index| {
            spec.grid
                .run_config(spec.terminals, spec.premium_share, seed_index)
        })
        .collect();
    // The single proxy's placements, the reference of the session-by-session comparison.
    let reference: Vec<Vec<Option<usize>>> = configs
        .iter()
        .map(|config| {
            run_recorded(config, Variant::Single, 1, spec.params()).map(|run| run.placements)
        })
        .collect::<Result<_, _>>()?;
    let mut points = Vec::new();
    for variant in spec.variants() {
        let mut per_seed = Vec::new();
        let mut shared: Option<Sharing> = None;
        let (mut same, mut compared, mut same_group) = (0, 0, 0);
        let replicas = spec.grid.cluster.replicas;
        for (config, reference) in configs.iter().zip(&reference) {
            let run = run_recorded(config, variant, spec.proxies, spec.params())?;
            let phase = run
                .observations
                .phases
                .first()
                .ok_or("a run without a phase")?;
            per_seed.push(PhaseSummary::of(phase));
            if let Some(stats) = run.sharing {
                shared.get_or_insert_with(Sharing::default).add(stats);
            }
            let (s, c) = same_replica(reference, &run.placements);
            same += s;
            compared += c;
            same_group += same_by(reference, &run.placements, |r| initial_group(r, replicas)).0;
            on_run();
        }
        let summary =
            PhaseSummary::aggregate(&per_seed, mean_of).ok_or("a variant needs a seed")?;
        points.push(FleetPoint {
            variant,
            summary,
            shared,
            same_replica: share(same, compared),
            same_group: share(same_group, compared),
        });
    }
    Ok(points)
}

fn share(part: u64, whole: u64) -> f64 {
    if whole > 0 {
        part as f64 / whole as f64
    } else {
        f64::NAN
    }
}

/// The group of `replica` in the single proxy's initial layout: 0 for R_P (the first
/// ⌊2K/5⌋), 1 for R_F (the next ⌊2K/5⌋), 2 for Mixed.
fn initial_group(replica: usize, replicas: usize) -> usize {
    let pool = (2 * replicas / 5).max(1);
    (replica / pool).min(2)
}

fn ms(seconds: f64) -> String {
    if seconds.is_finite() {
        format!("{:.0}", seconds * 1000.0)
    } else {
        "n/a".into()
    }
}

fn ratio(value: f64, reference: f64) -> f64 {
    if reference > 0.0 {
        value / reference
    } else {
        f64::NAN
    }
}

/// One CSV row per variant: latency per class (mean, median, p95, seconds), the ratios to
/// the single proxy, utilisation, and the shared view's counters.
pub fn fleet_csv(points: &[FleetPoint], spec: &FleetSpec) -> String {
    let mut out = String::from(
        "variant,proxies,interval_s,terminals,premium_share,seeds,\
         premium_mean_s,premium_median_s,premium_p95_s,freemium_mean_s,freemium_median_s,freemium_p95_s,\
         premium_mean_x,premium_p95_x,freemium_mean_x,freemium_p95_x,\
         goodput_premium,goodput_freemium,utilisation,utilisation_cv,\
         versions,local_changes,redecided,stale_placements,agreement,table_agreement,same_replica_as_single,same_group_as_single\n",
    );
    let Some(single) = points.iter().find(|p| p.variant == Variant::Single) else {
        return out;
    };
    let reference = &single.summary;
    for p in points {
        let s = &p.summary;
        let interval = p
            .variant
            .interval_s()
            .map_or(String::new(), |s| s.to_string());
        let proxies = match p.variant {
            Variant::Single | Variant::SingleRoundRobin => 1,
            _ => spec.proxies,
        };
        let shared = p.shared.map_or(",,,,,".to_string(), |x| {
            format!(
                "{},{},{},{},{:.4},{:.4}",
                x.versions,
                x.local_changes,
                x.redecided,
                x.stale_placements,
                x.agreement(),
                x.table_agreement()
            )
        });
        let _ = writeln!(
            out,
            "{},{proxies},{interval},{},{},{},{:.4},{:.4},{:.4},{:.4},{:.4},{:.4},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{shared},{:.4},{:.4}",
            p.variant.label(spec.proxies),
            spec.terminals,
            spec.premium_share,
            spec.grid.seeds,
            s.class[0].mean_s,
            s.class[0].median_s,
            s.class[0].p95_s,
            s.class[1].mean_s,
            s.class[1].median_s,
            s.class[1].p95_s,
            ratio(s.class[0].mean_s, reference.class[0].mean_s),
            ratio(s.class[0].p95_s, reference.class[0].p95_s),
            ratio(s.class[1].mean_s, reference.class[1].mean_s),
            ratio(s.class[1].p95_s, reference.class[1].p95_s),
            s.goodput_per_s[0],
            s.goodput_per_s[1],
            s.utilisation,
            s.utilisation_cv,
            p.same_replica,
            p.same_group,
        );
    }
    out
}

/// Markdown: one row per variant, premium and freemium mean and p95 in ms with the ratio to
/// the single proxy, utilisation, and for the fleet variants their versions and agreement.
pub fn fleet_summary(points: &[FleetPoint], spec: &FleetSpec) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} proxies, {:.1} sessions/s (T = {}), premium share {}, {} seeds, live calibration; \
         latency in ms, means over seeds; (×) = against one proxy on the same arrivals.\n",
        spec.proxies,
        spec.terminals / 60.0,
        spec.terminals,
        spec.premium_share,
        spec.grid.seeds
    );
    out.push_str(
        "| variant | premium mean | premium p95 | freemium mean | freemium p95 | u (CV) | versions / local changes (fleet) or requests (forwarding) / re-decided / stale placements | time all on the latest version / routing with its table | sessions on the single proxy's replica / group |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let Some(single) = points.iter().find(|p| p.variant == Variant::Single) else {
        return out;
    };
    let reference = &single.summary;
    let with =
        |value: f64, reference: f64| format!("{} ({:.2}×)", ms(value), ratio(value, reference));
    for p in points {
        let s = &p.summary;
        let (counts, agreement) = p.shared.map_or(("".to_string(), "".to_string()), |x| {
            (
                format!(
                    "{} / {} / {} / {}",
                    x.versions, x.local_changes, x.redecided, x.stale_placements
                ),
                format!(
                    "{:.1} % / {:.1} %",
                    100.0 * x.agreement(),
                    100.0 * x.table_agreement()
                ),
            )
        });
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.2} ({:.2}) | {counts} | {agreement} | {:.0} % / {:.0} % |",
            p.variant.label(spec.proxies),
            with(s.class[0].mean_s, reference.class[0].mean_s),
            with(s.class[0].p95_s, reference.class[0].p95_s),
            with(s.class[1].mean_s, reference.class[1].mean_s),
            with(s.class[1].p95_s, reference.class[1].p95_s),
            s.utilisation,
            s.utilisation_cv,
            100.0 * p.same_replica,
            100.0 * p.same_group,
        );
    }
    if let Some(independent) = points.iter().find(|p| p.variant == Variant::Independent) {
        out.push_str("\nFleet and forwarding against the independent proxies (the issue's bar: premium p95 at most 0.8×):\n\n");
        for p in points.iter().filter(|p| p.variant.interval_s().is_some()) {
            let _ = writeln!(
                out,
                "- {}: premium p95 {:.2}×, freemium p95 {:.2}×",
                p.variant.label(spec.proxies),
                ratio(p.summary.class[0].p95_s, independent.summary.class[0].p95_s),
                ratio(p.summary.class[1].p95_s, independent.summary.class[1].p95_s),
            );
        }
    }
    out
}
