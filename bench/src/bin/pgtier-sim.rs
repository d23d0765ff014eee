//! `pgtier-sim`: runs the PLB simulator's grid, failure, three-class, waiting or fleet
//! experiments and writes CSV, PNG and a Markdown summary.
//!
//! ```text
//! pgtier-sim grid|faults|tiers|waiting|fleet|all [--seeds N] [--out DIR] [--quick] [--live] [--strategies LIST]
//!            [--proxies N] [--intervals LIST] [--leader-borrows]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use pgtier_bench::sim::figures::{fault_figures, grid_figures};
use pgtier_bench::sim::fleet::experiment::{FleetSpec, fleet_csv, fleet_summary, run_fleet};
use pgtier_bench::sim::report::{fault_roles_csv, faults_csv, grid_csv};
use pgtier_bench::sim::scenario::{FaultSpec, GridSpec, run_faults, run_grid};
use pgtier_bench::sim::strategies::Strategy;
use pgtier_bench::sim::summary::{fault_summary, grid_summary};
use pgtier_bench::sim::tiers::{TierSpec, run_tiers, tiers_csv, tiers_summary};
use pgtier_bench::sim::waiting::{self, run_waiting, waiting_summary};

const USAGE: &str =
    "usage: pgtier-sim grid|faults|tiers|waiting|fleet|all [--seeds N] [--out DIR] [--quick] [--live] [--strategies LIST]
                  [--proxies N] [--intervals LIST] [--leader-borrows]

  grid     the PLB paper's grid: T in {30..2500} x premium share 10..90 % x
           PLB, 5RR, 3RR+2RR, 4RR+1RR (default 5 seeds)
  faults   the failure paper's class-local and cascading faults for PLB, 5RR, 3RR+2RR
           (default 10 seeds)
  tiers    three ranked classes on the paper's five replicas: 5RR, PLB (rank 0 premium),
           PLB/top2 (ranks 0-1 premium) and tiered PLB, T in {300, 1000, 1500} x three mixes
           (default 5 seeds; --quick one contention point; --live bench/plb-live.sh's
           three-class run, PLB, PLB/top2 and tiered at 2.5 sessions/s, 20/30/50 %)
  waiting  PLB against PLB with each replica's pool held to 2 servers (5PLB+wait-fifo,
           5PLB+wait-class) at the live calibration, 1.5..3 sessions/s, P25
           (default 10 seeds; --quick 2.5 sessions/s only, 3 seeds)
  fleet    N proxies in front of the same replicas at the live calibration and contention
           point (2.5 sessions/s, P25): one proxy, N independent, N with theta split by N,
           and the shared view at each report interval (default 3 proxies, intervals
           0.1,0.5,1,2 s, 10 seeds; --quick 3 seeds)
  all      grid and faults
  --seeds N   repetitions per point
  --out DIR   output directory (default bench/out)
  --quick     a small grid / fewer seeds, for a smoke run
  --live      grid and tiers: bench/plb-live.sh's calibration (5 quarter-core replicas, its
              query mix and sessions, theta 3; T = 60 x sessions per second)
  --strategies LIST   comma-separated, e.g. 5PLB,5RR,3RR+2RR,4RR+1RR,p2c,least_sessions
                      (summary tables cover the papers' strategies; CSV and plots all)
  --proxies N         fleet: proxies in the fleet (default 3)
  --intervals LIST    fleet: comma-separated report intervals in seconds
  --leader-borrows    fleet: also the fleet whose leader borrows for freemium only, premium
                      only, or not at all (1 s)";

#[derive(Debug)]
struct Options {
    grid: bool,
    faults: bool,
    tiers: bool,
    waiting: bool,
    fleet: bool,
    seeds: Option<u64>,
    out: PathBuf,
    quick: bool,
    live: bool,
    strategies: Option<Vec<Strategy>>,
    proxies: usize,
    intervals_s: Option<Vec<f64>>,
    leader_borrows: bool,
}

/// The replica budget of the papers' experiments (labels such as "5RR" name it).
const REPLICAS: usize = 5;

fn parse_strategies(list: &str) -> Result<Vec<Strategy>, String> {
    list.split(',')
        .map(|name| {
            Strategy::parse(name.trim(), REPLICAS)
                .ok_or_else(|| format!("--strategies: unknown strategy {name:?}"))
        })
        .collect()
}

fn parse_intervals(list: &str) -> Result<Vec<f64>, String> {
    list.split(',')
        .map(|text| {
            text.trim()
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0)
                .ok_or_else(|| format!("--intervals: {text:?} is not a positive number of seconds"))
        })
        .collect()
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut it = args.iter();
    let command = it.next().ok_or("missing command")?;
    let (grid, faults, tiers, waiting) = match command.as_str() {
        "grid" => (true, false, false, false),
        "faults" => (false, true, false, false),
        "tiers" => (false, false, true, false),
        "waiting" => (false, false, false, true),
        "fleet" => (false, false, false, false),
        "all" => (true, true, false, false),
        "-h" | "--help" => return Err(String::new()),
        other => return Err(format!("unknown command {other:?}")),
    };
    let mut options = Options {
        grid,
        faults,
        tiers,
        waiting,
        fleet: command == "fleet",
        seeds: None,
        out: default_out(),
        quick: false,
        live: false,
        strategies: None,
        proxies: 3,
        intervals_s: None,
        leader_borrows: false,
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seeds" => {
                let value = it.next().ok_or("--seeds needs a number")?;
                let seeds: u64 = value
                    .parse()
                    .map_err(|_| format!("--seeds: {value:?} is not a number"))?;
                if seeds == 0 {
                    return Err("--seeds must be at least 1".into());
                }
                options.seeds = Some(seeds);
            }
            "--out" => options.out = PathBuf::from(it.next().ok_or("--out needs a directory")?),
            "--quick" => options.quick = true,
            "--live" => options.live = true,
            "--strategies" => {
                let list = it.next().ok_or("--strategies needs a list")?;
                options.strategies = Some(parse_strategies(list)?);
            }
            "--proxies" => {
                let value = it.next().ok_or("--proxies needs a number")?;
                options.proxies = value
                    .parse()
                    .ok()
                    .filter(|&n: &usize| (1..=64).contains(&n))
                    .ok_or_else(|| format!("--proxies: {value:?} is not a number in 1..=64"))?;
            }
            "--leader-borrows" => options.leader_borrows = true,
            "--intervals" => {
                let list = it.next().ok_or("--intervals needs a list")?;
                options.intervals_s = Some(parse_intervals(list)?);
            }
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(options)
}

