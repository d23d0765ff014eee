//! The io_uring traps, each replayed over the fake ring against the real driver and engine:
//! short sends, resets, cancellation during teardown, stale completions after slot reuse,
//! reordered completions, ENOBUFS, a multishot accept ending without MORE, a shard dropped
//! with operations in flight; and over the real ring: a send to a closed peer returns EPIPE
//! instead of raising SIGPIPE.

use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use pgtier_core::config::Config;
use pgtier_engine::random::SeededRandom;
use pgtier_engine::services::{NoConsole, NoRouting};
use pgtier_engine::testing::{query, startup};
use pgtier_engine::userlist::UserList;
use pgtier_engine::{Engine, EngineParts, IpOnly};

use crate::driver::{Shard, ShardParts};
use crate::io::fake::{FakeRing, Pending};
use crate::io::op_key::OpKind;
use crate::io::ring::{Op, Ring};
use crate::mailbox::Mailbox;

const CONFIG: &str = r#"
[pgtier]
listen_port = 6432
auth_type = "trust"
pool_mode = "transaction"
default_pool_size = 2
client_buffer_limit_bytes = 262144
[databases.db]
host = "127.0.0.1"
port = 5432
"#;

/// A shard over the fake ring with a listener, so clients arrive through its accept.
fn test_shard() -> Shard<FakeRing> {
    let config = Arc::new(Config::from_str(CONFIG, "/tmp/trap.toml").expect("config"));
    let engine = Engine::new(EngineParts {
        shard: 0,
        config: config.clone(),
        users: Arc::new(UserList::new()),
        shared: Arc::new(pgtier_engine::Shared::new(1)),
        routing: Box::new(NoRouting),
        console: Box::new(NoConsole),
        resolver: Box::new(IpOnly),
        random: Box::new(SeededRandom::new(7)),
        now: Instant::now(),
        wall_now: SystemTime::now(),
        tls: Default::default(),
    });
    let parts = ShardParts {
        index: 0,
        ring: FakeRing::new(),
        engine,
        mailboxes: vec![Arc::new(Mailbox::new(16).expect("eventfd"))],
        listeners: vec![crate::listen::ShardListener {
            fd: socket_fd(),
            kind: crate::listen::ListenerKind::Tcp,
        }],
        panic_after_accepts: None,
    };
    let mut shard = Shard::new(parts, &config);
    shard.start();
    shard
}

/// A real socket fd for a fake client (setsockopt on it must not fail loudly).
fn socket_fd() -> i32 {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.into_raw_fd()
}

fn is_kind(kind: OpKind) -> impl Fn(&Pending) -> bool {
    move |p| p.key.kind == kind
}

fn turn(shard: &mut Shard<FakeRing>) {
    shard.turn(false).expect("turn");
}

/// A client connects through the multishot accept.
fn accept(shard: &mut Shard<FakeRing>) {
    let accept = shard
        .ring()
        .take(is_kind(OpKind::Accept))
        .expect("accept armed");
    let fd = socket_fd();
    shard.ring().complete_multishot(&accept, fd);
    shard.ring().pending.push(accept);
    turn(shard);
}

fn server_login_bytes() -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(pgtier_engine::testing::frame(b'R', &0u32.to_be_bytes()));
    out.extend(pgtier_engine::testing::frame(
        b'S',
        b"server_version\x0015.0\0",
    ));
    out.extend(pgtier_engine::testing::frame(
        b'S',
        b"client_encoding\0UTF8\0",
    ));
    let mut key = 4242u32.to_be_bytes().to_vec();
    key.extend_from_slice(&99u32.to_be_bytes());
    out.extend(pgtier_engine::testing::frame(b'K', &key));
    out.extend(pgtier_engine::testing::frame(b'Z', b"I"));
    out
}

