//! `pgtier check-config FILE`: loads a config the way the proxy would and reports the first
//! problem with file, key and reason, so a bad edit is caught before a reload. For a
//! pgbouncer.ini (or a TOML file starting from one) it also says which of the ini's keys
//! pgtier honours and which it reads without acting on them.

use pgtier_core::config::{Config, IniKeyReport, ini_key_report};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// Prints `OK` (stdout) and, for an ini, the honoured and unhonoured keys; or the error
/// (stderr). Exit status 0 or 1.
pub fn run(config_path: &Path) -> ExitCode {
    let checked = Config::load(config_path).and_then(|_| ini_key_report(config_path));
    match checked {
        Ok(report) => {
            let mut out = String::from("OK\n");
            if let Some(report) = report {
                out.push_str(&render(&report));
            }
            // Written once, and a reader that stops early (`| head`) is not an error: print!
            // would panic on the broken pipe.
            let _ = std::io::stdout().write_all(out.as_bytes());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{error}");
            ExitCode::FAILURE
        }
    }
}

fn render(report: &IniKeyReport) -> String {
    let list = |keys: &[String]| {
        if keys.is_empty() {
            "(none)".to_string()
        } else {
            keys.join(", ")
        }
    };
    format!(
        "{}:\n  honoured: {}\n  not honoured (read, no effect): {}\n",
        report.file.display(),
        list(&report.honoured),
        list(&report.unhonoured)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_both_lists() {
        let report = IniKeyReport {
            file: "/etc/pgbouncer/pgbouncer.ini".into(),
            honoured: vec!["listen_port".into(), "[databases] host".into()],
            unhonoured: Vec::new(),
        };
        assert_eq!(
            render(&report),
            "/etc/pgbouncer/pgbouncer.ini:\n  honoured: listen_port, [databases] host\n  \
             not honoured (read, no effect): (none)\n"
        );
    }
}
