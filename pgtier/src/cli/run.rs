//! `pgtier [-d] [-R] [-q] [-v] [-u USER] FILE`: the proxy as a Unix process, in PgBouncer's
//! order of steps. Load the configuration; check the pidfile; set up logging; go to the
//! background (`-d`); bind the sockets; give up root (`user`); start the shards; write the
//! pidfile and tell a waiting parent; serve until shutdown; remove the pidfile and the Unix
//! socket. Every failure before serving is reported on standard error (through the parent
//! with `-d`) with exit status 1.

use std::path::{Path, PathBuf};

use pgtier_core::config::Config;
use tracing::{error, info, warn};

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
    // -R: the running pgtier hands its addresses over (see `take_over`); it is found by the
    // pidfile, else, as PgBouncer finds it, on the Unix socket.
    let taking_over = match (&settings.pidfile, options.reboot) {
        (None, true) => match running_on_socket(settings) {
            Some(pid) => Some(pid),
            None => {
                return Err(
                    "-R (online restart): no running pgtier to take over from: neither a \
                     pidfile nor a Unix socket (unix_socket_dir) names one"
                        .to_string(),
                );
            }
        },
        (None, false) => None,
        (Some(path), true) => pidfile::running(path)?,
        (Some(path), false) => pidfile::check(path).map(|()| None)?,
    };
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
    if options.reboot && taking_over.is_none() {
        info!("-R: no running pgtier in the pidfile to take over from: starting normally");
    }
    if let Some(pid) = taking_over {
        take_over(pid)?;
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
            pid_guard = Some(if taking_over.is_some() {
                PidFile::replace(path)?
            } else {
                PidFile::write(path)?
            });
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
            bind_patience: if taking_over.is_some() {
                TAKE_OVER_PATIENCE
            } else {
                std::time::Duration::ZERO
            },
            predecessor: taking_over,
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

/// How long `-R` waits for the process it takes over from to let its addresses go (it
/// closes its listeners within milliseconds of SIGINT; past this something else holds them).
const TAKE_OVER_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// `-R`, PgBouncer's online restart, the pgtier way: the running pgtier (`pid`) is sent
/// SIGINT, its safe shutdown: it stops accepting at once, lets every transaction in
/// progress finish, starts no new one, and exits once no server is in use; this process
/// binds the port at once (`SO_REUSEPORT`), replaces the old one's Unix socket file (which
/// it keeps open for its console meanwhile) and serves every new client. The restart so ends within the longest transaction (PgBouncer's takeover is as
/// quick), where SIGTERM would wait for every idle client to leave. Unlike PgBouncer, no
/// connection moves between the processes: a client of the old one reconnects.
fn take_over(pid: libc::pid_t) -> Result<(), String> {
    info!(
        pid,
        "-R: taking over from the running pgtier: it stops accepting, finishes the \
         transactions in progress and starts no new one (SIGINT); this one takes its addresses"
    );
    // SAFETY: a plain signal to a process id read from the pidfile and checked alive.
    if unsafe { libc::kill(pid, libc::SIGINT) } != 0 {
        return Err(format!(
            "-R: cannot signal the running pgtier (pid {pid}): {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The process serving this configuration's Unix socket, when it runs as our user: its pid
/// from the socket's peer credentials (`SO_PEERCRED`).
fn running_on_socket(settings: &pgtier_core::config::Settings) -> Option<libc::pid_t> {
    let dir = settings.unix_socket_dir.as_ref()?;
    let path = dir.join(format!(".s.PGSQL.{}", settings.listen_port));
    let stream = std::os::unix::net::UnixStream::connect(path).ok()?;
    let (pid, uid) = pgtier_shard::peer_credentials(std::os::fd::AsRawFd::as_raw_fd(&stream))?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let ours = uid == unsafe { libc::getuid() };
    (ours && pid > 0).then_some(pid)
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
