//! What a server owes, message by message, while pgtier rewrites a client's named statements.
//!
//! pgtier sends the server messages of its own in the middle of a client's pipeline (a Parse
//! that makes a statement exist on this server, a Close that evicts one, a Sync after them
//! when a simple Query follows) and renames others. Their answers must be taken out of the
//! stream, and what the server does with the client's messages must be known exactly: a
//! Parse that fails creates nothing, and after an error the server skips every message up to
//! the next Sync, so a skipped Parse creates nothing and a skipped Close closes nothing. The
//! ledger holds one entry per message sent, oldest first, and is told every message the
//! server sends back. Each entry is completed by the server's answer to it (ParseComplete,
//! BindComplete, CloseComplete, NoData or RowDescription after a Describe, CommandComplete,
//! EmptyQueryResponse or PortalSuspended after an Execute, ReadyForQuery after a Sync or a
//! Query), by an ErrorResponse, or skipped after one; either way the cache of the server's
//! statements and the client's names are put right.
//!
//! COPY FROM STDIN inside an extended sequence: the server ignores Sync until the client
//! ends the copy, so Syncs sent before the client's CopyDone/CopyFail owe nothing (as in
//! `pgtier_wire::tracker`).

use std::collections::VecDeque;
use std::sync::Arc;

use super::server_statements::ServerStatements;
use super::statement::Statement;
use super::unnamed::{ClientUnnamed, ServerUnnamed, UnnamedParse};

/// What to do with the server's error for an injected Parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnError {
    /// The client sees it: its own message (a Bind, a Describe) would have failed there.
    Forward,
    /// Swallowed: a simple Query follows, and reports its own error.
    Swallow,
}

/// A Parse sent to the server.
#[derive(Debug, Default)]
pub(crate) struct ParseOwed {
    /// `Some` if pgtier sent it on its own (its ParseComplete is swallowed).
    pub injected: Option<OnError>,
    /// The server-side statement it creates (named Parses only).
    pub creates: Option<Arc<Statement>>,
    /// The client name it registered, forgotten if the Parse fails or is skipped.
    pub registers: Option<Box<[u8]>>,
    /// It replaces the unnamed statement (see [`UnnamedParse`]).
    pub unnamed: Option<UnnamedParse>,
}

/// A Close sent to the server that pgtier must follow up.
#[derive(Debug)]
pub(crate) enum CloseOwed {
    /// Injected: evicts a statement from the server's cache (LRU).
    Evicts(Arc<Statement>),
    /// Injected: closes a statement before it is prepared again.
    Reprepare(Arc<Statement>),
    /// The client closed its name: sent as a Close of no statement (the server keeps the
    /// statement for others); the name comes back if the server skips the Close.
    Forgets(Box<[u8]>, Arc<Statement>),
    /// A Close of the unnamed statement; `injected` if pgtier sent it on its own (before a
    /// Bind or Describe of the unnamed statement by a client that has none).
    /// The client's unnamed statement before it (`None` for pgtier's own, sent for a
    /// client that has none) comes back if the server skips the Close.
    Unnamed {
        injected: bool,
        previous: Option<ClientUnnamed>,
    },
}

/// What a Query or a Sync does for the client's statements once it succeeds.
#[derive(Debug, Default)]
pub(crate) struct OnSuccess {
    /// `DEALLOCATE ALL` / `DISCARD ALL`: the client's names and the server's statements are gone.
    pub clears: bool,
    /// `DEALLOCATE name` of a client statement.
    pub forgets: Vec<(Box<[u8]>, Arc<Statement>)>,
}

/// One message sent to the server and not yet answered.
#[derive(Debug)]
pub(crate) enum Owed {
    Parse(Box<ParseOwed>),
    Bind,
    Describe {
        statement: bool,
    },
    Execute,
    /// `None`: a Close passed on as the client sent it.
    Close(Option<Box<CloseOwed>>),
    Sync {
        injected: bool,
        on_success: Option<Box<OnSuccess>>,
    },
    Query(Option<Box<OnSuccess>>),
    FunctionCall,
    /// The client ended a COPY (CopyDone or CopyFail): a marker, owed nothing.
    CopyEnd,
}

/// What happens to one server message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The client gets it.
    Forward,
    /// The answer to pgtier's own message: dropped.
    Swallow,
    /// The server answered something never asked: the connection cannot be trusted.
    Desync,
}

/// A change to the linked client's names that the server's answers decided.
#[derive(Debug)]
pub(crate) enum Fallout {
    Forget(Box<[u8]>, Arc<Statement>),
    Restore(Box<[u8]>, Arc<Statement>),
    Clear,
    /// The names a `DEALLOCATE ALL` / `DISCARD ALL` that failed had taken away, and the
    /// server statements (by id) it had made unknown, which the ledger marks known again.
    RestoreAll(Vec<(Box<[u8]>, Arc<Statement>)>, Vec<u64>),
    /// The client's unnamed statement is `to`, if it is still the one of token `expected`
    /// (`None`: if it has none): its Parse failed (none) or was skipped (the one before), or
    /// its Close was skipped (the one before).
    Unnamed {
        expected: Option<u64>,
        to: Option<ClientUnnamed>,
    },
}

