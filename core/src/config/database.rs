//! `[databases.NAME]` and `[users.NAME]` entries after validation: where a database's servers
//! are (one host, or a replica set with its routing policy and PLB parameters), its pool limits
//! and the class its sessions get. Replica references are indices into `ReplicaSet::replicas`.

use super::settings::PoolMode;
use crate::class::ClassSetting;
use pgtier_policy::PlbParams;
use serde::Deserialize;
use std::fmt;
use std::net::SocketAddr;

/// PostgreSQL's port when an entry names a host without one.
pub(crate) const DEFAULT_SERVER_PORT: u16 = 5432;

/// Index of a replica in [`ReplicaSet::replicas`].
pub type ReplicaIndex = usize;

/// One database entry clients can connect to.
#[derive(Clone, Debug, PartialEq)]
pub struct DatabaseConfig {
    /// The entry name: what clients put in `database=`.
    pub name: String,
    /// Database name sent to the server (defaults to the entry name).
    pub dbname: String,
    /// Forced server user; `None` = log in to the server as the client's user.
    pub user: Option<String>,
    /// Password for the server login; `None` = use the auth file's password for the user.
    pub password: Option<String>,
    /// Where the servers are.
    pub servers: ServerSet,
    /// Server connections per (entry, user) pool across all workers — per replica for a set.
    pub pool_size: u32,
    /// Servers kept open per pool even when idle.
    pub min_pool_size: u32,
    /// Extra servers allowed after `reserve_pool_timeout`.
    pub reserve_pool_size: u32,
    /// Pool mode of this entry (the global one unless set here); a user's own setting wins.
    pub pool_mode: PoolMode,
    /// Server connections to this entry across all users (0 = unlimited).
    pub max_db_connections: u32,
    /// Client connections to this entry across all users (0 = unlimited): the entry's
    /// `max_db_client_connections`, else the global one.
    pub max_db_client_connections: u32,
    /// Unused servers of this entry connected longer than this close (the entry's
    /// `server_lifetime`, else the global one; PgBouncer 1.19's per-database setting).
    pub server_lifetime: super::Seconds,
    /// A client's wait for a server of this entry before it is refused, when the entry sets
    /// one (`query_wait_timeout`; a `[users]` value wins, the global one applies otherwise).
    pub query_wait_timeout: Option<super::Seconds>,
    /// Class of sessions on this entry unless their user has one.
    pub class: ClassSetting,
    /// User whose `auth_query` looks up the secrets of clients the auth file does not list
    /// (the entry's, else the global `auth_user`).
    pub auth_user: Option<String>,
    /// The query that looks those secrets up (the entry's, else the global `auth_query`).
    pub auth_query: String,
    /// The entry whose servers run that query (the entry's `auth_dbname`, else the global
    /// one; `None`: this entry's own servers).
    pub auth_dbname: Option<String>,
    /// SQL run once on every new server connection of this entry, right after its login and
    /// before any client uses it (PgBouncer's `connect_query`); an error in it fails the
    /// login. `None`: nothing is run.
    pub connect_query: Option<String>,
    /// Startup parameters sent to the server on every new connection of this entry
    /// (pgbouncer.ini's `client_encoding`, `datestyle`, `timezone`), as (name, value).
    pub connect_params: Vec<(String, String)>,
}

impl DatabaseConfig {
    /// Whether a server of this entry is a server `other` would open: the same server
    /// database, login (user, password), startup values and hosts. A reload that changes
    /// any of these closes the entry's servers as they are released (PgBouncer's rule);
    /// limits and timeouts apply to existing servers as they are. A replica set's servers
    /// are keyed by their replica, so only its login and database count.
    pub fn connects_like(&self, other: &DatabaseConfig) -> bool {
        let same_servers = match (&self.servers, &other.servers) {
            (ServerSet::Replicas(_), ServerSet::Replicas(_)) => true,
            (mine, theirs) => mine == theirs,
        };
        same_servers
            && self.dbname == other.dbname
            && self.user == other.user
            && self.password == other.password
            && self.connect_params == other.connect_params
    }

    /// The database to ask the server for when a client asked for `requested`: the entry's
    /// `dbname`, except for the `*` fallback without one, which passes the client's name on.
    pub fn server_dbname<'a>(&'a self, requested: &'a str) -> &'a str {
        let inherits = self.name == super::FALLBACK_DATABASE
            && (self.dbname == super::FALLBACK_DATABASE || self.dbname.is_empty());
        if inherits { requested } else { &self.dbname }
    }
}

