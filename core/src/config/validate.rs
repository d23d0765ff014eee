//! Cross-field checks that serde cannot express: limits that must be positive or ordered,
//! replica lists that must agree with each other, PLB parameters that must be satisfiable.
//! Each check names the key it rejects and says why, so an operator can fix the file from the
//! message alone.

use super::database::{
    DEFAULT_SERVER_PORT, DatabaseConfig, DedicatedSplit, HostList, HostPort, PlbLoadSignal,
    PlbSettings, ReadSettings, ReplicaIndex, ReplicaSet, Routing, RoutingKind, ServerSet,
    TierSettings,
};
use super::error::ConfigError;
use super::function_names::{FunctionNames, FunctionOverrides};
use super::raw::{DatabaseRaw, DedicatedRaw, PlbRaw};
use super::seconds::Seconds;
use super::settings::Settings;
use crate::class::ClassSetting;
use pgtier_policy::tiers::{MAX_TIERS, Tier, TierTable};
use pgtier_policy::{PlbParams, ReplicaId, RoleTable, ServiceClass};
use std::net::SocketAddr;
use std::path::Path;

/// Name of the virtual admin database; no entry may take it.
pub const ADMIN_DATABASE: &str = "pgtier";

/// PgBouncer's name for its admin database: an alias of [`ADMIN_DATABASE`], reserved too.
pub const ADMIN_DATABASE_ALIAS: &str = "pgbouncer";

/// Kernel limit on iovecs per `sendmsg` (IOV_MAX on Linux).
const IOV_MAX: u32 = 1024;
/// Largest provided-buffer ring the kernel accepts.
const MAX_RECV_BUFFER_COUNT: u32 = 32768;
/// A startup packet may be up to 10000 bytes; smaller message caps would break logins.
const MIN_MESSAGE_BYTES: u32 = 16 * 1024;
/// Most workers: beyond any core count pgtier is meant for, small enough to catch typos.
const MAX_WORKERS: usize = 1024;

type Check = Result<(), ConfigError>;

/// Helper that knows the file, so each check only states key and reason.
struct Checker<'a> {
    file: &'a Path,
}

impl Checker<'_> {
    fn fail<T>(&self, key: impl Into<String>, reason: impl Into<String>) -> Result<T, ConfigError> {
        Err(ConfigError::at(self.file, key, reason))
    }

    fn at_least(&self, key: &str, value: u64, minimum: u64) -> Check {
        if value < minimum {
            return self.fail(
                key,
                format!("{value} is too small: must be at least {minimum}"),
            );
        }
        Ok(())
    }

    fn at_most(&self, key: &str, value: u64, maximum: u64) -> Check {
        if value > maximum {
            return self.fail(
                key,
                format!("{value} is too large: must be at most {maximum}"),
            );
        }
        Ok(())
    }
}

/// Checks the `[pgtier]` table.
pub(super) fn settings(file: &Path, settings: &Settings) -> Check {
    let check = Checker { file };
    let key = |name: &str| format!("pgtier.{name}");
    check.at_least(&key("listen_port"), settings.listen_port.into(), 1)?;
    if let Some(workers) = settings.workers {
        check.at_least(&key("workers"), workers as u64, 1)?;
        check.at_most(&key("workers"), workers as u64, MAX_WORKERS as u64)?;
    }
    auth_dbname(&check, &key("auth_dbname"), settings.auth_dbname.as_deref())?;
    if settings.auth_type.needs_auth_file() && settings.auth_file.is_none() {
        return check.fail(
            key("auth_file"),
            format!(
                "auth_type = \"{}\" needs an auth_file with the users' passwords",
                settings.auth_type
            ),
        );
    }
    check.at_least(&key("max_client_conn"), settings.max_client_conn.into(), 1)?;
    check.at_least(
        &key("default_pool_size"),
        settings.default_pool_size.into(),
        1,
    )?;
    if settings.min_pool_size > settings.default_pool_size {
        return check.fail(
            key("min_pool_size"),
            format!(
                "{} is larger than default_pool_size ({})",
                settings.min_pool_size, settings.default_pool_size
            ),
        );
    }
    for (name, value) in [
        ("server_connect_timeout", settings.server_connect_timeout),
        ("health_check_interval", settings.health_check_interval),
        ("health_check_timeout", settings.health_check_timeout),
        ("stats_period", settings.stats_period),
        ("fleet_report_interval", settings.fleet_report_interval),
    ] {
        if value.is_zero() {
            return check.fail(key(name), "must be greater than 0");
        }
    }
    function_names(
        &check,
        &key("read_only_functions"),
        &settings.read_only_functions,
    )?;
    function_names(&check, &key("write_functions"), &settings.write_functions)?;
    if let Err(reason) = super::ini::conninfo(&settings.fleet_store) {
        return check.fail(key("fleet_store"), reason);
    }
    tls(&check, settings)?;
    limits(&check, settings)
}