/// What an Execute sent next does to the client's names (see `Ledger::pending`).
#[derive(Debug, Clone)]
pub(crate) enum PendingAtExecute {
    /// `DEALLOCATE name` of a client statement.
    Forget(Box<[u8]>, Arc<Statement>),
    /// `DEALLOCATE ALL` or `DISCARD ALL`.
    ForgetAll,
}

/// One server's ledger; see the module doc.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    owed: VecDeque<Entry>,
    /// A message of this segment (since the last Sync) changes names or the server's
    /// statements.
    changes_in_segment: bool,
    /// Segments sent whose changes are not known to have happened yet (see
    /// [`Ledger::holds_back`]).
    barriers: u32,
    /// An error happened since the last ReadyForQuery: `OnSuccess` effects do not apply.
    segment_failed: bool,
    /// An error in an extended message made the server skip every message up to the next
    /// Sync, some of which may not have been sent yet when the error was read.
    skipping: bool,
    /// The server is in COPY FROM STDIN of an extended Execute and the client has not ended
    /// it yet (as far as sent): a Sync sent now is ignored by the server.
    copy_in: bool,
    /// `OnSuccess` of extended messages waiting for the Sync that ends their segment.
    pending: Option<Box<OnSuccess>>,
    /// Extended messages were sent since the last Sync (or Query): an error now would make
    /// the server skip to the next Sync.
    open_segment: bool,
    /// How the error just read names a statement, when it answers a renamed message.
    error_rename: Option<Box<Renamed>>,
    /// A Bind of a statement whose text is `DEALLOCATE name` of a client statement (or
    /// `DEALLOCATE ALL`, `DISCARD ALL`) was sent: the client's names go when its Execute is
    /// sent (from then on, later messages of the segment must not find them, as on
    /// PostgreSQL), and come back if that Execute fails or is skipped.
    at_execute: Option<PendingAtExecute>,
    /// What the unnamed statement does to the client's names when executed (an unnamed
    /// Parse of such a text was sent last); a Bind of it arms `at_execute`.
    unnamed_acts: Option<PendingAtExecute>,
    /// The allocation of the last Parse answered, emptied, for the next one: a driver that
    /// parses every query (unnamed) would otherwise allocate and free one per query.
    spare_parse: Option<Box<ParseOwed>>,
}

/// One entry, and whether it ends a segment with changes.
#[derive(Debug)]
struct Entry {
    owed: Owed,
    barrier: bool,
    renamed: Option<Box<Renamed>>,
    /// What to put back if this message fails or is skipped (the client name an
    /// Execute of `DEALLOCATE name` took away when it was sent).
    undo: Option<Box<Fallout>>,
}

/// A message sent with a statement name other than the client's: an error answering it
/// names `server` where PostgreSQL would have named `client`.
#[derive(Debug)]
pub(crate) struct Renamed {
    pub server: Box<[u8]>,
    pub client: Box<[u8]>,
    /// The client statement it stands for (`None`: a name the client never prepared).
    pub statement: Option<Arc<Statement>>,
}

impl Ledger {
    pub fn is_empty(&self) -> bool {
        self.owed
            .iter()
            .all(|entry| matches!(entry.owed, Owed::CopyEnd))
    }

    /// Whether the client's next messages must wait. What pgtier sends is decided on what
    /// the server will hold if every message before succeeds; within a segment an error
    /// makes the server skip the rest anyway, but a later segment would run on a wrong
    /// guess (a Parse that failed, a Close that was skipped). So a client's messages after
    /// a segment that changed names or statements go once that segment's answer is in.
    pub(crate) fn holds_back(&self) -> bool {
        self.barriers > 0
    }

    fn front(&self) -> Option<&Owed> {
        self.owed.front().map(|entry| &entry.owed)
    }

    fn pop(&mut self) -> Option<Owed> {
        let entry = self.owed.pop_front()?;
        if entry.barrier {
            self.barriers -= 1;
        }
        Some(entry.owed)
    }

    /// Pops the front entry, which failed or was skipped: its undo goes to `fallout`. A
    /// `DEALLOCATE ALL` / `DISCARD ALL` that did not run left the server's statements as
    /// they were: those it made unknown are known again (before the skipped messages after
    /// it are undone, which may make some unknown once more).
    fn pop_failed(
        &mut self,
        statements: &mut ServerStatements,
        fallout: &mut Vec<Fallout>,
    ) -> Option<Owed> {
        if let Some(mut undo) = self.owed.front_mut().and_then(|entry| entry.undo.take()) {
            if let Fallout::RestoreAll(_, unknown) = undo.as_mut() {
                statements.known_again(&std::mem::take(unknown));
            }
            fallout.push(*undo);
        }
        self.pop()
    }