/// The servers behind an entry.
// A replica set carries the PLB parameters inline; a configuration holds a handful of
// entries, built once per load, so the size difference costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq)]
pub enum ServerSet {
    /// One server (`host`, `port`).
    Single(HostPort),
    /// PgBouncer's host list (`host = "a,b"`): equivalent servers, one of which each new
    /// connection goes to. Not a replica set: nothing is checked, routed or failed over.
    Hosts(HostList),
    /// Read-only replicas with a routing policy.
    Replicas(ReplicaSet),
}

/// A host list: the hosts as written (names, addresses or socket directories, repeats
/// allowed), all on one port, and how new connections walk them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostList {
    pub hosts: Vec<HostPort>,
    pub balance: LoadBalanceHosts,
    /// Which hosts may take new connections (pgtier's key, libpq's name).
    pub target: TargetSessionAttrs,
}

impl HostList {
    /// The list as PgBouncer shows it (`SHOW DATABASES`): the hosts joined by commas.
    pub fn joined(&self) -> String {
        let hosts: Vec<&str> = self.hosts.iter().map(|host| host.host.as_str()).collect();
        hosts.join(",")
    }

    /// The port every host is reached on.
    pub fn port(&self) -> u16 {
        self.hosts.first().map_or(0, |host| host.port)
    }
}

/// `load_balance_hosts` (PgBouncer 1.24): which host of a list a new connection takes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub enum LoadBalanceHosts {
    /// The next host in the list, for every new connection.
    #[default]
    #[serde(rename = "round-robin")]
    RoundRobin,
    /// The same host until a connection to it fails, then the next.
    #[serde(rename = "disable")]
    Disable,
}

impl LoadBalanceHosts {
    /// Spelling used in the file and in `SHOW DATABASES`.
    pub const fn as_str(self) -> &'static str {
        match self {
            LoadBalanceHosts::RoundRobin => "round-robin",
            LoadBalanceHosts::Disable => "disable",
        }
    }
}

/// `target_session_attrs` of a host list (pgtier's key, with libpq's name and values): which
/// hosts new server connections may go to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
pub enum TargetSessionAttrs {
    /// Every host, as `load_balance_hosts` walks them (PgBouncer's behaviour).
    #[default]
    #[serde(rename = "any")]
    Any,
    /// Only the host that is the primary now: pgtier polls every host's
    /// `pg_is_in_recovery()` and timeline, follows a promotion and fences an old primary
    /// (`pgtier_replicas::primary_election`). libpq's `read-write` also skips a primary
    /// whose `default_transaction_read_only` is on; pgtier treats the two alike.
    #[serde(rename = "read-write")]
    ReadWrite,
    /// The same as `read-write` here.
    #[serde(rename = "primary")]
    Primary,
}

impl TargetSessionAttrs {
    /// Spelling used in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            TargetSessionAttrs::Any => "any",
            TargetSessionAttrs::ReadWrite => "read-write",
            TargetSessionAttrs::Primary => "primary",
        }
    }

    /// Whether only the current primary takes new connections.
    pub const fn wants_primary(self) -> bool {
        !matches!(self, TargetSessionAttrs::Any)
    }
}

/// A server named by host (name or address) and port. A host that starts with `/` is the
/// directory of a Unix-domain socket `.s.PGSQL.<port>`, as in libpq.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl HostPort {
    /// The Unix socket path when `host` is a directory.
    pub fn unix_socket(&self) -> Option<std::path::PathBuf> {
        self.host
            .starts_with('/')
            .then(|| std::path::Path::new(&self.host).join(format!(".s.PGSQL.{}", self.port)))
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// Replicas of one database and how sessions are spread over them.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaSet {
    /// The replicas in configured order; indices into this list name replicas elsewhere.
    pub replicas: Vec<SocketAddr>,
    /// Routing policy with its parameters.
    pub routing: Routing,
    /// The primary of a reader entry (`primary = "host:port"`): writes, session mode and
    /// pinned sessions go there; transaction-mode reads go to a replica chosen per
    /// transaction. `None`: a read-only replica set whose sessions are pinned to one replica.
    pub primary: Option<SocketAddr>,
    /// How reads are routed when there is a primary.
    pub reads: ReadSettings,
}

/// Who shares a read-your-writes target: a session's own reads, or every session of the same
/// user on this pgtier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RywScope {
    #[default]
    Session,
    User,
}

