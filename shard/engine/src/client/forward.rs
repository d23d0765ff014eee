//! Moving a linked client's messages to its server. Messages are framed by header only: a
//! body of any size streams through in the pieces it arrives in, as `Bytes` split off the
//! receive buffer (no copy). On the way the response tracker learns what the server will
//! owe, and in transaction mode each Query and Parse text is classified for session state
//! (`pgtier_wire::session_state`), so the engine can keep a client that creates some on its
//! server. With named statements rewritten (`crate::prepared`), a Parse, Describe or Close
//! (and a Query that may name a statement) is taken whole, a Bind up to its statement name,
//! and the rewriter decides what the server gets; every message goes in the server's
//! ledger. With query digests on, the session's call log hears of every Query, Parse, Bind,
//! Execute, Sync and FunctionCall (`crate::client::calls`). In every mode, each Query and
//! Parse text is checked for statements that need a database free of other sessions
//! (`pgtier_wire::database_ddl`; where texts are classified, the cache of classified texts
//! remembers which may hold one), so the engine can close its idle servers of that database
//! before the statement reaches PostgreSQL. A Terminate ends the client; a
//! type byte no frontend sends, or a bad length, is a protocol violation and never reaches
//! the server.

use bytes::{Buf, BytesMut};
use pgtier_wire::database_ddl::{self, Target};
use pgtier_wire::framing::{self, HEADER_LEN};
use pgtier_wire::session_state::{Effects, StateScanner};
use pgtier_wire::{FrameLimits, codes};

use crate::client::calls::CallNotes;
use crate::client::texts::TextCache;
use crate::prepared::{Chunks, Rewrite, Rewriter};
use crate::take::take_front;
use crate::tracker::Tracker;

/// Longest Bind head (portal and statement names) looked for before a Bind is passed on
/// unread.
const MAX_BIND_HEAD_BYTES: usize = 64 * 1024;

/// A Query or Parse up to this long waits until it is whole before any of it goes, so that
/// its text is checked for database DDL whatever pieces it arrives in (such statements are
/// short). Longer ones stream.
const WHOLE_TEXT_BYTES: usize = 4096;

/// Why forwarding stopped before the end of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ForwardEnd {
    /// The client sent Terminate: it leaves (what came before it was forwarded).
    Terminate,
    /// A message type no frontend sends.
    InvalidType(u8),
    /// A length out of range, or a message sequence the tracker refuses.
    Malformed,
    /// Its named statements are over `max_client_prepared_bytes`.
    TooManyStatements,
}

/// What one call forwarded.
#[derive(Debug, Default)]
pub(crate) struct Forwarded {
    /// Bytes for the server, in order (whole messages, streamed pieces, rewritten ones).
    pub chunks: Chunks,
    /// Session-state effects of the Query and Parse messages completed in this call.
    pub effects: Effects,
    /// A Query, Sync or FunctionCall was forwarded: a response is now awaited.
    pub started: bool,
    /// Databases that statements of the forwarded texts need free of other sessions
    /// (`DROP DATABASE`...): the engine closes its idle servers of them before the bytes go.
    pub vacate: Vec<Target>,
    /// Set when the client must be closed.
    pub end: Option<ForwardEnd>,
    /// Named statements parsed and bound (statement rewriting only).
    pub statements: crate::prepared::StatementCounts,
    /// When set (`Some`, empty) by the caller: every piece taken off the client's input, in
    /// order, whatever the server gets instead (a read that may run again keeps the client's
    /// own bytes, `crate::client::retry`).
    pub kept: Option<crate::client::retry::KeptBytes>,
}

impl Forwarded {
    /// A piece of the client's input was taken.
    fn took(&mut self, piece: &bytes::Bytes) {
        if let Some(kept) = self.kept.as_mut() {
            kept.push(piece.clone());
        }
    }
}

/// One linked client's framing state between calls.
#[derive(Debug, Default)]
pub(crate) struct Forwarder {
    /// Body bytes of the current message still to come from the client.
    skip_bytes: usize,
    /// Classifies the current Query/Parse body while it streams in pieces (boxed: most texts
    /// arrive whole and never need it, and an idle client should stay small).
    scan: Option<Box<StateScanner>>,
    /// The streaming message's type and effects, for the rewriter's ledger once it is sent.
    streaming: Option<(u8, Effects)>,
}

/// How the client's text is read for session state, when it is watched at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watch {
    /// `standard_conforming_strings` of the session (how `'\'` lexes).
    pub conforming_strings: bool,
}