    /// An unnamed Parse is being sent; `acts` is what executing it does to the client's
    /// names (`DEALLOCATE name`, `DEALLOCATE ALL`, `DISCARD ALL`), if anything.
    pub(crate) fn unnamed_statement_acts(&mut self, acts: Option<PendingAtExecute>) {
        self.unnamed_acts = acts;
    }

    /// A Bind is being sent, of the unnamed statement or of a named one that acts as `acts`
    /// says: the next Execute is that portal's.
    pub fn bound(&mut self, unnamed: bool, acts: Option<PendingAtExecute>) {
        self.at_execute = if unnamed {
            self.unnamed_acts.clone()
        } else {
            acts
        };
    }

    /// An Execute is being sent: what it does to the client's names, if anything.
    pub(crate) fn take_pending(&mut self) -> Option<PendingAtExecute> {
        self.at_execute.take()
    }

    /// An Execute that took names away when sent: `undo` puts them back if it fails.
    pub(crate) fn push_execute_undoing(&mut self, undo: Fallout) {
        // The names it took come back if it fails or is skipped: what the client sends after
        // this segment must wait for that to be known.
        self.changes_in_segment = true;
        self.push_entry(Owed::Execute, None);
        if let Some(entry) = self.owed.back_mut() {
            entry.undo = Some(Box::new(undo));
        }
    }

    fn push_entry(&mut self, owed: Owed, renamed: Option<Box<Renamed>>) {
        let changes = match &owed {
            Owed::Parse(parse) => {
                parse.creates.is_some() || parse.registers.is_some() || parse.injected.is_some()
            }
            Owed::Close(close) => close.is_some(),
            _ => false,
        };
        self.changes_in_segment |= changes;
        self.open_segment = match &owed {
            Owed::Sync { .. } | Owed::Query(_) | Owed::FunctionCall => false,
            Owed::CopyEnd => self.open_segment,
            _ => true,
        };
        let barrier = match &owed {
            Owed::Sync { on_success, .. } | Owed::Query(on_success) => {
                std::mem::take(&mut self.changes_in_segment) || on_success.is_some()
            }
            _ => false,
        };
        self.barriers += u32::from(barrier);
        if matches!(owed, Owed::Sync { .. } | Owed::Query(_)) {
            // A DEALLOCATE whose Execute never came never ran.
            self.at_execute = None;
        }
        if matches!(owed, Owed::Query(_)) {
            // A simple Query drops the unnamed statement.
            self.unnamed_acts = None;
        }
        self.owed.push_back(Entry {
            owed,
            barrier,
            renamed,
            undo: None,
        });
    }

    /// Whether extended messages were sent since the last Sync or Query.
    pub(crate) fn in_open_segment(&self) -> bool {
        self.open_segment
    }

    /// The Parse just pushed is a client's unnamed one (see [`UnnamedParse`]).
    pub(crate) fn mark_unnamed_parse(&mut self, unnamed: UnnamedParse) {
        if let Some(Entry {
            owed: Owed::Parse(parse),
            ..
        }) = self.owed.back_mut()
        {
            parse.unnamed = Some(unnamed);
        }
    }

    /// The unnamed statement of token `token` turned out to be `to` (its Parse failed or
    /// was skipped): later unnamed Parses and Closes that took it for the client's previous
    /// one now put back `to` instead if they are undone.
    fn unnamed_was(&mut self, token: u64, to: Option<ClientUnnamed>) {
        for entry in &mut self.owed {
            let previous = match &mut entry.owed {
                Owed::Parse(parse) => match &mut parse.unnamed {
                    Some(UnnamedParse::Client { previous, .. }) => previous,
                    _ => continue,
                },
                Owed::Close(Some(close)) => match close.as_mut() {
                    CloseOwed::Unnamed { previous, .. } => previous,
                    _ => continue,
                },
                _ => continue,
            };
            if previous.as_ref().is_some_and(|held| held.token == token) {
                *previous = to.clone();
            }
        }
    }

    /// The Parse that registered `name` for `statement` failed or was skipped: a later
    /// Execute that took the name away (a `DEALLOCATE ALL` sent in the same pipeline) or a
    /// Close of it must not give it back if it is undone in turn.
    fn never_registered(&mut self, name: &[u8], statement: &Arc<Statement>) {
        let same = |held: &(Box<[u8]>, Arc<Statement>)| {
            &*held.0 == name && Arc::ptr_eq(&held.1, statement)
        };
        for entry in &mut self.owed {
            match entry.undo.as_deref_mut() {
                Some(Fallout::RestoreAll(taken, _)) => taken.retain(|held| !same(held)),
                Some(Fallout::Restore(held_name, held))
                    if **held_name == *name && Arc::ptr_eq(held, statement) =>
                {
                    entry.undo = None;
                }
                _ => {}
            }
            // A Close of the name that is skipped too must not bring it back either.
            let closes_it = matches!(
                &entry.owed,
                Owed::Close(Some(close)) if matches!(
                    close.as_ref(),
                    CloseOwed::Forgets(held_name, held)
                        if **held_name == *name && Arc::ptr_eq(held, statement)
                )
            );
            if closes_it {
                entry.owed = Owed::Close(None);
            }
        }
    }

