//! Walking a server's output: which bytes go to the client, which are swallowed (answers to
//! the engine's own queries, or everything while the server drains without a client), and
//! what the messages mean for the server's state.
//!
//! Only ReadyForQuery, ParameterStatus, ErrorResponse and CommandComplete (for its row
//! count, which query digests add up per call) are read whole; every other message streams
//! through as it arrives, so a 50 MB row never has to sit in memory in one piece.
//! The tracker learns each message type that changes what the server owes. In transaction
//! mode with named statements (`crate::prepared`), the server's ledger is told every message
//! too: answers to pgtier's own Parse/Close/Sync are taken out of the stream, and errors that
//! name a server-side statement are given the client's name.

use bytes::{Buf, Bytes, BytesMut};
use pgtier_wire::error_fields::Severity;
use pgtier_wire::framing::{self, HEADER_LEN};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::{CommandComplete, ErrorResponse};
use pgtier_wire::read_only::changes_functions;
use pgtier_wire::{FrameLimits, ProtocolError};
use smallvec::SmallVec;

use crate::messages;
use crate::params::TrackedParams;
use crate::prepared::{Fallout, ServerPrepared, Verdict, errors};
use crate::take::take_front;
use crate::tracker::{Tracker, TxStatus};

/// Largest ReadyForQuery/ParameterStatus/ErrorResponse read whole.
const MAX_INSPECTED_MESSAGE_BYTES: usize = 64 * 1024;

/// A run of the walked bytes and what becomes of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Span {
    /// Swallowed.
    Drop(usize),
    /// Forwarded as they are.
    Forward(usize),
    /// One message of this length, replaced by these bytes (an error renamed).
    Replace(usize, Bytes),
}

/// What the answer to one of the client's calls held, up to its ReadyForQuery.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Answered {
    /// Rows the CommandComplete tags reported.
    pub rows: u64,
    /// ErrorResponses.
    pub errors: u32,
}

/// What one walk found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The bytes consumed, in order.
    pub spans: SmallVec<[Span; 4]>,
    /// ReadyForQuery messages forwarded (queries or Syncs completed).
    pub completed: u64,
    /// What each of those ReadyForQuery ended, in order.
    pub answered: SmallVec<[Answered; 2]>,
    /// ReadyForQuery 'I' messages forwarded (transactions completed).
    pub transactions: u64,
    /// ErrorResponse messages forwarded.
    pub errors: u64,
    /// Status of the last ReadyForQuery forwarded.
    /// A ReadyForQuery was read, forwarded or not (the answer to a Sync of pgtier's own
    /// may end a wait of the client's).
    pub ready_seen: bool,
    pub last_status: Option<TxStatus>,
    /// The server owes nothing now (ReadyForQuery 'I', no internal query outstanding).
    pub idle: bool,
    /// The server broke the protocol.
    pub malformed: bool,
    /// Length of a message over the limit (nothing from it on is consumed).
    pub oversized: Option<usize>,
    /// A FATAL or PANIC ErrorResponse was forwarded: the backend is exiting, and the client
    /// must see the connection end right after it, as from PostgreSQL itself.
    pub fatal_forwarded: bool,
    /// That FATAL said the server is shutting down (57P01..57P03).
    pub shutdown_forwarded: bool,
    /// A ReadyForQuery of the client's said a transaction block is open on a server that
    /// refuses them (statement mode): it was not forwarded, and the walk stopped there.
    pub block_refused: bool,
    /// The server reported a new value of a parameter the engine does not re-apply per
    /// client (default_transaction_read_only, session_authorization...): the client changed
    /// its session, perhaps inside a function no statement scan can see into.
    pub session_param_changed: bool,
    /// A transaction that changed functions (`CREATE FUNCTION`, `DROP SCHEMA`...: see
    /// `pgtier_wire::read_only::changes_functions`) ended: their cached volatilities are stale.
    pub functions_changed: bool,
}

