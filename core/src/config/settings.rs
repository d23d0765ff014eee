//! The `[pgtier]` table: process-wide settings with PgBouncer's names and defaults, plus
//! pgtier's own limits (message sizes, send batching, buffers, health checks). Every field has
//! a default, so an empty table is a valid configuration.

use super::seconds::Seconds;
use super::tls::{SslMode, TlsCiphers, TlsProtocols};
use serde::Deserialize;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::num::NonZeroUsize;
use std::path::PathBuf;

const KIB: u32 = 1024;
const MIB: u32 = 1024 * KIB;

/// When a server connection goes back to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolMode {
    /// The client keeps its server until it disconnects (PgBouncer's default).
    Session,
    /// The server returns to the pool at ReadyForQuery 'I'.
    Transaction,
    /// The server returns to the pool at ReadyForQuery 'I' too, and a ReadyForQuery inside
    /// a transaction block ends the client: PgBouncer's statement pooling, where every
    /// statement (a simple Query, or an extended-protocol segment up to its Sync) is its own
    /// transaction.
    Statement,
}

impl PoolMode {
    /// Spelling used in the file and in admin output.
    pub const fn as_str(self) -> &'static str {
        match self {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
            PoolMode::Statement => "statement",
        }
    }

    /// Whether a server goes back to the pool at its client's idle ReadyForQuery (and so
    /// may serve another client next): transaction and statement mode. Everything pgtier
    /// does so that a shared server is indistinguishable from a private one (pinning by
    /// session state, named-statement rewriting, resets when a server changes hands, moving
    /// a session to another replica between transactions) follows from this.
    pub const fn releases_at_idle_ready(self) -> bool {
        match self {
            PoolMode::Session => false,
            PoolMode::Transaction | PoolMode::Statement => true,
        }
    }

    /// Whether a ReadyForQuery inside a transaction block (status 'T' or 'E') is refused:
    /// the server closes and its client is disconnected (statement mode).
    pub const fn refuses_transaction_blocks(self) -> bool {
        matches!(self, PoolMode::Statement)
    }
}

