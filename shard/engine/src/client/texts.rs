//! What recently classified Query and Parse texts do to session state, and whether they
//! may be database DDL, so a text a client sends again (an ORM's statements, every Parse of
//! the extended protocol) is not lexed or searched again. Keyed by a keyed hash of the
//! message body (random keys per process, so nobody can aim a collision at a pinning text)
//! and its length; bounded, and emptied when full.
//!
//! Query texts often do not repeat: a driver that puts the values into the text (psycopg2,
//! `pgbench -S`) sends a new text every time, and then the cache only costs a hash, a miss
//! and an insert on top of the scan. So the cache watches its Query hit rate and, while it is
//! low, scans most Query texts directly, still sending one in [`QUERY_SAMPLE`] through the
//! cache to notice when texts start repeating. Parse texts always go through it: the extended
//! protocol repeats them by design.
//!
//! Such Query texts still repeat their *shape* (`pgtier_wire::normalize::shape`: the text
//! with its constants masked, found in one pass without lexing). Texts of one shape lex to the
//! same tokens but for the constants' values, which no rule of the scanner reads, so a Query
//! whose shape can be taken is looked up by its [`ShapeKey`] instead; the same key serves the
//! query digests (`crate::digests`), so the shape is taken once per message.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

use pgtier_wire::normalize::shape;
use pgtier_wire::session_state::{Effects, StateScanner};

/// Longest body worth remembering: longer texts rarely repeat, and each would cost a
/// hash of its whole length.
const MAX_CACHED_BODY_BYTES: usize = 4096;

/// Texts remembered before the cache starts over.
pub(crate) const TEXT_CACHE_ENTRIES: usize = 4096;

/// Query lookups per decision on whether Query texts go through the cache.
const QUERY_WINDOW: u32 = 256;

/// While Query texts mostly miss, one in this many still goes through the cache.
const QUERY_SAMPLE: u32 = 16;

/// The hash is already a keyed hash: the map needs no second one.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

/// A keyed hash of a whole Query text's shape: texts with the same key have the same
/// [`TextFacts`] and the same query digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ShapeKey(u64);

/// What a Query or Parse body was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextFacts {
    /// Its session-state effects.
    pub effects: Effects,
    /// The body may hold statements that need a database free of other sessions (it holds
    /// the keyword `DATABASE`, as the state scanner lexed it): when false, its text names
    /// none.
    pub may_name_a_database: bool,
}

/// One shard's cache of classified texts.
pub struct TextCache {
    hasher: ahash::RandomState,
    effects: HashMap<u64, (u32, TextFacts), BuildHasherDefault<Identity>>,
    /// Facts of Query texts by shape (and string setting).
    shapes: HashMap<(ShapeKey, bool), TextFacts, ahash::RandomState>,
    queries: QueryRate,
}

/// How often Query texts were found in the cache lately, and what follows from it.
#[derive(Debug, Default)]
struct QueryRate {
    lookups: u32,
    hits: u32,
    /// Fewer than a quarter of the last window's Query lookups hit: scan Query texts
    /// directly, but for the sampled ones.
    bypass: bool,
    /// Query texts seen while bypassing, to pick the sampled ones.
    seen: u32,
}

impl QueryRate {
    /// Whether this Query text goes through the cache.
    fn cached(&mut self) -> bool {
        if !self.bypass {
            return true;
        }
        self.seen = self.seen.wrapping_add(1);
        self.seen.is_multiple_of(QUERY_SAMPLE)
    }

    fn looked_up(&mut self, hit: bool) {
        self.lookups += 1;
        self.hits += u32::from(hit);
        if self.lookups >= QUERY_WINDOW {
            self.bypass = self.hits * 4 < self.lookups;
            self.lookups = 0;
            self.hits = 0;
        }
    }
}

impl std::fmt::Debug for TextCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextCache")
            .field("entries", &self.effects.len())
            .field("shapes", &self.shapes.len())
            .finish()
    }
}

impl Default for TextCache {
    fn default() -> TextCache {
        TextCache {
            hasher: ahash::RandomState::new(),
            effects: HashMap::default(),
            shapes: HashMap::default(),
            queries: QueryRate::default(),
        }
    }
}

impl TextCache {
    /// The shape key of a whole Query body (its text and the NUL that ends it), if the
    /// text has a shape ([`shape`] vouches for it: no backslash, so the string setting
    /// does not change how it lexes either).
    pub fn shape_key(&self, body: &[u8]) -> Option<ShapeKey> {
        let (&0, text) = body.split_last()? else {
            return None;
        };
        let mut hasher = self.hasher.build_hasher();
        shape(text, MAX_CACHED_BODY_BYTES, &mut hasher).then(|| ShapeKey(hasher.finish()))
    }

