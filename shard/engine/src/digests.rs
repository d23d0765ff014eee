//! One shard's query digests: per (database, normalized text), the calls of this shard not
//! yet folded into the process's `DigestStore` (`pgtier_core::metrics`).
//!
//! The query path does a fingerprint (`pgtier_wire::normalize::fingerprint`: one pass over
//! the text, nothing written) and one map update per call; a text is normalized and stored
//! only when its digest is new to this map. The map is bounded (`digest_map_capacity`):
//! when a new digest does not fit, everything is folded into the store and the map starts
//! over. It is folded without being cleared at housekeeping and before the console
//! answers, so each shard's texts are normalized about once per process, not per fold.
//!
//! Parse texts repeat word for word (a driver parses the same statement with `$n`
//! parameters again and again), so their query ids are also remembered by a keyed hash of
//! the raw text: a repeated Parse costs one hash of its bytes instead of a fingerprint.
//! Query texts usually carry their constants and rarely repeat word for word, but their
//! shapes do: a Query's query id is remembered by its `ShapeKey` (taken once per message
//! by the text cache, `crate::client::texts`), and only a text of a new shape, or one
//! without a shape, is fingerprinted.

use std::collections::HashMap;
use std::sync::Arc;

use pgtier_core::config::Settings;
use pgtier_core::metrics::{DatabaseSlot, DigestCounts, DigestFold, DigestStore};
use pgtier_wire::normalize::{fingerprint, normalize};

use crate::client::texts::ShapeKey;

/// The digest a call is counted under: its database on this shard and its query id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DigestKey {
    pub database: DatabaseSlot,
    pub query_id: u64,
}

#[derive(Debug)]
struct LocalEntry {
    database: Arc<str>,
    /// `None` when the call arrived after the map started over (its text is in the store,
    /// or lost: the store counts those calls).
    text: Option<Arc<str>>,
    /// Calls since the last fold.
    pending: DigestCounts,
}

/// Parse texts whose query ids one shard remembers before it starts over.
pub(crate) const PARSE_CACHE_ENTRIES: usize = 4096;

/// Query shapes whose query ids one shard remembers before it starts over.
pub(crate) const SHAPE_CACHE_ENTRIES: usize = 4096;

/// The settings the map works within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DigestLimits {
    /// `query_digests`: sessions log their calls.
    pub enabled: bool,
    pub max_text_bytes: usize,
    pub map_capacity: usize,
}

impl DigestLimits {
    pub fn from_settings(settings: &Settings) -> DigestLimits {
        DigestLimits {
            enabled: settings.query_digests,
            max_text_bytes: settings.digest_max_text_bytes as usize,
            map_capacity: (settings.digest_map_capacity as usize).max(1),
        }
    }
}

/// One shard's digests.
#[derive(Debug)]
pub struct ShardDigests {
    store: Arc<DigestStore>,
    limits: DigestLimits,
    entries: HashMap<DigestKey, LocalEntry, ahash::RandomState>,
    /// Calls recorded since the last fold (a fold with none takes no lock).
    pending_calls: u64,
    /// Where a new text is normalized (kept: its capacity is reused).
    scratch: Vec<u8>,
    /// Query ids of Parse texts by (keyed hash, length) of the raw text.
    parsed: HashMap<(u64, usize), u64, ahash::RandomState>,
    /// Keys for `parsed` (random per process, so no text can aim at another's id).
    parse_hasher: ahash::RandomState,
    /// Query ids of Query texts by shape.
    shapes: HashMap<ShapeKey, u64, ahash::RandomState>,
}

impl ShardDigests {
    pub fn new(store: Arc<DigestStore>, limits: DigestLimits) -> ShardDigests {
        ShardDigests {
            store,
            limits,
            entries: HashMap::default(),
            pending_calls: 0,
            scratch: Vec::new(),
            parsed: HashMap::default(),
            parse_hasher: ahash::RandomState::new(),
            shapes: HashMap::default(),
        }
    }

    /// A reload: new limits (a smaller map shrinks when it next fills).
    pub fn configure(&mut self, limits: DigestLimits) {
        self.limits = limits;
    }

    /// Whether new sessions log their calls.
    pub fn enabled(&self) -> bool {
        self.limits.enabled
    }

