//! Bounded polling: every "wait until" in the tests goes through here so none can hang.

use std::time::{Duration, Instant};

/// Polls `probe` every `interval` until it returns `Some`, or gives up after `timeout`.
pub fn until<T>(
    timeout: Duration,
    interval: Duration,
    mut probe: impl FnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(interval);
    }
}

/// Runs `work` on a thread and waits at most `timeout` for its result. On timeout the
/// thread is left behind (the caller's test fails, and the proxy watchdog unblocks it).
pub fn within<T: Send + 'static>(
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(work());
    });
    receiver.recv_timeout(timeout).ok()
}
