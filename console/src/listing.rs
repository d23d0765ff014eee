//! The PgBouncer SHOW commands built from the rows every shard's engine reported
//! (`pgtier_engine::listing`) and the configuration: CLIENTS, SERVERS, SOCKETS,
//! ACTIVE_SOCKETS, POOLS (one row per (database, user) across shards), DATABASES, USERS,
//! LISTS. Columns and their order are PgBouncer 1.25's; pgtier's own columns follow them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use pgtier_core::config::{ADMIN_DATABASE, Config, RoutingKind, ServerSet};

use crate::format::{ConnKind, ConnPtr, format_ptr, pgbouncer_time};
use crate::result::ResultSet;
use crate::result::{Column, int4, text};
use pgtier_engine::gates::Gates;
pub use pgtier_engine::listing::{ClientRow, Listing, PoolRow, ServerRow, ShardListing};

type Row = Vec<Option<String>>;

fn some(value: impl ToString) -> Option<String> {
    Some(value.to_string())
}

fn flag(value: bool) -> Option<String> {
    some(u8::from(value))
}

/// Columns shared by SHOW CLIENTS, SERVERS and SOCKETS (PgBouncer 1.25, in order).
const CONN_COLUMNS: [Column; 21] = [
    text("type"),
    text("user"),
    text("database"),
    text("replication"),
    text("state"),
    text("addr"),
    int4("port"),
    text("local_addr"),
    int4("local_port"),
    text("connect_time"),
    text("request_time"),
    int4("wait"),
    int4("wait_us"),
    int4("close_needed"),
    text("ptr"),
    text("link"),
    int4("remote_pid"),
    text("tls"),
    text("application_name"),
    int4("prepared_statements"),
    int4("id"),
];

/// The buffer columns SHOW SOCKETS adds (pgtier's buffers are not PgBouncer's: NULL).
const SOCKET_COLUMNS: [Column; 7] = [
    int4("recv_pos"),
    int4("pkt_pos"),
    int4("pkt_remain"),
    int4("send_pos"),
    int4("send_remain"),
    int4("pkt_avail"),
    int4("send_avail"),
];

/// pgtier's own columns after a client's PgBouncer columns.
const CLIENT_EXTRA: [Column; 6] = [
    int4("shard"),
    text("pgtier_state"),
    text("class"),
    text("replica"),
    int4("backend_pid"),
    text("pinned"),
];

/// pgtier's own columns after a server's PgBouncer columns.
const SERVER_EXTRA: [Column; 2] = [int4("shard"), text("pgtier_state")];

fn addr_columns(addr: Option<SocketAddr>) -> [Option<String>; 2] {
    match addr {
        Some(addr) => [some(addr.ip()), some(addr.port())],
        None => [some("unix"), some(0)],
    }
}

fn wait_columns(wait: Option<Duration>) -> [Option<String>; 2] {
    let wait = wait.unwrap_or_default();
    [some(wait.as_secs()), some(wait.subsec_micros())]
}

fn ptr(shard: usize, kind: ConnKind, slot: pgtier_engine::SlotRef) -> String {
    format_ptr(ConnPtr::new(shard, kind, slot.index, slot.generation))
}

/// PgBouncer's state word for a client in `SHOW CLIENTS`: `idle` when it has no server and
/// nothing waiting, `active` when linked to a server.
fn client_state(row: &ClientRow) -> &'static str {
    match row.state {
        "waiting" | "waiting_for_replica" => "waiting",
        "login" => "login",
        "idle" => "idle",
        _ => "active",
    }
}

/// PgBouncer's state word for a client in `SHOW SOCKETS` (its list's name).
fn client_socket_state(row: &ClientRow) -> &'static str {
    match row.state {
        "waiting" | "waiting_for_replica" => "cl_waiting",
        "login" => "cl_login",
        _ => "cl_active",
    }
}

/// PgBouncer's state word for a server.
fn server_state(row: &ServerRow) -> &'static str {
    match row.state {
        _ if row.being_canceled => "being_canceled",
        "login" => "new",
        "closing" => "used",
        state => state,
    }
}

/// PgBouncer's state word for a server in `SHOW SOCKETS` (its list's name).
fn server_socket_state(row: &ServerRow) -> &'static str {
    match row.state {
        "login" => "sv_login",
        "idle" => "sv_idle",
        "tested" => "sv_tested",
        "active" => "sv_active",
        _ => "sv_used",
    }
}

