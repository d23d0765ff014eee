//! What recently classified Query and Parse texts do to session state, and whether they
//! may be database DDL, so a text a client sends again (an ORM's statements, every Parse of
//! the extended protocol) is not lexed or searched again. Keyed by a keyed hash of the
//! message body (random keys per process, so nobody can aim a collision at a pinning text)
//! and its length; bounded, and emptied when full.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use pgtier_wire::database_ddl;
use pgtier_wire::session_state::{Effects, StateScanner};

/// Longest body worth remembering: longer texts rarely repeat, and each would cost a
/// hash of its whole length.
const MAX_CACHED_BODY_BYTES: usize = 4096;

/// Texts remembered before the cache starts over.
pub(crate) const TEXT_CACHE_ENTRIES: usize = 4096;

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

/// What a Query or Parse body was found to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextFacts {
    /// Its session-state effects.
    pub effects: Effects,
    /// The body may hold statements that need a database free of other sessions
    /// (`pgtier_wire::database_ddl::may_name_a_database` of the whole body): when false,
    /// its text names none.
    pub may_name_a_database: bool,
}

/// One shard's cache of classified texts.
pub struct TextCache {
    hasher: ahash::RandomState,
    effects: HashMap<u64, (u32, TextFacts), BuildHasherDefault<Identity>>,
}

impl std::fmt::Debug for TextCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TextCache")
            .field("entries", &self.effects.len())
            .finish()
    }
}

impl Default for TextCache {
    fn default() -> TextCache {
        TextCache {
            hasher: ahash::RandomState::new(),
            effects: HashMap::default(),
        }
    }
}

impl TextCache {
    /// The facts of a whole Query (`parse` false) or Parse body: its effects lexed as
    /// `scanner` would, from the cache when the same body was seen with the same settings.
    pub fn classify(&mut self, body: &[u8], parse: bool, conforming_strings: bool) -> TextFacts {
        let read = || {
            let scanner = if parse {
                StateScanner::parse()
            } else {
                StateScanner::query()
            };
            let mut scanner = scanner.standard_conforming_strings(conforming_strings);
            scanner.feed(body);
            TextFacts {
                effects: scanner.finish(),
                may_name_a_database: database_ddl::may_name_a_database(body),
            }
        };
        if body.len() > MAX_CACHED_BODY_BYTES {
            return read();
        }
        let key = self.hasher.hash_one((parse, conforming_strings, body));
        let len = body.len() as u32;
        if let Some(&(cached_len, facts)) = self.effects.get(&key)
            && cached_len == len
        {
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
        let first = cache.classify(&set, false, true);
        assert!(first.effects.pins());
        assert!(!first.may_name_a_database);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.classify(&set, false, true), first);
        assert_eq!(cache.len(), 1, "no second entry");
        assert!(
            !cache
                .classify(&body("SELECT 1"), false, true)
                .effects
                .pins()
        );
        let drop = body("DROP DATABASE shop");
        assert!(cache.classify(&drop, false, true).may_name_a_database);
        assert!(
            cache.classify(&drop, false, true).may_name_a_database,
            "from the cache"
        );
    }

    #[test]
    fn the_kind_of_message_and_the_string_setting_are_part_of_the_key() {
        let mut cache = TextCache::default();
        // As a Query the first NUL ends the text; as a Parse it ends the (empty) name.
        let text = b"\0SET x = 1\0\0\0".to_vec();
        assert!(!cache.classify(&text, false, true).effects.pins());
        assert!(cache.classify(&text, true, true).effects.pins());
        // With standard_conforming_strings off, the backslash escapes the quote.
        let tricky = body("SELECT 'a\\'; SET x = 1; --'");
        let on = cache.classify(&tricky, false, true);
        let off = cache.classify(&tricky, false, false);
        assert_ne!(on.effects.pins(), off.effects.pins());
    }

    #[test]
    fn the_cache_is_bounded() {
        let mut cache = TextCache::default();
        for n in 0..TEXT_CACHE_ENTRIES + 10 {
            cache.classify(&body(&format!("SELECT {n}")), false, true);
        }
        assert!(cache.len() <= TEXT_CACHE_ENTRIES);
    }

    #[test]
    fn long_texts_are_scanned_but_not_kept() {
        let mut cache = TextCache::default();
        let long = body(&format!(
            "SELECT '{}'; LISTEN x",
            "x".repeat(MAX_CACHED_BODY_BYTES)
        ));
        assert!(cache.classify(&long, false, true).effects.pins());
        assert!(cache.is_empty());
    }
}