/// `bench/out` of this crate when run through cargo, `./out` otherwise.
fn default_out() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(|dir| PathBuf::from(dir).join("out"))
        .unwrap_or_else(|| PathBuf::from("out"))
}

fn progress(total: u64, label: &str) -> ProgressBar {
    // indicatif draws on stderr and stays hidden when stderr is not a terminal.
    let bar = ProgressBar::new(total);
    if let Ok(style) = ProgressStyle::with_template("{msg:>7} [{bar:40}] {pos}/{len} runs ({eta})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(label.to_string());
    bar
}

fn write(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn plots(result: Result<Vec<PathBuf>, String>) {
    match result {
        Ok(files) => files.iter().for_each(|f| println!("wrote {}", f.display())),
        Err(e) => eprintln!("plots skipped: {e}"),
    }
}

fn run_grid_command(options: &Options) -> Result<(), String> {
    let seeds = options.seeds.unwrap_or(if options.quick { 2 } else { 5 });
    let mut spec = if options.live {
        GridSpec::live(seeds)
    } else if options.quick {
        GridSpec::quick(seeds)
    } else {
        GridSpec::paper(seeds)
    };
    if let Some(strategies) = &options.strategies {
        spec.strategies = strategies.clone();
    }
    let replicas = spec.cluster.replicas;
    let bar = progress(spec.run_count(), "grid");
    let started = Instant::now();
    let points = run_grid(&spec, &mut || bar.inc(1))?;
    bar.finish_and_clear();
    println!(
        "grid: {} runs in {:.1} s",
        spec.run_count(),
        started.elapsed().as_secs_f64()
    );
    write(&options.out.join("grid.csv"), &grid_csv(&points, replicas))?;
    let summary = grid_summary(&points, replicas);
    write(&options.out.join("grid_summary.md"), &summary)?;
    println!("\n{summary}");
    plots(grid_figures(&points, replicas, &options.out));
    Ok(())
}

fn run_faults_command(options: &Options) -> Result<(), String> {
    let seeds = options.seeds.unwrap_or(if options.quick { 3 } else { 10 });
    let mut spec = FaultSpec::paper(seeds);
    if let Some(strategies) = &options.strategies {
        spec.strategies = strategies.clone();
    }
    let replicas = spec.cluster.replicas;
    let bar = progress(spec.run_count(), "faults");
    let started = Instant::now();
    let points = run_faults(&spec, &mut || bar.inc(1))?;
    bar.finish_and_clear();
    println!(
        "faults: {} runs in {:.1} s",
        spec.run_count(),
        started.elapsed().as_secs_f64()
    );
    write(
        &options.out.join("faults.csv"),
        &faults_csv(&points, replicas),
    )?;
    write(
        &options.out.join("fault_roles.csv"),
        &fault_roles_csv(&points, replicas),
    )?;
    let summary = fault_summary(&points, replicas);
    write(&options.out.join("faults_summary.md"), &summary)?;
    println!("\n{summary}");
    plots(fault_figures(&points, replicas, &options.out));
    Ok(())
}

fn run_tiers_command(options: &Options) -> Result<(), String> {
    let seeds = options.seeds.unwrap_or(if options.quick { 2 } else { 5 });
    let mut spec = if options.live {
        TierSpec::live(seeds)
    } else if options.quick {
        TierSpec::quick(seeds)
    } else {
        TierSpec::paper(seeds)
    };
    if let Some(strategies) = &options.strategies {
        spec.strategies = strategies.clone();
    }
    let replicas = spec.cluster.replicas;
    let bar = progress(spec.run_count(), "tiers");
    let started = Instant::now();
    let points = run_tiers(&spec, &mut || bar.inc(1))?;
    bar.finish_and_clear();
    println!(
        "tiers: {} runs in {:.1} s",
        spec.run_count(),
        started.elapsed().as_secs_f64()
    );
    write(
        &options.out.join("tiers.csv"),
        &tiers_csv(&points, replicas),
    )?;
    let summary = tiers_summary(&points, replicas);
    write(&options.out.join("tiers_summary.md"), &summary)?;
    println!("\n{summary}");
    Ok(())
}

fn run_waiting_command(options: &Options) -> Result<(), String> {
    let seeds = options.seeds.unwrap_or(if options.quick { 3 } else { 10 });
    let mut spec = if options.quick {
        waiting::quick(seeds)
    } else {
        waiting::spec(seeds)
    };
    if let Some(strategies) = &options.strategies {
        spec.strategies = strategies.clone();
    }
    let replicas = spec.cluster.replicas;
    let bar = progress(spec.run_count(), "waiting");
    let started = Instant::now();
    let points = run_waiting(&spec, &mut || bar.inc(1))?;
    bar.finish_and_clear();
    println!(
        "waiting: {} runs in {:.1} s",
        spec.run_count(),
        started.elapsed().as_secs_f64()
    );
    let grid_points: Vec<_> = points.iter().map(|p| p.point.clone()).collect();
    write(
        &options.out.join("waiting.csv"),
        &grid_csv(&grid_points, replicas),
    )?;
    let summary = waiting_summary(&points, replicas);
    write(&options.out.join("waiting_summary.md"), &summary)?;
    println!("\n{summary}");
    Ok(())
}

fn run_fleet_command(options: &Options) -> Result<(), String> {
    let seeds = options.seeds.unwrap_or(if options.quick { 3 } else { 10 });
    let mut spec = FleetSpec::live(options.proxies, seeds);
    if let Some(intervals) = &options.intervals_s {
        spec.intervals_s = intervals.clone();
    }
    spec.leader_borrows = options.leader_borrows;
    let bar = progress(spec.run_count(), "fleet");
    let started = Instant::now();
    let points = run_fleet(&spec, &mut || bar.inc(1))?;
    bar.finish_and_clear();
    println!(
        "fleet: {} runs in {:.1} s",
        spec.run_count(),
        started.elapsed().as_secs_f64()
    );
    write(&options.out.join("fleet.csv"), &fleet_csv(&points, &spec))?;
    let summary = fleet_summary(&points, &spec);
    write(&options.out.join("fleet_summary.md"), &summary)?;
    println!("\n{summary}");
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(options) => options,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("pgtier-sim: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&options.out) {
        eprintln!("pgtier-sim: {}: {e}", options.out.display());
        return ExitCode::FAILURE;
    }
    let result = (if options.grid {
        run_grid_command(&options)
    } else {
        Ok(())
    })
    .and_then(|()| {
        if options.faults {
            run_faults_command(&options)
        } else {
            Ok(())
        }
    })
    .and_then(|()| {
        if options.tiers {
            run_tiers_command(&options)
        } else {
            Ok(())
        }
    })
    .and_then(|()| {
        if options.waiting {
            run_waiting_command(&options)
        } else {
            Ok(())
        }
    })
    .and_then(|()| {
        if options.fleet {
            run_fleet_command(&options)
        } else {
            Ok(())
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pgtier-sim: {e}");
            ExitCode::FAILURE
        }
    }
}
