//! The differential protocol fuzzer: client programs generated from a grammar of what
//! drivers send (`grammar`), run by K concurrent clients directly against PostgreSQL and
//! through pgtier (`runner`), each client's whole message stream compared; a divergence is
//! shrunk to a small program (`shrink`) and saved, with its seed and the proxy's settings, as
//! a regression case that `tests/protofuzz.rs` replays on every test run.
//!
//! What is normalised before comparing is only what pooling inherently changes, and is
//! listed in docs/compatibility.md ("What the differential fuzzer normalises").
//!
//! Entry points: `tests/tests/protofuzz.rs` (a fixed seed set and the saved cases, in the
//! test command) and the `pgtier-protofuzz` binary (`--minutes N`, open-ended).

pub mod grammar;
pub mod program;
pub mod runner;
pub mod shrink;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::differential::PoolMode;
pub use grammar::{Shape, generate};
pub use program::Program;
pub use runner::{Bench, Outcome, Variation};

/// A step's timeout while shrinking (an uncancelled `pg_sleep(10)` still fits).
const SHRINK_STEP_TIMEOUT: Duration = Duration::from_secs(12);
/// How long shrinking one divergence may take.
const SHRINK_TIME: Duration = Duration::from_secs(240);

/// Where the regression cases live, relative to the `tests` crate.
pub const CASES_DIR: &str = "protofuzz-cases";

/// The proxy settings seed `seed` runs under in `mode`: pool sizes from 1 to 4, one or two
/// workers, clients in the clear or over TLS.
pub fn variation_for(seed: u64, mode: PoolMode) -> Variation {
    let mut rng = grammar::Rng::new(seed ^ 0xa5a5);
    Variation {
        mode,
        pool_size: 1 + rng.below(4) as u32,
        workers: 1 + rng.below(2),
        tls: rng.chance(30),
    }
}

/// A divergence, shrunk.
#[derive(Debug)]
pub struct Finding {
    pub seed: u64,
    pub variation: Variation,
    pub original_size: usize,
    pub program: Program,
    pub report: String,
}

/// Runs seed `seed` in `variation`; on a divergence, shrinks it (at most `shrink_budget`
/// runs) and returns the finding.
pub fn fuzz_seed(
    bench: &mut Bench<'_>,
    seed: u64,
    variation: Variation,
    shape: Shape,
    shrink_budget: usize,
) -> (Outcome, Option<Finding>) {
    let program = generate(seed, shape);
    let outcome = bench.check(&program, variation);
    if !outcome.diverged() {
        return (outcome, None);
    }
    // A shrinking step that hangs waits the whole step timeout: a shorter one, and a bound
    // on the time shrinking may take, keep a stubborn divergence from stalling the run.
    let full_timeout = bench.step_timeout;
    bench.step_timeout = SHRINK_STEP_TIMEOUT;
    let started = Instant::now();
    let minimal = shrink::shrink(&program, shrink_budget, |candidate| {
        started.elapsed() < SHRINK_TIME && bench.check(candidate, variation).diverged()
    });
    bench.step_timeout = full_timeout;
    let report = match bench.check(&minimal, variation) {
        Outcome::Diverged(report) => report,
        // It diverged once but not again: keep what the original run showed.
        _ => match &outcome {
            Outcome::Diverged(report) => format!("(not reproduced after shrinking)\n{report}"),
            _ => String::new(),
        },
    };
    let finding = Finding {
        seed,
        variation,
        original_size: program.size(),
        program: minimal,
        report,
    };
    (outcome, Some(finding))
}

/// The case file's text: a header of `# key: value` lines, then the program.
pub fn case_text(finding: &Finding, title: &str) -> String {
    let mut text = format!("# {title}\n# seed: {}\n", finding.seed);
    for line in finding.variation.describe().lines() {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(&finding.program.to_text());
    text
}

/// Writes `finding` as `dir/NAME.case`; returns the path.
pub fn save_case(
    dir: &Path,
    name: &str,
    finding: &Finding,
    title: &str,
) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(format!("{name}.case"));
    std::fs::write(&path, case_text(finding, title))?;
    Ok(path)
}

/// One saved case.
#[derive(Debug)]
pub struct Case {
    pub path: PathBuf,
    pub variation: Variation,
    pub program: Program,
}

/// Every `*.case` file of `dir`, sorted by name.
pub fn load_cases(dir: &Path) -> Result<Vec<Case>, String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|error| format!("{}: {error}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "case"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .map_err(|error| format!("{}: {error}", path.display()))?;
            let header: String = text
                .lines()
                .filter(|line| line.starts_with('#'))
                .map(|line| format!("{line}\n"))
                .collect();
            let variation = Variation::parse(&header)
                .map_err(|error| format!("{}: {error}", path.display()))?;
            let program =
                Program::parse(&text).map_err(|error| format!("{}: {error}", path.display()))?;
            Ok(Case {
                path,
                variation,
                program,
            })
        })
        .collect()
}
