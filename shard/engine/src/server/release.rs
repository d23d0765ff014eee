//! How a server leaves its client: the one path, whatever the reason (the end of a
//! transaction, the client disconnecting in any state, a shutdown). The server drains what
//! it still owes, then is rolled back, reset, and only then pooled; anything that cannot be
//! made clean is closed. So every server that changes hands is either reset and answered,
//! or closed.

use crate::server::{ServerConn, ServerState};
use crate::tracker::ServerPhase;

/// What a server must run before another client may have it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reset {
    /// Its client could not have left session state on it (transaction mode, not pinned).
    #[default]
    None,
    /// PgBouncer's rule: `server_reset_query`, if set, in session mode (and in transaction
    /// mode with `server_reset_query_always`).
    Configured,
    /// Its client created session state (it was pinned in transaction mode): the state must
    /// go, with `server_reset_query`, or `DISCARD ALL` when that is empty.
    SessionState,
    /// Its session-mode client left it unclean (mid-query, inside a transaction): it closes
    /// once nothing is owed, as PgBouncer does, so the next session gets a fresh backend.
    Close,
    /// A replication connection: a walsender serves one client, so it closes as soon as
    /// that client leaves, whatever it was doing.
    Replication,
}

/// The next step of a releasing server.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReleaseStep {
    /// Answers or a cancel are still on their way.
    Wait,
    /// Send this query of the engine's own, and ask again when it is answered.
    Query(bytes::Bytes),
    /// Clean: it may go back to the pool.
    Pool,
    /// It cannot be made clean: close it (the reason is for the log).
    Close(&'static str),
}

/// What to do right away when a server's client leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientLeft {
    /// Close it now: its backend is blocked writing a result nobody reads (PostgreSQL does
    /// not act on a cancel there), or waits in COPY FROM STDIN for data that never comes.
    /// Closing the socket makes it abort and roll back at once.
    CloseNow,
    /// Release it; `cancel` when a query still runs and should be cancelled first.
    Release { cancel: bool },
}

impl ServerConn {
    /// Its client is gone; `cancel_on_disconnect` is the setting of that name.
    pub(crate) fn client_left(&mut self, cancel_on_disconnect: bool) -> ClientLeft {
        if self.io.paused
            || self.backend.tracker.copy_in()
            || self.backend.reset == Reset::Replication
        {
            return ClientLeft::CloseNow;
        }
        if !self.mode.releases_at_idle_ready() && !self.backend.tracker.is_idle() {
            self.backend.reset = Reset::Close;
        }
        ClientLeft::Release {
            cancel: cancel_on_disconnect && self.backend.tracker.has_outstanding(),
        }
    }

    /// What to do next with a server that left its client: asked when it starts releasing
    /// and after every answer it gets while releasing. `reset_query` is
    /// `server_reset_query`.
    pub(crate) fn next_release_step(&mut self, reset_query: &str) -> ReleaseStep {
        // Extended messages with no Sync after them (the client left before sending it): the
        // server answers none of them until a Sync, so waiting for the ledger's answers
        // would keep it, and whatever its transaction holds, out of use for good.
        if self.backend.tracker.phase() == ServerPhase::Unsynced {
            return ReleaseStep::Close("its client left inside an extended-protocol segment");
        }
        if self.backend.tracker.has_outstanding()
            || self.backend.relay.owes_internal()
            || self.backend.relay.owes_statement_answers()
            || self.backend.cancels_pending > 0
        {
            return ReleaseStep::Wait;
        }
        if self.backend.reset == Reset::Close {
            return ReleaseStep::Close("its session-mode client left it unclean");
        }
        if self.backend.reset == Reset::Replication {
            return ReleaseStep::Close("a replication connection serves one client");
        }
        if self.backend.relay.take_swallowed_error().is_some() {
            return ReleaseStep::Close("a rollback or reset of pgtier's failed");
        }
        match self.backend.tracker.phase() {
            ServerPhase::Idle => {
                let query = match std::mem::replace(&mut self.backend.reset, Reset::None) {
                    Reset::None | Reset::Close | Reset::Replication => {
                        return ReleaseStep::Pool;
                    }
                    Reset::Configured if reset_query.is_empty() => return ReleaseStep::Pool,
                    Reset::SessionState if reset_query.is_empty() => "DISCARD ALL",
                    Reset::Configured | Reset::SessionState => reset_query,
                };
                self.backend.statements_reset_by(query);
                ReleaseStep::Query(self.backend.internal_query(query))
            }
            ServerPhase::InTransaction(_) => match &mut self.state {
                ServerState::Releasing { rolled_back, .. } if !*rolled_back => {
                    *rolled_back = true;
                    ReleaseStep::Query(self.backend.internal_query("ROLLBACK"))
                }
                _ => ReleaseStep::Close("still inside a transaction after its rollback"),
            },
            _ => ReleaseStep::Close("left inside a protocol exchange it cannot finish"),
        }
    }