/// The TLS files each mode needs. The protocol and cipher strings were parsed with the file.
fn tls(check: &Checker<'_>, settings: &Settings) -> Check {
    let key = |name: &str| format!("pgtier.{name}");
    let client = settings.client_tls_sslmode;
    if client.is_enabled() {
        for (name, present) in [
            (
                "client_tls_key_file",
                settings.client_tls_key_file.is_some(),
            ),
            (
                "client_tls_cert_file",
                settings.client_tls_cert_file.is_some(),
            ),
        ] {
            if !present {
                return check.fail(
                    key(name),
                    format!(
                        "client_tls_sslmode = \"{client}\" needs client_tls_key_file and \
                         client_tls_cert_file: the key and certificate pgtier presents to clients"
                    ),
                );
            }
        }
    }
    if client.verifies_certificate() && settings.client_tls_ca_file.is_none() {
        return check.fail(
            key("client_tls_ca_file"),
            format!(
                "client_tls_sslmode = \"{client}\" needs client_tls_ca_file: the CA that \
                 client certificates must be signed by"
            ),
        );
    }
    // `server_tls_sslmode = verify-*` without `server_tls_ca_file` verifies against the
    // system's CA bundle (as PgBouncer's TLS library does), so it is not refused here: the
    // TLS files' loader finds the bundle.
    // A server-side key without its certificate (or the reverse) is not refused either:
    // PgBouncer takes TLS settings one `SET` at a time, so the pair is half-set in between;
    // the loader presents no client certificate until both are set, and says so.
    Ok(())
}

/// pgtier's own limits in `[pgtier]`.
fn limits(check: &Checker<'_>, settings: &Settings) -> Check {
    let key = |name: &str| format!("pgtier.{name}");
    let chunks = settings.send_batch_max_chunks.into();
    check.at_least(&key("send_batch_max_chunks"), chunks, 1)?;
    check.at_most(&key("send_batch_max_chunks"), chunks, IOV_MAX.into())?;
    check.at_least(
        &key("send_budget_bytes"),
        settings.send_budget_bytes.into(),
        1,
    )?;
    if settings.client_buffer_limit_bytes < settings.send_budget_bytes {
        return check.fail(
            key("client_buffer_limit_bytes"),
            format!(
                "{} is smaller than send_budget_bytes ({})",
                settings.client_buffer_limit_bytes, settings.send_budget_bytes
            ),
        );
    }
    let ring = settings.ring_entries;
    check.at_least(&key("ring_entries"), ring.into(), 8)?;
    check.at_most(&key("ring_entries"), ring.into(), 32768)?;
    if !ring.is_power_of_two() {
        return check.fail(key("ring_entries"), format!("{ring} is not a power of two"));
    }
    let recv_bytes = settings.recv_buffer_bytes.into();
    check.at_least(&key("recv_buffer_bytes"), recv_bytes, 512)?;
    check.at_most(&key("recv_buffer_bytes"), recv_bytes, 16 << 20)?;
    let server_bytes = settings.server_recv_buffer_bytes.into();
    check.at_least(&key("server_recv_buffer_bytes"), server_bytes, 4096)?;
    check.at_most(&key("server_recv_buffer_bytes"), server_bytes, 16 << 20)?;
    let count = settings.recv_buffer_count;
    check.at_most(
        &key("recv_buffer_count"),
        count.into(),
        MAX_RECV_BUFFER_COUNT.into(),
    )?;
    if !count.is_power_of_two() {
        return check.fail(
            key("recv_buffer_count"),
            format!("{count} is not a power of two"),
        );
    }
    for (name, value) in [
        (
            "max_client_message_bytes",
            settings.max_client_message_bytes,
        ),
        (
            "max_server_message_bytes",
            settings.max_server_message_bytes,
        ),
    ] {
        check.at_least(&key(name), value.into(), MIN_MESSAGE_BYTES.into())?;
    }
    for (name, value) in [
        ("max_pools_per_worker", settings.max_pools_per_worker),
        ("counter_flush_queries", settings.counter_flush_queries),
        ("counter_flush_bytes", settings.counter_flush_bytes),
        ("health_check_failures", settings.health_check_failures),
        ("health_check_successes", settings.health_check_successes),
        ("role_events_capacity", settings.role_events_capacity),
        ("digest_max_text_bytes", settings.digest_max_text_bytes),
        ("digest_map_capacity", settings.digest_map_capacity),
        ("digest_store_capacity", settings.digest_store_capacity),
    ] {
        check.at_least(&key(name), value.into(), 1)?;
    }
    if settings.log_level.trim().is_empty() {
        return check.fail(key("log_level"), "must not be empty (e.g. \"info\")");
    }
    Ok(())
}