impl fmt::Display for PoolMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which parked client of a pool gets the next server (`waiter_policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WaiterPolicy {
    /// Premium clients first; a freemium client goes first once it has waited
    /// `waiter_aging` longer than the premium one (the default).
    Class,
    /// Parking order, whatever the class (PgBouncer's behaviour).
    Fifo,
}

impl WaiterPolicy {
    /// Spelling used in the file and in admin output.
    pub const fn as_str(self) -> &'static str {
        match self {
            WaiterPolicy::Class => "class",
            WaiterPolicy::Fifo => "fifo",
        }
    }
}

impl fmt::Display for WaiterPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How clients prove who they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
pub enum AuthType {
    /// No password is asked for.
    #[serde(rename = "trust")]
    Trust,
    /// MD5 challenge (PgBouncer's default).
    #[serde(rename = "md5")]
    Md5,
    /// SCRAM-SHA-256.
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    /// Cleartext password, checked against the auth file (any stored form).
    #[serde(rename = "plain")]
    Plain,
    /// A TLS client certificate whose common name is the user name (needs client TLS with a CA).
    #[serde(rename = "cert")]
    Cert,
    /// The method is chosen per connection by `auth_hba_file` (pg_hba.conf syntax).
    #[serde(rename = "hba")]
    Hba,
    /// Like trust, and the user name the client sends is not checked either (PgBouncer's `any`).
    #[serde(rename = "any")]
    Any,
}

impl AuthType {
    /// Spelling used in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuthType::Trust => "trust",
            AuthType::Md5 => "md5",
            AuthType::ScramSha256 => "scram-sha-256",
            AuthType::Plain => "plain",
            AuthType::Cert => "cert",
            AuthType::Hba => "hba",
            AuthType::Any => "any",
        }
    }

    /// Whether this method reads passwords from the auth file (or `auth_query`).
    pub(crate) const fn needs_auth_file(self) -> bool {
        matches!(
            self,
            AuthType::Md5 | AuthType::ScramSha256 | AuthType::Plain
        )
    }
}

impl fmt::Display for AuthType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `[pgtier]` table. Durations are [`Seconds`]; a zero where the doc says "0 = disabled"
/// turns the timeout off (read it with [`Seconds::enabled`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// A pgbouncer.ini this TOML file starts from (TOML only): the ini is read first, then
    /// this file's keys replace and extend it. Relative to this file's directory.
    pub pgbouncer_ini: Option<PathBuf>,
    /// Addresses the TCP listeners bind: a comma-separated list, `*` for every IPv4 and IPv6
    /// address, empty for no TCP listener. PgBouncer has no TCP default; pgtier binds loopback.
    pub listen_addr: ListenAddrs,
    /// TCP port (6432).
    pub listen_port: u16,
    /// Worker (shard) threads; absent = one per available core. Read with [`Settings::worker_count`].
    pub workers: Option<usize>,
    /// Directory of the Unix-domain socket `.s.PGSQL.<listen_port>` (none: no Unix socket;
    /// a pgbouncer.ini without the key gets PgBouncer's `/tmp`).
    pub unix_socket_dir: Option<PathBuf>,
    /// Permissions of the Unix socket (0o777).
    pub unix_socket_mode: u32,
    /// Group owning the Unix socket (none: the process's group).
    pub unix_socket_group: Option<String>,
    /// Also let other processes bind the same port (SO_REUSEPORT), for rolling restarts
    /// (false, as PgBouncer). pgtier's own workers always share the port.
    pub so_reuseport: bool,
    /// This process's id in a group of peers (`[peers]`), carried by every cancel key it
    /// issues so that another member forwards a CancelRequest here (0: no peering).
    pub peer_id: u32,
    /// Log to this file as well as standard error (none: standard error only).
    pub logfile: Option<PathBuf>,
    /// Write the process id here at start; removed at exit.
    pub pidfile: Option<PathBuf>,
    /// Switch to this Unix user after binding the sockets (root only).
    pub user: Option<String>,
    /// Also log to syslog (false).
    pub syslog: bool,
    /// Program name in syslog lines ("pgtier").
    pub syslog_ident: String,
    /// Syslog facility ("daemon").
    pub syslog_facility: String,
    /// Log each server connection pgtier opens, as PgBouncer's `log_connections` does
    /// (true).
    pub log_connections: bool,
    /// Client authentication method (md5).
    pub auth_type: AuthType,
    /// pg_hba.conf-style rules choosing the method per connection when `auth_type = hba`.
    pub auth_hba_file: Option<PathBuf>,
    /// User name maps (pg_ident.conf syntax) that `map=` options of `auth_hba_file` lines
    /// name, for `peer` and `cert`.
    pub auth_ident_file: Option<PathBuf>,
    /// Query run as `auth_user` on the server to find the secret of a user the auth file does
    /// not list (PgBouncer 1.25's default reads pg_authid).
    pub auth_query: String,
    /// User that runs `auth_query` (none: unknown users are refused).
    pub auth_user: Option<String>,
    /// The database entry `auth_query` runs in (none: the client's own entry); an entry's
    /// `auth_dbname` wins.
    pub auth_dbname: Option<String>,
    /// PgBouncer userlist.txt; relative paths are resolved against the config file's directory
    /// when the file is loaded, so this is the path to open.
    pub auth_file: Option<PathBuf>,
    /// Default pool mode (session).
    pub pool_mode: PoolMode,
    /// Most client connections accepted across all workers (100).
    pub max_client_conn: u32,
    /// Server connections per (database, user) pool, across all workers (20).
    pub default_pool_size: u32,
    /// Servers kept open per pool even when idle (0).
    pub min_pool_size: u32,
    /// Extra servers a pool may open when a client waited `reserve_pool_timeout` (0).
    pub reserve_pool_size: u32,
    /// Wait before the reserve pool is used (5 s).
    pub reserve_pool_timeout: Seconds,
    /// Server connections per database across all users (0 = unlimited).
    pub max_db_connections: u32,
    /// Client connections per database entry across all users (0 = unlimited); an entry's
    /// own `max_db_client_connections` wins. The client past it is refused at login.
    pub max_db_client_connections: u32,
    /// Server connections per user across all databases (0 = unlimited).
    pub max_user_connections: u32,
    /// Client connections per user across all databases (0 = unlimited); a `[users]` entry's
    /// own `max_user_client_connections` wins. The client past it is refused at login.
    pub max_user_client_connections: u32,
    /// Connect plus login time allowed for a new server connection (15 s).
    pub server_connect_timeout: Seconds,
    /// Pause after a failed server connect or login before the next try (15 s).
    pub server_login_retry: Seconds,
    /// Close servers idle longer than this (600 s; 0 = disabled).
    pub server_idle_timeout: Seconds,
    /// Free a pool (its cached welcome with it) once it has had no client and no server
    /// this long (0 = free it as soon as it is unused).
    pub pool_idle_timeout: Seconds,
    /// Close unused servers connected longer than this (3600 s; 0 = use each server once).
    pub server_lifetime: Seconds,
    /// Fail a client that waited this long for a server (120 s; 0 = wait forever).
    pub query_wait_timeout: Seconds,
    /// Which waiting client gets a server that comes back ("class").
    pub waiter_policy: WaiterPolicy,
    /// Under `waiter_policy = "class"`, the head start a premium waiter has over a freemium
    /// one (0.02 s): a freemium client is served before premium clients parked more than this
    /// after it.
    pub waiter_aging: Seconds,
    /// Close clients idle longer than this (0 = disabled).
    pub client_idle_timeout: Seconds,
    /// Close clients idle inside a transaction longer than this (0 = disabled).
    pub idle_transaction_timeout: Seconds,
    /// Close clients whose transaction has lasted longer than this, running or idle
    /// (0 = disabled).
    pub transaction_timeout: Seconds,
    /// Cancel queries running longer than this (0 = disabled).
    pub query_timeout: Seconds,
    /// Close clients that do not finish login in this time (60 s; 0 = disabled).
    pub client_login_timeout: Seconds,
    /// After a failed authentication, the client's error is held this long, as PostgreSQL's
    /// `auth_delay` holds it; failures from one address are answered one per delay, so
    /// parallel guesses from it are slowed as much as serial ones (0 = answer at once).
    pub auth_failure_delay: Seconds,
    /// Client addresses per worker whose failures `auth_failure_delay` spaces apart (10000);
    /// past it, the failures of further addresses share one spacing.
    pub auth_failure_delay_max_addresses: u32,
    /// Run when a session-mode client releases its server ("DISCARD ALL"; empty = none).
    pub server_reset_query: String,
    /// Also run `server_reset_query` in transaction mode (false).
    pub server_reset_query_always: bool,
    /// Close a server marked to close (RECONNECT) as soon as it is idle outside a
    /// transaction, with its client, instead of when the client leaves (false).
    pub server_fast_close: bool,
    /// Idle servers unused longer than this are checked with `server_check_query` before reuse
    /// (30 s; 0 = check every server a client used before its next client).
    pub server_check_delay: Seconds,
    /// Query used by `server_check_delay` ("<empty>", PgBouncer's: the empty query; empty =
    /// no check).
    pub server_check_query: String,
    /// A NOTICE sent to every client at login, after BackendKeyData (empty = none).
    pub login_notify_message: String,
    /// A client waiting for a server longer than this gets one NOTICE per wait saying it is
    /// queued (5 s, PgBouncer's default; 0 = never).
    pub query_wait_notify: Seconds,
    /// Protocol-level named prepared statements each server keeps in transaction mode
    /// (200, as PgBouncer 1.22; 0 = not rewritten: a client that prepares one keeps its
    /// server, as with other session state).
    pub max_prepared_statements: u32,
    /// Bytes of statement names and texts one client may hold (64 MiB); a client past it
    /// is closed with 53200.
    pub max_client_prepared_bytes: u32,
    /// In transaction mode, a client that creates session state (`SET`, `LISTEN`, a temp
    /// table, an advisory lock...) keeps its server until the state is gone (true). Off:
    /// PgBouncer's behaviour, where that state stays on the server for its next client.
    pub pin_session_state: bool,
    /// Users allowed to run admin commands on the `pgtier` virtual database.
    pub admin_users: Vec<String>,
    /// Users allowed read-only SHOW commands on the `pgtier` virtual database.
    pub stats_users: Vec<String>,
    /// Startup parameters dropped (not forwarded, not part of the pool key). pgtier forwards
    /// every other top-level startup parameter to the server; see `forward_startup_options`
    /// for the settings inside `options`.
    pub ignore_startup_parameters: Vec<String>,
    /// Parameters besides the tracked set that a client may set in `options`
    /// (`IntervalStyle`, PgBouncer 1.25's default; names compared without case). pgtier does
    /// not re-apply them with SET: they go into the server's startup packet, and the pool is
    /// keyed by them, like any other startup parameter pgtier forwards.
    pub track_extra_parameters: Vec<String>,
    /// Settings in a client's `options` startup parameter that pgtier does not track (and
    /// `ignore_startup_parameters` does not drop) go into its server's startup packet, its
    /// pool keyed by them (false: the login is refused, as PgBouncer refuses it). pgtier only.
    pub forward_startup_options: bool,
    /// Observation interval for averages and latency percentiles (60 s).
    pub stats_period: Seconds,
    /// Log filter in `tracing` EnvFilter syntax ("info"); `PGTIER_LOG` overrides it.
    pub log_level: String,

    /// TLS for client connections (disable): `allow`/`prefer` use TLS when the client asks,
    /// `require` refuses clients without TLS, `verify-ca`/`verify-full` also require a client
    /// certificate signed by `client_tls_ca_file`.
    pub client_tls_sslmode: SslMode,
    /// Private key pgtier presents to clients (PEM); needed unless `client_tls_sslmode` is
    /// disable. Relative paths are resolved like `auth_file`.
    pub client_tls_key_file: Option<PathBuf>,
    /// Certificate chain for that key (PEM, leaf first).
    pub client_tls_cert_file: Option<PathBuf>,
    /// CA certificates that client certificates must chain to (PEM).
    pub client_tls_ca_file: Option<PathBuf>,
    /// TLS versions offered to clients ("secure" = TLS 1.2 and 1.3).
    pub client_tls_protocols: TlsProtocols,
    /// Cipher suites offered to clients ("default").
    pub client_tls_ciphers: TlsCiphers,
    /// TLS 1.3 suites offered to clients, replacing those `client_tls_ciphers` allows (none:
    /// theirs). Kept as written and read when the TLS configuration is built, as PgBouncer
    /// applies it: a value rustls cannot use fails that build, not the setting.
    pub client_tls13_ciphers: Option<String>,
    /// TLS towards servers (prefer, as PgBouncer 1.21 and later): `prefer` asks for TLS and
    /// falls back to plain TCP, `require` insists without checking the certificate,
    /// `verify-ca` checks the chain against `server_tls_ca_file`, `verify-full` also the host.
    pub server_tls_sslmode: SslMode,
    /// CA certificates that server certificates must chain to (PEM).
    pub server_tls_ca_file: Option<PathBuf>,
    /// Private key of the client certificate pgtier presents to servers (PEM; optional).
    pub server_tls_key_file: Option<PathBuf>,
    /// Certificate chain for `server_tls_key_file` (PEM, leaf first).
    pub server_tls_cert_file: Option<PathBuf>,
    /// TLS versions offered to servers ("secure").
    pub server_tls_protocols: TlsProtocols,
    /// Cipher suites offered to servers ("default").
    pub server_tls_ciphers: TlsCiphers,
    /// TLS 1.3 suites offered to servers, as `client_tls13_ciphers`.
    pub server_tls13_ciphers: Option<String>,

    /// Largest message a client may send: 256 MiB. PostgreSQL accepts up to 1 GB, but a client
    /// is untrusted and this bounds what one connection can make the proxy hold.
    pub max_client_message_bytes: u32,
    /// Largest message a server may send: 1 GiB, PostgreSQL's own ceiling for one value.
    pub max_server_message_bytes: u32,
    /// Most buffers in one `sendmsg` to a client (64; at most 1024, the kernel's IOV_MAX).
    pub send_batch_max_chunks: u32,
    /// Most bytes in one `sendmsg` batch (256 KiB).
    pub send_budget_bytes: u32,
    /// Bytes queued for a client before the proxy stops reading from its server (4 MiB): a
    /// slow client pauses its server instead of making pgtier buffer the whole result.
    pub client_buffer_limit_bytes: u32,
    /// Size of one receive buffer in a worker's provided-buffer ring, which every client of
    /// the worker receives into, and every server while its answers are small (4 KiB).
    pub recv_buffer_bytes: u32,
    /// Receive buffers in that ring (64; a power of two, at most 32768).
    pub recv_buffer_count: u32,
    /// Size a server connection's own receive buffer grows by (64 KiB), for the large
    /// results: an answer that fills a provided buffer is read on in this buffer.
    pub server_recv_buffer_bytes: u32,
    /// Submission queue entries of each worker's io_uring (4096; a power of two from 8 to
    /// 32768); the completion queue gets twice as many. Raise it when the log says the
    /// submission or completion queue filled up.
    pub ring_entries: u32,
    /// Cancel a client's running query on the server when the client disconnects (true).
    pub cancel_on_client_disconnect: bool,
    /// Distinct pools (key = database, user, replica, startup parameters) one worker keeps
    /// (1000); bounds what varied startup parameters can make a worker allocate.
    pub max_pools_per_worker: u32,
    /// Client spellings of tracked startup parameters (`utf8` for `UTF8`) one pool remembers
    /// (256); a login with a spelling past it is welcomed through a server round trip.
    pub max_spellings_per_pool: u32,
    /// Shard-local counters are folded into the shared totals after this many queries (64)...
    pub counter_flush_queries: u32,
    /// ...or this many bytes in either direction (64 KiB), whichever comes first.
    pub counter_flush_bytes: u32,
    /// Replica health probe period (0.25 s).
    pub health_check_interval: Seconds,
    /// Time a probe may take before it counts as failed (0.5 s).
    pub health_check_timeout: Seconds,
    /// Consecutive failed probes that mark a replica Down (2).
    pub health_check_failures: u32,
    /// Consecutive good probes that let a Down replica rejoin (3).
    pub health_check_successes: u32,
    /// Role the health probes and the WAL-position poller log in as on entries without a
    /// forced `user` ("" = none: probes then only check that the postmaster answers).
    pub health_check_user: String,
    /// Its password ("" = none, the server trusts it or takes its certificate).
    pub health_check_password: String,
    /// How often the control shard reads the WAL positions of an entry with a primary: the
    /// primary's insert LSN and each replica's replay LSN (0.01 s). Read-your-writes waits and
    /// the lag cap see replication this fresh.
    pub lsn_poll_interval: Seconds,
    /// Functions whose calls a reader entry's classifier takes as read-only, whatever their
    /// volatility (none); an entry's own list replaces it.
    pub read_only_functions: Vec<String>,
    /// Functions whose calls make a transaction run on the primary, built-ins included; wins
    /// over `read_only_functions` (none); an entry's own list replaces it.
    pub write_functions: Vec<String>,
    /// Move transaction-mode sessions that sit between transactions off a replica that went
    /// Down, instead of failing them (true).
    pub repin_idle_sessions: bool,
    /// Times one autocommit read-only statement on a replica is run again on another server
    /// of its class when its server dies before any of its answer reached the client (1;
    /// 0: never).
    pub read_retries: u32,
    /// Role and health events kept for `SHOW ROLE_EVENTS` / `SHOW EVENTS` (1024).
    pub role_events_capacity: u32,
    /// The fleet this host shares its PLB view with ("" = none: local PLB). Hosts with the
    /// same name and store elect one leader that computes the role table on their summed load.
    pub fleet_name: String,
    /// Where the fleet coordinates: a libpq-style `host=... port=... dbname=... user=...
    /// password=...` ("" = the primary of the first replica-set entry that has one, logged in
    /// as its probes are).
    pub fleet_store: String,
    /// How often each host writes its load and the leader recomputes the table (1 s).
    pub fleet_report_interval: Seconds,
    /// A member whose last report is older is not live (0 = 3 x `fleet_report_interval`).
    pub fleet_member_timeout: Seconds,
    /// Address of the Prometheus metrics endpoint (127.0.0.1).
    pub metrics_addr: IpAddr,
    /// Port of the metrics endpoint (0 = no endpoint).
    pub metrics_port: u16,
    /// Count every query under its normalized text for `SHOW QUERIES` and the metrics
    /// endpoint (true).
    pub query_digests: bool,
    /// Longest query text normalized for a digest (4096 bytes); a longer one is cut there
    /// and marked `…`.
    pub digest_max_text_bytes: u32,
    /// Distinct digests one worker counts before it folds them into the shared store and
    /// starts over (1000); it also folds every housekeeping period (250 ms).
    pub digest_map_capacity: u32,
    /// Digests the shared store keeps (5000); past it the least-called tenth is evicted.
    pub digest_store_capacity: u32,
    /// Digests the metrics endpoint exports, by total time (50; 0 = none).
    pub digest_metrics_top: u32,
}

