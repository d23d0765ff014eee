//! A prepared statement as the servers see it: its definition (query text and parameter
//! types) and the one name it has on every server of this worker. Definitions are interned,
//! so fifty clients preparing the same text share one copy and one server-side statement.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use ahash::RandomState;
use bytes::{BufMut, Bytes, BytesMut};

/// Prefix of the server-side names. Lowercase letters, digits and `_` only, so a name can
/// stand unquoted in the SQL that pgtier rewrites (`DEALLOCATE pgtier_7`).
pub(crate) const SERVER_NAME_PREFIX: &[u8] = b"pgtier_";

/// One interned definition.
#[derive(Debug)]
pub struct Statement {
    id: u64,
    /// `pgtier_<id>`, without a terminator.
    server_name: Box<[u8]>,
    /// The body of a Parse after the statement name: query text, NUL, parameter count and
    /// types, exactly as a client sent it.
    definition: Bytes,
    /// How many clients hold it under some name (servers' caches do not count).
    clients: AtomicU32,
    /// The registry's count of statements that lost their last client.
    orphans: Arc<AtomicU64>,
    /// Whether its text may run on a replica, once classified (0: not yet; see
    /// [`Statement::access`]).
    access: AtomicU8,
    /// Whether executing it deallocates every statement, once classified (0: not yet; see
    /// [`Statement::deallocates_all`]).
    deallocates: AtomicU8,
}

impl Statement {
    /// A client holds it under a name now.
    pub(crate) fn client_ref(&self) {
        self.clients.fetch_add(1, Ordering::Relaxed);
    }

    /// A client let a name of it go; the last one makes it an orphan, which servers close
    /// the next time they make room (`ServerStatements::take_orphans`).
    pub(crate) fn client_unref(&self) {
        if self.clients.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.orphans.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether any client holds it.
    pub(crate) fn has_clients(&self) -> bool {
        self.clients.load(Ordering::Relaxed) > 0
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn server_name(&self) -> &[u8] {
        &self.server_name
    }

    /// Its query text (the definition up to its NUL).
    pub(crate) fn query_text(&self) -> &[u8] {
        let end = memchr::memchr(0, &self.definition).unwrap_or(self.definition.len());
        &self.definition[..end]
    }

    /// Whether its text is `DEALLOCATE ALL` or `DISCARD ALL`, which drop every prepared
    /// statement of the session when executed (at its Execute, whatever happens to the rest
    /// of the pipeline). Classified on first use, then cached: Binds of it are rare.
    pub(crate) fn deallocates_all(&self) -> bool {
        match self.deallocates.load(Ordering::Relaxed) {
            1 => false,
            2 => true,
            _ => {
                use pgtier_wire::session_state::{Effects, classify_query};
                let all = Effects::DISCARD_ALL.union(Effects::DEALLOCATE_ALL);
                let yes = classify_query(self.query_text()).intersects(all);
                self.deallocates
                    .store(if yes { 2 } else { 1 }, Ordering::Relaxed);
                yes
            }
        }
    }

    /// Whether its text may run on a replica, with `functions`' answers. A verdict that
    /// asked `functions` nothing depends on the text alone: it is classified once, on first
    /// use by a reader entry's session, and every client of the definition shares it. One
    /// that asked (a function beyond the allow-list, an entry's write list) is classified
    /// at each use, since the answers change.
    pub fn access(
        &self,
        functions: &crate::read_functions::EntryFunctions<'_>,
    ) -> pgtier_wire::read_only::Access {
        use pgtier_wire::read_only::{Access, classify_using};
        let cached = match self.access.load(Ordering::Relaxed) {
            1 => Some(Access::ReadOnly),
            2 => Some(Access::Write),
            _ => None,
        };
        if let Some(access) = cached.filter(|_| !functions.checks_built_ins()) {
            return access;
        }
        functions.forget_asked();
        let access = classify_using(self.query_text(), true, functions);
        if !functions.was_asked() {
            let code = if access == Access::ReadOnly { 1 } else { 2 };
            self.access.store(code, Ordering::Relaxed);
        }
        access
    }

    /// Bytes a client is charged for holding it (`max_client_prepared_bytes`).
    pub(crate) fn charge_bytes(&self) -> usize {
        self.definition.len()
    }

    /// Appends a Parse of this statement under its server-side name.
    pub(crate) fn encode_parse(&self, out: &mut BytesMut) {
        encode_parse_named(out, &self.server_name, &self.definition);
    }

    /// Appends a Close of this statement's server-side name.
    pub(crate) fn encode_close(&self, out: &mut BytesMut) {
        encode_close_statement(out, &self.server_name);
    }
}

/// Appends a Parse of `definition` (a Parse body after its name) under `name`.
pub(crate) fn encode_parse_named(out: &mut BytesMut, name: &[u8], definition: &[u8]) {
    let len = 4 + name.len() + 1 + definition.len();
    out.reserve(1 + len);
    out.put_u8(b'P');
    out.put_u32(len as u32);
    out.put_slice(name);
    out.put_u8(0);
    out.put_slice(definition);
}

/// Appends a Close of the statement `name`.
pub(crate) fn encode_close_statement(out: &mut BytesMut, name: &[u8]) {
    let len = 4 + 1 + name.len() + 1;
    out.reserve(1 + len);
    out.put_u8(b'C');
    out.put_u32(len as u32);
    out.put_u8(b'S');
    out.put_slice(name);
    out.put_u8(0);
}

/// Appends a Sync.
pub(crate) fn encode_sync(out: &mut BytesMut) {
    out.put_slice(b"S\0\0\0\x04");
}

/// The server-side name of statement `id`.
fn server_name_for(id: u64) -> Box<[u8]> {
    let mut name = Vec::with_capacity(SERVER_NAME_PREFIX.len() + 20);
    name.extend_from_slice(SERVER_NAME_PREFIX);
    name.extend_from_slice(id.to_string().as_bytes());
    name.into_boxed_slice()
}

/// This worker's interned definitions. An entry lives while a client or a server holds its
/// statement; dead entries are swept when the map has doubled since the last sweep, so the
/// cost is amortised and the map stays within twice the live count.
#[derive(Debug)]
pub struct Registry {
    live: HashMap<Bytes, Weak<Statement>, RandomState>,
    /// Ids are never reused: a server may still hold an old one.
    next_id: u64,
    sweep_at: usize,
    /// Statements that lost their last client, counted (shared with each statement).
    orphans: Arc<AtomicU64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            live: HashMap::default(),
            next_id: 1,
            sweep_at: MIN_SWEEP_AT,
            orphans: Arc::default(),
        }
    }
}