/// Turns one `[databases.NAME]` table into a [`DatabaseConfig`].
pub(super) fn database(
    file: &Path,
    name: &str,
    raw: DatabaseRaw,
    settings: &Settings,
) -> Result<DatabaseConfig, ConfigError> {
    let check = Checker { file };
    let base = format!("databases.{name}");
    if name.is_empty() {
        return check.fail(base, "a database entry needs a non-empty name");
    }
    if name == ADMIN_DATABASE || name == ADMIN_DATABASE_ALIAS {
        return check.fail(
            base,
            format!("the name \"{name}\" is reserved for the admin console"),
        );
    }
    // An entry's `auth_dbname` naming the admin console is refused at login (each client
    // of the entry gets "bouncer config error"), as PgBouncer does; only the global one
    // stops the load.
    let servers = servers(&check, &base, &raw, settings)?;
    let pool_size = raw.pool_size.unwrap_or(settings.default_pool_size);
    check.at_least(&format!("{base}.pool_size"), pool_size.into(), 1)?;
    let min_pool_size = raw.min_pool_size.unwrap_or(settings.min_pool_size);
    if min_pool_size > pool_size {
        return check.fail(
            format!("{base}.min_pool_size"),
            format!("{min_pool_size} is larger than the pool size ({pool_size})"),
        );
    }
    let connect_params = connect_params(&raw);
    Ok(DatabaseConfig {
        name: name.to_string(),
        dbname: raw.dbname.unwrap_or_else(|| name.to_string()),
        user: raw.user,
        password: raw.password,
        servers,
        pool_size,
        min_pool_size,
        reserve_pool_size: raw.reserve_pool_size.unwrap_or(settings.reserve_pool_size),
        pool_mode: raw.pool_mode.unwrap_or(settings.pool_mode),
        max_db_connections: raw
            .max_db_connections
            .unwrap_or(settings.max_db_connections),
        // PgBouncer reads 0 in an entry as "not set" for these two.
        max_db_client_connections: raw
            .max_db_client_connections
            .filter(|limit| *limit > 0)
            .unwrap_or(settings.max_db_client_connections),
        server_lifetime: raw
            .server_lifetime
            .filter(|lifetime| !lifetime.is_zero())
            .unwrap_or(settings.server_lifetime),
        query_wait_timeout: raw.query_wait_timeout,
        class: raw.class.unwrap_or(ClassSetting::FREEMIUM),
        auth_user: raw.auth_user.or_else(|| settings.auth_user.clone()),
        auth_query: raw
            .auth_query
            .unwrap_or_else(|| settings.auth_query.clone()),
        auth_dbname: raw.auth_dbname.or_else(|| settings.auth_dbname.clone()),
        connect_query: raw.connect_query.filter(|query| !query.trim().is_empty()),
        connect_params,
    })
}

/// The global `auth_dbname` may not name the admin console, whose sessions run no query on
/// a server (PgBouncer refuses its own admin database's name the same way). Whether an
/// entry of that name exists is found at login, as PgBouncer does, so a reload may add it
/// later.
fn auth_dbname(check: &Checker<'_>, key: &str, name: Option<&str>) -> Check {
    match name {
        Some(name) if name == ADMIN_DATABASE || name == ADMIN_DATABASE_ALIAS => check.fail(
            key,
            format!("cannot use the reserved \"{name}\" database as an auth_dbname"),
        ),
        _ => Ok(()),
    }
}

/// The startup parameters an entry sends to its servers, with PostgreSQL's spelling.
fn connect_params(raw: &DatabaseRaw) -> Vec<(String, String)> {
    [
        ("client_encoding", &raw.client_encoding),
        ("DateStyle", &raw.datestyle),
        ("TimeZone", &raw.timezone),
        ("application_name", &raw.application_name),
    ]
    .into_iter()
    .filter_map(|(name, value)| Some((name.to_string(), value.clone()?)))
    .collect()
}

/// The `*` entry serves databases by name, so it needs one server it can ask for any of them.
pub(super) fn fallback(file: &Path, entry: &DatabaseConfig) -> Check {
    if matches!(entry.servers, ServerSet::Replicas(_)) {
        return Checker { file }.fail(
            "databases.*",
            "the * fallback takes one host: a replica set needs its own named entry",
        );
    }
    Ok(())
}