/// The addresses of `listen_addr`: written as one string, `"127.0.0.1"`, `"10.0.0.1, ::1"`,
/// `"*"` (every IPv4 and IPv6 address) or `""` (no TCP listener).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenAddrs(pub Vec<IpAddr>);

impl ListenAddrs {
    /// Parses the PgBouncer spelling. Host names are not resolved: an address is expected.
    pub fn parse(text: &str) -> Result<ListenAddrs, String> {
        let mut addrs = Vec::new();
        for item in text
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            if item == "*" {
                addrs.push(IpAddr::V4(Ipv4Addr::UNSPECIFIED));
                addrs.push(IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED));
            } else if item.eq_ignore_ascii_case("localhost") {
                addrs.push(IpAddr::V4(Ipv4Addr::LOCALHOST));
            } else {
                let addr = item
                    .parse::<IpAddr>()
                    .map_err(|_| format!("invalid IP address syntax: {item:?}"))?;
                addrs.push(addr);
            }
        }
        addrs.dedup();
        Ok(ListenAddrs(addrs))
    }

    /// The addresses, in the order written.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.0
    }
}

impl fmt::Display for ListenAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text: Vec<String> = self.0.iter().map(IpAddr::to_string).collect();
        f.write_str(&text.join(","))
    }
}