fn client_conn_row(shard: usize, row: &ClientRow, state: &str) -> Row {
    let [addr, port] = match &row.addr {
        Some(addr) => [some(addr.host_text()), some(addr.port())],
        None => [some("unix"), some(0)],
    };
    let [local_addr, local_port] = addr_columns(row.local_addr);
    let [wait, wait_us] = wait_columns(row.waiting_for);
    vec![
        some("C"),
        some(&row.user),
        some(&row.database),
        some(row.replication),
        some(state),
        addr,
        port,
        local_addr,
        local_port,
        some(pgbouncer_time(row.connected_at)),
        some(pgbouncer_time(row.request_at)),
        wait,
        wait_us,
        flag(false),
        some(ptr(shard, ConnKind::Client, row.id.0)),
        some(
            row.server
                .map(|server| ptr(shard, ConnKind::Server, server.0))
                .unwrap_or_default(),
        ),
        some(0),
        some(row.tls.clone().unwrap_or_default()),
        some(row.application_name.clone().unwrap_or_default()),
        some(row.prepared_statements),
        some(row.socket_id.0),
    ]
}

fn client_extra(shard: usize, row: &ClientRow) -> Row {
    vec![
        some(shard),
        some(row.state),
        row.class.map(str::to_string),
        row.replica.map(|addr| addr.to_string()),
        row.backend_pid.map(|pid| pid.to_string()),
        (!row.pinned.is_empty()).then(|| row.pinned.clone()),
    ]
}

fn server_conn_row(shard: usize, row: &ServerRow, state: &str) -> Row {
    let [local_addr, local_port] = addr_columns(row.local_addr);
    vec![
        some("S"),
        some(&row.user),
        some(&row.database),
        some(row.replication),
        some(state),
        some(row.addr.host_text()),
        some(row.addr.port()),
        local_addr,
        local_port,
        some(pgbouncer_time(row.connected_at)),
        some(pgbouncer_time(row.request_at)),
        some(0),
        some(0),
        flag(row.close_needed),
        some(ptr(shard, ConnKind::Server, row.id.0)),
        some(
            row.client
                .map(|client| ptr(shard, ConnKind::Client, client.0))
                .unwrap_or_default(),
        ),
        some(row.backend_pid.unwrap_or(0)),
        some(row.tls.clone().unwrap_or_default()),
        some(row.application_name.clone().unwrap_or_default()),
        some(row.prepared_statements),
        some(row.socket_id.0),
    ]
}

fn server_extra(shard: usize, row: &ServerRow) -> Row {
    vec![some(shard), some(row.state)]
}

fn parts(listing: Option<&Listing>) -> impl Iterator<Item = &ShardListing> {
    listing.into_iter().flat_map(|listing| &listing.parts)
}

fn clients_of(listing: Option<&Listing>) -> impl Iterator<Item = (usize, &ClientRow)> {
    parts(listing).flat_map(|part| part.clients.iter().map(move |row| (part.shard, row)))
}

fn servers_of(listing: Option<&Listing>) -> impl Iterator<Item = (usize, &ServerRow)> {
    parts(listing).flat_map(|part| part.servers.iter().map(move |row| (part.shard, row)))
}

fn columns(groups: &[&[Column]]) -> Vec<Column> {
    groups
        .iter()
        .flat_map(|group| group.iter().copied())
        .collect()
}

/// `SHOW CLIENTS`.
pub fn clients(listing: Option<&Listing>) -> ResultSet {
    let rows = clients_of(listing)
        .map(|(shard, row)| {
            let mut values = client_conn_row(shard, row, client_state(row));
            values.extend(client_extra(shard, row));
            values
        })
        .collect();
    ResultSet {
        columns: columns(&[&CONN_COLUMNS, &CLIENT_EXTRA]),
        rows,
    }
}

/// `SHOW SERVERS`.
pub fn servers(listing: Option<&Listing>) -> ResultSet {
    let rows = servers_of(listing)
        .map(|(shard, row)| {
            let mut values = server_conn_row(shard, row, server_state(row));
            values.extend(server_extra(shard, row));
            values
        })
        .collect();
    ResultSet {
        columns: columns(&[&CONN_COLUMNS, &SERVER_EXTRA]),
        rows,
    }
}

