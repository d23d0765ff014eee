//! Command-line parsing with std only: the grammar is small enough that a parser dependency
//! would cost more (build time, binary size) than it saves.

use std::ffi::OsString;
use std::path::PathBuf;

/// What the user asked `pgtier` to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// `pgtier --config FILE` or `pgtier FILE`: run the proxy until shutdown.
    Run { config_path: PathBuf },
    /// `pgtier check-config FILE`: load and validate a config, then exit.
    CheckConfig { config_path: PathBuf },
    /// `pgtier demo`: local primary + replicas with pgbench data, pgtier in front.
    Demo(DemoOptions),
    /// `pgtier --version`.
    Version,
    /// `pgtier --help`.
    Help,
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
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            listen_port: 6432,
            replica_count: 3,
            pgbench_scale: 1,
        }
    }
}

/// Usage text printed by `--help` and after a usage error.
pub const USAGE: &str = "\
pgtier: a thread-per-core io_uring PostgreSQL proxy

Usage:
  pgtier --config FILE         run the proxy with FILE (TOML)
  pgtier FILE                  same, PgBouncer style
  pgtier check-config FILE     validate FILE, print OK or the error, exit 0/1
  pgtier demo [OPTIONS]        local primary + read-only replicas with pgbench data, pgtier in front
  pgtier --version | --help

Demo options:
  --port PORT                  port pgtier listens on (default 6432)
  --replicas N                 number of streaming replicas, 1..=8 (default 3)
  --scale N                    pgbench scale factor (default 1)

Logging: PGTIER_LOG (or RUST_LOG) takes a tracing filter, e.g. PGTIER_LOG=debug; default info.
";

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Command, String> {
    let mut args = args
        .into_iter()
        .map(into_string)
        .collect::<Result<Vec<_>, _>>()?;
    if args.is_empty() {
        return Err("missing config file".to_string());
    }
    let first = args.remove(0);
    match first.as_str() {
        "-h" | "--help" | "help" => no_more(&args, Command::Help),
        "-V" | "--version" | "version" => no_more(&args, Command::Version),
        "-c" | "--config" => {
            let config_path = one_path(&first, &args)?;
            Ok(Command::Run { config_path })
        }
        "check-config" => {
            let config_path = one_path(&first, &args)?;
            Ok(Command::CheckConfig { config_path })
        }
        "demo" => parse_demo(&args).map(Command::Demo),
        flag if flag.starts_with("--config=") => {
            let config_path = PathBuf::from(&flag["--config=".len()..]);
            no_more(&args, Command::Run { config_path })
        }
        flag if flag.starts_with('-') => Err(format!("unknown option {flag}")),
        path => no_more(
            &args,
            Command::Run {
                config_path: PathBuf::from(path),
            },
        ),
    }
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
        let value = rest.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--port" => options.listen_port = parse_number(flag, value)?,
            "--replicas" => options.replica_count = parse_number(flag, value)?,
            "--scale" => options.pgbench_scale = parse_number(flag, value)?,
            _ => return Err(format!("unknown demo option {flag}")),
        }
    }
    if !(1..=8).contains(&options.replica_count) {
        return Err("--replicas must be between 1 and 8".to_string());
    }
    if options.pgbench_scale == 0 {
        return Err("--scale must be at least 1".to_string());
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
        Command::Run {
            config_path: PathBuf::from(path),
        }
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
                pgbench_scale: 1
            }))
        );
        assert!(parse_strs(&["demo", "--replicas", "0"]).is_err());
        assert!(parse_strs(&["demo", "--port"]).is_err());
        assert!(parse_strs(&["demo", "--port", "x"]).is_err());
        assert!(parse_strs(&["demo", "--bogus", "1"]).is_err());
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
