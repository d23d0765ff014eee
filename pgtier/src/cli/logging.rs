//! Logging set-up: one `tracing` subscriber for the whole process, so a disabled level costs a
//! single atomic load at each call site. Where lines go is PgBouncer's choice of outputs:
//! standard error (unless `-q` or `-d`), `logfile` (appended to, reopened on SIGHUP so
//! logrotate can move it), and syslog (`syslog = 1`, with `syslog_ident`/`syslog_facility`).
//! The level is `log_level`, raised one step per `-v`; `PGTIER_LOG` (or `RUST_LOG`) overrides
//! both with a tracing filter.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Level;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Filter used when neither variable is set.
const DEFAULT_FILTER: &str = "info";
/// Levels `-v` steps through, quietest first.
const LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// Installs the global subscriber writing to stderr, filtered by the environment only (the
/// demo). A bad filter falls back to the default and says so, rather than silently logging
/// nothing.
pub fn init() {
    let (filter, complaint) = filter_from_env(DEFAULT_FILTER);
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    if let Err(error) = installed {
        eprintln!("pgtier: logging was already initialised: {error}");
    }
    if let Some(complaint) = complaint {
        eprintln!("pgtier: {complaint}");
    }
}

/// Where the proxy's log lines go.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogOptions {
    /// `log_level` from the configuration (a level or a tracing filter).
    pub level: String,
    /// `-v` count.
    pub verbose: u8,
    /// Lines go to standard error (false with `-q` and `-d`).
    pub stderr: bool,
    /// `logfile`, appended to.
    pub logfile: Option<PathBuf>,
    /// `syslog_ident` and `syslog_facility` when `syslog` is on.
    pub syslog: Option<(String, String)>,
}

/// The log file of the installed subscriber, for `reopen_log_file`.
static LOG_FILE: std::sync::OnceLock<Arc<LogFile>> = std::sync::OnceLock::new();

/// Reopens `logfile` at its path, as SIGHUP does (for the admin console's RELOAD too). Does
/// nothing without a log file.
pub fn reopen_log_file() {
    if let Some(file) = LOG_FILE.get()
        && let Err(error) = file.reopen()
    {
        tracing::warn!(file = %file.path.display(), %error, "cannot reopen the log file; still writing to the old one");
    }
}

/// The installed outputs that need attention later (the log file on SIGHUP).
#[derive(Debug, Default)]
pub(crate) struct LogHandle {
    file: Option<Arc<LogFile>>,
}

impl LogHandle {
    /// Gives the log file to the user the process switches to, so it can reopen it later.
    pub fn hand_to_user(&self, uid: libc::uid_t, gid: libc::gid_t) -> Result<(), String> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        std::os::unix::fs::chown(&file.path, Some(uid), Some(gid))
            .map_err(|error| format!("cannot chown {}: {error}", file.path.display()))
    }

    /// Reopens the log file at its path (after logrotate moved the old one). A failure keeps
    /// the old file and is logged to it.
    pub fn reopen(&self) {
        if self.file.is_some() {
            reopen_log_file();
        }
    }
}