    /// The digest of a Query (`parse` false) or Parse text of `database` (its name given for
    /// a new entry); the text is normalized and kept if the digest is new here.
    pub fn note(
        &mut self,
        database: DatabaseSlot,
        name: &str,
        text: &[u8],
        parse: bool,
        shape: Option<ShapeKey>,
    ) -> DigestKey {
        let max = self.limits.max_text_bytes;
        let query_id = match shape.filter(|_| !parse && text.len() <= max) {
            Some(shape) => self.shaped_query_id(text, shape),
            None if parse && text.len() <= max => self.parse_query_id(text),
            None => fingerprint(text, max).query_id,
        };
        let key = DigestKey { database, query_id };
        if !self.entries.contains_key(&key) {
            self.make_room();
            self.scratch.clear();
            normalize(text, self.limits.max_text_bytes, &mut self.scratch);
            let text = Arc::from(String::from_utf8_lossy(&self.scratch).as_ref());
            self.entries.insert(
                key,
                LocalEntry {
                    database: Arc::from(name),
                    text: Some(text),
                    pending: DigestCounts::default(),
                },
            );
        }
        key
    }

    /// The query id of a Parse text, from the cache when the same text was seen.
    fn parse_query_id(&mut self, text: &[u8]) -> u64 {
        let raw = (self.parse_hasher.hash_one(text), text.len());
        let max = self.limits.max_text_bytes;
        remembered(&mut self.parsed, PARSE_CACHE_ENTRIES, raw, text, max)
    }

    /// The query id of a Query text of `shape` (within the text limit, so never cut), from
    /// the cache when a text of that shape was seen.
    fn shaped_query_id(&mut self, text: &[u8], shape: ShapeKey) -> u64 {
        let max = self.limits.max_text_bytes;
        remembered(&mut self.shapes, SHAPE_CACHE_ENTRIES, shape, text, max)
    }

    /// One completed call of `key`.
    pub fn record(&mut self, key: DigestKey, name: &str, time_us: u64, rows: u64, failed: bool) {
        self.pending_calls += 1;
        if let Some(entry) = self.entries.get_mut(&key) {
            entry.pending.record(time_us, rows, failed);
            return;
        }
        self.make_room();
        let mut pending = DigestCounts::default();
        pending.record(time_us, rows, failed);
        self.entries.insert(
            key,
            LocalEntry {
                database: Arc::from(name),
                text: None,
                pending,
            },
        );
    }

    /// A new digest is about to go in: a full map is folded and emptied first.
    fn make_room(&mut self) {
        if self.entries.len() >= self.limits.map_capacity {
            self.fold();
            self.entries.clear();
        }
    }

    /// Adds every pending call to the store (one lock) and starts counting from zero; the
    /// texts stay.
    pub fn fold(&mut self) {
        if self.pending_calls == 0 {
            return;
        }
        self.store.merge(
            self.entries
                .iter()
                .filter(|(_, entry)| entry.pending.calls > 0)
                .map(|(key, entry)| DigestFold {
                    database: &entry.database,
                    query_id: key.query_id,
                    text: entry.text.as_ref(),
                    counts: &entry.pending,
                }),
        );
        for entry in self.entries.values_mut() {
            entry.pending = DigestCounts::default();
        }
        self.pending_calls = 0;
    }

