//! `pgtier check-config FILE`: loads a config the way the proxy would start with it (the
//! configuration, then the auth file and the TLS files it names) and reports the first
//! problem with file, key and reason, so a bad edit is caught before a reload. For a
//! pgbouncer.ini (or a TOML file starting from one) it also says which of the ini's keys
//! pgtier honours, which of them behave differently and how, which it reads without acting
//! on, and the command that starts pgtier with the file (`migration.rs`): what someone
//! replacing a PgBouncer host needs. The exit status says whether the file runs as is.

use pgtier_core::config::{Config, IniKeyReport, ini_key_report};
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use super::migration;

/// Prints `OK` (stdout) and, for an ini, the report; or the error (stderr). Exit status 0
/// when pgtier would start with the file as it is, else 1.
pub fn run(config_path: &Path) -> ExitCode {
    let checked = Config::load(config_path).and_then(|config| {
        let report = ini_key_report(config_path)?;
        Ok((config, report))
    });
    let (config, report) = match checked {
        Ok(checked) => checked,
        Err(error) => {
            eprintln!("{error}");
            return ExitCode::FAILURE;
        }
    };
    // What the proxy reads next at start: a file that loads but names a missing auth file
    // or a broken certificate does not run as is.
    if let Err(message) = pgtier_engine::userlist::UserList::load_for(&config.pgtier) {
        eprintln!("{}: {message}", config_path.display());
        return ExitCode::FAILURE;
    }
    if let Err(error) = crate::tls_files::TlsContexts::load(&config.pgtier) {
        eprintln!("{}: {error}", config_path.display());
        return ExitCode::FAILURE;
    }
    if let Err(message) = process_directories_exist(&config) {
        eprintln!("{}: {message}", config_path.display());
        return ExitCode::FAILURE;
    }
    let mut out = String::from("OK\n");
    if let Some(report) = report {
        out.push_str(&render(&report));
        out.push_str(&migration::render(&report, &config, config_path));
    }
    // Written once, and a reader that stops early (`| head`) is not an error: print! would
    // panic on the broken pipe.
    let _ = std::io::stdout().write_all(out.as_bytes());
    ExitCode::SUCCESS
}

/// The directories of `logfile` and `pidfile`, and `unix_socket_dir`, exist (pgtier creates
/// none of them; the start fails without one). A relative path is taken from the current
/// directory, as the proxy takes it.
fn process_directories_exist(config: &Config) -> Result<(), String> {
    let settings = &config.pgtier;
    let parent = |path: &Option<std::path::PathBuf>| {
        path.as_ref()
            .and_then(|path| path.parent().map(Path::to_path_buf))
    };
    let socket_dir = settings
        .unix_socket_dir
        .clone()
        .filter(|dir| !dir.as_os_str().is_empty() && !dir.to_string_lossy().starts_with('@'));
    let wanted = [
        ("logfile", parent(&settings.logfile)),
        ("pidfile", parent(&settings.pidfile)),
        ("unix_socket_dir", socket_dir),
    ];
    for (key, dir) in wanted {
        let Some(dir) = dir.filter(|dir| !dir.as_os_str().is_empty()) else {
            continue;
        };
        if !dir.is_dir() {
            return Err(format!(
                "{key}: the directory {} does not exist, so pgtier would not start",
                dir.display()
            ));
        }
    }
    Ok(())
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
