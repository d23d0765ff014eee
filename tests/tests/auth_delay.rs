//! `auth_failure_delay` end to end: a wrong password gets PostgreSQL's 28P01 only after the
//! delay, while a right password from another address (and from the same one) logs in
//! meanwhile; the held client does not block the worker.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{server, start_proxy};
use pgtier_tests::rawwire::{self, Message, password_message, read_message, startup_message};
use pgtier_tests::{Pgtier, ProxyConfig};

const DELAY: Duration = Duration::from_secs(4);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A TCP connection to the proxy from the local address `source` (127.0.0.0/8 is all local).
fn connect_from(proxy: &Pgtier, source: [u8; 4]) -> TcpStream {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    let stream = runtime.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(SocketAddr::from((source, 0)))
            .expect("bind source");
        socket
            .connect(SocketAddr::from(([127, 0, 0, 1], proxy.port())))
            .await
            .expect("connect")
    });
    let stream = stream.into_std().expect("std stream");
    stream.set_nonblocking(false).expect("blocking");
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("timeout");
    stream
}

/// Sends the startup packet and, once asked for a cleartext password, `password`.
fn send_password(stream: &mut TcpStream, password: &str) {
    stream
        .write_all(&startup_message("alice", "postgres", &[]))
        .expect("startup");
    let request = read_message(stream).expect("read").expect("a request");
    assert_eq!(request.tag, b'R');
    assert_eq!(request.body.get(..4), Some(&[0, 0, 0, 3][..]), "cleartext");
    stream
        .write_all(&password_message(password))
        .expect("password");
}

/// Messages up to ReadyForQuery or the connection's end.
fn answer(stream: &mut TcpStream) -> Vec<Message> {
    let mut messages = Vec::new();
    while let Ok(Some(message)) = read_message(stream) {
        let ready = message.tag == b'Z';
        messages.push(message);
        if ready {
            break;
        }
    }
    messages
}

fn has_sqlstate(messages: &[Message], code: &str) -> bool {
    messages
        .iter()
        .any(|m| m.tag == b'E' && m.sqlstate().as_deref() == Some(code))
}

/// Whether bytes are waiting on `stream` (without blocking).
fn has_bytes(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let waiting = match stream.peek(&mut byte) {
        Ok(n) => n > 0,
        Err(error) => error.kind() != io::ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).expect("blocking");
    waiting
}

#[test]
fn a_wrong_password_is_answered_after_the_delay_while_right_ones_log_in() {
    let pg = server();
    pg.create_user("alice", "secret").expect("create alice");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("plain")
            .user("alice", "secret")
            .setting("auth_failure_delay", &DELAY.as_secs().to_string()),
    );
    let mut guess = connect_from(&proxy, [127, 0, 0, 1]);
    send_password(&mut guess, "wrong");
    let sent = Instant::now();

    for source in [[127, 0, 0, 2], [127, 0, 0, 1]] {
        let mut right = connect_from(&proxy, source);
        send_password(&mut right, "secret");
        let messages = answer(&mut right);
        assert_eq!(
            messages.last().map(|m| m.tag),
            Some(b'Z'),
            "{source:?} logs in while the guess is held: {messages:?}"
        );
    }
    // Only meaningful if the logins above were quicker than the delay (a loaded machine).
    if sent.elapsed() < DELAY - Duration::from_millis(500) {
        assert!(!has_bytes(&mut guess), "the failure is still held");
    }

    let (messages, closed) = rawwire::read_until_closed(&mut guess, IO_TIMEOUT);
    let waited = sent.elapsed();
    assert!(has_sqlstate(&messages, "28P01"), "{messages:?}");
    assert!(closed);
    assert!(
        waited >= DELAY,
        "answered after {waited:?}, before the delay"
    );
    let mut rest = Vec::new();
    let _ = guess.read_to_end(&mut rest);
}

#[test]
fn without_the_delay_a_wrong_password_is_answered_at_once() {
    let pg = server();
    pg.create_user("alice", "secret").expect("create alice");
    let proxy = start_proxy(
        ProxyConfig::new(pg.port())
            .auth("plain")
            .user("alice", "secret"),
    );
    let mut guess = connect_from(&proxy, [127, 0, 0, 1]);
    send_password(&mut guess, "wrong");
    let messages = answer(&mut guess);
    assert!(has_sqlstate(&messages, "28P01"), "{messages:?}");
}
