//! Command line: `pgtier [-d] [-R] [-q] [-v] [-u USER] FILE` (PgBouncer's), `pgtier --config
//! FILE`, `pgtier check-config FILE`, `pgtier demo`. Parses arguments and runs the proxy as a
//! Unix process (`run.rs`: daemon, pidfile, privileges, log outputs); owns no proxy state.

mod args;
mod check_config;
mod daemon;
mod demo;
mod demo_load;
mod logging;
mod migration;
mod pidfile;
mod privileges;
mod run;

use std::process::ExitCode;

pub use args::{Command, DemoOptions, RunOptions};
pub use logging::reopen_log_file;

/// Exit code for a command line that could not be parsed (as most Unix tools do).
const EXIT_USAGE: u8 = 2;

/// Entry point of the `pgtier` binary.
pub fn main() -> ExitCode {
    let command = match args::parse(std::env::args_os().skip(1)) {
        Ok(command) => command,
        Err(message) => {
            eprintln!("pgtier: {message}\n\n{}", args::USAGE);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    execute(command)
}

/// Runs one parsed command and maps its outcome to the process exit code.
pub fn execute(command: Command) -> ExitCode {
    match command {
        Command::Help => {
            print!("{}", args::USAGE);
            ExitCode::SUCCESS
        }
        Command::Version => {
            println!("pgtier {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::CheckConfig { config_path } => check_config::run(&config_path),
        Command::Run {
            config_path,
            options,
        } => match run::run(&config_path, &options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("pgtier: {message}");
                ExitCode::FAILURE
            }
        },
        Command::Demo(options) => {
            logging::init();
            // Until Ctrl-C (SIGINT) or SIGTERM, or with `--load` until the load is done.
            let ran = demo::start(&options).and_then(|mut cluster| {
                if options.load {
                    demo_load::run(&mut cluster, &options)
                } else {
                    demo::wait_for_stop(&mut cluster)
                }
            });
            match ran {
                Ok(()) => ExitCode::SUCCESS,
                Err(message) => {
                    eprintln!("pgtier demo: {message}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
