//! The named statements one transaction-mode client has prepared, under the names it gave
//! them. They live on the client, not on any server: whichever server it gets is made to
//! have them (`crate::prepared::rewrite`).

use std::collections::HashMap;
use std::sync::Arc;

use ahash::RandomState;

use super::statement::Statement;
use super::unnamed::ClientUnnamed;

/// A client's statements by its own names.
#[derive(Debug, Default)]
pub struct ClientStatements {
    by_name: HashMap<Box<[u8]>, Arc<Statement>, RandomState>,
    /// Definition bytes held (`max_client_prepared_bytes` bounds it).
    bytes: usize,
    /// Its unnamed statement, if it has one.
    unnamed: Option<ClientUnnamed>,
}

impl ClientStatements {
    pub fn unnamed(&self) -> Option<&ClientUnnamed> {
        self.unnamed.as_ref()
    }

    /// Its unnamed statement is now this one (`None`: a simple Query or a Close dropped it).
    pub(crate) fn set_unnamed(&mut self, unnamed: Option<ClientUnnamed>) {
        self.unnamed = unnamed;
    }

    pub fn get(&self, name: &[u8]) -> Option<&Arc<Statement>> {
        self.by_name.get(name)
    }

    /// Records `name`; the caller has checked that it is new.
    pub fn insert(&mut self, name: &[u8], statement: Arc<Statement>) {
        self.bytes += name.len() + statement.charge_bytes();
        statement.client_ref();
        if let Some(old) = self.by_name.insert(name.into(), statement) {
            self.bytes -= name.len() + old.charge_bytes();
            old.client_unref();
        }
    }

    pub fn remove(&mut self, name: &[u8]) -> Option<Arc<Statement>> {
        let old = self.by_name.remove(name)?;
        self.bytes -= name.len() + old.charge_bytes();
        old.client_unref();
        Some(old)
    }

    /// Forgets `name` if it still means `statement` (a later Parse may have reused it).
    pub fn forget(&mut self, name: &[u8], statement: &Arc<Statement>) {
        if self
            .by_name
            .get(name)
            .is_some_and(|held| Arc::ptr_eq(held, statement))
        {
            self.remove(name);
        }
    }

    /// Records `name` again if nothing took it meanwhile (a Close the server skipped).
    pub fn restore(&mut self, name: &[u8], statement: Arc<Statement>) {
        if !self.by_name.contains_key(name) {
            self.insert(name, statement);
        }
    }

    pub fn clear(&mut self) {
        for statement in self.by_name.values() {
            statement.client_unref();
        }
        self.by_name.clear();
        self.bytes = 0;
    }

    /// Every name, taken out (a `DISCARD ALL` sent; `restore` puts them back if it fails).
    pub(crate) fn take_all(&mut self) -> Vec<(Box<[u8]>, Arc<Statement>)> {
        self.bytes = 0;
        let taken: Vec<_> = self.by_name.drain().collect();
        for (_, statement) in &taken {
            statement.client_unref();
        }
        taken
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// A client name of statement `id` (for an error that names the server-side name).
    #[cfg(test)]
    pub(crate) fn name_of(&self, id: u64) -> Option<&[u8]> {
        self.by_name
            .iter()
            .find(|(_, statement)| statement.id() == id)
            .map(|(name, _)| &name[..])
    }
}

impl Drop for ClientStatements {
    /// A client that leaves lets its statements go.
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::super::statement::Registry;
    use super::*;

    #[test]
    fn names_are_counted_forgotten_only_while_they_mean_the_same_and_restored_only_if_free() {
        let mut registry = Registry::default();
        let one = registry.intern(b"SELECT 1\0\0\0");
        let two = registry.intern(b"SELECT 2\0\0\0");
        let mut statements = ClientStatements::default();
        statements.insert(b"s1", one.clone());
        assert_eq!(statements.bytes(), 2 + 11);
        assert_eq!(statements.name_of(one.id()), Some(&b"s1"[..]));
        statements.forget(b"s1", &two);
        assert_eq!(statements.len(), 1, "s1 does not mean `two`");
        statements.forget(b"s1", &one);
        assert!(statements.is_empty() && statements.bytes() == 0);
        statements.insert(b"s1", two.clone());
        statements.restore(b"s1", one);
        assert!(Arc::ptr_eq(statements.get(b"s1").expect("s1"), &two));
        statements.clear();
        assert_eq!((statements.len(), statements.bytes()), (0, 0));
    }
}