/// One host, or a replica set with its routing.
fn servers(
    check: &Checker<'_>,
    base: &str,
    raw: &DatabaseRaw,
    settings: &Settings,
) -> Result<ServerSet, ConfigError> {
    let Some(replicas) = &raw.replicas else {
        single_host_only(check, base, raw)?;
        let host = raw.host.clone().unwrap_or_else(|| "127.0.0.1".to_string());
        if host.is_empty() {
            return check.fail(format!("{base}.host"), "must not be empty");
        }
        let port = raw.port.unwrap_or(DEFAULT_SERVER_PORT);
        check.at_least(&format!("{base}.port"), port.into(), 1)?;
        if host.contains(',') {
            let needs_login = raw
                .target_session_attrs
                .is_some_and(|target| target.wants_primary());
            if needs_login && raw.user.is_none() && settings.health_check_user.is_empty() {
                return check.fail(
                    format!("{base}.target_session_attrs"),
                    "needs a login to ask each host whether it is the primary: set \
                     health_check_user (or the entry's user)",
                );
            }
            return host_list(check, base, &host, port, raw);
        }
        for (present, key) in [
            (raw.load_balance_hosts.is_some(), "load_balance_hosts"),
            (raw.target_session_attrs.is_some(), "target_session_attrs"),
        ] {
            if present {
                return check.fail(
                    format!("{base}.{key}"),
                    "needs a host list (host = \"a,b\")",
                );
            }
        }
        return Ok(ServerSet::Single(HostPort { host, port }));
    };
    if raw.target_session_attrs.is_some() {
        return check.fail(
            format!("{base}.target_session_attrs"),
            "applies to a host list: a reader entry (primary and replicas) follows a promotion \
             of its primary by itself",
        );
    }
    if raw.load_balance_hosts.is_some() {
        return check.fail(
            format!("{base}.load_balance_hosts"),
            "applies to a host list, not to replicas (replica sets have routing)",
        );
    }
    for (present, key) in [(raw.host.is_some(), "host"), (raw.port.is_some(), "port")] {
        if present {
            return check.fail(
                format!("{base}.{key}"),
                format!(
                    "{key} cannot be used together with replicas: name the primary with \
                     primary = \"IP:port\" and list the standbys in replicas"
                ),
            );
        }
    }
    let replicas = replica_list(check, &format!("{base}.replicas"), replicas)?;
    let routing = routing(check, base, raw, &replicas)?;
    let primary = match &raw.primary {
        None => None,
        Some(text) => {
            let key = format!("{base}.primary");
            let addr = parse_addr(check, &key, text)?;
            if replicas.contains(&addr) {
                return check.fail(key, format!("{addr} is also listed in replicas"));
            }
            Some(addr)
        }
    };
    let reads = read_settings(check, base, raw, primary.is_some(), settings)?;
    Ok(ServerSet::Replicas(ReplicaSet {
        replicas,
        routing,
        primary,
        reads,
    }))
}

/// The read-routing keys, which only an entry with a primary takes.
fn read_settings(
    check: &Checker<'_>,
    base: &str,
    raw: &DatabaseRaw,
    has_primary: bool,
    settings: &Settings,
) -> Result<ReadSettings, ConfigError> {
    let keys = [
        (raw.read_your_writes.is_some(), "read_your_writes"),
        (
            raw.read_your_writes_timeout.is_some(),
            "read_your_writes_timeout",
        ),
        (
            raw.read_your_writes_scope.is_some(),
            "read_your_writes_scope",
        ),
        (raw.max_replica_lag_bytes.is_some(), "max_replica_lag_bytes"),
        (
            raw.max_replica_lag_seconds.is_some(),
            "max_replica_lag_seconds",
        ),
        (raw.plb_per_transaction.is_some(), "plb_per_transaction"),
        (raw.read_only_functions.is_some(), "read_only_functions"),
        (raw.write_functions.is_some(), "write_functions"),
    ];
    if !has_primary {
        if let Some((_, key)) = keys.iter().find(|(present, _)| *present) {
            return check.fail(
                format!("{base}.{key}"),
                format!("{key} needs a primary: reads are routed per transaction only when the entry also names primary = \"IP:port\""),
            );
        }
    }
    if raw.plb_per_transaction.is_some() && raw.routing != Some(RoutingKind::Plb) {
        return check.fail(
            format!("{base}.plb_per_transaction"),
            "plb_per_transaction needs routing = \"plb\"",
        );
    }
    let functions = FunctionOverrides {
        read_only: function_names(
            check,
            &format!("{base}.read_only_functions"),
            raw.read_only_functions
                .as_ref()
                .unwrap_or(&settings.read_only_functions),
        )?,
        write: function_names(
            check,
            &format!("{base}.write_functions"),
            raw.write_functions
                .as_ref()
                .unwrap_or(&settings.write_functions),
        )?,
    };
    let defaults = ReadSettings::default();
    Ok(ReadSettings {
        read_your_writes: raw.read_your_writes.unwrap_or(defaults.read_your_writes),
        read_your_writes_timeout: raw
            .read_your_writes_timeout
            .map(Seconds::duration)
            .unwrap_or(defaults.read_your_writes_timeout),
        read_your_writes_scope: raw
            .read_your_writes_scope
            .unwrap_or(defaults.read_your_writes_scope),
        max_replica_lag_bytes: raw.max_replica_lag_bytes.unwrap_or(0),
        max_replica_lag: raw
            .max_replica_lag_seconds
            .map(Seconds::duration)
            .unwrap_or_default(),
        plb_per_transaction: raw.plb_per_transaction.unwrap_or(false),
        functions,
    })
}

/// A `read_only_functions` or `write_functions` list.
fn function_names(
    check: &Checker<'_>,
    key: &str,
    names: &[String],
) -> Result<FunctionNames, ConfigError> {
    FunctionNames::parse(names).or_else(|reason| check.fail(key, reason))
}

/// Rejects replica-set keys on an entry without `replicas`.
/// PgBouncer's host list: hosts separated by commas, each a name, an address or a socket
/// directory, repeats allowed, all on `port`.
fn host_list(
    check: &Checker<'_>,
    base: &str,
    host: &str,
    port: u16,
    raw: &DatabaseRaw,
) -> Result<ServerSet, ConfigError> {
    let mut hosts = Vec::new();
    for item in host.split(',').map(str::trim) {
        if item.is_empty() {
            return check.fail(
                format!("{base}.host"),
                "has an empty entry in its host list",
            );
        }
        if item.starts_with('@') {
            return check.fail(
                format!("{base}.host"),
                format!(
                    "{item} is a Unix socket in the abstract namespace, which pgtier does not \
                     support"
                ),
            );
        }
        hosts.push(HostPort {
            host: item.to_string(),
            port,
        });
    }
    Ok(ServerSet::Hosts(HostList {
        hosts,
        balance: raw.load_balance_hosts.unwrap_or_default(),
        target: raw.target_session_attrs.unwrap_or_default(),
    }))
}

