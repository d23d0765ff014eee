//! Command-line parsing with std only: the grammar is small enough that a parser dependency
//! would cost more (build time, binary size) than it saves.

use std::ffi::OsString;
use std::path::PathBuf;

/// What the user asked `pgtier` to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `pgtier [OPTIONS] FILE` or `pgtier --config FILE`: run the proxy until shutdown.
    Run {
        config_path: PathBuf,
        options: RunOptions,
    },
    /// `pgtier check-config FILE`: load and validate a config, then exit.
    CheckConfig { config_path: PathBuf },
    /// `pgtier demo`: local primary + replicas with pgbench data, pgtier in front.
    Demo(DemoOptions),
    /// `pgtier --version`.
    Version,
    /// `pgtier --help`.
    Help,
}

/// PgBouncer's switches for running the proxy (`pgbouncer -d -q -v -u USER FILE`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// `-d`: go to the background once serving (needs `pidfile`, and `logfile` or `syslog`).
    pub daemon: bool,
    /// `-R`: PgBouncer's online restart: take over from the pgtier the pidfile names.
    pub reboot: bool,
    /// `-q`: nothing is logged to standard error.
    pub quiet: bool,
    /// `-v`, repeatable: each raises the log level one step (info, debug, trace).
    pub verbose: u8,
    /// `-u USER`: switch to this user after binding (overrides the `user` setting).
    pub user: Option<String>,
}

/// Knobs of `pgtier demo`; the defaults are what the README shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoOptions {
    /// Port pgtier listens on (127.0.0.1 only).
    pub listen_port: u16,
    /// Number of read-only streaming replicas behind pgtier.
    pub replica_count: usize,
    /// pgbench scale factor loaded into the primary.
    pub pgbench_scale: u32,
    /// `--load`: drive both classes for `load_seconds`, kill and restart a replica midway,
    /// then stop instead of waiting for Ctrl-C.
    pub load: bool,
    /// `--load-seconds N`: length of the `--load` run.
    pub load_seconds: u32,
    /// `--proxies N`: pgtier processes sharing one PLB view as a fleet (docs/fleet.md), on
    /// `listen_port`, `listen_port + 1`, ...
    pub proxies: usize,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            listen_port: 6432,
            replica_count: 5,
            pgbench_scale: 1,
            load: false,
            load_seconds: 60,
            proxies: 1,
        }
    }
}

/// Bounds of `--load-seconds`: long enough for a few load rounds around the kill and the
/// restart, short enough that a typo does not keep the machine busy for a day.
const LOAD_SECONDS: std::ops::RangeInclusive<u32> = 6..=3600;

/// Usage text printed by `--help` and after a usage error.
pub const USAGE: &str = "\
pgtier: a thread-per-core io_uring PostgreSQL proxy

Usage:
  pgtier [OPTIONS] FILE        run the proxy with FILE (pgtier TOML or a pgbouncer.ini)
  pgtier [OPTIONS] --config FILE
  pgtier check-config FILE     validate FILE, print OK or the error, exit 0/1
  pgtier demo [DEMO OPTIONS]   local primary + read-only replicas with pgbench data, pgtier in front
  pgtier -V | --version | -h | --help

Options (PgBouncer's):
  -d, --daemon                 run in the background (needs pidfile, and logfile or syslog)
  -R, --reboot                 online restart: the running pgtier (pidfile) finishes its
                               transactions and exits, this one takes its addresses
  -q, --quiet                  do not log to stderr
  -v, --verbose                raise the log level (repeatable: -v debug, -vv trace)
  -u, --user=USER              switch to USER after binding the sockets (root only)

Demo options:
  --port PORT                  port pgtier listens on (default 6432)
  --replicas N                 number of streaming replicas, 1..=8 (default 5). The `pgbench`
                               entry routes with PLB: about half of the replicas start premium,
                               the rest freemium, one Mixed from 3 replicas on (5: 2/2/1).
                               With 1 replica it routes round robin (PLB needs two).
  --scale N                    pgbench scale factor (default 1)
  --proxies N                  run N pgtier processes (1..=8, default 1) on PORT, PORT+1, ...
                               sharing one PLB view as a fleet through the primary
                               (docs/fleet.md); SHOW FLEET on any of them shows it
  --load                       drive users premium and freemium through pgtier, kill one
                               premium replica after 1/3 of the time and restart it after 2/3;
                               print per-class tps and latency, SHOW REPLICAS, the role and
                               failure events, then stop (needs --replicas 2 or more)
  --load-seconds N             length of the --load run, 6..=3600 (default 60; implies --load)

Logging: PGTIER_LOG (or RUST_LOG) takes a tracing filter, e.g. PGTIER_LOG=debug; default info.
";

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let args = args
        .into_iter()
        .map(into_string)
        .collect::<Result<Vec<_>, _>>()?;
    let Some(first) = args.first() else {
        return Err("missing config file".to_string());
    };
    match first.as_str() {
        "help" => no_more(&args[1..], Command::Help),
        "version" => no_more(&args[1..], Command::Version),
        "check-config" => {
            let config_path = one_path(first, &args[1..])?;
            Ok(Command::CheckConfig { config_path })
        }
        "demo" => parse_demo(&args[1..]).map(Command::Demo),
        _ => parse_run(&args),
    }
}

