//! What a server still owes: the tracker transaction pooling asks before releasing a server.
//!
//! The caller feeds the type byte of every message it sends to the server
//! ([`ResponseTracker::handle_frontend`]) and of every message the server sends back
//! ([`ResponseTracker::handle_backend`], with ReadyForQuery's status byte). Each Query, Sync
//! and FunctionCall is answered by exactly one ReadyForQuery, including after an error in an
//! extended sequence (the server skips to the next Sync, then answers it), so counting them is
//! exact. A server can be released when [`ResponseTracker::is_idle`]: nothing outstanding, no
//! unsynced extended messages, not copying, and the last status was 'I'.
//!
//! COPY FROM STDIN: the server ignores Sync (and Flush) while in copy-in mode, so Syncs
//! already sent when CopyInResponse arrives, and Syncs sent before the client's
//! CopyDone/CopyFail, are not counted. Clients (libpq, JDBC) send their Sync after CopyDone;
//! some (asyncpg, pipelining drivers) send the data and CopyDone before CopyInResponse has
//! arrived, so a CopyDone/CopyFail sent while no copy is known is kept in the queue of
//! requests as a marker, and CopyInResponse looks for it: the Syncs sent after it are counted.
//! A client pipelining further non-copy messages behind a COPY FROM STDIN makes the server
//! abort the copy, which this model does not follow exactly (documented limitation).

use crate::codes::{CodeSet, backend, frontend};
use crate::messages::backend::TransactionStatus;

/// Server message types that change the tracker's state. A forwarder can pass every other
/// message on inside a run ([`crate::framing::scan_run`] with this stop set) and feed only
/// these to [`ResponseTracker::handle_backend`].
pub const TRACKED_BACKEND_CODES: CodeSet = CodeSet::of(b"ZGHWcE");

/// Client message types that change the tracker's state (CopyData does not).
pub const TRACKED_FRONTEND_CODES: CodeSet = CodeSet::of(b"QFSPBDECcfX");

/// Which COPY sub-protocol is in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyState {
    None,
    /// The server sent CopyInResponse; the client has not yet sent CopyDone/CopyFail.
    In,
    /// The server sent CopyOutResponse; it has not yet sent CopyDone.
    Out,
    /// CopyBothResponse (replication); ends when the server errors or both sides send CopyDone.
    Both {
        client_done: bool,
        server_done: bool,
    },
}

/// The tracker's summary of the server connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerPhase {
    /// Nothing outstanding, status 'I': the server may go back to the pool.
    Idle,
    /// Nothing outstanding, but inside a transaction block ('T') or a failed one ('E').
    InTransaction(TransactionStatus),
    /// Extended-protocol messages sent without a Sync yet (including Flush-only sequences).
    Unsynced,
    /// Responses still outstanding.
    Busy { pending_ready: u32 },
    /// In a COPY sub-protocol.
    Copy(CopyState),
    /// Terminate was sent; the connection is finished.
    Terminated,
}

/// A message sequence the protocol does not allow; the connection cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrackerError {
    /// ReadyForQuery arrived with none outstanding.
    UnexpectedReadyForQuery,
    /// ReadyForQuery carried an unknown status byte.
    InvalidStatus { status: u8 },
    /// A message arrived after Terminate.
    AfterTerminate { code: u8 },
    /// More outstanding requests than `u32` counts (never in practice).
    Overflow,
}

/// Pure tracker of expected server responses; see the module doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseTracker {
    /// ReadyForQuery messages the server still owes.
    pending_ready: u32,
    /// Extended-protocol messages were sent after the last Sync.
    unsynced: bool,
    copy: CopyState,
    /// Status byte of the last ReadyForQuery.
    status: TransactionStatus,
    terminated: bool,
    /// One entry per outstanding request, oldest first, and the copy ends the client sent
    /// while no copy was known. It holds `pending_ready` requests; it is read only when
    /// CopyInResponse arrives, to tell a simple COPY from an extended one and to find a
    /// CopyDone that was sent ahead of it.
    queue: std::collections::VecDeque<Queued>,
}

/// One entry of [`ResponseTracker`]'s queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Queued {
    /// A simple Query, owed a ReadyForQuery.
    Query,
    /// A Sync or FunctionCall, owed a ReadyForQuery.
    Sync,
    /// A CopyDone/CopyFail sent before the CopyInResponse it ends (or for no copy at all).
    CopyEnd,
}

