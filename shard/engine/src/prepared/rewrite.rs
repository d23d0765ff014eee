//! Rewriting a transaction-mode client's extended-protocol messages so that its named
//! statements work on whichever server it gets.
//!
//! - **Parse "s1"**: the definition is interned (`Registry`); the client's name is recorded;
//!   the server gets a Parse of `pgtier_<id>`, preceded by a Close of it if the server may
//!   already hold it (so the server itself answers the client's Parse: a 25P02 in an aborted
//!   transaction, a syntax error, a fresh plan), and by the Close of its least recently used
//!   statement if its cache is full. A name the client already uses gets a Parse of the
//!   existing server name, which the server refuses with 42P05, renamed back on the way out.
//! - **Bind / Describe of "s1"**: renamed; a Parse is injected first if this server lacks it.
//! - **Close of "s1"**: the name is forgotten and the server gets a Close of a name nothing has
//!   (the server answers CloseComplete, or skips it after an error exactly as it would have
//!   skipped the client's); the statement stays on the server for others.
//! - **SQL `DEALLOCATE s1` / `EXECUTE s1`** of a client statement: the name in the text is
//!   swapped (with the statement prepared first, and a Sync after it when a simple Query
//!   follows). `DEALLOCATE ALL` and `DISCARD ALL` forget the client's names once they succeed.
//! - A name the client never prepared goes to the server as `pgtier_0`, which nothing has,
//!   so it can never reach another client's statement; the server's 26000 (or
//!   CloseComplete) comes back with the client's name. In SQL, `EXECUTE`/`DEALLOCATE` of a
//!   name that is not the client's passes as it is (an SQL-level statement of the client's,
//!   which pins it to its server), unless it is in pgtier's namespace (`pgtier_...`).
//! - Unnamed statements and portals pass as they are, except that a Bind or Describe of the
//!   unnamed statement first makes the server's unnamed statement the client's own, or none
//!   (`crate::prepared::unnamed`).
//!
//! Every message sent is entered in the server's `Ledger`, which follows the answers.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use pgtier_wire::messages::Message;
use pgtier_wire::messages::frontend::Parse;
use pgtier_wire::session_state::Effects;
use smallvec::SmallVec;

use super::client_statements::ClientStatements;
use super::ledger::{
    CloseOwed, Fallout, Ledger, OnError, OnSuccess, Owed, ParseOwed, PendingAtExecute, Renamed,
};
use super::server_statements::{Held, ServerStatements};
use super::sql_names::{self, NamingStatement};
use super::statement::{self, Registry, SERVER_NAME_PREFIX, Statement};
use super::unnamed::{ClientUnnamed, ServerUnnamed, UnnamedParse};
use crate::nul::nul_at;

/// The longest unnamed Parse body a client's unnamed statement keeps a copy of, to prepare
/// it again on another server. A longer one is not kept: on another server, a Bind of it
/// gets 26000 instead (docs/compatibility.md).
const MAX_KEPT_UNNAMED_BYTES: usize = 16 * 1024;

/// A name no statement ever has (ids start at 1): the Close a client's Close becomes, and
/// what a name the client never prepared becomes, so that it can never reach a statement
/// of another client's that this server holds.
const NO_STATEMENT: &[u8] = b"pgtier_0";

fn renamed(
    server: &[u8],
    client: &[u8],
    statement: Option<Arc<Statement>>,
) -> Option<Box<Renamed>> {
    Some(Box::new(Renamed {
        server: server.into(),
        client: client.into(),
        statement,
    }))
}

/// What a statement name in SQL stands for.
enum SqlTarget {
    /// One of the client's statements.
    Client(Arc<Statement>),
    /// A name in pgtier's namespace the client never prepared: it must not reach another
    /// client's statement, so it becomes a name nothing has.
    Reserved,
}

/// What goes to the server for one client message.
pub type Chunks = SmallVec<[Bytes; 4]>;

