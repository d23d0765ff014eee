//! The LSN poller of one reader entry: a control-plane thread that, every
//! `lsn_poll_interval`, asks the primary for `pg_current_wal_insert_lsn()` and each replica
//! for `pg_last_wal_replay_lsn()`, feeds the answers to an [`LsnTracker`] and publishes its
//! view on the entry's [`ReadRouter`].
//!
//! Like the probes, it uses blocking std sockets (`PgLink`) on its own thread and logs in
//! with the entry's probe login. One thread per entry asks one server at a time; a server
//! that fails (refused, reset, timed out after `health_check_timeout`) is retried only after
//! `health_check_interval`, so a black-holed replica costs the others one timeout per
//! health interval, not one per poll. Its last position stays in the view, marked stale.
//!
//! After each round it also looks up, on the primary's link, the function names the entry's
//! shards asked about ([`FunctionCatalog`]): at most one poll interval after a name was first
//! met, a transaction calling it knows where it may run.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::function_lookup;
use crate::functions::FunctionCatalog;
use crate::health::HealthConfig;
use crate::lsn::{Lsn, LsnTracker, insert_lsn_as_end};
use crate::pg_link::{PgLink, Row};
use crate::probe::{LOGIN_BUDGET_FACTOR, ProbeLogin};
use crate::read_router::ReadRouter;

/// The primary's insert position, and the page size that tells a page header from data.
pub(crate) const PRIMARY_SQL: &str =
    "SELECT pg_current_wal_insert_lsn(), current_setting('wal_block_size')";
/// A replica's replay position (NULL on a server that is not a standby).
pub(crate) const REPLICA_SQL: &str = "SELECT pg_last_wal_replay_lsn()";

/// Longest uninterrupted sleep, so a shutdown is noticed quickly.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// One polled server and its connection.
#[derive(Debug)]
struct Polled {
    addr: SocketAddr,
    link: Option<PgLink>,
    /// After a failure: no new connection before this instant.
    retry_at: Option<Instant>,
    /// The last failure was logged (log once per outage, not once per poll).
    failure_logged: bool,
}

impl Polled {
    fn new(addr: SocketAddr) -> Polled {
        Polled {
            addr,
            link: None,
            retry_at: None,
            failure_logged: false,
        }
    }

    /// Connects if needed; `None` when the server is in its retry wait.
    fn connected(
        &mut self,
        login: &ProbeLogin,
        health: &HealthConfig,
    ) -> Option<Result<(), String>> {
        if self.link.is_none() {
            if self.retry_at.is_some_and(|at| Instant::now() < at) {
                return None;
            }
            let now = Instant::now();
            match PgLink::open(
                self.addr,
                login,
                "pgtier-lsn",
                now + health.timeout,
                now + health.timeout * LOGIN_BUDGET_FACTOR,
            ) {
                Ok(link) => self.link = Some(link),
                Err(cause) => return Some(Err(self.failed(cause, health))),
            }
        }
        Some(Ok(()))
    }

    /// Runs `sql` (connecting first if needed); `None` when the server is in its retry wait.
    fn query(
        &mut self,
        login: &ProbeLogin,
        sql: &str,
        health: &HealthConfig,
    ) -> Option<Result<Row, String>> {
        if let Err(cause) = self.connected(login, health)? {
            return Some(Err(cause));
        }
        let link = self.link.as_mut()?;
        match link.query_row(sql, Instant::now() + health.timeout) {
            Ok(Some(row)) => {
                if self.failure_logged {
                    tracing::info!(server = %self.addr, "LSN polling works again");
                }
                self.failure_logged = false;
                Some(Ok(row))
            }
            Ok(None) => Some(Err(self.failed("no row".to_string(), health))),
            Err(cause) => Some(Err(self.failed(cause, health))),
        }
    }

    /// Runs `sql` and returns its rows, as [`Polled::query`] does its first row.
    fn query_rows(
        &mut self,
        login: &ProbeLogin,
        sql: &str,
        max_rows: usize,
        health: &HealthConfig,
    ) -> Option<Result<Vec<Row>, String>> {
        if let Err(cause) = self.connected(login, health)? {
            return Some(Err(cause));
        }
        let link = self.link.as_mut()?;
        match link.query_rows(sql, max_rows, Instant::now() + health.timeout) {
            Ok(rows) => Some(Ok(rows)),
            Err(cause) => Some(Err(self.failed(cause, health))),
        }
    }