    /// Digests held on this shard now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The query id `ids` remembers for `key`, or `text`'s fingerprint, remembered (the map
/// starts over once it holds `capacity`).
fn remembered<K: std::hash::Hash + Eq>(
    ids: &mut HashMap<K, u64, ahash::RandomState>,
    capacity: usize,
    key: K,
    text: &[u8],
    max_bytes: usize,
) -> u64 {
    if let Some(query_id) = ids.get(&key) {
        return *query_id;
    }
    if ids.len() >= capacity {
        ids.clear();
    }
    let query_id = fingerprint(text, max_bytes).query_id;
    ids.insert(key, query_id);
    query_id
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_core::metrics::DatabaseRegistry;

    fn shard(capacity: usize) -> (ShardDigests, Arc<DigestStore>, DatabaseSlot) {
        let store = Arc::new(DigestStore::new(100));
        let limits = DigestLimits {
            enabled: true,
            max_text_bytes: 4096,
            map_capacity: capacity,
        };
        let registry = DatabaseRegistry::default();
        let slot = pgtier_core::metrics::DatabaseTally::default().slot("app", &registry);
        (ShardDigests::new(store.clone(), limits), store, slot)
    }

    #[test]
    fn calls_of_one_text_with_other_constants_are_one_digest() {
        let (mut digests, store, app) = shard(10);
        for aid in 0..5 {
            let text = format!("SELECT abalance FROM pgbench_accounts WHERE aid = {aid};");
            let key = digests.note(app, "app", text.as_bytes(), false, None);
            digests.record(key, "app", 10, 1, aid == 4);
        }
        assert_eq!(digests.len(), 1);
        assert!(store.is_empty(), "nothing folded yet");
        digests.fold();
        let top = store.top_by_time(10);
        assert_eq!(top.len(), 1);
        assert_eq!(
            &*top[0].text,
            "SELECT abalance FROM pgbench_accounts WHERE aid = $1"
        );
        assert_eq!(&*top[0].database, "app");
        let counts = top[0].counts;
        assert_eq!((counts.calls, counts.rows, counts.errors), (5, 5, 1));
        assert_eq!(counts.total_time_us, 50);
        digests.fold();
        assert_eq!(store.top_by_time(1)[0].counts.calls, 5, "folded once");
        assert_eq!(digests.len(), 1, "the text stays on the shard");
    }

    #[test]
    fn query_texts_of_one_shape_are_fingerprinted_once() {
        let (mut digests, _, app) = shard(10);
        let texts = crate::client::texts::TextCache::default();
        let mut note = |text: &str| {
            let body = [text.as_bytes(), b"\0"].concat();
            let shape = texts.shape_key(&body);
            (
                digests.note(app, "app", text.as_bytes(), false, shape),
                shape,
            )
        };
        let (first, shape) = note("SELECT v FROM t WHERE id = 1 AND k = 'a'");
        for id in 2..50 {
            let text = format!("SELECT v FROM t WHERE id = {id} AND k = 'k{id}'");
            assert_eq!(note(&text), (first, shape));
        }
        let fingerprinted = fingerprint(b"SELECT v FROM t WHERE id = 7 AND k = 'x'", 4096);
        assert_eq!(first.query_id, fingerprinted.query_id);
        // A text without a shape is fingerprinted.
        let (decimal, none) = note("SELECT v FROM t WHERE id = 1.5");
        assert_eq!(none, None);
        assert_eq!(note("SELECT v FROM t WHERE id = 2.25").0, decimal);
        // A new shape gets its own id.
        let (other, _) = note("SELECT w FROM t WHERE id = 1");
        assert_ne!(other, first);
        assert_eq!(
            digests.shapes.len(),
            2,
            "two shapes fingerprinted, once each"
        );
    }

    #[test]
    fn a_parse_text_seen_again_has_the_same_digest_as_its_query() {
        let (mut digests, _, app) = shard(10);
        let text = b"UPDATE t SET v = $1 WHERE id = $2";
        let parsed = digests.note(app, "app", text, true, None);
        assert_eq!(
            digests.note(app, "app", text, true, None),
            parsed,
            "from the cache"
        );
        assert_eq!(digests.note(app, "app", text, false, None), parsed);
        let simple = digests.note(app, "app", b"UPDATE t SET v = 1 WHERE id = 2", false, None);
        assert_eq!(simple, parsed);
        assert_eq!(digests.len(), 1);
    }

    #[test]
    fn a_full_map_folds_and_starts_over() {
        let (mut digests, store, app) = shard(2);
        let first = digests.note(app, "app", b"SELECT 1", false, None);
        digests.record(first, "app", 1, 1, false);
        let second = digests.note(app, "app", b"SELECT x FROM t", true, None);
        digests.record(second, "app", 1, 1, false);
        assert!(store.is_empty());
        let third = digests.note(app, "app", b"SELECT y FROM t", true, None);
        assert_eq!(store.len(), 2, "the full map went to the store");
        assert_eq!(digests.len(), 1, "and started over");
        // A call whose text was noted before the map started over still counts.
        digests.record(first, "app", 1, 1, false);
        digests.record(third, "app", 1, 1, false);
        digests.fold();
        let calls: Vec<u64> = store
            .top_by_time(10)
            .iter()
            .map(|digest| digest.counts.calls)
            .collect();
        assert_eq!(calls.iter().sum::<u64>(), 4, "{calls:?}");
        assert_eq!(store.len(), 3);
        assert_eq!(store.unattributed_calls(), 0);
    }
}
