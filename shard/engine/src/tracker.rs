//! What a server still owes its client, so a transaction-mode server is released exactly when
//! it is idle. The model is `pgtier_wire::tracker::ResponseTracker` (Query/Sync/FunctionCall
//! each owed one ReadyForQuery, extended sequences open until Sync, COPY sub-protocols); this
//! adapter adds the engine's own internal queries and keeps the call sites short.

use pgtier_wire::codes::CodeSet;
pub use pgtier_wire::messages::backend::ready_for_query::TransactionStatus as TxStatus;
pub use pgtier_wire::tracker::ServerPhase;
use pgtier_wire::tracker::{CopyState, ResponseTracker, TRACKED_BACKEND_CODES, TrackerError};

/// Message types a logged-in client may send (PostgreSQL's own list: everything else, such
/// as a PasswordMessage after login, is a FATAL protocol violation). CopyData/Done/Fail are
/// valid outside COPY too: the server ignores them there.
const CLIENT_MESSAGE_CODES: CodeSet = CodeSet::of(b"BCdcfDEHFPQSX");

#[derive(Debug, Clone, Default)]
pub(crate) struct Tracker {
    inner: ResponseTracker,
}

impl Tracker {
    /// A client message with this type byte was forwarded to the server.
    pub(crate) fn on_client_message(&mut self, code: u8) -> Result<(), TrackerError> {
        self.inner.handle_frontend(code)
    }

    /// Whether `code` is a message type a logged-in client may send. Anything else is never
    /// forwarded: the client gets 08P01 and is closed, as PostgreSQL would do.
    pub(crate) fn is_client_message(code: u8) -> bool {
        CLIENT_MESSAGE_CODES.contains(code)
    }

    /// The engine itself sent a simple query (reset, parameter re-apply).
    pub(crate) fn on_internal_query(&mut self) {
        // A Query can only fail to count on u32 overflow, which one server never reaches.
        let _ = self.inner.handle_frontend(b'Q');
    }

    /// Whether a server message of this type must be shown to the tracker.
    pub fn wants(code: u8) -> bool {
        TRACKED_BACKEND_CODES.contains(code)
    }

    /// A server message the tracker wants; `body` matters for ReadyForQuery only.
    pub(crate) fn on_server_message(&mut self, code: u8, body: &[u8]) -> Result<(), TrackerError> {
        self.inner.handle_backend(code, body)
    }

    /// The server can serve another client.
    pub fn is_idle(&self) -> bool {
        self.inner.is_idle()
    }

    /// A query is executing (a cancel would hit something).
    pub(crate) fn has_outstanding(&self) -> bool {
        self.inner.pending_ready() > 0
    }

    /// Whether a cancel may find a statement of the client's running: something is owed
    /// its ReadyForQuery, a COPY is under way, or extended messages went with no Sync after
    /// them. That last is an Execute that may still run (PostgreSQL answers nothing until
    /// a Sync or Flush); if it has ended, the backend waits for input and ignores the
    /// cancel, as it would from a client of its own.
    pub(crate) fn may_be_running(&self) -> bool {
        self.inner.pending_ready() > 0
            || matches!(
                self.inner.phase(),
                ServerPhase::Unsynced | ServerPhase::Copy(_)
            )
    }

    /// The tracker's summary: idle, in a transaction block, unsynced, busy, copying.
    #[inline]
    pub fn phase(&self) -> ServerPhase {
        self.inner.phase()
    }

    /// The server is in COPY FROM STDIN (or COPY BOTH): only the client can end it.
    pub fn copy_in(&self) -> bool {
        matches!(
            self.inner.copy_state(),
            CopyState::In | CopyState::Both { .. }
        )
    }

    /// Whether the last ReadyForQuery said the server was inside a transaction block (open
    /// or failed).
    pub(crate) fn last_ready_in_block(&self) -> bool {
        !matches!(
            self.inner.transaction_status(),
            pgtier_wire::messages::backend::TransactionStatus::Idle
        )
    }

    /// Nothing running, but inside a transaction block (idle_transaction_timeout applies).
    pub(crate) fn idle_in_transaction(&self) -> bool {
        matches!(self.inner.phase(), ServerPhase::InTransaction(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(t: &mut Tracker, status: u8) {
        t.on_server_message(b'Z', &[status])
            .expect("expected ReadyForQuery");
    }

    #[test]
    fn simple_query_cycle() {
        let mut t = Tracker::default();
        t.on_client_message(b'Q').expect("ok");
        assert!(!t.is_idle());
        ready(&mut t, b'I');
        assert!(t.is_idle());
    }

    #[test]
    fn held_in_transaction() {
        let mut t = Tracker::default();
        t.on_client_message(b'Q').expect("ok");
        ready(&mut t, b'T');
        assert!(!t.is_idle());
        assert!(t.idle_in_transaction());
        t.on_client_message(b'Q').expect("ok");
        ready(&mut t, b'I');
        assert!(t.is_idle());
    }

    #[test]
    fn extended_sequence_until_sync() {
        let mut t = Tracker::default();
        for code in [b'P', b'B', b'D', b'E'] {
            t.on_client_message(code).expect("ok");
        }
        assert!(!t.is_idle());
        t.on_client_message(b'S').expect("ok");
        assert!(!t.is_idle());
        ready(&mut t, b'I');
        assert!(t.is_idle());
    }

    #[test]
    fn internal_query_is_owed_a_ready() {
        let mut t = Tracker::default();
        t.on_internal_query();
        assert!(t.has_outstanding());
        ready(&mut t, b'I');
        assert!(t.is_idle());
    }

    #[test]
    fn only_frontend_message_types_are_client_messages() {
        for code in *b"BCdcfDEHFPQSX" {
            assert!(Tracker::is_client_message(code), "{}", code as char);
        }
        for code in [b'@', b'p', b'Z', b'T', 0, 0xff] {
            assert!(!Tracker::is_client_message(code), "{code}");
        }
    }

    #[test]
    fn unexpected_ready_is_an_error() {
        let mut t = Tracker::default();
        assert!(t.on_server_message(b'Z', b"I").is_err());
    }
}