/// What forwarding does with the texts it sees: session-state effects (when watched), and
/// the session's calls (when query digests are on).
#[derive(Debug)]
pub struct Texts<'a> {
    /// The shard's cache of classified texts.
    pub effects: &'a mut TextCache,
    pub calls: Option<CallNotes<'a>>,
    /// How texts are read for session state; `None`: they are not.
    pub(crate) watch: Option<Watch>,
}

impl<'a> Texts<'a> {
    /// Texts classified only, no calls logged.
    pub fn classified(effects: &'a mut TextCache) -> Texts<'a> {
        Texts {
            effects,
            calls: None,
            watch: None,
        }
    }
}

/// The sizes forwarding works within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ForwardLimits {
    /// `max_client_message_bytes`: a longer message is a protocol violation.
    pub max_message_bytes: u32,
    /// Largest message the rewriter reads whole; a longer Parse passes unread and pins.
    pub whole_message_bytes: usize,
}

impl ForwardLimits {
    /// Only the message limit (tests, unrewritten forwarding).
    #[cfg(test)]
    pub fn messages(max_message_bytes: u32) -> ForwardLimits {
        ForwardLimits {
            max_message_bytes,
            whole_message_bytes: usize::MAX,
        }
    }
}

/// What a message needs before it can go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Its bytes stream through as they come.
    Stream,
    /// It must be whole: the rewriter reads it.
    Whole,
    /// Its first bytes up to the statement name (a Bind): the rewriter renames it.
    BindHead(usize),
}

impl Forwarder {
    /// Forwards what `input` holds; `watch` classifies Query/Parse texts for session state;
    /// `rewriter`, when named statements are rewritten, sees every message.
    #[cfg(test)]
    pub fn forward(
        &mut self,
        input: &mut BytesMut,
        tracker: &mut Tracker,
        sizes: ForwardLimits,
        watch: Option<Watch>,
        texts: Texts<'_>,
        rewriter: Option<&mut Rewriter<'_>>,
    ) -> Forwarded {
        let mut out = Forwarded::default();
        let texts = Texts { watch, ..texts };
        self.forward_into(input, tracker, sizes, texts, rewriter, &mut out);
        out
    }

