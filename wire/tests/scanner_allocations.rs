//! Proves the hot path allocates nothing: splitting DataRows off a receive buffer, decoding
//! them, measuring runs, encoding Query/DataRow into a buffer with room, classifying the
//! session-state effects of Query/Parse bodies and whether a text is read-only, counted by a global allocator that tallies
//! every allocation on this thread.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::BytesMut;
use pgtier_wire::framing::{scan_run, split_message, split_run};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::DataRow;
use pgtier_wire::messages::frontend::Query;
use pgtier_wire::read_only::{self, Access};
use pgtier_wire::session_state::{Effects, StateScanner, classify_parse};
use pgtier_wire::{CodeSet, FrameLimits};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// A stream of `rows` DataRows of 100 bytes each (header included).
fn data_rows(rows: usize) -> BytesMut {
    let mut buf = BytesMut::with_capacity(rows * 100 + 64);
    let value = [b'x'; 89];
    for _ in 0..rows {
        DataRow::encode_parts(&mut buf, &[Some(&value)]);
    }
    assert_eq!(buf.len(), rows * 100);
    buf
}

#[test]
fn scanner_allocates_nothing_per_data_row() {
    const ROWS: usize = 10_000;
    let limits = FrameLimits::default();
    let mut buf = data_rows(ROWS + 1);
    // Warm-up: the first split turns the Vec-backed buffer into a shared one (one allocation).
    drop(split_message(&mut buf, &limits).unwrap().unwrap());
    let before = allocations();
    let mut bytes = 0;
    for _ in 0..ROWS {
        let frame = split_message(&mut buf, &limits).unwrap().unwrap();
        let row = DataRow::decode_frame(&frame.bytes).unwrap();
        bytes += row
            .values
            .iter()
            .map(|v| v.map_or(0, <[u8]>::len))
            .sum::<usize>();
    }
    let after = allocations();
    assert_eq!(bytes, ROWS * 89);
    assert_eq!(
        after - before,
        0,
        "allocations while scanning {ROWS} DataRows"
    );
}

#[test]
fn run_scan_and_encoding_allocate_nothing() {
    let limits = FrameLimits::default();
    let mut buf = data_rows(1001);
    drop(split_message(&mut buf, &limits).unwrap().unwrap());
    let mut out = BytesMut::with_capacity(1 << 20);
    let stop = CodeSet::of(b"ZE");
    let before = allocations();
    let run = scan_run(&buf, &stop, &limits).unwrap();
    let chunk = split_run(&mut buf, run.len);
    for _ in 0..1000 {
        Query {
            sql: b"SELECT * FROM accounts WHERE id = 1",
        }
        .encode(&mut out);
        DataRow::encode_parts(&mut out, &[Some(b"1"), None]);
    }
    let after = allocations();
    assert_eq!(run.messages, 1000);
    assert_eq!(chunk.len(), 100_000);
    assert_eq!(after - before, 0);
}

#[test]
fn session_state_scanning_allocates_nothing() {
    let mut sql = b"SELECT $tag$ x $tag$, E'\\'', \"q\"\"i\" /* /* */ */ FROM t; ".repeat(100);
    sql.extend_from_slice(b"SET work_mem = '1MB'; LISTEN chan\0");
    let parse = b"s1\0SELECT pg_advisory_lock($1)\0\0\x01\0\0\0\x17";
    let before = allocations();
    let mut scanner = StateScanner::query();
    for chunk in sql.chunks(7) {
        scanner.feed(chunk);
    }
    let query_effects = scanner.finish();
    let parse_effects = classify_parse(parse);
    let after = allocations();
    assert_eq!(query_effects, Effects::SET | Effects::LISTEN);
    assert_eq!(
        parse_effects,
        Effects::NAMED_STATEMENT | Effects::ADVISORY_LOCK
    );
    assert_eq!(after - before, 0);
}

#[test]
fn read_only_classification_allocates_nothing() {
    let mut sql =
        b"WITH x AS (SELECT lower(b), $tag$ x $tag$, E'\\'' FROM t /* /* */ */) ".to_vec();
    sql.extend_from_slice(
        &b"SELECT count(*) FROM x WHERE a IN (SELECT a::numeric(10,2) FROM t); ".repeat(50),
    );
    sql.extend_from_slice(b"SHOW work_mem\0");
    let before = allocations();
    let read = read_only::classify(&sql);
    let write =
        read_only::classify(b"SELECT abalance FROM pgbench_accounts WHERE aid = nextval('s')\0");
    let after = allocations();
    assert_eq!((read, write), (Access::ReadOnly, Access::Write));
    assert_eq!(after - before, 0);
}
