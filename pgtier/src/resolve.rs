//! Server host names to addresses, for the engine. An IP address is used as is; a name is
//! looked up with the system resolver, which may block the shard for as long as the
//! lookup takes, so it happens only when a pool opens a server, never per query.

use std::net::{SocketAddr, ToSocketAddrs};

use pgtier_engine::Resolver;

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl Resolver for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        if let Ok(ip) = host.parse() {
            return Ok(SocketAddr::new(ip, port));
        }
        (host, port)
            .to_socket_addrs()
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| format!("cannot resolve server host {host}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_pass_and_localhost_resolves() {
        let addr = SystemResolver.resolve("127.0.0.1", 5432).expect("ip");
        assert_eq!(addr, "127.0.0.1:5432".parse().expect("addr"));
        assert!(SystemResolver.resolve("localhost", 5432).is_ok());
        assert!(SystemResolver.resolve("no such host.invalid", 1).is_err());
    }
}