    /// The entry of a Parse being sent, in the spare allocation if there is one.
    pub(crate) fn parse_owed(&mut self, parse: ParseOwed) -> Owed {
        Owed::Parse(match self.spare_parse.take() {
            Some(mut spare) => {
                *spare = parse;
                spare
            }
            None => Box::new(parse),
        })
    }

    /// A Parse answered: its allocation is kept for the next one (emptied, so that it holds
    /// no statement or body alive).
    fn recycle(&mut self, mut parse: Box<ParseOwed>) {
        if self.spare_parse.is_none() {
            *parse = ParseOwed::default();
            self.spare_parse = Some(parse);
        }
    }

    /// A message was sent to the server.
    pub fn push(&mut self, owed: Owed) {
        self.push_renamed(owed, None);
    }

    /// A message was sent to the server under a statement name that is not the client's.
    pub(crate) fn push_renamed(&mut self, owed: Owed, renamed: Option<Box<Renamed>>) {
        match owed {
            Owed::Sync { .. } if self.copy_in => {}
            Owed::Sync {
                injected,
                on_success: None,
            } if !injected => {
                let on_success = self.pending.take();
                self.push_entry(
                    Owed::Sync {
                        injected,
                        on_success,
                    },
                    renamed,
                );
            }
            Owed::CopyEnd => {
                self.copy_in = false;
                self.push_entry(owed, renamed);
            }
            owed => self.push_entry(owed, renamed),
        }
    }

    /// How the last error read names a statement, if it answered a renamed message.
    pub(crate) fn take_error_rename(&mut self) -> Option<Box<Renamed>> {
        self.error_rename.take()
    }

    /// An extended message whose effect applies if its segment succeeds.
    pub(crate) fn on_segment_success(&mut self, effect: OnSuccess) {
        let pending = self.pending.get_or_insert_with(Box::default);
        pending.clears |= effect.clears;
        pending.forgets.extend(effect.forgets);
    }

    /// A message arrived from the server; `statements` and `fallout` receive what it decided.
    /// `tag` is a CommandComplete's body (empty for other messages, or one too long to read).
    pub(crate) fn on_server_message(
        &mut self,
        code: u8,
        tag: &[u8],
        statements: &mut ServerStatements,
        fallout: &mut Vec<Fallout>,
    ) -> Verdict {
        while matches!(self.front(), Some(Owed::CopyEnd)) {
            self.pop();
        }
        let front = self.front();
        match code {
            b'1' => match self.pop() {
                Some(Owed::Parse(parse)) => {
                    let injected = parse.injected.is_some();
                    self.recycle(parse);
                    if injected {
                        Verdict::Swallow
                    } else {
                        Verdict::Forward
                    }
                }
                _ => Verdict::Desync,
            },
            b'2' => self.complete(|owed| matches!(owed, Owed::Bind)),
            b'3' => match self.pop() {
                Some(Owed::Close(None)) => Verdict::Forward,
                Some(Owed::Close(Some(close))) => match *close {
                    CloseOwed::Forgets(..)
                    | CloseOwed::Unnamed {
                        injected: false, ..
                    } => Verdict::Forward,
                    CloseOwed::Evicts(_)
                    | CloseOwed::Reprepare(_)
                    | CloseOwed::Unnamed { injected: true, .. } => Verdict::Swallow,
                },
                _ => Verdict::Desync,
            },
            b't' => match front {
                Some(Owed::Describe { statement: true }) => Verdict::Forward,
                _ => Verdict::Desync,
            },
            b'n' => self.complete(|owed| matches!(owed, Owed::Describe { .. })),
            b'T' => match front {
                Some(Owed::Describe { .. }) => {
                    self.pop();
                    Verdict::Forward
                }
                Some(Owed::Query(_)) => Verdict::Forward,
                _ => Verdict::Desync,
            },
            b'C' | b'I' => match front {
                Some(Owed::Execute) => {
                    self.pop();
                    Verdict::Forward
                }
                Some(Owed::Query(_)) => {
                    if code == b'C' {
                        self.query_statement_done(tag, statements, fallout);
                    }
                    Verdict::Forward
                }
                _ => Verdict::Desync,
            },
            b's' => self.complete(|owed| matches!(owed, Owed::Execute)),
            b'G' => {
                if matches!(front, Some(Owed::Execute)) {
                    self.start_copy_in();
                }
                Verdict::Forward
            }
            b'E' => self.on_error(statements, fallout),
            b'Z' => self.on_ready(statements, fallout),
            _ => Verdict::Forward,
        }
    }

