//! One client connection of the fault load, and how its errors are filed.
//!
//! Why a wrapper: a FATAL ErrorResponse that arrives while no statement is pending (a
//! session idle in its transaction, ended by `pg_ctl stop -m fast` with PostgreSQL's 57P01,
//! or by pgtier with 08006 when the primary moves) reaches tokio-postgres's connection
//! task only: that task ends with the error, and the client's next statement fails with
//! "connection closed", no SQLSTATE, without being sent. The wrapper keeps what ended the
//! task, so the load files that statement under the SQLSTATE the server (or pgtier) sent,
//! and knows that it never reached the server (a COMMIT that was never sent did not commit).
//! `tests/tests/switchover_wire.rs` shows both the bytes pgtier sends and this reading.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

/// A connected client and the error that ended its connection task, if one did.
pub struct Session {
    client: Client,
    ended_by: Rc<RefCell<Option<String>>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("ended_by", &self.ended_by.borrow())
            .finish()
    }
}

/// How a statement failed, as a client would file it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The SQLSTATE, or what happened to the connection; a FATAL that arrived between
    /// statements reads `57P01 while idle`.
    pub kind: String,
    /// Whether the statement may have reached the server (false: the connection had ended
    /// before it was sent).
    pub sent: bool,
    /// Whether the connection is gone (a FATAL, a socket failure).
    pub died: bool,
}

impl Session {
    /// Connects with `config` within `timeout`; the connection task runs on the current
    /// `LocalSet` (every socket in the calling thread's namespace).
    pub async fn connect(
        config: &tokio_postgres::Config,
        timeout: Duration,
    ) -> Result<Session, String> {
        match tokio::time::timeout(timeout, config.connect(NoTls)).await {
            Ok(Ok((client, connection))) => {
                let ended_by = Rc::new(RefCell::new(None));
                let slot = Rc::clone(&ended_by);
                tokio::task::spawn_local(async move {
                    // Stored in the same poll that ends the task (one thread), so before any
                    // statement can see the connection closed.
                    if let Err(error) = connection.await {
                        let code = error.as_db_error().map(|db| db.code().code().to_string());
                        *slot.borrow_mut() = code;
                    }
                });
                Ok(Session { client, ended_by })
            }
            Ok(Err(error)) => Err(format!("connect: {}", error_kind(&error))),
            Err(_) => Err("connect: client timeout".to_string()),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Files `error`, returned by a statement of this session.
    pub fn failure(&self, error: &tokio_postgres::Error) -> Failure {
        let ended_by = self.ended_by.borrow().clone();
        if let (None, true, Some(code)) = (error.as_db_error(), error.is_closed(), ended_by) {
            return Failure {
                kind: format!("{code} while idle"),
                sent: false,
                died: true,
            };
        }
        let died = match error.as_db_error() {
            Some(db) => {
                db.severity() == "FATAL" || db.severity() == "PANIC" || self.client.is_closed()
            }
            None => true,
        };
        Failure {
            kind: error_kind(error),
            sent: true,
            died,
        }
    }
}

/// An error as a client would file it: its SQLSTATE, or what happened to the connection.
pub fn error_kind(error: &tokio_postgres::Error) -> String {
    if let Some(db) = error.as_db_error() {
        return db.code().code().to_string();
    }
    if error.is_closed() {
        return "connection closed".to_string();
    }
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if let Some(io) = cause.downcast_ref::<io::Error>() {
            return match io.kind() {
                // The peer went away: libpq and JDBC both call this a connection failure.
                io::ErrorKind::ConnectionReset
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::UnexpectedEof
                | io::ErrorKind::ConnectionAborted => "connection closed".to_string(),
                kind => format!("io {kind:?}"),
            };
        }
        source = cause.source();
    }
    "connection closed".to_string()
}
