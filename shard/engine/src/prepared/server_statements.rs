//! Which statements one server holds, as far as pgtier has told it: a bounded cache with
//! least-recently-used eviction (`max_prepared_statements`, PgBouncer's meaning). The state
//! is what the server will have once it has processed everything already sent; where pgtier
//! cannot know (a `DISCARD ALL` a client sent may fail), an entry is `Unknown` and is closed
//! before it is prepared again, which is right whether or not it still exists.

use std::collections::HashMap;
use std::sync::Arc;

use ahash::RandomState;

use super::statement::Statement;
use super::unnamed::ServerUnnamed;

/// What pgtier knows of one statement on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// It exists (or will, once the Parse already sent is processed).
    Prepared,
    /// It may or may not exist: Close it before a Parse.
    Unknown,
}

#[derive(Debug)]
struct Entry {
    statement: Arc<Statement>,
    held: Held,
    /// Tick of its last use: the smallest is evicted first.
    used_at: u64,
}

/// One server's statements, by statement id.
#[derive(Debug, Default)]
pub(crate) struct ServerStatements {
    entries: HashMap<u64, Entry, RandomState>,
    tick: u64,
    /// The registry's orphan count when this cache was last swept.
    swept_at: u64,
    /// Whose unnamed statement the server holds.
    unnamed: ServerUnnamed,
}

impl ServerStatements {
    pub fn unnamed(&self) -> ServerUnnamed {
        self.unnamed
    }

    pub(crate) fn set_unnamed(&mut self, unnamed: ServerUnnamed) {
        self.unnamed = unnamed;
    }

    pub fn held(&self, id: u64) -> Option<Held> {
        self.entries.get(&id).map(|entry| entry.held)
    }

    /// Records that the server has (or will have) `statement`, and counts it as just used.
    pub fn prepared(&mut self, statement: Arc<Statement>) {
        self.tick += 1;
        let used_at = self.tick;
        self.entries.insert(
            statement.id(),
            Entry {
                statement,
                held: Held::Prepared,
                used_at,
            },
        );
    }

    /// Counts `id` as just used.
    pub fn touch(&mut self, id: u64) {
        self.tick += 1;
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.used_at = self.tick;
        }
    }

    pub(crate) fn set_unknown(&mut self, id: u64) {
        if let Some(entry) = self.entries.get_mut(&id) {
            entry.held = Held::Unknown;
        }
    }

    /// Every entry may or may not exist any more (the client sent `DEALLOCATE ALL` or
    /// `DISCARD ALL`, which may or may not succeed).
    pub(crate) fn all_unknown(&mut self) {
        for entry in self.entries.values_mut() {
            entry.held = Held::Unknown;
        }
    }

    /// As [`ServerStatements::all_unknown`], returning the ids of those that were prepared,
    /// for [`ServerStatements::known_again`] if the statement that made them unknown does
    /// not run.
    pub(crate) fn all_unknown_noting(&mut self) -> Vec<u64> {
        let mut were_prepared = Vec::new();
        for (id, entry) in &mut self.entries {
            if entry.held == Held::Prepared {
                were_prepared.push(*id);
            }
            entry.held = Held::Unknown;
        }
        were_prepared
    }

    /// The `DEALLOCATE ALL` / `DISCARD ALL` that made `ids` unknown failed or was skipped:
    /// those still in the cache and still unknown are prepared, as they were.
    pub(crate) fn known_again(&mut self, ids: &[u64]) {
        for id in ids {
            if let Some(entry) = self.entries.get_mut(id)
                && entry.held == Held::Unknown
            {
                entry.held = Held::Prepared;
            }
        }
    }

    pub fn remove(&mut self, id: u64) -> Option<Arc<Statement>> {
        self.entries.remove(&id).map(|entry| entry.statement)
    }

    /// Forgets everything (the server ran `DISCARD ALL` successfully).
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The statements no client holds any more, taken out of the cache, if any statement
    /// lost its last client since the last look (`orphans`: `Registry::orphans`). Closing
    /// them keeps a server's statements to what live clients can use, as a server of its
    /// own would (`pg_prepared_statements`).
    pub(crate) fn take_orphans(&mut self, orphans: u64, keep: u64) -> Vec<Arc<Statement>> {
        if orphans == self.swept_at {
            return Vec::new();
        }
        self.swept_at = orphans;
        let dead: Vec<u64> = self
            .entries
            .iter()
            .filter(|(id, entry)| **id != keep && !entry.statement.has_clients())
            .map(|(id, _)| *id)
            .collect();
        dead.into_iter().filter_map(|id| self.remove(id)).collect()
    }

    /// The least recently used statement other than `keep`, taken out of the cache.
    pub(crate) fn evict_lru(&mut self, keep: u64) -> Option<Arc<Statement>> {
        let victim = self
            .entries
            .iter()
            .filter(|(id, _)| **id != keep)
            .min_by_key(|(_, entry)| entry.used_at)
            .map(|(id, _)| *id)?;
        self.remove(victim)
    }
}

#[cfg(test)]
mod tests {
    use super::super::statement::Registry;
    use super::*;

    #[test]
    fn the_least_recently_used_goes_first_and_unknown_is_remembered() {
        let mut registry = Registry::default();
        let [a, b, c] = ["SELECT 1\0\0\0", "SELECT 2\0\0\0", "SELECT 3\0\0\0"]
            .map(|sql| registry.intern(sql.as_bytes()));
        let mut server = ServerStatements::default();
        server.prepared(a.clone());
        server.prepared(b.clone());
        server.prepared(c.clone());
        server.touch(a.id());
        let victim = server.evict_lru(c.id()).expect("a victim");
        assert_eq!(victim.id(), b.id(), "b is the oldest use");
        assert_eq!(server.evict_lru(a.id()).map(|s| s.id()), Some(c.id()));
        assert_eq!(
            server.evict_lru(a.id()).map(|s| s.id()),
            None,
            "only `keep` is left"
        );
        server.all_unknown();
        assert_eq!(server.held(a.id()), Some(Held::Unknown));
        server.prepared(a.clone());
        assert_eq!(server.held(a.id()), Some(Held::Prepared));
        assert_eq!(server.len(), 1);
        server.clear();
        assert!(server.is_empty());
    }
}
