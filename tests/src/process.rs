//! Running client programs (psql, pgbench) with a time limit, and raising the open-file
//! limit for tests that hold many connections.

use std::io::{self, Read};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What a finished (or killed) program printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// True when the program ran past its time limit and was killed.
    pub timed_out: bool,
}

impl Finished {
    pub fn success(&self) -> bool {
        self.status.success() && !self.timed_out
    }
}

/// Runs `command` with null stdin, capturing output; kills it after `timeout`.
pub fn run(command: &mut Command, timeout: Duration) -> io::Result<Finished> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Finished {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
        timed_out,
    })
}

fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = pipe {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
        text
    })
}

/// A client tool from the PostgreSQL installation (`psql`, `pgbench`).
pub fn pg_tool(name: &str) -> Command {
    Command::new(crate::pg_bindir().join(name))
}

/// Raises this process's soft RLIMIT_NOFILE to `wanted` (capped by the hard limit); children
/// such as the proxy inherit it. Returns the resulting soft limit.
pub fn raise_open_file_limit(wanted: u64) -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the rlimit struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let target = wanted.min(limit.rlim_max);
    if limit.rlim_cur < target {
        limit.rlim_cur = target;
        // SAFETY: setrlimit reads the rlimit struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur.max(target))
}

/// Sends `signal` to `pid` (our own child).
pub fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) takes plain integers.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One classic-BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy)]
struct SockFilter {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: u16,
    filter: *const SockFilter,
}

/// Makes `command`'s process see io_uring as forbidden (io_uring_setup fails with EPERM),
/// the way a container's seccomp profile or `kernel.io_uring_disabled = 2` would. x86_64 only
/// (the filter checks the syscall ABI and allows everything on another).
pub fn deny_io_uring(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const SYS_IO_URING_SETUP: u32 = 425;
    const LOAD_WORD_ABSOLUTE: u16 = 0x20;
    const JUMP_IF_EQUAL: u16 = 0x15;
    const RETURN: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const EPERM: u32 = 1;
    let step = |code, jt, jf, k| SockFilter { code, jt, jf, k };
    // seccomp_data: nr at offset 0, arch at offset 4.
    let program = [
        step(LOAD_WORD_ABSOLUTE, 0, 0, 4),
        step(JUMP_IF_EQUAL, 0, 3, AUDIT_ARCH_X86_64),
        step(LOAD_WORD_ABSOLUTE, 0, 0, 0),
        step(JUMP_IF_EQUAL, 0, 1, SYS_IO_URING_SETUP),
        step(RETURN, 0, 0, SECCOMP_RET_ERRNO | EPERM),
        step(RETURN, 0, 0, SECCOMP_RET_ALLOW),
    ];
    // SAFETY: the closure runs in the forked child before exec and only makes two prctl
    // calls (async-signal-safe syscalls) on data owned by the closure.
    unsafe {
        command.pre_exec(move || {
            let filter = SockFprog {
                len: program.len() as u16,
                filter: program.as_ptr(),
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            let filter_address = &filter as *const SockFprog;
            if libc::prctl(libc::PR_SET_SECCOMP, 2, filter_address, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
