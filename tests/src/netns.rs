//! A network namespace of a test's own: its own loopback and its own per-namespace sysctls
//! (`net.ipv4.tcp_migrate_req`), so a test can set what a host should set without touching
//! the host. Linux keeps the namespace per thread: the thread that enters it, and the
//! processes and threads it starts from then on, live there (PostgreSQL, pgtier, clients);
//! it goes away with the last of them.

use std::io;
use std::process::Command;

/// Runs `body` on a new thread in a new network namespace with its loopback up and
/// `net.ipv4.tcp_migrate_req` set to `tcp_migrate_req`. `body` is told whether it got one:
/// where a namespace cannot be made (not root), it runs on the host's network, unchanged.
pub fn run_isolated<T: Send + 'static>(
    tcp_migrate_req: bool,
    body: impl FnOnce(bool) -> T + Send + 'static,
) -> T {
    let thread = std::thread::spawn(move || {
        let isolated = match enter_new(tcp_migrate_req) {
            Ok(isolated) => isolated,
            Err(error) => panic!("a network namespace for the test: {error}"),
        };
        body(isolated)
    });
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Moves the calling thread to a new network namespace (loopback up, `tcp_migrate_req` set);
/// `Ok(false)` where that is not allowed (not root), the thread staying where it was.
fn enter_new(tcp_migrate_req: bool) -> io::Result<bool> {
    // SAFETY: unshare takes a flag; CLONE_NEWNET moves only this thread (and what it starts
    // from now on) to a new network namespace.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        let error = io::Error::last_os_error();
        return match error.raw_os_error() {
            Some(libc::EPERM) => Ok(false),
            _ => Err(error),
        };
    }
    loopback_up()?;
    // Written by a child of this thread: /proc/sys/net shows the namespace of its reader.
    shell(&format!(
        "echo {} > /proc/sys/net/ipv4/tcp_migrate_req",
        u8::from(tcp_migrate_req)
    ))?;
    Ok(true)
}

/// Brings up `lo` of the calling thread's namespace (what `ip link set lo up` does, without
/// needing iproute2).
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain datagram socket, closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `ifreq` is plain data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: both ioctls read and write only `request`, a live local of the type they take;
    // the union field is the flags these two requests use.
    let outcome = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request) < 0 {
            Err(io::Error::last_os_error())
        } else {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: `fd` is the socket opened above, used no more.
    unsafe { libc::close(fd) };
    outcome
}

fn shell(script: &str) -> io::Result<()> {
    let status = Command::new("sh").args(["-c", script]).status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("`{script}`: {status}")))
    }
}