impl Default for ResponseTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl ResponseTracker {
    /// A tracker for a server that just sent its first ReadyForQuery('I').
    pub fn new() -> Self {
        Self {
            pending_ready: 0,
            unsynced: false,
            copy: CopyState::None,
            status: TransactionStatus::Idle,
            terminated: false,
            queue: std::collections::VecDeque::new(),
        }
    }

    /// Records a message sent to the server.
    pub fn handle_frontend(&mut self, code: u8) -> Result<(), TrackerError> {
        if self.terminated {
            return Err(TrackerError::AfterTerminate { code });
        }
        match code {
            frontend::QUERY => self.expect_ready(true)?,
            frontend::FUNCTION_CALL => self.expect_ready(false)?,
            frontend::SYNC if self.copy == CopyState::In => {}
            frontend::SYNC => {
                self.unsynced = false;
                self.expect_ready(false)?;
            }
            frontend::PARSE
            | frontend::BIND
            | frontend::DESCRIBE
            | frontend::EXECUTE
            | frontend::CLOSE => {
                self.unsynced = true;
            }
            frontend::COPY_DONE | frontend::COPY_FAIL => self.client_copy_done(),
            frontend::TERMINATE => self.terminated = true,
            _ => {}
        }
        Ok(())
    }

    /// Records a message received from the server; `body` is needed for ReadyForQuery only.
    pub fn handle_backend(&mut self, code: u8, body: &[u8]) -> Result<(), TrackerError> {
        match code {
            backend::READY_FOR_QUERY => self.on_ready(body)?,
            backend::COPY_IN_RESPONSE => self.on_copy_in(),
            backend::COPY_OUT_RESPONSE => self.copy = CopyState::Out,
            backend::COPY_BOTH_RESPONSE => {
                self.copy = CopyState::Both {
                    client_done: false,
                    server_done: false,
                }
            }
            backend::COPY_DONE => self.server_copy_done(),
            backend::ERROR_RESPONSE => self.copy = CopyState::None,
            _ => {}
        }
        Ok(())
    }

    pub fn phase(&self) -> ServerPhase {
        if self.terminated {
            ServerPhase::Terminated
        } else if self.copy != CopyState::None {
            ServerPhase::Copy(self.copy)
        } else if self.pending_ready > 0 {
            ServerPhase::Busy {
                pending_ready: self.pending_ready,
            }
        } else if self.unsynced {
            ServerPhase::Unsynced
        } else if self.status != TransactionStatus::Idle {
            ServerPhase::InTransaction(self.status)
        } else {
            ServerPhase::Idle
        }
    }

    /// The server owes nothing and is outside a transaction: it may be released.
    pub fn is_idle(&self) -> bool {
        self.phase() == ServerPhase::Idle
    }

    /// ReadyForQuery messages still owed (outstanding Query/Sync/FunctionCall).
    pub fn pending_ready(&self) -> u32 {
        self.pending_ready
    }

    /// The status of the last ReadyForQuery.
    pub fn transaction_status(&self) -> TransactionStatus {
        self.status
    }

    pub fn copy_state(&self) -> CopyState {
        self.copy
    }

    fn expect_ready(&mut self, is_query: bool) -> Result<(), TrackerError> {
        self.pending_ready = self
            .pending_ready
            .checked_add(1)
            .ok_or(TrackerError::Overflow)?;
        self.queue.push_back(if is_query {
            Queued::Query
        } else {
            Queued::Sync
        });
        Ok(())
    }

    fn on_ready(&mut self, body: &[u8]) -> Result<(), TrackerError> {
        let status = body.first().copied().unwrap_or(0);
        self.status =
            TransactionStatus::from_byte(status).ok_or(TrackerError::InvalidStatus { status })?;
        if self.pending_ready == 0 {
            return Err(TrackerError::UnexpectedReadyForQuery);
        }
        self.pending_ready -= 1;
        // Copy ends ahead of the answered request ended no copy of it.
        while self.queue.front() == Some(&Queued::CopyEnd) {
            self.queue.pop_front();
        }
        self.queue.pop_front();
        if self.pending_ready == 0 {
            // Nothing is outstanding: a copy end still queued ended nothing.
            self.queue.clear();
        }
        self.copy = CopyState::None;
        Ok(())
    }

