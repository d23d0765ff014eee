//! `pgtier check-config FILE`: loads a config the way the proxy would and reports the first
//! problem with file, key and reason, so a bad edit is caught before a reload.

use std::path::Path;
use std::process::ExitCode;

/// Prints `OK` (stdout) or the error (stderr); exit status 0 or 1.
pub fn run(config_path: &Path) -> ExitCode {
    match pgtier_core::config::Config::load(config_path) {
        Ok(_) => {
            println!("OK");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}