/// `pgtier [OPTIONS] FILE`, getopt style: short switches may be grouped (`-dq`), `-u` takes
/// the rest of its word or the next one, `--` ends the options.
fn parse_run(args: &[String]) -> Result<Command, String> {
    let mut options = RunOptions::default();
    let mut config_path: Option<PathBuf> = None;
    let mut rest = args.iter();
    let set_path = |path: &str, config_path: &mut Option<PathBuf>| match config_path {
        Some(_) => Err(format!("unexpected argument {path}")),
        None => {
            *config_path = Some(PathBuf::from(path));
            Ok(())
        }
    };
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--" => {
                for path in rest.by_ref() {
                    set_path(path, &mut config_path)?;
                }
            }
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-c" | "--config" => {
                let path = rest.next().ok_or_else(|| format!("{arg} needs a FILE"))?;
                set_path(path, &mut config_path)?;
            }
            "--daemon" => options.daemon = true,
            "--reboot" => options.reboot = true,
            "--quiet" => options.quiet = true,
            "--verbose" => options.verbose = options.verbose.saturating_add(1),
            "--user" => {
                let user = rest.next().ok_or("--user needs a USER")?;
                options.user = Some(user.clone());
            }
            long if long.starts_with("--user=") => {
                options.user = Some(long["--user=".len()..].to_string());
            }
            long if long.starts_with("--config=") => {
                set_path(&long["--config=".len()..], &mut config_path)?;
            }
            long if long.starts_with("--") => return Err(format!("unknown option {long}")),
            short if short.starts_with('-') && short.len() > 1 => {
                let grouped = &short[1..];
                for (at, flag) in grouped.char_indices() {
                    match flag {
                        'd' => options.daemon = true,
                        'R' => options.reboot = true,
                        'q' => options.quiet = true,
                        'v' => options.verbose = options.verbose.saturating_add(1),
                        'h' => return Ok(Command::Help),
                        'V' => return Ok(Command::Version),
                        'u' => {
                            let attached = &grouped[at + 1..];
                            let user = if attached.is_empty() {
                                rest.next().ok_or("-u needs a USER")?.clone()
                            } else {
                                attached.to_string()
                            };
                            options.user = Some(user);
                            break;
                        }
                        _ => return Err(format!("unknown option -{flag}")),
                    }
                }
            }
            path => set_path(path, &mut config_path)?,
        }
    }
    if options.user.as_deref() == Some("") {
        return Err("-u needs a USER".to_string());
    }
    let config_path = config_path.ok_or("missing config file")?;
    Ok(Command::Run {
        config_path,
        options,
    })
}

fn into_string(arg: OsString) -> Result<String, String> {
    arg.into_string()
        .map_err(|arg| format!("argument {arg:?} is not valid UTF-8"))
}

fn no_more(rest: &[String], command: Command) -> Result<Command, String> {
    match rest.first() {
        None => Ok(command),
        Some(extra) => Err(format!("unexpected argument {extra}")),
    }
}

fn one_path(after: &str, rest: &[String]) -> Result<PathBuf, String> {
    match rest {
        [path] => Ok(PathBuf::from(path)),
        [] => Err(format!("{after} needs a FILE")),
        [_, extra, ..] => Err(format!("unexpected argument {extra}")),
    }
}

