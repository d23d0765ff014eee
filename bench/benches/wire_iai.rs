//! Instruction counts (callgrind) for the wire codec's hot paths: per DataRow scanned
//! (split + decode), per Query encoded, per Bind(10 params) decoded. Setup is excluded.
//! Per-row cost = (rows_1000 - rows_1) / 999.

use std::hint::black_box;

use bytes::BytesMut;
use iai_callgrind::{library_benchmark, library_benchmark_group, main};
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::split_message;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::DataRow;
use pgtier_wire::messages::frontend::{Bind, Query};

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

library_benchmark_group!(name = wire; benchmarks = scan_data_rows, encode_query, decode_bind);
main!(library_benchmark_groups = wire);