impl<'de> Deserialize<'de> for ListenAddrs {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ListenAddrs::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            pgbouncer_ini: None,
            listen_addr: ListenAddrs(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]),
            listen_port: 6432,
            workers: None,
            unix_socket_dir: None,
            unix_socket_mode: 0o777,
            unix_socket_group: None,
            so_reuseport: false,
            peer_id: 0,
            logfile: None,
            pidfile: None,
            user: None,
            syslog: false,
            syslog_ident: "pgtier".to_string(),
            syslog_facility: "daemon".to_string(),
            log_connections: true,
            auth_type: AuthType::Md5,
            auth_hba_file: None,
            auth_ident_file: None,
            // PgBouncer 1.25's: an expired role gets no password, a NOLOGIN role no row.
            auth_query: "SELECT rolname, CASE WHEN rolvaliduntil < now() THEN NULL ELSE rolpassword END FROM pg_authid WHERE rolname=$1 AND rolcanlogin".to_string(),
            auth_user: None,
            auth_dbname: None,
            auth_file: None,
            pool_mode: PoolMode::Session,
            max_client_conn: 100,
            default_pool_size: 20,
            min_pool_size: 0,
            reserve_pool_size: 0,
            reserve_pool_timeout: Seconds::from_secs(5),
            max_db_connections: 0,
            max_db_client_connections: 0,
            max_user_connections: 0,
            max_user_client_connections: 0,
            server_connect_timeout: Seconds::from_secs(15),
            server_login_retry: Seconds::from_secs(15),
            server_idle_timeout: Seconds::from_secs(600),
            pool_idle_timeout: Seconds::ZERO,
            server_lifetime: Seconds::from_secs(3600),
            query_wait_timeout: Seconds::from_secs(120),
            waiter_policy: WaiterPolicy::Class,
            waiter_aging: Seconds::from_millis(20),
            client_idle_timeout: Seconds::ZERO,
            idle_transaction_timeout: Seconds::ZERO,
            transaction_timeout: Seconds::ZERO,
            query_timeout: Seconds::ZERO,
            client_login_timeout: Seconds::from_secs(60),
            auth_failure_delay: Seconds::ZERO,
            auth_failure_delay_max_addresses: 10_000,
            server_reset_query: "DISCARD ALL".to_string(),
            server_reset_query_always: false,
            server_fast_close: false,
            server_check_delay: Seconds::from_secs(30),
            server_check_query: "<empty>".to_string(),
            login_notify_message: String::new(),
            query_wait_notify: Seconds::from_secs(5),
            max_prepared_statements: 200,
            max_client_prepared_bytes: 64 * MIB,
            pin_session_state: true,
            admin_users: Vec::new(),
            stats_users: Vec::new(),
            ignore_startup_parameters: Vec::new(),
            track_extra_parameters: vec!["IntervalStyle".to_string()],
            forward_startup_options: false,
            stats_period: Seconds::from_secs(60),
            log_level: "info".to_string(),
            client_tls_sslmode: SslMode::Disable,
            client_tls_key_file: None,
            client_tls_cert_file: None,
            client_tls_ca_file: None,
            client_tls_protocols: TlsProtocols::SECURE,
            client_tls_ciphers: TlsCiphers::default(),
            client_tls13_ciphers: None,
            server_tls_sslmode: SslMode::Prefer,
            server_tls_ca_file: None,
            server_tls_key_file: None,
            server_tls_cert_file: None,
            server_tls_protocols: TlsProtocols::SECURE,
            server_tls_ciphers: TlsCiphers::default(),
            server_tls13_ciphers: None,
            max_client_message_bytes: 256 * MIB,
            max_server_message_bytes: 1024 * MIB,
            send_batch_max_chunks: 64,
            send_budget_bytes: 256 * KIB,
            client_buffer_limit_bytes: 4 * MIB,
            recv_buffer_bytes: 4 * KIB,
            recv_buffer_count: 64,
            server_recv_buffer_bytes: 64 * KIB,
            cancel_on_client_disconnect: true,
            max_pools_per_worker: 1000,
            max_spellings_per_pool: 256,
            ring_entries: 4096,
            counter_flush_queries: 64,
            counter_flush_bytes: 64 * KIB,
            health_check_interval: Seconds::from_millis(250),
            health_check_timeout: Seconds::from_millis(500),
            health_check_failures: 2,
            health_check_successes: 3,
            health_check_user: String::new(),
            health_check_password: String::new(),
            lsn_poll_interval: Seconds::from_millis(10),
            read_only_functions: Vec::new(),
            write_functions: Vec::new(),
            repin_idle_sessions: true,
            read_retries: 1,
            role_events_capacity: 1024,
            fleet_name: String::new(),
            fleet_store: String::new(),
            fleet_report_interval: Seconds::from_millis(1000),
            fleet_member_timeout: Seconds::from_millis(0),
            metrics_addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            metrics_port: 0,
            query_digests: true,
            digest_max_text_bytes: 4096,
            digest_map_capacity: 1000,
            digest_store_capacity: 5000,
            digest_metrics_top: 50,
        }
    }
}