fn parse_demo(rest: &[String]) -> Result<DemoOptions, String> {
    let mut options = DemoOptions::default();
    let mut rest = rest.iter();
    while let Some(flag) = rest.next() {
        if flag == "--load" {
            options.load = true;
            continue;
        }
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--port" => options.listen_port = parse_number(flag, value)?,
            "--replicas" => options.replica_count = parse_number(flag, value)?,
            "--scale" => options.pgbench_scale = parse_number(flag, value)?,
            "--proxies" => options.proxies = parse_number(flag, value)?,
            "--load-seconds" => {
                options.load_seconds = parse_number(flag, value)?;
                options.load = true;
            }
            _ => return Err(format!("unknown demo option {flag}")),
        }
    }
    if !(1..=8).contains(&options.replica_count) {
        return Err("--replicas must be between 1 and 8".to_string());
    }
    if options.pgbench_scale == 0 {
        return Err("--scale must be at least 1".to_string());
    }
    if !(1..=8).contains(&options.proxies) {
        return Err("--proxies must be between 1 and 8".to_string());
    }
    if usize::from(options.listen_port) + options.proxies > usize::from(u16::MAX) + 1 {
        return Err("--port leaves no room for the other proxies' ports".to_string());
    }
    if !LOAD_SECONDS.contains(&options.load_seconds) {
        return Err(format!(
            "--load-seconds must be between {} and {}",
            LOAD_SECONDS.start(),
            LOAD_SECONDS.end()
        ));
    }
    if options.load && options.replica_count < 2 {
        return Err("--load needs at least 2 replicas (one is killed midway)".to_string());
    }
    Ok(options)
}