    /// One statement of the Query in front completed. `DEALLOCATE` is not transactional:
    /// a `DEALLOCATE ALL` that completed stays done even if a later statement of the same
    /// Query fails and rolls back its implicit transaction, so the client's names go now
    /// rather than at a ReadyForQuery without error. (A client's `DEALLOCATE name` is only
    /// recognised as a Query of its own, which cannot complete and then fail.)
    fn query_statement_done(
        &mut self,
        tag: &[u8],
        statements: &mut ServerStatements,
        fallout: &mut Vec<Fallout>,
    ) {
        let tag = tag.strip_suffix(&[0]).unwrap_or(tag);
        if tag != b"DEALLOCATE ALL" {
            return;
        }
        let Some(Entry {
            owed: Owed::Query(Some(on_success)),
            ..
        }) = self.owed.front_mut()
        else {
            return;
        };
        if std::mem::take(&mut on_success.clears) {
            statements.clear();
            fallout.push(Fallout::Clear);
        }
    }

    /// Pops the front entry if `expected` says it is what this answer completes.
    fn complete(&mut self, expected: impl Fn(&Owed) -> bool) -> Verdict {
        match self.front() {
            Some(owed) if expected(owed) => {
                self.pop();
                Verdict::Forward
            }
            _ => Verdict::Desync,
        }
    }

    /// CopyInResponse to an extended Execute: the Syncs sent before the client's end of the
    /// copy are ignored by the server.
    fn start_copy_in(&mut self) {
        let ended = self
            .owed
            .iter()
            .position(|entry| matches!(entry.owed, Owed::CopyEnd));
        let end = ended.unwrap_or(self.owed.len());
        let mut index = 1;
        let mut limit = end;
        while index < limit {
            if matches!(
                self.owed.get(index).map(|entry| &entry.owed),
                Some(Owed::Sync { .. })
            ) {
                if self.owed.remove(index).is_some_and(|entry| entry.barrier) {
                    self.barriers -= 1;
                }
                limit -= 1;
            } else {
                index += 1;
            }
        }
        self.copy_in = ended.is_none();
    }

    fn on_error(
        &mut self,
        statements: &mut ServerStatements,
        fallout: &mut Vec<Fallout>,
    ) -> Verdict {
        self.segment_failed = true;
        self.copy_in = false;
        self.error_rename = self.owed.front_mut().and_then(|entry| entry.renamed.take());
        let extended = matches!(
            self.front(),
            Some(
                Owed::Parse(_)
                    | Owed::Bind
                    | Owed::Describe { .. }
                    | Owed::Execute
                    | Owed::Close(_)
            )
        );
        if !extended {
            // An error inside a Query, a FunctionCall or at a Sync: its ReadyForQuery follows.
            return Verdict::Forward;
        }
        let verdict = match self.pop_failed(statements, fallout) {
            Some(Owed::Parse(parse)) => {
                let verdict = match parse.injected {
                    Some(OnError::Swallow) => Verdict::Swallow,
                    _ => Verdict::Forward,
                };
                let parse = *parse;
                match parse.unnamed {
                    // PostgreSQL dropped the old unnamed statement, then failed to make one.
                    Some(UnnamedParse::Client { token, .. }) => {
                        statements.set_unnamed(ServerUnnamed::Empty);
                        self.unnamed_was(token, None);
                        fallout.push(Fallout::Unnamed {
                            expected: Some(token),
                            to: None,
                        });
                    }
                    Some(UnnamedParse::Other) => statements.set_unnamed(ServerUnnamed::Unknown),
                    None => {}
                }
                if let Some(statement) = parse.creates {
                    // A failed Parse creates nothing, and pgtier only sends one for a
                    // statement the server does not have (or has just closed).
                    statements.remove(statement.id());
                    if let Some(name) = parse.registers {
                        self.never_registered(&name, &statement);
                        fallout.push(Fallout::Forget(name, statement));
                    }
                }
                verdict
            }
            Some(Owed::Close(Some(close))) => {
                undo_close(*close, statements, fallout);
                Verdict::Forward
            }
            _ => Verdict::Forward,
        };
        // The server now skips everything up to the next Sync.
        self.skipping = true;
        self.skip_to_sync(statements, fallout);
        verdict
    }

    fn on_ready(
        &mut self,
        statements: &mut ServerStatements,
        fallout: &mut Vec<Fallout>,
    ) -> Verdict {
        let failed = std::mem::take(&mut self.segment_failed);
        if std::mem::take(&mut self.skipping) {
            // Messages of the failed segment sent after its error was read were skipped by
            // the server as well: nothing answered them.
            self.skip_to_sync(statements, fallout);
        }
        let (verdict, on_success) = match self.pop() {
            Some(Owed::Sync {
                injected,
                on_success,
            }) => (
                if injected {
                    Verdict::Swallow
                } else {
                    Verdict::Forward
                },
                on_success,
            ),
            Some(Owed::Query(on_success)) => (Verdict::Forward, on_success),
            Some(Owed::FunctionCall) => (Verdict::Forward, None),
            _ => return Verdict::Desync,
        };
        if let Some(on_success) = on_success.filter(|_| !failed) {
            if on_success.clears {
                statements.clear();
                fallout.push(Fallout::Clear);
            }
            for (name, statement) in on_success.forgets {
                statements.remove(statement.id());
                fallout.push(Fallout::Forget(name, statement));
            }
        }
        verdict
    }
}

