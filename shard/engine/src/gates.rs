//! PgBouncer's process-controlling admin commands as the engine runs them (PAUSE, RESUME,
//! RECONNECT, KILL, KILL_CLIENT, ENABLE, DISABLE, WAIT_CLOSE, SUSPEND, SHUTDOWN, RELOAD,
//! SET), and the gates they leave behind on each shard (paused, disabled, suspended).
//!
//! The admin console parses a statement into an [`AdminOp`] (`console/src/operations.rs`);
//! the console session's shard posts it to every shard (`Command::Admin`), each shard
//! applies it and answers (`Command::AdminDone`) once the op's condition holds there (for
//! PAUSE: none of the database's servers is left; for WAIT_CLOSE: none is marked to close),
//! and the console session is answered when every shard did.

use std::collections::HashSet;

/// Which databases an op covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Database(String),
}

impl Scope {
    /// From an optional database argument.
    pub fn of(database: Option<&str>) -> Scope {
        match database {
            Some(database) => Scope::Database(database.to_string()),
            None => Scope::All,
        }
    }

    pub fn covers(&self, database: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::Database(name) => name == database,
        }
    }
}

/// How a shutdown treats clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShutdownMode {
    /// SIGTERM, `SHUTDOWN WAIT_FOR_CLIENTS`: stop accepting, wait until every client has
    /// left.
    WaitForClients,
    /// SIGINT, `SHUTDOWN WAIT_FOR_SERVERS`: stop accepting, close each client once its
    /// transaction is over, exit once no server is in use.
    WaitForTransactions,
    /// `SHUTDOWN`, or a second signal: close everything now.
    Immediate,
}

/// The client `KILL_CLIENT` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientRef {
    /// The `id` of SHOW CLIENTS (PgBouncer 1.25's form): any shard may hold it.
    Id(crate::ids::SocketId),
    /// The `ptr` of SHOW CLIENTS: its shard, and its key there (`client_key`).
    Ptr { shard: usize, key: u64 },
}

impl ShutdownMode {
    /// Whether a client logging in to a pool during this shutdown is refused ("pooler is
    /// shutting down"); the admin console always gets in, as with PgBouncer, whose Unix
    /// socket stays open for it while a graceful shutdown runs. Under WAIT_FOR_CLIENTS a TCP
    /// client is served: it can only be one the kernel had queued on a listener that was
    /// then drained (a rolling restart loses no connection); a client of the Unix socket,
    /// which stays open, came after the shutdown.
    pub fn refuses_login(self, on_unix_socket: bool) -> bool {
        match self {
            ShutdownMode::WaitForClients => on_unix_socket,
            ShutdownMode::WaitForTransactions | ShutdownMode::Immediate => true,
        }
    }

    /// Whether the Unix socket stays open (for the admin console) while this shutdown
    /// runs: yes until the shard is done, except for an immediate one.
    pub fn keeps_unix_socket(self) -> bool {
        self != ShutdownMode::Immediate
    }
}

/// One process-controlling command, already checked against the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminOp {
    /// New transactions of the scope wait; servers close once released. Answered when none
    /// of the scope's servers is left.
    Pause(Scope),
    /// Lifts a PAUSE or KILL.
    Resume(Scope),
    /// Every server of the scope closes when it is next released (idle ones at once).
    Reconnect(Scope),
    /// Waits until no server of the scope is marked to close (after RECONNECT or RELOAD).
    WaitClose(Scope),
    /// Closes every client and server of a database (`Scope::All`: of every database but
    /// the console) now and pauses it (each database, by name, as PgBouncer does).
    Kill(Scope),
    /// Closes one client.
    KillClient(ClientRef),
    /// New clients of a database are refused.
    Disable(String),
    /// New clients of a database are accepted again.
    Enable(String),
    /// Every client and pooled server stops being read (console sessions excepted), and new
    /// transactions wait, those of clients that log in meanwhile included. Answered once
    /// every client's queued bytes are sent; RESUME lifts it.
    Suspend,
    /// The process stops in this mode.
    Shutdown(ShutdownMode),
}

impl AdminOp {
    /// The CommandComplete tag PgBouncer answers it with.
    pub fn tag(&self) -> &'static str {
        match self {
            AdminOp::Pause(_) => "PAUSE",
            AdminOp::Resume(_) => "RESUME",
            AdminOp::Reconnect(_) => "RECONNECT",
            AdminOp::WaitClose(_) => "WAIT_CLOSE",
            AdminOp::Kill(_) => "KILL",
            AdminOp::KillClient(_) => "KILL_CLIENT",
            AdminOp::Disable(_) => "DISABLE",
            AdminOp::Enable(_) => "ENABLE",
            AdminOp::Suspend => "SUSPEND",
            AdminOp::Shutdown(_) => "SHUTDOWN",
        }
    }
}

