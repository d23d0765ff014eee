//! pgtier tells systemd its state through `NOTIFY_SOCKET` (pgtier.service is `Type=notify`):
//! READY=1 once it listens, RELOADING=1 then READY=1 around a reload, whether a SIGHUP or the
//! console's RELOAD asked for it, and STOPPING=1 when a shutdown starts, the console's
//! SHUTDOWN included. The listener here is a datagram socket in Linux's abstract namespace,
//! as systemd's is (`@/org/freedesktop/systemd1/notify`).

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use pgtier_tests::fixtures::{server, start_proxy};
use pgtier_tests::{LocalPg, Pgtier, ProxyConfig};

const WAIT: Duration = Duration::from_secs(30);

struct Listener {
    socket: UnixDatagram,
    name: String,
}

impl Listener {
    fn bind(label: &str) -> Listener {
        let name = format!("pgtier-notify-{label}-{}", std::process::id());
        let address = SocketAddr::from_abstract_name(name.as_bytes()).expect("a name");
        let socket = UnixDatagram::bind_addr(&address).expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        Listener {
            socket,
            name: format!("@{name}"),
        }
    }

    /// The next state line (`READY=1`...), waiting at most WAIT.
    fn next_state(&self) -> String {
        let deadline = Instant::now() + WAIT;
        let mut buffer = [0u8; 1024];
        while Instant::now() < deadline {
            if let Ok(length) = self.socket.recv(&mut buffer) {
                let message = String::from_utf8_lossy(&buffer[..length]).into_owned();
                if let Some(state) = message.lines().find(|line| line.ends_with("=1")) {
                    return state.to_string();
                }
            }
        }
        panic!("no notification within {WAIT:?}");
    }
}

/// PostgreSQL and a pgtier in front of it, told to notify `listener`.
fn proxy(listener: &Listener) -> (LocalPg, Pgtier) {
    let pg = server();
    let mut config = ProxyConfig::new(pg.port()).setting("admin_users", "[\"postgres\"]");
    config
        .env
        .push(("NOTIFY_SOCKET".to_string(), listener.name.clone()));
    let proxy = start_proxy(config);
    (pg, proxy)
}

#[test]
fn signals_and_console_commands_are_announced_in_order() {
    let listener = Listener::bind("signals");
    let (_pg, mut proxy) = proxy(&listener);
    assert_eq!(listener.next_state(), "READY=1");

    proxy.signal(libc::SIGHUP).expect("SIGHUP");
    assert_eq!(listener.next_state(), "RELOADING=1");
    assert_eq!(listener.next_state(), "READY=1");

    let mut console = proxy.connect("pgtier", "postgres").expect("console");
    console.simple_query("RELOAD").expect("RELOAD");
    assert_eq!(listener.next_state(), "RELOADING=1");
    assert_eq!(listener.next_state(), "READY=1");
    drop(console);

    proxy.signal(libc::SIGTERM).expect("SIGTERM");
    assert_eq!(listener.next_state(), "STOPPING=1");
    assert!(proxy.wait_exit(WAIT).is_some_and(|status| status.success()));
}

#[test]
fn the_consoles_shutdown_is_announced() {
    let listener = Listener::bind("shutdown");
    let (_pg, proxy) = proxy(&listener);
    assert_eq!(listener.next_state(), "READY=1");
    let mut console = proxy.connect("pgtier", "postgres").expect("console");
    let _ = console.simple_query("SHUTDOWN");
    assert_eq!(listener.next_state(), "STOPPING=1");
}
