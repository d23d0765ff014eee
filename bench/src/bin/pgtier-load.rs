//! `pgtier-load`: runs the PLB paper's experiment live (sessions of two to four classes —
//! premium, freemium, tier2, tier3 — arriving as Poisson processes, analytical queries with
//! think time) and compares runs.
//!
//! ```text
//! pgtier-load run --host H --port P ... --class NAME:USER:RATE ... --seed N --out FILE.csv
//! pgtier-load summarize --in LABEL=FILE.csv ... --phases NAME:FROM:TO[,...]
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::slice::Iter;

use pgtier_bench::load::classes::ClassFlags;
use pgtier_bench::load::queries::load_queries;
use pgtier_bench::load::report::{LabelledRun, csv, draw_png, markdown, table};
use pgtier_bench::load::row::parse_csv;
use pgtier_bench::load::run::{RunOptions, Target, run};
use pgtier_bench::load::schedule::{ScheduleParams, plan};
use pgtier_bench::load::summary::Phase;

const USAGE: &str = "usage:
  pgtier-load run --host H --port P[,P...] --dbname D --class NAME:USER:RATE [--class ...]
                  [--password X] --duration S --lifetime MIN:MAX --think MEAN
                  --queries FILE --seed N --out FILE.csv
                  [--max-sessions N] [--progress S] [--reconnect-timeout S]
                  [--proxy-map FILE.csv]
  pgtier-load summarize --in LABEL=FILE.csv [--in LABEL=FILE.csv ...]
                  --phases NAME:FROM:TO[,NAME:FROM:TO...]
                  [--md OUT.md] [--csv OUT.csv] [--png OUT.png] [--baseline LABEL]
  pgtier-load --help

run: plans the whole workload from --seed, then plays it; run once per routing strategy
with the same seed so that every strategy faces the same sessions.
  --class NAME:USER:RATE  one class of the run: NAME is premium, freemium, tier2 or tier3
                        (ranks 0 to 3), USER its login user, RATE its session arrivals per
                        second (Poisson). Give 2 to 4 classes, ranks 0..n-1 without gaps,
                        in any order, each once. Adding classes leaves the sessions of the
                        others unchanged for the same seed.
  --user-premium U --rate-premium R --user-freemium U --rate-freemium R
                        the two-class form, the same as --class premium:U:R and
                        --class freemium:U:R (may be combined with --class tier2/tier3,
                        but not with --class for the same class)
  --duration S          arrivals stop after S seconds (sessions then finish their lifetime)
  --lifetime MIN:MAX    session lifetime, uniform in [MIN, MAX] seconds
  --think MEAN          mean exponential think time between queries (s), 0 for none
  --queries FILE        one query per line: name<TAB>weight<TAB>SQL (# comments)
  --port P[,P...]       several ports (one per proxy): sessions go to them round robin in
                        arrival order, across classes, as a load balancer spreads them
  --out FILE.csv        one row per attempt: class,session,query,start_s,latency_ms,outcome
  --proxy-map FILE.csv  which port each session went to: class,session,proxy (0-based
                        position in --port)
  --max-sessions N      most live sessions; later arrivals are dropped (default 400)
  --progress S          seconds between progress lines on stderr (default 5)
  --reconnect-timeout S how long a session retries a lost connection (default 10)

summarize: per (label, phase, class) counts, latency median/p95/mean (ms) of ok queries
started in the phase, goodput (ok queries completed in the phase per second). The classes
are premium, freemium and every higher rank the inputs have rows of (tier2, tier3), in
rank order, then all. The Markdown table also goes to stdout.
  --baseline LABEL      add median and p95 ratios to that label's, per phase and class
  --png OUT.png         one panel per class: p50/p95 per label (one phase) or p95 per
                        label by phase";

/// Everything `run` needs.
#[derive(Debug)]
struct RunCommand {
    target: Target,
    options: RunOptions,
    params: ScheduleParams,
    queries: PathBuf,
    seed: u64,
    out: PathBuf,
    proxy_map: Option<PathBuf>,
}

/// Everything `summarize` needs.
#[derive(Debug)]
struct SummarizeCommand {
    inputs: Vec<(String, PathBuf)>,
    phases: Vec<Phase>,
    md: Option<PathBuf>,
    csv: Option<PathBuf>,
    png: Option<PathBuf>,
    baseline: Option<String>,
}

#[derive(Debug)]
enum Command {
    Help,
    Run(Box<RunCommand>),
    Summarize(SummarizeCommand),
}

fn value<'a>(it: &mut Iter<'a, String>, flag: &str) -> Result<&'a str, String> {
    it.next()
        .map(String::as_str)
        .ok_or_else(|| format!("{flag} needs a value"))
}