/// What the console made of a statement that is not a SHOW.
#[derive(Debug, Clone, PartialEq)]
pub enum AdminRequest {
    /// Run on every shard.
    Op(AdminOp),
    /// RELOAD or SET: a change the process carries out; answered once every shard applied
    /// it (`crate::reconfigure`).
    Reconfigure(crate::reconfigure::Change),
    /// A SET of a client parameter PgBouncer's console pretends to take (`client_encoding`,
    /// `datestyle`...): answered with a notice that it is ignored.
    IgnoredSet,
}

/// Per-database gates of one shard. Every shard holds the same gates: each applies every
/// op it is posted.
#[derive(Debug, Default)]
pub struct Gates {
    paused_all: bool,
    suspended: bool,
    paused: HashSet<String>,
    disabled: HashSet<String>,
}

impl Gates {
    /// New transactions of `database` wait.
    /// (Asked at every transaction start: nothing is hashed while nothing is paused.)
    pub(crate) fn is_paused(&self, database: &str) -> bool {
        self.paused_all || (!self.paused.is_empty() && self.paused.contains(database))
    }

    /// New clients of `database` are refused.
    pub fn is_disabled(&self, database: &str) -> bool {
        !self.disabled.is_empty() && self.disabled.contains(database)
    }

    /// Whether a PAUSE of every database holds (SHOW STATE's `paused`).
    pub fn is_paused_all(&self) -> bool {
        self.paused_all
    }

    /// Whether `database` itself was paused or killed by name (SHOW DATABASES' `paused`).
    pub fn is_paused_by_name(&self, database: &str) -> bool {
        !self.paused.is_empty() && self.paused.contains(database)
    }

    /// Whether SUSPEND holds (SHOW STATE's `suspended`).
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    pub(crate) fn suspend(&mut self) {
        self.suspended = true;
    }

    /// Whether anything is paused (PgBouncer refuses a second PAUSE then).
    pub(crate) fn any_paused(&self) -> bool {
        self.paused_all || !self.paused.is_empty()
    }

    pub fn pause(&mut self, scope: &Scope) {
        match scope {
            Scope::All => self.paused_all = true,
            Scope::Database(name) => {
                self.paused.insert(name.clone());
            }
        }
    }

    /// RESUME without a database lifts the global pause only; a database paused by name (or
    /// killed) needs its own RESUME, as in PgBouncer.
    pub(crate) fn resume(&mut self, scope: &Scope) {
        match scope {
            Scope::All => {
                self.paused_all = false;
                self.suspended = false;
            }
            Scope::Database(name) => {
                self.paused.remove(name);
            }
        }
    }

    pub(crate) fn set_disabled(&mut self, database: &str, disabled: bool) {
        if disabled {
            self.disabled.insert(database.to_string());
        } else {
            self.disabled.remove(database);
        }
    }

    /// Refusal of `op` given the current gates, with PgBouncer's text.
    pub fn refusal(&self, op: &AdminOp, shutting_down: bool) -> Option<String> {
        match op {
            AdminOp::Pause(_) | AdminOp::Suspend if self.paused_all || self.suspended => {
                Some("already suspended/paused".to_string())
            }
            AdminOp::Resume(_) if shutting_down => Some("pooler is shutting down".to_string()),
            AdminOp::Resume(Scope::All) if !self.paused_all && !self.suspended => {
                Some("pooler is not paused/suspended".to_string())
            }
            AdminOp::Resume(Scope::Database(name)) if !self.is_paused(name) => {
                Some(format!("database {name} is not paused"))
            }
            _ => None,
        }
    }
}

/// SIGUSR1 and SIGUSR2: PgBouncer's signals for PAUSE and RESUME of everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseSignal {
    /// SIGUSR1: PAUSE.
    Pause,
    /// SIGUSR2: RESUME (from PAUSE or SUSPEND).
    Resume,
}

impl Gates {
    /// What `signal` does given the gates and whether a shutdown runs: the op every shard
    /// applies (none: nothing to do) and PgBouncer's log line for it (operators and its
    /// test suite look for these words).
    pub fn on_signal(
        &self,
        signal: PauseSignal,
        shutting_down: bool,
    ) -> (Option<AdminOp>, &'static str) {
        match signal {
            PauseSignal::Pause if self.paused_all || self.suspended => {
                (None, "got SIGUSR1, but already paused/suspended")
            }
            PauseSignal::Pause => (
                Some(AdminOp::Pause(Scope::All)),
                "got SIGUSR1, pausing all activity",
            ),
            PauseSignal::Resume if shutting_down => {
                (None, "got SIGUSR2 while shutting down, ignoring")
            }
            PauseSignal::Resume if self.suspended => (
                Some(AdminOp::Resume(Scope::All)),
                "got SIGUSR2, continuing from SUSPEND",
            ),
            PauseSignal::Resume if self.paused_all => (
                Some(AdminOp::Resume(Scope::All)),
                "got SIGUSR2, continuing from PAUSE",
            ),
            PauseSignal::Resume => (None, "got SIGUSR2, but not paused/suspended"),
        }
    }
}

