//! The engine's per-transaction path with query digests on or off, for counting its
//! instructions under callgrind without iai-callgrind's runner:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*engine_digests::transactions_of*' \
//!     target/release/examples/engine_digests on 101 update
//! ```
//!
//! Arguments: `on`/`off` (`query_digests`), the number of transactions, and the statement
//! (`select1`: `SELECT 1`; `update`: pgbench's account UPDATE as a simple Query, its
//! constants different each time, answered `UPDATE 1`; `extended`: the same UPDATE with `$1`
//! and `$2` as `pgbench -M extended` sends it, Parse, Bind, Execute and Sync in one piece). Each transaction is one Query and its answer, as in
//! `benches/engine_iai.rs`; login, the first server and the message bytes are made before,
//! and only `transactions` is counted (`--toggle-collect`). The cost of one transaction is
//! the difference between two runs divided by the difference in transactions, so the first
//! transaction's one-time work (a new digest's normalization) cancels out.

use bytes::BytesMut;
use pgtier_engine::testing::{self, Harness};
use pgtier_engine::{Action, ClientId, Conn};

/// Which transaction is run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Statement {
    SelectOne,
    Update,
    Extended,
}

fn answer(statement: Statement) -> Vec<u8> {
    if statement == Statement::Extended {
        let mut out = testing::frame(b'1', b"");
        out.extend(testing::frame(b'2', b""));
        out.extend(testing::frame(b'C', b"UPDATE 1\0"));
        out.extend(testing::frame(b'Z', b"I"));
        return out;
    }
    if statement == Statement::Update {
        let mut out = testing::frame(b'C', b"UPDATE 1\0");
        out.extend(testing::frame(b'Z', b"I"));
        return out;
    }
    let mut out = testing::frame(
        b'T',
        b"\0\x01?column?\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
    );
    out.extend(testing::frame(b'D', b"\0\x01\0\0\0\x011"));
    out.extend(testing::frame(b'C', b"SELECT 1\0"));
    out.extend(testing::frame(b'Z', b"I"));
    out
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

fn query(statement: Statement, n: usize) -> BytesMut {
    let bytes = match statement {
        Statement::SelectOne => testing::query("SELECT 1"),
        Statement::Update => testing::query(&format!(
            "UPDATE pgbench_accounts SET abalance = abalance + -{} WHERE aid = {};",
            1 + n % 5000,
            1 + (n * 7919) % 100_000
        )),
        Statement::Extended => [
            testing::parse(
                "",
                "UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2;",
            ),
            testing::bind(""),
            testing::execute(),
            testing::sync(),
        ]
        .concat(),
    };
    BytesMut::from(&bytes[..])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let digests = args.get(1).map(String::as_str) != Some("off");
    let transactions: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(100);
    let statement = match args.get(3).map(String::as_str) {
        Some("update") => Statement::Update,
        Some("extended") => Statement::Extended,
        _ => Statement::SelectOne,
    };
    let config = format!("pool_mode = \"transaction\"\nquery_digests = {digests}");
    let mut harness = Harness::new(&testing::config(&config));
    let (client, _) = harness.login("alice", "db");
    let server = harness.live_servers()[0];
    harness.auto_backend = false;
    // Made before the loop: a driver's receive buffers are not allocated per transaction.
    let queries: Vec<BytesMut> = (0..transactions).map(|n| query(statement, n)).collect();
    let answers: Vec<BytesMut> = (0..transactions)
        .map(|_| BytesMut::from(&answer(statement)[..]))
        .collect();
    let moved = transactions_of(&mut harness, client, server, queries, answers);
    harness.engine.fold_counters();
    println!("{moved}");
}

/// The measured part: every transaction, query in, answer out.
#[inline(never)]
fn transactions_of(
    harness: &mut Harness,
    client: ClientId,
    server: pgtier_engine::ServerId,
    queries: Vec<BytesMut>,
    answers: Vec<BytesMut>,
) -> usize {
    let now = harness.now;
    let mut moved = 0;
    for (query, answer) in queries.into_iter().zip(answers) {
        harness
            .engine
            .handle_client_data(now, client, std::hint::black_box(query));
        moved += drain(harness, client);
        harness
            .engine
            .handle_server_data(now, server, std::hint::black_box(answer));
        moved += drain(harness, client);
    }
    moved
}
