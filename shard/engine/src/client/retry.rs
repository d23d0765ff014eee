//! A read that may run again (`read_retries`): the autocommit read-only statement (or
//! extended-protocol segment up to its Sync) a transaction-mode session sent to a server on a
//! replica, kept as the client's own bytes until the first byte of its answer reaches the
//! client. If the server dies before that (its connection reset or closed, or its backend
//! announcing its exit), the statement goes back in front of the client's input and is routed
//! again, not to that replica, at most `read_retries` times in a row.
//!
//! Why this is safe: PostgreSQL acknowledged nothing of the statement, it changes nothing (the
//! read-only classifier says so, the session is between transactions and holds no session
//! state), and the client has seen nothing of its answer, so running it again is invisible.
//! A write, anything inside a transaction block, a session with session state and a statement
//! whose answer began are never run again.

use std::net::SocketAddr;

use bytes::Bytes;
use smallvec::SmallVec;

/// The client's bytes of a kept statement, as they were split off its input (no copy).
pub(crate) type KeptBytes = SmallVec<[Bytes; 2]>;

/// Where a session's current statement stands as a read that may run again.
#[derive(Debug, Default)]
pub(crate) enum ReadRetry {
    /// Nothing may run again: between transactions, on the primary, a write, session state,
    /// an answer that began.
    #[default]
    Off,
    /// A transaction that may be a read on a replica just got its server and nothing of it
    /// went yet. `retried`: times its statement already ran again.
    Ready { retried: u8 },
    /// Its statement (`unit`, the client's bytes) went to the server and no byte of its
    /// answer reached the client yet.
    Armed { unit: KeptBytes, retried: u8 },
    /// Its server died: the statement is back in front of the input, to be routed again,
    /// not to `avoid`.
    Again { retried: u8, avoid: SocketAddr },
}

impl ReadRetry {
    /// The session got a server for a new transaction; `eligible`: a read on a replica may
    /// start on it (transaction mode, no session state, `read_retries` on). A statement being
    /// run again keeps its count.
    pub(crate) fn linked(&mut self, eligible: bool) {
        *self = match *self {
            _ if !eligible => ReadRetry::Off,
            ReadRetry::Again { retried, .. } => ReadRetry::Ready { retried },
            _ => ReadRetry::Ready { retried: 0 },
        };
    }

    /// Whether the next forward is the transaction's first (its bytes are to be kept).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(self, ReadRetry::Ready { .. })
    }

    /// Whether a statement is kept.
    pub(crate) fn is_armed(&self) -> bool {
        matches!(self, ReadRetry::Armed { .. })
    }

    /// The transaction's first forward went: `kept` is what it took off the input when the
    /// statement was a rerunnable read of `unit_len` bytes (`None`: it was not). It is kept
    /// only if the forward took exactly that statement and nothing else happened
    /// (`clean`: no session state, no end, no database DDL).
    pub(crate) fn first_forward(&mut self, kept: Option<KeptBytes>, unit_len: usize, clean: bool) {
        let ReadRetry::Ready { retried } = *self else {
            return;
        };
        *self = match kept {
            Some(unit) if clean && unit.iter().map(Bytes::len).sum::<usize>() == unit_len => {
                ReadRetry::Armed { unit, retried }
            }
            _ => ReadRetry::Off,
        };
    }

    /// More client bytes went to the server: the kept statement is not all it would run.
    pub(crate) fn more_forwarded(&mut self) {
        if self.is_armed() {
            *self = ReadRetry::Off;
        }
    }

    /// A byte of the answer reached the client: the statement can no longer run again.
    pub(crate) fn answer_began(&mut self) {
        *self = ReadRetry::Off;
    }

    /// The transaction's first statement is not a read that may run again.
    pub(crate) fn not_a_read(&mut self) {
        *self = ReadRetry::Off;
    }

    /// Whether a kept statement may still run again within `max` runs.
    pub(crate) fn may_run_again_within(&self, max: u32) -> bool {
        matches!(self, ReadRetry::Armed { retried, .. } if u32::from(*retried) < max)
    }

    /// The server died under the statement on replica `avoid`: its bytes to put back, unless
    /// it was not kept or already ran again `max` times.
    pub(crate) fn take_to_run_again(&mut self, max: u32, avoid: SocketAddr) -> Option<KeptBytes> {
        match std::mem::take(self) {
            ReadRetry::Armed { unit, retried } if u32::from(retried) < max => {
                *self = ReadRetry::Again {
                    retried: retried.saturating_add(1),
                    avoid,
                };
                Some(unit)
            }
            _ => None,
        }
    }

    /// The replica a statement being run again must not go to.
    pub(crate) fn avoid(&self) -> Option<SocketAddr> {
        match self {
            ReadRetry::Again { avoid, .. } => Some(*avoid),
            _ => None,
        }
    }
}

