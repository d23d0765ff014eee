//! `pgtier-faults`: runs the fault scenarios of issue 26 in network namespaces and prints
//! (or writes into docs/reliability.md) the table of results. Run as root through
//! bench/faults.sh, which installs nftables and builds this and pgtier.
//!
//! Options: `--short` (four scenarios of a few seconds and the ledger self-check: the CI
//! subset), `--only a,b` (scenario names), `--self-check` (only the self-check),
//! `--doc PATH` (rewrite the table in that file), `--draft` (say the machine was loaded),
//! `--prefix NAME` and `--subnet A.B.C` (namespace names and addresses),
//! `--setting KEY=VALUE` and `--entry-setting KEY=VALUE` (further `[pgtier]` and reader
//! entry lines, TOML values), `--cleanup` (remove a lab a killed run left behind).
//! `--netem ...` runs the packet-level netem alone on one link until SIGINT or SIGTERM
//! (tests/src/faults/netem_cli.rs).
//! Exits 1 when an acknowledged write is lost, a write duplicated, or the self-check fails.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pgtier_tests::faults::netem_cli::NetemOptions;
use pgtier_tests::faults::netns::Lab;
use pgtier_tests::faults::proxy::Settings;
use pgtier_tests::faults::report;
use pgtier_tests::faults::scenarios::{self, Fault, HOSTS, Timing};

struct Options {
    short: bool,
    only: Option<Vec<Fault>>,
    self_check_only: bool,
    doc: Option<PathBuf>,
    draft: bool,
    cleanup: bool,
    settings: Settings,
    prefix: String,
    subnet: String,
}

fn parse() -> Result<Options, String> {
    let mut options = Options {
        short: false,
        only: None,
        self_check_only: false,
        doc: None,
        draft: false,
        cleanup: false,
        settings: Settings::default(),
        prefix: "faults".to_string(),
        subnet: "10.26.10".to_string(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--short" => options.short = true,
            "--self-check" => options.self_check_only = true,
            "--draft" => options.draft = true,
            "--cleanup" => options.cleanup = true,
            "--setting" => {
                let line = Settings::parse_line(&value("--setting")?)?;
                options.settings.global.push(line);
            }
            "--entry-setting" => {
                let line = Settings::parse_line(&value("--entry-setting")?)?;
                options.settings.entry.push(line);
            }
            "--doc" => options.doc = Some(PathBuf::from(value("--doc")?)),
            "--prefix" => options.prefix = value("--prefix")?,
            "--subnet" => options.subnet = value("--subnet")?,
            "--only" => {
                let list = value("--only")?;
                let faults = list
                    .split(',')
                    .map(|name| Fault::from_name(name).ok_or(format!("unknown scenario {name}")))
                    .collect::<Result<Vec<_>, _>>()?;
                options.only = Some(faults);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--netem") {
        return netem_alone(&args[1..]);
    }
    let options = match parse() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("pgtier-faults: {message}");
            return ExitCode::from(2);
        }
    };
    if options.cleanup {
        pgtier_tests::faults::netns::remove_lab(&options.prefix, &HOSTS);
        return ExitCode::SUCCESS;
    }
    catch_interrupts(&options.prefix);
    arm_watchdog(&options);
    let outcome = run(&options);
    if std::env::var_os("PGTIER_FAULTS_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(scenarios::work_dir());
    } else {
        eprintln!("pgtier-faults: kept {}", scenarios::work_dir().display());
    }
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(error) => {
            eprintln!("pgtier-faults: {error}");
            ExitCode::from(1)
        }
    }
}

