//! The login state machine fed arbitrary server messages: a stream of frames is framed and
//! every 'R' frame goes to `ClientAuth`; it must fail cleanly, never panic.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgtier_wire::FrameLimits;
use pgtier_wire::auth::ClientAuth;
use pgtier_wire::framing::split_message;

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let limits = FrameLimits { max_message_len: 1 << 16, ..FrameLimits::default() };
    let mut auth = ClientAuth::new(b"alice", b"pencil", [7; 18]).max_scram_iterations(64);
    while let Ok(Some(frame)) = split_message(&mut buf, &limits) {
        let mut out = BytesMut::new();
        if auth.handle_frame(&frame.bytes, &mut out).is_err() {
            return;
        }
    }
});