impl Scan {
    fn push(&mut self, span: Span) {
        match span {
            Span::Drop(len) => self.push_len(true, len),
            Span::Forward(len) => self.push_len(false, len),
            span => self.spans.push(span),
        }
    }

    /// `len` bytes dropped or forwarded as they are, joined to the last span of that kind
    /// (no `Span` is built and moved for the common case).
    #[inline]
    fn push_len(&mut self, dropped: bool, len: usize) {
        match self.spans.last_mut() {
            Some(Span::Drop(last)) if dropped => *last += len,
            Some(Span::Forward(last)) if !dropped => *last += len,
            _ if len == 0 => {}
            _ => self.spans.push(if dropped {
                Span::Drop(len)
            } else {
                Span::Forward(len)
            }),
        }
    }

    /// Bytes swallowed.
    #[cfg(test)]
    pub(crate) fn drop_bytes(&self) -> usize {
        self.spans
            .iter()
            .map(|span| match span {
                Span::Drop(len) => *len,
                _ => 0,
            })
            .sum()
    }

    /// Bytes forwarded as they are.
    #[cfg(test)]
    pub(crate) fn forward_bytes(&self) -> usize {
        self.spans
            .iter()
            .map(|span| match span {
                Span::Forward(len) => *len,
                _ => 0,
            })
            .sum()
    }

    /// Takes the walked bytes off `input`; what goes to the client is appended to `out`.
    pub(crate) fn take_from(&mut self, input: &mut BytesMut, out: &mut SmallVec<[Bytes; 4]>) {
        for span in self.spans.drain(..) {
            match span {
                Span::Drop(len) => input.advance(len),
                Span::Forward(len) => out.push(take_front(input, len)),
                Span::Replace(len, bytes) => {
                    input.advance(len);
                    out.push(bytes);
                }
            }
        }
    }
}

/// A server's relay state between walks.
#[derive(Debug, Default)]
pub(crate) struct Relay {
    /// Body bytes of a streamed message still to come...
    skip_bytes: usize,
    /// ...and whether they are swallowed.
    skip_dropped: bool,
    /// Internal queries (reset, SET re-apply, check) whose answers are swallowed.
    swallow: u32,
    /// The first ErrorResponse among swallowed answers, kept until the code that sent the
    /// query looks at it.
    swallowed_error: Option<Bytes>,
    /// Named-statement rewriting on this server (transaction or statement mode), if on.
    pub prepared: Option<Box<ServerPrepared>>,
    /// `max_prepared_statements` was set to 0 while it rewrote: the client's messages pass
    /// unchanged and its answers are not followed, while the statements it holds stay, as
    /// in PgBouncer (see [`Relay::follow_statement_limit`]).
    rewriting_paused: bool,
    /// What the linked client's current call was answered so far.
    answering: Answered,
    /// What the answers decided for the linked client's statement names.
    fallout: Vec<Fallout>,
    /// A command that changes functions completed in the transaction now open: reported at
    /// its idle ReadyForQuery, once it committed (or rolled back, which is harmless), so a
    /// look-up made after the report sees the new catalogue.
    changed_functions: bool,
    /// Its client's pool mode refuses transaction blocks (statement mode): a ReadyForQuery
    /// 'T' or 'E' answering the client is not forwarded, and the walk ends there.
    refuses_blocks: bool,
}

/// The server's output walk, as its connection runs it (what the relay decides is above).
impl super::ServerConn {
    /// Walks its output for its client (whose tracked parameters follow it). The walk is
    /// returned straight from `Relay::scan` and what it found is taken with
    /// [`ServerConn::take_relayed`]: returning a walk this function had changed would copy
    /// the whole `Scan` on every answer (the per-query budget).
    ///
    /// [`ServerConn::take_relayed`]: super::ServerConn::take_relayed
    pub(crate) fn relay_output(&mut self, client_tracked: &mut TrackedParams, max: usize) -> Scan {
        self.backend.relay.scan(
            self.io.input.bytes(),
            &mut self.backend.tracker,
            &mut self.backend.params,
            Some(client_tracked),
            max,
        )
    }

