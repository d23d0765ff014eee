//! Admin console tests: every answer is decoded back from its bytes with the wire codec.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use pgtier_core::metrics::{IntervalSummary, TotalsSnapshot};
use pgtier_policy::{ReplicaId, ServiceClass};
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::split_message;
use pgtier_wire::messages::BackendMessage;

use pgtier_core::config::Config;
use pgtier_engine::{ClientId, ConsoleRights, ServerId, SlotRef, SocketId};

use super::format::{ConnKind, ConnPtr, format_ptr};
use super::listing::{ClientRow, Listing, PoolRow, ServerRow, ShardListing};
use super::{AdminView, IntervalStats, PoolerState, StatsView, VERSION, answer, answer_statement};
use pgtier_replicas::health::HealthConfig;
use pgtier_replicas::mailbox::ServerFailureCause;
use pgtier_replicas::router::ReplicaRouter;
use pgtier_replicas::test_support::{admit_now, paper_router};

/// A backend message reduced to what the tests compare.
#[derive(Debug, PartialEq, Eq)]
enum Decoded {
    Header(Vec<String>),
    Row(Vec<Option<String>>),
    Complete(String),
    Error { code: String, message: String },
    Notice { severity: String, message: String },
    Empty,
}

fn utf8(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("utf-8")
}

/// Every message of `bytes`, and the (name, type OID) of each RowDescription's columns.
fn decode_typed(mut bytes: BytesMut) -> (Vec<Decoded>, Vec<Vec<(String, u32)>>) {
    let mut messages = Vec::new();
    let mut types = Vec::new();
    while let Some(frame) = split_message(&mut bytes, &FrameLimits::default()).expect("framing") {
        let decoded = match BackendMessage::decode(&frame.bytes).expect("decode") {
            BackendMessage::RowDescription(description) => {
                types.push(
                    description
                        .fields()
                        .map(|f| (utf8(f.name), f.type_oid))
                        .collect(),
                );
                Decoded::Header(description.fields().map(|f| utf8(f.name)).collect())
            }
            BackendMessage::DataRow(row) => {
                Decoded::Row(row.values.iter().map(|v| v.map(utf8)).collect())
            }
            BackendMessage::CommandComplete(complete) => Decoded::Complete(utf8(complete.tag)),
            BackendMessage::ErrorResponse(error) => Decoded::Error {
                code: error
                    .fields
                    .code()
                    .map(|c| c.as_str().to_string())
                    .unwrap_or_default(),
                message: error.fields.message().map(utf8).unwrap_or_default(),
            },
            BackendMessage::NoticeResponse(notice) => Decoded::Notice {
                severity: notice
                    .fields
                    .severity()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                message: notice.fields.message().map(utf8).unwrap_or_default(),
            },
            BackendMessage::EmptyQueryResponse(_) => Decoded::Empty,
            other => panic!("unexpected message {other:?}"),
        };
        messages.push(decoded);
    }
    assert!(bytes.is_empty(), "no partial message left");
    (messages, types)
}

fn decode_all(bytes: BytesMut) -> Vec<Decoded> {
    decode_typed(bytes).0
}

fn run(query: &str, routers: &[Arc<ReplicaRouter>], stats: Option<&StatsView>) -> Vec<Decoded> {
    run_listing(query, routers, stats, None)
}

fn view<'a>(
    routers: &'a [Arc<ReplicaRouter>],
    stats: Option<&'a StatsView>,
    listing: Option<&'a Listing>,
    config: Option<&'a Config>,
) -> AdminView<'a> {
    AdminView {
        routers,
        readers: &[],
        stats,
        version: VERSION,
        listing,
        config,
        databases: &[],
        digests: None,
        state: PoolerState::default(),
        gates: None,
        fleet: None,
    }
}

fn run_listing(
    query: &str,
    routers: &[Arc<ReplicaRouter>],
    stats: Option<&StatsView>,
    listing: Option<&Listing>,
) -> Vec<Decoded> {
    let mut out = BytesMut::new();
    answer(
        query,
        ConsoleRights::Admin,
        &view(routers, stats, listing, None),
        &mut out,
    );
    decode_all(out)
}

