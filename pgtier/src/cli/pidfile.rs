//! `pidfile`: the process id for init scripts and `kill $(cat FILE)`, with PgBouncer's rules.
//! Before starting, a pidfile naming a live process stops the start (another instance runs)
//! and one naming a process that is gone is removed. Once pgtier serves it writes its pid
//! (the file must not exist: `O_EXCL`), and removes the file at exit if it still holds it.

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use tracing::info;

/// The live process `path` names, if any (`-R` takes over from it); a stale file is
/// removed, as [`check`] does.
pub fn running(path: &Path) -> Result<Option<libc::pid_t>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(format!("cannot read pidfile {}: {error}", path.display())),
    };
    match text.trim().parse::<libc::pid_t>() {
        Ok(pid) if pid > 0 && process_exists(pid) => Ok(Some(pid)),
        _ => check(path).map(|()| None),
    }
}

/// Refuses to start when `path` names a live process; removes a stale file.
pub fn check(path: &Path) -> Result<(), String> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(format!("cannot read pidfile {}: {error}", path.display())),
    };
    let in_use = || {
        format!(
            "pidfile {} exists, another instance running? (remove it if not)",
            path.display()
        )
    };
    let Some(pid) = text
        .trim()
        .parse::<libc::pid_t>()
        .ok()
        .filter(|pid| *pid > 0)
    else {
        return Err(in_use());
    };
    if process_exists(pid) {
        return Err(in_use());
    }
    info!(pidfile = %path.display(), pid, "removing a stale pidfile (its process is gone)");
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(format!(
            "cannot remove the stale pidfile {}: {error}",
            path.display()
        )),
    }
}

/// Whether a process with `pid` exists (one of another user counts: kill says EPERM).
fn process_exists(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The pidfile this process wrote; dropping it removes the file if it still names us.
#[derive(Debug)]
pub(crate) struct PidFile {
    path: PathBuf,
    pid: u32,
}

impl PidFile {
    /// Writes this process's id to `path` in place of the one there (`-R`: the process
    /// taken over from still runs, and removes the file at its exit only if it names it).
    /// Written beside and renamed over, so a reader never sees it half written.
    pub fn replace(path: &Path) -> Result<PidFile, String> {
        let pid = std::process::id();
        let mut beside = path.as_os_str().to_owned();
        beside.push(format!(".{pid}.new"));
        let beside = PathBuf::from(beside);
        let _ = std::fs::remove_file(&beside);
        write_new(&beside, pid)?;
        std::fs::rename(&beside, path).map_err(|error| {
            let _ = std::fs::remove_file(&beside);
            format!("cannot replace pidfile {}: {error}", path.display())
        })?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }

    /// Writes this process's id to a new file at `path`.
    pub fn write(path: &Path) -> Result<PidFile, String> {
        let pid = std::process::id();
        write_new(path, pid)?;
        Ok(PidFile {
            path: path.to_path_buf(),
            pid,
        })
    }
}

/// Creates `path` (it must not exist) holding `pid`; a file left half written is removed.
fn write_new(path: &Path, pid: u32) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
        .map_err(|error| format!("cannot create pidfile {}: {error}", path.display()))?;
    file.write_all(format!("{pid}\n").as_bytes())
        .map_err(|error| {
            let _ = std::fs::remove_file(path);
            format!("cannot write pidfile {}: {error}", path.display())
        })
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|text| text.trim().parse::<u32>().ok() == Some(self.pid));
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("pgtier-pidfile-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        dir.join("pgtier.pid")
    }

    #[test]
    fn a_live_pid_stops_the_start_and_a_stale_one_is_removed() {
        let path = temp("live");
        std::fs::write(&path, format!("{}\n", std::process::id())).expect("write");
        assert!(check(&path).is_err(), "our own pid is alive");
        std::fs::write(&path, "garbage").expect("write");
        assert!(
            check(&path).is_err(),
            "unreadable content is treated as in use"
        );
        // pid_max is at most 2^22 on Linux: this pid cannot exist.
        std::fs::write(&path, "99999999\n").expect("write");
        assert_eq!(check(&path), Ok(()));
        assert!(!path.exists(), "stale pidfile removed");
        assert_eq!(check(&path), Ok(()), "no pidfile at all");
    }

    #[test]
    fn the_pidfile_is_exclusive_and_removed_on_drop() {
        let path = temp("write");
        let _ = std::fs::remove_file(&path);
        let guard = PidFile::write(&path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text, format!("{}\n", std::process::id()));
        assert!(PidFile::write(&path).is_err(), "O_EXCL");
        drop(guard);
        assert!(!path.exists());
    }
}