fn single_host_only(check: &Checker<'_>, base: &str, raw: &DatabaseRaw) -> Check {
    let replica_keys = [
        (raw.routing.is_some(), "routing"),
        (raw.weights.is_some(), "weights"),
        (raw.plb.is_some(), "plb"),
        (raw.dedicated.is_some(), "dedicated"),
    ];
    for (present, key) in replica_keys {
        if present {
            return check.fail(
                format!("{base}.{key}"),
                format!("{key} needs a replicas list"),
            );
        }
    }
    Ok(())
}

/// Parses the replica addresses: at least one, each `IP:port`, no repeats.
fn replica_list(
    check: &Checker<'_>,
    key: &str,
    texts: &[String],
) -> Result<Vec<SocketAddr>, ConfigError> {
    if texts.is_empty() {
        return check.fail(key, "needs at least one replica");
    }
    let mut replicas = Vec::with_capacity(texts.len());
    for (position, text) in texts.iter().enumerate() {
        let addr = parse_addr(check, &format!("{key}[{position}]"), text)?;
        if replicas.contains(&addr) {
            return check.fail(
                format!("{key}[{position}]"),
                format!("{addr} is listed twice"),
            );
        }
        replicas.push(addr);
    }
    Ok(replicas)
}

fn parse_addr(check: &Checker<'_>, key: &str, text: &str) -> Result<SocketAddr, ConfigError> {
    match text.parse::<SocketAddr>() {
        Ok(addr) if addr.port() != 0 => Ok(addr),
        _ => check.fail(
            key,
            format!("\"{text}\" is not a replica address: expected IP:port such as 127.0.0.1:5432"),
        ),
    }
}

/// The routing policy with its tables, checked against the replica list.
fn routing(
    check: &Checker<'_>,
    base: &str,
    raw: &DatabaseRaw,
    replicas: &[SocketAddr],
) -> Result<Routing, ConfigError> {
    let kind = raw.routing.unwrap_or(RoutingKind::RoundRobin);
    let unused = [
        (raw.plb.is_some() && kind != RoutingKind::Plb, "plb"),
        (
            raw.dedicated.is_some() && kind != RoutingKind::Dedicated,
            "dedicated",
        ),
        (raw.weights.is_some() && kind != RoutingKind::P2c, "weights"),
    ];
    for (present, key) in unused {
        if present {
            return check.fail(
                format!("{base}.{key}"),
                format!("{key} is not used by routing = \"{kind}\""),
            );
        }
    }
    match kind {
        RoutingKind::Plb => match &raw.plb {
            Some(plb) => Ok(Routing::Plb(plb_settings(check, base, plb, replicas)?)),
            None => check.fail(
                format!("{base}.plb"),
                format!("routing = \"plb\" needs a [{base}.plb] table"),
            ),
        },
        RoutingKind::Dedicated => match &raw.dedicated {
            Some(split) => Ok(Routing::Dedicated(dedicated(check, base, split, replicas)?)),
            None => check.fail(
                format!("{base}.dedicated"),
                format!("routing = \"dedicated\" needs a [{base}.dedicated] table"),
            ),
        },
        RoutingKind::P2c => Ok(Routing::P2c {
            weights: weights(check, base, raw.weights.as_deref(), replicas.len())?,
        }),
        RoutingKind::RoundRobin => Ok(Routing::RoundRobin),
        RoutingKind::LeastSessions => Ok(Routing::LeastSessions),
    }
}

/// P2C weights: one positive weight per replica, all 1 when absent.
fn weights(
    check: &Checker<'_>,
    base: &str,
    given: Option<&[u32]>,
    replica_count: usize,
) -> Result<Vec<u32>, ConfigError> {
    let Some(given) = given else {
        return Ok(vec![1; replica_count]);
    };
    let key = format!("{base}.weights");
    if given.len() != replica_count {
        return check.fail(
            key,
            format!(
                "has {} weights for {replica_count} replicas: give one per replica",
                given.len()
            ),
        );
    }
    if let Some(position) = given.iter().position(|weight| *weight == 0) {
        return check.fail(format!("{key}[{position}]"), "weights must be at least 1");
    }
    Ok(given.to_vec())
}

/// Where a list of replica references lives and which list it must not overlap.
struct ListKey<'a> {
    /// The entry's key, `databases.NAME`.
    base: &'a str,
    /// The list's key below the entry, e.g. `plb.premium`.
    list: &'a str,
    /// Indices already taken by the other list, and that list's name.
    taken: &'a [ReplicaIndex],
    other_list: &'a str,
}

