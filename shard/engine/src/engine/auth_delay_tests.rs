//! `auth_failure_delay` through the kernel-less harness: a wrong password is answered only
//! after the delay, failures from one address one per delay, a right password (from that
//! address or another) at once, and `client_login_timeout` still bounds a held client.

use std::net::SocketAddr;
use std::time::Duration;

use pgtier_core::auth_file::AuthFile;

use crate::action::Conn;
use crate::ids::ClientId;
use crate::testing::{Harness, Msg, config, frame, startup};
use crate::userlist::UserList;

fn harness(extra: &str) -> Harness {
    let text = config(&format!("pool_mode = \"transaction\"\n{extra}")).replace(
        "auth_type = \"trust\"",
        "auth_type = \"plain\"\nauth_file = \"/dev/null\"",
    );
    let users = UserList::from_file(
        AuthFile::parse("\"alice\" \"secret\"\n", "userlist.txt").expect("valid"),
    );
    Harness::with_users(&text, users)
}

fn peer(ip: &str) -> Option<SocketAddr> {
    Some(format!("{ip}:40000").parse().expect("addr"))
}

/// A client from `ip` that logs in as alice with `password`; its output after the password.
fn try_password(h: &mut Harness, ip: &str, password: &str) -> (ClientId, Vec<Msg>) {
    let id = h.accept_from(peer(ip));
    h.client_sends(id, &startup(&[("user", "alice"), ("database", "db")]));
    let request = h.client_output(id);
    assert_eq!(request.first().map(|m| m.tag), Some(b'R'));
    let mut body = password.as_bytes().to_vec();
    body.push(0);
    h.client_sends(id, &frame(b'p', &body));
    let output = h.client_output(id);
    (id, output)
}

fn refused(messages: &[Msg]) -> bool {
    messages
        .iter()
        .any(|m| m.tag == b'E' && m.sqlstate().as_deref() == Some("28P01"))
}

#[test]
fn without_the_delay_a_wrong_password_is_answered_at_once() {
    let mut h = harness("");
    let (id, output) = try_password(&mut h, "10.0.0.1", "wrong");
    assert!(refused(&output), "{output:?}");
    assert!(h.is_closed(Conn::Client(id)));
}

#[test]
fn a_wrong_password_is_answered_after_the_delay_a_right_one_at_once() {
    let mut h = harness("auth_failure_delay = 1");
    let (guess, output) = try_password(&mut h, "10.0.0.1", "wrong");
    assert!(output.is_empty(), "held: {output:?}");
    assert!(!h.is_closed(Conn::Client(guess)));
    // Bytes sent while held are not read as another try.
    h.client_sends(guess, &frame(b'p', b"secret\0"));
    assert!(h.client_output(guess).is_empty());

    // Logins with the right password are not delayed, from another address or the same one.
    for ip in ["10.0.0.2", "10.0.0.1"] {
        let (_, output) = try_password(&mut h, ip, "secret");
        assert_eq!(output.last().map(|m| m.tag), Some(b'Z'), "{ip}: {output:?}");
    }

    h.advance(Duration::from_millis(600));
    assert!(h.client_output(guess).is_empty(), "not before the delay");
    h.advance(Duration::from_millis(500));
    let output = h.client_output(guess);
    assert!(refused(&output), "{output:?}");
    assert!(h.is_closed(Conn::Client(guess)));
}

#[test]
fn failures_of_one_address_are_answered_one_per_delay_another_address_is_not_queued() {
    let mut h = harness("auth_failure_delay = 1");
    let guesses: Vec<ClientId> = (0..3)
        .map(|_| try_password(&mut h, "10.0.0.1", "wrong").0)
        .collect();
    let (other, _) = try_password(&mut h, "10.0.0.9", "wrong");
    let mut answered_at = Vec::new();
    for step in 1..=8 {
        h.advance(Duration::from_millis(500));
        for (n, id) in guesses.iter().chain([&other]).enumerate() {
            if refused(&h.client_output(*id)) {
                answered_at.push((n, step));
            }
        }
    }
    // 500 ms steps: the first failure of each address at 1 s, then one per second.
    assert_eq!(answered_at, vec![(0, 2), (3, 2), (1, 4), (2, 6)]);
}

#[test]
fn client_login_timeout_still_bounds_a_held_client() {
    let mut h = harness("auth_failure_delay = 30\nclient_login_timeout = 2");
    let (guess, _) = try_password(&mut h, "10.0.0.1", "wrong");
    for _ in 0..12 {
        h.advance(Duration::from_millis(250));
    }
    assert!(h.is_closed(Conn::Client(guess)));
    let output = h.client_output(guess);
    assert!(
        output
            .iter()
            .any(|m| m.field(b'M').as_deref() == Some("client_login_timeout")),
        "{output:?}"
    );
    // Its held error, due later, finds it gone.
    h.advance(Duration::from_secs(30));
    assert!(h.client_output(guess).is_empty());
}
