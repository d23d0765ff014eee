//! Clients that break the protocol: random bytes, truncated packets, absurd lengths, early
//! hang-ups. Each must get an error (or a close) without hurting other sessions.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::Duration;

use pgtier_tests::fixtures::server_and_proxy;
use pgtier_tests::{Pgtier, rawwire};

const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Deterministic pseudo-random bytes (xorshift64*), so a failure can be replayed.
fn noise(seed: u64, length: usize) -> Vec<u8> {
    let mut state = seed | 1;
    (0..length)
        .map(|_| {
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// A session opened before the attacks must keep working, and new sessions too.
fn assert_healthy(proxy: &Pgtier, survivor: &mut postgres::Client, context: &str) {
    let row = survivor.query_typed_one("SELECT 1", &[]);
    assert_eq!(
        row.map(|r| r.get::<_, i32>(0)).ok(),
        Some(1),
        "survivor broken after {context}"
    );
    let mut fresh = proxy
        .connect("postgres", "postgres")
        .expect("new session after attack");
    assert_eq!(
        fresh
            .query_typed_one("SELECT 2", &[])
            .expect("q")
            .get::<_, i32>(0),
        2,
        "{context}"
    );
}

/// Sends `bytes` on a fresh connection and asserts the proxy closes it promptly; returns
/// what it sent back.
fn send_and_expect_close(proxy: &Pgtier, bytes: &[u8], half_close: bool) -> Vec<rawwire::Message> {
    let mut stream = rawwire::connect(proxy.port(), CLOSE_TIMEOUT).expect("connect");
    // The proxy may close before reading everything; a reset while writing is fine.
    let _ = stream.write_all(bytes);
    if half_close {
        let _ = stream.shutdown(Shutdown::Write);
    }
    let (messages, closed) = rawwire::read_until_closed(&mut stream, CLOSE_TIMEOUT);
    assert!(
        closed,
        "connection still open {CLOSE_TIMEOUT:?} after {} bad bytes",
        bytes.len()
    );
    messages
}

#[test]
fn random_bytes_before_startup_are_rejected() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    for seed in 1..=20u64 {
        let bytes = noise(seed, 64 + (seed as usize) * 97);
        let messages = send_and_expect_close(&proxy, &bytes, false);
        assert!(
            messages.iter().all(|m| m.tag == b'E'),
            "only an ErrorResponse may come back, got {messages:?}"
        );
    }
    assert_healthy(&proxy, &mut survivor, "random startup bytes");
}

#[test]
fn random_bytes_after_login_get_an_error_and_a_close() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    for seed in 100..110u64 {
        let mut session =
            rawwire::login(proxy.port(), "postgres", "postgres", CLOSE_TIMEOUT).expect("login");
        // A message type no frontend sends, with a plausible length, then noise.
        let mut bytes = vec![b'@', 0, 0, 0, 40];
        bytes.extend(noise(seed, 36));
        let _ = session.stream.write_all(&bytes);
        let (messages, closed) = rawwire::read_until_closed(&mut session.stream, CLOSE_TIMEOUT);
        assert!(
            closed,
            "connection kept open after an invalid message; got {messages:?}"
        );
        let error = messages.iter().find(|m| m.tag == b'E');
        assert_eq!(
            error.and_then(|e| e.sqlstate()).as_deref(),
            Some("08P01"),
            "expected a protocol_violation error, got {messages:?}"
        );
    }
    assert_healthy(&proxy, &mut survivor, "random bytes after login");
}

#[test]
fn truncated_startup_packet_is_closed() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    let full = rawwire::startup_message("postgres", "postgres", &[]);
    for cut in [1, 3, 4, 7, full.len() / 2, full.len() - 1] {
        send_and_expect_close(&proxy, &full[..cut], true);
    }
    assert_healthy(&proxy, &mut survivor, "truncated startup packets");
}

#[test]
fn truncated_query_packet_is_closed() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    let query = rawwire::query_message("SELECT 'a fairly long query text to cut in half'");
    for cut in [1, 3, query.len() / 2, query.len() - 1] {
        let mut session =
            rawwire::login(proxy.port(), "postgres", "postgres", CLOSE_TIMEOUT).expect("login");
        let _ = session.stream.write_all(&query[..cut]);
        let _ = session.stream.shutdown(Shutdown::Write);
        let (_, closed) = rawwire::read_until_closed(&mut session.stream, CLOSE_TIMEOUT);
        assert!(
            closed,
            "half-closed connection with a partial message kept open"
        );
    }
    assert_healthy(&proxy, &mut survivor, "truncated queries");
}