/// Resolves a list of replica addresses to indices: each known, none twice, none in `taken`.
fn replica_indices(
    check: &Checker<'_>,
    at: &ListKey<'_>,
    texts: &[String],
    replicas: &[SocketAddr],
) -> Result<Vec<ReplicaIndex>, ConfigError> {
    let mut indices = Vec::with_capacity(texts.len());
    for (position, text) in texts.iter().enumerate() {
        let item_key = format!("{}.{}[{position}]", at.base, at.list);
        let addr = parse_addr(check, &item_key, text)?;
        let Some(index) = replicas.iter().position(|replica| *replica == addr) else {
            return check.fail(
                item_key,
                format!("{addr} is not one of {}.replicas", at.base),
            );
        };
        if indices.contains(&index) {
            return check.fail(item_key, format!("{addr} is listed twice"));
        }
        if at.taken.contains(&index) {
            return check.fail(
                item_key,
                format!(
                    "{addr} is also in {}: a replica starts in at most one pool",
                    at.other_list
                ),
            );
        }
        indices.push(index);
    }
    Ok(indices)
}

/// Resolves a `premium` and a `freemium` list under `table` (`plb` or `dedicated`).
fn class_lists(
    check: &Checker<'_>,
    base: &str,
    table: &str,
    lists: (&[String], &[String]),
    replicas: &[SocketAddr],
) -> Result<(Vec<ReplicaIndex>, Vec<ReplicaIndex>), ConfigError> {
    let premium_key = format!("{table}.premium");
    let at = ListKey {
        base,
        list: &premium_key,
        taken: &[],
        other_list: "",
    };
    let premium = replica_indices(check, &at, lists.0, replicas)?;
    let other_list = format!("{base}.{premium_key}");
    let freemium_key = format!("{table}.freemium");
    let at = ListKey {
        base,
        list: &freemium_key,
        taken: &premium,
        other_list: &other_list,
    };
    let freemium = replica_indices(check, &at, lists.1, replicas)?;
    Ok((premium, freemium))
}

/// `[databases.NAME.plb]` with the policy's defaults ([`PlbParams::defaults`]) for absent
/// parameters. The checks here name the key at fault; the policy's own validation runs last,
/// so a file that loads builds its router.
fn plb_settings(
    check: &Checker<'_>,
    base: &str,
    raw: &PlbRaw,
    replicas: &[SocketAddr],
) -> Result<PlbSettings, ConfigError> {
    let tiers = tier_pools(check, base, raw, replicas)?;
    if tiers.is_none() {
        for (name, list) in [("premium", &raw.premium), ("freemium", &raw.freemium)] {
            if list.is_none() {
                return check.fail(
                    format!("{base}.plb"),
                    format!("missing field `{name}` (or list every rank's pool in tiers)"),
                );
            }
        }
    }
    let lists = (
        raw.premium.as_deref().unwrap_or_default(),
        raw.freemium.as_deref().unwrap_or_default(),
    );
    let (premium, freemium) = class_lists(check, base, "plb", lists, replicas)?;
    let params = match &tiers {
        Some(pools) => tier_params(check, base, raw, pools, replicas.len())?,
        None => class_params(check, base, raw, (&premium, &freemium), replicas.len())?,
    };
    let pools: Vec<&[ReplicaIndex]> = match &tiers {
        Some(pools) => pools.iter().map(Vec::as_slice).collect(),
        None => vec![&premium, &freemium],
    };
    policy_accepts(check, base, &params, &pools, replicas.len())?;
    Ok(PlbSettings {
        tiers: tiers.map(|pools| Box::new(TierSettings { pools })),
        params,
        load_signal: raw.load_signal.unwrap_or_default(),
        recovery_drain: raw.recovery_drain.unwrap_or(false),
        premium,
        freemium,
    })
}

/// The two-class parameters: ranks 0 (premium) and 1 (freemium).
fn class_params(
    check: &Checker<'_>,
    base: &str,
    raw: &PlbRaw,
    (premium, freemium): (&[ReplicaIndex], &[ReplicaIndex]),
    replica_count: usize,
) -> Result<PlbParams, ConfigError> {
    let key = |name: &str| format!("{base}.plb.{name}");
    let (p, f) = (ServiceClass::Premium, ServiceClass::Freemium);
    let mut params = PlbParams::defaults(&[premium.len(), freemium.len()]);
    if let Some(theta) = raw.theta_premium {
        params = params.with_theta(p, theta);
    }
    if let Some(theta) = raw.theta_freemium {
        params = params.with_theta(f, theta);
    }
    if let Some(alpha) = raw.alpha_premium {
        params = params.with_alpha(p, alpha);
    }
    if let Some(alpha) = raw.alpha_freemium {
        params = params.with_alpha(f, alpha);
    }
    if let Some(floor) = raw.freemium_floor {
        check_floor(check, &key("freemium_floor"), floor, freemium.len())?;
        params = params.with_floor(f, floor);
    }
    if let Some(target) = raw.premium_target {
        params = params.with_target(p, target);
    }
    if let Some(target) = raw.freemium_target {
        params = params.with_target(f, target);
    }
    plb_numbers(check, base, &params, replica_count)?;
    Ok(params)
}