/// Accepts a client and logs it in through one fake server; returns the bytes the client
/// was sent, with sends completing at most `send_limit` bytes at a time.
fn logged_in_client(shard: &mut Shard<FakeRing>, send_limit: usize) -> Vec<u8> {
    accept(shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv armed");
    shard
        .ring()
        .deliver(recv, &startup(&[("user", "alice"), ("database", "db")]));
    turn(shard);
    let connect = shard
        .ring()
        .take(is_kind(OpKind::ServerConnect))
        .expect("connect");
    shard.ring().complete(connect, 0, false);
    turn(shard);
    let startup = shard
        .ring()
        .take(is_kind(OpKind::ServerSend))
        .expect("startup sent");
    shard.ring().accept_send(startup, usize::MAX);
    let server_recv = shard
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    shard.ring().deliver(server_recv, &server_login_bytes());
    turn(shard);
    let mut received = Vec::new();
    while let Some(send) = shard.ring().take(is_kind(OpKind::ClientSend)) {
        received.extend(shard.ring().accept_send(send, send_limit));
        turn(shard);
    }
    received
}

#[test]
fn short_sends_resume_at_the_right_offset() {
    let mut whole = test_shard();
    let expected = logged_in_client(&mut whole, usize::MAX);
    let mut short = test_shard();
    let received = logged_in_client(&mut short, 7);
    assert!(
        expected.starts_with(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]),
        "AuthenticationOk first"
    );
    assert_eq!(received.len(), expected.len());
    // The BackendKeyData is pgtier's own (random), so compare around it.
    let key_at = expected.iter().position(|b| *b == b'K').expect("key");
    assert_eq!(received[..key_at], expected[..key_at]);
    assert_eq!(received[key_at + 13..], expected[key_at + 13..]);
}

#[test]
fn a_reset_closes_the_client_and_frees_its_slot() {
    let mut shard = test_shard();
    logged_in_client(&mut shard, usize::MAX);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv armed while idle");
    shard.ring().complete(recv, -libc::ECONNRESET, false);
    turn(&mut shard);
    assert_eq!(shard.engine().client_count(), 0, "slot freed");
    assert_eq!(
        shard.engine().server_count(),
        1,
        "the clean server stays pooled"
    );
}

#[test]
fn teardown_frees_a_slot_only_after_its_cancelled_receive_completes() {
    let mut shard = test_shard();
    accept(&mut shard);
    // Terminate before startup: the engine closes the client at once, with its receive in
    // flight; the fake ring answers the AsyncCancel with ECANCELED, reaped next turn.
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv");
    shard.ring().deliver(recv, b"X\0\0\0\x04");
    turn(&mut shard);
    assert_eq!(
        shard.engine().client_count(),
        1,
        "not freed while the re-armed receive is the kernel's"
    );
    turn(&mut shard);
    assert_eq!(
        shard.engine().client_count(),
        0,
        "freed once the cancelled recv completed"
    );
}

#[test]
fn a_stale_completion_after_slot_reuse_is_dropped() {
    let mut shard = test_shard();
    accept(&mut shard);
    let old_recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv");
    shard.ring().complete(old_recv, 0, false);
    turn(&mut shard);
    assert_eq!(shard.engine().client_count(), 0);
    accept(&mut shard);
    let new_recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv");
    assert_eq!(new_recv.key.index, old_recv.key.index, "slot reused");
    assert_ne!(new_recv.key.generation, old_recv.key.generation);
    shard.ring().pending.push(new_recv);
    // A late completion carrying the old generation (e.g. reordered by the kernel).
    shard.ring().complete(old_recv, 5, false);
    turn(&mut shard);
    assert_eq!(
        shard.engine().client_count(),
        1,
        "the new client is untouched"
    );
    assert!(shard.ring().has(is_kind(OpKind::ClientRecv)));
}