/// `SHOW SOCKETS` (`active_only`: `SHOW ACTIVE_SOCKETS`, the sockets linked or working),
/// with PgBouncer's list names as states (`cl_active`, `sv_idle`...).
pub fn sockets(listing: Option<&Listing>, active_only: bool) -> ResultSet {
    let buffers = || vec![None; SOCKET_COLUMNS.len()];
    let mut rows: Vec<Row> = clients_of(listing)
        .filter(|(_, row)| !active_only || matches!(row.state, "active" | "waiting"))
        .map(|(shard, row)| {
            let mut values = client_conn_row(shard, row, client_socket_state(row));
            values.extend(buffers());
            values.push(some(shard));
            values
        })
        .collect();
    rows.extend(
        servers_of(listing)
            .filter(|(_, row)| !active_only || row.state == "active")
            .map(|(shard, row)| {
                let mut values = server_conn_row(shard, row, server_socket_state(row));
                values.extend(buffers());
                values.push(some(shard));
                values
            }),
    );
    ResultSet {
        columns: columns(&[&CONN_COLUMNS, &SOCKET_COLUMNS, &[int4("shard")]]),
        rows,
    }
}

/// PgBouncer 1.25's `SHOW POOLS` columns, then pgtier's.
const POOL_COLUMNS: [Column; 18] = [
    text("database"),
    text("user"),
    int4("cl_active"),
    int4("cl_waiting"),
    int4("cl_active_cancel_req"),
    int4("cl_waiting_cancel_req"),
    int4("sv_active"),
    int4("sv_active_cancel"),
    int4("sv_being_canceled"),
    int4("sv_idle"),
    int4("sv_used"),
    int4("sv_tested"),
    int4("sv_login"),
    int4("maxwait"),
    int4("maxwait_us"),
    text("pool_mode"),
    text("load_balance_hosts"),
    int4("pgtier_slices"),
];

/// One (database, user) pool summed over its slices on every shard.
#[derive(Default)]
struct PoolSum {
    mode: &'static str,
    clients_active: u32,
    clients_waiting: u32,
    servers_active: u32,
    servers_being_canceled: u32,
    servers_idle: u32,
    servers_used: u32,
    servers_tested: u32,
    servers_login: u32,
    max_wait: Duration,
    slices: u32,
}

impl PoolSum {
    fn add(&mut self, row: &PoolRow) {
        self.mode = row.mode;
        self.clients_active += row.clients_active;
        self.clients_waiting += row.clients_waiting;
        self.servers_active += row.servers_active;
        self.servers_being_canceled += row.servers_being_canceled;
        self.servers_idle += row.servers_idle;
        self.servers_used += row.servers_used;
        self.servers_tested += row.servers_tested;
        self.servers_login += row.servers_login;
        self.max_wait = self.max_wait.max(row.max_wait.unwrap_or_default());
        self.slices += 1;
    }

    fn servers(&self) -> u32 {
        self.servers_active
            + self.servers_idle
            + self.servers_used
            + self.servers_tested
            + self.servers_login
    }
}

fn pool_sums(listing: Option<&Listing>) -> BTreeMap<(String, String), PoolSum> {
    let mut sums: BTreeMap<(String, String), PoolSum> = BTreeMap::new();
    for row in parts(listing).flat_map(|part| &part.pools) {
        sums.entry((row.database.clone(), row.user.clone()))
            .or_default()
            .add(row);
    }
    sums
}

/// PgBouncer lists its console as a pool of database and user `pgbouncer`.
const CONSOLE_NAME: &str = "pgbouncer";

/// `SHOW POOLS`: one row per (database, user) across every shard and pool key, then the
/// console's own row, as PgBouncer has.
pub fn pools(config: Option<&Config>, listing: Option<&Listing>) -> ResultSet {
    let mut rows: Vec<Row> = pool_sums(listing)
        .into_iter()
        .map(|((database, user), sum)| {
            let load_balance_hosts = config
                .and_then(|config| config.databases.get(&database))
                .and_then(|db| match &db.servers {
                    ServerSet::Hosts(list) => Some(list.balance.as_str().to_string()),
                    _ => None,
                });
            vec![
                some(database),
                some(user),
                some(sum.clients_active),
                some(sum.clients_waiting),
                some(0),
                some(0),
                some(sum.servers_active),
                some(0),
                some(sum.servers_being_canceled),
                some(sum.servers_idle),
                some(sum.servers_used),
                some(sum.servers_tested),
                some(sum.servers_login),
                some(sum.max_wait.as_secs()),
                some(sum.max_wait.subsec_micros()),
                some(sum.mode),
                load_balance_hosts,
                some(sum.slices),
            ]
        })
        .collect();
    let console_clients = clients_of(listing)
        .filter(|(_, row)| row.database == ADMIN_DATABASE)
        .count();
    let mut console = vec![
        some(CONSOLE_NAME),
        some(CONSOLE_NAME),
        some(console_clients),
    ];
    console.extend(std::iter::repeat_n(some(0), 12));
    console.push(some("statement"));
    console.push(None);
    console.push(some(0));
    rows.push(console);
    ResultSet {
        columns: POOL_COLUMNS.to_vec(),
        rows,
    }
}

