//! Where a connection's other end is, when that may be a Unix-domain socket rather than a TCP
//! address: a server the engine connects to (`host` a directory, libpq's convention) and a
//! client that connected (TCP or pgtier's own Unix socket).

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use pgtier_core::config::HostPort;

/// A server's address: TCP, or the path of a PostgreSQL socket file (`<dir>/.s.PGSQL.<port>`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ServerAddr {
    Tcp(SocketAddr),
    /// A Unix-domain socket; TLS is never attempted on it (libpq's sslmode ignores sockets).
    Unix {
        path: PathBuf,
        port: u16,
    },
}

impl ServerAddr {
    /// The address of a configured `host`/`port`: a host starting with `/` is a socket
    /// directory, anything else goes to `resolve` (an IP address or a name).
    pub(crate) fn of_host(
        host_port: &HostPort,
        resolve: impl FnOnce(&str, u16) -> Result<SocketAddr, String>,
    ) -> Result<ServerAddr, String> {
        match host_port.unix_socket() {
            Some(path) => Ok(ServerAddr::Unix {
                path,
                port: host_port.port,
            }),
            None => resolve(&host_port.host, host_port.port).map(ServerAddr::Tcp),
        }
    }

    /// The TCP address, `None` for a socket.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ServerAddr::Tcp(addr) => Some(*addr),
            ServerAddr::Unix { .. } => None,
        }
    }

    /// The socket file, `None` for TCP.
    pub(crate) fn unix_path(&self) -> Option<&Path> {
        match self {
            ServerAddr::Tcp(_) => None,
            ServerAddr::Unix { path, .. } => Some(path),
        }
    }

    /// The host column of listings: the IP, or `unix` as PgBouncer prints a socket.
    pub fn host_text(&self) -> String {
        match self {
            ServerAddr::Tcp(addr) => addr.ip().to_string(),
            ServerAddr::Unix { .. } => "unix".to_string(),
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            ServerAddr::Tcp(addr) => addr.port(),
            ServerAddr::Unix { port, .. } => *port,
        }
    }
}

impl From<SocketAddr> for ServerAddr {
    fn from(addr: SocketAddr) -> ServerAddr {
        ServerAddr::Tcp(addr)
    }
}

impl fmt::Display for ServerAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerAddr::Tcp(addr) => write!(f, "{addr}"),
            ServerAddr::Unix { path, .. } => write!(f, "{}", path.display()),
        }
    }
}

/// A client's address: TCP, or pgtier's Unix socket (which has no peer address to show).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClientAddr {
    Tcp(SocketAddr),
    /// Connected on the Unix socket of `listen_port` (PgBouncer lists it as `unix`, that port).
    Unix {
        port: u16,
        /// The peer runs under pgtier's own user id (SO_PEERCRED): as PgBouncer, the user
        /// `pgbouncer` is then let into the console without a password.
        own_user: bool,
    },
}

impl ClientAddr {
    /// The TCP address, `None` for a socket.
    pub fn tcp(&self) -> Option<SocketAddr> {
        match self {
            ClientAddr::Tcp(addr) => Some(*addr),
            ClientAddr::Unix { .. } => None,
        }
    }

    /// The `addr` column of listings: the IP, or `unix`.
    pub fn host_text(&self) -> String {
        match self {
            ClientAddr::Tcp(addr) => addr.ip().to_string(),
            ClientAddr::Unix { .. } => "unix".to_string(),
        }
    }

    pub fn port(&self) -> u16 {
        match self {
            ClientAddr::Tcp(addr) => addr.port(),
            ClientAddr::Unix { port, .. } => *port,
        }
    }

    /// A Unix-socket peer running as pgtier's own user.
    pub(crate) fn is_own_user(&self) -> bool {
        matches!(self, ClientAddr::Unix { own_user: true, .. })
    }

    /// A Unix-socket peer (TLS is neither offered nor required there, as PgBouncer does).
    pub(crate) fn is_unix(&self) -> bool {
        matches!(self, ClientAddr::Unix { .. })
    }
}

impl From<SocketAddr> for ClientAddr {
    fn from(addr: SocketAddr) -> ClientAddr {
        ClientAddr::Tcp(addr)
    }
}

impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientAddr::Tcp(addr) => write!(f, "{addr}"),
            ClientAddr::Unix { .. } => f.write_str("unix"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_port(host: &str, port: u16) -> HostPort {
        HostPort {
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn a_directory_host_is_a_socket_and_anything_else_is_resolved() {
        let never = |_: &str, _: u16| -> Result<SocketAddr, String> { Err("no".into()) };
        let unix = ServerAddr::of_host(&host_port("/run/postgresql", 5433), never).expect("unix");
        assert_eq!(
            unix.unix_path(),
            Some(Path::new("/run/postgresql/.s.PGSQL.5433"))
        );
        assert_eq!((unix.host_text().as_str(), unix.port()), ("unix", 5433));
        let ip = |host: &str, port: u16| {
            host.parse()
                .map(|ip| SocketAddr::new(ip, port))
                .map_err(|_| "bad".to_string())
        };
        let tcp = ServerAddr::of_host(&host_port("127.0.0.1", 5432), ip).expect("tcp");
        assert_eq!(tcp.tcp(), Some("127.0.0.1:5432".parse().expect("addr")));
        assert!(ServerAddr::of_host(&host_port("db.invalid", 1), never).is_err());
    }

    #[test]
    fn a_unix_client_shows_as_unix_with_the_listen_port() {
        let client = ClientAddr::Unix {
            port: 6432,
            own_user: false,
        };
        assert_eq!((client.host_text().as_str(), client.port()), ("unix", 6432));
        assert!(client.is_unix() && client.tcp().is_none());
    }
}
