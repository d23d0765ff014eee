//! The session-state scanner fed arbitrary Query and Parse bodies. The first byte picks how
//! the rest (the body) is cut: at one point (the byte modulo the body length + 1) and into
//! chunks of 1..=7 bytes; its top bit turns standard_conforming_strings off.
//!
//! Oracles besides "no panic": for both the Query and the Parse scanner, every way of cutting
//! the body gives exactly the effects of feeding it whole; a Parse body with an empty name
//! gives exactly the effects of the same SQL as a Query.

#![no_main]

use libfuzzer_sys::fuzz_target;
use pgtier_wire::session_state::{Effects, StateScanner};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let scs_on = selector & 0x80 == 0;
    let cut = usize::from(selector) % (body.len() + 1);
    let chunk = usize::from(selector % 7) + 1;
    let fresh = |parse: bool| {
        let scanner = if parse {
            StateScanner::parse()
        } else {
            StateScanner::query()
        };
        scanner.standard_conforming_strings(scs_on)
    };
    for parse in [false, true] {
        let whole = feed(fresh(parse), &[body]);
        let (head, tail) = body.split_at(cut);
        assert_eq!(feed(fresh(parse), &[head, tail]), whole, "cut at {cut}");
        let chunks: Vec<&[u8]> = body.chunks(chunk).collect();
        assert_eq!(feed(fresh(parse), &chunks), whole, "chunks of {chunk}");
        if !parse {
            let unnamed = feed(fresh(true), &[b"\0", body]);
            assert_eq!(unnamed, whole, "unnamed Parse vs Query");
        }
    }
});

fn feed(mut scanner: StateScanner, pieces: &[&[u8]]) -> Effects {
    for piece in pieces {
        scanner.feed(piece);
    }
    scanner.finish()
}