/// Installs the proxy's subscriber. Fails when the log file cannot be opened or the syslog
/// facility is unknown, before anything was logged.
pub(crate) fn init_proxy(options: &LogOptions) -> Result<(LogHandle, Option<String>), String> {
    let (filter, complaint) = filter_from_env(&level_filter(&options.level, options.verbose));
    let file = match &options.logfile {
        Some(path) => Some(Arc::new(LogFile::open(path)?)),
        None => None,
    };
    let syslog = match &options.syslog {
        Some((ident, facility)) => Some(Syslog::open(ident, facility)?),
        None => None,
    };
    let stderr_layer = options.stderr.then(|| {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_writer(std::io::stderr)
    });
    let file_layer = file.clone().map(|file| {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(false)
            .with_writer(FileWriter(file))
    });
    // syslog stamps its own time and takes the level as the priority.
    let syslog_layer = syslog.map(|syslog| {
        tracing_subscriber::fmt::layer()
            .with_target(false)
            .with_ansi(false)
            .without_time()
            .with_level(false)
            .with_writer(syslog)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr_layer)
        .with(file_layer)
        .with(syslog_layer)
        .try_init()
        .map_err(|error| format!("logging was already initialised: {error}"))?;
    if let Some(file) = &file {
        let _ = LOG_FILE.set(file.clone());
    }
    Ok((LogHandle { file }, complaint))
}

/// The filter for `level` raised by `verbose` steps. A level outside the plain names (a
/// tracing filter such as `info,pgtier_engine=debug`) is kept as is without `-v`, and
/// replaced by the raised plain level with it.
fn level_filter(level: &str, verbose: u8) -> String {
    let base = LEVELS
        .iter()
        .position(|name| name.eq_ignore_ascii_case(level.trim()));
    match (base, verbose) {
        (_, 0) if !level.trim().is_empty() => level.trim().to_string(),
        (None, 0) => DEFAULT_FILTER.to_string(),
        (base, verbose) => {
            let base = base.unwrap_or(2);
            let raised = (base + usize::from(verbose)).min(LEVELS.len() - 1);
            LEVELS[raised].to_string()
        }
    }
}

/// The environment's filter if set (a bad one falls back to `fallback`, with a complaint to
/// log), else `fallback`.
fn filter_from_env(fallback: &str) -> (EnvFilter, Option<String>) {
    let default =
        || EnvFilter::try_new(fallback).unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    for variable in ["PGTIER_LOG", "RUST_LOG"] {
        let Ok(spec) = std::env::var(variable) else {
            continue;
        };
        return match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (
                default(),
                Some(format!(
                    "{variable}={spec:?} is not a valid filter ({error}); using \"{fallback}\""
                )),
            ),
        };
    }
    match EnvFilter::try_new(fallback) {
        Ok(filter) => (filter, None),
        Err(error) => (
            EnvFilter::new(DEFAULT_FILTER),
            Some(format!(
                "log_level {fallback:?} is not a valid filter ({error}); using \"{DEFAULT_FILTER}\""
            )),
        ),
    }
}

/// `logfile`: appended to by every thread under one lock (one write per line), and swapped
/// for a fresh open of the same path on SIGHUP.
#[derive(Debug)]
struct LogFile {
    path: PathBuf,
    file: Mutex<File>,
}

impl LogFile {
    fn open(path: &Path) -> Result<LogFile, String> {
        let file = open_append(path)
            .map_err(|error| format!("cannot open the log file {}: {error}", path.display()))?;
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    fn reopen(&self) -> io::Result<()> {
        let fresh = open_append(&self.path)?;
        *self.file.lock().unwrap_or_else(PoisonError::into_inner) = fresh;
        Ok(())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(path)
}

/// The writer factory of the log file layer.
struct FileWriter(Arc<LogFile>);

/// One line's writer: holds the file's lock while the line is written.
struct FileLine<'a>(std::sync::MutexGuard<'a, File>);

impl Write for FileLine<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

impl<'a> MakeWriter<'a> for FileWriter {
    type Writer = FileLine<'a>;