#[test]
fn absurd_lengths_are_refused_without_allocating() {
    let (_pg, proxy) =
        server_and_proxy(|config| config.setting("max_client_message_bytes", "1048576"));
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    // A startup packet claiming 2 GiB, and lengths below the minimum.
    for length in [0x7fff_ffffu32, 0xffff_ffff, 0, 3] {
        let mut bytes = length.to_be_bytes().to_vec();
        bytes.extend_from_slice(&196_608i32.to_be_bytes());
        send_and_expect_close(&proxy, &bytes, false);
    }
    // After login: a Query claiming more than max_client_message_bytes.
    let mut session =
        rawwire::login(proxy.port(), "postgres", "postgres", CLOSE_TIMEOUT).expect("login");
    let mut bytes = vec![b'Q'];
    bytes.extend_from_slice(&(64u32 << 20).to_be_bytes());
    bytes.extend_from_slice(b"SELECT ");
    let _ = session.stream.write_all(&bytes);
    let (messages, closed) = rawwire::read_until_closed(&mut session.stream, CLOSE_TIMEOUT);
    assert!(closed, "oversized message did not close the connection");
    assert!(
        messages.iter().any(|m| m.tag == b'E'),
        "expected an ErrorResponse before the close, got {messages:?}"
    );
    assert_healthy(&proxy, &mut survivor, "absurd lengths");
}

#[test]
fn ssl_and_gssenc_requests_are_declined_and_startup_continues() {
    let (_pg, proxy) = server_and_proxy(|config| config);
    for code in [80_877_103i32, 80_877_104] {
        let mut stream = rawwire::connect(proxy.port(), CLOSE_TIMEOUT).expect("connect");
        let mut request = 8u32.to_be_bytes().to_vec();
        request.extend_from_slice(&code.to_be_bytes());
        stream.write_all(&request).expect("request");
        let mut answer = [0u8; 1];
        stream.read_exact(&mut answer).expect("answer");
        assert_eq!(answer[0], b'N', "request {code}");
        stream
            .write_all(&rawwire::startup_message("postgres", "postgres", &[]))
            .expect("startup");
        let first = rawwire::read_message(&mut stream)
            .expect("read")
            .expect("message");
        assert_eq!(first.tag, b'R', "authentication expected after the decline");
    }
}

#[test]
fn a_client_hanging_up_during_login_is_harmless() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    for _ in 0..20 {
        let mut stream = rawwire::connect(proxy.port(), CLOSE_TIMEOUT).expect("connect");
        let _ = stream.write_all(&rawwire::startup_message("postgres", "postgres", &[]));
        drop(stream);
    }
    assert_healthy(&proxy, &mut survivor, "hang-ups during login");
}

/// VmRSS of process `pid` in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[test]
fn a_client_that_stops_reading_does_not_make_the_proxy_buffer_the_result() {
    const RSS_LIMIT_KIB: u64 = 96 * 1024;
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(1));
    let before = rss_kib(proxy.pid());
    let mut reader =
        rawwire::login(proxy.port(), "postgres", "postgres", CLOSE_TIMEOUT).expect("login");
    // About 1 GB of result that the client never reads.
    reader
        .stream
        .write_all(&rawwire::query_message(
            "SELECT repeat('x', 1000) FROM generate_series(1, 1000000)",
        ))
        .expect("send");
    let mut peak = before;
    for _ in 0..30 {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_kib(proxy.pid()));
    }
    assert!(
        peak < RSS_LIMIT_KIB,
        "proxy RSS grew from {before} KiB to {peak} KiB behind a client that does not read"
    );
    // Hanging up must free the server for the next client promptly (query cancelled or drained).
    drop(reader);
    let config = proxy.pg_config("postgres", "postgres");
    let next = pgtier_tests::wait::within(Duration::from_secs(10), move || {
        let mut client = config.connect(postgres::NoTls)?;
        client
            .query_typed_one("SELECT 3", &[])
            .map(|row| row.get::<_, i32>(0))
    });
    assert_eq!(
        next.and_then(Result::ok),
        Some(3),
        "server not freed after the reader left"
    );
}

#[test]
fn writing_to_a_client_that_hung_up_does_not_kill_the_proxy() {
    // A result sent to a closed peer gets EPIPE/ECONNRESET; it must never raise SIGPIPE.
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(2));
    for _ in 0..10 {
        let mut session =
            rawwire::login(proxy.port(), "postgres", "postgres", CLOSE_TIMEOUT).expect("login");
        let _ = session.stream.write_all(&rawwire::query_message(
            "SELECT repeat('y', 100000) FROM generate_series(1, 50)",
        ));
        // Reset (RST) instead of FIN: SO_LINGER 0 via std is not available, so shut both ways.
        let _ = session.stream.shutdown(Shutdown::Both);
        drop(session);
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut client = proxy
        .connect("postgres", "postgres")
        .expect("proxy still alive");
    assert_eq!(
        client
            .query_typed_one("SELECT 1", &[])
            .expect("q")
            .get::<_, i32>(0),
        1
    );
}

