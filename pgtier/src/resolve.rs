//! Server host names to addresses, looked up off the shard threads.
//!
//! The engine asks its `Resolver` when a pool opens a server; a shard must not wait on DNS
//! then, so the lookups happen elsewhere and the shards only read their results:
//!
//! - At start and on every reload, the main thread resolves every host name the
//!   configuration names (database entries and the `*` fallback; IP addresses and socket
//!   directories need nothing) before the shards get the configuration, and publishes them.
//! - A resolver thread (`pgtier-resolver`) looks every such name up again each
//!   [`DNS_MAX_TTL`] (PgBouncer's `dns_max_ttl` default, 15 s) and publishes the results. A
//!   lookup that fails keeps the address published before, so a DNS outage does not take
//!   working servers away.
//! - A shard's [`CachedResolver`] reads the published table (an `ArcSwap` load: no lock, no
//!   system call). A name not in it is reported unresolved, which the engine treats as a
//!   failed connect, and is handed to the resolver thread, which looks it up at once (a name
//!   whose lookup failed is retried no sooner than [`NEGATIVE_TTL`] later) and keeps it fresh
//!   from then on.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use pgtier_core::config::{Config, DatabaseConfig, ServerSet};
use pgtier_engine::Resolver;
use tracing::{debug, warn};

/// How long a published address is used before it is looked up again (PgBouncer's
/// `dns_max_ttl` default).
pub(crate) const DNS_MAX_TTL: Duration = Duration::from_secs(15);

/// How long after a failed lookup a shard's ask for the same name is ignored (PgBouncer's
/// `dns_nxdomain_ttl` default); the periodic refresh still retries it.
pub(crate) const NEGATIVE_TTL: Duration = Duration::from_secs(15);

/// Host name → the address its lookup gave.
type Table = HashMap<String, IpAddr>;

/// What the resolver thread is told.
enum Message {
    /// A shard found no address for this name.
    Ask(String),
    /// The configuration's names after a load or reload (already resolved and published).
    Configured(BTreeSet<String>),
    Stop,
}

/// The published table and the way to the resolver thread. Dropping it stops the thread
/// without waiting for it: a lookup in progress must not hold up the process's exit.
pub(crate) struct Dns {
    table: Arc<ArcSwap<Table>>,
    /// Sends never block (the channel is unbounded).
    sender: Sender<Message>,
}

impl Dns {
    /// Resolves `config`'s host names (on the calling thread), publishes them and starts the
    /// resolver thread that keeps them fresh.
    pub(crate) fn start(config: &Config) -> Result<Dns, String> {
        Dns::start_with(config, DNS_MAX_TTL)
    }

    fn start_with(config: &Config, refresh: Duration) -> Result<Dns, String> {
        let table = Arc::new(ArcSwap::from_pointee(Table::new()));
        let names = configured_names(config);
        publish(&table, &lookup_all(&names));
        let (sender, receiver) = mpsc::channel();
        {
            let table = table.clone();
            std::thread::Builder::new()
                .name("pgtier-resolver".to_string())
                .spawn(move || refresh_loop(&table, &receiver, names, refresh))
                .map_err(|e| format!("cannot start the resolver thread: {e}"))?;
        }
        Ok(Dns { table, sender })
    }

    /// A resolver for one shard, reading the published table.
    pub(crate) fn resolver(&self) -> CachedResolver {
        CachedResolver {
            table: self.table.clone(),
            asks: self.sender.clone(),
        }
    }

    /// Resolves the host names of a new configuration (on the calling thread: the reload,
    /// before the shards get the configuration), publishes them and has the resolver thread
    /// keep them fresh from now on.
    pub(crate) fn reload(&self, config: &Config) {
        let names = configured_names(config);
        let unknown: BTreeSet<String> = {
            let table = self.table.load();
            names
                .iter()
                .filter(|name| !table.contains_key(*name))
                .cloned()
                .collect()
        };
        publish(&self.table, &lookup_all(&unknown));
        let _ = self.sender.send(Message::Configured(names));
    }
}

impl Drop for Dns {
    fn drop(&mut self) {
        let _ = self.sender.send(Message::Stop);
    }
}

