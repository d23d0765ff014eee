//! systemd's readiness protocol (sd_notify(3)) for `Type=notify` units: one datagram per
//! state change to the Unix socket `NOTIFY_SOCKET` names (a path, or `@name` in Linux's
//! abstract namespace). It is a few lines over std's `UnixDatagram`, so no crate: libsystemd
//! would be a C dependency for one `sendto`, and the Rust crates for it add features (fd
//! store, watchdog, credentials) pgtier has no use for.
//!
//! Without `NOTIFY_SOCKET` (not started by systemd) every call does nothing. A failed send
//! is logged at debug and otherwise ignored: systemd's own client ignores it too, and the
//! proxy must not stop serving because its supervisor went away.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable systemd sets for a `Type=notify` service.
const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Where the process's state changes go, or nowhere.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` names; a value that names no usable socket gives one that
    /// does nothing (and says so at debug).
    pub fn from_env() -> Notifier {
        let Some(value) = std::env::var_os(NOTIFY_SOCKET) else {
            return Notifier::default();
        };
        let target = address(&value.to_string_lossy()).and_then(|address| {
            let socket = UnixDatagram::unbound().ok()?;
            Some((socket, address))
        });
        if target.is_none() {
            tracing::debug!(
                value = %value.to_string_lossy(),
                "NOTIFY_SOCKET names no usable socket; systemd is not told of state changes"
            );
        }
        Notifier { target }
    }

    /// Every shard listens: the service has started (or a reload is done).
    pub fn ready(&self) {
        self.send("READY=1\nSTATUS=serving");
    }

    /// A reload starts; `READY=1` follows when it is done. systemd 253's `Type=notify-reload`
    /// wants the monotonic time with it, to tell this reload from an earlier one; older
    /// versions ignore the field.
    pub fn reloading(&self) {
        let state = format!(
            "RELOADING=1\nMONOTONIC_USEC={}\nSTATUS=reloading",
            monotonic_usec()
        );
        self.send(&state);
    }

    /// A shutdown started.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=shutting down");
    }

    fn send(&self, state: &str) {
        let Some((socket, address)) = &self.target else {
            return;
        };
        if let Err(error) = socket.send_to_addr(state.as_bytes(), address) {
            tracing::debug!(%error, "cannot notify systemd");
        }
    }
}

/// The socket address of a `NOTIFY_SOCKET` value: an absolute path, or `@name` for the
/// abstract namespace; anything else is not one systemd would set.
fn address(value: &str) -> Option<SocketAddr> {
    if let Some(name) = value.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        return SocketAddr::from_abstract_name(name.as_bytes()).ok();
    }
    if !value.starts_with('/') {
        return None;
    }
    SocketAddr::from_pathname(value).ok()
}

/// CLOCK_MONOTONIC in microseconds, the clock systemd compares reloads by.
fn monotonic_usec() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local; CLOCK_MONOTONIC always
    // exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let micros = u64::try_from(now.tv_nsec).unwrap_or(0) / 1_000;
    seconds.saturating_mul(1_000_000).saturating_add(micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(listener: &UnixDatagram) -> String {
        let mut buffer = [0u8; 256];
        let length = listener.recv(&mut buffer).expect("a datagram");
        String::from_utf8_lossy(&buffer[..length]).into_owned()
    }

    #[test]
    fn states_reach_a_socket_at_a_path() {
        let path = std::env::temp_dir().join(format!("pgtier-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener = UnixDatagram::bind(&path).expect("bind");
        let notifier = Notifier {
            target: Some((
                UnixDatagram::unbound().expect("socket"),
                address(&path.to_string_lossy()).expect("address"),
            )),
        };
        notifier.ready();
        notifier.reloading();
        notifier.stopping();
        let _ = std::fs::remove_file(&path);
        assert!(receive(&listener).starts_with("READY=1\n"));
        let reloading = receive(&listener);
        assert!(
            reloading.starts_with("RELOADING=1\nMONOTONIC_USEC="),
            "{reloading}"
        );
        assert!(receive(&listener).starts_with("STOPPING=1\n"));
    }

    #[test]
    fn an_abstract_socket_is_reached_by_its_at_name() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("pgtier-notify-test-{}", std::process::id());
        let bound = SocketAddr::from_abstract_name(name.as_bytes()).expect("name");
        let listener = UnixDatagram::bind_addr(&bound).expect("bind");
        let notifier = Notifier {
            target: Some((
                UnixDatagram::unbound().expect("socket"),
                address(&format!("@{name}")).expect("address"),
            )),
        };
        notifier.ready();
        assert!(receive(&listener).starts_with("READY=1"));
    }

    #[test]
    fn values_systemd_would_not_set_name_no_socket() {
        assert!(address("relative/path").is_none());
        assert!(address("").is_none());
        assert!(address("/run/systemd/notify").is_some());
        assert!(Notifier::default().target.is_none());
        // Does nothing, without a socket.
        Notifier::default().ready();
    }
}
