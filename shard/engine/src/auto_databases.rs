//! The database names the `*` entry has served, across every shard: PgBouncer registers
//! such a name as a database of its own the first time a client asks for it and logs that
//! once ("registered new auto-database"); pgtier keeps the names only to say so once.
//! A name is added after its client authenticated, so clients that fail to log in cannot
//! grow the set.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

/// The names served through the `*` entry so far.
#[derive(Debug, Default)]
pub struct AutoDatabases {
    names: Mutex<HashSet<Box<str>>>,
}

impl AutoDatabases {
    /// Notes that `name` is served through `*`; true the first time (on any shard).
    pub fn register(&self, name: &str) -> bool {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        if names.contains(name) {
            return false;
        }
        names.insert(name.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_new_once() {
        let auto = AutoDatabases::default();
        assert!(auto.register("p7"));
        assert!(!auto.register("p7"));
        assert!(auto.register("p8"));
    }
}