impl RywScope {
    /// Spelling used in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            RywScope::Session => "session",
            RywScope::User => "user",
        }
    }
}

/// Read routing of an entry with a primary and replicas (seed 003).
#[derive(Clone, Debug, PartialEq)]
pub struct ReadSettings {
    /// After a write, the session's reads go only to replicas that replayed it.
    pub read_your_writes: bool,
    /// How long a read waits for a replica to catch up before it runs on the primary.
    pub read_your_writes_timeout: std::time::Duration,
    pub read_your_writes_scope: RywScope,
    /// A replica whose replay is this many WAL bytes behind the primary gets no new reads
    /// (0 = no byte cap).
    pub max_replica_lag_bytes: u64,
    /// The same cap in seconds of replay delay (zero = no time cap).
    pub max_replica_lag: std::time::Duration,
    /// With `routing = "plb"`: pick a replica per transaction inside the session's class pool
    /// instead of keeping the session's admitted replica.
    pub plb_per_transaction: bool,
    /// `read_only_functions` and `write_functions` (the entry's, else `[pgtier]`'s).
    pub functions: super::FunctionOverrides,
}

impl Default for ReadSettings {
    fn default() -> ReadSettings {
        ReadSettings {
            read_your_writes: true,
            read_your_writes_timeout: std::time::Duration::from_millis(1000),
            read_your_writes_scope: RywScope::Session,
            max_replica_lag_bytes: 0,
            max_replica_lag: std::time::Duration::ZERO,
            plb_per_transaction: false,
            functions: super::FunctionOverrides::default(),
        }
    }
}

impl ReplicaSet {
    /// Whether this entry has a primary (reads are routed per transaction).
    pub fn is_reader_entry(&self) -> bool {
        self.primary.is_some()
    }

    /// Index of `addr` in `replicas`.
    pub fn index_of(&self, addr: SocketAddr) -> Option<ReplicaIndex> {
        self.replicas.iter().position(|replica| *replica == addr)
    }
}

/// The routing names accepted by `routing = "..."`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoutingKind {
    Plb,
    RoundRobin,
    Dedicated,
    P2c,
    LeastSessions,
}

impl RoutingKind {
    /// Spelling used in the file.
    pub const fn as_str(self) -> &'static str {
        match self {
            RoutingKind::Plb => "plb",
            RoutingKind::RoundRobin => "round_robin",
            RoutingKind::Dedicated => "dedicated",
            RoutingKind::P2c => "p2c",
            RoutingKind::LeastSessions => "least_sessions",
        }
    }
}

impl fmt::Display for RoutingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A routing policy and its validated parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum Routing {
    /// Priority-aware load balancing (`[databases.NAME.plb]`).
    Plb(PlbSettings),
    /// Round robin over all replicas (KRR).
    RoundRobin,
    /// Fixed premium and freemium subsets, round robin inside each (rRR+fRR).
    Dedicated(DedicatedSplit),
    /// Weighted power of two choices on active sessions / weight; one weight per replica.
    P2c { weights: Vec<u32> },
    /// The replica with the fewest active sessions.
    LeastSessions,
}

impl Routing {
    /// The name of this policy.
    pub fn kind(&self) -> RoutingKind {
        match self {
            Routing::Plb(_) => RoutingKind::Plb,
            Routing::RoundRobin => RoutingKind::RoundRobin,
            Routing::Dedicated(_) => RoutingKind::Dedicated,
            Routing::P2c { .. } => RoutingKind::P2c,
            Routing::LeastSessions => RoutingKind::LeastSessions,
        }
    }
}

/// PLB's layout and parameters, validated against the replica set.
#[derive(Clone, Debug, PartialEq)]
pub struct PlbSettings {
    /// Initial premium pool R_P (replica indices, configured order).
    pub premium: Vec<ReplicaIndex>,
    /// Initial freemium pool R_F; replicas in neither list start Mixed.
    pub freemium: Vec<ReplicaIndex>,
    /// θ, α, κ and K per rank (the policy's one declaration, with its defaults): ranks 0 and 1
    /// are premium and freemium (`theta_premium` is `theta[0]`, `freemium_floor` is
    /// `floor[1]`, ...), or one rank per `tiers` pool. Absent keys take
    /// [`PlbParams::defaults`] for the configured pools (θ 10, α 0.6/0.8, κ_F 1, K the pool
    /// sizes).
    pub params: PlbParams,
    /// What θ counts: open sessions (the paper) or transactions in flight (`load_signal`).
    pub load_signal: PlbLoadSignal,
    /// After a rejoin, move transaction-mode sessions off overloaded survivors between
    /// transactions, and give the rejoined replica to the needier class (`recovery_drain`,
    /// off: 001's behaviour).
    pub recovery_drain: bool,
    /// More than two classes (`tiers = [[...], [...], [...]]`): the ranked pools, whose
    /// parameters are `params` (`tier_theta`, `tier_alpha`, `tier_floor`, `tier_target`,
    /// `reclaim`). `None` is the paper's two classes, `premium` and `freemium` above.
    pub tiers: Option<Box<TierSettings>>,
}

