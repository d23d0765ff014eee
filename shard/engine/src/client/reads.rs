//! A session's reader state on an entry with a primary and replicas: the pools it uses (one
//! on the primary, one per replica it has read from), where its current transaction runs, and
//! the write its reads must see (read-your-writes).
//!
//! The decisions are made in `engine/read_routing.rs`; this is the state they keep per session.

use std::net::SocketAddr;
use std::time::Instant;

use pgtier_pool::PoolId;
use smallvec::SmallVec;

use crate::services::ReadTicket;

/// Where the session's current transaction runs.
#[derive(Debug, Default)]
pub enum ReadTxn {
    /// Between transactions.
    #[default]
    Between,
    /// A read that waits since `since` for a replica to replay the session's last write (it
    /// runs on the primary once `read_your_writes_timeout` has passed).
    AwaitingReplica { since: Instant },
    /// A read on a replica; the ticket counts it as in flight there until it ends. `budget`:
    /// the client bytes the replica may still get (the read-only prefix that was routed);
    /// `None` once the prefix opened a `BEGIN READ ONLY` block, in which PostgreSQL itself
    /// refuses writes as it would on the primary.
    OnReplica {
        ticket: Box<dyn ReadTicket>,
        budget: Option<usize>,
    },
    /// On the primary: a transaction not known to be read-only (`write`), or a read that fell
    /// back to it.
    OnPrimary { write: bool },
}

/// The reader state of one session.
#[derive(Debug)]
pub struct ReaderSession {
    /// Its pool on the primary (registered at login, like any session's pool).
    pub primary: PoolId,
    /// Its pools on replicas, registered the first time it reads there.
    pub replicas: SmallVec<[(SocketAddr, PoolId); 4]>,
    pub txn: ReadTxn,
    /// When its latest write transaction ended on the primary: its reads must see it. The
    /// driver reads the clock after it reaped the completions of a pass, so every commit
    /// acknowledged in that pass happened before this instant.
    pub last_write: Option<Instant>,
    /// The unit found when its input was last read, with the input's length then: the
    /// routing of the same bytes uses it instead of classifying them again (taken when it
    /// is used, so consumed input never meets a stale answer).
    pub scanned: Option<(usize, Unit)>,
}

impl ReaderSession {
    pub fn new(primary: PoolId) -> ReaderSession {
        ReaderSession {
            primary,
            replicas: SmallVec::new(),
            txn: ReadTxn::Between,
            last_write: None,
            scanned: None,
        }
    }

    /// How many more client bytes may go to its server now (`None`: no limit).
    pub(crate) fn forward_budget(&self) -> Option<usize> {
        match &self.txn {
            ReadTxn::OnReplica { budget, .. } => *budget,
            _ => None,
        }
    }

    /// `bytes` of client input went to a replica.
    pub fn spent(&mut self, bytes: usize) {
        if let ReadTxn::OnReplica {
            budget: Some(left), ..
        } = &mut self.txn
        {
            *left = left.saturating_sub(bytes);
        }
    }

    /// The replica reported a transaction block (`BEGIN READ ONLY` in the prefix): the rest
    /// of the block goes there too.
    pub fn in_block(&mut self) {
        if let ReadTxn::OnReplica { budget, .. } = &mut self.txn {
            *budget = None;
        }
    }

    /// Its pool on replica `addr`, if it has one.
    pub(crate) fn replica_pool(&self, addr: SocketAddr) -> Option<PoolId> {
        self.replicas
            .iter()
            .find(|(replica, _)| *replica == addr)
            .map(|(_, pool)| *pool)
    }

    /// Every pool it registered (each is unregistered once when it leaves).
    pub fn pools(&self) -> impl Iterator<Item = PoolId> + '_ {
        std::iter::once(self.primary).chain(self.replicas.iter().map(|(_, pool)| *pool))
    }

    /// The transaction ended: its ticket is given back, and a write is remembered as the
    /// target of the session's next reads. Returns whether it was a write.
    pub fn end_transaction(&mut self, now: Instant) -> bool {
        let wrote = matches!(self.txn, ReadTxn::OnPrimary { write: true });
        self.txn = ReadTxn::Between;
        if wrote {
            self.last_write = Some(now);
        }
        wrote
    }
}

/// What the start of a session's input says about its next transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// The first Query, or the first extended sequence up to its Sync, is not all here yet.
    Incomplete,
    /// It may write (or pgtier cannot tell): the transaction runs on the primary.
    Primary,
    /// The first `bytes` of the input are read-only: whole Queries and Sync-terminated
    /// sequences. A replica gets only these (plus, once they opened a `BEGIN READ ONLY` block,
    /// everything until it ends); what follows is routed when the replica is released.
    Read { bytes: usize },
}