    fn make_writer(&'a self) -> FileLine<'a> {
        FileLine(self.0.file.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// syslog(3) through libc: `openlog` once with the ident and facility, then one `syslog`
/// call per line with the line's level as the priority.
#[derive(Debug, Clone, Copy)]
struct Syslog;

impl Syslog {
    fn open(ident: &str, facility: &str) -> Result<Syslog, String> {
        let facility = facility_code(facility)?;
        let ident = CString::new(ident).map_err(|_| "syslog_ident holds a NUL byte".to_string())?;
        // openlog keeps the pointer: the ident lives as long as the process.
        let ident: &'static std::ffi::CStr = Box::leak(ident.into_boxed_c_str());
        // SAFETY: `ident` is a NUL-terminated string that is never freed.
        unsafe { libc::openlog(ident.as_ptr(), libc::LOG_PID | libc::LOG_NDELAY, facility) };
        Ok(Syslog)
    }
}

/// The facility names PgBouncer accepts.
fn facility_code(name: &str) -> Result<libc::c_int, String> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "auth" => libc::LOG_AUTH,
        "authpriv" => libc::LOG_AUTHPRIV,
        "daemon" => libc::LOG_DAEMON,
        "user" => libc::LOG_USER,
        "local0" => libc::LOG_LOCAL0,
        "local1" => libc::LOG_LOCAL1,
        "local2" => libc::LOG_LOCAL2,
        "local3" => libc::LOG_LOCAL3,
        "local4" => libc::LOG_LOCAL4,
        "local5" => libc::LOG_LOCAL5,
        "local6" => libc::LOG_LOCAL6,
        "local7" => libc::LOG_LOCAL7,
        other => {
            return Err(format!(
                "syslog_facility {other:?} is not one of auth, authpriv, daemon, user, local0-7"
            ));
        }
    })
}

/// The syslog priority of a tracing level.
fn priority(level: Level) -> libc::c_int {
    match level {
        Level::ERROR => libc::LOG_ERR,
        Level::WARN => libc::LOG_WARNING,
        Level::INFO => libc::LOG_INFO,
        Level::DEBUG | Level::TRACE => libc::LOG_DEBUG,
    }
}

/// One line for syslog, sent when the formatter is done with it.
struct SyslogLine {
    priority: libc::c_int,
    text: Vec<u8>,
}

impl Write for SyslogLine {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for SyslogLine {
    fn drop(&mut self) {
        let text: Vec<u8> = self
            .text
            .iter()
            .copied()
            .filter(|byte| *byte != 0)
            .collect();
        let text = String::from_utf8_lossy(&text);
        let Ok(line) = CString::new(text.trim_end()) else {
            return;
        };
        // SAFETY: a constant "%s" format with one NUL-terminated string argument.
        unsafe { libc::syslog(self.priority, c"%s".as_ptr(), line.as_ptr()) };
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = SyslogLine;

    fn make_writer(&'a self) -> SyslogLine {
        SyslogLine {
            priority: libc::LOG_INFO,
            text: Vec::new(),
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SyslogLine {
        SyslogLine {
            priority: priority(*meta.level()),
            text: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbose_raises_the_level_one_step_each() {
        assert_eq!(level_filter("info", 0), "info");
        assert_eq!(level_filter("info", 1), "debug");
        assert_eq!(level_filter("info", 2), "trace");
        assert_eq!(level_filter("info", 9), "trace");
        assert_eq!(level_filter("WARN", 1), "info");
        assert_eq!(
            level_filter("info,pgtier_engine=debug", 0),
            "info,pgtier_engine=debug"
        );
        assert_eq!(level_filter("info,pgtier_engine=debug", 1), "debug");
        assert_eq!(level_filter("", 0), "info");
    }

    #[test]
    fn pgbouncer_facilities_map_and_others_are_refused() {
        assert_eq!(facility_code("daemon"), Ok(libc::LOG_DAEMON));
        assert_eq!(facility_code("LOCAL3"), Ok(libc::LOG_LOCAL3));
        assert!(facility_code("kern").is_err());
        assert_eq!(priority(Level::WARN), libc::LOG_WARNING);
    }

    #[test]
    fn the_log_file_is_appended_to_and_reopened_at_its_path() {
        let dir = std::env::temp_dir().join(format!("pgtier-logfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("pgtier.log");
        std::fs::write(&path, "old line\n").expect("seed");
        let file = Arc::new(LogFile::open(&path).expect("open"));
        let writer = FileWriter(file.clone());
        writer.make_writer().write_all(b"first\n").expect("write");
        let rotated = dir.join("pgtier.log.1");
        std::fs::rename(&path, &rotated).expect("rotate");
        file.reopen().expect("reopen");
        writer.make_writer().write_all(b"second\n").expect("write");
        let old = std::fs::read_to_string(&rotated).expect("rotated");
        let new = std::fs::read_to_string(&path).expect("new");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(old, "old line\nfirst\n");
        assert_eq!(new, "second\n");
    }
}