/// Runs `query` with a configuration and a listing, as `rights`.
fn run_full(
    query: &str,
    rights: ConsoleRights,
    listing: Option<&Listing>,
    config: Option<&Config>,
) -> (Vec<Decoded>, Vec<Vec<(String, u32)>>) {
    let mut out = BytesMut::new();
    answer(query, rights, &view(&[], None, listing, config), &mut out);
    decode_typed(out)
}

fn rows(messages: &[Decoded]) -> Vec<&Vec<Option<String>>> {
    messages
        .iter()
        .filter_map(|m| match m {
            Decoded::Row(row) => Some(row),
            _ => None,
        })
        .collect()
}

fn text(value: &str) -> Option<String> {
    Some(value.to_string())
}

#[test]
fn show_replicas_lists_roles_sessions_and_state() {
    let router = paper_router(2);
    let _leases: Vec<_> = (0..5)
        .map(|_| admit_now(&router, ServiceClass::Premium).expect("admit"))
        .collect();
    let messages = run("SHOW REPLICAS;", &[Arc::clone(&router)], None);
    let Decoded::Header(columns) = &messages[0] else {
        panic!("header first")
    };
    assert_eq!(
        columns[..7],
        [
            "database",
            "replica",
            "role",
            "borrowed_from",
            "premium_sessions",
            "freemium_sessions",
            "state"
        ]
    );
    let rows = rows(&messages);
    assert_eq!(rows.len(), 5);
    assert_eq!(
        rows[0][..7],
        [
            text("analytics"),
            text("127.0.0.1:1"),
            text("premium"),
            None,
            text("2"),
            text("0"),
            text("up")
        ]
    );
    assert_eq!(
        rows[4][2..5],
        [text("borrowed_to_premium"), text("mixed"), text("1")]
    );
    assert_eq!(
        messages.last(),
        Some(&Decoded::Complete("SHOW".to_string()))
    );
}

#[test]
fn show_role_events_lists_a_borrow_with_class_and_reason() {
    let router = paper_router(2);
    let _leases: Vec<_> = (0..5)
        .map(|_| admit_now(&router, ServiceClass::Premium).expect("admit"))
        .collect();
    let messages = run("show role_events", &[router], None);
    let rows = rows(&messages);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0][2..],
        [
            text("analytics"),
            text("127.0.0.1:5"),
            text("mixed"),
            text("borrowed_to_premium"),
            text("premium"),
            text("borrow_mixed_for_premium"),
        ]
    );
}

#[test]
fn show_events_lists_down_and_repair_steps_only() {
    let router = paper_router(2);
    let _leases: Vec<_> = (0..5)
        .map(|_| admit_now(&router, ServiceClass::Premium).expect("admit"))
        .collect();
    router.report_server_failure(ReplicaId(1), ServerFailureCause::ConnectionReset);
    router.run_control_step(&HealthConfig::default(), false);
    let messages = run("SHOW EVENTS", &[router], None);
    let events: Vec<(Option<String>, Option<String>)> = rows(&messages)
        .iter()
        .map(|row| (row[3].clone(), row[4].clone()))
        .collect();
    assert_eq!(events[0], (text("127.0.0.1:2"), text("down")));
    assert_eq!(events[1], (text("127.0.0.1:2"), text("down")));
    assert!(
        events
            .iter()
            .all(|(_, event)| event.as_deref() != Some("borrow_mixed_for_premium"))
    );
    let causes: Vec<&Option<String>> = rows(&messages).iter().map(|row| &row[7]).collect();
    assert_eq!(
        causes[0].as_deref(),
        Some("connection reset (reported by a shard)")
    );
}

#[test]
fn show_stats_reports_per_class_counts_and_percentiles() {
    let totals = TotalsSnapshot {
        queries: [1200, 3400, 0, 0],
        ..TotalsSnapshot::default()
    };
    let stats = StatsView {
        totals,
        interval: Some(IntervalStats {
            ended_at: SystemTime::UNIX_EPOCH,
            length: Duration::from_secs(60),
            latency: [
                IntervalSummary {
                    count: 600,
                    p50_us: 1500,
                    p95_us: 9000,
                },
                IntervalSummary {
                    count: 1200,
                    p50_us: 2500,
                    p95_us: 19_000,
                },
                IntervalSummary::default(),
                IntervalSummary::default(),
            ],
        }),
    };
    let messages = run("SHOW CLASS_STATS", &[], Some(&stats));
    let rows = rows(&messages);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][0..2], [text("premium"), text("1200")]);
    assert_eq!(
        rows[0][5..],
        [text("600"), text("10.0"), text("1.500"), text("9.000")]
    );
    assert_eq!(rows[1][7..], [text("2.500"), text("19.000")]);
    let empty = run("SHOW CLASS_STATS", &[], None);
    assert!(rows_len(&empty) == 0 && matches!(empty[0], Decoded::Header(_)));
}