    /// Takes what `scan` (its latest walk) found to go to the client into `forwarded`.
    pub(crate) fn take_relayed(
        &mut self,
        scan: &mut Scan,
        forwarded: &mut crate::prepared::Chunks,
    ) {
        scan.take_from(self.io.input.buffer_mut(), forwarded);
    }

    /// Swallows its output (it has no client): what its answers decided for a client's
    /// names concerns no one.
    pub(crate) fn drain_output(&mut self, max: usize) -> Scan {
        let mut scan = self.backend.relay.scan(
            self.io.input.bytes(),
            &mut self.backend.tracker,
            &mut self.backend.params,
            None,
            max,
        );
        scan.take_from(
            self.io.input.buffer_mut(),
            &mut crate::prepared::Chunks::new(),
        );
        let _ = self.backend.relay.take_fallout();
        scan
    }
}

impl Relay {
    /// Whether the client it now serves may open transaction blocks: set at every link,
    /// from that client's pool mode (a replication connection is in session mode whatever
    /// its entry says, as in PgBouncer).
    pub(crate) fn set_refuses_blocks(&mut self, refuses: bool) {
        self.refuses_blocks = refuses;
    }

    /// The engine sent a query of its own: its answer is swallowed.
    pub(crate) fn expect_internal(&mut self, tracker: &mut Tracker) {
        self.swallow += 1;
        tracker.on_internal_query();
    }

    /// An internal query's answer is still to come.
    pub(crate) fn owes_internal(&self) -> bool {
        self.swallow > 0
    }

    /// The error an internal query got, if any (taken: each is looked at once).
    pub(crate) fn take_swallowed_error(&mut self) -> Option<Bytes> {
        self.swallowed_error.take()
    }

    /// Rewriting on this server, unless paused (`max_prepared_statements = 0`).
    pub(crate) fn rewriting_mut(&mut self) -> Option<&mut ServerPrepared> {
        self.prepared
            .as_deref_mut()
            .filter(|_| !self.rewriting_paused)
    }

    /// Follows a change of `max_prepared_statements` (`per_server`) before a client's next
    /// messages: 0 pauses rewriting, anything else resumes it. Only between answers (the
    /// ledger empty), so that every answer is read as what it answers. On resuming, what
    /// the server holds is unknown (the client may have sent `DEALLOCATE ALL` meanwhile), so
    /// each statement is closed before it is prepared again.
    pub(crate) fn follow_statement_limit(&mut self, per_server: usize) {
        let Some(prepared) = self.prepared.as_deref_mut() else {
            return;
        };
        let pause = per_server == 0;
        if pause == self.rewriting_paused || !prepared.ledger.is_empty() {
            return;
        }
        if !pause {
            prepared.statements.all_unknown();
            prepared
                .statements
                .set_unnamed(crate::prepared::unnamed::ServerUnnamed::Unknown);
        }
        self.rewriting_paused = pause;
    }

    /// The ledger still waits for answers (a pipeline of the client's, or pgtier's own).
    pub(crate) fn owes_statement_answers(&self) -> bool {
        self.prepared
            .as_ref()
            .is_some_and(|prepared| !prepared.ledger.is_empty())
    }

    /// The client's next messages wait for answers (`Ledger::holds_back`).
    pub(crate) fn holds_back_client(&self) -> bool {
        self.prepared
            .as_ref()
            .is_some_and(|prepared| prepared.ledger.holds_back())
    }

    /// What the walks decided for the client's statement names since last taken.
    pub(crate) fn take_fallout(&mut self) -> Vec<Fallout> {
        std::mem::take(&mut self.fallout)
    }

