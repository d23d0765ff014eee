//! `pgtier [-d] [-R] [-q] [-v] [-u USER] FILE`: the proxy as a Unix process, in PgBouncer's
//! order of steps. Load the configuration; check the pidfile; set up logging; go to the
//! background (`-d`); bind the sockets; give up root (`user`); start the shards; write the
//! pidfile and tell a waiting parent; serve until shutdown; remove the pidfile and the Unix
//! socket. Every failure before serving is reported on standard error (through the parent
//! with `-d`) with exit status 1.

use std::path::{Path, PathBuf};

use pgtier_core::config::Config;
use tracing::{error, warn};

use super::RunOptions;
use super::daemon::{self, Readiness};
use super::logging::{self, LogOptions};
use super::pidfile::{self, PidFile};
use super::privileges::RunAs;

/// Runs the proxy from `config_path` until shutdown.
pub fn run(config_path: &Path, options: &RunOptions) -> Result<(), String> {
    // Absolute before `-d` changes directory: SIGHUP reloads read the same file.
    let config_path =
        std::path::absolute(config_path).map_err(|e| format!("{}: {e}", config_path.display()))?;
    let mut config = Config::load(&config_path).map_err(|error| error.to_string())?;
    absolutize_process_paths(&mut config);
    let settings = &config.pgtier;
    if options.daemon {
        if settings.pidfile.is_none() {
            return Err("-d (daemon) needs pidfile to be set".to_string());
        }
        if settings.logfile.is_none() && !settings.syslog {
            return Err("-d (daemon) needs logfile or syslog to be set".to_string());
        }
    }
    let user = options
        .user
        .clone()
        .or_else(|| settings.user.clone())
        .filter(|name| !name.is_empty());
    let run_as = user.as_deref().map(RunAs::lookup).transpose()?;
    if let Some(run_as) = &run_as {
        run_as.check_allowed()?;
    }
    if let Some(path) = &settings.pidfile {
        pidfile::check(path)?;
    }
    let (log, complaint) = logging::init_proxy(&LogOptions {
        level: settings.log_level.clone(),
        verbose: options.verbose,
        stderr: !(options.quiet || options.daemon),
        logfile: settings.logfile.clone(),
        syslog: settings.syslog.then(|| {
            (
                settings.syslog_ident.clone(),
                settings.syslog_facility.clone(),
            )
        }),
    })?;
    if let Some(complaint) = complaint {
        warn!("{complaint}");
    }
    if options.reboot {
        warn!(
            "-R (online restart) is not supported: starting normally. To restart without \
             dropping clients, start the new pgtier on the same port (SO_REUSEPORT) and send \
             SIGTERM to the old one"
        );
    }
    let mut readiness = if options.daemon {
        Some(daemon::daemonize()?)
    } else {
        None
    };
    let pidfile_path = config.pgtier.pidfile.clone();
    let mut pid_guard: Option<PidFile> = None;
    let mut bound = |listeners: &pgtier_shard::listen::Listeners| -> Result<(), String> {
        let Some(run_as) = &run_as else {
            return Ok(());
        };
        if run_as.needs_switch() {
            listeners.hand_to_user(run_as.uid, run_as.gid)?;
            log.hand_to_user(run_as.uid, run_as.gid)?;
        }
        run_as.switch()
    };
    let mut serving = |_: &crate::ProxyHandle| -> Result<(), String> {
        if let Some(path) = &pidfile_path {
            pid_guard = Some(PidFile::write(path)?);
        }
        if let Some(readiness) = readiness.as_mut() {
            readiness.ready();
        }
        Ok(())
    };
    let mut sighup = || log.reopen();
    let result = crate::proxy::run_with(
        &config_path,
        config,
        crate::proxy::RunHooks {
            bound: &mut bound,
            serving: &mut serving,
            sighup: &mut sighup,
        },
    );
    drop(pid_guard);
    if let Err(message) = &result {
        error!(%message, "pgtier stopped");
        report_failure(&mut readiness, message);
    }
    result
}

fn report_failure(readiness: &mut Option<Readiness>, message: &str) {
    if let Some(readiness) = readiness.as_mut() {
        readiness.failed(message);
    }
}

/// `logfile`, `pidfile` and `unix_socket_dir` relative to the directory pgtier was started
/// in (as PgBouncer, which never changes directory; pgtier's daemon does).
fn absolutize_process_paths(config: &mut Config) {
    let absolute = |path: &mut Option<PathBuf>| {
        if let Some(found) = path.as_mut()
            && found.is_relative()
            && !found.as_os_str().is_empty()
            && !found.to_string_lossy().starts_with('@')
            && let Ok(absolute) = std::path::absolute(&*found)
        {
            *found = absolute;
        }
    };
    absolute(&mut config.pgtier.logfile);
    absolute(&mut config.pgtier.pidfile);
    absolute(&mut config.pgtier.unix_socket_dir);
}