fn rows_len(messages: &[Decoded]) -> usize {
    rows(messages).len()
}

#[test]
fn show_version_and_help() {
    let messages = run("SHOW VERSION; SHOW HELP", &[], None);
    assert_eq!(rows(&messages)[0], &vec![text(VERSION)]);
    assert_eq!(
        rows(&messages).len(),
        1 + super::command::AdminCommand::ALL.len()
    );
    let completes = messages
        .iter()
        .filter(|m| matches!(m, Decoded::Complete(_)))
        .count();
    assert_eq!(completes, 2);
}

#[test]
fn show_routers_counts_local_and_control_admissions() {
    let router = paper_router(2);
    let _leases: Vec<_> = (0..5)
        .map(|_| admit_now(&router, ServiceClass::Premium).expect("admit"))
        .collect();
    let messages = run("SHOW ROUTERS", &[router], None);
    let rows = rows(&messages);
    assert_eq!(rows.len(), 1);
    // 4 placed locally, the 5th borrowed through the control shard (generation 2).
    assert_eq!(
        rows[0][..8],
        [
            text("analytics"),
            text("plb"),
            text("5"),
            text("5"),
            text("2"),
            text("5"),
            text("4"),
            text("1")
        ]
    );
}

#[test]
fn unknown_command_is_feature_not_supported() {
    let messages = run("SELECT 1", &[], None);
    let [Decoded::Error { code, message }] = &messages[..] else {
        panic!("{messages:?}")
    };
    assert_eq!(code, "0A000");
    assert!(message.contains("SELECT 1"));
}

#[test]
fn malformed_show_is_a_syntax_error_and_stops_the_query_string() {
    let messages = run("SHOW VERSION; SHOW; SHOW HELP", &[], None);
    assert_eq!(rows(&messages).len(), 1, "only SHOW VERSION ran");
    assert!(matches!(messages.last(), Some(Decoded::Error { code, .. }) if code == "42601"));
}

#[test]
fn empty_query_gets_empty_query_response() {
    assert_eq!(run(" ; ", &[], None), vec![Decoded::Empty]);
}

fn slot(index: u32, generation: u32) -> SlotRef {
    SlotRef { index, generation }
}

fn two_shard_listing(missing_shards: Vec<usize>) -> Listing {
    let replica: std::net::SocketAddr = "127.0.0.1:5433".parse().expect("addr");
    let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_996_800);
    let client = |index, class, pid, server: Option<ServerId>| ClientRow {
        id: ClientId(slot(index, 1)),
        socket_id: SocketId(u64::from(index) + if server.is_some() { 7 } else { 9 }),
        replication: "none",
        addr: Some(pgtier_engine::ClientAddr::Tcp(
            "127.0.0.1:40000".parse().expect("addr"),
        )),
        local_addr: Some("127.0.0.1:6432".parse().expect("addr")),
        database: "analytics".to_string(),
        user: "alice".to_string(),
        state: if server.is_some() { "active" } else { "idle" },
        class,
        replica: class.map(|_| replica),
        connected_at: at,
        connected_for: Duration::from_millis(12_500),
        request_at: at + Duration::from_secs(5),
        waiting_for: None,
        server,
        backend_pid: pid,
        pinned: String::new(),
        prepared_statements: 0,
        tls: None,
        application_name: Some("psql".to_string()),
    };
    let server = ServerRow {
        id: ServerId(slot(0, 3)),
        socket_id: SocketId(8),
        replication: "none",
        prepared_statements: 2,
        database: "analytics".to_string(),
        user: "alice".to_string(),
        state: "active",
        addr: pgtier_engine::ServerAddr::Tcp(replica),
        local_addr: Some("127.0.0.1:50000".parse().expect("addr")),
        connected_at: at,
        request_at: at,
        client: Some(ClientId(slot(0, 1))),
        backend_pid: Some(4242),
        tls: None,
        application_name: None,
        close_needed: false,
        being_canceled: false,
    };
    let pool = |active, waiting, wait_ms| PoolRow {
        database: "analytics".to_string(),
        user: "alice".to_string(),
        addr: pgtier_engine::ServerAddr::Tcp(replica),
        mode: "transaction",
        clients_active: active,
        clients_waiting: waiting,
        servers_active: 1,
        servers_idle: 3,
        servers_opening: 0,
        servers_used: 1,
        servers_tested: 0,
        servers_login: 0,
        servers_being_canceled: 0,
        max_wait: (wait_ms > 0).then(|| Duration::from_millis(wait_ms)),
    };
    // Parts arrive out of order; the listing shows them by shard.
    Listing::new(
        vec![
            ShardListing {
                shard: 1,
                clients: vec![client(0, None, None, None)],
                servers: vec![],
                pools: vec![pool(1, 2, 2_500_100)],
            },
            ShardListing {
                shard: 0,
                clients: vec![client(0, Some("freemium"), Some(4242), Some(server.id))],
                servers: vec![server],
                pools: vec![pool(2, 1, 0)],
            },
        ],
        missing_shards,
    )
}

