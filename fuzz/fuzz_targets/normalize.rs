//! The query-digest normalizer fed arbitrary texts. The first byte picks the text limit (its
//! value times 8 bytes: 0 to 2040, so texts are cut at every kind of place).
//!
//! Oracles besides "no panic": the fingerprint is the query id of the written text;
//! normalizing the result again (without a limit) gives it back byte for byte.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pgtier_wire::normalize::{fingerprint, normalize, query_id_of};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    let max_bytes = usize::from(selector) * 8;
    let mut out = Vec::new();
    let first = normalize(text, max_bytes, &mut out);
    assert_eq!(fingerprint(text, max_bytes), first);
    assert_eq!(query_id_of(&out), first.query_id);
    assert_eq!(first.truncated, text.len() > max_bytes);
    let mut again = Vec::new();
    let second = normalize(&out, usize::MAX, &mut again);
    assert_eq!(again, out, "normalizing twice changes nothing");
    assert_eq!(second.query_id, first.query_id);
    assert!(!second.truncated);
});