/// The engine's `Resolver` on a shard: an IP address as is, a name from the published
/// table; never a system call that can block.
pub(crate) struct CachedResolver {
    table: Arc<ArcSwap<Table>>,
    asks: Sender<Message>,
}

impl Resolver for CachedResolver {
    fn resolve(&self, host: &str, port: u16) -> Result<SocketAddr, String> {
        if let Ok(ip) = host.parse() {
            return Ok(SocketAddr::new(ip, port));
        }
        if let Some(ip) = self.table.load().get(host) {
            return Ok(SocketAddr::new(*ip, port));
        }
        let _ = self.asks.send(Message::Ask(host.to_string()));
        Err(format!(
            "cannot resolve server host {host} (not resolved yet)"
        ))
    }
}

/// The resolver thread: answers asks at once and looks every known name up again each
/// `refresh`, until told to stop (or its `Dns` is gone).
fn refresh_loop(
    table: &ArcSwap<Table>,
    messages: &Receiver<Message>,
    mut configured: BTreeSet<String>,
    refresh: Duration,
) {
    // Names shards asked for that the configuration does not name (kept fresh as well).
    let mut asked = BTreeSet::new();
    let mut failed: HashMap<String, Instant> = HashMap::new();
    let mut next_refresh = Instant::now() + refresh;
    loop {
        let timeout = next_refresh.saturating_duration_since(Instant::now());
        match messages.recv_timeout(timeout) {
            Ok(Message::Ask(name)) => {
                if configured.contains(&name) && table.load().contains_key(&name) {
                    continue;
                }
                let recently_failed = failed
                    .get(&name)
                    .is_some_and(|at| at.elapsed() < NEGATIVE_TTL);
                if !configured.contains(&name) {
                    asked.insert(name.clone());
                }
                if !recently_failed {
                    let names = BTreeSet::from([name]);
                    let found = lookup_all(&names);
                    note_failures(&names, &found, &mut failed);
                    publish(table, &found);
                }
            }
            Ok(Message::Configured(names)) => configured = names,
            Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
            Err(RecvTimeoutError::Timeout) => {
                let names: BTreeSet<String> = configured.union(&asked).cloned().collect();
                let found = lookup_all(&names);
                note_failures(&names, &found, &mut failed);
                // Names no longer wanted leave the table; a failed lookup keeps the old address.
                let old = table.load_full();
                let fresh: Table = names
                    .iter()
                    .filter_map(|name| {
                        let ip = found.get(name).or_else(|| old.get(name))?;
                        Some((name.clone(), *ip))
                    })
                    .collect();
                table.store(Arc::new(fresh));
                next_refresh = Instant::now() + refresh;
            }
        }
    }
}

fn note_failures(names: &BTreeSet<String>, found: &Table, failed: &mut HashMap<String, Instant>) {
    for name in names {
        if found.contains_key(name) {
            failed.remove(name);
        } else {
            failed.insert(name.clone(), Instant::now());
        }
    }
}

/// Adds `found` to the published table (other names stay).
fn publish(table: &ArcSwap<Table>, found: &Table) {
    if found.is_empty() {
        return;
    }
    table.rcu(|old| {
        let mut new = Table::clone(old);
        new.extend(found.iter().map(|(name, ip)| (name.clone(), *ip)));
        new
    });
}

/// Looks each name up with the system resolver (blocking); the names that failed are left
/// out, with a warning.
fn lookup_all(names: &BTreeSet<String>) -> Table {
    names
        .iter()
        .filter_map(|name| match lookup(name) {
            Some(ip) => {
                debug!(host = %name, %ip, "resolved");
                Some((name.clone(), ip))
            }
            None => {
                warn!(host = %name, "cannot resolve server host");
                None
            }
        })
        .collect()
}

