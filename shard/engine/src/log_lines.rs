//! The text of PgBouncer's log lines that pgtier writes too. Operators' alerting and
//! PgBouncer's own test suite match these lines, so the words, and the order of what they
//! name, are PgBouncer's; what surrounds them (timestamp, level, fields) is pgtier's.

use std::net::SocketAddr;

use crate::addr::ServerAddr;

/// A server socket connected (PgBouncer's `log_connections`): `db/user@host:port`, as
/// PgBouncer prefixes its server lines, then the local end of a TCP socket.
pub fn server_connected(
    database: &str,
    user: &str,
    server: &ServerAddr,
    local: Option<SocketAddr>,
) -> String {
    match (server, local) {
        (ServerAddr::Tcp(_), Some(local)) => {
            format!("{database}/{user}@{server} new connection to server (from {local})")
        }
        _ => format!("{database}/{user}@{server} new connection to server"),
    }
}

/// A pool opened a server beyond its `pool_size` for a client that waited
/// `reserve_pool_timeout` (PgBouncer logs it as a warning).
pub const TAKING_FROM_RESERVE: &str = "taking connection from reserve_pool";

/// A database name was served through the `*` entry for the first time.
pub fn registered_auto_database(name: &str) -> String {
    format!("registered new auto-database: {name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tcp_server_line_names_the_server_then_the_local_end() {
        let server = ServerAddr::Tcp("127.0.0.1:6666".parse().expect("addr"));
        let local = "127.0.0.1:43582".parse().ok();
        assert_eq!(
            server_connected("p0", "bouncer", &server, local),
            "p0/bouncer@127.0.0.1:6666 new connection to server (from 127.0.0.1:43582)"
        );
        let v6 = ServerAddr::Tcp("[::1]:6666".parse().expect("addr"));
        let local = "[::1]:40000".parse().ok();
        assert_eq!(
            server_connected("p0", "bouncer", &v6, local),
            "p0/bouncer@[::1]:6666 new connection to server (from [::1]:40000)"
        );
    }

    #[test]
    fn a_socket_server_line_has_no_local_end() {
        let server = ServerAddr::Unix {
            path: "/tmp/.s.PGSQL.5432".into(),
            port: 5432,
        };
        assert_eq!(
            server_connected("p0", "bouncer", &server, None),
            "p0/bouncer@/tmp/.s.PGSQL.5432 new connection to server"
        );
    }
}
