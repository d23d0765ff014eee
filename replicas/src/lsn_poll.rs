//! The LSN poller of one reader entry: a control-plane thread that, every
//! `lsn_poll_interval`, asks every host of the entry (the configured primary and each
//! replica) whether it is in recovery and where its WAL is (the insert position on a
//! primary, the replay position on a standby), elects the entry's primary from the answers
//! ([`PrimaryElection`](crate::primary_election::PrimaryElection): a replica promoted on a
//! newer timeline takes over, an old primary is fenced), feeds the positions to an
//! [`LsnTracker`] (the elected primary's insert position, the standbys' replay positions)
//! and publishes its view on the entry's [`ReadRouter`].
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
use crate::primary_election::HostRole;
use crate::probe::{LOGIN_BUDGET_FACTOR, ProbeLogin};
use crate::read_router::ReadRouter;

/// One query for every host: whether it is in recovery; its replay position (a standby) or
/// insert position (a primary); the page size that tells a page header from data; and a
/// primary's timeline (the first 8 hex digits of its current WAL file's name, which
/// changes the moment a promotion ends, unlike the last checkpoint's).
pub(crate) const HOST_SQL: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() \
     ELSE pg_current_wal_insert_lsn() END, \
     current_setting('wal_block_size'), \
     CASE WHEN pg_is_in_recovery() THEN NULL \
     ELSE substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8) END";

/// Longest uninterrupted sleep, so a shutdown is noticed quickly.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// One polled server and its connection.
#[derive(Debug)]
pub(crate) struct Polled {
    addr: SocketAddr,
    link: Option<PgLink>,
    /// After a failure: no new connection before this instant.
    retry_at: Option<Instant>,
    /// The last failure was logged (log once per outage, not once per poll).
    failure_logged: bool,
}

impl Polled {
    pub(crate) fn new(addr: SocketAddr) -> Polled {
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
    pub(crate) fn query(
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
    let mut hosts: Vec<Polled> = (0..reader.host_count())
        .filter_map(|host| reader.host_addr(host))
        .map(Polled::new)
        .collect();
    let mut tracker = LsnTracker::new(reader.replica_count(), reader.lag_cap());
    while !stop.load(Ordering::Acquire) {
        let started = Instant::now();
        let elected = poll_round(reader, &login, &health, &mut hosts, &mut tracker);
        reader.publish(tracker.view(Instant::now()));
        if let Some(primary) = elected.and_then(|host| hosts.get_mut(host)) {
            look_up_functions(&login, &health, primary, reader.functions());
        }
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

/// What one host answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HostAnswer {
    pub(crate) role: HostRole,
    /// The insert position (as the end of what was written) of a read-write host, the
    /// replay position of a standby.
    lsn: Option<Lsn>,
    /// Taken before the query was sent.
    sent_at: Instant,
}

/// Asks every host, elects the primary, feeds the tracker; returns the elected host.
fn poll_round(
    reader: &ReadRouter,
    login: &ProbeLogin,
    health: &HealthConfig,
    hosts: &mut [Polled],
    tracker: &mut LsnTracker,
) -> Option<usize> {
    let answers: Vec<HostAnswer> = hosts
        .iter_mut()
        .map(|host| {
            // Taken before the query is sent: every commit acknowledged before it is below
            // the answer.
            let sent_at = Instant::now();
            match host.query(login, HOST_SQL, health) {
                Some(Ok(row)) => host_answer(&row, sent_at),
                Some(Err(_)) | None => HostAnswer {
                    role: HostRole::Unreachable,
                    lsn: None,
                    sent_at,
                },
            }
        })
        .collect();
    let roles: Vec<HostRole> = answers.iter().map(|answer| answer.role).collect();
    let elected = reader.on_poll_round(&roles);
    match elected.and_then(|host| answers.get(host)) {
        Some(HostAnswer {
            role: HostRole::ReadWrite { .. },
            lsn: Some(lsn),
            sent_at,
        }) => tracker.on_primary(*sent_at, *lsn),
        _ => tracker.on_primary_failed(),
    }
    // Host i + 1 is replica i; only a standby's position is a replay position.
    for (index, answer) in answers.iter().skip(1).enumerate() {
        match answer {
            HostAnswer {
                role: HostRole::Standby,
                lsn: Some(lsn),
                ..
            } => tracker.on_replica(index, *lsn),
            _ => tracker.on_replica_failed(index),
        }
    }
    elected
}

/// Reads one answer to [`HOST_SQL`]. A read-write answer without a timeline (a promotion
/// between the columns' evaluations) counts as unreachable this round.
pub(crate) fn host_answer(row: &Row, sent_at: Instant) -> HostAnswer {
    let text = |column: usize| {
        row.get(column)
            .and_then(|v| v.as_deref())
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let unreachable = HostAnswer {
        role: HostRole::Unreachable,
        lsn: None,
        sent_at,
    };
    let lsn = text(1).and_then(|v| Lsn::parse(v.as_bytes()));
    match text(0) {
        Some("t") => HostAnswer {
            role: HostRole::Standby,
            lsn,
            sent_at,
        },
        Some("f") => {
            let Some(timeline) = text(3).and_then(|v| u32::from_str_radix(v, 16).ok()) else {
                return unreachable;
            };
            let block_size = text(2).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            HostAnswer {
                role: HostRole::ReadWrite { timeline },
                lsn: lsn.map(|insert| insert_lsn_as_end(insert, block_size)),
                sent_at,
            }
        }
        _ => unreachable,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(columns: &[Option<&str>]) -> Row {
        columns
            .iter()
            .map(|c| c.map(|v| v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn answers_are_read_as_roles() {
        let at = Instant::now();
        let primary = host_answer(
            &row(&[Some("f"), Some("0/3000060"), Some("8192"), Some("0000000A")]),
            at,
        );
        assert_eq!(primary.role, HostRole::ReadWrite { timeline: 10 });
        assert_eq!(primary.lsn, Lsn::parse(b"0/3000060"));
        let standby = host_answer(&row(&[Some("t"), Some("0/3000060"), None, None]), at);
        assert_eq!(standby.role, HostRole::Standby);
        // Read-write without a timeline: not trusted this round.
        let torn = host_answer(&row(&[Some("f"), Some("0/1"), Some("8192"), None]), at);
        assert_eq!(torn.role, HostRole::Unreachable);
        assert_eq!(host_answer(&row(&[]), at).role, HostRole::Unreachable);
    }
}