/// What a server keeps for statement rewriting.
#[derive(Debug, Default)]
pub(crate) struct ServerPrepared {
    pub statements: ServerStatements,
    pub ledger: Ledger,
}

/// The limits that apply.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StatementLimits {
    /// `max_prepared_statements`: statements one server keeps (at least 1).
    pub per_server: usize,
    /// `max_client_prepared_bytes`: names and definitions one client may hold.
    pub client_bytes: usize,
}

/// What became of one client message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rewrite {
    /// The caller sends it unchanged (it is in the ledger).
    AsIs,
    /// What to send instead is in the output.
    Replaced,
    /// The client holds more statements than `max_client_prepared_bytes` allows.
    OverLimit,
}

/// What a rewrite did with named statements, for `SHOW STATS` (PgBouncer's
/// `client_parse_count`, `server_parse_count` and `bind_count`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatementCounts {
    /// Parses of named statements from the client.
    pub client_parses: u64,
    /// Parses sent to the server for a statement it did not hold (the client's own, or
    /// one prepared before a Bind or Describe).
    pub server_parses: u64,
    /// Binds of the client's named statements.
    pub binds: u64,
}

/// One client message's rewrite, over the state it touches.
pub(crate) struct Rewriter<'a> {
    pub names: &'a mut Option<Box<ClientStatements>>,
    pub server: &'a mut ServerPrepared,
    pub registry: &'a mut Registry,
    pub scratch: &'a mut BytesMut,
    pub limits: StatementLimits,
    /// Type bytes of the messages pgtier added, for the tracker.
    pub injected: SmallVec<[u8; 4]>,
    /// Named statements parsed and bound so far.
    pub counted: StatementCounts,
}