    /// The server ignores the Syncs that reach it during copy-in: drop the ones already sent
    /// behind the Query or Execute that started the copy, up to a copy end the client sent
    /// ahead (then the copy is already over, as far as the client's messages go).
    fn on_copy_in(&mut self) {
        let first_request = self
            .queue
            .iter()
            .position(|queued| *queued != Queued::CopyEnd);
        let simple = first_request.is_some_and(|index| self.queue[index] == Queued::Query);
        let start = match first_request {
            // A simple COPY: copy ends ahead of its Query ended nothing.
            Some(index) if simple => {
                self.queue.drain(..index);
                1
            }
            _ => 0,
        };
        let index = start;
        let mut ended = false;
        while let Some(&queued) = self.queue.get(index) {
            match queued {
                Queued::Sync => {
                    self.queue.remove(index);
                    self.pending_ready -= 1;
                }
                Queued::CopyEnd => {
                    self.queue.remove(index);
                    ended = true;
                    break;
                }
                Queued::Query => break,
            }
        }
        self.copy = if ended {
            CopyState::None
        } else {
            CopyState::In
        };
        if !simple && !ended {
            // The Syncs sent so far were ignored: the extended sequence needs one more.
            self.unsynced = true;
        }
    }

    fn client_copy_done(&mut self) {
        if self.copy == CopyState::None && (self.pending_ready > 0 || self.unsynced) {
            // Maybe ahead of the CopyInResponse it ends (see the module doc).
            self.queue.push_back(Queued::CopyEnd);
            return;
        }
        self.copy = match self.copy {
            CopyState::In => CopyState::None,
            CopyState::Both {
                server_done: true, ..
            } => CopyState::None,
            CopyState::Both {
                server_done: false, ..
            } => CopyState::Both {
                client_done: true,
                server_done: false,
            },
            other => other,
        };
    }

