//! The sockets the driver opens or asks about outside the ring: a server's non-blocking
//! socket and its address (for a server connection and a cancel request alike), and the
//! addresses of a connection for the console's listings, and whether a Unix-socket client
//! runs as this process's user (PgBouncer's console login without a password).

use std::net::SocketAddr;
use std::os::fd::RawFd;

use pgtier_engine::ServerAddr;
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// A non-blocking socket for a server at `addr` and the address to connect it to: TCP with
/// `TCP_NODELAY`, or a Unix-domain socket.
pub(crate) fn server_socket(addr: &ServerAddr) -> std::io::Result<(Socket, SockAddr)> {
    match addr {
        ServerAddr::Tcp(addr) => {
            let socket = Socket::new(
                Domain::for_address(*addr),
                Type::STREAM.nonblocking().cloexec(),
                Some(Protocol::TCP),
            )?;
            let _ = socket.set_tcp_nodelay(true);
            Ok((socket, SockAddr::from(*addr)))
        }
        ServerAddr::Unix { path, .. } => {
            let target = SockAddr::unix(path)?;
            let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)?;
            Ok((socket, target))
        }
    }
}

/// The local end of a connected socket, for the console's listings.
pub(crate) fn local_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: `fd` is open (accepted or connected just now) for the duration of this call;
    // the borrow does not outlive it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).local_addr().ok()?.as_socket()
}

/// The peer address of a fresh client socket, for the admin console's listings.
pub(crate) fn peer_addr(fd: RawFd) -> Option<SocketAddr> {
    // SAFETY: `fd` was just accepted and is open for the duration of this call; the borrow
    // does not outlive it.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    socket2::SockRef::from(&fd).peer_addr().ok()?.as_socket()
}

/// Whether the peer of a Unix-socket client runs under this process's user id
/// (`SO_PEERCRED`); false when the kernel does not say.
pub(crate) fn peer_is_own_user(fd: RawFd) -> bool {
    // SAFETY: getuid has no preconditions and cannot fail.
    peer_credentials(fd).is_some_and(|(_, uid)| uid == unsafe { libc::getuid() })
}

/// The name of the system user the peer of a Unix-socket client runs as, for `peer`
/// authentication: its user id (`SO_PEERCRED`) looked up in the user database, as
/// PostgreSQL and PgBouncer do at login. `None` when either is unknown.
pub(crate) fn peer_user_name(fd: RawFd) -> Option<String> {
    let (_, uid) = peer_credentials(fd)?;
    // SAFETY: zeroed is a valid `passwd` (null pointers, zero ids) for getpwuid_r to fill.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let mut buffer = vec![0 as libc::c_char; 4096];
    // SAFETY: `entry`, `buffer` (of the length passed) and `found` are live locals;
    // getpwuid_r writes the entry's strings within `buffer` and sets `found` to `&entry`
    // or null.
    let result = unsafe {
        libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        )
    };
    if result != 0 || found.is_null() || entry.pw_name.is_null() {
        return None;
    }
    // SAFETY: on success `pw_name` points at a NUL-terminated string inside `buffer`,
    // which is alive here.
    let name = unsafe { std::ffi::CStr::from_ptr(entry.pw_name) };
    name.to_str().ok().map(str::to_string)
}

/// The process id and user id of the peer of a connected Unix socket (`SO_PEERCRED`), when
/// the kernel gives them: the console's peer login, and `-R` finding the running pgtier.
pub fn peer_credentials(fd: RawFd) -> Option<(libc::pid_t, libc::uid_t)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `fd` is open for the duration of this call (the caller's socket); `cred` and
    // `len` are live locals of the size passed, which getsockopt writes within.
    let result = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (result == 0).then_some((cred.pid, cred.uid))
}