impl Ledger {
    /// The server skips every message up to the next Sync (or the Query or FunctionCall a
    /// pipeline may hold there): a skipped Parse creates nothing, a skipped Close closes
    /// nothing.
    fn skip_to_sync(&mut self, statements: &mut ServerStatements, fallout: &mut Vec<Fallout>) {
        while let Some(owed) = self.front() {
            // A Query or FunctionCall in the skipped stretch is skipped too (PostgreSQL
            // discards every message but Sync until a Sync).
            if matches!(owed, Owed::Sync { .. }) {
                break;
            }
            match self.pop_failed(statements, fallout) {
                Some(Owed::Parse(parse)) => {
                    let parse = *parse;
                    match parse.unnamed {
                        // Skipped: the server keeps what it had, and the client its own.
                        Some(UnnamedParse::Client { token, previous }) => {
                            statements.set_unnamed(ServerUnnamed::Unknown);
                            self.unnamed_was(token, previous.clone());
                            fallout.push(Fallout::Unnamed {
                                expected: Some(token),
                                to: previous,
                            });
                        }
                        Some(UnnamedParse::Other) => statements.set_unnamed(ServerUnnamed::Unknown),
                        None => {}
                    }
                    if let Some(statement) = parse.creates {
                        // Skipped: whether it existed before (a Close before it was skipped
                        // too) is not known here.
                        statements.set_unknown(statement.id());
                        if let Some(name) = parse.registers {
                            self.never_registered(&name, &statement);
                            fallout.push(Fallout::Forget(name, statement));
                        }
                    }
                }
                Some(Owed::Close(Some(close))) => undo_close(*close, statements, fallout),
                // A skipped Query did not drop the unnamed statement it was taken to drop.
                Some(Owed::Query(_)) => statements.set_unnamed(ServerUnnamed::Unknown),
                _ => {}
            }
        }
    }
}

