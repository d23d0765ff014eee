//! The SCRAM server exchange fed arbitrary client messages. The input is split at the first
//! 0xff byte into the SASLInitialResponse body and the SASLResponse body; the seed corpus
//! holds a valid exchange so mutations reach the proof check.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgtier_wire::auth::{AuthError, ScramSecret, ScramServer};

fuzz_target!(|data: &[u8]| {
    let (initial, response) = match data.iter().position(|b| *b == 0xff) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    // One iteration keeps the fuzzer fast; the iteration count does not change the parsing.
    let Ok(secret) = ScramSecret::from_password(b"pencil", b"fuzz-salt-16byte", 1) else {
        return;
    };
    let mut server = ScramServer::with_nonce(secret, "fuzzservernonce".into());
    let mut out = BytesMut::new();
    match server.handle_initial_response(initial, &mut out) {
        Ok(()) => assert!(!out.is_empty()),
        Err(error) => {
            let _ = error.sqlstate();
            assert!(server.handle_response(response, &mut out).is_err());
            return;
        }
    }
    let mut fin = BytesMut::new();
    match server.handle_response(response, &mut fin) {
        Ok(_) => assert!(server.is_verified() && !fin.is_empty()),
        Err(error) => {
            assert!(fin.is_empty());
            assert!(!server.is_verified());
            let _: AuthError = error;
        }
    }
});