#[test]
fn reordered_completions_across_sockets_are_handled() {
    let mut shard = test_shard();
    accept(&mut shard);
    accept(&mut shard);
    let first = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv 1");
    let second = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv 2");
    shard
        .ring()
        .deliver(first, &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    shard.ring().complete(second, -libc::ECONNRESET, false);
    shard.ring().reorder_ready();
    turn(&mut shard);
    assert_eq!(shard.engine().client_count(), 1, "the reset one is gone");
    let answer = shard
        .ring()
        .take(is_kind(OpKind::ClientSend))
        .expect("SSL answer");
    assert_eq!(shard.ring().accept_send(answer, usize::MAX), b"N");
}

#[test]
fn enobufs_rearms_the_receive() {
    let mut shard = test_shard();
    accept(&mut shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv");
    shard.ring().complete(recv, -libc::ENOBUFS, false);
    turn(&mut shard);
    assert_eq!(shard.engine().client_count(), 1);
    assert!(shard.ring().has(is_kind(OpKind::ClientRecv)), "re-armed");
}

#[test]
fn a_multishot_accept_is_rearmed_when_more_is_missing() {
    let mut shard = test_shard();
    let accept = shard.ring().take(is_kind(OpKind::Accept)).expect("accept");
    // The kernel ends the multishot (e.g. ENFILE): it must be submitted again.
    shard.ring().complete(accept, -libc::ENFILE, false);
    turn(&mut shard);
    assert!(shard.ring().has(is_kind(OpKind::Accept)), "re-armed");
}

#[test]
fn a_multishot_accept_ended_by_a_stopped_listener_is_not_rearmed() {
    let mut shard = test_shard();
    let accept = shard.ring().take(is_kind(OpKind::Accept)).expect("accept");
    // The signal loop stopped the listener (`TcpStops`) before the shutdown reached this
    // shard: re-arming would only fail again, in a loop, until the mailbox is read.
    shard.ring().complete(accept, -libc::EINVAL, false);
    turn(&mut shard);
    assert!(
        !shard.ring().has(is_kind(OpKind::Accept)),
        "an accept on a socket that no longer listens is not submitted again"
    );
}

#[test]
fn an_error_is_sent_before_the_socket_closes() {
    let mut shard = test_shard();
    accept(&mut shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv");
    shard.ring().deliver(
        recv,
        &startup(&[("user", "alice"), ("database", "nowhere")]),
    );
    turn(&mut shard);
    let send = shard
        .ring()
        .take(is_kind(OpKind::ClientSend))
        .expect("the error");
    assert_eq!(
        shard.engine().client_count(),
        1,
        "not freed while its error is in flight"
    );
    let bytes = shard.ring().accept_send(send, usize::MAX);
    assert!(bytes.windows(5).any(|w| w == b"3D000"));
    turn(&mut shard);
    turn(&mut shard);
    assert_eq!(
        shard.engine().client_count(),
        0,
        "freed once the error was sent"
    );
}

/// A logged-in client whose query went to its server, which has not answered yet.
fn query_sent_to_its_server(shard: &mut Shard<FakeRing>, sql: &str) {
    logged_in_client(shard, usize::MAX);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv");
    shard.ring().deliver(recv, &query(sql));
    turn(shard);
    let send = shard
        .ring()
        .take(is_kind(OpKind::ServerSend))
        .expect("query sent");
    shard.ring().accept_send(send, usize::MAX);
    turn(shard);
}

#[test]
fn a_slow_client_pauses_reading_from_its_server() {
    let mut shard = test_shard();
    query_sent_to_its_server(&mut shard, "SELECT huge");
    // One DataRow of 1 GiB - 1, streamed in receive-sized pieces; the client never reads.
    let mut header = vec![b'D'];
    header.extend_from_slice(&((1u32 << 30) - 1).to_be_bytes());
    let chunk = vec![b'x'; 64 * 1024];
    let mut delivered = 0usize;
    let mut first = true;
    loop {
        // A turn more when none is armed: the multishot cancelled after the first, full
        // provided buffer is reaped before the own buffer's receive is armed.
        let recv = match shard.ring().take(is_kind(OpKind::ServerRecv)) {
            Some(recv) => recv,
            None => {
                turn(&mut shard);
                match shard.ring().take(is_kind(OpKind::ServerRecv)) {
                    Some(recv) => recv,
                    None => break,
                }
            }
        };
        let piece = if first {
            [header.as_slice(), &chunk].concat()
        } else {
            chunk.clone()
        };
        first = false;
        // The first piece fills a provided buffer; the rest streams into the own buffer.
        let len = match recv.op {
            Op::Recv { len, .. } => len as usize,
            Op::RecvMulti { .. } => 4096,
            _ => panic!("a receive"),
        };
        delivered += piece.len().min(len);
        shard.ring().deliver(recv, &piece);
        turn(&mut shard);
        assert!(
            delivered < 4 * 262_144,
            "still reading after {delivered} bytes"
        );
    }
    assert!(
        delivered > 262_144,
        "paused only past the limit ({delivered})"
    );
    // The client reads what is queued: the server is read again.
    while let Some(send) = shard.ring().take(is_kind(OpKind::ClientSend)) {
        shard.ring().accept_send(send, usize::MAX);
        turn(&mut shard);
        if shard.ring().has(is_kind(OpKind::ServerRecv)) {
            break;
        }
    }
    assert!(
        shard.ring().has(is_kind(OpKind::ServerRecv)),
        "reading resumed"
    );
}

/// A server's small answers come through the multishot; a large result fills a provided
/// buffer, and the rest is read into the server's own buffer, each receive armed after the
/// pass's sends (the client's bytes go out first); once the stream ends, the multishot again.
#[test]
fn a_large_result_switches_the_server_to_its_own_buffer_and_back() {
    let mut shard = test_shard();
    query_sent_to_its_server(&mut shard, "SELECT big");
    // One DataRow whose bytes come as a full provided buffer, one own receive of 64 KiB, and
    // a short tail with the answer's end.
    let (first, second, tail) = (4096usize, 65_536usize, 40usize);
    let mut stream = vec![b'D'];
    stream.extend_from_slice(
        &u32::try_from(first + second + tail - 1)
            .unwrap()
            .to_be_bytes(),
    );
    stream.resize(first + second + tail, b'x');
    stream.extend(pgtier_engine::testing::frame(b'C', b"SELECT 1\0"));
    stream.extend(pgtier_engine::testing::frame(b'Z', b"I"));
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    assert!(matches!(recv.op, Op::RecvMulti { .. }), "{recv:?}");
    shard.ring().deliver(recv, &stream[..first]);
    turn(&mut shard);
    turn(&mut shard);
    let to_client = shard
        .ring()
        .take(is_kind(OpKind::ClientSend))
        .expect("the first piece goes on");
    shard.ring().accept_send(to_client, usize::MAX);
    turn(&mut shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    let Op::Recv { len, .. } = recv.op else {
        panic!("the own buffer after a full provided one: {recv:?}")
    };
    assert!(len as usize >= second, "{len}");
    shard.ring().deliver(recv, &stream[first..first + second]);
    turn(&mut shard);
    let order: Vec<OpKind> = shard.ring().pending.iter().map(|p| p.key.kind).collect();
    let position = |kind| order.iter().position(|k| *k == kind);
    assert!(
        position(OpKind::ClientSend) < position(OpKind::ServerRecv)
            && position(OpKind::ClientSend).is_some(),
        "the client's send goes before the server's receive is armed again: {order:?}"
    );
    let to_client = shard
        .ring()
        .take(is_kind(OpKind::ClientSend))
        .expect("the second piece goes on");
    shard.ring().accept_send(to_client, usize::MAX);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    assert!(
        matches!(recv.op, Op::Recv { .. }),
        "still streaming: {recv:?}"
    );
    shard.ring().deliver(recv, &stream[first + second..]);
    turn(&mut shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    assert!(
        matches!(recv.op, Op::RecvMulti { .. }),
        "the multishot once the stream ended: {recv:?}"
    );
    let mut received = Vec::new();
    while let Some(send) = shard.ring().take(is_kind(OpKind::ClientSend)) {
        received.extend(shard.ring().accept_send(send, usize::MAX));
        turn(&mut shard);
    }
    assert!(
        received.ends_with(&[b'Z', 0, 0, 0, 5, b'I']),
        "the answer's end reached the client"
    );
}

#[test]
fn dropping_a_shard_cancels_what_is_in_flight_and_waits_for_it() {
    let mut shard = test_shard();
    logged_in_client(&mut shard, usize::MAX);
    assert!(shard.ring().has(is_kind(OpKind::ClientRecv)));
    // The fake ring answers every AsyncCancel at once; the drop must reap those answers.
    drop(shard);
}

#[test]
fn random_peer_behaviour_never_panics_the_shard() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut shard = test_shard();
    for _ in 0..3000 {
        match next() % 8 {
            0 if shard.engine().client_count() < 32 => accept(&mut shard),
            1 | 2 => {
                if let Some(recv) = shard.ring().take(|p| matches!(p.op, Op::Recv { .. })) {
                    let len = (next() % 40) as usize;
                    let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    if next() % 3 == 0 {
                        // Sometimes a valid startup, so sessions get further.
                        bytes = startup(&[("user", "alice"), ("database", "db")]);
                    }
                    shard.ring().deliver(recv, &bytes);
                }
            }
            3 => {
                if let Some(send) = shard
                    .ring()
                    .take(|p| matches!(p.op, Op::Send { .. } | Op::SendMsg { .. }))
                {
                    let limit = (next() % 64) as usize + 1;
                    shard.ring().accept_send(send, limit);
                }
            }
            4 => {
                let victim = shard
                    .ring()
                    .take(|p| !matches!(p.key.kind, OpKind::MailboxRead | OpKind::Accept));
                if let Some(any) = victim {
                    let errno = [
                        libc::ECONNRESET,
                        libc::ENOBUFS,
                        libc::EPIPE,
                        libc::ECONNREFUSED,
                    ];
                    shard
                        .ring()
                        .complete(any, -errno[(next() % 4) as usize], false);
                }
            }
            5 => {
                if let Some(connect) = shard.ring().take(is_kind(OpKind::ServerConnect)) {
                    shard.ring().complete(connect, 0, false);
                }
            }
            6 => shard.ring().reorder_ready(),
            _ => {}
        }
        turn(&mut shard);
    }
    // Everyone goes away: every slot must come back once the ring answers.
    for _ in 0..2000 {
        let any = shard
            .ring()
            .take(|p| !matches!(p.key.kind, OpKind::MailboxRead | OpKind::Accept));
        match any {
            Some(op) => shard.ring().complete(op, -libc::ECONNRESET, false),
            None => break,
        }
        turn(&mut shard);
    }
    assert_eq!(
        shard.engine().client_count(),
        0,
        "every client slot came back"
    );
}

#[test]
fn a_send_to_a_closed_peer_is_epipe_not_sigpipe() {
    let Ok(mut ring) =
        crate::io::uring::UringRing::new(8, crate::io::uring::RecvBuffers { count: 4, size: 64 })
    else {
        return; // io_uring unavailable here: covered by the startup error test instead.
    };
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the array.
    let made = unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) };
    assert_eq!(made, 0);
    // SAFETY: closing our own peer end.
    unsafe { libc::close(fds[1]) };
    let data = b"hello";
    let key = crate::io::op_key::OpKey::new(OpKind::ClientSend, 0, 0);
    // SAFETY: `data` is a static that outlives the completion reaped below.
    unsafe {
        ring.push(
            key,
            Op::Send {
                fd: fds[0],
                buf: data.as_ptr(),
                len: 5,
            },
        )
    }
    .expect("push");
    ring.submit_and_wait(true, Some(std::time::Duration::from_secs(2)))
        .expect("submit");
    let mut out = Vec::new();
    ring.reap(&mut out);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].result, -libc::EPIPE);
    // SAFETY: closing our own fd.
    unsafe { libc::close(fds[0]) };
}

