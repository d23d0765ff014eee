//! The SCRAM server exchange fed arbitrary client messages. The input is split at the first
//! 0xff byte into the SASLInitialResponse body and the SASLResponse body; the seed corpus
//! holds valid exchanges (SCRAM-SHA-256 with 'n' and 'y', SCRAM-SHA-256-PLUS bound to
//! [`BINDING`]) so mutations reach the channel-binding and proof checks.
//!
//! Every input runs twice: against a server without binding data (plain TCP: only
//! `SCRAM-SHA-256` offered) and against one with [`BINDING`] (TLS: `-PLUS` offered), so one
//! corpus drives both sides of every negotiation rule.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgtier_wire::auth::{AuthError, ChannelBinding, ScramSecret, ScramServer};

/// The TLS server's certificate hash; make_seeds.py binds its -PLUS seed to the same bytes.
const BINDING: [u8; 32] = [0x42; 32];

fuzz_target!(|data: &[u8]| {
    let (initial, response) = match data.iter().position(|b| *b == 0xff) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    exchange(initial, response, None);
    exchange(
        initial,
        response,
        ChannelBinding::from_end_point_hash(&BINDING),
    );
});

fn exchange(initial: &[u8], response: &[u8], binding: Option<ChannelBinding>) {
    // One iteration keeps the fuzzer fast; the iteration count does not change the parsing.
    let Ok(secret) = ScramSecret::from_password(b"pencil", b"fuzz-salt-16byte", 1) else {
        return;
    };
    let tls = binding.is_some();
    let mut server =
        ScramServer::with_nonce(secret, "fuzzservernonce".into()).with_channel_binding(binding);
    let mut out = BytesMut::new();
    match server.handle_initial_response(initial, &mut out) {
        Ok(()) => assert!(!out.is_empty()),
        Err(error) => {
            assert!(out.is_empty());
            let _ = error.sqlstate();
            assert!(server.handle_response(response, &mut out).is_err());
            return;
        }
    }
    let mut fin = BytesMut::new();
    match server.handle_response(response, &mut fin) {
        Ok(verified) => {
            assert!(server.is_verified() && !fin.is_empty());
            assert_eq!(verified.channel_bound, server.is_channel_bound());
            // Only a server that offered -PLUS can end up bound.
            assert!(tls || !verified.channel_bound);
        }
        Err(error) => {
            assert!(fin.is_empty());
            assert!(!server.is_verified() && !server.is_channel_bound());
            let _: AuthError = error;
        }
    }
}