/// Entries below which the registry never sweeps.
const MIN_SWEEP_AT: usize = 64;

impl Registry {
    /// A number never handed out before on this worker (a client's unnamed statement is
    /// known by one: `crate::prepared::unnamed`).
    pub(crate) fn next_token(&mut self) -> u64 {
        let token = self.next_id;
        self.next_id += 1;
        token
    }

    /// The statement for `definition`, shared if anyone on this worker holds it already.
    pub(crate) fn intern(&mut self, definition: &[u8]) -> Arc<Statement> {
        if let Some(statement) = self.live.get(definition).and_then(Weak::upgrade) {
            return statement;
        }
        if self.live.len() >= self.sweep_at {
            self.live
                .retain(|_, statement| statement.strong_count() > 0);
            self.sweep_at = (2 * self.live.len()).max(MIN_SWEEP_AT);
        }
        let id = self.next_id;
        self.next_id += 1;
        let definition = Bytes::copy_from_slice(definition);
        let statement = Arc::new(Statement {
            id,
            server_name: server_name_for(id),
            definition: definition.clone(),
            clients: AtomicU32::new(0),
            orphans: self.orphans.clone(),
            access: AtomicU8::new(0),
            deallocates: AtomicU8::new(0),
        });
        self.live.insert(definition, Arc::downgrade(&statement));
        statement
    }

    /// Definitions someone holds.
    /// How many times a statement lost its last client so far: a server whose last look at
    /// its cache was at a smaller count may hold statements nobody can use any more.
    pub(crate) fn orphans(&self) -> u64 {
        self.orphans.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    pub(crate) fn live_count(&self) -> usize {
        self.live
            .values()
            .filter(|statement| statement.strong_count() > 0)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(sql: &str) -> Vec<u8> {
        let mut out = sql.as_bytes().to_vec();
        out.extend_from_slice(&[0, 0, 0]);
        out
    }

    #[test]
    fn the_same_text_is_one_statement_while_held_and_a_new_one_after() {
        let mut registry = Registry::default();
        let a = registry.intern(&definition("SELECT 1"));
        let b = registry.intern(&definition("SELECT 1"));
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(a.server_name(), b"pgtier_1");
        let c = registry.intern(&definition("SELECT 2"));
        assert_ne!(a.id(), c.id());
        let old = a.id();
        drop((a, b));
        let again = registry.intern(&definition("SELECT 1"));
        assert_ne!(again.id(), old, "ids are never reused");
    }

    #[test]
    fn dead_entries_are_swept_as_the_map_grows() {
        let mut registry = Registry::default();
        for i in 0..10_000 {
            let _ = registry.intern(&definition(&format!("SELECT {i}")));
        }
        assert!(
            registry.live.len() <= 2 * MIN_SWEEP_AT,
            "{}",
            registry.live.len()
        );
        assert_eq!(registry.live_count(), 0);
    }

    #[test]
    fn encoded_messages_are_what_postgres_expects() {
        let mut registry = Registry::default();
        let statement = registry.intern(&definition("SELECT 1"));
        let mut out = BytesMut::new();
        statement.encode_parse(&mut out);
        assert_eq!(&out[..], b"P\0\0\0\x18pgtier_1\0SELECT 1\0\0\0");
        out.clear();
        statement.encode_close(&mut out);
        assert_eq!(&out[..], b"C\0\0\0\x0ESpgtier_1\0");
        out.clear();
        encode_sync(&mut out);
        assert_eq!(&out[..], b"S\0\0\0\x04");
    }
}
