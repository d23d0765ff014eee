//! Which query each of a session's answers belongs to, for query digests (`crate::digests`).
//!
//! A call is what one ReadyForQuery answers: a simple Query (its whole text, however many
//! statements it holds), or an extended-protocol segment up to its Sync, counted under the
//! text of the statement its last Execute ran (the text the statement was parsed with: the
//! unnamed statement's latest Parse, or the named statement's). A segment without an
//! Execute (a Parse and Sync that only prepares) and a FunctionCall are answered but not
//! counted. The log keeps, oldest first, the digest of every call forwarded and not yet
//! answered, so pipelined calls are matched in order.
//!
//! Bounded: at most [`MAX_PENDING_CALLS`] calls are remembered (a longer pipeline's later
//! calls are answered uncounted) and [`MAX_NAMED_STATEMENTS`] statement names. Portals are
//! not told apart: an Execute runs the statement of the latest Bind, which is how drivers
//! use them.

use std::collections::{HashMap, VecDeque};

use pgtier_core::metrics::DatabaseSlot;

use crate::client::texts::ShapeKey;
use crate::digests::{DigestKey, ShardDigests};
use crate::server::relay::Answered;

/// Calls forwarded and not yet answered that one session remembers.
pub(crate) const MAX_PENDING_CALLS: usize = 256;

/// Named statements whose digests one session remembers.
pub(crate) const MAX_NAMED_STATEMENTS: usize = 1024;

/// One session's calls in flight and the digests of its statements.
#[derive(Debug, Default)]
pub struct CallLog {
    /// Forwarded calls not yet answered, oldest first (`None`: answered uncounted).
    pending: VecDeque<Option<DigestKey>>,
    /// Uncounted calls after every call in `pending` (the log was full when they went).
    overflow: usize,
    /// The unnamed statement's digest (its latest Parse).
    unnamed: Option<DigestKey>,
    named: HashMap<Box<[u8]>, DigestKey>,
    /// The statement of the latest Bind.
    bound: Option<DigestKey>,
    /// What the current segment's latest Execute ran.
    executed: Option<DigestKey>,
}

impl CallLog {
    /// Nothing in flight and no statement remembered: dropping it loses nothing.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
            && self.overflow == 0
            && self.unnamed.is_none()
            && self.named.is_empty()
            && self.bound.is_none()
            && self.executed.is_none()
    }

    fn push(&mut self, call: Option<DigestKey>) {
        if self.overflow > 0 || self.pending.len() >= MAX_PENDING_CALLS {
            self.overflow += 1;
        } else {
            self.pending.push_back(call);
        }
    }

    /// The calls in flight will never be answered (their server died before any answer and
    /// they are sent again): they are forgotten.
    pub(crate) fn unanswered(&mut self) {
        self.pending.clear();
        self.overflow = 0;
        self.executed = None;
    }

    /// A ReadyForQuery for the client came: the digest of the call it ends, if counted.
    pub fn complete(&mut self) -> Option<DigestKey> {
        if let Some(call) = self.pending.pop_front() {
            return call;
        }
        self.overflow = self.overflow.saturating_sub(1);
        None
    }

    /// The server answered calls (`answered`, in order, each ended by a ReadyForQuery) in
    /// `time_us` each: every counted one goes to its digest.
    pub fn answered(
        &mut self,
        answered: &[Answered],
        time_us: u64,
        database_name: &str,
        digests: &mut ShardDigests,
    ) {
        for answer in answered {
            if let Some(key) = self.complete() {
                digests.record(key, database_name, time_us, answer.rows, answer.errors > 0);
            }
        }
    }

    /// Calls awaiting their answer.
    pub fn in_flight(&self) -> usize {
        self.pending.len() + self.overflow
    }
}

/// What forwarding needs to log a session's calls: its log, the shard's digests and the
/// session's database.
#[derive(Debug)]
pub struct CallNotes<'a> {
    pub log: &'a mut CallLog,
    pub digests: &'a mut ShardDigests,
    pub database: DatabaseSlot,
    pub database_name: &'a str,
}

/// The C string at the start of `bytes` and what follows it.
fn cstr(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let end = crate::nul::nul_at(bytes)?;
    Some((&bytes[..end], &bytes[end + 1..]))
}

