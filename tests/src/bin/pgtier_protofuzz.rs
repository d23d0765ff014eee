//! `pgtier-protofuzz`: the differential protocol fuzzer, open-ended. Starts a PostgreSQL
//! server of its own and pgtier in front of it (one per pool mode, pool size and worker
//! count a seed asks for), runs generated client programs against both, and shrinks and
//! saves every divergence as a regression case.
//!
//! Usage: pgtier-protofuzz [--minutes N] [--seeds FROM..TO] [--mode session|transaction|both]
//!        [--save DIR] [--replay FILE] [--max-clients K] [--max-units N]
//!
//! Prints one line per divergence and a summary; exits 1 if anything diverged.
//! `cargo run -p pgtier-tests --bin pgtier-protofuzz -- --minutes 30 --save tests/protofuzz-cases`

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use pgtier_tests::differential::PoolMode;
use pgtier_tests::protofuzz::{
    Bench, Outcome, Shape, fuzz_seed, load_cases, save_case, variation_for,
};
use pgtier_tests::{LocalPg, PgOptions};

struct Options {
    minutes: Option<f64>,
    seeds: (u64, u64),
    modes: Vec<PoolMode>,
    save: Option<PathBuf>,
    replay: Option<PathBuf>,
    /// Print the program of this seed and exit.
    print: Option<u64>,
    /// Runs a divergence may take to shrink.
    shrink: usize,
    shape: Shape,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        minutes: None,
        seeds: (0, 100),
        modes: vec![PoolMode::Session, PoolMode::Transaction],
        save: None,
        replay: None,
        print: None,
        shrink: 150,
        shape: Shape::default(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--minutes" => {
                options.minutes = Some(value()?.parse().map_err(|_| "--minutes: a number")?)
            }
            "--seeds" => {
                let text = value()?;
                let (from, to) = text.split_once("..").ok_or("--seeds FROM..TO")?;
                options.seeds = (
                    from.parse().map_err(|_| "--seeds FROM")?,
                    to.parse().map_err(|_| "--seeds TO")?,
                );
            }
            "--mode" => {
                options.modes = match value()?.as_str() {
                    "session" => vec![PoolMode::Session],
                    "transaction" => vec![PoolMode::Transaction],
                    "both" => vec![PoolMode::Session, PoolMode::Transaction],
                    other => return Err(format!("--mode {other:?}")),
                }
            }
            "--save" => options.save = Some(PathBuf::from(value()?)),
            "--replay" => options.replay = Some(PathBuf::from(value()?)),
            "--print" => options.print = Some(value()?.parse().map_err(|_| "--print SEED")?),
            "--shrink" => options.shrink = value()?.parse().map_err(|_| "--shrink RUNS")?,
            "--max-clients" => {
                options.shape.max_clients = value()?.parse().map_err(|_| "--max-clients")?
            }
            "--max-units" => {
                options.shape.max_units = value()?.parse().map_err(|_| "--max-units")?
            }
            "-h" | "--help" => {
                return Err("usage: pgtier-protofuzz [--minutes N] [--seeds FROM..TO] \
                     [--mode session|transaction|both] [--save DIR] [--replay FILE] \
                     [--print SEED] [--shrink RUNS] [--max-clients K] [--max-units N]"
                    .to_string());
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let options = match parse() {
        Ok(options) => options,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    if let Some(seed) = options.print {
        print!(
            "{}",
            pgtier_tests::protofuzz::generate(seed, options.shape).to_text()
        );
        return ExitCode::SUCCESS;
    }
    let pg = match LocalPg::start_primary(&PgOptions::default()) {
        Ok(pg) => pg,
        Err(error) => {
            eprintln!("starting PostgreSQL: {error}");
            return ExitCode::from(2);
        }
    };
    let lifetime = Duration::from_secs_f64(options.minutes.unwrap_or(60.0) * 60.0 + 600.0);
    let mut bench = match Bench::new(&pg, "postgres", lifetime) {
        Ok(bench) => bench,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    if let Some(path) = &options.replay {
        return replay(&mut bench, path);
    }
    let started = Instant::now();
    let deadline = options
        .minutes
        .map(|minutes| started + Duration::from_secs_f64(minutes * 60.0));
    let (mut runs, mut same, mut invalid, mut diverged) = (0u64, 0u64, 0u64, 0u64);
    let mut seed = options.seeds.0;
    'seeds: loop {
        if deadline.is_none() && seed >= options.seeds.1 {
            break;
        }
        for &mode in &options.modes {
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                break 'seeds;
            }
            let variation = variation_for(seed, mode);
            let (outcome, finding) =
                fuzz_seed(&mut bench, seed, variation, options.shape, options.shrink);
            runs += 1;
            if runs % 50 == 0 {
                eprintln!(
                    "{runs} programs, {:.0} s: {same} same, {diverged} diverged, {invalid} invalid",
                    started.elapsed().as_secs_f64()
                );
            }
            match outcome {
                Outcome::Same => same += 1,
                Outcome::Invalid(why) => {
                    invalid += 1;
                    eprintln!("seed {seed} ({}): invalid program: {why}", mode.name());
                }
                Outcome::Diverged(_) => diverged += 1,
            }
            if let Some(finding) = finding {
                println!(
                    "seed {seed} {}: DIVERGED ({} ops shrunk to {})\n{}\n{}",
                    mode.name(),
                    finding.original_size,
                    finding.program.size(),
                    finding.program.to_text(),
                    finding.report
                );
                println!("proxy log:\n{}", bench.proxy_log(variation));
                if let Some(dir) = &options.save {
                    let name = format!("seed-{seed}-{}", mode.name());
                    match save_case(dir, &name, &finding, "found by pgtier-protofuzz") {
                        Ok(path) => println!("saved {}", path.display()),
                        Err(error) => eprintln!("saving the case: {error}"),
                    }
                }
            }
        }
        seed += 1;
    }
    println!(
        "protofuzz: {runs} programs in {:.0} s (seeds {}..{seed}): {same} same, {diverged} diverged, {invalid} invalid",
        started.elapsed().as_secs_f64(),
        options.seeds.0
    );
    if diverged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn replay(bench: &mut Bench<'_>, path: &Path) -> ExitCode {
    let (dir, only) = if path.is_dir() {
        (path.to_path_buf(), None)
    } else {
        let dir = path.parent().map(PathBuf::from).unwrap_or_default();
        (dir, Some(path.to_path_buf()))
    };
    let cases = match load_cases(&dir) {
        Ok(cases) => cases,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::from(2);
        }
    };
    let mut failed = false;
    for case in cases {
        if only.as_ref().is_some_and(|only| *only != case.path) {
            continue;
        }
        match bench.check(&case.program, case.variation) {
            Outcome::Same => println!("{}: same", case.path.display()),
            Outcome::Invalid(why) => {
                failed = true;
                println!("{}: INVALID\n{why}", case.path.display());
            }
            Outcome::Diverged(report) => {
                failed = true;
                println!("{}: DIVERGED\n{report}", case.path.display());
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