/// A client's key on its shard as KILL_CLIENT names it: the low 15 bits of its slot
/// generation, then its 32-bit slot index — the part of SHOW CLIENTS' `ptr` below the shard
/// and kind bits (`console/src/format.rs`).
pub fn client_key(id: crate::ClientId) -> u64 {
    (u64::from(id.generation() & 0x7FFF) << 32) | u64::from(id.index())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sigusr1_pauses_and_sigusr2_resumes_unless_shutting_down() {
        let mut gates = Gates::default();
        let (op, line) = gates.on_signal(PauseSignal::Pause, false);
        assert_eq!(op, Some(AdminOp::Pause(Scope::All)));
        assert_eq!(line, "got SIGUSR1, pausing all activity");
        assert_eq!(
            gates.on_signal(PauseSignal::Resume, false),
            (None, "got SIGUSR2, but not paused/suspended")
        );
        gates.pause(&Scope::All);
        assert_eq!(
            gates.on_signal(PauseSignal::Pause, false),
            (None, "got SIGUSR1, but already paused/suspended")
        );
        assert_eq!(
            gates.on_signal(PauseSignal::Resume, false),
            (
                Some(AdminOp::Resume(Scope::All)),
                "got SIGUSR2, continuing from PAUSE"
            )
        );
        assert_eq!(
            gates.on_signal(PauseSignal::Resume, true),
            (None, "got SIGUSR2 while shutting down, ignoring")
        );
        gates.resume(&Scope::All);
        gates.suspend();
        assert_eq!(
            gates.on_signal(PauseSignal::Resume, false),
            (
                Some(AdminOp::Resume(Scope::All)),
                "got SIGUSR2, continuing from SUSPEND"
            )
        );
    }

    #[test]
    fn graceful_shutdowns_refuse_pool_logins_but_serve_drained_tcp_under_wait_for_clients() {
        assert!(ShutdownMode::WaitForClients.refuses_login(true));
        assert!(!ShutdownMode::WaitForClients.refuses_login(false));
        for mode in [ShutdownMode::WaitForTransactions, ShutdownMode::Immediate] {
            assert!(mode.refuses_login(true));
            assert!(mode.refuses_login(false));
        }
        assert!(ShutdownMode::WaitForClients.keeps_unix_socket());
        assert!(ShutdownMode::WaitForTransactions.keeps_unix_socket());
        assert!(!ShutdownMode::Immediate.keeps_unix_socket());
    }

    #[test]
    fn pause_and_resume_by_database_and_all() {
        let mut gates = Gates::default();
        gates.pause(&Scope::of(Some("app")));
        assert!(gates.is_paused("app") && !gates.is_paused("other"));
        assert_eq!(
            gates
                .refusal(&AdminOp::Resume(Scope::All), false)
                .as_deref(),
            Some("pooler is not paused/suspended"),
            "as PgBouncer: the global pause and a database's are apart"
        );
        assert_eq!(gates.refusal(&AdminOp::Pause(Scope::All), false), None);
        gates.resume(&Scope::of(Some("app")));
        assert!(!gates.any_paused());
        gates.pause(&Scope::All);
        assert_eq!(
            gates.refusal(&AdminOp::Pause(Scope::All), false).as_deref(),
            Some("already suspended/paused")
        );
        assert!(gates.is_paused("anything"));
        assert_eq!(
            gates
                .refusal(&AdminOp::Resume(Scope::of(Some("x"))), false)
                .as_deref(),
            None,
            "every database is paused"
        );
    }

    #[test]
    fn resume_of_what_is_not_paused_is_refused() {
        let gates = Gates::default();
        assert_eq!(
            gates
                .refusal(&AdminOp::Resume(Scope::All), false)
                .as_deref(),
            Some("pooler is not paused/suspended")
        );
        assert_eq!(
            gates
                .refusal(&AdminOp::Resume(Scope::of(Some("app"))), false)
                .as_deref(),
            Some("database app is not paused")
        );
        assert_eq!(
            gates.refusal(&AdminOp::Resume(Scope::All), true).as_deref(),
            Some("pooler is shutting down")
        );
    }

    #[test]
    fn suspend_is_lifted_by_resume_and_refuses_a_pause() {
        let mut gates = Gates::default();
        gates.suspend();
        assert_eq!(
            gates.refusal(&AdminOp::Suspend, false).as_deref(),
            Some("already suspended/paused")
        );
        assert_eq!(
            gates.refusal(&AdminOp::Pause(Scope::All), false).as_deref(),
            Some("already suspended/paused")
        );
        assert_eq!(gates.refusal(&AdminOp::Resume(Scope::All), false), None);
        gates.resume(&Scope::All);
        assert!(!gates.is_suspended());
    }

    #[test]
    fn disable_and_enable() {
        let mut gates = Gates::default();
        gates.set_disabled("app", true);
        assert!(gates.is_disabled("app"));
        gates.set_disabled("app", false);
        assert!(!gates.is_disabled("app"));
    }
}