/// Tiered PLB: one pool per rank, rank 0 the most important; replicas in no pool start Mixed.
#[derive(Clone, Debug, PartialEq)]
pub struct TierSettings {
    /// Initial pool of each rank.
    pub pools: Vec<Vec<ReplicaIndex>>,
}

/// `load_signal` of `[databases.NAME.plb]`: what PLB counts as a replica's load.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlbLoadSignal {
    /// Open sessions pinned to the replica (000; the default).
    #[default]
    Sessions,
    /// Transactions in flight on the replica: a session between transactions counts zero.
    /// Meant for `pool_mode = "transaction"`; in session mode a session counts from its
    /// first query to its end.
    InFlight,
}

impl PlbLoadSignal {
    /// Spelling used in the file and in admin output.
    pub const fn as_str(self) -> &'static str {
        match self {
            PlbLoadSignal::Sessions => "sessions",
            PlbLoadSignal::InFlight => "in_flight",
        }
    }
}

/// The fixed split of `routing = "dedicated"`: every replica serves exactly one class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DedicatedSplit {
    pub premium: Vec<ReplicaIndex>,
    pub freemium: Vec<ReplicaIndex>,
}

/// A `[users.NAME]` entry. The settings PgBouncer 1.25 has per user win over the database
/// entry's and the global ones; where PgBouncer reads 0 as "not set", so does pgtier.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UserConfig {
    /// Class of this user's sessions on every database (wins over the entry's class).
    pub class: Option<ClassSetting>,
    /// Pool mode for this user (wins over database and global settings).
    pub pool_mode: Option<PoolMode>,
    /// Server connections of each pool whose server user this is (wins over the entry's
    /// `pool_size` and `default_pool_size`).
    pub pool_size: Option<u32>,
    /// Reserve servers of each pool whose server user this is (wins over the entry's and the
    /// global `reserve_pool_size`).
    pub reserve_pool_size: Option<u32>,
    /// Server connections for this user across all databases (0 = the global setting).
    pub max_user_connections: u32,
    /// Client connections of this user across all databases (0 = the global setting).
    pub max_user_client_connections: u32,
    /// `query_timeout` of this user's clients (absent or 0 = the global setting).
    pub query_timeout: Option<super::Seconds>,
    /// `idle_transaction_timeout` of this user's clients (absent or 0 = the global setting).
    pub idle_transaction_timeout: Option<super::Seconds>,
    /// `transaction_timeout` of this user's clients (absent or 0 = the global setting).
    pub transaction_timeout: Option<super::Seconds>,
    /// `client_idle_timeout` of this user's clients (absent or 0 = the global setting).
    pub client_idle_timeout: Option<super::Seconds>,
    /// `query_wait_timeout` of this user's clients (absent = the entry's or the global
    /// setting; 0 = no limit, as PgBouncer).
    pub query_wait_timeout: Option<super::Seconds>,
}

#[cfg(test)]
mod connects_like_tests {
    use crate::config::Config;

    fn entry(fields: &str) -> super::DatabaseConfig {
        let text = format!(
            "[pgtier]\nauth_type = \"trust\"\n[databases.app]\nhost = \"127.0.0.1\"\n{fields}\n"
        );
        let config = Config::from_str(&text, "pgtier.toml").expect("valid config");
        config.database("app").expect("the entry").clone()
    }

    #[test]
    fn a_new_target_or_login_is_another_server_and_a_new_limit_is_not() {
        let base = entry("port = 5432\ndbname = \"p1\"");
        assert!(base.connects_like(&entry("port = 5432\ndbname = \"p1\"\npool_size = 3")));
        assert!(!base.connects_like(&entry("port = 5432\ndbname = \"p0\"")));
        assert!(!base.connects_like(&entry("port = 5433\ndbname = \"p1\"")));
        assert!(!base.connects_like(&entry("port = 5432\ndbname = \"p1\"\nuser = \"other\"")));
    }
}