fn lookup(name: &str) -> Option<IpAddr> {
    (name, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .map(|addr| addr.ip())
}

/// The host names (not IP addresses, not socket directories) `config` connects to: its
/// servers, and its peers (cancel requests are forwarded there).
fn configured_names(config: &Config) -> BTreeSet<String> {
    config
        .databases
        .values()
        .chain(config.fallback.as_ref())
        .flat_map(|entry: &DatabaseConfig| match &entry.servers {
            ServerSet::Single(host_port) => std::slice::from_ref(host_port),
            ServerSet::Hosts(list) => list.hosts.as_slice(),
            ServerSet::Replicas(_) => &[],
        })
        .chain(config.peers.values().map(|peer| &peer.addr))
        .filter(|host_port| {
            host_port.unix_socket().is_none() && host_port.host.parse::<IpAddr>().is_err()
        })
        .map(|host_port| host_port.host.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(hosts: &[&str]) -> Config {
        let mut text = String::from("[pgtier]\nauth_type = \"trust\"\n");
        for (i, host) in hosts.iter().enumerate() {
            text.push_str(&format!(
                "[databases.db{i}]\nhost = \"{host}\"\nport = 5432\n"
            ));
        }
        Config::from_str(&text, "/tmp/pgtier-resolve.toml").expect("valid config")
    }

    /// Waits (bounded) until `resolver` knows `host`.
    fn eventually_resolves(resolver: &CachedResolver, host: &str) -> SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(addr) = resolver.resolve(host, 5432) {
                return addr;
            }
            assert!(Instant::now() < deadline, "{host} never resolved");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn only_host_names_are_looked_up() {
        let names = configured_names(&config(&["127.0.0.1", "::1", "/var/run/pg", "localhost"]));
        assert_eq!(names, BTreeSet::from(["localhost".to_string()]));
    }

    #[test]
    fn the_names_of_peers_are_looked_up() {
        let text = "[pgtier]\nauth_type = \"trust\"\n[peers.1]\nhost = \"peer.example\"\n\
                    [peers.2]\nhost = \"/tmp/peer\"\n[peers.3]\nhost = \"10.0.0.3\"\n";
        let config = Config::from_str(text, "/tmp/pgtier-resolve.toml").expect("valid config");
        assert_eq!(
            configured_names(&config),
            BTreeSet::from(["peer.example".to_string()])
        );
    }

    #[test]
    fn every_name_of_a_host_list_is_looked_up() {
        let names = configured_names(&config(&["127.0.0.1,localhost,/var/run/pg,localhost"]));
        assert_eq!(names, BTreeSet::from(["localhost".to_string()]));
    }

    #[test]
    fn addresses_pass_and_configured_names_are_resolved_before_use() {
        let dns = Dns::start(&config(&["localhost"])).expect("dns");
        let resolver = dns.resolver();
        let addr = resolver.resolve("127.0.0.1", 5432).expect("ip");
        assert_eq!(addr, "127.0.0.1:5432".parse().expect("addr"));
        // Resolved by `start`, before any shard asks: the first call finds it.
        let addr = resolver.resolve("localhost", 6543).expect("localhost");
        assert!(addr.ip().is_loopback() && addr.port() == 6543);
    }

    #[test]
    fn a_miss_does_not_block_and_is_looked_up_by_the_thread() {
        let dns = Dns::start(&config(&[])).expect("dns");
        let resolver = dns.resolver();
        let started = Instant::now();
        assert!(
            resolver.resolve("localhost", 5432).is_err(),
            "not asked before"
        );
        assert!(resolver.resolve("no such host.invalid", 1).is_err());
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "a miss returns at once"
        );
        assert!(
            eventually_resolves(&resolver, "localhost")
                .ip()
                .is_loopback()
        );
    }

    #[test]
    fn a_reload_resolves_a_new_host_before_the_shards_use_it() {
        let dns = Dns::start(&config(&["127.0.0.1"])).expect("dns");
        let resolver = dns.resolver();
        dns.reload(&config(&["127.0.0.1", "localhost"]));
        assert!(resolver.resolve("localhost", 5432).is_ok());
    }

    #[test]
    fn the_refresh_keeps_configured_names_and_drops_others() {
        let dns = Dns::start_with(&config(&["localhost"]), Duration::from_millis(20)).expect("dns");
        // Published by hand, as a name the configuration no longer has would be.
        publish(
            &dns.table,
            &Table::from([("gone.invalid".to_string(), IpAddr::from([10, 0, 0, 1]))]),
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while dns.table.load().contains_key("gone.invalid") {
            assert!(Instant::now() < deadline, "never refreshed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(dns.resolver().resolve("localhost", 1).is_ok());
    }
}
