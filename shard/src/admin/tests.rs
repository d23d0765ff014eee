//! Admin console tests: every answer is decoded back from its bytes with the wire codec.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use pgtier_core::metrics::{IntervalSummary, TotalsSnapshot};
use pgtier_policy::{ReplicaId, ServiceClass};
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::split_message;
use pgtier_wire::messages::BackendMessage;

use super::listing::{ClientRow, Listing, PoolRow, ShardListing};
use super::{AdminView, IntervalStats, StatsView, VERSION, answer};
use crate::control::health::HealthConfig;
use crate::control::mailbox::ServerFailureCause;
use crate::control::router::ReplicaRouter;
use crate::control::test_support::{admit_now, paper_router};

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

fn decode_all(mut bytes: BytesMut) -> Vec<Decoded> {
    let mut messages = Vec::new();
    while let Some(frame) = split_message(&mut bytes, &FrameLimits::default()).expect("framing") {
        let decoded = match BackendMessage::decode(&frame.bytes).expect("decode") {
            BackendMessage::RowDescription(description) => {
                for field in description.fields() {
                    assert_eq!((field.type_oid, field.format), (25, 0), "text columns");
                }
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
    messages
}

fn run(query: &str, routers: &[Arc<ReplicaRouter>], stats: Option<&StatsView>) -> Vec<Decoded> {
    run_listing(query, routers, stats, None)
}

fn run_listing(
    query: &str,
    routers: &[Arc<ReplicaRouter>],
    stats: Option<&StatsView>,
    listing: Option<&Listing>,
) -> Vec<Decoded> {
    let view = AdminView {
        routers,
        stats,
        version: VERSION,
        listing,
    };
    let mut out = BytesMut::new();
    answer(query, &view, &mut out);
    decode_all(out)
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
        queries: [1200, 3400],
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
            ],
        }),
    };
    let messages = run("SHOW STATS", &[], Some(&stats));
    let rows = rows(&messages);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0][0..2], [text("premium"), text("1200")]);
    assert_eq!(
        rows[0][5..],
        [text("600"), text("10.0"), text("1.500"), text("9.000")]
    );
    assert_eq!(rows[1][7..], [text("2.500"), text("19.000")]);
    let empty = run("SHOW STATS", &[], None);
    assert!(rows_len(&empty) == 0 && matches!(empty[0], Decoded::Header(_)));
}

fn rows_len(messages: &[Decoded]) -> usize {
    rows(messages).len()
}

#[test]
fn show_version_and_help() {
    let messages = run("SHOW VERSION; SHOW HELP", &[], None);
    assert_eq!(rows(&messages)[0], &vec![text(VERSION)]);
    assert_eq!(rows(&messages).len(), 1 + 9);
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

fn two_shard_listing(missing_shards: Vec<usize>) -> Listing {
    let replica: std::net::SocketAddr = "127.0.0.1:5433".parse().expect("addr");
    let client = |class, pid| ClientRow {
        addr: Some("127.0.0.1:40000".parse().expect("addr")),
        database: "analytics".to_string(),
        user: "alice".to_string(),
        state: "active",
        class,
        replica: class.map(|_| replica),
        connected_at: SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_996_800),
        connected_for: Duration::from_millis(12_500),
        backend_pid: pid,
        pinned: String::new(),
        prepared_statements: 0,
        tls: None,
    };
    let pool = PoolRow {
        database: "analytics".to_string(),
        user: "alice".to_string(),
        addr: replica,
        mode: "transaction",
        clients_active: 2,
        clients_waiting: 1,
        servers_active: 1,
        servers_idle: 3,
        servers_opening: 0,
    };
    // Parts arrive out of order; the listing shows them by shard.
    Listing::new(
        vec![
            ShardListing {
                shard: 1,
                clients: vec![client(None, None)],
                pools: vec![],
            },
            ShardListing {
                shard: 0,
                clients: vec![client(Some("freemium"), Some(4242))],
                pools: vec![pool],
            },
        ],
        missing_shards,
    )
}

#[test]
fn show_clients_lists_every_shard_with_class_replica_and_pid() {
    let listing = two_shard_listing(Vec::new());
    let messages = run_listing("SHOW CLIENTS", &[], None, Some(&listing));
    let Decoded::Header(columns) = &messages[0] else {
        panic!("header first, no notice: {messages:?}")
    };
    assert_eq!(columns[4..7], ["state", "class", "replica"]);
    let rows = rows(&messages);
    assert_eq!(rows.len(), 2);
    assert_eq!(
        rows[0][..],
        [
            text("0"),
            text("127.0.0.1:40000"),
            text("analytics"),
            text("alice"),
            text("active"),
            text("freemium"),
            text("127.0.0.1:5433"),
            text("2026-11-30 00:00:00.000 UTC"),
            text("12"),
            text("4242"),
            None,
            text("0"),
            None,
        ]
    );
    assert_eq!(rows[1][0], text("1"));
    assert_eq!(
        rows[1][5..7],
        [None, None],
        "no class or replica off replica sets"
    );
    assert_eq!(rows[1][9], None, "no backend pid when unlinked");
}

#[test]
fn show_pools_lists_counts_per_shard() {
    let listing = two_shard_listing(Vec::new());
    let messages = run_listing("show pools", &[], None, Some(&listing));
    let rows = rows(&messages);
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0][..],
        [
            text("0"),
            text("analytics"),
            text("alice"),
            text("127.0.0.1:5433"),
            text("transaction"),
            text("2"),
            text("1"),
            text("1"),
            text("3"),
            text("0"),
        ]
    );
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
    let messages = run("SHOW CLIENTS; SHOW POOLS", &[], None);
    assert_eq!(rows_len(&messages), 0);
    assert!(super::needs_listing("show version; show pools"));
    assert!(!super::needs_listing("SHOW VERSION"));
}