    /// Walks `data`. With `client == None` everything consumed is dropped; otherwise the
    /// client's tracked parameters follow the ParameterStatus messages it is forwarded.
    pub fn scan(
        &mut self,
        data: &[u8],
        tracker: &mut Tracker,
        server_params: &mut TrackedParams,
        mut client: Option<&mut TrackedParams>,
        max_message_bytes: usize,
    ) -> Scan {
        let limits = FrameLimits {
            max_message_len: u32::try_from(max_message_bytes).unwrap_or(u32::MAX),
            ..FrameLimits::default()
        };
        let mut out = Scan::default();
        let mut pos = 0usize;
        let drain_all = client.is_none();
        if drain_all {
            // Its client is gone: what its call was answered is nobody's.
            self.answering = Answered::default();
        }
        while pos < data.len() {
            if self.skip_bytes > 0 {
                let take = self.skip_bytes.min(data.len() - pos);
                self.skip_bytes -= take;
                pos += take;
                out.push_len(self.skip_dropped, take);
                continue;
            }
            let header = match framing::peek_header(&data[pos..], &limits) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(ProtocolError::LengthTooLong { len, .. }) => {
                    out.oversized = Some(len as usize);
                    break;
                }
                Err(_) => {
                    out.malformed = true;
                    break;
                }
            };
            let (code, len) = (header.code, header.len as usize);
            let inspect = matches!(code, b'Z' | b'S')
                || (matches!(code, b'E' | b'C') && len <= MAX_INSPECTED_MESSAGE_BYTES);
            if inspect && len > MAX_INSPECTED_MESSAGE_BYTES {
                out.malformed = true;
                break;
            }
            if inspect && data.len() - pos < len + 1 {
                break;
            }
            // The message is taken now: the ledger hears of it exactly once. Answers to the
            // engine's own queries come before anything of a client's and are not its.
            let internal = self.swallow > 0;
            let paused = self.rewriting_paused;
            // A CommandComplete's tag, for the ledger (its whole message is here when inspected).
            let tag = if code == b'C' && inspect {
                &data[pos + HEADER_LEN..pos + 1 + len]
            } else {
                &[][..]
            };
            let verdict = match self.prepared.as_mut().filter(|_| !internal && !paused) {
                Some(prepared) => prepared.ledger.on_server_message(
                    code,
                    tag,
                    &mut prepared.statements,
                    &mut self.fallout,
                ),
                None => Verdict::Forward,
            };
            if verdict == Verdict::Desync {
                out.malformed = true;
                break;
            }
            let dropping = drain_all || internal || verdict == Verdict::Swallow;
            if !inspect {
                if Tracker::wants(code) && tracker.on_server_message(code, &[]).is_err() {
                    out.malformed = true;
                    break;
                }
                // As much of the message as is here goes in one span; the rest is skipped
                // when it comes.
                let take = (len + 1).min(data.len() - pos);
                pos += take;
                self.skip_bytes = len + 1 - take;
                self.skip_dropped = dropping;
                out.push_len(dropping, take);
                continue;
            }
            let body = &data[pos + HEADER_LEN..pos + 1 + len];
            let frame = &data[pos..pos + 1 + len];
            pos += len + 1;
            let mut span = if dropping {
                Span::Drop(len + 1)
            } else {
                Span::Forward(len + 1)
            };
            match code {
                b'S' => {
                    if let Some((name, value)) = messages::parse_parameter_status(body) {
                        let tracked = server_params.set(name, value);
                        out.session_param_changed |=
                            !tracked && !dropping && !reports_server_state(name);
                        if !dropping && let Some(client) = client.as_deref_mut() {
                            client.set(name, value);
                        }
                    }
                }
                b'Z' => {
                    let status = body.first().copied().and_then(TxStatus::from_byte);
                    let counted = tracker.on_server_message(b'Z', body);
                    let (Some(status), Ok(())) = (status, counted) else {
                        out.malformed = true;
                        break;
                    };
                    out.ready_seen = true;
                    if internal {
                        self.swallow -= 1;
                    } else if !dropping && self.refuses_blocks && status != TxStatus::Idle {
                        // The client must not see its block open: what it is told instead
                        // is the engine's, and the server, inside that block, closes.
                        out.block_refused = true;
                        out.push(Span::Drop(len + 1));
                        break;
                    } else if !dropping {
                        out.completed += 1;
                        out.answered.push(std::mem::take(&mut self.answering));
                        out.transactions += u64::from(status == TxStatus::Idle);
                        if status == TxStatus::Idle && self.changed_functions {
                            self.changed_functions = false;
                            out.functions_changed = true;
                        }
                        out.last_status = Some(status);
                    }
                }
                b'C' => {
                    if !dropping {
                        let tag = body.strip_suffix(&[0]).unwrap_or(body);
                        self.answering.rows += CommandComplete { tag }.rows().unwrap_or(0);
                        self.changed_functions |= changes_functions(tag);
                    }
                }
                _ => {
                    // ErrorResponse, read whole for its severity, or kept when swallowed.
                    if tracker.on_server_message(code, &[]).is_err() {
                        out.malformed = true;
                        break;
                    }
                    if internal {
                        if self.swallowed_error.is_none() {
                            self.swallowed_error = Some(Bytes::copy_from_slice(frame));
                        }
                    } else if !dropping {
                        out.errors += 1;
                        self.answering.errors += 1;
                        if is_fatal(body) {
                            out.fatal_forwarded = true;
                            out.shutdown_forwarded |= is_shutdown_error(body);
                        }
                        if let Some(renamed) = self.rename(frame) {
                            span = Span::Replace(len + 1, renamed);
                        }
                    }
                }
            }
            out.push(span);
        }
        out.idle = tracker.is_idle()
            && self.swallow == 0
            && self
                .prepared
                .as_ref()
                .is_none_or(|prepared| prepared.ledger.is_empty());
        out
    }

    /// The error answering a renamed message, with the client's name in it. A 26000 for a
    /// statement the cache believed prepared (a `DEALLOCATE ALL` inside a function) makes it
    /// unknown, so it is prepared again before its next use.
    fn rename(&mut self, frame: &[u8]) -> Option<Bytes> {
        let prepared = self.prepared.as_mut()?;
        let renamed = prepared.ledger.take_error_rename()?;
        if let Some(statement) = &renamed.statement
            && memchr::memmem::find(frame, b"C26000\0").is_some()
        {
            prepared.statements.set_unknown(statement.id());
        }
        errors::restore_client_name(frame, &renamed.server, &renamed.client)
    }
}

