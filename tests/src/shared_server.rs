//! One PostgreSQL server shared by all the tests of a test binary that only need *a* server,
//! not a fresh one: initdb costs seconds, a scenario milliseconds. What a test does on it
//! must not outlive its own connections (session state, temp tables, prepared statements),
//! or live in a database of the test's own; each test brings its own proxy, so what the
//! proxy's servers hold is still the test's alone.
//!
//! The server is started on first use and stopped (and its directory removed) when the test
//! process exits, through `atexit`: statics are never dropped, and libtest leaves through
//! `exit` both on success and on failure. A test process killed outright leaves it behind,
//! as it would leave a per-test server.

use std::sync::OnceLock;

use crate::LocalPg;

static SHARED: OnceLock<LocalPg> = OnceLock::new();

/// The test binary's shared server (trust for everyone), started on first use.
pub fn shared_server() -> &'static LocalPg {
    SHARED.get_or_init(|| {
        let pg = crate::fixtures::server();
        // SAFETY: `stop_shared_server` is an `extern "C" fn()` that never unwinds (it
        // ignores every error and does not panic), which is all atexit asks of a handler.
        let registered = unsafe { libc::atexit(stop_shared_server) };
        if registered != 0 {
            eprintln!(
                "shared server: atexit failed; the server on port {} outlives the tests",
                pg.port()
            );
        }
        pg
    })
}

/// What `LocalPg`'s drop does, for the shared server at process exit.
extern "C" fn stop_shared_server() {
    if let Some(pg) = SHARED.get() {
        let _ = pg.stop_immediate();
        let _ = std::fs::remove_dir_all(pg.data_dir());
    }
}
