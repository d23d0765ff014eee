//! Health probes of one replica, run on a prober thread of the control plane.
//!
//! Between probes the prober watches its idle connection, so a server that dies closes it and
//! is probed again at once (see `Prober::wait_for_close`): a killed replica reaches its
//! failure threshold within milliseconds instead of within probe intervals.
//!
//! Budgets: the connect and the probe query each get `health_check_timeout`; the login of a
//! new connection gets `LOGIN_BUDGET_FACTOR` times that.
//!
//! The control shard is not on the query path, so probes use blocking std sockets with
//! timeouts on their own threads (one per replica, so a replica that black-holes packets
//! delays only its own probes) instead of a ring. A probe keeps one logged-in connection and
//! runs `SELECT 1, pg_is_in_recovery()` on it each interval: a server killed under it shows up
//! as a reset at once, a server that cannot be reached as a refused or timed-out reconnect,
//! and a replica that was promoted (no longer in recovery) is reported as failed, since a
//! replica set must only route to standbys. Without login credentials the probe only checks
//! that the postmaster answers an SSLRequest, which proves it accepts connections but cannot
//! see a promotion.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime};

use pgtier_policy::ReplicaId;

use crate::health::ProbeOutcome;
pub use crate::pg_link::ProbeLogin;
use crate::pg_link::{PgLink, connect, io_cause, set_deadline};

/// Probe query: `SELECT 1` proves the backend executes, the second column detects promotion.
pub(crate) const PROBE_SQL: &str = "SELECT 1, pg_is_in_recovery()";

/// A new connection's login may take this many probe timeouts. Logging in (a backend fork and
/// a SCRAM exchange) costs far more than the probe query and happens once per connection;
/// dead servers are still caught within one timeout, by the refused or timed-out connect.
pub(crate) const LOGIN_BUDGET_FACTOR: u32 = 4;

/// One probe result, sent from a prober thread to the control shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProbeReport {
    /// Probed replica.
    pub replica: ReplicaId,
    /// When the probe finished.
    pub at: SystemTime,
    /// What it found.
    pub outcome: ProbeOutcome,
}

/// Probes one replica, keeping its connection between probes.
#[derive(Debug)]
pub struct Prober {
    addr: SocketAddr,
    login: Option<ProbeLogin>,
    timeout: Duration,
    connection: Option<PgLink>,
}

impl Prober {
    /// A prober of `addr`; each probe must finish within `timeout`.
    pub fn new(addr: SocketAddr, login: Option<ProbeLogin>, timeout: Duration) -> Prober {
        Prober {
            addr,
            login,
            timeout,
            connection: None,
        }
    }

    /// Runs one probe. Any failure drops the connection, so the next probe reconnects.
    pub fn probe(&mut self) -> ProbeOutcome {
        let started = Instant::now();
        let deadline = started + self.timeout.max(Duration::from_millis(1));
        match self.probe_until(deadline) {
            Ok(()) => ProbeOutcome::Healthy {
                round_trip: started.elapsed(),
            },
            Err(cause) => {
                self.connection = None;
                ProbeOutcome::Failed { cause }
            }
        }
    }

    /// Watches the kept connection until `until`: returns true as soon as the server closes or
    /// resets it (a killed or restarting server does so at once), after dropping it. Bytes the
    /// server sends unprompted (e.g. a FATAL before closing) are kept for the next probe to
    /// read. Returns false when there is no connection or nothing happened.
    pub(crate) fn wait_for_close(&mut self, until: Instant) -> bool {
        let Some(link) = self.connection.as_mut() else {
            return false;
        };
        if !link.closed_before(until) {
            return false;
        }
        self.connection = None;
        true
    }

    fn probe_until(&mut self, deadline: Instant) -> Result<(), String> {
        let Some(login) = self.login.clone() else {
            return self.handshake_only(deadline);
        };
        if self.connection.is_none() {
            let mut link = PgLink::connect(self.addr, deadline)?;
            let login_deadline = Instant::now() + self.timeout * LOGIN_BUDGET_FACTOR;
            link.log_in(&login, "pgtier-health", login_deadline)?;
            self.connection = Some(link);
            return self.query(Instant::now() + self.timeout);
        }
        self.query(deadline)
    }

    /// Connects and sends an SSLRequest; any one-byte answer proves the postmaster is up.
    fn handshake_only(&mut self, deadline: Instant) -> Result<(), String> {
        let mut stream = connect(self.addr, deadline)?;
        set_deadline(&stream, deadline)?;
        const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        stream
            .write_all(&SSL_REQUEST)
            .map_err(|e| io_cause("send", &e))?;
        let mut answer = [0u8; 1];
        stream
            .read_exact(&mut answer)
            .map_err(|e| io_cause("receive", &e))?;
        match answer[0] {
            b'N' | b'S' => Ok(()),
            other => Err(format!("unexpected answer {other:#04x} to SSLRequest")),
        }
    }

    fn query(&mut self, deadline: Instant) -> Result<(), String> {
        let link = self.connection.as_mut().ok_or("not connected")?;
        let row = link.query_row(PROBE_SQL, deadline)?;
        let in_recovery = row
            .as_ref()
            .and_then(|row| row.get(1).cloned().flatten())
            .map(|v| v == b"t");
        match in_recovery {
            Some(true) => Ok(()),
            Some(false) => Err("promoted: pg_is_in_recovery() is false".to_string()),
            None => Err("probe query returned no row".to_string()),
        }
    }
}

/// The probe login of an entry without a forced `user`: `health_check_user` (with
/// `health_check_password`), when set. Probes without a login only see that the postmaster
/// answers; a reader entry's WAL positions need one.
pub(crate) fn health_check_login(
    config: &pgtier_core::config::Config,
    database: &pgtier_core::config::DatabaseConfig,
) -> Option<ProbeLogin> {
    let settings = &config.pgtier;
    (!settings.health_check_user.is_empty()).then(|| ProbeLogin {
        user: settings.health_check_user.clone(),
        password: (!settings.health_check_password.is_empty())
            .then(|| settings.health_check_password.clone()),
        dbname: database.dbname.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn refused_connection_fails_fast() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        drop(listener);
        let mut prober = Prober::new(addr, None, Duration::from_millis(500));
        let started = Instant::now();
        let outcome = prober.probe();
        assert!(!outcome.is_healthy(), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_millis(400));
    }

    #[test]
    fn silent_server_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut prober = Prober::new(addr, None, Duration::from_millis(100));
        match prober.probe() {
            ProbeOutcome::Failed { cause } => assert!(cause.contains("timed out"), "{cause}"),
            healthy => panic!("a server that never answers is not healthy: {healthy:?}"),
        }
    }

    #[test]
    fn closed_idle_connection_is_noticed_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut prober = Prober::new(addr, None, Duration::from_millis(500));
        prober.connection = Some(PgLink::from_stream(
            TcpStream::connect(addr).expect("connect"),
        ));
        let (server_side, _) = listener.accept().expect("accept");
        let quiet_until = Instant::now() + Duration::from_millis(20);
        assert!(
            !prober.wait_for_close(quiet_until),
            "an idle open connection is fine"
        );
        drop(server_side);
        let started = Instant::now();
        assert!(prober.wait_for_close(Instant::now() + Duration::from_secs(2)));
        assert!(started.elapsed() < Duration::from_millis(500));
        assert!(prober.connection.is_none());
    }
}