/// Whether an ErrorResponse body reports a FATAL or PANIC error (the backend ends after it).
pub(crate) fn is_fatal(body: &[u8]) -> bool {
    ErrorResponse::decode_body(body).is_ok_and(|error| {
        matches!(
            error.fields.severity(),
            Some(Severity::Fatal | Severity::Panic)
        )
    })
}

/// An ErrorResponse body whose SQLSTATE says the server is going away (57P01 admin shutdown,
/// 57P02 crash shutdown, 57P03 cannot connect now), as every backend of a stopped server says.
pub(crate) fn is_shutdown_error(body: &[u8]) -> bool {
    body.split(|b| *b == 0)
        .any(|field| matches!(field, [b'C', b'5', b'7', b'P', b'0', b'1' | b'2' | b'3']))
}

/// Parameters a server reports of itself, not of the session: `in_hot_standby` turns off
/// when a standby is promoted, on every one of its connections, and that is no state a
/// client set (pinning for it would keep a reader session on a server that just stopped
/// being a replica).
fn reports_server_state(name: &str) -> bool {
    name.eq_ignore_ascii_case("in_hot_standby")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(code: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![code];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn result(rows: usize) -> Vec<u8> {
        let mut out = frame(
            b'T',
            b"\0\x01a\0\0\0\0\0\0\0\0\0\0\x17\0\x04\xff\xff\xff\xff\0\0",
        );
        for _ in 0..rows {
            out.extend(frame(b'D', b"\0\x01\0\0\0\x011"));
        }
        out.extend(frame(b'C', b"SELECT 1\0"));
        out.extend(frame(b'Z', b"I"));
        out
    }

    fn busy_tracker() -> Tracker {
        let mut tracker = Tracker::default();
        tracker.on_client_message(b'Q').expect("query");
        tracker
    }

    #[test]
    fn a_result_is_forwarded_whole_and_the_server_is_idle_after_it() {
        let data = result(3);
        let mut tracker = busy_tracker();
        let mut client = TrackedParams::default();
        let scan = Relay::default().scan(
            &data,
            &mut tracker,
            &mut TrackedParams::default(),
            Some(&mut client),
            1 << 20,
        );
        assert_eq!(scan.forward_bytes(), data.len());
        assert_eq!(
            (scan.drop_bytes(), scan.completed, scan.transactions),
            (0, 1, 1)
        );
        assert!(scan.idle);
    }

    #[test]
    fn in_statement_mode_a_block_ready_for_query_is_dropped_and_ends_the_walk() {
        use pgtier_core::config::PoolMode;
        let mut data = frame(b'C', b"BEGIN\0");
        let before = data.len();
        data.extend(frame(b'Z', b"T"));
        data.extend(result(1));
        for (mode, refused) in [
            (PoolMode::Statement, true),
            (PoolMode::Transaction, false),
            (PoolMode::Session, false),
        ] {
            let mut tracker = busy_tracker();
            tracker.on_client_message(b'Q').expect("query");
            let mut relay = Relay::default();
            relay.set_refuses_blocks(mode.refuses_transaction_blocks());
            let scan = relay.scan(
                &data,
                &mut tracker,
                &mut TrackedParams::default(),
                Some(&mut TrackedParams::default()),
                1 << 20,
            );
            assert_eq!(scan.block_refused, refused, "{mode}");
            if refused {
                assert_eq!(scan.forward_bytes(), before, "only the BEGIN's answer");
                assert_eq!((scan.drop_bytes(), scan.completed), (6, 0));
            } else {
                assert_eq!(scan.forward_bytes(), data.len(), "{mode}");
            }
        }
    }

    #[test]
    fn a_function_change_is_reported_when_its_transaction_ends() {
        let mut relay = Relay::default();
        let mut walk = |data: &[u8]| {
            let mut tracker = busy_tracker();
            relay.scan(
                data,
                &mut tracker,
                &mut TrackedParams::default(),
                Some(&mut TrackedParams::default()),
                1 << 20,
            )
        };
        let mut in_block = frame(b'C', b"CREATE FUNCTION\0");
        in_block.extend(frame(b'Z', b"T"));
        assert!(!walk(&in_block).functions_changed, "not committed yet");
        let mut commit = frame(b'C', b"COMMIT\0");
        commit.extend(frame(b'Z', b"I"));
        assert!(walk(&commit).functions_changed);
        assert!(!walk(&result(1)).functions_changed, "reported once");
        let mut other = frame(b'C', b"CREATE TABLE\0");
        other.extend(frame(b'Z', b"I"));
        assert!(!walk(&other).functions_changed);
    }

    #[test]
    fn an_internal_answer_is_swallowed_and_its_error_kept() {
        let mut data = frame(b'E', b"SERROR\0C22023\0Mbad\0\0");
        data.extend(frame(b'Z', b"I"));
        data.extend(result(1));
        let mut tracker = busy_tracker();
        let mut relay = Relay::default();
        relay.expect_internal(&mut tracker);
        let mut client = TrackedParams::default();
        let scan = relay.scan(
            &data,
            &mut tracker,
            &mut TrackedParams::default(),
            Some(&mut client),
            1 << 20,
        );
        let swallowed = frame(b'E', b"SERROR\0C22023\0Mbad\0\0").len() + 6;
        assert_eq!(scan.drop_bytes(), swallowed);
        assert_eq!(scan.forward_bytes(), data.len() - swallowed);
        assert!(relay.take_swallowed_error().is_some());
        assert!(scan.idle);
    }

    #[test]
    fn a_forwarded_fatal_is_noticed() {
        let data = frame(b'E', b"SFATAL\0VFATAL\0C57P01\0Mterminating connection\0\0");
        let scan = Relay::default().scan(
            &data,
            &mut busy_tracker(),
            &mut TrackedParams::default(),
            Some(&mut TrackedParams::default()),
            1 << 20,
        );
        assert!(scan.fatal_forwarded && scan.shutdown_forwarded);
        assert_eq!(scan.forward_bytes(), data.len());
    }

    #[test]
    fn a_message_streams_in_pieces() {
        let data = result(1);
        let mut tracker = busy_tracker();
        let mut relay = Relay::default();
        let mut server = TrackedParams::default();
        let mut client = TrackedParams::default();
        let (first, second) = data.split_at(9);
        let scan = relay.scan(first, &mut tracker, &mut server, Some(&mut client), 1 << 20);
        assert_eq!(
            scan.forward_bytes(),
            9,
            "a header and part of a body stream through"
        );
        let scan = relay.scan(
            second,
            &mut tracker,
            &mut server,
            Some(&mut client),
            1 << 20,
        );
        assert_eq!(scan.forward_bytes(), second.len());
        assert!(scan.idle);
    }

    #[test]
    fn parameter_changes_reach_the_client_and_untracked_ones_are_flagged() {
        let mut data = frame(b'S', b"TimeZone\0Europe/Paris\0");
        data.extend(frame(b'S', b"default_transaction_read_only\0on\0"));
        let mut client = TrackedParams::default();
        let mut server = TrackedParams::default();
        let scan = Relay::default().scan(
            &data,
            &mut busy_tracker(),
            &mut server,
            Some(&mut client),
            1 << 20,
        );
        assert_eq!(client.get(2), Some("Europe/Paris"));
        assert_eq!(server.get(2), Some("Europe/Paris"));
        assert!(scan.session_param_changed);
    }

    #[test]
    fn a_promotion_report_is_no_session_state() {
        let data = frame(b'S', b"in_hot_standby\0off\0");
        let mut client = TrackedParams::default();
        let scan = Relay::default().scan(
            &data,
            &mut busy_tracker(),
            &mut TrackedParams::default(),
            Some(&mut client),
            1 << 20,
        );
        assert!(!scan.session_param_changed);
        assert_eq!(scan.forward_bytes(), data.len());
    }

    #[test]
    fn draining_drops_everything() {
        let data = result(2);
        let scan = Relay::default().scan(
            &data,
            &mut busy_tracker(),
            &mut TrackedParams::default(),
            None,
            1 << 20,
        );
        assert_eq!((scan.drop_bytes(), scan.forward_bytes()), (data.len(), 0));
        assert!(scan.idle && scan.completed == 0);
    }

    #[test]
    fn a_ready_without_a_request_and_a_short_length_are_malformed() {
        let data = frame(b'Z', b"I");
        let scan = Relay::default().scan(
            &data,
            &mut Tracker::default(),
            &mut TrackedParams::default(),
            None,
            1 << 20,
        );
        assert!(scan.malformed);
        let scan = Relay::default().scan(
            b"D\0\0\0\x01",
            &mut busy_tracker(),
            &mut TrackedParams::default(),
            None,
            1 << 20,
        );
        assert!(scan.malformed);
    }

    #[test]
    fn a_message_over_the_limit_stops_the_walk() {
        let mut data = frame(b'D', &[0; 100]);
        data.extend(frame(b'Z', b"I"));
        let scan = Relay::default().scan(
            &data,
            &mut busy_tracker(),
            &mut TrackedParams::default(),
            Some(&mut TrackedParams::default()),
            50,
        );
        assert_eq!(scan.oversized, Some(104));
        assert_eq!(scan.forward_bytes(), 0);
    }
}