/// Whether `unit` (whole frontend messages) may run again: simple Queries, and extended
/// segments of the unnamed statement or of statements the client prepared before (Parse of
/// the unnamed statement, Bind, Describe, Execute, Sync). A Parse or Close of a named
/// statement changes what the session holds, and anything else (Flush, FunctionCall, COPY)
/// is not a plain read: those are not kept.
pub(crate) fn may_run_again(unit: &[u8]) -> bool {
    let mut pos = 0usize;
    while let Some(header) = unit.get(pos..pos + 5) {
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len < 4 {
            return false;
        }
        let ok = match header[0] {
            b'Q' | b'B' | b'D' | b'E' | b'S' => true,
            // A Parse of the unnamed statement: its name is empty.
            b'P' => unit.get(pos + 5) == Some(&0),
            _ => false,
        };
        if !ok {
            return false;
        }
        pos += 1 + len;
    }
    pos == unit.len() && pos > 0
}

/// Whether the server output `output` (what would go to the client, from a message's start)
/// holds the backend announcing its exit: a FATAL or PANIC error, or the WARNING a backend
/// sends when its postmaster stops it at once (57P01..57P03, `pg_ctl stop -m immediate` or a
/// crash of another backend). What comes before it does not matter, since none of it went to
/// the client: a backend that dies while it runs a query flushes the RowDescription it had
/// buffered with its last words. `Some(shutdown)` then, `shutdown` when it names a shutdown
/// (the replica is going away). Only whole messages are read.
pub(crate) fn announces_exit(output: &[u8]) -> Option<bool> {
    let mut pos = 0usize;
    while let Some(header) = output.get(pos..pos + 5) {
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let body = output.get(pos + 5..(pos + 1).checked_add(len)?)?;
        let shutdown = crate::server::relay::is_shutdown_error(body);
        match header[0] {
            b'E' if crate::server::relay::is_fatal(body) => return Some(shutdown),
            b'N' if shutdown => return Some(true),
            _ => {}
        }
        pos += 1 + len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(code: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![code];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn addr() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 5433))
    }

    #[test]
    fn a_kept_read_runs_again_at_most_max_times() {
        let query = Bytes::from(message(b'Q', b"SELECT 1\0"));
        let mut retry = ReadRetry::default();
        retry.linked(true);
        retry.first_forward(
            Some(SmallVec::from_iter([query.clone()])),
            query.len(),
            true,
        );
        assert!(retry.is_armed());
        let unit = retry.take_to_run_again(1, addr()).expect("runs again");
        assert_eq!(&unit[0][..], &query[..]);
        assert_eq!(retry.avoid(), Some(addr()));
        // Routed again: its count goes with it to the next server.
        retry.linked(true);
        retry.first_forward(Some(unit), query.len(), true);
        assert!(retry.is_armed());
        assert!(retry.take_to_run_again(1, addr()).is_none(), "bounded");
        assert!(matches!(retry, ReadRetry::Off));
        // A new transaction starts counting again.
        retry.linked(true);
        assert!(matches!(retry, ReadRetry::Ready { retried: 0 }));
    }

    #[test]
    fn a_statement_is_not_kept_once_its_answer_began_or_more_went() {
        let query = Bytes::from(message(b'Q', b"SELECT 1\0"));
        let mut retry = ReadRetry::default();
        for stop in [ReadRetry::answer_began, ReadRetry::more_forwarded] {
            retry.linked(true);
            retry.first_forward(
                Some(SmallVec::from_iter([query.clone()])),
                query.len(),
                true,
            );
            stop(&mut retry);
            assert!(retry.take_to_run_again(2, addr()).is_none());
        }
        // Only part of the statement went, or it pinned the session: not kept.
        retry.linked(true);
        retry.first_forward(Some(SmallVec::new()), query.len(), true);
        assert!(!retry.is_armed());
        retry.linked(true);
        retry.first_forward(
            Some(SmallVec::from_iter([query.clone()])),
            query.len(),
            false,
        );
        assert!(!retry.is_armed());
        retry.linked(false);
        assert!(!retry.is_ready());
    }

    #[test]
    fn only_plain_reads_and_segments_of_known_statements_run_again() {
        let query = message(b'Q', b"SELECT 1\0");
        let unnamed = [
            message(b'P', b"\0SELECT 1\0\0\0"),
            message(b'B', b"\0\0\0\0\0\0\0\0"),
            message(b'D', b"P\0"),
            message(b'E', b"\0\0\0\0\0"),
            message(b'S', b""),
        ]
        .concat();
        let known = [
            message(b'B', b"\0s1\0\0\0\0\0\0\0"),
            message(b'E', b"\0\0\0\0\0"),
            message(b'S', b""),
        ]
        .concat();
        assert!(may_run_again(&query) && may_run_again(&unnamed) && may_run_again(&known));
        let named_parse = [message(b'P', b"s1\0SELECT 1\0\0\0"), message(b'S', b"")].concat();
        assert!(!may_run_again(&named_parse));
        let close = [message(b'C', b"Ss1\0"), message(b'S', b"")].concat();
        assert!(!may_run_again(&close));
        let flush = [message(b'P', b"\0SELECT 1\0\0\0"), message(b'H', b"")].concat();
        assert!(!may_run_again(&flush));
        assert!(!may_run_again(&query[..query.len() - 1]), "cut short");
        assert!(!may_run_again(b""));
    }

    #[test]
    fn a_backend_that_announces_its_exit_is_recognized() {
        let fatal = message(b'E', b"SFATAL\0VFATAL\0C57P01\0Mterminating connection\0\0");
        assert_eq!(announces_exit(&fatal), Some(true));
        let conflict = message(b'E', b"SFATAL\0VFATAL\0C40001\0Mconflict with recovery\0\0");
        assert_eq!(announces_exit(&conflict), Some(false));
        let immediate = message(b'N', b"SWARNING\0VWARNING\0C57P01\0Mimmediate shutdown\0\0");
        assert_eq!(announces_exit(&immediate), Some(true));
        let error = message(b'E', b"SERROR\0VERROR\0C42P01\0Mno such table\0\0");
        assert_eq!(announces_exit(&error), None);
        let notice = message(b'N', b"SNOTICE\0VNOTICE\0C00000\0Mhello\0\0");
        assert_eq!(announces_exit(&notice), None);
        assert_eq!(announces_exit(&fatal[..10]), None, "not whole");
        // Its last words come after what it had buffered.
        let buffered = [message(b'T', b"\0\0"), fatal.clone()].concat();
        assert_eq!(announces_exit(&buffered), Some(true));
        let answered = [message(b'T', b"\0\0"), message(b'C', b"SELECT 1\0")].concat();
        assert_eq!(announces_exit(&answered), None);
        assert_eq!(announces_exit(&message(b'T', b"\0\0")), None);
    }
}