/// PgBouncer 1.25's `SHOW DATABASES` columns, then pgtier's, then 1.18's `reserve_pool`
/// (1.25 calls it `reserve_pool_size`), which exporters written for older PgBouncers read.
const DATABASE_COLUMNS: [Column; 20] = [
    text("name"),
    text("host"),
    int4("port"),
    text("database"),
    text("force_user"),
    int4("pool_size"),
    int4("min_pool_size"),
    int4("reserve_pool_size"),
    int4("server_lifetime"),
    text("pool_mode"),
    text("load_balance_hosts"),
    int4("max_connections"),
    int4("current_connections"),
    int4("max_client_connections"),
    int4("current_client_connections"),
    int4("paused"),
    int4("disabled"),
    text("class"),
    text("routing"),
    int4("reserve_pool"),
];

/// What a `SHOW DATABASES` row counts: its servers and its clients, across the shards.
#[derive(Clone, Copy, Default)]
struct Connections {
    servers: u32,
    clients: u32,
}

fn database_row(
    name: &str,
    db: &pgtier_core::config::DatabaseConfig,
    connections: Connections,
    gates: Option<&Gates>,
) -> Row {
    let paused = gates.is_some_and(|gates| gates.is_paused_by_name(name));
    let disabled = gates.is_some_and(|gates| gates.is_disabled(name));
    let mut load_balance_hosts = None;
    let (host, port, routing) = match &db.servers {
        ServerSet::Single(server) => (server.host.clone(), server.port, "single"),
        ServerSet::Hosts(list) => {
            load_balance_hosts = Some(list.balance.as_str());
            (list.joined(), list.port(), "hosts")
        }
        ServerSet::Replicas(set) => {
            let hosts: Vec<String> = set.replicas.iter().map(|a| a.ip().to_string()).collect();
            let port = set.replicas.first().map_or(0, SocketAddr::port);
            let routing = match set.routing.kind() {
                RoutingKind::Plb => "plb",
                kind => kind.as_str(),
            };
            (hosts.join(","), port, routing)
        }
    };
    vec![
        some(name),
        some(host),
        some(port),
        some(&db.dbname),
        db.user.clone(),
        some(db.pool_size),
        some(db.min_pool_size),
        some(db.reserve_pool_size),
        some(db.server_lifetime.as_secs_f64() as u64),
        some(db.pool_mode),
        load_balance_hosts.map(str::to_string),
        some(db.max_db_connections),
        some(connections.servers),
        some(db.max_db_client_connections),
        some(connections.clients),
        some(u8::from(paused)),
        some(u8::from(disabled)),
        some(db.class),
        some(routing),
        some(db.reserve_pool_size),
    ]
}

/// `SHOW DATABASES`: every entry, the `*` fallback, and the console's own entry.
pub fn databases(
    config: Option<&Config>,
    listing: Option<&Listing>,
    gates: Option<&Gates>,
) -> ResultSet {
    let mut current: BTreeMap<String, Connections> = BTreeMap::new();
    for ((database, _), sum) in pool_sums(listing) {
        current.entry(database).or_default().servers += sum.servers();
    }
    for (_, client) in clients_of(listing) {
        current.entry(client.database.clone()).or_default().clients += 1;
    }
    let mut rows: Vec<Row> = Vec::new();
    if let Some(config) = config {
        for (name, db) in &config.databases {
            rows.push(database_row(
                name,
                db,
                current.get(name).copied().unwrap_or_default(),
                gates,
            ));
        }
        if let Some(fallback) = &config.fallback {
            // Databases served through the fallback count under their own names; the `*`
            // row shows the template.
            rows.push(database_row("*", fallback, Connections::default(), gates));
        }
        let console_clients = current.get(CONSOLE_NAME).map_or(0, |c| c.clients);
        rows.push(vec![
            some(CONSOLE_NAME),
            None,
            some(config.pgtier.listen_port),
            some(CONSOLE_NAME),
            some(CONSOLE_NAME),
            some(2),
            some(0),
            some(0),
            some(0),
            some("statement"),
            None,
            some(0),
            some(0),
            // The global limit holds for the console too (its admin users excepted).
            some(config.pgtier.max_db_client_connections),
            some(console_clients),
            some(0),
            some(0),
            None,
            some("console"),
            some(0),
        ]);
    }
    ResultSet {
        columns: DATABASE_COLUMNS.to_vec(),
        rows,
    }
}