fn parse_number<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: {value:?} is not a valid number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(OsString::from))
    }

    fn run(path: &str) -> Command {
        run_with(path, RunOptions::default())
    }

    fn run_with(path: &str, options: RunOptions) -> Command {
        Command::Run {
            config_path: PathBuf::from(path),
            options,
        }
    }

    #[test]
    fn pgbouncer_switches_parse_alone_grouped_and_long() {
        let all = RunOptions {
            daemon: true,
            reboot: true,
            quiet: true,
            verbose: 2,
            user: Some("postgres".to_string()),
        };
        for args in [
            &["-d", "-R", "-q", "-v", "-v", "-u", "postgres", "p.ini"][..],
            &["-dRqvv", "-upostgres", "p.ini"][..],
            &["-dRqvvu", "postgres", "p.ini"][..],
            &[
                "--daemon",
                "--reboot",
                "--quiet",
                "--verbose",
                "--verbose",
                "--user=postgres",
                "p.ini",
            ][..],
            &["p.ini", "-d", "-R", "-q", "-vv", "--user", "postgres"][..],
        ] {
            assert_eq!(
                parse_strs(args),
                Ok(run_with("p.ini", all.clone())),
                "{args:?}"
            );
        }
        let quiet = RunOptions {
            quiet: true,
            ..RunOptions::default()
        };
        assert_eq!(
            parse_strs(&["-q", "--config", "a.toml"]),
            Ok(run_with("a.toml", quiet))
        );
        assert_eq!(parse_strs(&["--", "-odd.ini"]), Ok(run("-odd.ini")));
        assert_eq!(parse_strs(&["-V"]), Ok(Command::Version));
        assert_eq!(parse_strs(&["-q", "-h"]), Ok(Command::Help));
    }

    #[test]
    fn pgbouncer_switch_errors_are_reported() {
        assert!(parse_strs(&["-u"]).is_err(), "-u without a user");
        assert!(parse_strs(&["p.ini", "-u"]).is_err());
        assert!(parse_strs(&["--user=", "p.ini"]).is_err());
        assert!(
            parse_strs(&["-x", "p.ini"]).is_err(),
            "unknown short switch"
        );
        assert!(parse_strs(&["-dx", "p.ini"]).is_err(), "unknown in a group");
        assert!(parse_strs(&["--bogus", "p.ini"]).is_err());
        assert!(parse_strs(&["-d", "-q"]).is_err(), "no file");
        assert!(parse_strs(&["-c"]).is_err());
    }

    #[test]
    fn config_forms_are_equivalent() {
        assert_eq!(parse_strs(&["--config", "a.toml"]), Ok(run("a.toml")));
        assert_eq!(parse_strs(&["-c", "a.toml"]), Ok(run("a.toml")));
        assert_eq!(parse_strs(&["--config=a.toml"]), Ok(run("a.toml")));
        assert_eq!(parse_strs(&["a.toml"]), Ok(run("a.toml")));
    }

    #[test]
    fn check_config_takes_exactly_one_file() {
        assert_eq!(
            parse_strs(&["check-config", "a.toml"]),
            Ok(Command::CheckConfig {
                config_path: PathBuf::from("a.toml")
            })
        );
        assert!(parse_strs(&["check-config"]).is_err());
        assert!(parse_strs(&["check-config", "a", "b"]).is_err());
    }

    #[test]
    fn demo_options_parse_and_are_bounded() {
        assert_eq!(
            parse_strs(&["demo"]),
            Ok(Command::Demo(DemoOptions::default()))
        );
        assert_eq!(
            parse_strs(&["demo", "--port", "7000", "--replicas", "2"]),
            Ok(Command::Demo(DemoOptions {
                listen_port: 7000,
                replica_count: 2,
                ..DemoOptions::default()
            }))
        );
        assert!(parse_strs(&["demo", "--replicas", "0"]).is_err());
        assert!(parse_strs(&["demo", "--port"]).is_err());
        assert!(parse_strs(&["demo", "--port", "x"]).is_err());
        assert!(parse_strs(&["demo", "--bogus", "1"]).is_err());
    }

    #[test]
    fn demo_defaults_to_five_replicas_without_load() {
        let defaults = DemoOptions::default();
        assert_eq!(defaults.replica_count, 5);
        assert!(!defaults.load);
        assert_eq!(defaults.load_seconds, 60);
        assert!(parse_strs(&["demo", "--replicas", "8"]).is_ok());
        assert!(parse_strs(&["demo", "--replicas", "9"]).is_err());
        assert!(parse_strs(&["demo", "--replicas", "1"]).is_ok());
    }

    #[test]
    fn demo_proxies_parse_and_are_bounded() {
        assert_eq!(
            parse_strs(&["demo", "--proxies", "3"]),
            Ok(Command::Demo(DemoOptions {
                proxies: 3,
                ..DemoOptions::default()
            }))
        );
        assert!(parse_strs(&["demo", "--proxies", "0"]).is_err());
        assert!(parse_strs(&["demo", "--proxies", "9"]).is_err());
        assert!(parse_strs(&["demo", "--proxies", "3", "--port", "65534"]).is_err());
        assert!(parse_strs(&["demo", "--proxies", "3", "--port", "65533"]).is_ok());
    }

    #[test]
    fn demo_load_options_parse_and_are_bounded() {
        let load = |seconds| {
            Ok(Command::Demo(DemoOptions {
                load: true,
                load_seconds: seconds,
                ..DemoOptions::default()
            }))
        };
        assert_eq!(parse_strs(&["demo", "--load"]), load(60));
        assert_eq!(
            parse_strs(&["demo", "--load", "--load-seconds", "12"]),
            load(12)
        );
        assert_eq!(
            parse_strs(&["demo", "--load-seconds", "45", "--load"]),
            load(45),
            "--load-seconds implies --load, in any order"
        );
        assert_eq!(
            parse_strs(&["demo", "--replicas", "3", "--load", "--port", "7001"]),
            Ok(Command::Demo(DemoOptions {
                listen_port: 7001,
                replica_count: 3,
                load: true,
                ..DemoOptions::default()
            }))
        );
        assert!(parse_strs(&["demo", "--load-seconds"]).is_err());
        assert!(parse_strs(&["demo", "--load-seconds", "5"]).is_err());
        assert!(parse_strs(&["demo", "--load-seconds", "3601"]).is_err());
        assert!(parse_strs(&["demo", "--load-seconds", "-1"]).is_err());
        assert!(
            parse_strs(&["demo", "--load", "--replicas", "1"]).is_err(),
            "the load kills a replica: one is not enough"
        );
        assert!(
            parse_strs(&["demo", "--load", "1"]).is_err(),
            "takes no value"
        );
    }

    #[test]
    fn usage_errors_are_reported() {
        assert!(parse_strs(&[]).is_err());
        assert!(parse_strs(&["--bogus"]).is_err());
        assert!(parse_strs(&["a.toml", "b.toml"]).is_err());
        assert_eq!(parse_strs(&["--version"]), Ok(Command::Version));
        assert_eq!(parse_strs(&["-h"]), Ok(Command::Help));
    }
}