/// Client input past this many bytes is not waited for: a first sequence still incomplete
/// then runs on the primary.
pub(crate) const MAX_UNIT_BYTES: usize = 64 * 1024;

/// Reads the start of `input` (whole frontend messages) to find the read-only prefix the next
/// transaction may run on a replica. `statement_access` says whether the client's named
/// statement may run on a replica (`None`: it has no such statement).
///
/// A unit ends after a Query or a Sync. A sequence that contains a write, a Flush (the client
/// wants answers before it decides what comes next, so the rest cannot be seen now), a
/// FunctionCall, COPY data or a Bind of the unnamed statement (its text came earlier and is
/// not known here) ends the read-only prefix before it; if that leaves nothing, the
/// transaction runs on the primary.
pub(crate) fn scan_unit(
    input: &[u8],
    classify: impl Fn(&[u8]) -> pgtier_wire::read_only::Access,
    statement_access: impl Fn(&[u8]) -> Option<pgtier_wire::read_only::Access>,
) -> Unit {
    use pgtier_wire::read_only::Access;
    // Statements parsed earlier in the same input: a Bind of one of them must use that
    // text, not an older statement of the same name.
    let mut parsed: SmallVec<[(&[u8], Access); 4]> = SmallVec::new();
    let mut pos = 0usize;
    let mut unit_end = 0usize;
    let stop = |unit_end: usize| {
        if unit_end == 0 {
            Unit::Primary
        } else {
            Unit::Read { bytes: unit_end }
        }
    };
    while let Some(header) = input.get(pos..pos + 5) {
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if len < 4 {
            // Malformed: the forwarder refuses it; nothing here may go to a replica.
            return stop(unit_end);
        }
        let end = pos + 1 + len;
        if end > MAX_UNIT_BYTES {
            // Not waited for (and a length past the message limit is the forwarder's to
            // refuse).
            return stop(unit_end);
        }
        let Some(body) = input.get(pos + 5..end) else {
            break;
        };
        let readable = match header[0] {
            b'Q' => classify(body) == Access::ReadOnly,
            b'P' => {
                let Some(name_end) = memchr::memchr(0, body) else {
                    return stop(unit_end);
                };
                let access = classify(&body[name_end + 1..]);
                if name_end > 0 {
                    parsed.retain(|(name, _)| *name != &body[..name_end]);
                    parsed.push((&body[..name_end], access));
                }
                access == Access::ReadOnly
            }
            b'B' => {
                let portal_end = memchr::memchr(0, body);
                let statement = portal_end.and_then(|portal_end| {
                    let rest = &body[portal_end + 1..];
                    memchr::memchr(0, rest).map(|name_end| &rest[..name_end])
                });
                match statement {
                    // The unnamed statement of an earlier Parse in this input.
                    Some([]) => parsed_unnamed(input, pos, &classify),
                    Some(name) => {
                        parsed
                            .iter()
                            .rev()
                            .find(|(parsed, _)| *parsed == name)
                            .map(|(_, access)| *access)
                            .or_else(|| statement_access(name))
                            == Some(Access::ReadOnly)
                    }
                    None => false,
                }
            }
            // Describe, Execute, Close: no new text.
            b'D' | b'E' | b'C' => true,
            b'S' => {
                unit_end = end;
                pos = end;
                continue;
            }
            // Flush, FunctionCall, COPY data, Terminate and anything else.
            _ => false,
        };
        if !readable {
            return stop(unit_end);
        }
        pos = end;
        if header[0] == b'Q' {
            unit_end = end;
        }
    }
    if unit_end > 0 {
        Unit::Read { bytes: unit_end }
    } else {
        Unit::Incomplete
    }
}