/// Users pgtier knows: the `[users]` entries, and everyone with a pool or a connection.
fn known_users(config: Option<&Config>, listing: Option<&Listing>) -> BTreeSet<String> {
    let mut users: BTreeSet<String> = config
        .map(|config| config.users.keys().cloned().collect())
        .unwrap_or_default();
    users.extend(parts(listing).flat_map(|part| part.pools.iter().map(|p| p.user.clone())));
    users.extend(
        clients_of(listing)
            .map(|(_, row)| row.user.clone())
            .filter(|user| !user.is_empty()),
    );
    users
}

/// `SHOW USERS`: PgBouncer 1.25's columns (the user's own pool sizes as text, empty when it
/// has none; its limits in force; its servers and clients across the shards), then its class.
pub fn users(config: Option<&Config>, listing: Option<&Listing>) -> ResultSet {
    let mut servers: BTreeMap<String, u32> = BTreeMap::new();
    for ((_, user), sum) in pool_sums(listing) {
        *servers.entry(user).or_default() += sum.servers();
    }
    let mut clients: BTreeMap<&str, u32> = BTreeMap::new();
    for (_, client) in clients_of(listing) {
        *clients.entry(client.user.as_str()).or_default() += 1;
    }
    let rows = known_users(config, listing)
        .into_iter()
        .map(|name| {
            let entry = config.and_then(|config| config.users.get(&name));
            // PgBouncer prints its own sizes with `%9d`.
            let size = |value: Option<u32>| value.map_or(String::new(), |n| format!("{n:9}"));
            vec![
                some(&name),
                some(size(entry.and_then(|user| user.pool_size))),
                some(size(entry.and_then(|user| user.reserve_pool_size))),
                entry
                    .and_then(|user| user.pool_mode)
                    .map(|mode| mode.to_string()),
                some(config.map_or(0, |config| config.max_user_connections(&name))),
                some(servers.get(&name).copied().unwrap_or(0)),
                some(config.map_or(0, |config| config.max_user_client_connections(&name))),
                some(clients.get(name.as_str()).copied().unwrap_or(0)),
                entry
                    .and_then(|user| user.class)
                    .map(|class| class.to_string()),
            ]
        })
        .collect();
    ResultSet {
        columns: vec![
            text("name"),
            text("pool_size"),
            text("reserve_pool_size"),
            text("pool_mode"),
            int4("max_user_connections"),
            int4("current_connections"),
            int4("max_user_client_connections"),
            int4("current_client_connections"),
            text("class"),
        ],
        rows,
    }
}

/// `SHOW LISTS`: PgBouncer's twelve counters, as rows.
pub fn lists(config: Option<&Config>, listing: Option<&Listing>) -> ResultSet {
    let databases = config.map_or(0, |config| config.databases.len() + 1);
    let users = known_users(config, listing).len();
    let pools = pool_sums(listing).len() + 1;
    let used_clients = clients_of(listing).count();
    let login_clients = clients_of(listing)
        .filter(|(_, row)| row.state == "login")
        .count();
    let max_clients = config.map_or(0, |config| config.pgtier.max_client_conn as usize);
    let used_servers = servers_of(listing).count();
    let counts: [(&str, usize); 12] = [
        ("databases", databases),
        ("users", users),
        ("pools", pools),
        ("free_clients", max_clients.saturating_sub(used_clients)),
        ("used_clients", used_clients),
        ("login_clients", login_clients),
        ("free_servers", 0),
        ("used_servers", used_servers),
        ("dns_names", 0),
        ("dns_zones", 0),
        ("dns_queries", 0),
        ("dns_pending", 0),
    ];
    ResultSet {
        columns: vec![text("list"), int4("items")],
        rows: counts
            .iter()
            .map(|(name, count)| vec![some(name), some(count)])
            .collect(),
    }
}