#[test]
fn connection_churn_leaves_other_sessions_unharmed() {
    let (_pg, proxy) = server_and_proxy(|config| config.pool_size(4));
    let mut survivor = proxy.connect("postgres", "postgres").expect("survivor");
    let port = proxy.port();
    let churners: Vec<_> = (0..2)
        .map(|thread| {
            std::thread::spawn(move || {
                for round in 0..300u32 {
                    let Ok(mut stream) = rawwire::connect(port, CLOSE_TIMEOUT) else {
                        continue;
                    };
                    match (round + thread) % 3 {
                        // Connect and leave at once.
                        0 => {}
                        // Leave mid-startup.
                        1 => {
                            let startup = rawwire::startup_message("postgres", "postgres", &[]);
                            let _ = stream.write_all(&startup[..startup.len() / 2]);
                        }
                        // Log in, start a query, leave without reading.
                        _ => {
                            drop(stream);
                            if let Ok(mut session) =
                                rawwire::login(port, "postgres", "postgres", CLOSE_TIMEOUT)
                            {
                                let _ = session
                                    .stream
                                    .write_all(&rawwire::query_message("SELECT pg_sleep(0.01)"));
                            }
                            continue;
                        }
                    }
                }
            })
        })
        .collect();
    for _ in 0..50 {
        let row = survivor
            .query_typed_one("SELECT 1", &[])
            .expect("survivor query during churn");
        assert_eq!(row.get::<_, i32>(0), 1);
        std::thread::sleep(Duration::from_millis(10));
    }
    for churner in churners {
        churner.join().expect("churn thread");
    }
    assert_healthy(&proxy, &mut survivor, "connection churn");
}

#[test]
fn tiny_buffers_and_batches_still_deliver_every_byte() {
    // Two 512-byte provided buffers per worker (the ring runs dry: ENOBUFS), two-chunk send
    // batches and a 64 KiB client buffer limit (short sends, back-pressure pauses) — results
    // must still arrive complete and in order for many concurrent clients.
    const CLIENTS: usize = 32;
    const ROUNDS: usize = 20;
    let (_pg, proxy) = server_and_proxy(|config| {
        config
            .pool_size(8)
            .setting("recv_buffer_count", "2")
            .setting("recv_buffer_bytes", "512")
            .setting("send_batch_max_chunks", "2")
            .setting("send_budget_bytes", "1024")
            .setting("client_buffer_limit_bytes", "65536")
    });
    let port = proxy.port();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let failures = runtime.block_on(async move {
        let tasks: Vec<_> = (0..CLIENTS)
            .map(|client_number| {
                tokio::spawn(async move {
                    let config = format!(
                        "host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=30"
                    );
                    let (client, connection) =
                        tokio_postgres::connect(&config, tokio_postgres::NoTls)
                            .await
                            .map_err(|e| format!("connect: {e:?}"))?;
                    tokio::spawn(connection);
                    for round in 0..ROUNDS {
                        let width = 1000 + (client_number * 997 + round * 331) % 30_000;
                        let letter = char::from(b'a' + ((client_number + round) % 26) as u8);
                        let sql = format!(
                            "SELECT n, repeat('{letter}', {width}) FROM generate_series(1, 5) n"
                        );
                        let messages = client
                            .simple_query(&sql)
                            .await
                            .map_err(|e| format!("query: {e:?}"))?;
                        let rows: Vec<_> = messages
                            .iter()
                            .filter_map(|m| match m {
                                tokio_postgres::SimpleQueryMessage::Row(row) => Some(row),
                                _ => None,
                            })
                            .collect();
                        if rows.len() != 5 {
                            return Err(format!("{} rows instead of 5", rows.len()));
                        }
                        for (index, row) in rows.iter().enumerate() {
                            let expected_n = (index + 1).to_string();
                            let value = row.get(1).unwrap_or_default();
                            if row.get(0) != Some(expected_n.as_str())
                                || value.len() != width
                                || value.chars().any(|c| c != letter)
                            {
                                return Err(format!("row {index} of round {round} is corrupt"));
                            }
                        }
                    }
                    Ok::<_, String>(())
                })
            })
            .collect();
        let mut failures = Vec::new();
        for task in tasks {
            match tokio::time::timeout(Duration::from_secs(120), task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(message))) => failures.push(message),
                Ok(Err(join_error)) => failures.push(join_error.to_string()),
                Err(_) => failures.push("timed out".to_string()),
            }
        }
        failures
    });
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        failures.first()
    );
}