/// A Bind of the unnamed statement at `bind`: read-only only if a Parse of the unnamed
/// statement came before it in `input` (since the last Sync) and its text is.
fn parsed_unnamed(
    input: &[u8],
    bind: usize,
    classify: &impl Fn(&[u8]) -> pgtier_wire::read_only::Access,
) -> bool {
    let mut pos = 0usize;
    let mut last: Option<bool> = None;
    while pos < bind {
        let Some(header) = input.get(pos..pos + 5) else {
            return false;
        };
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let end = pos + 1 + len;
        if header[0] == b'P'
            && let Some(body) = input.get(pos + 5..end)
            && body.first() == Some(&0)
        {
            last = Some(classify(&body[1..]) == pgtier_wire::read_only::Access::ReadOnly);
        }
        pos = end;
    }
    last == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_wire::read_only::Access;

    fn message(code: u8, body: &[u8]) -> Vec<u8> {
        let mut out = vec![code];
        out.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        out.extend_from_slice(body);
        out
    }

    fn query(sql: &str) -> Vec<u8> {
        message(b'Q', &[sql.as_bytes(), b"\0"].concat())
    }

    fn parse(name: &str, sql: &str) -> Vec<u8> {
        message(
            b'P',
            &[name.as_bytes(), b"\0", sql.as_bytes(), b"\0\0\0"].concat(),
        )
    }

    fn bind(statement: &str) -> Vec<u8> {
        message(
            b'B',
            &[b"\0", statement.as_bytes(), b"\0\0\0\0\0\0\0"].concat(),
        )
    }

    fn sync() -> Vec<u8> {
        message(b'S', b"")
    }

    fn execute() -> Vec<u8> {
        message(b'E', b"\0\0\0\0\0")
    }

    /// A stand-in classifier: texts starting with SELECT read.
    fn classify(text: &[u8]) -> Access {
        if text.starts_with(b"SELECT") {
            Access::ReadOnly
        } else {
            Access::Write
        }
    }

    fn scan(input: &[u8]) -> Unit {
        scan_unit(input, classify, |name| match name {
            b"old_read" => Some(Access::ReadOnly),
            b"old_write" => Some(Access::Write),
            _ => None,
        })
    }

    #[test]
    fn a_read_query_is_one_unit_and_a_write_goes_to_the_primary() {
        let read = query("SELECT 1");
        assert_eq!(scan(&read), Unit::Read { bytes: read.len() });
        assert_eq!(scan(&query("UPDATE t SET a = 1")), Unit::Primary);
    }

    #[test]
    fn the_prefix_stops_before_the_first_write() {
        let read = query("SELECT 1");
        let input = [read.clone(), query("DELETE FROM t"), query("SELECT 2")].concat();
        assert_eq!(scan(&input), Unit::Read { bytes: read.len() });
    }

    #[test]
    fn an_extended_sequence_needs_its_sync_and_all_of_its_texts() {
        let sequence = [parse("", "SELECT 1"), bind(""), execute()].concat();
        assert_eq!(scan(&sequence), Unit::Incomplete);
        let whole = [sequence.clone(), sync()].concat();
        assert_eq!(scan(&whole), Unit::Read { bytes: whole.len() });
        let mixed = [
            parse("", "SELECT 1"),
            bind(""),
            execute(),
            parse("", "INSERT"),
            bind(""),
            execute(),
            sync(),
        ]
        .concat();
        assert_eq!(scan(&mixed), Unit::Primary);
    }

    #[test]
    fn a_bind_of_a_named_statement_uses_its_text() {
        let read = [bind("old_read"), execute(), sync()].concat();
        assert_eq!(scan(&read), Unit::Read { bytes: read.len() });
        assert_eq!(
            scan(&[bind("old_write"), execute(), sync()].concat()),
            Unit::Primary
        );
        assert_eq!(
            scan(&[bind("unknown"), execute(), sync()].concat()),
            Unit::Primary
        );
        // Parsed again in the same input: the new text counts.
        let redefined = [parse("old_read", "UPDATE"), bind("old_read"), sync()].concat();
        assert_eq!(scan(&redefined), Unit::Primary);
        let defined = [parse("s1", "SELECT 2"), bind("s1"), execute(), sync()].concat();
        assert_eq!(
            scan(&defined),
            Unit::Read {
                bytes: defined.len()
            }
        );
    }

    #[test]
    fn a_bind_of_an_unnamed_statement_from_earlier_goes_to_the_primary() {
        assert_eq!(scan(&[bind(""), execute(), sync()].concat()), Unit::Primary);
    }

    #[test]
    fn a_flush_or_function_call_ends_what_can_be_seen() {
        let flushed = [parse("", "SELECT 1"), bind(""), message(b'H', b""), sync()].concat();
        assert_eq!(scan(&flushed), Unit::Primary);
        assert_eq!(scan(&message(b'F', b"\0\0\0\0")), Unit::Primary);
    }

    #[test]
    fn a_partial_query_waits_for_the_rest() {
        let read = query("SELECT 1");
        assert_eq!(scan(&read[..read.len() - 1]), Unit::Incomplete);
        assert_eq!(scan(&read[..3]), Unit::Incomplete);
    }

    #[test]
    fn a_huge_first_message_goes_to_the_primary() {
        let text = format!("SELECT '{}'", "x".repeat(MAX_UNIT_BYTES));
        let read = query(&text);
        assert_eq!(scan(&read[..MAX_UNIT_BYTES + 10]), Unit::Primary);
    }

    #[test]
    fn garbage_lengths_never_go_to_a_replica() {
        assert_eq!(scan(b"Q\0\0\0\x01"), Unit::Primary);
        assert_eq!(scan(b"Q\xff\xff\xff\xff"), Unit::Primary);
    }
}