impl Settings {
    /// `fleet_member_timeout`, or 3 x `fleet_report_interval` when it is 0.
    pub fn fleet_member_timeout(&self) -> std::time::Duration {
        match self.fleet_member_timeout.duration() {
            zero if zero.is_zero() => 3 * self.fleet_report_interval.duration(),
            timeout => timeout,
        }
    }

    /// Worker threads to start: `workers` if set, else the available cores (1 if unknown).
    pub fn worker_count(&self) -> usize {
        match self.workers {
            Some(workers) => workers,
            None => std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
        }
    }

    /// Whether `user` may use the admin console with full rights.
    pub fn is_admin(&self, user: &str) -> bool {
        self.admin_users.iter().any(|admin| admin == user)
    }

    /// Whether `user` may run read-only SHOW commands (admins may too).
    pub fn is_stats_user(&self, user: &str) -> bool {
        self.is_admin(user) || self.stats_users.iter().any(|stats| stats == user)
    }

    /// Applies `resolve` to every TLS file path (the loader resolves them against the config
    /// file's directory, as `auth_file`).
    pub(super) fn resolve_tls_files(&mut self, resolve: impl Fn(PathBuf) -> PathBuf) {
        for path in [
            &mut self.client_tls_key_file,
            &mut self.client_tls_cert_file,
            &mut self.client_tls_ca_file,
            &mut self.server_tls_ca_file,
            &mut self.server_tls_key_file,
            &mut self.server_tls_cert_file,
        ] {
            *path = path.take().map(&resolve);
        }
    }

    /// Whether a startup parameter is listed in `ignore_startup_parameters` (case-insensitive,
    /// as PostgreSQL compares parameter names).
    pub fn ignores_startup_parameter(&self, name: &str) -> bool {
        self.ignore_startup_parameters
            .iter()
            .any(|ignored| ignored.eq_ignore_ascii_case(name))
    }
}