impl<'a> CallNotes<'a> {
    /// The notes of a session whose calls are logged (`log` is `None` when they are not).
    pub fn of(
        log: Option<&'a mut CallLog>,
        digests: &'a mut ShardDigests,
        database: Option<DatabaseSlot>,
        database_name: &'a str,
    ) -> Option<CallNotes<'a>> {
        // A session forwards only once its database has an entry (and so a slot).
        let database = database?;
        log.map(|log| CallNotes {
            log,
            digests,
            database,
            database_name,
        })
    }

    /// A client message of type `code` is being forwarded; `body` is as much of its body as
    /// has arrived (all of it when `whole`). Called once per message.
    /// A whole Query's `shape`, when it has one, stands for its text in the digests.
    #[inline]
    pub(crate) fn on_message(
        &mut self,
        code: u8,
        body: &[u8],
        whole: bool,
        shape: Option<ShapeKey>,
    ) {
        match code {
            b'Q' => {
                let text = cstr(body).map(|(text, _)| text).filter(|_| whole);
                let call = text.map(|text| self.note(text, false, shape));
                self.log.push(call);
            }
            b'P' => self.on_parse(body, whole),
            b'B' => {
                // Portal name, then statement name: in the head, which has arrived.
                let statement = cstr(body).and_then(|(_, rest)| cstr(rest));
                self.log.bound = match statement {
                    Some((b"", _)) => self.log.unnamed,
                    Some((name, _)) => self.log.named.get(name).copied(),
                    None => None,
                };
            }
            b'E' => self.log.executed = self.log.bound,
            b'S' => {
                let call = self.log.executed.take();
                self.log.push(call);
            }
            b'F' => self.log.push(None),
            b'C' if whole && body.first() == Some(&b'S') => {
                if let Some((name, _)) = cstr(&body[1..]) {
                    self.log.named.remove(name);
                }
            }
            _ => {}
        }
    }

    fn on_parse(&mut self, body: &[u8], whole: bool) {
        let parsed = cstr(body)
            .and_then(|(name, rest)| Some((name, cstr(rest)?.0)))
            .filter(|_| whole);
        let Some((name, text)) = parsed else {
            // A text streaming in pieces is not read: its statement counts nothing.
            if cstr(body).is_none_or(|(name, _)| name.is_empty()) {
                self.log.unnamed = None;
            }
            return;
        };
        let key = self.note(text, true, None);
        if name.is_empty() {
            self.log.unnamed = Some(key);
        } else if self.log.named.len() < MAX_NAMED_STATEMENTS || self.log.named.contains_key(name) {
            self.log.named.insert(name.into(), key);
        }
    }

    fn note(&mut self, text: &[u8], parse: bool, shape: Option<ShapeKey>) -> DigestKey {
        self.digests
            .note(self.database, self.database_name, text, parse, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::digests::DigestLimits;
    use pgtier_core::metrics::{DatabaseRegistry, DatabaseTally, DigestStore};
    use std::sync::Arc;

    fn digests() -> (ShardDigests, DatabaseSlot) {
        let limits = DigestLimits {
            enabled: true,
            max_text_bytes: 4096,
            map_capacity: 100,
        };
        let slot = DatabaseTally::default().slot("db", &DatabaseRegistry::default());
        let store = Arc::new(DigestStore::new(100));
        (ShardDigests::new(store, limits), slot)
    }

    fn body(parts: &[&[u8]]) -> Vec<u8> {
        parts.concat()
    }

    #[test]
    fn extended_segments_count_the_executed_statement_in_order() {
        let (mut digests, slot) = digests();
        let mut log = CallLog::default();
        let mut notes = CallNotes {
            log: &mut log,
            digests: &mut digests,
            database: slot,
            database_name: "db",
        };
        // A named statement prepared alone (answered, not counted)...
        notes.on_message(b'P', &body(&[b"s1\0SELECT $1\0\0\0"]), true, None);
        notes.on_message(b'S', b"", true, None);
        // ...then run twice, pipelined, and an unnamed one after them.
        for _ in 0..2 {
            notes.on_message(b'B', &body(&[b"\0s1\0\0\0"]), true, None);
            notes.on_message(b'E', b"\0\0\0\0\0", true, None);
            notes.on_message(b'S', b"", true, None);
        }
        notes.on_message(b'P', &body(&[b"\0UPDATE t SET a = 1\0\0\0"]), true, None);
        notes.on_message(b'B', &body(&[b"\0\0"]), false, None);
        notes.on_message(b'E', b"\0\0\0\0\0", true, None);
        notes.on_message(b'S', b"", true, None);
        notes.on_message(b'Q', b"BEGIN\0", true, None);
        let select = notes.digests.note(slot, "db", b"SELECT $1", false, None);
        let update = notes
            .digests
            .note(slot, "db", b"UPDATE t SET a = $1", false, None);
        let begin = notes.digests.note(slot, "db", b"BEGIN", false, None);
        assert_eq!(log.in_flight(), 5);
        let answered: Vec<Option<DigestKey>> = (0..5).map(|_| log.complete()).collect();
        assert_eq!(
            answered,
            [None, Some(select), Some(select), Some(update), Some(begin)]
        );
        assert_eq!(log.complete(), None, "nothing more owed");
    }

    #[test]
    fn a_long_pipeline_stays_in_step_past_the_bound() {
        let (mut digests, slot) = digests();
        let mut log = CallLog::default();
        let mut notes = CallNotes {
            log: &mut log,
            digests: &mut digests,
            database: slot,
            database_name: "db",
        };
        for _ in 0..MAX_PENDING_CALLS + 10 {
            notes.on_message(b'Q', b"SELECT 1\0", true, None);
        }
        notes.on_message(b'Q', b"SELECT 1\0", false, None);
        assert_eq!(log.in_flight(), MAX_PENDING_CALLS + 11);
        let counted = (0..MAX_PENDING_CALLS + 11)
            .filter(|_| log.complete().is_some())
            .count();
        assert_eq!(counted, MAX_PENDING_CALLS);
        assert_eq!(log.in_flight(), 0);
    }

    #[test]
    fn a_closed_statement_is_forgotten() {
        let (mut digests, slot) = digests();
        let mut log = CallLog::default();
        let mut notes = CallNotes {
            log: &mut log,
            digests: &mut digests,
            database: slot,
            database_name: "db",
        };
        notes.on_message(b'P', b"s\0SELECT 1\0\0\0", true, None);
        notes.on_message(b'C', b"Ss\0", true, None);
        notes.on_message(b'B', b"\0s\0\0\0", true, None);
        notes.on_message(b'E', b"\0\0\0\0\0", true, None);
        notes.on_message(b'S', b"", true, None);
        assert_eq!(log.complete(), None);
    }
}
