//! Frame scanner + typed decoding of every message, both directions.
//!
//! Oracles: no panic; `scan_run` agrees with repeated `split_message`; every frame that
//! decodes re-encodes to exactly its bytes; the response tracker never panics on the codes.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgtier_wire::framing::{RunEnd, scan_run, split_message};
use pgtier_wire::messages::{BackendMessage, FrontendMessage};
use pgtier_wire::tracker::ResponseTracker;
use pgtier_wire::{CodeSet, FrameLimits};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, stream)) = data.split_first() else {
        return;
    };
    let limits = FrameLimits { max_message_len: 1 << 16, ..FrameLimits::default() };
    let stop = CodeSet::of(&[selector]);
    let run = scan_run(stream, &stop, &limits);
    let mut buf = BytesMut::from(stream);
    let mut tracker = ResponseTracker::new();
    let mut offset = 0;
    let mut messages = 0;
    let mut stopped = false;
    loop {
        match split_message(&mut buf, &limits) {
            Ok(Some(frame)) => {
                if !stopped && frame.code() == selector {
                    stopped = true;
                    let Ok(run) = run else { panic!("scan_run failed where split_message did not") };
                    assert_eq!((run.len, run.messages), (offset, messages));
                    assert!(matches!(run.end, RunEnd::Stop { .. }));
                }
                offset += frame.bytes.len();
                messages += 1;
                check_frame(&frame.bytes, &mut tracker);
            }
            Ok(None) => break,
            Err(error) => {
                let _ = error.sqlstate();
                assert!(stopped || run.is_err());
                return;
            }
        }
    }
    if !stopped {
        let run = run.expect("scan_run failed on a stream that frames cleanly");
        assert_eq!((run.len, run.messages), (offset, messages));
    }
});

fn check_frame(frame: &[u8], tracker: &mut ResponseTracker) {
    if let Ok(message) = BackendMessage::decode(frame) {
        let mut again = BytesMut::new();
        message.encode(&mut again);
        assert_eq!(&again[..], frame, "backend {:?}", message.code() as char);
        let _ = tracker.handle_backend(frame[0], &frame[5..]);
    }
    if let Ok(message) = FrontendMessage::decode(frame) {
        let mut again = BytesMut::new();
        message.encode(&mut again);
        assert_eq!(&again[..], frame, "frontend {:?}", message.code() as char);
        let _ = tracker.handle_frontend(frame[0]);
    }
    let _ = tracker.phase();
}