impl Rewriter<'_> {
    /// Whether the message (type `code`, body starting with `head`) must be whole before
    /// [`Rewriter::message`] sees it. A Bind goes to [`Rewriter::bind_head`] once its names
    /// are in; everything else goes through [`Rewriter::passed`].
    pub(crate) fn needs_whole(code: u8, head: &[u8]) -> bool {
        match code {
            b'P' | b'D' | b'C' => true,
            b'Q' => sql_names::may_name_a_statement(head),
            _ => false,
        }
    }

    /// How many bytes of a Bind (from its type byte) hold its header and two names, if they
    /// are all in `available` (which starts at the type byte).
    pub(crate) fn bind_head_len(available: &[u8]) -> Option<usize> {
        let body = available.get(5..)?;
        let portal_end = nul_at(body)?;
        let name_end = nul_at(&body[portal_end + 1..])?;
        Some(5 + portal_end + 1 + name_end + 1)
    }

    /// Before the first message of a segment: statements on this server that no client
    /// holds any more (their clients left) are closed, with a Sync of their own, so that
    /// the server keeps only what live clients can use (`pg_prepared_statements` then reads
    /// as it would on a server of the client's own). Costs nothing until a statement loses
    /// its last client.
    pub(crate) fn sweep_orphans(&mut self, out: &mut Chunks) {
        if self.server.ledger.in_open_segment() {
            return;
        }
        let orphans = self
            .server
            .statements
            .take_orphans(self.registry.orphans(), 0);
        if orphans.is_empty() {
            return;
        }
        for orphan in orphans {
            self.inject_close(CloseOwed::Evicts(orphan), out);
        }
        statement::encode_sync(self.scratch);
        self.inject(b'S', out);
        self.server.ledger.push(Owed::Sync {
            injected: true,
            on_success: None,
        });
    }

    /// Tells the tracker of pgtier's own messages since last asked, oldest first.
    pub(crate) fn take_injected(&mut self) -> SmallVec<[u8; 4]> {
        std::mem::take(&mut self.injected)
    }

    /// A message sent on unchanged without being looked at: it goes in the ledger.
    pub fn passed(&mut self, code: u8, effects: Effects) {
        let owed = match code {
            b'Q' => {
                self.query_sent();
                Owed::Query(self.reset_effects(effects))
            }
            b'P' => {
                // It runs at the Execute of a portal bound to it. A `DEALLOCATE ALL` /
                // `DISCARD ALL` makes the server's cache unknown there (`ForgetAll`), not
                // at its Parse, which drops nothing: until then the statements are known,
                // and one can still be described in a failed transaction, where preparing
                // it again is refused (25P02).
                let all = Effects::DISCARD_ALL.union(Effects::DEALLOCATE_ALL);
                let clears = effects.intersects(all);
                // A `DEALLOCATE` of one name has no such hook: its Parse marks the cache.
                let _ = self.reset_effects(effects.difference(all));
                self.server
                    .ledger
                    .unnamed_statement_acts(clears.then_some(PendingAtExecute::ForgetAll));
                self.server.ledger.parse_owed(ParseOwed {
                    injected: None,
                    creates: None,
                    registers: None,
                    unnamed: Some(UnnamedParse::Other),
                })
            }
            b'B' => Owed::Bind,
            b'E' => match self.server.ledger.take_pending() {
                Some(PendingAtExecute::Forget(name, statement)) => {
                    if let Some(names) = self.names.as_mut() {
                        names.forget(&name, &statement);
                    }
                    let undo = Fallout::Restore(name, statement);
                    self.server.ledger.push_execute_undoing(undo);
                    return;
                }
                Some(PendingAtExecute::ForgetAll) => {
                    // Whether it runs is known only from its answer.
                    let unknown = self.server.statements.all_unknown_noting();
                    let taken = self
                        .names
                        .as_mut()
                        .map(|names| names.take_all())
                        .unwrap_or_default();
                    self.server
                        .ledger
                        .push_execute_undoing(Fallout::RestoreAll(taken, unknown));
                    return;
                }
                None => Owed::Execute,
            },
            b'C' => Owed::Close(None),
            b'S' => Owed::Sync {
                injected: false,
                on_success: None,
            },
            b'F' => Owed::FunctionCall,
            b'c' | b'f' => Owed::CopyEnd,
            // Flush, CopyData, Terminate: nothing is owed. (A Describe always comes whole,
            // through `message`, which knows its target.)
            _ => return,
        };
        self.server.ledger.push(owed);
    }

    /// A whole message (`frame`, header included) the tracker has seen; `effects` are its
    /// text's session-state effects. Unless it is sent as it is, what goes instead is
    /// appended to `out`.
    pub fn message(&mut self, frame: &[u8], effects: Effects, out: &mut Chunks) -> Rewrite {
        let code = frame.first().copied().unwrap_or(0);
        let body = frame.get(5..).unwrap_or_default();
        match code {
            b'P' => self.parse(body, effects, out),
            b'D' => self.describe(body, out),
            b'C' => self.close(body, out),
            b'Q' => self.query(body, effects, out),
            _ => {
                self.passed(code, effects);
                Rewrite::AsIs
            }
        }
    }

    fn statement(&self, name: &[u8]) -> Option<Arc<Statement>> {
        self.names.as_ref()?.get(name).cloned()
    }

    fn parse(&mut self, body: &[u8], effects: Effects, out: &mut Chunks) -> Rewrite {
        let Ok(parse) = Parse::decode_body(body) else {
            // The server refuses it as malformed, as it would have.
            self.passed(b'P', effects);
            return Rewrite::AsIs;
        };
        if parse.statement.is_empty() {
            return self.parse_unnamed(parse.sql, body, effects, out);
        }
        let definition = &body[parse.statement.len() + 1..];
        self.counted.client_parses += 1;
        if let Some(existing) = self.statement(parse.statement) {
            // PostgreSQL refuses a name in use (42P05): the server does, for the server name.
            // Logged in PgBouncer's words, which closes the client instead.
            tracing::info!(
                "prepared statement '{}' was already prepared",
                String::from_utf8_lossy(parse.statement)
            );
            self.ensure(&existing, OnError::Forward, false, out);
            statement::encode_parse_named(self.scratch, existing.server_name(), definition);
            self.emit(out);
            let owed = self.server.ledger.parse_owed(ParseOwed {
                injected: None,
                creates: None,
                registers: None,
                unnamed: None,
            });
            self.server.ledger.push_renamed(
                owed,
                renamed(
                    existing.server_name(),
                    parse.statement,
                    Some(existing.clone()),
                ),
            );
            return Rewrite::Replaced;
        }
        let names = self.names.get_or_insert_with(Box::default);
        if names.bytes() + parse.statement.len() + definition.len() > self.limits.client_bytes {
            return Rewrite::OverLimit;
        }
        let statement = self.registry.intern(definition);
        names.insert(parse.statement, statement.clone());
        match self.server.statements.held(statement.id()) {
            // The server holds it: it answers the client's Parse, but nothing new is made.
            Some(_) => self.inject_close(CloseOwed::Reprepare(statement.clone()), out),
            None => {
                self.counted.server_parses += 1;
                self.make_room(statement.id(), out);
            }
        }
        statement.encode_parse(self.scratch);
        self.emit(out);
        self.server.statements.prepared(statement.clone());
        let owed = self.server.ledger.parse_owed(ParseOwed {
            injected: None,
            creates: Some(statement),
            registers: Some(parse.statement.into()),
            unnamed: None,
        });
        self.server.ledger.push(owed);
        Rewrite::Replaced
    }

    /// An unnamed Parse: passed as is, unless its text is SQL naming a client statement.
    fn parse_unnamed(
        &mut self,
        sql: &[u8],
        body: &[u8],
        effects: Effects,
        out: &mut Chunks,
    ) -> Rewrite {
        let Some((target, found)) = self.named_in_sql(sql) else {
            let effects = without_a_foreign_deallocate(sql, effects);
            self.passed(b'P', effects);
            let unnamed = self.unnamed_parsed(body);
            self.server.ledger.mark_unnamed_parse(unnamed);
            return Rewrite::AsIs;
        };
        let statement = match target {
            SqlTarget::Client(statement) => Some(statement),
            SqlTarget::Reserved => None,
        };
        if let Some(statement) = &statement {
            self.ensure(statement, OnError::Forward, false, out);
        }
        let unnamed = self.unnamed_parsed(body);
        let server_name = statement
            .as_ref()
            .map_or(NO_STATEMENT, |st| st.server_name());
        let types = &body[1 + sql.len() + 1..];
        let sql = swap_name(sql, &found.token, server_name);
        let rename = renamed(server_name, &found.name, statement.clone());
        let len = 4 + 1 + sql.len() + 1 + types.len();
        self.scratch.reserve(1 + len);
        self.scratch.put_u8(b'P');
        self.scratch.put_u32(len as u32);
        self.scratch.put_u8(0);
        self.scratch.put_slice(&sql);
        self.scratch.put_u8(0);
        self.scratch.put_slice(types);
        self.emit(out);
        let on_success = self
            .reset_effects(effects.difference(Effects::DEALLOCATE))
            .map(|b| *b)
            .unwrap_or_default();
        let mut acts = None;
        if let Some(statement) = statement
            && found.kind == NamingStatement::Deallocate
        {
            // It runs at the Execute of a portal bound to it: the name goes when that is sent.
            self.server.statements.set_unknown(statement.id());
            acts = Some(PendingAtExecute::Forget(found.name.into(), statement));
        }
        self.server.ledger.unnamed_statement_acts(acts);
        self.server.ledger.on_segment_success(on_success);
        let owed = self.server.ledger.parse_owed(ParseOwed {
            injected: None,
            creates: None,
            registers: None,
            unnamed: Some(unnamed),
        });
        self.server.ledger.push_renamed(owed, rename);
        Rewrite::Replaced
    }

    /// The head of a Bind (`head`: header, portal and statement names; the parameters
    /// follow in the client's stream and go on as they are): renamed if it names a client
    /// statement. `AsIs` means the caller sends `head` unchanged.
    pub(crate) fn bind_head(&mut self, head: &[u8], out: &mut Chunks) -> Rewrite {
        let (portal, name) = bind_names(head.get(5..).unwrap_or_default());
        if name.is_empty() {
            self.server.ledger.bound(true, None);
            if self.ensure_unnamed(out) {
                // The Bind goes after what was injected, not before it.
                out.push(Bytes::copy_from_slice(head));
                self.server.ledger.push(Owed::Bind);
                return Rewrite::Replaced;
            }
            self.server.ledger.push(Owed::Bind);
            return Rewrite::AsIs;
        }
        let statement = self.statement(name);
        let mut acts = None;
        if let Some(statement) = &statement {
            self.counted.binds += 1;
            self.ensure(statement, OnError::Forward, false, out);
            if statement.deallocates_all() {
                // A named `DEALLOCATE ALL`: as the unnamed one, it acts at this portal's
                // Execute (where the server's cache stops being known).
                acts = Some(PendingAtExecute::ForgetAll);
            }
        }
        self.server.ledger.bound(false, acts);
        let declared = match head.get(1..5) {
            Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]) as usize,
            _ => 0,
        };
        let server_name = statement
            .as_ref()
            .map_or(NO_STATEMENT, |st| st.server_name());
        let len = declared.saturating_sub(name.len()) + server_name.len();
        self.scratch
            .reserve(5 + portal.len() + server_name.len() + 2);
        self.scratch.put_u8(b'B');
        self.scratch.put_u32(len as u32);
        self.scratch.put_slice(portal);
        self.scratch.put_u8(0);
        self.scratch.put_slice(server_name);
        self.scratch.put_u8(0);
        self.emit(out);
        let rename = renamed(server_name, name, statement.clone());
        self.server.ledger.push_renamed(Owed::Bind, rename);
        Rewrite::Replaced
    }

    fn describe(&mut self, body: &[u8], out: &mut Chunks) -> Rewrite {
        let (kind, name) = target(body);
        if kind != b'S' || name.is_empty() {
            let injected = kind == b'S' && self.ensure_unnamed(out);
            self.server.ledger.push(Owed::Describe {
                statement: kind == b'S',
            });
            if injected {
                put_target(self.scratch, b'D', b'S', b"");
                self.emit(out);
                return Rewrite::Replaced;
            }
            return Rewrite::AsIs;
        }
        let statement = self.statement(name);
        if let Some(statement) = &statement {
            self.ensure(statement, OnError::Forward, false, out);
        }
        let server_name = statement
            .as_ref()
            .map_or(NO_STATEMENT, |st| st.server_name());
        put_target(self.scratch, b'D', b'S', server_name);
        self.emit(out);
        let rename = renamed(server_name, name, statement.clone());
        self.server
            .ledger
            .push_renamed(Owed::Describe { statement: true }, rename);
        Rewrite::Replaced
    }

    fn close(&mut self, body: &[u8], out: &mut Chunks) -> Rewrite {
        let (kind, name) = target(body);
        let statement = (kind == b'S' && !name.is_empty())
            .then(|| self.names.as_mut()?.remove(name))
            .flatten();
        let Some(statement) = statement else {
            if kind == b'S' && !name.is_empty() {
                // Not the client's: it must not close another client's statement.
                put_target(self.scratch, b'C', b'S', NO_STATEMENT);
                self.emit(out);
                self.server.ledger.push(Owed::Close(None));
                return Rewrite::Replaced;
            }
            if kind == b'S' {
                // The unnamed statement: the client's is gone, and so is the server's.
                let previous = self
                    .names
                    .as_mut()
                    .and_then(|names| names.unnamed().cloned());
                if let Some(names) = self.names.as_mut() {
                    names.set_unnamed(None);
                }
                self.server.statements.set_unnamed(ServerUnnamed::Empty);
                self.server
                    .ledger
                    .push(Owed::Close(Some(Box::new(CloseOwed::Unnamed {
                        injected: false,
                        previous,
                    }))));
                return Rewrite::AsIs;
            }
            self.server.ledger.push(Owed::Close(None));
            return Rewrite::AsIs;
        };
        put_target(self.scratch, b'C', b'S', NO_STATEMENT);
        self.emit(out);
        self.server
            .ledger
            .push(Owed::Close(Some(Box::new(CloseOwed::Forgets(
                name.into(),
                statement,
            )))));
        Rewrite::Replaced
    }

    /// A whole simple Query: a `DEALLOCATE`/`EXECUTE` of a client statement is renamed.
    fn query(&mut self, body: &[u8], effects: Effects, out: &mut Chunks) -> Rewrite {
        let sql = body.strip_suffix(&[0]).unwrap_or(body);
        let Some((target, found)) = self.named_in_sql(sql) else {
            let effects = without_a_foreign_deallocate(sql, effects);
            self.passed(b'Q', effects);
            return Rewrite::AsIs;
        };
        let statement = match target {
            SqlTarget::Client(statement) => Some(statement),
            SqlTarget::Reserved => None,
        };
        // Outside an extended segment, the Parse before a simple Query gets its own Sync, so
        // that if it fails the Query still runs and reports its own error. Inside one, a Sync
        // would end the client's segment (and a skip-to-Sync PostgreSQL is in after an
        // error), so the Parse joins the segment and its error is the client's.
        if let Some(statement) = &statement {
            if self.server.ledger.in_open_segment() {
                self.ensure(statement, OnError::Forward, false, out);
            } else {
                self.ensure(statement, OnError::Swallow, true, out);
            }
        }
        let server_name = statement
            .as_ref()
            .map_or(NO_STATEMENT, |st| st.server_name());
        let sql = swap_name(sql, &found.token, server_name);
        let rename = renamed(server_name, &found.name, statement.clone());
        let len = 4 + sql.len() + 1;
        self.scratch.reserve(1 + len);
        self.scratch.put_u8(b'Q');
        self.scratch.put_u32(len as u32);
        self.scratch.put_slice(&sql);
        self.scratch.put_u8(0);
        self.emit(out);
        // The name is resolved: only that statement is affected, not the whole cache.
        let mut on_success = self
            .reset_effects(effects.difference(Effects::DEALLOCATE))
            .unwrap_or_default();
        if let Some(statement) = statement
            && found.kind == NamingStatement::Deallocate
        {
            self.server.statements.set_unknown(statement.id());
            on_success.forgets.push((found.name.into(), statement));
        }
        self.query_sent();
        self.server
            .ledger
            .push_renamed(Owed::Query(Some(on_success)), rename);
        Rewrite::Replaced
    }

    fn named_in_sql(&self, sql: &[u8]) -> Option<(SqlTarget, sql_names::NameInSql)> {
        if !sql_names::may_name_a_statement(sql) {
            return None;
        }
        let found = sql_names::find(sql)?;
        match self.statement(&found.name) {
            Some(statement) => Some((SqlTarget::Client(statement), found)),
            None if found.name.starts_with(SERVER_NAME_PREFIX) => {
                Some((SqlTarget::Reserved, found))
            }
            None => None,
        }
    }

    /// What `DISCARD ALL` / `DEALLOCATE` in a text does: the server's statements may be gone
    /// (even a `DEALLOCATE` of another name could name one of pgtier's); the client's names
    /// go once `DEALLOCATE ALL` / `DISCARD ALL` succeeds.
    fn reset_effects(&mut self, effects: Effects) -> Option<Box<OnSuccess>> {
        let all = Effects::DISCARD_ALL.union(Effects::DEALLOCATE_ALL);
        if effects.intersects(all.union(Effects::DEALLOCATE)) {
            self.server.statements.all_unknown();
        }
        effects.intersects(all).then(|| {
            Box::new(OnSuccess {
                clears: true,
                forgets: Vec::new(),
            })
        })
    }

    /// Makes the server hold `statement` by the time the next message reaches it.
    fn ensure(
        &mut self,
        statement: &Arc<Statement>,
        on_error: OnError,
        sync: bool,
        out: &mut Chunks,
    ) {
        match self.server.statements.held(statement.id()) {
            Some(Held::Prepared) => {
                self.server.statements.touch(statement.id());
                return;
            }
            Some(Held::Unknown) => self.inject_close(CloseOwed::Reprepare(statement.clone()), out),
            None => self.make_room(statement.id(), out),
        }
        self.counted.server_parses += 1;
        statement.encode_parse(self.scratch);
        self.inject(b'P', out);
        self.server.statements.prepared(statement.clone());
        let owed = self.server.ledger.parse_owed(ParseOwed {
            injected: Some(on_error),
            creates: Some(statement.clone()),
            registers: None,
            unnamed: None,
        });
        self.server.ledger.push(owed);
        if sync {
            statement::encode_sync(self.scratch);
            self.inject(b'S', out);
            self.server.ledger.push(Owed::Sync {
                injected: true,
                on_success: None,
            });
        }
    }

    /// Evicts least recently used statements until one more fits.
    fn make_room(&mut self, keep: u64, out: &mut Chunks) {
        let orphans = self.registry.orphans();
        for orphan in self.server.statements.take_orphans(orphans, keep) {
            self.inject_close(CloseOwed::Evicts(orphan), out);
        }
        while self.server.statements.len() >= self.limits.per_server.max(1) {
            let Some(victim) = self.server.statements.evict_lru(keep) else {
                break;
            };
            self.inject_close(CloseOwed::Evicts(victim), out);
        }
    }

    fn inject_close(&mut self, close: CloseOwed, out: &mut Chunks) {
        match &close {
            CloseOwed::Evicts(statement) | CloseOwed::Reprepare(statement) => {
                statement.encode_close(self.scratch)
            }
            CloseOwed::Forgets(_, statement) => statement.encode_close(self.scratch),
            CloseOwed::Unnamed { .. } => put_target(self.scratch, b'C', b'S', b""),
        }
        self.inject(b'C', out);
        self.server.ledger.push(Owed::Close(Some(Box::new(close))));
    }

    /// A client's unnamed Parse is being sent (`body`: its name, text and types): it is the
    /// client's unnamed statement now, and the server's; returns what its ledger entry needs
    /// to put that right if it fails or is skipped.
    fn unnamed_parsed(&mut self, body: &[u8]) -> UnnamedParse {
        let token = self.registry.next_token();
        let names = self.names.get_or_insert_with(Box::default);
        let previous = names.unnamed().cloned();
        let kept = match previous.as_ref().and_then(|held| held.parse_body.as_ref()) {
            // The same body as the last one (one query run unnamed again): its copy serves.
            Some(held) if **held == *body => Some(held.clone()),
            _ => (body.len() <= MAX_KEPT_UNNAMED_BYTES).then(|| Arc::from(body)),
        };
        names.set_unnamed(Some(ClientUnnamed {
            token,
            parse_body: kept,
        }));
        self.server.statements.set_unnamed(ServerUnnamed::Of(token));
        UnnamedParse::Client { token, previous }
    }

    /// A simple Query is being sent: PostgreSQL drops the unnamed statement when it runs one.
    fn query_sent(&mut self) {
        if let Some(names) = self.names.as_mut() {
            names.set_unnamed(None);
        }
        self.server.statements.set_unnamed(ServerUnnamed::Empty);
    }

    /// A Bind or Describe of the unnamed statement is about to be sent: makes the server's
    /// unnamed statement the client's (a Parse of it injected), or none when the client has
    /// none (a Close injected), so it never reaches another client's. Returns whether
    /// anything was injected (see `crate::prepared::unnamed`).
    fn ensure_unnamed(&mut self, out: &mut Chunks) -> bool {
        let client = self.names.as_ref().and_then(|names| names.unnamed());
        let server = self.server.statements.unnamed();
        match client {
            Some(unnamed) if server == ServerUnnamed::Of(unnamed.token) => false,
            None if server == ServerUnnamed::Empty => false,
            Some(&ClientUnnamed {
                token,
                parse_body: Some(ref body),
            }) => {
                self.scratch.reserve(5 + body.len());
                self.scratch.put_u8(b'P');
                self.scratch.put_u32((4 + body.len()) as u32);
                self.scratch.put_slice(body);
                self.inject(b'P', out);
                let owed = self.server.ledger.parse_owed(ParseOwed {
                    injected: Some(OnError::Forward),
                    creates: None,
                    registers: None,
                    unnamed: Some(UnnamedParse::Other),
                });
                self.server.ledger.push(owed);
                self.server.statements.set_unnamed(ServerUnnamed::Of(token));
                true
            }
            // None, or one too long to have been kept: the server must not use another's.
            _ => {
                let close = CloseOwed::Unnamed {
                    injected: true,
                    previous: None,
                };
                self.inject_close(close, out);
                self.server.statements.set_unnamed(ServerUnnamed::Empty);
                true
            }
        }
    }

    /// Sends what `scratch` holds as a message of pgtier's own.
    fn inject(&mut self, code: u8, out: &mut Chunks) {
        self.injected.push(code);
        self.emit(out);
    }

    fn emit(&mut self, out: &mut Chunks) {
        out.push(self.scratch.split().freeze());
    }
}