    fn failed(&mut self, cause: String, health: &HealthConfig) -> String {
        self.link = None;
        self.retry_at = Some(Instant::now() + health.interval);
        if !self.failure_logged {
            tracing::warn!(server = %self.addr, %cause, "LSN poll failed; retrying every health check interval");
            self.failure_logged = true;
        }
        cause
    }
}

/// Runs the poller of `reader` until `stop`. Returns at once when the entry has no probe
/// login (its reads with a target go to the primary, see [`ReadRouter`]).
pub(crate) fn poll_loop(
    reader: &Arc<ReadRouter>,
    stop: &AtomicBool,
    interval: Duration,
    health: HealthConfig,
) {
    let Some(login) = reader.probe_login().cloned() else {
        tracing::warn!(entry = %reader.name(), "no login for LSN polling (set the entry's user); read-your-writes reads go to the primary and the lag cap is off");
        return;
    };
    let interval = interval.max(Duration::from_millis(1));
    let mut primary = Polled::new(reader.primary());
    let mut replicas: Vec<Polled> = (0..reader.replica_count())
        .filter_map(|i| {
            pgtier_policy::ReplicaId::from_index(i).and_then(|r| reader.replica_addr(r))
        })
        .map(Polled::new)
        .collect();
    let mut tracker = LsnTracker::new(replicas.len(), reader.lag_cap());
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        poll_round(&login, &health, &mut primary, &mut replicas, &mut tracker);
        reader.publish(tracker.view(Instant::now()));
        look_up_functions(&login, &health, &mut primary, reader.functions());
        let next = started + interval;
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= next {
                break;
            }
            std::thread::park_timeout((next - now).min(WAIT_SLICE));
        }
    }
}

fn poll_round(
    login: &ProbeLogin,
    health: &HealthConfig,
    primary: &mut Polled,
    replicas: &mut [Polled],
    tracker: &mut LsnTracker,
) {
    // Taken before the query is sent: every commit acknowledged before it is below the answer.
    let sent_at = Instant::now();
    match primary.query(login, PRIMARY_SQL, health) {
        Some(Ok(row)) => match primary_lsn(&row) {
            Some(lsn) => tracker.on_primary(sent_at, lsn),
            None => tracker.on_primary_failed(),
        },
        Some(Err(_)) | None => tracker.on_primary_failed(),
    }
    for (index, replica) in replicas.iter_mut().enumerate() {
        let replay = match replica.query(login, REPLICA_SQL, health) {
            Some(Ok(row)) => first_lsn(&row),
            Some(Err(_)) | None => None,
        };
        match replay {
            Some(lsn) => tracker.on_replica(index, lsn),
            None => tracker.on_replica_failed(index),
        }
    }
}

/// Looks up the function names shards asked about since the last round, on the primary's
/// link (one query per batch; a failure leaves them to be asked for again).
fn look_up_functions(
    login: &ProbeLogin,
    health: &HealthConfig,
    primary: &mut Polled,
    functions: &FunctionCatalog,
) {
    let (epoch, wanted) = functions.take_wanted();
    for batch in wanted.chunks(function_lookup::MAX_NAMES_PER_QUERY) {
        let rows = match function_lookup::query(batch) {
            None => Vec::new(),
            Some(sql) => match primary.query_rows(login, &sql, batch.len(), health) {
                Some(Ok(rows)) => rows,
                Some(Err(_)) | None => return,
            },
        };
        functions.publish(epoch, &function_lookup::answers(batch.to_vec(), &rows));
    }
}

fn first_lsn(row: &Row) -> Option<Lsn> {
    Lsn::parse(row.first()?.as_deref()?)
}

fn primary_lsn(row: &Row) -> Option<Lsn> {
    let insert = first_lsn(row)?;
    let block_size = row
        .get(1)
        .and_then(|v| v.as_deref())
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    Some(insert_lsn_as_end(insert, block_size))
}