fn number<T: std::str::FromStr>(flag: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{flag}: {text:?} is not a valid number"))
}

fn required<T>(flag: &str, value: Option<T>) -> Result<T, String> {
    value.ok_or_else(|| format!("{flag} is required"))
}

fn lifetime(text: &str) -> Result<(f64, f64), String> {
    let (min, max) = text
        .split_once(':')
        .ok_or_else(|| format!("--lifetime: {text:?} is not MIN:MAX"))?;
    Ok((number("--lifetime", min)?, number("--lifetime", max)?))
}

/// Options of `run` as given; checked and assembled by [`RunFlags::finish`].
#[derive(Debug, Default)]
struct RunFlags {
    host: Option<String>,
    ports: Option<Vec<u16>>,
    proxy_map: Option<PathBuf>,
    dbname: Option<String>,
    classes: ClassFlags,
    password: Option<String>,
    duration: Option<f64>,
    lifetime: Option<(f64, f64)>,
    think: Option<f64>,
    queries: Option<PathBuf>,
    seed: Option<u64>,
    out: Option<PathBuf>,
    max_sessions: Option<usize>,
    progress: Option<f64>,
    reconnect_timeout: Option<f64>,
}

impl RunFlags {
    fn set(&mut self, flag: &str, it: &mut Iter<'_, String>) -> Result<(), String> {
        let v = value(it, flag)?;
        match flag {
            "--host" => self.host = Some(v.into()),
            "--port" => {
                self.ports = Some(
                    v.split(',')
                        .map(|p| number(flag, p.trim()))
                        .collect::<Result<_, _>>()?,
                )
            }
            "--proxy-map" => self.proxy_map = Some(v.into()),
            "--dbname" => self.dbname = Some(v.into()),
            "--class" => self.classes.add(v)?,
            "--user-premium" => self.classes.user_premium = Some(v.into()),
            "--user-freemium" => self.classes.user_freemium = Some(v.into()),
            "--password" => self.password = Some(v.into()),
            "--rate-premium" => self.classes.rate_premium = Some(number(flag, v)?),
            "--rate-freemium" => self.classes.rate_freemium = Some(number(flag, v)?),
            "--duration" => self.duration = Some(number(flag, v)?),
            "--lifetime" => self.lifetime = Some(lifetime(v)?),
            "--think" => self.think = Some(number(flag, v)?),
            "--queries" => self.queries = Some(v.into()),
            "--seed" => self.seed = Some(number(flag, v)?),
            "--out" => self.out = Some(v.into()),
            "--max-sessions" => self.max_sessions = Some(number(flag, v)?),
            "--progress" => self.progress = Some(number(flag, v)?),
            "--reconnect-timeout" => self.reconnect_timeout = Some(number(flag, v)?),
            other => return Err(format!("run: unknown option {other:?}")),
        }
        Ok(())
    }

    fn finish(self) -> Result<RunCommand, String> {
        let host = required("--host", self.host)?;
        let ports = required("--port", self.ports)?;
        let dbname = required("--dbname", self.dbname)?;
        let classes = self.classes.finish()?;
        let command = RunCommand {
            target: Target {
                host,
                ports,
                dbname,
                users: classes.iter().map(|c| c.user.clone()).collect(),
                password: self.password,
            },
            options: RunOptions {
                max_sessions: self.max_sessions.unwrap_or(400),
                progress_s: self.progress.unwrap_or(5.0),
                reconnect_timeout_s: self.reconnect_timeout.unwrap_or(10.0),
            },
            params: ScheduleParams {
                rate_per_s: classes.iter().map(|c| c.rate_per_s).collect(),
                duration_s: required("--duration", self.duration)?,
                lifetime_s: required("--lifetime", self.lifetime)?,
                think_mean_s: required("--think", self.think)?,
                // Filled in from the queries file when the command runs.
                query_weights: vec![1.0],
            },
            queries: required("--queries", self.queries)?,
            seed: required("--seed", self.seed)?,
            out: required("--out", self.out)?,
            proxy_map: self.proxy_map,
        };
        command.params.validate()?;
        let o = &command.options;
        if o.max_sessions == 0 {
            return Err("--max-sessions must be at least 1".into());
        }
        if !(o.progress_s.is_finite() && o.progress_s > 0.0) {
            return Err("--progress must be positive".into());
        }
        if !(o.reconnect_timeout_s.is_finite() && o.reconnect_timeout_s >= 0.0) {
            return Err("--reconnect-timeout must be non-negative".into());
        }
        Ok(command)
    }
}

