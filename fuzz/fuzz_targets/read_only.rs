//! The read-only classifier fed arbitrary texts. The first byte's top bit turns
//! standard_conforming_strings off; the rest is the text.
//!
//! Oracles besides "no panic": a NUL and anything after it change nothing (PostgreSQL reads a
//! text up to its first NUL); a read-only text left nothing open, so a write appended as a
//! statement of its own makes it a write.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pgtier_wire::read_only::{Access, classify_with};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, text)) = data.split_first() else {
        return;
    };
    let scs_on = selector & 0x80 == 0;
    let access = classify_with(text, scs_on);
    let sql = text.split(|&b| b == 0).next().unwrap_or(b"");
    assert_eq!(classify_with(sql, scs_on), access, "cut at the first NUL");
    let mut with_nul = sql.to_vec();
    with_nul.extend_from_slice(b"\0; INSERT INTO t VALUES (1)");
    assert_eq!(classify_with(&with_nul, scs_on), access, "a NUL and more");
    if access == Access::ReadOnly {
        for write in [
            &b"\n;INSERT INTO t VALUES (1)"[..],
            b"\n;SELECT nextval('s')",
        ] {
            let mut joined = sql.to_vec();
            joined.extend_from_slice(write);
            assert_eq!(
                classify_with(&joined, scs_on),
                Access::Write,
                "a write appended"
            );
        }
    }
});
