//! The startup phase: startup-packet framing, decoding, protocol negotiation and the
//! `options` splitter. Valid packets must re-encode to their exact bytes.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::split_startup;
use pgtier_wire::messages::frontend::StartupPacket;
use pgtier_wire::{negotiate, startup_options};

fuzz_target!(|data: &[u8]| {
    let mut buf = BytesMut::from(data);
    let limits = FrameLimits::default();
    while let Ok(Some(packet)) = split_startup(&mut buf, &limits) {
        let Ok(decoded) = StartupPacket::decode(&packet) else {
            continue;
        };
        let mut again = BytesMut::new();
        match decoded {
            StartupPacket::Startup(startup) => {
                startup.encode(&mut again);
                let mut out = BytesMut::new();
                let negotiated = negotiate::encode_negotiation(&mut out, &startup);
                assert_eq!(negotiated, !out.is_empty());
                let _ = (startup.user(), startup.database(), startup.replication());
                if let Some(options) = startup.options() {
                    let _ = startup_options::parse_options(options, 64);
                }
            }
            StartupPacket::SslRequest => pgtier_wire::messages::frontend::SslRequest.encode(&mut again),
            StartupPacket::GssEncRequest => pgtier_wire::messages::frontend::GssEncRequest.encode(&mut again),
            StartupPacket::Cancel(cancel) => cancel.encode(&mut again),
        }
        assert_eq!(&again[..], &packet[..]);
    }
});