fn parse_run(args: &[String]) -> Result<Command, String> {
    let mut flags = RunFlags::default();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if matches!(flag.as_str(), "-h" | "--help") {
            return Ok(Command::Help);
        }
        flags.set(flag, &mut it)?;
    }
    Ok(Command::Run(Box::new(flags.finish()?)))
}

fn labelled_input(text: &str) -> Result<(String, PathBuf), String> {
    let (label, file) = text
        .split_once('=')
        .ok_or_else(|| format!("--in: {text:?} is not LABEL=FILE.csv"))?;
    // Labels go into CSV and Markdown cells unquoted.
    if label.is_empty() || label.contains([',', '|', '\n']) || file.is_empty() {
        return Err(format!(
            "--in: {text:?} needs a non-empty label without ',' or '|' and a file"
        ));
    }
    Ok((label.to_string(), PathBuf::from(file)))
}

fn parse_summarize(args: &[String]) -> Result<Command, String> {
    let mut inputs: Vec<(String, PathBuf)> = Vec::new();
    let (mut phases, mut md, mut csv, mut png, mut baseline) = (None, None, None, None, None);
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--in" => {
                let input = labelled_input(value(&mut it, flag)?)?;
                if inputs.iter().any(|(label, _)| *label == input.0) {
                    return Err(format!("--in: label {:?} given twice", input.0));
                }
                inputs.push(input);
            }
            "--phases" => phases = Some(Phase::parse_list(value(&mut it, flag)?)?),
            "--md" => md = Some(PathBuf::from(value(&mut it, flag)?)),
            "--csv" => csv = Some(PathBuf::from(value(&mut it, flag)?)),
            "--png" => png = Some(PathBuf::from(value(&mut it, flag)?)),
            "--baseline" => baseline = Some(value(&mut it, flag)?.to_string()),
            other => return Err(format!("summarize: unknown option {other:?}")),
        }
    }
    if inputs.is_empty() {
        return Err("--in is required".into());
    }
    Ok(Command::Summarize(SummarizeCommand {
        inputs,
        phases: required("--phases", phases)?,
        md,
        csv,
        png,
        baseline,
    }))
}

fn parse(args: &[String]) -> Result<Command, String> {
    match args.split_first() {
        None => Err("missing command".into()),
        Some((command, rest)) => match command.as_str() {
            "-h" | "--help" | "help" => Ok(Command::Help),
            "run" => parse_run(rest),
            "summarize" => parse_summarize(rest),
            other => Err(format!("unknown command {other:?}")),
        },
    }
}

fn run_command(command: RunCommand) -> Result<(), String> {
    let queries = load_queries(&command.queries)?;
    let params = ScheduleParams {
        query_weights: queries.iter().map(|q| q.weight).collect(),
        ..command.params
    };
    let schedule = plan(command.seed, &params)?;
    let per_class: Vec<String> = params
        .classes()
        .map(|class| {
            let planned = schedule
                .sessions
                .iter()
                .filter(|s| s.class == class)
                .count();
            format!("{planned} {}", class.name())
        })
        .collect();
    eprintln!(
        "pgtier-load: seed {}, {} sessions planned ({}), {} queries",
        command.seed,
        schedule.sessions.len(),
        per_class.join(", "),
        queries.len()
    );
    run(
        &command.target,
        &command.options,
        &schedule,
        queries,
        &command.out,
        command.proxy_map.as_deref(),
    )?;
    eprintln!("wrote {}", command.out.display());
    Ok(())
}