fn header(messages: &[Decoded]) -> &[String] {
    messages
        .iter()
        .find_map(|m| match m {
            Decoded::Header(columns) => Some(&columns[..]),
            _ => None,
        })
        .expect("a RowDescription")
}

const CONN_COLUMNS: [&str; 21] = [
    "type",
    "user",
    "database",
    "replication",
    "state",
    "addr",
    "port",
    "local_addr",
    "local_port",
    "connect_time",
    "request_time",
    "wait",
    "wait_us",
    "close_needed",
    "ptr",
    "link",
    "remote_pid",
    "tls",
    "application_name",
    "prepared_statements",
    "id",
];

#[test]
fn show_clients_has_pgbouncers_columns_then_pgtiers() {
    let listing = two_shard_listing(Vec::new());
    let (messages, types) = run_full("SHOW CLIENTS", ConsoleRights::Stats, Some(&listing), None);
    let columns = header(&messages);
    assert_eq!(columns[..21], CONN_COLUMNS);
    assert_eq!(
        columns[21..],
        [
            "shard",
            "pgtier_state",
            "class",
            "replica",
            "backend_pid",
            "pinned",
        ]
    );
    assert_eq!(types[0][6], ("port".to_string(), 23), "int4 as PgBouncer");
    let rows = rows(&messages);
    assert_eq!(rows.len(), 2);
    let server_ptr = format_ptr(ConnPtr::new(0, ConnKind::Server, 0, 3));
    let client_ptr = format_ptr(ConnPtr::new(0, ConnKind::Client, 0, 1));
    assert_eq!(
        rows[0][..21],
        [
            text("C"),
            text("alice"),
            text("analytics"),
            text("none"),
            text("active"),
            text("127.0.0.1"),
            text("40000"),
            text("127.0.0.1"),
            text("6432"),
            text("2026-11-30 00:00:00 UTC"),
            text("2026-11-30 00:00:05 UTC"),
            text("0"),
            text("0"),
            text("0"),
            Some(client_ptr.clone()),
            Some(server_ptr),
            text("0"),
            text(""),
            text("psql"),
            text("0"),
            text("7"),
        ]
    );
    assert_eq!(
        rows[0][21..],
        [
            text("0"),
            text("active"),
            text("freemium"),
            text("127.0.0.1:5433"),
            text("4242"),
            None,
        ]
    );
    let other_ptr = rows[1][14].clone();
    assert_ne!(
        other_ptr,
        Some(client_ptr),
        "the same slot on another shard has another ptr"
    );
    assert_eq!(rows[1][15], text(""), "no link");
    assert_eq!(rows[1][4], text("idle"), "no server, nothing waiting: idle");
    assert_eq!(rows[1][20], text("9"), "the id");
    assert_eq!(types[0][20], ("id".to_string(), 23), "int4 as PgBouncer");
}

