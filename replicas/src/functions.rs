//! What a reader entry knows of its primary's functions: for each name the classifier asked
//! about, whether every function of that name is STABLE or IMMUTABLE (`pg_proc.provolatile`
//! `s` or `i`). The LSN poller's thread looks names up on the primary
//! ([`crate::function_lookup`]); shards read the published table through an
//! `ArcSwap` and never wait.
//!
//! A shard that meets a name the table does not hold sends the transaction to the primary
//! and queues the name (a bounded queue: when it is full the name is asked for again by a
//! later transaction). A committed DDL that may change functions, and a reload, forget the
//! table: the epoch moves, and an answer to a look-up started before it is dropped rather
//! than published, so no answer older than the change survives it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ahash::AHashMap;
use arc_swap::ArcSwap;
use crossbeam_queue::ArrayQueue;
use pgtier_wire::read_only::CalleeSchema;

/// Names queued for a look-up at most; more wait for a later transaction to ask again.
const MAX_QUEUED_NAMES: usize = 256;

/// Names a table holds at most; past it the table starts over (a client calling endless
/// distinct names must not grow it without bound).
pub(crate) const MAX_KNOWN_NAMES: usize = 10_000;

/// One published state: the answers known since the last forget.
#[derive(Debug, Default)]
pub struct FunctionTable {
    epoch: u64,
    unqualified: AHashMap<Box<[u8]>, bool>,
    pg_catalog: AHashMap<Box<[u8]>, bool>,
}

impl FunctionTable {
    fn names(&self, schema: CalleeSchema) -> &AHashMap<Box<[u8]>, bool> {
        match schema {
            CalleeSchema::Unqualified => &self.unqualified,
            CalleeSchema::PgCatalog => &self.pg_catalog,
        }
    }

    /// `Some(true)`: every function of that name is stable or immutable.
    pub fn read_only(&self, schema: CalleeSchema, name: &[u8]) -> Option<bool> {
        self.names(schema).get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.unqualified.len() + self.pg_catalog.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One name to look up.
pub(crate) type Wanted = (CalleeSchema, Box<[u8]>);

/// The cache of one reader entry, shared by its shards and its poller.
#[derive(Debug)]
pub struct FunctionCatalog {
    table: ArcSwap<FunctionTable>,
    wanted: ArrayQueue<Wanted>,
    /// Moves at every forget; a look-up publishes only into the epoch it started in.
    epoch: AtomicU64,
}

impl Default for FunctionCatalog {
    fn default() -> FunctionCatalog {
        FunctionCatalog {
            table: ArcSwap::from_pointee(FunctionTable::default()),
            wanted: ArrayQueue::new(MAX_QUEUED_NAMES),
            epoch: AtomicU64::new(0),
        }
    }
}

impl FunctionCatalog {
    /// What is known of `name`; when nothing is, it is queued for a look-up (shards).
    pub fn read_only(&self, schema: CalleeSchema, name: &[u8]) -> Option<bool> {
        let known = self.table.load().read_only(schema, name);
        if known.is_none() {
            // Full: a later transaction asks again.
            let _ = self.wanted.push((schema, name.into()));
        }
        known
    }

    /// Forgets every answer (a DDL committed, a reload).
    pub fn forget(&self) {
        let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
        self.table.store(Arc::new(FunctionTable {
            epoch,
            ..FunctionTable::default()
        }));
    }

    /// The queued names not known yet, each once, and the epoch to publish their answers
    /// into (the poller, before it looks them up).
    pub(crate) fn take_wanted(&self) -> (u64, Vec<Wanted>) {
        let epoch = self.epoch.load(Ordering::Acquire);
        let table = self.table.load();
        let mut names: Vec<Wanted> = Vec::new();
        while let Some((schema, name)) = self.wanted.pop() {
            if table.read_only(schema, &name).is_none()
                && !names.iter().any(|(s, n)| *s == schema && *n == name)
            {
                names.push((schema, name));
            }
        }
        (epoch, names)
    }

    /// Adds answers looked up in `epoch`; dropped if a forget happened since.
    pub fn publish(&self, epoch: u64, answers: &[(Wanted, bool)]) {
        if answers.is_empty() {
            return;
        }
        self.table.rcu(|current| {
            if current.epoch != epoch || self.epoch.load(Ordering::Acquire) != epoch {
                return Arc::clone(current);
            }
            let mut next = FunctionTable {
                epoch,
                unqualified: current.unqualified.clone(),
                pg_catalog: current.pg_catalog.clone(),
            };
            if next.len() + answers.len() > MAX_KNOWN_NAMES {
                next.unqualified.clear();
                next.pg_catalog.clear();
            }
            for ((schema, name), read_only) in answers {
                let names = match schema {
                    CalleeSchema::Unqualified => &mut next.unqualified,
                    CalleeSchema::PgCatalog => &mut next.pg_catalog,
                };
                names.insert(name.clone(), *read_only);
            }
            Arc::new(next)
        });
    }

    /// The published table (`SHOW`s, tests).
    pub fn table(&self) -> Arc<FunctionTable> {
        self.table.load_full()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: CalleeSchema = CalleeSchema::Unqualified;

    #[test]
    fn an_unknown_name_is_queued_once_and_its_answer_published() {
        let catalog = FunctionCatalog::default();
        assert_eq!(catalog.read_only(U, b"f"), None);
        assert_eq!(catalog.read_only(U, b"f"), None);
        let (epoch, wanted) = catalog.take_wanted();
        assert_eq!(wanted, vec![(U, b"f"[..].into())]);
        catalog.publish(epoch, &[((U, b"f"[..].into()), true)]);
        assert_eq!(catalog.read_only(U, b"f"), Some(true));
        assert_eq!(catalog.read_only(CalleeSchema::PgCatalog, b"f"), None);
        assert!(
            catalog.take_wanted().1.len() == 1,
            "pg_catalog.f still wanted"
        );
    }

    #[test]
    fn a_forget_drops_answers_and_answers_from_before_it() {
        let catalog = FunctionCatalog::default();
        catalog.read_only(U, b"f");
        let (epoch, _) = catalog.take_wanted();
        catalog.publish(epoch, &[((U, b"f"[..].into()), true)]);
        catalog.read_only(U, b"g");
        let (epoch, wanted) = catalog.take_wanted();
        catalog.forget();
        catalog.publish(epoch, &[(wanted[0].clone(), true)]);
        assert!(
            catalog.table().is_empty(),
            "a stale look-up is not published"
        );
        assert_eq!(catalog.read_only(U, b"f"), None);
    }
}
