//! Instruction counts (callgrind) of the session engine's per-transaction path, with no
//! syscalls: a logged-in transaction-mode client sends `SELECT 1`, the engine takes an idle
//! server from the pool, forwards the query (classifying it for session state), relays the
//! server's answer, and puts the server back at ReadyForQuery. The driver's part is played
//! by draining actions. Setup (login, the first server) is excluded; per-transaction cost =
//! (transactions_100 - transactions_1) / 99. The `digests_off_*` cases run the same with
//! `query_digests = false` (the default is on), for the digests' overhead.
//!
//! `extended_query_transactions` is the same over the extended protocol, as `pgbench -S -M
//! extended` sends it: libpq's `PQsendQueryParams` writes an unnamed Parse (the text with `$1`,
//! no parameter types), a Bind of the unnamed portal to the unnamed statement (one text
//! parameter, one result format), Describe of the portal, Execute (no row limit) and Sync in
//! one write, and the server answers ParseComplete, BindComplete, RowDescription, DataRow,
//! CommandComplete and ReadyForQuery in one.

use std::hint::black_box;

use bytes::BytesMut;
use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pgtier_engine::testing::{self, Harness};
use pgtier_engine::{Action, ClientId, Conn, ServerId};

/// The answer PostgreSQL gives to `SELECT 1`.
fn answer() -> Vec<u8> {
    let mut out = testing::frame(
        b'T',
        b"\0\x01?column?\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
    );
    out.extend(testing::frame(b'D', b"\0\x01\0\0\0\x011"));
    out.extend(testing::frame(b'C', b"SELECT 1\0"));
    out.extend(testing::frame(b'Z', b"I"));
    out
}

/// The text `pgbench -S` runs.
const PGBENCH_SELECT: &str = "SELECT abalance FROM pgbench_accounts WHERE aid = $1;";

/// What libpq's `PQsendQueryParams` writes for `pgbench -S -M extended`: Parse, Bind,
/// Describe portal, Execute, Sync.
fn extended_query() -> Vec<u8> {
    let mut parse = b"\0".to_vec();
    parse.extend_from_slice(PGBENCH_SELECT.as_bytes());
    parse.extend_from_slice(b"\0\0\0");
    let mut out = testing::frame(b'P', &parse);
    // Portal "", statement "", no parameter formats (all text), one parameter "43127",
    // one result format (text).
    out.extend(testing::frame(
        b'B',
        b"\0\0\0\0\0\x01\0\0\0\x0543127\0\x01\0\0",
    ));
    out.extend(testing::frame(b'D', b"P\0"));
    out.extend(testing::frame(b'E', b"\0\0\0\0\0"));
    out.extend(testing::frame(b'S', b""));
    out
}

/// PostgreSQL's answer to `extended_query`: one int4 row.
fn extended_answer() -> Vec<u8> {
    let mut out = testing::frame(b'1', b"");
    out.extend(testing::frame(b'2', b""));
    out.extend(testing::frame(
        b'T',
        b"\0\x01abalance\0\0\0\x40\x03\0\x03\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
    ));
    out.extend(testing::frame(b'D', b"\0\x01\0\0\0\x010"));
    out.extend(testing::frame(b'C', b"SELECT 1\0"));
    out.extend(testing::frame(b'Z', b"I"));
    out
}

/// A logged-in client with its pool's server idle, and the bytes of one transaction.
struct Ready {
    harness: Harness,
    client: ClientId,
    server: ServerId,
    /// One query and one answer per transaction, made in setup (a driver's receive buffers
    /// are not allocated per transaction either).
    queries: Vec<BytesMut>,
    answers: Vec<BytesMut>,
}

fn ready(transactions: usize) -> Ready {
    ready_with(transactions, true)
}

fn ready_with(transactions: usize, digests: bool) -> Ready {
    ready_for(
        transactions,
        digests,
        &testing::query("SELECT 1"),
        &answer(),
    )
}

fn ready_extended(transactions: usize) -> Ready {
    ready_extended_with(transactions, true)
}

fn ready_extended_with(transactions: usize, digests: bool) -> Ready {
    ready_for(transactions, digests, &extended_query(), &extended_answer())
}

fn ready_for(transactions: usize, digests: bool, query: &[u8], answer: &[u8]) -> Ready {
    let config = format!("pool_mode = \"transaction\"\nquery_digests = {digests}");
    let mut harness = Harness::new(&testing::config(&config));
    let (client, _) = harness.login("alice", "db");
    let server = harness.live_servers()[0];
    harness.auto_backend = false;
    Ready {
        harness,
        client,
        server,
        queries: (0..transactions).map(|_| BytesMut::from(query)).collect(),
        answers: (0..transactions).map(|_| BytesMut::from(answer)).collect(),
    }
}

/// What a driver would do with the actions: count the bytes and report client sends done.
fn drain(harness: &mut Harness, client: ClientId) -> usize {
    let mut bytes = 0;
    while let Some(action) = harness.engine.poll_action() {
        if let Action::Send { conn, bytes: sent } = action {
            bytes += sent.len();
            if conn == Conn::Client(client) {
                harness
                    .engine
                    .handle_client_sent(harness.now, client, sent.len());
            }
        }
    }
    bytes
}

#[library_benchmark]
#[bench::transactions_1(ready(1))]
#[bench::transactions_100(ready(100))]
#[bench::digests_off_1(ready_with(1, false))]
#[bench::digests_off_100(ready_with(100, false))]
fn simple_query_transactions(ready: Ready) -> usize {
    run(ready)
}

#[library_benchmark]
#[bench::transactions_1(ready_extended(1))]
#[bench::transactions_100(ready_extended(100))]
#[bench::digests_off_1(ready_extended_with(1, false))]
#[bench::digests_off_100(ready_extended_with(100, false))]
fn extended_query_transactions(ready: Ready) -> usize {
    run(ready)
}

/// Every transaction of `ready`: its query from the client, the answer from the server.
fn run(mut ready: Ready) -> usize {
    let mut moved = 0;
    let now = ready.harness.now;
    let pairs: Vec<(BytesMut, BytesMut)> = ready
        .queries
        .drain(..)
        .zip(ready.answers.drain(..))
        .collect();
    for (query, answer) in pairs {
        ready
            .harness
            .engine
            .handle_client_data(now, ready.client, black_box(query));
        moved += drain(&mut ready.harness, ready.client);
        ready
            .harness
            .engine
            .handle_server_data(now, ready.server, black_box(answer));
        moved += drain(&mut ready.harness, ready.client);
    }
    moved
}

library_benchmark_group!(name = engine; benchmarks = simple_query_transactions, extended_query_transactions);
main!(library_benchmark_groups = engine);
