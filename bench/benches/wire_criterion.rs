//! Wall-clock throughput of the wire codec's hot paths: scanning a stream of 100-byte
//! DataRows (messages/s and bytes/s), measuring a forwardable run, decoding a Bind with 10
//! parameters and encoding a Query.

use std::hint::black_box;

use bytes::BytesMut;
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use pgtier_wire::framing::{scan_run, split_message};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::DataRow;
use pgtier_wire::messages::frontend::{Bind, Query};
use pgtier_wire::{CodeSet, FrameLimits};

const ROWS: usize = 1000;
const ROW_LEN: usize = 100;

/// `rows` DataRows of exactly 100 bytes each (one 89-byte column).
fn data_rows(rows: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(rows * ROW_LEN);
    for _ in 0..rows {
        DataRow::encode_parts(&mut buf, &[Some(&[b'x'; 89])]);
    }
    buf
}

fn scan_and_decode(mut buf: BytesMut) -> usize {
    let limits = FrameLimits::default();
    let mut columns = 0;
    while let Ok(Some(frame)) = split_message(&mut buf, &limits) {
        if let Ok(row) = DataRow::decode_frame(&frame.bytes) {
            columns += row.values.len();
        }
    }
    columns
}

fn bench_scan(c: &mut Criterion) {
    let stream = data_rows(ROWS);
    let mut group = c.benchmark_group("scan_data_rows_100B");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.bench_function("split_decode/messages", |b| {
        b.iter_batched(
            || stream.clone(),
            |buf| black_box(scan_and_decode(buf)),
            BatchSize::SmallInput,
        )
    });
    group.throughput(Throughput::Bytes((ROWS * ROW_LEN) as u64));
    group.bench_function("split_decode/bytes", |b| {
        b.iter_batched(
            || stream.clone(),
            |buf| black_box(scan_and_decode(buf)),
            BatchSize::SmallInput,
        )
    });
    let stop = CodeSet::of(b"ZE");
    let limits = FrameLimits::default();
    group.bench_function("scan_run/bytes", |b| {
        b.iter(|| black_box(scan_run(black_box(&stream), &stop, &limits)))
    });
    group.finish();
}

fn bench_bind(c: &mut Criterion) {
    let values: Vec<[u8; 8]> = (0..10u64).map(u64::to_be_bytes).collect();
    let params: Vec<Option<&[u8]>> = values.iter().map(|v| Some(&v[..])).collect();
    let mut frame = BytesMut::new();
    Bind::encode_parts(&mut frame, b"", b"stmt_1", &[1], &params, &[1]);
    let mut group = c.benchmark_group("bind_10_params");
    group.throughput(Throughput::Elements(1));
    group.bench_function("decode", |b| {
        b.iter(|| {
            let bind = Bind::decode_frame(black_box(&frame)).ok();
            black_box(bind.map(|b| b.params.iter().flatten().map(<[u8]>::len).sum::<usize>()))
        })
    });
    group.finish();
}

fn bench_query_encode(c: &mut Criterion) {
    let mut out = BytesMut::with_capacity(1 << 16);
    let mut group = c.benchmark_group("query_encode");
    group.throughput(Throughput::Elements(1));
    group.bench_function("encode", |b| {
        b.iter(|| {
            out.clear();
            Query {
                sql: black_box(b"SELECT * FROM accounts WHERE id = 42"),
            }
            .encode(&mut out);
            black_box(out.len())
        })
    });
    group.finish();
}

criterion_group!(benches, bench_scan, bench_bind, bench_query_encode);
criterion_main!(benches);
