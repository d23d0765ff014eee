//! The io_uring traps, each replayed over the fake ring against the real shard code: short
//! sends, resets, cancellation during teardown, stale completions after slot reuse,
//! reordered completions, ENOBUFS, multishot accept ending without MORE; and over the real
//! ring: a send to a closed peer returns EPIPE instead of raising SIGPIPE.

use std::os::fd::IntoRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize};

use bytes::BytesMut;
use pgtier_core::config::Config;

use crate::io::fake::{FakeRing, Pending};
use crate::io::op_key::OpKind;
use crate::io::ring::{Op, Ring};
use crate::io::slab::ClientId;
use crate::mailbox::Mailbox;
use crate::pool::PoolBudgets;
use crate::proto;
use crate::shard::{Shard, Shared};
use crate::stats::SharedStats;
use crate::userlist::UserList;

fn test_shard(listener: Option<i32>) -> Shard<FakeRing> {
    let text = r#"
[pgtier]
listen_port = 6432
auth_type = "trust"
pool_mode = "transaction"
default_pool_size = 2
[databases.db]
host = "127.0.0.1"
port = 5432
"#;
    let config = Config::from_str(text, "/tmp/trap.toml").expect("config");
    let shared = Arc::new(Shared {
        mailboxes: vec![Arc::new(Mailbox::new(16).expect("eventfd"))],
        budgets: Arc::new(PoolBudgets::default()),
        stats: Arc::new(SharedStats::default()),
        totals: Arc::new(pgtier_core::metrics::SharedTotals::new()),
        clients: AtomicU32::new(0),
        finished_shards: AtomicUsize::new(0),
        routing: crate::routing::SharedRouting::default(),
    });
    let mut shard = Shard::new(
        0,
        FakeRing::new(),
        Arc::new(config),
        Arc::new(UserList::new()),
        shared,
        listener,
    );
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

fn startup_bytes() -> Vec<u8> {
    let mut out = BytesMut::new();
    proto::startup_message(&mut out, &[("user", "alice"), ("database", "db")]);
    out.to_vec()
}

fn server_login_bytes() -> Vec<u8> {
    let mut out = BytesMut::new();
    proto::auth_ok(&mut out);
    proto::parameter_status(&mut out, "server_version", "15.0");
    proto::parameter_status(&mut out, "client_encoding", "UTF8");
    proto::backend_key_data(&mut out, 4242, 99);
    proto::ready_for_query(&mut out, b'I');
    out.to_vec()
}

/// Admits a client and logs it in through one fake server; returns the bytes the client was
/// sent, with sends completing at most `send_limit` bytes at a time.
fn logged_in_client(shard: &mut Shard<FakeRing>, send_limit: usize) -> (ClientId, Vec<u8>) {
    shard.admit_client(socket_fd());
    let id = shard
        .clients
        .slots()
        .next()
        .map(|(slot, _)| ClientId(slot))
        .expect("client");
    let recv = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv armed");
    shard.ring.deliver(recv, &startup_bytes());
    turn(shard);
    let connect = shard
        .ring
        .take(is_kind(OpKind::ServerConnect))
        .expect("connect submitted");
    shard.ring.complete(connect, 0, false);
    turn(shard);
    let startup = shard
        .ring
        .take(is_kind(OpKind::ServerSend))
        .expect("startup sent");
    shard.ring.accept_send(startup, usize::MAX);
    let server_recv = shard
        .ring
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    shard.ring.deliver(server_recv, &server_login_bytes());
    turn(shard);
    let mut received = Vec::new();
    while let Some(send) = shard.ring.take(is_kind(OpKind::ClientSend)) {
        received.extend(shard.ring.accept_send(send, send_limit));
        turn(shard);
    }
    (id, received)
}

#[test]
fn short_sends_resume_at_the_right_offset() {
    let mut whole = test_shard(None);
    let (_, expected) = logged_in_client(&mut whole, usize::MAX);
    let mut short = test_shard(None);
    let (_, received) = logged_in_client(&mut short, 7);
    assert!(
        expected.starts_with(&[b'R', 0, 0, 0, 8, 0, 0, 0, 0]),
        "AuthenticationOk first"
    );
    assert_eq!(received[..9], expected[..9]);
    assert_eq!(received.len(), expected.len());
    // The BackendKeyData is pgtier's own (random), so compare around it.
    let key_at = expected.iter().position(|b| *b == b'K').expect("key");
    assert_eq!(received[..key_at], expected[..key_at]);
    assert_eq!(received[key_at + 13..], expected[key_at + 13..]);
}

#[test]
fn reset_closes_the_client_and_frees_its_slot() {
    let mut shard = test_shard(None);
    let (id, _) = logged_in_client(&mut shard, usize::MAX);
    let recv = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv armed while idle");
    shard.ring.complete(recv, -libc::ECONNRESET, false);
    turn(&mut shard);
    assert!(shard.clients.get(id.0).is_none(), "slot freed");
    assert!(shard.servers.len() == 1, "the clean server stays pooled");
}

#[test]
fn teardown_cancels_in_flight_ops_and_frees_only_after_their_completion() {
    let mut shard = test_shard(None);
    shard.admit_client(socket_fd());
    let id = shard
        .clients
        .slots()
        .next()
        .map(|(slot, _)| ClientId(slot))
        .expect("client");
    assert!(shard.ring.has(is_kind(OpKind::ClientRecv)));
    shard.close_client(id, None);
    // The fake ring answers the AsyncCancel at once with ECANCELED for the recv; until the
    // shard reaps that completion the slot must stay allocated (the buffer is the kernel's).
    assert!(
        shard.clients.get(id.0).is_some(),
        "not freed while the recv is in flight"
    );
    turn(&mut shard);
    assert!(
        shard.clients.get(id.0).is_none(),
        "freed after the cancelled recv completed"
    );
}

#[test]
fn stale_completion_after_slot_reuse_is_dropped() {
    let mut shard = test_shard(None);
    shard.admit_client(socket_fd());
    let old = shard
        .clients
        .slots()
        .next()
        .map(|(slot, _)| ClientId(slot))
        .expect("client");
    let old_recv = shard.ring.take(is_kind(OpKind::ClientRecv)).expect("recv");
    shard.ring.complete(old_recv, 0, false);
    turn(&mut shard);
    assert!(shard.clients.get(old.0).is_none());
    shard.admit_client(socket_fd());
    let new = shard
        .clients
        .slots()
        .next()
        .map(|(slot, _)| ClientId(slot))
        .expect("client");
    assert_eq!(new.0.index, old.0.index, "slot reused");
    assert_ne!(new.0.generation, old.0.generation);
    // A late completion carrying the old generation (e.g. reordered by the kernel).
    shard.ring.complete(old_recv, 5, false);
    turn(&mut shard);
    assert!(
        shard.clients.get(new.0).is_some_and(|c| c.recv.in_flight()),
        "new client untouched"
    );
}

#[test]
fn reordered_completions_across_sockets_are_handled() {
    let mut shard = test_shard(None);
    shard.admit_client(socket_fd());
    shard.admit_client(socket_fd());
    let first = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv 1");
    let second = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("recv 2");
    shard
        .ring
        .deliver(first, &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    shard.ring.complete(second, -libc::ECONNRESET, false);
    shard.ring.reorder_ready();
    turn(&mut shard);
    assert_eq!(shard.clients.len(), 1, "the reset one is gone");
    let answer = shard
        .ring
        .take(is_kind(OpKind::ClientSend))
        .expect("SSL answer");
    assert_eq!(shard.ring.accept_send(answer, usize::MAX), b"N");
}

#[test]
fn enobufs_rearms_the_receive() {
    let mut shard = test_shard(None);
    shard.admit_client(socket_fd());
    let recv = shard.ring.take(is_kind(OpKind::ClientRecv)).expect("recv");
    shard.ring.complete(recv, -libc::ENOBUFS, false);
    turn(&mut shard);
    assert_eq!(shard.clients.len(), 1);
    assert!(shard.ring.has(is_kind(OpKind::ClientRecv)), "re-armed");
}

#[test]
fn multishot_accept_is_rearmed_when_more_is_missing() {
    let listener = socket_fd();
    let mut shard = test_shard(Some(listener));
    let accept = shard
        .ring
        .take(is_kind(OpKind::Accept))
        .expect("accept armed");
    assert!(matches!(accept.op, Op::AcceptMulti { .. }));
    // Still armed: a completion with MORE does not re-arm.
    shard.ring.complete_multishot(&accept, socket_fd());
    turn(&mut shard);
    assert!(!shard.ring.has(is_kind(OpKind::Accept)));
    assert_eq!(shard.clients.len(), 1);
    // The kernel ends the multishot (e.g. ENFILE): it must be submitted again.
    shard.ring.complete(accept, -libc::ENFILE, false);
    turn(&mut shard);
    assert!(shard.ring.has(is_kind(OpKind::Accept)), "re-armed");
    // SAFETY: closing the test's own listener fd.
    unsafe { libc::close(listener) };
}

#[test]
fn a_startup_length_out_of_range_is_closed_without_a_reply() {
    let mut shard = test_shard(None);
    shard.admit_client(socket_fd());
    let recv = shard.ring.take(is_kind(OpKind::ClientRecv)).expect("recv");
    // Terminate sent before any startup packet reads as a length of 0x58000000.
    shard.ring.deliver(recv, b"X\0\0\0\x04");
    turn(&mut shard);
    assert!(
        !shard.ring.has(is_kind(OpKind::ClientSend)),
        "PostgreSQL answers nothing to an invalid startup length"
    );
    assert!(shard.clients.is_empty(), "closed");
}

#[test]
fn a_malformed_startup_packet_gets_08p01_and_close() {
    let mut shard = test_shard(None);
    shard.admit_client(socket_fd());
    let recv = shard.ring.take(is_kind(OpKind::ClientRecv)).expect("recv");
    // Protocol 3.0, then a parameter name without its terminator.
    shard
        .ring
        .deliver(recv, &[0, 0, 0, 12, 0, 3, 0, 0, b'u', b's', b'e', b'r']);
    turn(&mut shard);
    let send = shard
        .ring
        .take(is_kind(OpKind::ClientSend))
        .expect("error sent");
    let bytes = shard.ring.accept_send(send, usize::MAX);
    assert_eq!(bytes[0], b'E');
    assert!(bytes.windows(5).any(|w| w == b"08P01"));
    turn(&mut shard);
    assert!(shard.clients.is_empty(), "closed after the error was sent");
}

#[test]
fn send_to_a_closed_peer_is_epipe_not_sigpipe() {
    let Ok(mut ring) = crate::io::uring::UringRing::new(8) else {
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
    ring.push(
        key,
        Op::Send {
            fd: fds[0],
            buf: data.as_ptr(),
            len: 5,
        },
    )
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

/// Random bytes, resets, short sends and reordering thrown at a shard over the fake ring:
/// whatever a peer does, the shard neither panics nor leaks a slot.
#[test]
fn random_peer_behaviour_never_panics_the_shard() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut shard = test_shard(None);
    let mut opened = Vec::new();
    for _ in 0..3000 {
        match next() % 8 {
            0 if shard.clients.len() < 32 => {
                let fd = socket_fd();
                opened.push(fd);
                shard.admit_client(fd);
            }
            1 | 2 => {
                if let Some(recv) = shard.ring.take(|p| matches!(p.op, Op::Recv { .. })) {
                    let len = (next() % 40) as usize;
                    let mut bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                    if next() % 3 == 0 {
                        // Sometimes a valid startup, so sessions get further.
                        bytes = startup_bytes();
                    }
                    shard.ring.deliver(recv, &bytes);
                }
            }
            3 => {
                if let Some(send) = shard
                    .ring
                    .take(|p| matches!(p.op, Op::Send { .. } | Op::SendMsg { .. }))
                {
                    let limit = (next() % 64) as usize + 1;
                    shard.ring.accept_send(send, limit);
                }
            }
            4 => {
                if let Some(any) = shard.ring.take(|p| p.key.kind != OpKind::MailboxRead) {
                    let errno = [
                        libc::ECONNRESET,
                        libc::ENOBUFS,
                        libc::EPIPE,
                        libc::ECONNREFUSED,
                    ];
                    shard
                        .ring
                        .complete(any, -errno[(next() % 4) as usize], false);
                }
            }
            5 => {
                if let Some(connect) = shard.ring.take(is_kind(OpKind::ServerConnect)) {
                    shard.ring.complete(connect, 0, false);
                }
            }
            6 => shard.ring.reorder_ready(),
            _ => {}
        }
        turn(&mut shard);
    }
    // Close everyone: every slot must come back once the ring answers.
    let ids: Vec<ClientId> = shard
        .clients
        .slots()
        .map(|(slot, _)| ClientId(slot))
        .collect();
    for id in ids {
        shard.close_client(id, None);
    }
    for _ in 0..200 {
        if let Some(op) = shard.ring.take(|p| p.key.kind != OpKind::MailboxRead) {
            shard.ring.complete(op, -libc::ECONNRESET, false);
        }
        turn(&mut shard);
    }
    assert!(
        shard.clients.is_empty(),
        "{} clients left",
        shard.clients.len()
    );
}

/// A client that stops reading must not make the shard buffer a whole result: once its queue
/// passes `client_buffer_limit_bytes` the server's receive is not re-armed until it drains.
#[test]
fn slow_client_pauses_reading_from_the_server() {
    let mut shard = test_shard(None);
    let limit = shard.limits.client_buffer_limit_bytes;
    let (client, _) = logged_in_client(&mut shard, usize::MAX);
    let recv = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv");
    let mut query = BytesMut::new();
    proto::query(&mut query, "SELECT huge");
    shard.ring.deliver(recv, &query);
    turn(&mut shard);
    let send = shard
        .ring
        .take(is_kind(OpKind::ServerSend))
        .expect("query to the server");
    shard.ring.accept_send(send, usize::MAX);
    turn(&mut shard);
    // One DataRow of 1 GiB - 1, streamed in receive-sized pieces; the client never reads.
    let mut header = vec![b'D'];
    header.extend_from_slice(&((1u32 << 30) - 1).to_be_bytes());
    let chunk = vec![b'x'; 64 * 1024];
    let mut delivered = 0usize;
    let mut first = true;
    while let Some(recv) = shard.ring.take(is_kind(OpKind::ServerRecv)) {
        let piece = if first {
            [header.as_slice(), &chunk].concat()
        } else {
            chunk.clone()
        };
        first = false;
        let Op::Recv { len, .. } = recv.op else {
            panic!()
        };
        delivered += piece.len().min(len as usize);
        shard.ring.deliver(recv, &piece);
        turn(&mut shard);
        assert!(
            delivered < limit * 4,
            "still reading after {delivered} bytes"
        );
    }
    let queued = shard
        .clients
        .get(client.0)
        .map(|c| c.send.queued_bytes())
        .expect("client");
    assert!(
        queued > limit,
        "paused only past the limit ({queued} <= {limit})"
    );
    assert!(queued < limit + 2 * shard.limits.server_recv_chunk_bytes + 64 * 1024);
    // The client reads everything that is queued: the server is read again.
    while let Some(send) = shard.ring.take(is_kind(OpKind::ClientSend)) {
        shard.ring.accept_send(send, usize::MAX);
        turn(&mut shard);
        if shard.ring.has(is_kind(OpKind::ServerRecv)) {
            break;
        }
    }
    assert!(
        shard.ring.has(is_kind(OpKind::ServerRecv)),
        "reading resumed after the drain"
    );
}

/// Logs a client in and starts `SELECT huge`, whose result the client never reads, until
/// back-pressure pauses the server's receive.
fn client_behind_a_paused_server(shard: &mut Shard<FakeRing>) -> ClientId {
    let (client, _) = logged_in_client(shard, usize::MAX);
    let recv = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv");
    let mut query = BytesMut::new();
    proto::query(&mut query, "SELECT huge");
    shard.ring.deliver(recv, &query);
    turn(shard);
    let send = shard
        .ring
        .take(is_kind(OpKind::ServerSend))
        .expect("query to the server");
    shard.ring.accept_send(send, usize::MAX);
    turn(shard);
    let mut header = vec![b'D'];
    header.extend_from_slice(&((1u32 << 30) - 1).to_be_bytes());
    let chunk = vec![b'x'; 64 * 1024];
    let mut first = true;
    while let Some(recv) = shard.ring.take(is_kind(OpKind::ServerRecv)) {
        let piece = if first {
            [header.as_slice(), &chunk].concat()
        } else {
            chunk.clone()
        };
        first = false;
        shard.ring.deliver(recv, &piece);
        turn(shard);
    }
    client
}

#[test]
fn a_client_leaving_a_paused_server_closes_that_server() {
    let mut shard = test_shard(None);
    let client = client_behind_a_paused_server(&mut shard);
    assert!(
        shard.servers.slots().all(|(_, s)| s.recv_paused),
        "back-pressure paused the server"
    );
    // The client hangs up (its receive had been re-armed after the query).
    shard.close_client(client, None);
    turn(&mut shard);
    assert!(
        shard.servers.slots().all(|(_, s)| s.is_closing()),
        "a server blocked mid-result is closed, not drained"
    );
    let pool = shard.pools.ids().next().expect("pool");
    assert_eq!(
        shard.pools.get(pool).open_here,
        0,
        "its slot is free at once"
    );
}

#[test]
fn an_unknown_message_type_after_login_is_refused_and_never_forwarded() {
    let mut shard = test_shard(None);
    let (_, _) = logged_in_client(&mut shard, usize::MAX);
    let recv = shard
        .ring
        .take(is_kind(OpKind::ClientRecv))
        .expect("client recv");
    let mut garbage = vec![b'@', 0, 0, 0, 8];
    garbage.extend_from_slice(&[1, 2, 3, 4]);
    shard.ring.deliver(recv, &garbage);
    turn(&mut shard);
    assert!(
        !shard.ring.has(is_kind(OpKind::ServerSend)),
        "nothing was sent to a server"
    );
    let send = shard
        .ring
        .take(is_kind(OpKind::ClientSend))
        .expect("error sent");
    let bytes = shard.ring.accept_send(send, usize::MAX);
    assert_eq!(bytes[0], b'E');
    assert!(bytes.windows(5).any(|w| w == b"08P01"));
    turn(&mut shard);
    assert!(shard.clients.is_empty(), "closed after the error was sent");
}

/// Admits a client whose startup packet sets `client_encoding` to `spelled`.
fn admit_spelling_client(shard: &mut Shard<FakeRing>, spelled: &str) -> ClientId {
    let before: Vec<_> = shard.clients.slots().map(|(slot, _)| slot).collect();
    shard.admit_client(socket_fd());
    let id = shard
        .clients
        .slots()
        .map(|(slot, _)| slot)
        .find(|slot| !before.contains(slot))
        .map(ClientId)
        .expect("client");
    let recv = shard
        .ring
        .take(|p| p.key.kind == OpKind::ClientRecv && p.key.index == id.0.index)
        .expect("client recv armed");
    let mut out = BytesMut::new();
    proto::startup_message(
        &mut out,
        &[
            ("user", "alice"),
            ("database", "db"),
            ("client_encoding", spelled),
        ],
    );
    shard.ring.deliver(recv, &out);
    turn(shard);
    id
}

/// Everything queued for clients so far.
fn client_bytes(shard: &mut Shard<FakeRing>) -> Vec<u8> {
    let mut received = Vec::new();
    while let Some(send) = shard.ring.take(is_kind(OpKind::ClientSend)) {
        received.extend(shard.ring.accept_send(send, usize::MAX));
        turn(shard);
    }
    received
}

fn shows_client_encoding(welcome: &[u8], value: &str) -> bool {
    let mut status = BytesMut::new();
    proto::parameter_status(&mut status, "client_encoding", value);
    welcome.windows(status.len()).any(|w| w == &status[..])
}

#[test]
fn clients_are_told_the_servers_spelling_learned_once_per_pool() {
    let mut shard = test_shard(None);
    admit_spelling_client(&mut shard, "utf8");
    let connect = shard
        .ring
        .take(is_kind(OpKind::ServerConnect))
        .expect("connect submitted");
    shard.ring.complete(connect, 0, false);
    turn(&mut shard);
    let startup = shard
        .ring
        .take(is_kind(OpKind::ServerSend))
        .expect("startup sent");
    shard.ring.accept_send(startup, usize::MAX);
    let recv = shard
        .ring
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    shard.ring.deliver(recv, &server_login_bytes());
    turn(&mut shard);
    // The server first gets the client's own value; the client waits for the answer.
    let set = shard
        .ring
        .take(is_kind(OpKind::ServerSend))
        .expect("the login's SET");
    let sql = shard.ring.accept_send(set, usize::MAX);
    let wanted = b"RESET client_encoding; SET client_encoding = 'utf8';";
    assert!(sql.windows(wanted.len()).any(|w| w == wanted));
    turn(&mut shard);
    assert!(
        client_bytes(&mut shard).is_empty(),
        "no welcome before the answer"
    );
    let mut answer = BytesMut::new();
    proto::ready_for_query(&mut answer, b'I');
    let recv = shard
        .ring
        .take(is_kind(OpKind::ServerRecv))
        .expect("server recv");
    shard.ring.deliver(recv, &answer);
    turn(&mut shard);
    let welcome = client_bytes(&mut shard);
    assert!(
        shows_client_encoding(&welcome, "UTF8"),
        "the server's spelling"
    );
    assert!(!shows_client_encoding(&welcome, "utf8"));
    // The next client with the same spelling is welcomed from the pool, with no server.
    admit_spelling_client(&mut shard, "utf8");
    assert!(!shard.ring.has(is_kind(OpKind::ServerSend)));
    let welcome = client_bytes(&mut shard);
    assert!(
        shows_client_encoding(&welcome, "UTF8"),
        "{:?}",
        String::from_utf8_lossy(&welcome)
    );
}