/// A lone `DEALLOCATE name` of a name that is neither the client's nor in pgtier's namespace
/// (an SQL-level statement of the client's) cannot touch pgtier's statements: it need not
/// make the server's cache unknown. Any other text with a `DEALLOCATE` keeps the effect.
fn without_a_foreign_deallocate(sql: &[u8], effects: Effects) -> Effects {
    let lone = sql_names::may_name_a_statement(sql)
        && sql_names::find(sql).is_some_and(|found| found.kind == NamingStatement::Deallocate);
    if lone {
        effects.difference(Effects::DEALLOCATE)
    } else {
        effects
    }
}

/// The portal and statement names at the start of a Bind body.
fn bind_names(body: &[u8]) -> (&[u8], &[u8]) {
    let portal_end = nul_at(body).unwrap_or(body.len());
    let rest = body.get(portal_end + 1..).unwrap_or_default();
    let name_end = nul_at(rest).unwrap_or(rest.len());
    (&body[..portal_end], &rest[..name_end])
}

/// The target byte and name of a Describe or Close body.
fn target(body: &[u8]) -> (u8, &[u8]) {
    match body {
        [kind, rest @ ..] => {
            let end = nul_at(rest).unwrap_or(rest.len());
            (*kind, &rest[..end])
        }
        [] => (0, &[]),
    }
}

fn put_target(out: &mut BytesMut, code: u8, kind: u8, name: &[u8]) {
    let len = 4 + 1 + name.len() + 1;
    out.reserve(1 + len);
    out.put_u8(code);
    out.put_u32(len as u32);
    out.put_u8(kind);
    out.put_slice(name);
    out.put_u8(0);
}

fn swap_name(sql: &[u8], token: &std::ops::Range<usize>, name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sql.len() + name.len());
    out.extend_from_slice(&sql[..token.start]);
    out.extend_from_slice(name);
    out.extend_from_slice(&sql[token.end..]);
    out
}