/// Most ranks `tiers` may list (the policy's table holds four).
const MAX_TIER_RANKS: usize = MAX_TIERS;

/// `tiers = [[...], ...]`: the ranked pools; `None` when absent (two classes).
fn tier_pools(
    check: &Checker<'_>,
    base: &str,
    raw: &PlbRaw,
    replicas: &[SocketAddr],
) -> Result<Option<Vec<Vec<ReplicaIndex>>>, ConfigError> {
    let key = |name: &str| format!("{base}.plb.{name}");
    if raw.tiers.is_empty() {
        for (name, set) in [
            ("tier_theta", raw.tier_theta.is_some()),
            ("tier_alpha", raw.tier_alpha.is_some()),
            ("tier_floor", raw.tier_floor.is_some()),
            ("tier_target", raw.tier_target.is_some()),
            ("reclaim", raw.reclaim.is_some()),
        ] {
            if set {
                return check.fail(key(name), format!("{name} needs tiers = [[...], ...]"));
            }
        }
        return Ok(None);
    }
    let ranks = raw.tiers.len();
    if !(3..=MAX_TIER_RANKS).contains(&ranks) {
        return check.fail(
            key("tiers"),
            format!("{ranks} ranks; tiers takes 3 or 4 (two classes are premium and freemium)"),
        );
    }
    if raw.premium.is_some() || raw.freemium.is_some() {
        return check.fail(
            key("tiers"),
            "tiers replaces premium and freemium: list rank 0 and rank 1 as its first two pools",
        );
    }
    for (name, unsupported) in [
        (
            "load_signal",
            raw.load_signal
                .is_some_and(|s| s != PlbLoadSignal::Sessions),
        ),
        ("recovery_drain", raw.recovery_drain == Some(true)),
    ] {
        if unsupported {
            return check.fail(key(name), format!("{name} is not supported with tiers"));
        }
    }
    let mut pools: Vec<Vec<ReplicaIndex>> = Vec::with_capacity(ranks);
    for (rank, texts) in raw.tiers.iter().enumerate() {
        let list = format!("plb.tiers[{rank}]");
        let taken: Vec<ReplicaIndex> = pools.iter().flatten().copied().collect();
        let at = ListKey {
            base,
            list: &list,
            taken: &taken,
            other_list: "another rank's pool",
        };
        pools.push(replica_indices(check, &at, texts, replicas)?);
    }
    Ok(Some(pools))
}

/// The parameters of ranked pools: `tier_*` lists (one entry per rank), else the two-class
/// keys carried on (rank 0 takes the premium value, every other rank the freemium one), else
/// the policy's defaults.
fn tier_params(
    check: &Checker<'_>,
    base: &str,
    raw: &PlbRaw,
    pools: &[Vec<ReplicaIndex>],
    replica_count: usize,
) -> Result<PlbParams, ConfigError> {
    let key = |name: &str| format!("{base}.plb.{name}");
    let ranks = pools.len();
    let per_rank = |name: &str, len: Option<usize>| -> Check {
        match len {
            Some(len) if len != ranks => check.fail(
                key(name),
                format!("{len} entries; tiers has {ranks} ranks, one entry each"),
            ),
            _ => Ok(()),
        }
    };
    per_rank("tier_theta", raw.tier_theta.as_ref().map(Vec::len))?;
    per_rank("tier_alpha", raw.tier_alpha.as_ref().map(Vec::len))?;
    per_rank("tier_floor", raw.tier_floor.as_ref().map(Vec::len))?;
    per_rank("tier_target", raw.tier_target.as_ref().map(Vec::len))?;
    let sizes: Vec<usize> = pools.iter().map(Vec::len).collect();
    let mut params = PlbParams::defaults(&sizes);
    for rank in (0..ranks).map(|rank| Tier(rank as u8)) {
        let (theta, alpha) = if rank == Tier::TOP {
            (raw.theta_premium, raw.alpha_premium)
        } else {
            (raw.theta_freemium, raw.alpha_freemium)
        };
        if let Some(theta) = theta {
            params = params.with_theta(rank, theta);
        }
        if let Some(alpha) = alpha {
            params = params.with_alpha(rank, alpha);
        }
    }
    let fill = |values: &mut [u32; MAX_TIERS], list: &Option<Vec<u32>>| {
        for (slot, &value) in values.iter_mut().zip(list.iter().flatten()) {
            *slot = value;
        }
    };
    fill(&mut params.theta, &raw.tier_theta);
    fill(&mut params.floor, &raw.tier_floor);
    fill(&mut params.target, &raw.tier_target);
    for (slot, &value) in params.alpha.iter_mut().zip(raw.tier_alpha.iter().flatten()) {
        *slot = value;
    }
    if let Some(reclaim) = raw.reclaim {
        params.reclaim = reclaim;
    }
    for rank in 0..ranks {
        let (theta, alpha) = (params.theta[rank], params.alpha[rank]);
        check.at_least(&format!("{}[{rank}]", key("tier_theta")), theta.into(), 1)?;
        if !(alpha > 0.0 && alpha <= 1.0) {
            return check.fail(
                format!("{}[{rank}]", key("tier_alpha")),
                format!("{alpha} is outside (0, 1]"),
            );
        }
    }
    for (rank, pool) in pools.iter().enumerate().skip(1) {
        check_floor(
            check,
            &format!("{}[{rank}]", key("tier_floor")),
            params.floor[rank],
            pool.len(),
        )?;
    }
    let targets: u32 = params.target.iter().take(ranks).sum();
    if targets as usize > replica_count {
        return check.fail(
            key("tier_target"),
            format!("the targets add up to {targets}, more than the number of replicas ({replica_count})"),
        );
    }
    Ok(params)
}