    fn server_copy_done(&mut self) {
        self.copy = match self.copy {
            CopyState::Out => CopyState::None,
            CopyState::Both {
                client_done: true, ..
            } => CopyState::None,
            CopyState::Both {
                client_done: false, ..
            } => CopyState::Both {
                client_done: false,
                server_done: true,
            },
            other => other,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds a script: `>X` client sends X, `<X` server sends X, `<ZI` ReadyForQuery('I').
    fn run(tracker: &mut ResponseTracker, script: &str) {
        for step in script.split_whitespace() {
            let bytes = step.as_bytes();
            match bytes[0] {
                b'>' => tracker.handle_frontend(bytes[1]).unwrap(),
                b'<' => tracker.handle_backend(bytes[1], &bytes[2..]).unwrap(),
                _ => panic!("bad step {step}"),
            }
        }
    }

    fn after(script: &str) -> ResponseTracker {
        let mut tracker = ResponseTracker::new();
        run(&mut tracker, script);
        tracker
    }

    #[test]
    fn simple_query() {
        let mut t = after(">Q");
        assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
        run(&mut t, "<T <D <D <C");
        assert!(!t.is_idle());
        run(&mut t, "<ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn multi_statement_query_with_transaction() {
        let t = after(">Q <C <C <ZT");
        assert_eq!(
            t.phase(),
            ServerPhase::InTransaction(TransactionStatus::InTransaction)
        );
        let t = after(">Q <C <E <ZE");
        assert_eq!(
            t.phase(),
            ServerPhase::InTransaction(TransactionStatus::Failed)
        );
        let t = after(">Q <C <E <ZE >Q <C <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn extended_with_pipelined_syncs() {
        let mut t = after(">P >B >D >E");
        assert_eq!(t.phase(), ServerPhase::Unsynced);
        run(&mut t, ">S >P >B >E >S >B >E >S");
        assert_eq!(t.pending_ready(), 3);
        run(&mut t, "<1 <2 <T <D <C <ZI <1 <2 <C <ZI");
        assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
        run(&mut t, "<2 <C <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn flush_only_keeps_the_server() {
        let mut t = after(">P >D >H <1 <t <T");
        assert_eq!(t.phase(), ServerPhase::Unsynced);
        run(&mut t, ">S <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn error_mid_extended_sequence_skips_to_sync() {
        // Parse fails; the server discards Bind/Execute and answers only the Sync.
        let mut t = after(">P >B >E >S >P >B >E >S <E <ZI");
        assert_eq!(t.pending_ready(), 1);
        run(&mut t, "<1 <2 <C <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn copy_in_simple_and_extended() {
        let mut t = after(">Q <G");
        assert_eq!(t.phase(), ServerPhase::Copy(CopyState::In));
        run(&mut t, ">d >d >c");
        assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
        run(&mut t, "<C <ZI");
        assert!(t.is_idle());
        // libpq's PQexecParams: P B D E S sent at once; the S is ignored in copy-in mode,
        // and libpq sends a second Sync after CopyDone.
        let mut t = after(">P >B >D >E >S <1 <2 <n <G");
        assert_eq!(t.pending_ready(), 0);
        run(&mut t, ">d >S >c");
        assert_eq!(t.phase(), ServerPhase::Unsynced);
        run(&mut t, ">S <C <ZI");
        assert!(t.is_idle());
        let t = after(">Q <G >f <E <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn copy_done_sent_ahead_of_copy_in_response() {
        // asyncpg: the COPY Query, its data and CopyDone in one write.
        let t = after(">Q >d >c <G <C <ZI");
        assert!(t.is_idle());
        // The same after a Parse/Describe/Flush left the sequence open.
        let mut t = after(">P >D >H <1 <t <T >Q >d >c <G");
        assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
        run(&mut t, "<C <ZI");
        assert_eq!(t.phase(), ServerPhase::Unsynced);
        // Extended: Execute, CopyDone, then Sync, all before CopyInResponse; the Sync counts.
        let mut t = after(">P >B >E >c >S <1 <2 <G");
        assert_eq!(t.phase(), ServerPhase::Busy { pending_ready: 1 });
        run(&mut t, "<C <ZI");
        assert!(t.is_idle());
        // libpq's order sent at once: the Sync before CopyDone is ignored, the one after counts.
        let mut t = after(">P >B >D >E >S >d >c >S <1 <2 <n <G");
        assert_eq!(t.pending_ready(), 1);
        run(&mut t, "<C <ZI");
        assert!(t.is_idle());
        // CopyDone with nothing outstanding is ignored by the server and by the tracker.
        let t = after(">c");
        assert!(t.is_idle());
        // A stray CopyDone before a later COPY does not end that COPY.
        let mut t = after(">Q >c <ZI >Q <G");
        assert_eq!(t.phase(), ServerPhase::Copy(CopyState::In));
        run(&mut t, ">c <C <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn copy_out_and_both() {
        let mut t = after(">Q <H <d <d");
        assert_eq!(t.phase(), ServerPhase::Copy(CopyState::Out));
        run(&mut t, "<c <C <ZI");
        assert!(t.is_idle());
        let mut t = after(">Q <W <d >d");
        assert!(matches!(
            t.phase(),
            ServerPhase::Copy(CopyState::Both { .. })
        ));
        run(&mut t, "<c >c <C <ZI");
        assert!(t.is_idle());
    }

    #[test]
    fn terminate_and_protocol_errors() {
        let mut t = after(">X");
        assert_eq!(t.phase(), ServerPhase::Terminated);
        assert_eq!(
            t.handle_frontend(b'Q'),
            Err(TrackerError::AfterTerminate { code: b'Q' })
        );
        let mut t = ResponseTracker::new();
        assert_eq!(
            t.handle_backend(b'Z', b"I"),
            Err(TrackerError::UnexpectedReadyForQuery)
        );
        t.handle_frontend(b'S').unwrap();
        assert_eq!(
            t.handle_backend(b'Z', b"?"),
            Err(TrackerError::InvalidStatus { status: b'?' })
        );
        assert_eq!(
            t.handle_backend(b'Z', b""),
            Err(TrackerError::InvalidStatus { status: 0 })
        );
    }

    #[test]
    fn untracked_codes_change_nothing() {
        for code in 0..=255u8 {
            let mut t = after(">Q >P");
            let before = t.clone();
            if !TRACKED_FRONTEND_CODES.contains(code) {
                t.handle_frontend(code).unwrap();
                assert_eq!(t, before, "frontend {:?}", code as char);
            }
            if !TRACKED_BACKEND_CODES.contains(code) {
                t.handle_backend(code, b"I").unwrap();
                assert_eq!(t, before, "backend {:?}", code as char);
            }
        }
    }

    #[test]
    fn function_call_is_answered_by_ready() {
        let t = after(">F <V <ZI");
        assert!(t.is_idle());
    }
}
