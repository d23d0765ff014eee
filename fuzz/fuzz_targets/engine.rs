//! The whole session engine under arbitrary client and server byte streams and events: a
//! few clients and servers, driven through the kernel-less harness. The servers are the
//! harness's scripted PostgreSQL, except that the fuzzer may also inject any bytes as a
//! server's output or cut a connection at any moment.
//!
//! Checked after every step: no panic; the engine's own invariants hold (a server in its
//! pool's idle list owes nothing and carries no client's state; a linked client and its
//! server point at each other). At the end, after everyone left and an immediate shutdown,
//! every slot and every budget count is back to zero.

#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use pgtier_engine::testing::{self, Harness};
use pgtier_engine::{ClientId, ServerId};

const MODES: [&str; 5] = [
    "pool_mode = \"transaction\"\ndefault_pool_size = 2\nquery_wait_timeout = 2",
    "pool_mode = \"session\"\ndefault_pool_size = 2\nquery_wait_timeout = 2",
    // A tiny statement LRU, so evictions and re-preparing happen all the time.
    "pool_mode = \"transaction\"\ndefault_pool_size = 2\nquery_wait_timeout = 2\n\
     max_prepared_statements = 2",
    // Client TLS offered (prefer): SSLRequests, direct-TLS openings and garbage records.
    "pool_mode = \"transaction\"\ndefault_pool_size = 2\nquery_wait_timeout = 2\n\
     client_tls_sslmode = \"prefer\"\nclient_tls_key_file = \"/k\"\nclient_tls_cert_file = \"/c\"",
    // A reader entry (primary plus replicas): reads go to replicas, wait, or fall back.
    "pool_mode = \"transaction\"\ndefault_pool_size = 2\nquery_wait_timeout = 2\nreader",
];

/// SSLRequest.
const SSL_REQUEST: &[u8] = &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// Canned client messages the fuzzer can pick, so sessions get deep quickly.
fn canned(pick: u8) -> Vec<u8> {
    match pick % 24 {
        0 => testing::startup(&[("user", "alice"), ("database", "db")]),
        1 => testing::query("SELECT 1"),
        2 => testing::query("BEGIN"),
        3 => testing::query("COMMIT"),
        4 => testing::query("SET work_mem = '1MB'"),
        5 => testing::query("FAIL"),
        6 => testing::query("COPY t FROM STDIN"),
        7 => [testing::parse("s1", "SELECT 1"), testing::sync()].concat(),
        8 => [testing::bind("s1"), testing::execute(), testing::sync()].concat(),
        9 => testing::terminate(),
        10 => testing::query("FATAL"),
        11 => testing::frame(b'd', b"1\n"),
        12 => [testing::parse("s2", "SELECT 2"), testing::sync()].concat(),
        13 => [testing::close(b'S', "s1"), testing::sync()].concat(),
        14 => [testing::describe(b'S', "s2"), testing::sync()].concat(),
        // An error in the middle of a pipeline: what follows is skipped until Sync.
        15 => [
            testing::parse("s3", "SELECT 3"),
            testing::parse("bad", "FAIL"),
            testing::bind("s1"),
            testing::execute(),
            testing::close(b'S', "s3"),
            testing::sync(),
        ]
        .concat(),
        16 => testing::query("DEALLOCATE ALL"),
        17 => testing::query("DISCARD ALL"),
        18 => testing::query("LISTEN things"),
        19 => testing::query("UNLISTEN *"),
        20 => [
            testing::parse("", "SELECT 1"),
            testing::bind(""),
            testing::execute(),
            testing::sync(),
        ]
        .concat(),
        21 => [testing::bind("s2"), testing::execute(), testing::sync()].concat(),
        22 => SSL_REQUEST.to_vec(),
        // The start of a TLS record: a direct-TLS opening whose handshake the fuzzer's raw
        // bytes continue.
        _ => vec![0x16, 0x03, 0x01, 0x00, 0x40, 0x01],
    }
}

struct Input<'a> {
    data: &'a [u8],
}

impl Input<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.data.split_first()?;
        self.data = rest;
        Some(first)
    }

    fn bytes(&mut self, max: usize) -> Vec<u8> {
        let len = usize::from(self.byte().unwrap_or(0)) % (max + 1);
        let take = len.min(self.data.len());
        let (head, rest) = self.data.split_at(take);
        self.data = rest;
        head.to_vec()
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input { data };
    let mode = MODES[usize::from(input.byte().unwrap_or(0)) % MODES.len()];
    let reads = testing::CyclingReads::default();
    let in_flight = std::sync::Arc::clone(&reads.in_flight);
    let mut h = if let Some(settings) = mode.strip_suffix("\nreader") {
        Harness::with_routing(&testing::reader_config(settings), Box::new(reads))
    } else if mode.contains("client_tls_sslmode") {
        Harness::with_tls(
            &testing::config(mode),
            pgtier_engine::userlist::UserList::new(),
            testing::client_tls(pgtier_core::config::SslMode::Prefer),
        )
    } else {
        Harness::new(&testing::config(mode))
    };
    let mut clients: Vec<ClientId> = Vec::new();
    while let Some(op) = input.byte() {
        let pick = input.byte().unwrap_or(0);
        match op % 10 {
            0 if clients.len() < 6 => clients.push(h.accept()),
            1 | 2 => {
                if let Some(&id) = clients.get(usize::from(pick) % clients.len().max(1)) {
                    let canned_pick = input.byte().unwrap_or(0);
                    h.client_sends(id, &canned(canned_pick));
                }
            }
            3 => {
                if let Some(&id) = clients.get(usize::from(pick) % clients.len().max(1)) {
                    let raw = input.bytes(64);
                    h.client_sends(id, &raw);
                }
            }
            4 => {
                if let Some(&id) = clients.get(usize::from(pick) % clients.len().max(1)) {
                    h.client_leaves(id);
                }
            }
            5 => {
                let servers: Vec<ServerId> = h.live_servers();
                if let Some(&id) = servers.get(usize::from(pick) % servers.len().max(1)) {
                    let raw = input.bytes(64);
                    h.server_sends(id, &raw);
                }
            }
            6 => {
                let servers: Vec<ServerId> = h.live_servers();
                if let Some(&id) = servers.get(usize::from(pick) % servers.len().max(1)) {
                    h.server_gone(id);
                }
            }
            7 => h.advance(Duration::from_millis(u64::from(pick) * 20)),
            8 => {
                let servers: Vec<ServerId> = h.live_servers();
                if let Some(&id) = servers.get(usize::from(pick) % servers.len().max(1)) {
                    let answer = h.backend(id).finish_running();
                    if !answer.is_empty() {
                        h.server_sends(id, &answer);
                    }
                }
            }
            _ => h.clients_read = pick % 4 != 0,
        }
        if let Err(broken) = h.engine.check_invariants() {
            panic!("invariant broken: {broken}");
        }
    }
    h.clients_read = true;
    for id in clients {
        h.client_leaves(id);
    }
    h.engine.handle_command(
        h.now,
        pgtier_engine::Command::Shutdown(pgtier_engine::ShutdownMode::Immediate),
    );
    h.pump();
    h.advance(Duration::from_secs(6));
    assert_eq!(h.engine.client_count(), 0, "a client slot was not given back");
    assert_eq!(h.engine.server_count(), 0, "a server slot was not given back");
    if let Err(broken) = h.engine.check_budgets_released() {
        panic!("{broken}");
    }
    assert_eq!(
        in_flight.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a read's replica ticket was not given back"
    );
});

