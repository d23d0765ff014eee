//! Instruction counts (callgrind) for the wire codec's hot paths: per DataRow scanned
//! (split + decode), per Query encoded, per Bind(10 params) decoded, and the session-state
//! scan transaction pooling runs on every Query and Parse (pgbench's own statements, and a
//! 1 KiB one). Setup is excluded. Per-row cost = (rows_1000 - rows_1) / 999.

use std::hint::black_box;

use bytes::BytesMut;
use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::split_message;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::DataRow;
use pgtier_wire::messages::frontend::{Bind, Query};
use pgtier_wire::session_state::classify_query;

fn data_rows(rows: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(rows * 100);
    for _ in 0..rows {
        DataRow::encode_parts(&mut buf, &[Some(&[b'x'; 89])]);
    }
    // Make the buffer shared up front, as a receive buffer is after its first split.
    drop(buf.split_to(0));
    buf
}

#[library_benchmark]
#[bench::rows_1(data_rows(1))]
#[bench::rows_1000(data_rows(1000))]
fn scan_data_rows(mut buf: BytesMut) -> usize {
    let limits = FrameLimits::default();
    let mut columns = 0;
    while let Ok(Some(frame)) = split_message(&mut buf, &limits) {
        if let Ok(row) = DataRow::decode_frame(&frame.bytes) {
            columns += row.values.len();
        }
    }
    columns
}

#[library_benchmark]
#[bench::one(BytesMut::with_capacity(4096))]
fn encode_query(mut out: BytesMut) -> usize {
    Query {
        sql: black_box(b"SELECT * FROM accounts WHERE id = 42"),
    }
    .encode(&mut out);
    out.len()
}

fn bind_frame() -> BytesMut {
    let values: Vec<[u8; 8]> = (0..10u64).map(u64::to_be_bytes).collect();
    let params: Vec<Option<&[u8]>> = values.iter().map(|v| Some(&v[..])).collect();
    let mut frame = BytesMut::new();
    Bind::encode_parts(&mut frame, b"", b"stmt_1", &[1], &params, &[1]);
    frame
}

#[library_benchmark]
#[bench::ten_params(bind_frame())]
fn decode_bind(frame: BytesMut) -> usize {
    match Bind::decode_frame(&frame) {
        Ok(bind) => bind.params.iter().flatten().map(<[u8]>::len).sum(),
        Err(_) => 0,
    }
}

fn query_body(sql: &str) -> Vec<u8> {
    let mut body = sql.as_bytes().to_vec();
    body.push(0);
    body
}

fn long_query() -> Vec<u8> {
    let columns: Vec<String> = (0..60).map(|n| format!("column_{n:02}")).collect();
    query_body(&format!(
        "SELECT {} FROM some_table WHERE id = $1",
        columns.join(", ")
    ))
}

#[library_benchmark]
#[bench::pgbench_select(query_body("SELECT abalance FROM pgbench_accounts WHERE aid = 46192;"))]
#[bench::pgbench_update(query_body(
    "UPDATE pgbench_accounts SET abalance = abalance + -4043 WHERE aid = 46192;"
))]
#[bench::set_work_mem(query_body("SET work_mem = '64MB'"))]
#[bench::one_kib(long_query())]
fn scan_session_state(body: Vec<u8>) -> u32 {
    classify_query(black_box(&body)).bits()
}

library_benchmark_group!(
    name = wire;
    benchmarks = scan_data_rows, encode_query, decode_bind, scan_session_state
);
main!(library_benchmark_groups = wire);