fn write(path: &Path, contents: &str) -> Result<(), String> {
    std::fs::write(path, contents).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn summarize_command(command: SummarizeCommand) -> Result<(), String> {
    let mut runs = Vec::new();
    for (label, path) in &command.inputs {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let rows = parse_csv(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        runs.push(LabelledRun {
            label: label.clone(),
            rows,
        });
    }
    let baseline = command.baseline.as_deref();
    let rows = table(&runs, &command.phases, baseline)?;
    let md = markdown(&rows, baseline);
    print!("{md}");
    if let Some(path) = &command.md {
        write(path, &md)?;
    }
    if let Some(path) = &command.csv {
        write(path, &csv(&rows))?;
    }
    if let Some(path) = &command.png {
        let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
        // A missing font is not a failure: the tables are the results.
        match draw_png(path, &rows, &labels, &command.phases) {
            Ok(()) => eprintln!("wrote {}", path.display()),
            Err(e) => eprintln!("plot skipped: {e}"),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("pgtier-load: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match command {
        Command::Help => {
            println!("{USAGE}");
            Ok(())
        }
        Command::Run(command) => run_command(*command),
        Command::Summarize(command) => summarize_command(command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pgtier-load: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    const COMMON: &str = "run --host h --port 5432 --dbname d --duration 60 --lifetime 5:15 \
                          --think 0.5 --queries q.tsv --seed 1 --out o.csv";

    fn run_line(classes: &str) -> Result<RunCommand, String> {
        match parse(&args(&format!("{COMMON} {classes}")))? {
            Command::Run(command) => Ok(*command),
            other => Err(format!("not a run: {other:?}")),
        }
    }

    #[test]
    fn run_takes_several_ports_and_a_proxy_map() {
        let command =
            run_line("--user-premium g --user-freemium f --rate-premium 1 --rate-freemium 2")
                .unwrap();
        assert_eq!(command.target.ports, [5432]);
        assert_eq!(command.proxy_map, None);
        let line = COMMON.replace("--port 5432", "--port 6001,6002,6003 --proxy-map m.csv");
        let Command::Run(command) = parse(&args(&format!(
            "{line} --user-premium g --user-freemium f --rate-premium 1 --rate-freemium 2"
        )))
        .unwrap() else {
            panic!("not a run");
        };
        assert_eq!(command.target.ports, [6001, 6002, 6003]);
        assert_eq!(command.proxy_map, Some(PathBuf::from("m.csv")));
        assert!(
            run_line(
                "--port 1,x --user-premium g --user-freemium f --rate-premium 1 --rate-freemium 2"
            )
            .is_err()
        );
    }

    #[test]
    fn run_takes_class_flags_in_any_order() {
        let command =
            run_line("--class tier2:bulk:0.5 --class freemium:free:2 --class premium:gold:1")
                .unwrap();
        assert_eq!(command.target.users, ["gold", "free", "bulk"]);
        assert_eq!(command.params.rate_per_s, [1.0, 2.0, 0.5]);
    }

    #[test]
    fn run_keeps_the_two_class_flags() {
        let command =
            run_line("--user-premium gold --user-freemium free --rate-premium 1 --rate-freemium 2")
                .unwrap();
        assert_eq!(command.target.users, ["gold", "free"]);
        assert_eq!(command.params.rate_per_s, [1.0, 2.0]);
        let with_tier2 = run_line(
            "--user-premium gold --user-freemium free --rate-premium 1 --rate-freemium 2 \
             --class tier2:bulk:3",
        )
        .unwrap();
        assert_eq!(with_tier2.target.users, ["gold", "free", "bulk"]);
    }

    #[test]
    fn run_refuses_bad_class_sets() {
        for (classes, message) in [
            (
                "--class premium:a:1 --class tier2:c:1",
                "freemium is not defined",
            ),
            (
                "--class premium:a:1 --class freemium:b:1 --class tier3:d:1",
                "needs --class tier2",
            ),
            ("--class premium:a:1 --class premium:a:1", "given twice"),
            (
                "--class premium:a:1 --class freemium:b:1 --user-freemium b --rate-freemium 1",
                "defined by both",
            ),
            (
                "--class premium:a:0 --class freemium:b:0",
                "every rate is zero",
            ),
            ("--class", "--class needs a value"),
        ] {
            let err = run_line(classes).unwrap_err();
            assert!(err.contains(message), "{classes}: {err}");
        }
    }
}
