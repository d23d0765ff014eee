//! The sockets the driver opens or asks about outside the ring: a server's non-blocking
//! socket and its address (for a server connection and a cancel request alike), and the
//! addresses of a connection for the console's listings.

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
