//! `-d`: going to the background the way init scripts expect. The process forks, the child
//! starts a new session and forks again (so it can never get a controlling terminal back),
//! and the grandchild runs the proxy with `/` as its directory and /dev/null as its standard
//! input and outputs. The original process waits on a pipe until the daemon says it serves
//! (its sockets are bound, its pidfile written) and exits 0, or exits 1 with the daemon's
//! error on standard error, so `pgtier -d FILE && next-step` fails when the start did.
//!
//! Forking is only sound while the process has one thread: this runs before any shard or
//! control thread starts.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};

/// The byte the daemon writes once it serves; an error is `FAILED` and its message.
const READY: u8 = 0;
const FAILED: u8 = 1;

/// The daemon's end of the pipe to the waiting parent.
#[derive(Debug)]
pub(crate) struct Readiness {
    pipe: Option<File>,
}

impl Readiness {
    /// Tells the parent the start succeeded (it exits 0); later calls do nothing.
    pub fn ready(&mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = pipe.write_all(&[READY]);
        }
    }

    /// Tells the parent the start failed with `message` (it prints it and exits 1); after
    /// `ready` this does nothing.
    pub fn failed(&mut self, message: &str) {
        if let Some(mut pipe) = self.pipe.take() {
            let mut bytes = vec![FAILED];
            bytes.extend_from_slice(message.as_bytes());
            let _ = pipe.write_all(&bytes);
        }
    }
}

/// Forks into the background. Returns in the daemon; the calling process waits for the
/// daemon's word and exits with it, never returning.
pub(crate) fn daemonize() -> Result<Readiness, String> {
    let (read_end, write_end) = pipe()?;
    match fork()? {
        0 => {}
        child => {
            drop(write_end);
            let _ = wait_for(child);
            std::process::exit(wait_for_word(read_end));
        }
    }
    drop(read_end);
    // SAFETY: setsid takes no arguments; the child of a fork is never a group leader.
    if unsafe { libc::setsid() } < 0 {
        return Err(format!("setsid: {}", std::io::Error::last_os_error()));
    }
    if fork()? != 0 {
        // The session leader leaves; the daemon below it cannot acquire a terminal.
        // SAFETY: _exit ends this process without running the parent's atexit handlers twice.
        unsafe { libc::_exit(0) };
    }
    std::env::set_current_dir("/").map_err(|e| format!("chdir /: {e}"))?;
    redirect_stdio()?;
    Ok(Readiness {
        pipe: Some(File::from(write_end)),
    })
}

/// What the daemon said, as the exit status of the waiting parent.
fn wait_for_word(read_end: OwnedFd) -> i32 {
    let mut word = Vec::new();
    let _ = File::from(read_end).read_to_end(&mut word);
    match word.split_first() {
        Some((&READY, _)) => 0,
        Some((_, message)) => {
            eprintln!("pgtier: {}", String::from_utf8_lossy(message));
            1
        }
        None => {
            eprintln!("pgtier: the daemon exited during start-up; see its logfile or syslog");
            1
        }
    }
}

fn pipe() -> Result<(OwnedFd, OwnedFd), String> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both descriptors were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn fork() -> Result<libc::pid_t, String> {
    // SAFETY: called while the process has a single thread (see the module doc), so the
    // child's copy of memory holds no lock another thread owned.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    Ok(pid)
}

fn wait_for(child: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `status` is a live local; `child` is our own child.
    unsafe { libc::waitpid(child, &mut status, 0) };
    status
}

/// Standard input and outputs to /dev/null: nothing may write to the terminal the daemon
/// left, and a write to a closed descriptor must not hit a socket that reused its number.
fn redirect_stdio() -> Result<(), String> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| format!("cannot open /dev/null: {e}"))?;
    use std::os::fd::AsRawFd;
    for target in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
        // SAFETY: dup2 onto the standard descriptors, which this process owns.
        if unsafe { libc::dup2(null.as_raw_fd(), target) } < 0 {
            return Err(format!("dup2: {}", std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