/// A Close that failed or was skipped: what it would have removed is still there.
fn undo_close(close: CloseOwed, statements: &mut ServerStatements, fallout: &mut Vec<Fallout>) {
    match close {
        CloseOwed::Evicts(statement) => {
            statements.prepared(statement.clone());
            statements.set_unknown(statement.id());
        }
        // The Parse after it decides (it is skipped too).
        CloseOwed::Reprepare(_) => {}
        CloseOwed::Forgets(name, statement) => fallout.push(Fallout::Restore(name, statement)),
        CloseOwed::Unnamed { injected, previous } => {
            statements.set_unnamed(ServerUnnamed::Unknown);
            if !injected {
                fallout.push(Fallout::Unnamed {
                    expected: None,
                    to: previous,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::server_statements::Held;
    use super::super::statement::Registry;
    use super::*;

    struct Fixture {
        ledger: Ledger,
        statements: ServerStatements,
        fallout: Vec<Fallout>,
        registry: Registry,
    }

    impl Fixture {
        fn new() -> Fixture {
            Fixture {
                ledger: Ledger::default(),
                statements: ServerStatements::default(),
                fallout: Vec::new(),
                registry: Registry::default(),
            }
        }

        fn statement(&mut self, sql: &str) -> Arc<Statement> {
            let mut definition = sql.as_bytes().to_vec();
            definition.extend_from_slice(&[0, 0, 0]);
            self.registry.intern(&definition)
        }

        fn answer(&mut self, codes: &[u8]) -> Vec<Verdict> {
            codes
                .iter()
                .map(|&code| {
                    self.ledger.on_server_message(
                        code,
                        &[],
                        &mut self.statements,
                        &mut self.fallout,
                    )
                })
                .collect()
        }

        fn parse(&mut self, injected: Option<OnError>, creates: Option<Arc<Statement>>) {
            if let Some(statement) = creates.clone() {
                self.statements.prepared(statement);
            }
            let registers = creates
                .as_ref()
                .filter(|_| injected.is_none())
                .map(|_| Box::from(&b"s1"[..]));
            self.ledger.push(Owed::Parse(Box::new(ParseOwed {
                injected,
                creates,
                registers,
                unnamed: None,
            })));
        }

        fn sync(&mut self) {
            self.ledger.push(Owed::Sync {
                injected: false,
                on_success: None,
            });
        }
    }

    use Verdict::{Desync, Forward, Swallow};

    #[test]
    fn an_answered_parse_leaves_its_allocation_empty_for_the_next() {
        let mut f = Fixture::new();
        let s = f.statement("SELECT 1");
        let owed = f.ledger.parse_owed(ParseOwed {
            creates: Some(s.clone()),
            ..ParseOwed::default()
        });
        let Owed::Parse(first) = &owed else {
            unreachable!()
        };
        let first: *const ParseOwed = &**first;
        f.ledger.push(owed);
        f.sync();
        assert_eq!(f.answer(b"1Z"), [Forward, Forward]);
        assert_eq!(
            Arc::strong_count(&s),
            1,
            "the spare holds no statement alive"
        );
        let Owed::Parse(next) = f.ledger.parse_owed(ParseOwed::default()) else {
            unreachable!()
        };
        assert!(std::ptr::eq(first, &*next), "the next Parse reuses it");
    }

    #[test]
    fn injected_answers_are_swallowed_and_the_clients_forwarded() {
        let mut f = Fixture::new();
        let s = f.statement("SELECT 1");
        f.parse(Some(OnError::Forward), Some(s.clone()));
        f.ledger.push(Owed::Bind);
        f.ledger.push(Owed::Execute);
        f.sync();
        assert_eq!(
            f.answer(b"12DCZ"),
            [Swallow, Forward, Forward, Forward, Forward]
        );
        assert!(f.ledger.is_empty());
        assert_eq!(f.statements.held(s.id()), Some(Held::Prepared));
    }

    #[test]
    fn an_error_fails_its_message_and_skips_to_the_sync() {
        let mut f = Fixture::new();
        let good = f.statement("SELECT 1");
        let bad = f.statement("SELEC 2");
        let later = f.statement("SELECT 3");
        f.parse(None, Some(good.clone()));
        f.ledger.push(Owed::Bind);
        f.ledger.push(Owed::Execute);
        f.parse(None, Some(bad.clone()));
        f.ledger.push(Owed::Bind);
        f.parse(None, Some(later.clone()));
        f.ledger.push(Owed::Close(Some(Box::new(CloseOwed::Forgets(
            Box::from(&b"old"[..]),
            good.clone(),
        )))));
        f.sync();
        f.ledger.push(Owed::Bind);
        f.sync();
        assert_eq!(
            f.answer(b"12DCEZ2Z"),
            [Forward; 8],
            "the server's own answers all reach the client"
        );
        assert!(f.ledger.is_empty());
        assert_eq!(f.statements.held(good.id()), Some(Held::Prepared));
        assert_eq!(
            f.statements.held(bad.id()),
            None,
            "a failed Parse creates nothing"
        );
        assert_eq!(
            f.statements.held(later.id()),
            Some(Held::Unknown),
            "a skipped one is not known"
        );
        let kinds: Vec<_> = f
            .fallout
            .iter()
            .map(|fallout| match fallout {
                Fallout::Forget(name, _) => format!("forget {}", String::from_utf8_lossy(name)),
                Fallout::Restore(name, _) => format!("restore {}", String::from_utf8_lossy(name)),
                Fallout::Clear => "clear".into(),
                Fallout::RestoreAll(taken, _) => format!("restore {}", taken.len()),
                Fallout::Unnamed { expected, .. } => format!("unnamed {expected:?}"),
            })
            .collect();
        assert_eq!(kinds, ["forget s1", "forget s1", "restore old"]);
    }

    #[test]
    fn an_injected_parse_that_fails_before_a_query_is_swallowed_with_its_sync() {
        let mut f = Fixture::new();
        let s = f.statement("SELECT 1");
        f.parse(Some(OnError::Swallow), Some(s.clone()));
        f.ledger.push(Owed::Sync {
            injected: true,
            on_success: None,
        });
        f.ledger.push(Owed::Query(None));
        assert_eq!(f.answer(b"EZEZ"), [Swallow, Swallow, Forward, Forward]);
        assert_eq!(f.statements.held(s.id()), None);
    }

    #[test]
    fn evictions_skipped_by_an_error_leave_the_statement_unknown() {
        let mut f = Fixture::new();
        let old = f.statement("SELECT 1");
        f.ledger.push(Owed::Bind);
        f.ledger
            .push(Owed::Close(Some(Box::new(CloseOwed::Evicts(old.clone())))));
        f.sync();
        assert_eq!(f.answer(b"EZ"), [Forward, Forward]);
        assert_eq!(f.statements.held(old.id()), Some(Held::Unknown));
    }

    #[test]
    fn describe_and_query_answers_complete_the_right_entries() {
        let mut f = Fixture::new();
        f.ledger.push(Owed::Describe { statement: true });
        f.ledger.push(Owed::Describe { statement: false });
        f.ledger.push(Owed::Execute);
        f.ledger.push(Owed::Execute);
        f.sync();
        f.ledger.push(Owed::Query(None));
        assert_eq!(f.answer(b"tTnDsI"), [Forward; 6]);
        assert_eq!(f.answer(b"ZTDCTDCNAZ"), [Forward; 10]);
        assert!(f.ledger.is_empty());
    }

    #[test]
    fn answers_nobody_asked_for_are_a_desync() {
        let mut f = Fixture::new();
        assert_eq!(f.answer(b"1"), [Desync]);
        assert_eq!(f.answer(b"Z"), [Desync]);
        f.ledger.push(Owed::Bind);
        assert_eq!(f.answer(b"3"), [Desync]);
        let mut f = Fixture::new();
        f.ledger.push(Owed::Execute);
        assert_eq!(f.answer(b"n"), [Desync]);
    }

    #[test]
    fn a_sync_sent_during_an_extended_copy_in_owes_nothing() {
        let mut f = Fixture::new();
        f.ledger.push(Owed::Bind);
        f.ledger.push(Owed::Execute);
        f.sync();
        assert_eq!(f.answer(b"2G"), [Forward, Forward]);
        f.sync(); // sent while copying: ignored by the server
        f.ledger.push(Owed::CopyEnd);
        f.sync();
        assert_eq!(f.answer(b"CZ"), [Forward, Forward]);
        assert!(f.ledger.is_empty(), "{:?}", f.ledger.owed);
        assert!(!f.ledger.holds_back());
    }

    #[test]
    fn a_segment_with_changes_holds_back_what_follows_until_it_is_answered() {
        let mut f = Fixture::new();
        let s = f.statement("SELECT 1");
        f.ledger.push(Owed::Bind);
        f.sync();
        assert!(!f.ledger.holds_back(), "nothing changed");
        f.parse(None, Some(s.clone()));
        assert!(!f.ledger.holds_back(), "the rest of its segment may go");
        f.sync();
        assert!(f.ledger.holds_back());
        assert_eq!(f.answer(b"2Z1"), [Forward; 3]);
        assert!(f.ledger.holds_back(), "its Sync is not answered yet");
        assert_eq!(f.answer(b"Z"), [Forward]);
        assert!(!f.ledger.holds_back());
    }

    #[test]
    fn success_effects_apply_only_when_the_segment_succeeds() {
        let mut f = Fixture::new();
        let s = f.statement("SELECT 1");
        f.statements.prepared(s.clone());
        f.ledger.push(Owed::Query(Some(Box::new(OnSuccess {
            clears: false,
            forgets: vec![(Box::from(&b"s1"[..]), s.clone())],
        }))));
        assert_eq!(f.answer(b"EZ"), [Forward, Forward]);
        assert!(f.fallout.is_empty(), "a failed DEALLOCATE forgets nothing");
        f.ledger.on_segment_success(OnSuccess {
            clears: true,
            forgets: Vec::new(),
        });
        f.ledger.push(Owed::Execute);
        f.sync();
        assert_eq!(f.answer(b"CZ"), [Forward, Forward]);
        assert!(matches!(f.fallout.as_slice(), [Fallout::Clear]));
        assert!(f.statements.is_empty());
    }

    /// An Execute of `DEALLOCATE ALL` skipped after an error ran nothing: the statements it
    /// made unknown when sent are known again, so none is prepared anew in the failed block
    /// (found by the protocol fuzzer, seeds 397 and 758).
    #[test]
    fn a_skipped_deallocate_all_leaves_the_statements_known() {
        let mut f = Fixture::new();
        let kept = f.statement("SELECT 1");
        let unknown = f.statement("SELECT 2");
        f.statements.prepared(kept.clone());
        f.statements.prepared(unknown.clone());
        f.statements.set_unknown(unknown.id());
        f.ledger.push(Owed::Describe { statement: true });
        let were_prepared = f.statements.all_unknown_noting();
        f.ledger
            .push_execute_undoing(Fallout::RestoreAll(Vec::new(), were_prepared));
        f.sync();
        assert_eq!(
            f.statements.held(kept.id()),
            Some(Held::Unknown),
            "while in flight"
        );
        assert_eq!(f.answer(b"EZ"), [Forward, Forward]);
        assert_eq!(f.statements.held(kept.id()), Some(Held::Prepared));
        assert_eq!(
            f.statements.held(unknown.id()),
            Some(Held::Unknown),
            "unknown before it, unknown after"
        );
    }

    /// `DEALLOCATE ALL; SELECT 1/0` in one Query: PostgreSQL's DEALLOCATE is not undone by
    /// the error that rolls back the implicit transaction (found by the protocol fuzzer,
    /// seeds 63 and 179).
    #[test]
    fn a_deallocate_all_that_completed_stays_done_when_its_query_fails() {
        let mut f = Fixture::new();
        let s = f.statement("SELECT 1");
        f.statements.prepared(s.clone());
        f.ledger.push(Owed::Query(Some(Box::new(OnSuccess {
            clears: true,
            forgets: Vec::new(),
        }))));
        let verdicts = [
            f.ledger.on_server_message(
                b'C',
                b"DEALLOCATE ALL\0",
                &mut f.statements,
                &mut f.fallout,
            ),
            f.ledger
                .on_server_message(b'E', &[], &mut f.statements, &mut f.fallout),
            f.ledger
                .on_server_message(b'Z', &[], &mut f.statements, &mut f.fallout),
        ];
        assert_eq!(verdicts, [Forward; 3]);
        assert!(matches!(f.fallout.as_slice(), [Fallout::Clear]));
        assert!(f.statements.is_empty());

        // Failing before the DEALLOCATE ALL ran: nothing goes.
        f.fallout.clear();
        let s = f.statement("SELECT 2");
        f.statements.prepared(s);
        f.ledger.push(Owed::Query(Some(Box::new(OnSuccess {
            clears: true,
            forgets: Vec::new(),
        }))));
        assert_eq!(f.answer(b"EZ"), [Forward, Forward]);
        assert!(f.fallout.is_empty());
        assert!(!f.statements.is_empty());
    }
}
