//! The differential protocol fuzzer in the test command: a fixed seed set in both pool
//! modes, and every saved regression case (`tests/protofuzz-cases/*.case`, each a program a
//! divergence was shrunk to, with the proxy settings it was found under). A divergence fails
//! the test with both streams of every client that differs, and the shrunk program.
//!
//! Longer runs: `cargo run -p pgtier-tests --bin pgtier-protofuzz -- --minutes 30`.

use std::path::Path;
use std::time::Duration;

use pgtier_tests::differential::PoolMode;
use pgtier_tests::protofuzz::{
    Bench, CASES_DIR, Outcome, Shape, fuzz_seed, load_cases, variation_for,
};
use pgtier_tests::shared_server::shared_server;

/// Seeds run on every test run, in each mode (about a second each).
const CI_SEEDS: std::ops::Range<u64> = 0..40;
/// How long the proxies of one test may live.
const LIFETIME: Duration = Duration::from_secs(900);

fn seed_set(mode: PoolMode) {
    let pg = shared_server();
    let mut bench = Bench::new(pg, &format!("fuzz_{}", mode.name()), LIFETIME).expect("bench");
    let mut invalid = Vec::new();
    for seed in CI_SEEDS {
        let variation = variation_for(seed, mode);
        let (outcome, finding) = fuzz_seed(&mut bench, seed, variation, Shape::default(), 60);
        if let Some(finding) = finding {
            panic!(
                "seed {seed} diverges ({variation:?}); shrunk from {} to {} ops:\n{}\n{}\nproxy log:\n{}",
                finding.original_size,
                finding.program.size(),
                finding.program.to_text(),
                finding.report,
                bench.proxy_log(variation)
            );
        }
        if let Outcome::Invalid(why) = outcome {
            invalid.push(format!("seed {seed}: {why}"));
        }
    }
    // A program that does not run against PostgreSQL itself checks nothing: the generator
    // must not make them for the fixed seeds.
    assert!(
        invalid.is_empty(),
        "invalid programs:\n{}",
        invalid.join("\n")
    );
}

#[test]
fn seed_set_session_mode() {
    seed_set(PoolMode::Session);
}

#[test]
fn seed_set_transaction_mode() {
    seed_set(PoolMode::Transaction);
}

#[test]
fn saved_regression_cases() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(CASES_DIR);
    let cases = load_cases(&dir).expect("the regression cases");
    assert!(!cases.is_empty(), "no cases in {}", dir.display());
    let pg = shared_server();
    let mut bench = Bench::new(pg, "fuzz_cases", LIFETIME).expect("bench");
    let mut failures = Vec::new();
    for case in &cases {
        match bench.check(&case.program, case.variation) {
            Outcome::Same => {}
            Outcome::Invalid(why) => {
                failures.push(format!("{}: invalid: {why}", case.path.display()))
            }
            Outcome::Diverged(report) => failures.push(format!(
                "{}: diverges:\n{report}\nproxy log:\n{}",
                case.path.display(),
                bench.proxy_log(case.variation)
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