/// The policy's own validation of `params` on the configured pools (what the router will
/// check when it is built), for what the checks above do not name a key for (e.g. a return
/// watermark `⌊α·θ⌋` of 0).
fn policy_accepts(
    check: &Checker<'_>,
    base: &str,
    params: &PlbParams,
    pools: &[&[ReplicaIndex]],
    replica_count: usize,
) -> Check {
    let ids = |pool: &[ReplicaIndex]| -> Option<Vec<ReplicaId>> {
        pool.iter().map(|&i| ReplicaId::from_index(i)).collect()
    };
    let Some(pools) = pools
        .iter()
        .map(|pool| ids(pool))
        .collect::<Option<Vec<_>>>()
    else {
        // Beyond the policy's replica budget: the router reports it when it is built.
        return Ok(());
    };
    let pools: Vec<&[ReplicaId]> = pools.iter().map(Vec::as_slice).collect();
    // Two classes are refused in the paper's parameter names, ranks by rank.
    let refused = match pools.as_slice() {
        [premium, freemium] => match RoleTable::new(replica_count, premium, freemium) {
            Ok(table) => params.validate(&table).map_err(|e| e.to_string()),
            Err(_) => return Ok(()),
        },
        _ => match TierTable::new(replica_count, params.tiers, &pools) {
            Ok(table) => params.validate_tiers(&table).map_err(|e| e.to_string()),
            Err(_) => return Ok(()),
        },
    };
    match refused {
        Ok(()) => Ok(()),
        Err(reason) => check.fail(format!("{base}.plb"), reason),
    }
}

fn check_floor(check: &Checker<'_>, key: &str, floor: u32, freemium_count: usize) -> Check {
    if floor as usize > freemium_count {
        return check.fail(
            key,
            format!("{floor} is larger than the freemium pool ({freemium_count} replicas)"),
        );
    }
    Ok(())
}

/// Thresholds, fractions and targets of a two-class PLB table.
fn plb_numbers(check: &Checker<'_>, base: &str, params: &PlbParams, replica_count: usize) -> Check {
    let key = |name: &str| format!("{base}.plb.{name}");
    let (p, f) = (ServiceClass::Premium, ServiceClass::Freemium);
    check.at_least(&key("theta_premium"), params.theta(p).into(), 1)?;
    check.at_least(&key("theta_freemium"), params.theta(f).into(), 1)?;
    for (name, alpha) in [
        ("alpha_premium", params.alpha(p)),
        ("alpha_freemium", params.alpha(f)),
    ] {
        if !(alpha > 0.0 && alpha <= 1.0) {
            return check.fail(key(name), format!("{alpha} is outside (0, 1]"));
        }
    }
    let (premium_target, freemium_target) = (params.target(p), params.target(f));
    for (name, target) in [
        ("premium_target", premium_target),
        ("freemium_target", freemium_target),
    ] {
        if target as usize > replica_count {
            return check.fail(
                key(name),
                format!("{target} is larger than the number of replicas ({replica_count})"),
            );
        }
    }
    if (premium_target + freemium_target) as usize > replica_count {
        return check.fail(
            key("freemium_target"),
            format!(
                "premium_target + freemium_target = {} is larger than the number of replicas ({replica_count})",
                premium_target + freemium_target
            ),
        );
    }
    let floor = params.floor(f);
    if freemium_target < floor {
        return check.fail(
            key("freemium_target"),
            format!("{freemium_target} is smaller than freemium_floor ({floor})"),
        );
    }
    Ok(())
}

/// `[databases.NAME.dedicated]`: a partition of the replicas into two non-empty subsets.
fn dedicated(
    check: &Checker<'_>,
    base: &str,
    raw: &DedicatedRaw,
    replicas: &[SocketAddr],
) -> Result<DedicatedSplit, ConfigError> {
    let key = |name: &str| format!("{base}.dedicated.{name}");
    let lists = (raw.premium.as_slice(), raw.freemium.as_slice());
    let (premium, freemium) = class_lists(check, base, "dedicated", lists, replicas)?;
    for (name, list) in [("premium", &premium), ("freemium", &freemium)] {
        if list.is_empty() {
            return check.fail(key(name), "needs at least one replica");
        }
    }
    if let Some(stranded) =
        (0..replicas.len()).find(|i| !premium.contains(i) && !freemium.contains(i))
    {
        return check.fail(
            format!("{base}.dedicated"),
            format!(
                "replica {} is in neither premium nor freemium",
                replicas[stranded]
            ),
        );
    }
    Ok(DedicatedSplit { premium, freemium })
}