/// `--netem`: the netem on one link until SIGINT or SIGTERM, then its counts.
fn netem_alone(args: &[String]) -> ExitCode {
    let options = match NetemOptions::parse(args) {
        Ok(options) => options,
        Err(message) => {
            eprintln!("pgtier-faults: {message}");
            return ExitCode::from(2);
        }
    };
    // Blocked before the netem's thread starts, so that it inherits the mask and the
    // signals wait for `sigwait` here.
    let set = block_interrupts();
    let outcome = pgtier_tests::faults::netem_cli::run(&options, || {
        eprintln!(
            "pgtier-faults: netem on {} ({:?}); SIGINT to stop",
            options.link, options.spec
        );
        let mut signal: libc::c_int = 0;
        // SAFETY: `set` is an initialized sigset_t, `signal` a valid out-pointer.
        unsafe { libc::sigwait(&set, &mut signal) };
    });
    match outcome {
        Ok(stats) => {
            println!("{stats:?}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("pgtier-faults: netem: {error}");
            ExitCode::from(1)
        }
    }
}

/// Blocks SIGINT and SIGTERM in this thread (and the threads it starts from now on).
fn block_interrupts() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data that sigemptyset initializes; the calls take pointers
    // to it that live across them; pthread_sigmask changes only this thread's mask, which
    // the threads started afterwards inherit.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// SIGINT or SIGTERM tears the lab down before exiting: the processes in its namespaces
/// (servers, pgtier) would otherwise outlive the harness. The signals are blocked in every
/// thread and taken by one that waits for them (processes this one starts get an empty
/// mask: std's spawn resets it).
fn catch_interrupts(prefix: &str) {
    let set = block_interrupts();
    let prefix = prefix.to_string();
    std::thread::spawn(move || {
        let mut signal: libc::c_int = 0;
        // SAFETY: `set` is an initialized sigset_t owned by this closure, `signal` a valid
        // out-pointer.
        unsafe { libc::sigwait(&set, &mut signal) };
        eprintln!("pgtier-faults: signal {signal}; tearing the lab down");
        pgtier_tests::faults::netns::remove_lab(&prefix, &HOSTS);
        let _ = std::fs::remove_dir_all(scenarios::work_dir());
        std::process::exit(130);
    });
}

/// Every step is bounded, but a bug in the harness must not leave namespaces and servers
/// behind: past the deadline the lab is torn down and the process exits.
fn arm_watchdog(options: &Options) {
    let scenarios = options.only.as_ref().map_or(Fault::ALL.len(), Vec::len) as u32;
    let per_scenario = if options.short { 70 } else { 90 };
    let limit = Duration::from_secs(120 + u64::from(scenarios * per_scenario));
    let prefix = options.prefix.clone();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("pgtier-faults: ran past {limit:?}; tearing the lab down");
        pgtier_tests::faults::netns::remove_lab(&prefix, &HOSTS);
        let _ = std::fs::remove_dir_all(scenarios::work_dir());
        std::process::exit(1);
    });
}

fn run(options: &Options) -> std::io::Result<bool> {
    let header = report::header(options.draft, if options.short { "short" } else { "full" });
    let lab = Lab::create(&options.prefix, &options.subnet, &HOSTS)?;
    let mut ok = true;
    if options.short || options.self_check_only {
        match scenarios::self_check(&lab) {
            Ok(line) => eprintln!("faults: {line}"),
            Err(error) => {
                eprintln!("faults: ledger self-check FAILED: {error}");
                ok = false;
            }
        }
        if options.self_check_only {
            return Ok(ok);
        }
    }
    let (faults, timing) = if options.short {
        (
            vec![
                Fault::ReplicaPartition,
                Fault::KilledReplica,
                Fault::Loss,
                Fault::Jitter,
            ],
            Timing {
                baseline: Duration::from_secs(3),
                fault: Duration::from_secs(3),
                after: Duration::from_secs(3),
            },
        )
    } else {
        (
            Fault::ALL.to_vec(),
            Timing {
                baseline: Duration::from_secs(6),
                fault: Duration::from_secs(10),
                after: Duration::from_secs(10),
            },
        )
    };
    let faults = options.only.clone().unwrap_or(faults);
    let results = scenarios::run_all(&lab, &faults, timing, &options.settings, |result| {
        eprintln!(
            "faults: {} done: {}; client errors: reads {:?}, writes {:?}",
            result.fault.name(),
            result.ledger.summary(),
            result.read_errors,
            result.write_errors
        );
    })?;
    for result in &results {
        if !result.ledger.holds() {
            eprintln!(
                "faults: {}: the ledger does not hold: {}",
                result.fault.name(),
                result.ledger.summary()
            );
            ok = false;
        }
    }
    let more = options
        .doc
        .as_deref()
        .map(pgtier_tests::faults::fragments::rows)
        .unwrap_or_default();
    let body = format!(
        "{header}\n\nPhases: {} s undisturbed, {} s of fault, {} s after the heal.\n\n{}",
        timing.baseline.as_secs(),
        timing.fault.as_secs(),
        timing.after.as_secs(),
        report::table(&results, &more)
    );
    println!("{body}");
    if let Some(doc) = &options.doc {
        report::rewrite_doc(doc, &body)?;
        eprintln!("faults: wrote the table into {}", doc.display());
    }
    Ok(ok)
}