    /// Forwards what `input` holds into `out`, which must be empty (the per-query path keeps
    /// its answer where the engine reads it rather than moving it up the calls); the texts'
    /// `watch` classifies Query/Parse texts for session state; `rewriter`, when named
    /// statements are rewritten, sees every message.
    pub fn forward_into(
        &mut self,
        input: &mut BytesMut,
        tracker: &mut Tracker,
        sizes: ForwardLimits,
        mut texts: Texts<'_>,
        mut rewriter: Option<&mut Rewriter<'_>>,
        out: &mut Forwarded,
    ) {
        let limits = FrameLimits {
            max_message_len: sizes.max_message_bytes,
            ..FrameLimits::default()
        };
        let whole_limit = sizes.whole_message_bytes;
        let watch = texts.watch;
        // input[..pos] is forwarded as it is, in one piece, when the walk ends or a rewritten
        // message needs to go after it.
        let mut pos = 0usize;
        while pos < input.len() {
            if self.skip_bytes > 0 {
                let take = self.skip_bytes.min(input.len() - pos);
                self.skip_bytes -= take;
                if let Some(scan) = self.scan.as_mut() {
                    scan.feed(&input[pos..pos + take]);
                }
                pos += take;
                if self.skip_bytes == 0 {
                    let effects = self.scan.take().map_or(Effects::NONE, |scan| scan.finish());
                    out.effects = out.effects.union(effects);
                    self.finish_streamed(effects, rewriter.as_deref_mut());
                }
                continue;
            }
            if rewriter
                .as_ref()
                .is_some_and(|rewriter| rewriter.server.ledger.holds_back())
                && !is_copy_message(input[pos])
                && !tracker.copy_in()
            {
                // The rest waits for the answer to a segment that changed statements. COPY
                // data and its end never wait: they name no statement, and the answer being
                // waited for may be the one to a COPY FROM STDIN that only they can end (a
                // driver that sends Parse/Describe/Flush, then a simple Query COPY). Nor does
                // anything sent while the server is in COPY FROM STDIN: the server ends the
                // copy with an error at any other message, and must see it to do so.
                break;
            }
            let header = match framing::peek_header(&input[pos..], &limits) {
                Ok(Some(header)) => header,
                Ok(None) => break,
                Err(_) => {
                    out.end = Some(ForwardEnd::Malformed);
                    break;
                }
            };
            let code = header.code;
            if code == codes::frontend::TERMINATE {
                out.end = Some(ForwardEnd::Terminate);
                break;
            }
            if !Tracker::is_client_message(code) {
                out.end = Some(ForwardEnd::InvalidType(code));
                break;
            }
            let total = header.len as usize + 1;
            let available = &input[pos..];
            let text_message = matches!(code, codes::frontend::QUERY | codes::frontend::PARSE);
            if text_message && total <= WHOLE_TEXT_BYTES && available.len() < total {
                break;
            }
            let plan = match rewriter {
                None => Plan::Stream,
                // In COPY FROM STDIN the server takes no statement names: whatever comes goes
                // as it is, and the server answers it as it would the client's own bytes.
                Some(_) if tracker.copy_in() => Plan::Stream,
                Some(_) if code == codes::frontend::BIND => {
                    match Rewriter::bind_head_len(&available[..available.len().min(total)]) {
                        Some(len) => Plan::BindHead(len),
                        None if available.len() < total.min(MAX_BIND_HEAD_BYTES) => break,
                        None => Plan::Stream,
                    }
                }
                Some(_)
                    if total <= whole_limit
                        && Rewriter::needs_whole(
                            code,
                            &available[HEADER_LEN.min(available.len())..],
                        ) =>
                {
                    if available.len() < total {
                        break;
                    }
                    Plan::Whole
                }
                Some(_) => Plan::Stream,
            };
            if let Some(rewriter) = rewriter.as_deref_mut()
                && matches!(code, b'Q' | b'P' | b'B' | b'D' | b'C' | b'E' | b'F')
                && !tracker.copy_in()
            {
                // Statements of clients that left are closed before a new segment starts.
                let mark = out.chunks.len();
                rewriter.sweep_orphans(&mut out.chunks);
                flush_before(input, &mut pos, out, mark, false);
                tell_tracker(tracker, rewriter);
            }
            if tracker.on_client_message(code).is_err() {
                out.end = Some(ForwardEnd::Malformed);
                break;
            }
            out.started |= matches!(code, b'Q' | b'S' | b'F');
            let parse = code == codes::frontend::PARSE;
            let whole_text = input
                .get(pos + HEADER_LEN..pos + total)
                .filter(|_| text_message);
            // A whole Query's shape, taken once for the text cache and the digests.
            let shape = whole_text
                .filter(|_| !parse && (watch.is_some() || texts.calls.is_some()))
                .and_then(|body| texts.effects.shape_key(body));
            if let Some(calls) = texts.calls.as_mut() {
                let end = (pos + total).min(input.len());
                let body = input.get(pos + HEADER_LEN..end).unwrap_or_default();
                calls.on_message(code, body, end == pos + total, shape);
            }
            let mut effects = Effects::NONE;
            let mut streamed_scan = None;
            // Unless the cache of texts knows better, a whole text is searched for database
            // DDL (a streamed one is longer than any such statement).
            let mut may_name_a_database = true;
            if let Some(watch) = watch.filter(|_| text_message) {
                match whole_text {
                    // The usual case: the whole text is here, classified (or found in the
                    // cache) with no state kept.
                    Some(body) => {
                        let facts =
                            texts
                                .effects
                                .classify(body, parse, watch.conforming_strings, shape);
                        effects = facts.effects;
                        may_name_a_database = facts.may_name_a_database;
                    }
                    // A text arriving in pieces: classified as they stream through.
                    None => {
                        let scanner = if parse {
                            StateScanner::parse()
                        } else {
                            StateScanner::query()
                        };
                        streamed_scan = Some(Box::new(
                            scanner.standard_conforming_strings(watch.conforming_strings),
                        ));
                    }
                }
            }
            if let Some(body) = whole_text.filter(|_| may_name_a_database) {
                out.vacate
                    .extend(database_ddl::targets(sql_text(body, parse)));
            }
            if rewriter.is_some() && plan == Plan::Whole {
                // Named statements no longer pin: the rewriter carries them between servers.
                effects = effects.difference(Effects::NAMED_STATEMENT);
            }
            out.effects = out.effects.union(effects);
            // A message the rewriter passes as it is stays in the run of input bytes that
            // goes in one piece (a pipeline of unnamed statements and portals is sent as it
            // came); the run is cut only where pgtier sends something else.
            match (plan, rewriter.as_deref_mut()) {
                (Plan::Whole, Some(rewriter)) => {
                    let mark = out.chunks.len();
                    let outcome =
                        rewriter.message(&input[pos..pos + total], effects, &mut out.chunks);
                    tell_tracker(tracker, rewriter);
                    let as_is = outcome == Rewrite::AsIs;
                    flush_before(input, &mut pos, out, mark, !as_is);
                    if as_is {
                        pos += total;
                    } else {
                        drop_front(input, total, out);
                    }
                    if outcome == Rewrite::OverLimit {
                        out.end = Some(ForwardEnd::TooManyStatements);
                        break;
                    }
                }
                (Plan::BindHead(head_len), Some(rewriter)) => {
                    let mark = out.chunks.len();
                    let outcome = rewriter.bind_head(&input[pos..pos + head_len], &mut out.chunks);
                    tell_tracker(tracker, rewriter);
                    let as_is = outcome == Rewrite::AsIs;
                    flush_before(input, &mut pos, out, mark, !as_is);
                    if as_is {
                        pos += head_len;
                    } else {
                        drop_front(input, head_len, out);
                    }
                    self.skip_bytes = total - head_len;
                }
                _ => {
                    pos += HEADER_LEN;
                    self.skip_bytes = header.body_len();
                    self.scan = streamed_scan;
                    self.streaming = Some((code, effects));
                    if self.skip_bytes == 0 {
                        self.finish_streamed(Effects::NONE, rewriter.as_deref_mut());
                    }
                }
            }
        }
        flush(input, &mut pos, out);
        if out.end == Some(ForwardEnd::Terminate) {
            input.clear();
        }
    }