    /// The facts of a whole Query (`parse` false) or Parse body: its effects lexed as
    /// `scanner` would, from the cache when the same body (or, given its `shape`, a Query of
    /// the same shape) was seen with the same settings.
    pub fn classify(
        &mut self,
        body: &[u8],
        parse: bool,
        conforming_strings: bool,
        shape: Option<ShapeKey>,
    ) -> TextFacts {
        let read = || {
            let scanner = if parse {
                StateScanner::parse()
            } else {
                StateScanner::query()
            };
            let mut scanner = scanner.standard_conforming_strings(conforming_strings);
            scanner.feed(body);
            // The scanner's lexing answers the database-DDL sieve too: the body is not
            // searched a second time.
            let (effects, may_name_a_database) = scanner.finish_noting_database();
            TextFacts {
                effects,
                may_name_a_database,
            }
        };
        if let Some(shape) = shape.filter(|_| !parse) {
            if let Some(facts) = self.shapes.get(&(shape, conforming_strings)) {
                return *facts;
            }
            let facts = read();
            if self.shapes.len() >= TEXT_CACHE_ENTRIES {
                self.shapes.clear();
            }
            self.shapes.insert((shape, conforming_strings), facts);
            return facts;
        }
        if body.len() > MAX_CACHED_BODY_BYTES || (!parse && !self.queries.cached()) {
            return read();
        }
        let key = self.hasher.hash_one((parse, conforming_strings, body));
        let len = body.len() as u32;
        let found = self
            .effects
            .get(&key)
            .filter(|&&(cached_len, _)| cached_len == len)
            .map(|&(_, facts)| facts);
        if !parse {
            self.queries.looked_up(found.is_some());
        }
        if let Some(facts) = found {
            return facts;
        }
        let facts = read();
        if self.effects.len() >= TEXT_CACHE_ENTRIES {
            self.effects.clear();
        }
        self.effects.insert(key, (len, facts));
        facts
    }

    pub fn len(&self) -> usize {
        self.effects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(sql: &str) -> Vec<u8> {
        let mut out = sql.as_bytes().to_vec();
        out.push(0);
        out
    }

    #[test]
    fn a_repeated_text_is_answered_from_the_cache_with_the_same_effects() {
        let mut cache = TextCache::default();
        let set = body("SET work_mem = '1MB'");
        let first = cache.classify(&set, false, true, None);
        assert!(first.effects.pins());
        assert!(!first.may_name_a_database);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.classify(&set, false, true, None), first);
        assert_eq!(cache.len(), 1, "no second entry");
        assert!(
            !cache
                .classify(&body("SELECT 1"), false, true, None)
                .effects
                .pins()
        );
        let drop = body("DROP DATABASE shop");
        assert!(cache.classify(&drop, false, true, None).may_name_a_database);
        assert!(
            cache.classify(&drop, false, true, None).may_name_a_database,
            "from the cache"
        );
    }

    #[test]
    fn the_kind_of_message_and_the_string_setting_are_part_of_the_key() {
        let mut cache = TextCache::default();
        // As a Query the first NUL ends the text; as a Parse it ends the (empty) name.
        let text = b"\0SET x = 1\0\0\0".to_vec();
        assert!(!cache.classify(&text, false, true, None).effects.pins());
        assert!(cache.classify(&text, true, true, None).effects.pins());
        // With standard_conforming_strings off, the backslash escapes the quote.
        let tricky = body("SELECT 'a\\'; SET x = 1; --'");
        let on = cache.classify(&tricky, false, true, None);
        let off = cache.classify(&tricky, false, false, None);
        assert_ne!(on.effects.pins(), off.effects.pins());
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut cache = TextCache::default();
        for n in 0..TEXT_CACHE_ENTRIES + 10 {
            cache.classify(&body(&format!("SELECT {n}")), false, true, None);
        }
        assert!(cache.len() <= TEXT_CACHE_ENTRIES);
    }

    #[test]
    fn query_texts_that_never_repeat_mostly_skip_the_cache_until_texts_repeat_again() {
        let mut cache = TextCache::default();
        let window = QUERY_WINDOW as usize;
        for n in 0..window {
            cache.classify(&body(&format!("SELECT {n}")), false, true, None);
        }
        assert!(cache.queries.bypass, "no hits in a whole window");
        let kept = cache.len();
        for n in window..window * 2 {
            cache.classify(&body(&format!("SELECT {n}")), false, true, None);
        }
        assert_eq!(
            cache.len() - kept,
            window / QUERY_SAMPLE as usize,
            "only the sampled texts went through the cache"
        );
        // Parse texts are cached whatever the Query rate.
        let parse = body("\0SELECT $1");
        cache.classify(&parse, true, true, None);
        assert_eq!(cache.len() - kept, window / QUERY_SAMPLE as usize + 1);
        // A client that repeats its texts brings the cache back once a window of sampled
        // lookups hits: the effects are the same either way.
        let set = body("SET work_mem = '1MB'");
        for _ in 0..window * QUERY_SAMPLE as usize {
            assert!(cache.classify(&set, false, true, None).effects.pins());
        }
        assert!(!cache.queries.bypass);
    }

    #[test]
    fn long_texts_are_scanned_but_not_kept() {
        let mut cache = TextCache::default();
        let long = body(&format!(
            "SELECT '{}'; LISTEN x",
            "x".repeat(MAX_CACHED_BODY_BYTES)
        ));
        assert!(cache.classify(&long, false, true, None).effects.pins());
        assert!(cache.is_empty());
    }
}