/// Two shards over fake rings sharing budgets and mailboxes, one server at most per pool.
fn two_shards() -> (Shard<FakeRing>, Shard<FakeRing>) {
    let text = CONFIG.replace("default_pool_size = 2", "default_pool_size = 1");
    let config = Arc::new(Config::from_str(&text, "/tmp/trap.toml").expect("config"));
    let shared = Arc::new(pgtier_engine::Shared::new(2));
    let mailboxes = vec![
        Arc::new(Mailbox::new(16).expect("eventfd")),
        Arc::new(Mailbox::new(16).expect("eventfd")),
    ];
    let shard = |index: usize| {
        let engine = Engine::new(EngineParts {
            shard: index,
            config: config.clone(),
            users: Arc::new(UserList::new()),
            shared: shared.clone(),
            routing: Box::new(NoRouting),
            console: Box::new(NoConsole),
            resolver: Box::new(IpOnly),
            random: Box::new(SeededRandom::new(7 + index as u64)),
            now: Instant::now(),
            wall_now: SystemTime::now(),
            tls: Default::default(),
        });
        let parts = ShardParts {
            index,
            ring: FakeRing::new(),
            engine,
            mailboxes: mailboxes.clone(),
            listeners: vec![crate::listen::ShardListener {
                fd: socket_fd(),
                kind: crate::listen::ListenerKind::Tcp,
            }],
            panic_after_accepts: None,
        };
        let mut shard = Shard::new(parts, &config);
        shard.start();
        shard
    };
    (shard(0), shard(1))
}