    /// The last byte of a streamed message is going: the rewriter's ledger learns of it.
    fn finish_streamed(&mut self, more: Effects, rewriter: Option<&mut Rewriter<'_>>) {
        let Some((code, effects)) = self.streaming.take() else {
            return;
        };
        if let Some(rewriter) = rewriter {
            rewriter.passed(code, effects.union(more));
        }
    }

    /// Whether a message is partly forwarded (its body still streaming).
    #[cfg(test)]
    pub(crate) fn mid_message(&self) -> bool {
        self.skip_bytes > 0
    }
}

/// The SQL text of a Query body, or of a Parse body (after the statement's name); the
/// classifiers stop at its NUL.
fn sql_text(body: &[u8], parse: bool) -> &[u8] {
    if !parse {
        return body;
    }
    match crate::nul::nul_at(body) {
        Some(nul) => &body[nul + 1..],
        None => &[],
    }
}

/// Sends `input[..pos]` on as it is.
fn flush(input: &mut BytesMut, pos: &mut usize, out: &mut Forwarded) {
    if *pos > 0 {
        let piece = take_front(input, *pos);
        out.took(&piece);
        out.chunks.push(piece);
        *pos = 0;
    }
}

/// Sends `input[..pos]` on ahead of the chunks added to `out` from `mark` on (what pgtier
/// sends for the message at `pos` goes after the client's bytes before it); only when some
/// were added, unless `always`.
fn flush_before(
    input: &mut BytesMut,
    pos: &mut usize,
    out: &mut Forwarded,
    mark: usize,
    always: bool,
) {
    if *pos > 0 && (always || out.chunks.len() > mark) {
        let piece = take_front(input, *pos);
        out.took(&piece);
        out.chunks.insert(mark, piece);
        *pos = 0;
    }
}

/// Takes the client's message at the front of `input` (`len` bytes) that the server gets
/// in another form: it is kept if the caller keeps the client's bytes, else dropped.
fn drop_front(input: &mut BytesMut, len: usize, out: &mut Forwarded) {
    if out.kept.is_some() {
        let piece = take_front(input, len);
        out.took(&piece);
    } else {
        input.advance(len);
    }
}

/// The tracker counts what pgtier sends of its own too.
fn tell_tracker(tracker: &mut Tracker, rewriter: &mut Rewriter<'_>) {
    for code in rewriter.take_injected() {
        // The tracker only refuses messages after Terminate, which never precedes these.
        let _ = tracker.on_client_message(code);
    }
}