#[test]
fn show_servers_links_back_to_the_client() {
    let listing = two_shard_listing(Vec::new());
    let (messages, _) = run_full("SHOW SERVERS", ConsoleRights::Stats, Some(&listing), None);
    assert_eq!(header(&messages)[..21], CONN_COLUMNS);
    let rows = rows(&messages);
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row[0], text("S"));
    assert_eq!(row[4], text("active"));
    assert_eq!(
        (row[5].clone(), row[6].clone()),
        (text("127.0.0.1"), text("5433"))
    );
    assert_eq!(
        row[15],
        Some(format_ptr(ConnPtr::new(0, ConnKind::Client, 0, 1)))
    );
    assert_eq!(row[16], text("4242"), "remote_pid is the backend pid");
    assert_eq!(
        (row[19].clone(), row[20].clone()),
        (text("2"), text("8")),
        "prepared_statements and id"
    );
}

#[test]
fn show_sockets_adds_buffer_columns() {
    let listing = two_shard_listing(Vec::new());
    let (messages, _) = run_full("SHOW SOCKETS", ConsoleRights::Stats, Some(&listing), None);
    assert_eq!(
        header(&messages)[21..28],
        [
            "recv_pos",
            "pkt_pos",
            "pkt_remain",
            "send_pos",
            "send_remain",
            "pkt_avail",
            "send_avail"
        ]
    );
    let sockets = rows(&messages);
    assert_eq!(sockets.len(), 3, "two clients and a server");
    let states: Vec<_> = sockets.iter().map(|row| row[4].clone()).collect();
    assert_eq!(
        states,
        [text("cl_active"), text("cl_active"), text("sv_active")],
        "PgBouncer's list names"
    );
    let (messages, _) = run_full(
        "SHOW ACTIVE_SOCKETS",
        ConsoleRights::Stats,
        Some(&listing),
        None,
    );
    assert_eq!(rows(&messages).len(), 2, "the idle client is not active");
}

#[test]
fn show_pools_is_one_row_per_database_and_user_across_shards() {
    let listing = two_shard_listing(Vec::new());
    let (messages, types) = run_full("show pools", ConsoleRights::Stats, Some(&listing), None);
    assert_eq!(
        header(&messages),
        [
            "database",
            "user",
            "cl_active",
            "cl_waiting",
            "cl_active_cancel_req",
            "cl_waiting_cancel_req",
            "sv_active",
            "sv_active_cancel",
            "sv_being_canceled",
            "sv_idle",
            "sv_used",
            "sv_tested",
            "sv_login",
            "maxwait",
            "maxwait_us",
            "pool_mode",
            "load_balance_hosts",
            "pgtier_slices",
        ]
    );
    assert!(types[0][2..15].iter().all(|(_, oid)| *oid == 23));
    let rows = rows(&messages);
    assert_eq!(rows.len(), 2, "analytics/alice and the console");
    assert_eq!(
        rows[0][..],
        [
            text("analytics"),
            text("alice"),
            text("3"),
            text("3"),
            text("0"),
            text("0"),
            text("2"),
            text("0"),
            text("0"),
            text("6"),
            text("2"),
            text("0"),
            text("0"),
            text("2500"),
            text("100000"),
            text("transaction"),
            None,
            text("2"),
        ]
    );
    assert_eq!(rows[1][..2], [text("pgbouncer"), text("pgbouncer")]);
}

fn config(extra: &str) -> Config {
    let text = format!(
        "[pgtier]\nauth_type = \"trust\"\nlisten_port = 6499\nstats_users = [\"watcher\"]\n\
         [databases.analytics]\nhost = \"127.0.0.1\"\nport = 5999\ndbname = \"warehouse\"\n\
         user = \"etl\"\n[users.alice]\npool_mode = \"transaction\"\n{extra}"
    );
    Config::from_str(&text, "pgtier.toml").expect("config")
}

