//! Byte vectors captured from a real PostgreSQL 15 session (see `live_client.rs`,
//! `pg15_session_decodes_every_message`, which rewrites them with
//! `PGTIER_RECORD_FIXTURES=1`), checked without a server: every frame frames, decodes, and
//! re-encodes to the same bytes.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use bytes::BytesMut;
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::{split_message, split_startup};
use pgtier_wire::messages::frontend::{SaslInitialResponse, StartupPacket};
use pgtier_wire::messages::{BackendMessage, FrontendMessage, Message};

const BACKEND: &[u8] = include_bytes!("fixtures/pg15_backend.bin");
const FRONTEND: &[u8] = include_bytes!("fixtures/pg15_frontend.bin");

#[test]
fn pg15_backend_stream_decodes_and_reencodes() {
    let mut buf = BytesMut::from(BACKEND);
    let mut codes = String::new();
    while let Some(frame) = split_message(&mut buf, &FrameLimits::default()).unwrap() {
        let message = BackendMessage::decode(&frame.bytes).unwrap();
        let mut again = BytesMut::new();
        message.encode(&mut again);
        assert_eq!(&again[..], &frame.bytes[..]);
        codes.push(frame.code() as char);
    }
    assert!(buf.is_empty());
    for code in "vRSKZTDCIEANHdcG1t23snV".chars() {
        assert!(codes.contains(code), "fixture lacks {code:?}");
    }
    assert!(codes.starts_with("vRRRRS"), "{codes}");
}

#[test]
fn pg15_frontend_stream_decodes_and_reencodes() {
    let mut buf = BytesMut::from(FRONTEND);
    let startup = split_startup(&mut buf, &FrameLimits::default())
        .unwrap()
        .unwrap();
    let StartupPacket::Startup(startup) = StartupPacket::decode(&startup).unwrap() else {
        panic!("fixture does not start with a StartupMessage");
    };
    assert_eq!(startup.user(), Some("alice"));
    let mut codes = String::new();
    while let Some(frame) = split_message(&mut buf, &FrameLimits::default()).unwrap() {
        let message = FrontendMessage::decode(&frame.bytes).unwrap();
        if codes.is_empty() {
            let initial = SaslInitialResponse::decode_frame(&frame.bytes).unwrap();
            assert_eq!(initial.mechanism, b"SCRAM-SHA-256");
        }
        let mut again = BytesMut::new();
        message.encode(&mut again);
        assert_eq!(&again[..], &frame.bytes[..]);
        codes.push(frame.code() as char);
    }
    assert!(buf.is_empty());
    for code in "ppQdcPDBECSFX".chars() {
        assert!(codes.contains(code), "fixture lacks {code:?}");
    }
}