/// CopyData, CopyDone, CopyFail: outside COPY the server ignores them, inside it they are
/// what it waits for.
fn is_copy_message(code: u8) -> bool {
    matches!(
        code,
        codes::frontend::COPY_DATA | codes::frontend::COPY_DONE | codes::frontend::COPY_FAIL
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(sql: &str) -> Vec<u8> {
        let mut out = vec![b'Q'];
        out.extend_from_slice(&(sql.len() as u32 + 5).to_be_bytes());
        out.extend_from_slice(sql.as_bytes());
        out.push(0);
        out
    }

    const WATCH: Option<Watch> = Some(Watch {
        conforming_strings: true,
    });

    #[test]
    fn whole_messages_go_as_one_chunk_and_the_tracker_learns_them() {
        let mut input = BytesMut::from(&[query("SELECT 1"), query("SELECT 2")].concat()[..]);
        let mut tracker = Tracker::default();
        let out = Forwarder::default().forward(
            &mut input,
            &mut tracker,
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert_eq!(out.chunks.iter().map(|c| c.len()).sum::<usize>(), 2 * 14);
        assert!(out.started && out.end.is_none());
        assert!(input.is_empty());
        assert!(tracker.has_outstanding());
    }

    #[test]
    fn a_body_streams_in_pieces_and_its_state_is_classified_across_them() {
        let padding = "x".repeat(WHOLE_TEXT_BYTES);
        let message = query(&format!("SET work_mem = '64MB' -- {padding}"));
        let mut tracker = Tracker::default();
        let mut forwarder = Forwarder::default();
        let mut sent = Vec::new();
        let mut effects = Effects::NONE;
        let mut input = BytesMut::new();
        for piece in message.chunks(1000) {
            input.extend_from_slice(piece);
            let out = forwarder.forward(
                &mut input,
                &mut tracker,
                ForwardLimits::messages(1 << 20),
                WATCH,
                Texts::classified(&mut TextCache::default()),
                None,
            );
            for chunk in &out.chunks {
                sent.extend_from_slice(chunk);
            }
            effects = effects.union(out.effects);
        }
        assert_eq!(sent, message, "every byte forwarded, in order");
        assert!(effects.pins(), "{effects:?}");
        assert!(!forwarder.mid_message());
    }

    #[test]
    fn a_short_text_waits_whole_and_its_database_ddl_is_named_once() {
        let message = query("DROP DATABASE \"Shop\"");
        let mut tracker = Tracker::default();
        let mut forwarder = Forwarder::default();
        let mut input = BytesMut::new();
        let mut vacate = Vec::new();
        let pieces: Vec<&[u8]> = message.chunks(3).collect();
        for (n, piece) in pieces.iter().enumerate() {
            input.extend_from_slice(piece);
            let out = forwarder.forward(
                &mut input,
                &mut tracker,
                ForwardLimits::messages(1 << 20),
                None,
                Texts::classified(&mut TextCache::default()),
                None,
            );
            let last = n + 1 == pieces.len();
            assert_eq!(
                out.chunks.is_empty(),
                !last,
                "nothing goes before the whole text"
            );
            vacate.extend(out.vacate);
        }
        assert_eq!(
            vacate,
            [Target {
                command: database_ddl::DatabaseCommand::Drop,
                database: "Shop".to_string()
            }]
        );
    }

    #[test]
    fn a_parse_text_is_checked_for_database_ddl_in_session_mode_too() {
        let sql = b"ALTER DATABASE a RENAME TO b";
        let mut body = b"s1\0".to_vec();
        body.extend_from_slice(sql);
        body.extend_from_slice(b"\0\0\0");
        let mut message = vec![b'P'];
        message.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        message.extend_from_slice(&body);
        let mut input = BytesMut::from(&message[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        let names: Vec<&str> = out.vacate.iter().map(|t| t.database.as_str()).collect();
        assert_eq!(names, ["a"]);
        assert!(query_vacates_nothing("SELECT 1"));
    }

    fn query_vacates_nothing(sql: &str) -> bool {
        let mut input = BytesMut::from(&query(sql)[..]);
        Forwarder::default()
            .forward(
                &mut input,
                &mut Tracker::default(),
                ForwardLimits::messages(1 << 20),
                None,
                Texts::classified(&mut TextCache::default()),
                None,
            )
            .vacate
            .is_empty()
    }

    #[test]
    fn unwatched_texts_are_not_classified() {
        let mut input = BytesMut::from(&query("LISTEN x")[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert!(out.effects.is_empty());
    }

    #[test]
    fn terminate_ends_after_what_came_before() {
        let mut input = BytesMut::from(&[query("SELECT 1"), b"X\0\0\0\x04".to_vec()].concat()[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert_eq!(out.end, Some(ForwardEnd::Terminate));
        assert_eq!(out.chunks.iter().map(|c| c.len()).sum::<usize>(), 14);
        assert!(input.is_empty());
    }

    #[test]
    fn garbage_and_bad_lengths_never_pass() {
        let mut input = BytesMut::from(&b"@\0\0\0\x08abcd"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert_eq!(out.end, Some(ForwardEnd::InvalidType(b'@')));
        assert!(out.chunks.is_empty());
        let mut input = BytesMut::from(&b"Q\0\0\0\x02"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert_eq!(out.end, Some(ForwardEnd::Malformed));
        let mut input = BytesMut::from(&b"Q\x7f\0\0\0"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1024),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert_eq!(
            out.end,
            Some(ForwardEnd::Malformed),
            "over the message limit"
        );
    }

    #[test]
    fn a_partial_header_waits() {
        let mut input = BytesMut::from(&b"Q\0\0"[..]);
        let out = Forwarder::default().forward(
            &mut input,
            &mut Tracker::default(),
            ForwardLimits::messages(1 << 20),
            None,
            Texts::classified(&mut TextCache::default()),
            None,
        );
        assert!(out.chunks.is_empty() && out.end.is_none());
        assert_eq!(input.len(), 3);
    }
}

/// The shard's own caches and registries a forward writes to.
pub(crate) struct ForwardShared<'a> {
    /// Named statements of the shard's transaction-mode clients, interned.
    pub registry: &'a mut crate::prepared::Registry,
    /// Where the messages pgtier writes of its own are built.
    pub scratch: &'a mut BytesMut,
    /// Session-state effects of recently classified texts.
    pub texts: &'a mut TextCache,
    pub digests: &'a mut crate::digests::ShardDigests,
}

/// The settings a forward follows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ForwardOptions {
    pub sizes: ForwardLimits,
    pub statements: crate::prepared::StatementLimits,
    /// `pin_session_state`: texts are classified for the session state they create.
    pub pinning: bool,
    pub now: std::time::Instant,
}

impl super::ClientConn {
    /// Moves the client's complete (or streaming) messages to `server`, its server, and
    /// says what went in `out`. False when it has no session.
    pub(crate) fn forward_to(
        &mut self,
        server: &mut crate::server::ServerConn,
        shared: ForwardShared<'_>,
        options: ForwardOptions,
        out: &mut Forwarded,
    ) -> bool {
        let Some(session) = self.session.as_deref_mut() else {
            return false;
        };
        let input = self.input.buffer_mut();
        let (relay, tracker) = server.backend_mut().relay_and_tracker_mut();
        // In transaction and statement mode, Query and Parse texts are classified: for the
        // session state that pins the client (and the statements that undo it), and for the
        // statements that drop named statements.
        relay.follow_statement_limit(options.statements.per_server);
        let rewriting = relay.rewriting_mut().is_some();
        let shared_server = session.mode.releases_at_idle_ready();
        let watch = (shared_server && (options.pinning || rewriting)).then(|| Watch {
            conforming_strings: session.tracked.standard_conforming_strings(),
        });
        let mut rewriter = relay.rewriting_mut().map(|prepared| Rewriter {
            names: &mut session.statements,
            server: prepared,
            registry: shared.registry,
            scratch: shared.scratch,
            limits: options.statements,
            injected: Default::default(),
            counted: Default::default(),
        });
        if session.calls.is_none() && shared.digests.enabled() {
            session.calls = Some(Box::default());
        }
        let calls = CallNotes::of(
            session.calls.as_deref_mut(),
            shared.digests,
            session.stats,
            &session.database,
        );
        // A read on a replica gets only the read-only prefix it was routed with; the rest
        // waits for the replica's release and is routed on its own.
        let budget = session
            .reads
            .as_ref()
            .and_then(|reads| reads.forward_budget());
        let held = match budget {
            Some(budget) if budget < input.len() => Some(input.split_off(budget)),
            _ => None,
        };
        let before = input.len();
        session.forwarder.forward_into(
            input,
            tracker,
            options.sizes,
            Texts {
                effects: shared.texts,
                calls,
                watch,
            },
            rewriter.as_mut(),
            out,
        );
        if let Some(rewriter) = &rewriter {
            out.statements = rewriter.counted;
        }
        drop(rewriter);
        if let Some(reads) = session.reads.as_mut() {
            reads.spent(before - input.len());
        }
        if let Some(held) = held {
            input.unsplit(held);
        }
        if out.started {
            session.query_started.get_or_insert(options.now);
            session.transaction_started.get_or_insert(options.now);
        }
        true
    }
}