/// A client of shard `shard` logs in, welcomed at once with what the other shard's server
/// login reported, and sends a query; with the pool's one server on the other shard it
/// waits, and its shard asks the other for the server.
fn waiting_client(shard: &mut Shard<FakeRing>) {
    accept(shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv armed");
    shard
        .ring()
        .deliver(recv, &startup(&[("user", "alice"), ("database", "db")]));
    turn(shard);
    let mut welcome = Vec::new();
    while let Some(send) = shard.ring().take(is_kind(OpKind::ClientSend)) {
        welcome.extend(shard.ring().accept_send(send, usize::MAX));
        turn(shard);
    }
    assert_eq!(welcome.first(), Some(&b'R'));
    assert_eq!(welcome.last(), Some(&b'I'), "welcomed without a server");
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv armed while idle");
    shard.ring().deliver(recv, &query("SELECT 1"));
    turn(shard);
}

/// The shard reads its mailbox (the eventfd read completes) and acts on what it holds.
fn read_mailbox(shard: &mut Shard<FakeRing>) {
    let read = shard
        .ring()
        .take(is_kind(OpKind::MailboxRead))
        .expect("mailbox read armed");
    shard.ring().complete(read, 8, false);
    turn(shard);
}

/// The descriptor the shard's one server receives on.
fn server_fd(shard: &mut Shard<FakeRing>) -> Option<i32> {
    shard
        .ring()
        .pending
        .iter()
        .find(|p| p.key.kind == OpKind::ServerRecv)
        .and_then(|p| match p.op {
            Op::Recv { fd, .. } | Op::RecvMulti { fd } => Some(fd),
            _ => None,
        })
}

#[test]
fn an_idle_server_socket_moves_to_the_shard_whose_client_waits_unclosed() {
    let (mut giver, mut taker) = two_shards();
    logged_in_client(&mut giver, usize::MAX);
    let fd = server_fd(&mut giver).expect("the idle server receives");
    waiting_client(&mut taker);
    assert!(
        !taker.ring().has(is_kind(OpKind::ServerConnect)),
        "the pool is full: no new server"
    );
    // The giver hears the ask, cancels the server's receive, and detaches it once the
    // cancelled receive is reaped.
    read_mailbox(&mut giver);
    assert_eq!(giver.engine().server_count(), 1, "detaching: not gone yet");
    turn(&mut giver);
    assert_eq!(giver.engine().server_count(), 0, "it left the giver");
    assert!(
        !giver.ring().closed.contains(&fd),
        "its socket was not closed"
    );
    read_mailbox(&mut taker);
    assert_eq!(taker.engine().server_count(), 1);
    assert_eq!(
        server_fd(&mut taker),
        Some(fd),
        "the taker receives on the same socket"
    );
    assert!(
        !taker.ring().has(is_kind(OpKind::ServerConnect)),
        "PostgreSQL sees no new connection"
    );
    // The waiting client's query goes to it.
    let sent = taker
        .ring()
        .take(is_kind(OpKind::ServerSend))
        .expect("the query is sent on the moved server");
    let bytes = taker.ring().accept_send(sent, usize::MAX);
    assert!(
        bytes.windows(8).any(|w| w == b"SELECT 1"),
        "{:?}",
        String::from_utf8_lossy(&bytes)
    );
}

#[test]
fn a_server_that_speaks_before_its_receive_is_cancelled_closes_instead_of_moving() {
    let (mut giver, mut taker) = two_shards();
    logged_in_client(&mut giver, usize::MAX);
    let fd = server_fd(&mut giver).expect("the idle server receives");
    waiting_client(&mut taker);
    // The receive completes (with a notice) before the cancel reaches it.
    let recv = giver
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    read_mailbox(&mut giver);
    let notice = pgtier_engine::testing::frame(b'N', b"SNOTICE\0Mhi\0\0");
    giver.ring().deliver(recv, &notice);
    turn(&mut giver);
    turn(&mut giver);
    assert_eq!(giver.engine().server_count(), 0);
    assert!(giver.ring().closed.contains(&fd), "closed, not moved");
    // Its slot goes to the taker, which opens a server of its own with it.
    read_mailbox(&mut taker);
    assert!(taker.ring().has(is_kind(OpKind::ServerConnect)));
}

/// Clients receive into the ring's provided buffers through one multishot receive: every
/// buffer a completion names goes back to the ring, over a session and for bytes that
/// arrive after their client began to close.
#[test]
fn every_provided_buffer_comes_back() {
    let mut shard = test_shard();
    logged_in_client(&mut shard, usize::MAX);
    assert!(shard.ring().lent.is_empty(), "after login");
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv armed while idle");
    assert!(matches!(recv.op, Op::RecvMulti { .. }), "{recv:?}");
    shard.ring().deliver(recv, &query("SELECT 1"));
    turn(&mut shard);
    assert!(shard.ring().lent.is_empty(), "after a query");
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("the multishot stays armed");
    // Terminate, and more bytes behind it in a second buffer before the shard looks.
    shard.ring().deliver(recv, b"X\0\0\0\x04");
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("still armed");
    shard.ring().deliver(recv, &query("SELECT 2"));
    turn(&mut shard);
    turn(&mut shard);
    assert!(shard.ring().lent.is_empty(), "{:?}", shard.ring().lent);
    assert_eq!(shard.engine().client_count(), 0, "the client left");
}

/// A multishot receive would go on delivering after a pause, so a pause cancels it, and
/// the client is armed again once its held input has gone to its server.
#[test]
fn a_paused_client_has_its_multishot_cancelled_and_rearmed_on_resume() {
    let mut shard = test_shard();
    accept(&mut shard);
    let recv = shard
        .ring()
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv armed");
    shard
        .ring()
        .deliver(recv, &startup(&[("user", "alice"), ("database", "db")]));
    turn(&mut shard);
    // The server's connect stays pending: the client waits, holding what it sends.
    let chunk = query(&format!("SELECT '{}'", "x".repeat(3900)));
    let mut delivered = 0;
    while let Some(recv) = shard.ring().take(is_kind(OpKind::ClientRecv)) {
        shard.ring().deliver(recv, &chunk);
        delivered += chunk.len();
        turn(&mut shard);
        assert!(delivered < 1 << 20, "never paused");
    }
    turn(&mut shard);
    assert!(
        !shard.ring().has(is_kind(OpKind::ClientRecv)),
        "not re-armed while paused"
    );
    assert!(shard.ring().lent.is_empty());
    assert_eq!(shard.engine().client_count(), 1, "the client stays");
    let connect = shard
        .ring()
        .take(is_kind(OpKind::ServerConnect))
        .expect("connect");
    shard.ring().complete(connect, 0, false);
    turn(&mut shard);
    let startup = shard
        .ring()
        .take(is_kind(OpKind::ServerSend))
        .expect("startup sent");
    shard.ring().accept_send(startup, usize::MAX);
    let server_recv = shard
        .ring()
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    shard.ring().deliver(server_recv, &server_login_bytes());
    turn(&mut shard);
    while let Some(send) = shard.ring().take(is_kind(OpKind::ServerSend)) {
        shard.ring().accept_send(send, usize::MAX);
        turn(&mut shard);
    }
    while let Some(send) = shard.ring().take(is_kind(OpKind::ClientSend)) {
        shard.ring().accept_send(send, usize::MAX);
        turn(&mut shard);
    }
    assert!(
        shard.ring().has(is_kind(OpKind::ClientRecv)),
        "receiving again once the held input went on"
    );
}