#[test]
fn show_databases_lists_entries_the_fallback_and_the_console() {
    let mut config = config("");
    config.fallback = config.databases.get("analytics").cloned();
    let listing = two_shard_listing(Vec::new());
    let (messages, _) = run_full(
        "SHOW DATABASES",
        ConsoleRights::Stats,
        Some(&listing),
        Some(&config),
    );
    assert_eq!(
        header(&messages)[..17],
        [
            "name",
            "host",
            "port",
            "database",
            "force_user",
            "pool_size",
            "min_pool_size",
            "reserve_pool_size",
            "server_lifetime",
            "pool_mode",
            "load_balance_hosts",
            "max_connections",
            "current_connections",
            "max_client_connections",
            "current_client_connections",
            "paused",
            "disabled",
        ]
    );
    let rows = rows(&messages);
    let names: Vec<_> = rows.iter().map(|row| row[0].clone()).collect();
    assert_eq!(names, [text("analytics"), text("*"), text("pgbouncer")]);
    assert_eq!(
        rows[0][..5],
        [
            text("analytics"),
            text("127.0.0.1"),
            text("5999"),
            text("warehouse"),
            text("etl")
        ]
    );
    assert_eq!(rows[0][12], text("10"), "servers of both shards' slices");
    assert_eq!(rows[0][14], text("2"), "clients of both shards");
    assert_eq!(rows[0][10], None, "load_balance_hosts: not a host list");
    assert_eq!(
        rows[2][2],
        text("6499"),
        "the console is on the listen port"
    );
    assert_eq!(rows[2][13], text("0"), "no max_db_client_connections");
}

#[test]
fn the_console_row_shows_the_global_client_limit() {
    let mut config = config("");
    config.pgtier.max_db_client_connections = 2;
    let (messages, _) = run_full("SHOW DATABASES", ConsoleRights::Stats, None, Some(&config));
    let rows = rows(&messages);
    let console = rows.last().expect("the console's row");
    assert_eq!(console[0], text("pgbouncer"));
    assert_eq!(console[13], text("2"), "max_client_connections");
}

#[test]
fn show_users_and_lists() {
    let config = config("");
    let listing = two_shard_listing(Vec::new());
    let (messages, _) = run_full(
        "SHOW USERS",
        ConsoleRights::Stats,
        Some(&listing),
        Some(&config),
    );
    assert_eq!(
        header(&messages)[..8],
        [
            "name",
            "pool_size",
            "reserve_pool_size",
            "pool_mode",
            "max_user_connections",
            "current_connections",
            "max_user_client_connections",
            "current_client_connections",
        ]
    );
    let alice = &rows(&messages)[0];
    assert_eq!(alice[0], text("alice"));
    assert_eq!(alice[1], text(""), "no pool_size of her own");
    assert_eq!(alice[3], text("transaction"));
    assert_eq!(alice[7], text("2"), "her clients on both shards");
    let (messages, types) = run_full(
        "SHOW LISTS",
        ConsoleRights::Stats,
        Some(&listing),
        Some(&config),
    );
    assert_eq!(
        types[0],
        [("list".to_string(), 25), ("items".to_string(), 23)]
    );
    let lists: Vec<(Option<String>, Option<String>)> = rows(&messages)
        .iter()
        .map(|row| (row[0].clone(), row[1].clone()))
        .collect();
    assert_eq!(lists.len(), 12);
    assert_eq!(lists[0], (text("databases"), text("2")));
    assert_eq!(lists[2], (text("pools"), text("2")));
    assert_eq!(lists[4], (text("used_clients"), text("2")));
    assert_eq!(lists[7], (text("used_servers"), text("1")));
    assert_eq!(lists[11].0, text("dns_pending"));
}

#[test]
fn show_config_lists_every_setting() {
    let config = config("");
    let (messages, _) = run_full("SHOW CONFIG", ConsoleRights::Stats, None, Some(&config));
    assert_eq!(header(&messages), ["key", "value", "default", "changeable"]);
    let rows = rows(&messages);
    let port = rows
        .iter()
        .find(|row| row[0] == text("listen_port"))
        .expect("listen_port");
    assert_eq!(port[1..], [text("6499"), text("6432"), text("no")]);
    assert!(rows.len() > 60);
}

#[test]
fn show_without_rows_still_has_pgbouncers_columns() {
    let (messages, types) = run_full(
        "SHOW MEM; SHOW FDS; SHOW DNS_HOSTS; SHOW DNS_ZONES",
        ConsoleRights::Admin,
        None,
        None,
    );
    assert_eq!(rows(&messages).len(), 0);
    assert_eq!(types[0].len(), 5);
    assert_eq!(types[1][14], ("scram_server_key".to_string(), 17));
    assert_eq!(types[2][1], ("ttl".to_string(), 20));
    assert_eq!(types[3][0].0, "zonename");
    let (messages, _) = run_full("SHOW STATE", ConsoleRights::Stats, None, None);
    assert_eq!(rows(&messages)[0][..], [text("active"), text("yes")]);
}