    /// It goes back to the pool clean: per-client marks are cleared.
    pub fn pooled(&mut self) {
        self.backend.reset = Reset::None;
        let _ = self.backend.relay.take_swallowed_error();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::ServerAddr;
    use pgtier_core::config::PoolMode;
    use std::time::Instant;

    fn server(mode: PoolMode) -> ServerConn {
        ServerConn::new(
            crate::test_support::pool_id(),
            ServerAddr::Tcp("127.0.0.1:5432".parse().expect("addr")),
            mode,
            Instant::now(),
        )
    }

    /// The server answers the oldest request with ReadyForQuery(`status`).
    fn answer(server: &mut ServerConn, status: u8) {
        let frame = [b'Z', 0, 0, 0, 5, status];
        server.backend.relay.scan(
            &frame,
            &mut server.backend.tracker,
            &mut server.backend.params,
            None,
            1 << 20,
        );
    }

    fn begin(server: &mut ServerConn) {
        server
            .backend
            .tracker
            .on_client_message(b'Q')
            .expect("query");
        server
            .backend
            .tracker
            .on_server_message(b'Z', b"T")
            .expect("owed");
    }

    #[test]
    fn an_idle_server_without_a_reset_goes_straight_back() {
        let mut server = server(PoolMode::Transaction);
        assert_eq!(server.next_release_step("DISCARD ALL"), ReleaseStep::Pool);
    }

    #[test]
    fn a_session_server_is_reset_then_pooled() {
        let mut server = server(PoolMode::Session);
        server.backend.reset = Reset::Configured;
        let ReleaseStep::Query(query) = server.next_release_step("DISCARD ALL") else {
            panic!("reset");
        };
        assert_eq!(&query[5..], b"DISCARD ALL\0");
        assert_eq!(server.next_release_step("DISCARD ALL"), ReleaseStep::Wait);
        answer(&mut server, b'I');
        assert_eq!(server.next_release_step("DISCARD ALL"), ReleaseStep::Pool);
    }

    #[test]
    fn pinned_state_is_discarded_even_without_a_reset_query() {
        let mut server = server(PoolMode::Transaction);
        server.backend.reset = Reset::SessionState;
        let ReleaseStep::Query(query) = server.next_release_step("") else {
            panic!("reset");
        };
        assert_eq!(&query[5..], b"DISCARD ALL\0");
    }

    #[test]
    fn an_open_transaction_is_rolled_back_once() {
        let mut server = server(PoolMode::Transaction);
        begin(&mut server);
        server.start_releasing(Instant::now());
        let ReleaseStep::Query(query) = server.next_release_step("") else {
            panic!("rollback");
        };
        assert_eq!(&query[5..], b"ROLLBACK\0");
        answer(&mut server, b'T');
        assert!(
            matches!(server.next_release_step(""), ReleaseStep::Close(_)),
            "still in a transaction after the rollback: closed"
        );
    }

    #[test]
    fn a_client_leaving_before_its_sync_closes_its_server() {
        let mut server = server(PoolMode::Transaction);
        begin(&mut server);
        server
            .backend
            .tracker
            .on_client_message(b'P')
            .expect("parse");
        // The statement ledger waits for that Parse's answer.
        let prepared = server
            .backend
            .relay
            .prepared
            .get_or_insert_with(Box::default);
        prepared.ledger.push(crate::prepared::ledger::Owed::Bind);
        assert!(server.backend.relay.owes_statement_answers());
        assert_eq!(
            server.client_left(false),
            ClientLeft::Release { cancel: false }
        );
        server.start_releasing(Instant::now());
        assert!(
            matches!(server.next_release_step(""), ReleaseStep::Close(_)),
            "no answer comes before a Sync: closed, not waited for"
        );
    }

    #[test]
    fn a_session_client_leaving_mid_transaction_closes_its_server() {
        let mut server = server(PoolMode::Session);
        begin(&mut server);
        assert_eq!(
            server.client_left(true),
            ClientLeft::Release { cancel: false }
        );
        assert!(matches!(
            server.next_release_step("DISCARD ALL"),
            ReleaseStep::Close(_)
        ));
    }

    #[test]
    fn a_running_query_is_cancelled_and_waited_for() {
        let mut server = server(PoolMode::Transaction);
        server
            .backend
            .tracker
            .on_client_message(b'Q')
            .expect("query");
        assert_eq!(
            server.client_left(true),
            ClientLeft::Release { cancel: true }
        );
        assert_eq!(
            server.client_left(false),
            ClientLeft::Release { cancel: false }
        );
        assert_eq!(server.next_release_step(""), ReleaseStep::Wait);
        server
            .backend
            .tracker
            .on_server_message(b'Z', b"I")
            .expect("owed");
        server.backend.cancels_pending = 1;
        assert_eq!(
            server.next_release_step(""),
            ReleaseStep::Wait,
            "a cancel is on its way"
        );
        server.backend.cancels_pending = 0;
        assert_eq!(server.next_release_step(""), ReleaseStep::Pool);
    }

    #[test]
    fn a_paused_result_or_copy_in_closes_at_once() {
        let mut paused = server(PoolMode::Transaction);
        paused.io.paused = true;
        assert_eq!(paused.client_left(true), ClientLeft::CloseNow);
        let mut copying = server(PoolMode::Transaction);
        copying
            .backend
            .tracker
            .on_client_message(b'Q')
            .expect("query");
        copying
            .backend
            .tracker
            .on_server_message(b'G', &[])
            .expect("copy in");
        assert_eq!(copying.client_left(true), ClientLeft::CloseNow);
    }

    #[test]
    fn an_unsynced_sequence_closes() {
        let mut server = server(PoolMode::Transaction);
        server
            .backend
            .tracker
            .on_client_message(b'P')
            .expect("parse");
        assert!(matches!(
            server.next_release_step(""),
            ReleaseStep::Close(_)
        ));
    }

    #[test]
    fn a_failed_reset_closes() {
        let mut server = server(PoolMode::Session);
        server.backend.reset = Reset::Configured;
        let ReleaseStep::Query(_) = server.next_release_step("SELECT 1/0") else {
            panic!("reset");
        };
        let mut data = vec![b'E'];
        let fields = b"SERROR\0C22012\0Mdivision by zero\0\0";
        data.extend_from_slice(&(fields.len() as u32 + 4).to_be_bytes());
        data.extend_from_slice(fields);
        data.extend_from_slice(&[b'Z', 0, 0, 0, 5, b'I']);
        server.backend.relay.scan(
            &data,
            &mut server.backend.tracker,
            &mut server.backend.params,
            None,
            1 << 20,
        );
        assert!(matches!(
            server.next_release_step("SELECT 1/0"),
            ReleaseStep::Close(_)
        ));
    }
}
