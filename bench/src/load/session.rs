//! One live session: connect as its class's user, run the planned queries with think time
//! until the lifetime is over, reconnect when the server goes away, and report every attempt.
//!
//! Runs on its own OS thread with the blocking `postgres` client; everything it observes
//! goes to the driver as [`Event`]s, so the session holds no shared state.

use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

use super::queries::Query;
use super::row::{CONNECT_QUERY, CONNECTION_CODE, Outcome, Row};
use super::schedule::{QueryPicker, SessionPlan};
use crate::sim::workload::Class;

/// How often a broken session retries its connection.
pub const RECONNECT_INTERVAL: Duration = Duration::from_millis(200);

/// What a session tells the driver.
#[derive(Debug)]
pub enum Event {
    /// One attempt, in the session's order.
    Row(Row),
    /// The session's thread is done (its last event); `abandoned` when it gave up
    /// reconnecting before its lifetime was over.
    Ended {
        /// The session's class.
        class: Class,
        /// True when the reconnect window ran out.
        abandoned: bool,
    },
}

/// What every session of a class shares.
#[derive(Debug, Clone)]
pub struct SessionContext {
    /// The instant offsets in the schedule and the CSV are measured from.
    pub run_start: Instant,
    /// Where and as whom to connect.
    pub config: postgres::Config,
    /// How long to keep retrying a connection before giving the session up.
    pub reconnect_timeout: Duration,
    /// The queries file, indexed by [`super::schedule::Step::query`].
    pub queries: Arc<Vec<Query>>,
    /// The schedule's query choice.
    pub picker: Arc<QueryPicker>,
    /// Where events go.
    pub events: Sender<Event>,
}

/// How a session's plan ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionEnd {
    /// The lifetime ran out.
    LifetimeOver,
    /// No connection within the reconnect window.
    Abandoned,
}

/// Result of trying to (re)connect.
enum Connect {
    Open(Box<Client>),
    LifetimeOver,
    GaveUp,
}

/// Seconds as a Duration, clamped to [0, ~31 years] so odd values never panic.
fn secs(value: f64) -> Duration {
    Duration::try_from_secs_f64(value.clamp(0.0, 1e9)).unwrap_or(Duration::ZERO)
}

/// Sleeps until `wake`, if it is in the future.
fn sleep_until(wake: Instant) {
    let now = Instant::now();
    if wake > now {
        std::thread::sleep(wake - now);
    }
}

/// The error's SQLSTATE, or [`CONNECTION_CODE`] when it has none.
fn outcome_of(error: &postgres::Error) -> Outcome {
    let code = error.code().map_or(CONNECTION_CODE, |c| c.code());
    Outcome::Error(code.to_string())
}

/// True when the connection cannot be used after `error`.
fn connection_lost(error: &postgres::Error) -> bool {
    match error.code() {
        // No SQLSTATE: an I/O error, a closed socket or a protocol violation.
        None => true,
        Some(code) => {
            let code = code.code();
            // Class 08 is connection exception; 57P01..57P03 are the server shutting down
            // or not accepting connections (admin_shutdown, crash_shutdown, cannot_connect_now).
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
    }
}

/// The driver side of one running session.
struct Session<'a> {
    plan: &'a SessionPlan,
    context: &'a SessionContext,
    /// When the lifetime is over.
    end: Instant,
}

impl Session<'_> {
    fn offset_s(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.context.run_start)
            .as_secs_f64()
    }

    fn record(&self, query: &str, started: Instant, outcome: Outcome) {
        let row = Row {
            class: self.plan.class,
            session: self.plan.index,
            query: query.to_string(),
            start_s: self.offset_s(started),
            latency_ms: started.elapsed().as_secs_f64() * 1000.0,
            outcome,
        };
        // A closed channel means the driver is gone; nothing is left to report to.
        let _ = self.context.events.send(Event::Row(row));
    }

    /// Tries to connect every [`RECONNECT_INTERVAL`] for up to the reconnect timeout.
    fn connect(&self) -> Connect {
        let give_up = Instant::now() + self.context.reconnect_timeout;
        loop {
            let started = Instant::now();
            if started >= self.end {
                return Connect::LifetimeOver;
            }
            match self.context.config.connect(NoTls) {
                Ok(client) => return Connect::Open(Box::new(client)),
                Err(e) => self.record(CONNECT_QUERY, started, outcome_of(&e)),
            }
            let retry = started + RECONNECT_INTERVAL;
            if retry >= self.end {
                // The session still occupies its slot until its lifetime is over.
                sleep_until(self.end);
                return Connect::LifetimeOver;
            }
            if retry > give_up {
                return Connect::GaveUp;
            }
            sleep_until(retry);
        }
    }

    /// Runs one query; returns whether the connection is still usable.
    fn execute(&self, client: &mut Client, query: &Query) -> bool {
        let started = Instant::now();
        match client.simple_query(&query.sql) {
            Ok(_) => {
                self.record(&query.name, started, Outcome::Ok);
                true
            }
            Err(e) => {
                self.record(&query.name, started, outcome_of(&e));
                !(connection_lost(&e) || client.is_closed())
            }
        }
    }

    fn drive(&self) -> SessionEnd {
        let mut client: Option<Box<Client>> = None;
        for step in self.plan.steps(&self.context.picker) {
            if Instant::now() >= self.end {
                return SessionEnd::LifetimeOver;
            }
            let Some(query) = self.context.queries.get(step.query) else {
                // The picker was built from these queries; a mismatch ends the session.
                return SessionEnd::LifetimeOver;
            };
            // After a broken connection, reconnect lazily: the plan's think time still
            // applies, and a session whose lifetime ends meanwhile never reconnects.
            let mut open = match client.take() {
                Some(open) => open,
                None => match self.connect() {
                    Connect::Open(open) => open,
                    Connect::LifetimeOver => return SessionEnd::LifetimeOver,
                    Connect::GaveUp => return SessionEnd::Abandoned,
                },
            };
            if self.execute(&mut open, query) {
                client = Some(open);
            }
            let wake = Instant::now()
                .checked_add(secs(step.think_s))
                .unwrap_or(self.end);
            if wake >= self.end {
                sleep_until(self.end);
                return SessionEnd::LifetimeOver;
            }
            sleep_until(wake);
        }
        SessionEnd::LifetimeOver
    }
}

/// Tells the driver the session ended, also when the session's thread unwinds.
struct EndNotice {
    class: Class,
    events: Sender<Event>,
    abandoned: bool,
}

impl Drop for EndNotice {
    fn drop(&mut self) {
        let _ = self.events.send(Event::Ended {
            class: self.class,
            abandoned: self.abandoned,
        });
    }
}

/// Runs `plan` to the end of its lifetime; the thread body of one session.
pub fn run_session(plan: &SessionPlan, context: &SessionContext) {
    let mut notice = EndNotice {
        class: plan.class,
        events: context.events.clone(),
        abandoned: false,
    };
    let end = context
        .run_start
        .checked_add(secs(plan.end_s()))
        .unwrap_or(context.run_start);
    let session = Session { plan, context, end };
    notice.abandoned = session.drive() == SessionEnd::Abandoned;
}