#[test]
fn stats_users_may_show_but_not_fds_nor_admin_commands() {
    for query in ["SHOW FDS", "PAUSE", "kill analytics", "SHOW POOLS; RELOAD"] {
        let (messages, _) = run_full(query, ConsoleRights::Stats, None, None);
        let Some(Decoded::Error { code, message }) = messages.last() else {
            panic!("{query}: {messages:?}")
        };
        assert_eq!(
            (code.as_str(), message.as_str()),
            ("08P01", "admin access needed"),
            "{query}"
        );
    }
    let (messages, _) = run_full("SHOW FDS", ConsoleRights::Admin, None, None);
    assert!(matches!(messages.last(), Some(Decoded::Complete(_))));
}

#[test]
fn one_statement_splits_its_description_from_its_rows_and_honours_binary_formats() {
    let listing = two_shard_listing(Vec::new());
    let config = config("");
    let view = view(&[], None, Some(&listing), Some(&config));
    let answer = answer_statement("SHOW LISTS", ConsoleRights::Stats, &[0, 1], &view);
    assert!(!answer.failed);
    let (described, _) = decode_typed(answer.description.clone().expect("rows"));
    assert!(matches!(&described[..], [Decoded::Header(_)]));
    let mut body = answer.body.clone();
    let frame = split_message(&mut body, &FrameLimits::default())
        .expect("framing")
        .expect("row");
    let BackendMessage::DataRow(row) = BackendMessage::decode(&frame.bytes).expect("decode") else {
        panic!("a row first")
    };
    let values: Vec<Option<&[u8]>> = row.values.iter().collect();
    assert_eq!(values[1], Some(&[0u8, 0, 0, 2][..]), "int4 in binary");
    let bad = answer_statement("SHOW LISTS", ConsoleRights::Stats, &[0, 1, 1], &view);
    assert!(bad.failed && bad.description.is_none());
    let refused = answer_statement("SHOW FDS", ConsoleRights::Stats, &[], &view);
    assert!(refused.failed);
    let empty = answer_statement("", ConsoleRights::Stats, &[], &view);
    assert!(!empty.failed && empty.description.is_none());
}

#[test]
fn missing_shards_are_named_in_a_notice_before_the_rows() {
    let listing = two_shard_listing(vec![2, 3]);
    let messages = run_listing("SHOW CLIENTS", &[], None, Some(&listing));
    let Decoded::Notice { severity, message } = &messages[0] else {
        panic!("notice first: {messages:?}")
    };
    assert_eq!(severity, "WARNING");
    assert!(message.contains("2, 3"), "{message}");
    assert!(matches!(messages[1], Decoded::Header(_)));
    assert_eq!(rows_len(&messages), 2);
}

#[test]
fn listing_commands_without_a_listing_answer_no_rows() {
    let messages = run("SHOW CLIENTS; SHOW SERVERS; SHOW SOCKETS", &[], None);
    assert_eq!(rows_len(&messages), 0);
    let messages = run("SHOW POOLS", &[], None);
    assert_eq!(rows_len(&messages), 1, "only the console's own pool");
    assert!(super::needs_listing("show version; show pools"));
    assert!(!super::needs_listing("SHOW VERSION"));
}

/// A reader entry whose replica 1 replayed the primary's newest position and replica 0 is
/// 500 bytes behind, with one read in flight.
fn reader_map() -> pgtier_replicas::RouterMap {
    let text = r#"
        [pgtier]
        auth_type = "trust"
        [databases.app]
        dbname = "postgres"
        user = "postgres"
        primary = "127.0.0.1:15400"
        replicas = ["127.0.0.1:15401", "127.0.0.1:15402"]
        max_replica_lag_bytes = 100
    "#;
    let config = Config::from_str(text, "/tmp/pgtier-admin-readers.toml").expect("config");
    let map =
        pgtier_replicas::RouterMap::from_config(&config, pgtier_replicas::default_probe_login)
            .expect("map");
    let reader = map.reader("app").expect("reader");
    let mut tracker = pgtier_replicas::lsn::LsnTracker::new(2, reader.lag_cap());
    let now = std::time::Instant::now();
    tracker.on_primary(now, pgtier_replicas::lsn::Lsn(0x0300_0148));
    tracker.on_replica(0, pgtier_replicas::lsn::Lsn(0x0300_0148 - 500));
    tracker.on_replica(1, pgtier_replicas::lsn::Lsn(0x0300_0148));
    reader.publish(tracker.view(now));
    map
}

