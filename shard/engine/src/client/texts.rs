//! What recently classified Query and Parse texts do to session state, so a text a client
//! sends again (an ORM's statements, every Parse of the extended protocol) is not lexed
//! again. Keyed by a keyed hash of the message body (random keys per process, so nobody can
//! aim a collision at a pinning text) and its length; bounded, and emptied when full.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

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

/// One shard's cache of classified texts.
pub struct TextCache {
    hasher: ahash::RandomState,
    effects: HashMap<u64, (u32, Effects), BuildHasherDefault<Identity>>,
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
    /// The effects of a whole Query (`parse` false) or Parse body, lexed as `scanner`
    /// would, from the cache when the same body was seen with the same settings.
    pub fn classify(&mut self, body: &[u8], parse: bool, conforming_strings: bool) -> Effects {
        let scan = || {
            let scanner = if parse {
                StateScanner::parse()
            } else {
                StateScanner::query()
            };
            let mut scanner = scanner.standard_conforming_strings(conforming_strings);
            scanner.feed(body);
            scanner.finish()
        };
        if body.len() > MAX_CACHED_BODY_BYTES {
            return scan();
        }
        let key = self.hasher.hash_one((parse, conforming_strings, body));
        let len = body.len() as u32;
        if let Some(&(cached_len, effects)) = self.effects.get(&key)
            && cached_len == len
        {
            return effects;
        }
        let effects = scan();
        if self.effects.len() >= TEXT_CACHE_ENTRIES {
            self.effects.clear();
        }
        self.effects.insert(key, (len, effects));
        effects
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
        assert!(first.pins());
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.classify(&set, false, true), first);
        assert_eq!(cache.len(), 1, "no second entry");
        assert!(!cache.classify(&body("SELECT 1"), false, true).pins());
    }

    #[test]
    fn the_kind_of_message_and_the_string_setting_are_part_of_the_key() {
        let mut cache = TextCache::default();
        // As a Query the first NUL ends the text; as a Parse it ends the (empty) name.
        let text = b"\0SET x = 1\0\0\0".to_vec();
        assert!(!cache.classify(&text, false, true).pins());
        assert!(cache.classify(&text, true, true).pins());
        // With standard_conforming_strings off, the backslash escapes the quote.
        let tricky = body("SELECT 'a\\'; SET x = 1; --'");
        let on = cache.classify(&tricky, false, true);
        let off = cache.classify(&tricky, false, false);
        assert_ne!(on.pins(), off.pins());
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
        assert!(cache.classify(&long, false, true).pins());
        assert!(cache.is_empty());
    }
}