#[test]
fn show_replicas_ends_with_replay_lag_and_reads_and_show_readers_sums_them() {
    let map = reader_map();
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = pgtier_replicas::ReadLocal::new(1);
    let ask = pgtier_replicas::ReadAsk {
        class: ServiceClass::Freemium.into(),
        leased: None,
        after: None,
        avoid: None,
    };
    let pgtier_replicas::ReadPlacement::Replica(_ticket) = reader.route(&ask, &mut local) else {
        panic!("replica 1 serves reads");
    };
    let mut view = view(map.routers(), None, None, None);
    view.readers = map.readers();
    let mut out = BytesMut::new();
    answer(
        "SHOW REPLICAS; SHOW READERS",
        ConsoleRights::Admin,
        &view,
        &mut out,
    );
    let messages = decode_all(out);
    let Decoded::Header(columns) = &messages[0] else {
        panic!("header first")
    };
    assert_eq!(columns.last().map(String::as_str), Some("class_sessions"));
    assert_eq!(
        columns[columns.len() - 7..columns.len() - 1],
        [
            "replay_lsn",
            "lag_bytes",
            "lag_seconds",
            "excluded",
            "in_flight",
            "reads"
        ]
    );
    let rows = rows(&messages);
    let tail = |row: &Vec<Option<String>>| row[row.len() - 7..row.len() - 1].to_vec();
    assert_eq!(
        tail(rows[0]),
        [
            text("0/2FFFF54"),
            text("500"),
            text("0.000"),
            text("t"),
            text("0"),
            text("0")
        ]
    );
    assert_eq!(
        tail(rows[1]),
        [
            text("0/3000148"),
            text("0"),
            text("0.000"),
            text("f"),
            text("1"),
            text("1")
        ]
    );
    assert_eq!(
        rows[2][..],
        [
            text("app"),
            text("127.0.0.1:15400"),
            text("0/3000148"),
            text("f"),
            text("2"),
            text("1"),
            text("1"),
            text("0"),
            text("0")
        ]
    );
}

#[test]
fn show_replicas_of_a_plain_replica_set_has_null_read_columns() {
    let router = paper_router(2);
    let messages = run("SHOW REPLICAS", &[router], None);
    for row in rows(&messages) {
        assert_eq!(row[row.len() - 6..], [None, None, None, None, None, None]);
    }
}

#[test]
fn show_peers_lists_the_other_peers_with_pgbouncers_columns() {
    let config = config(
        "[peers.1]\nhost = \"/tmp/one\"\n[peers.2]\nhost = \"10.0.0.2\"\nport = 6500\n\
         pool_size = 4\n",
    );
    let mut config = config;
    config.pgtier.peer_id = 2;
    let (messages, types) = run_full("SHOW PEERS", ConsoleRights::Stats, None, Some(&config));
    assert_eq!(header(&messages), ["peer_id", "host", "port", "pool_size"]);
    assert_eq!(
        types[0][0],
        ("peer_id".to_string(), 23),
        "int4 as PgBouncer"
    );
    let listed: Vec<Vec<Option<String>>> = rows(&messages).into_iter().cloned().collect();
    assert_eq!(
        listed,
        [vec![text("1"), text("/tmp/one"), text("6432"), text("20")]],
        "its own entry is not listed; pool_size defaults to default_pool_size"
    );
    let (messages, _) = run_full("SHOW PEER_POOLS", ConsoleRights::Stats, None, Some(&config));
    assert_eq!(
        header(&messages),
        [
            "peer_id",
            "cl_active_cancel_req",
            "cl_waiting_cancel_req",
            "sv_active_cancel",
            "sv_login"
        ]
    );
    assert!(rows(&messages).is_empty());
}
