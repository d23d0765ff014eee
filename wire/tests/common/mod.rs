//! Blocking loopback helpers for the live tests: a tiny frontend over `std::net::TcpStream`
//! that records every byte sent and received.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgtier_wire::FrameLimits;
use pgtier_wire::framing::{Frame, split_message};

pub struct Conn {
    pub stream: TcpStream,
    buf: BytesMut,
    /// Everything sent, in order.
    pub sent: Vec<u8>,
    /// Every backend frame received, in order.
    pub received: Vec<Bytes>,
}

impl Conn {
    pub fn connect(port: u16) -> Conn {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Conn {
            stream,
            buf: BytesMut::with_capacity(8192),
            sent: Vec::new(),
            received: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
        self.sent.extend_from_slice(bytes);
    }

    pub fn read_frame(&mut self) -> Frame {
        loop {
            if let Some(frame) =
                split_message(&mut self.buf, &FrameLimits::default()).expect("framing")
            {
                self.received.push(frame.bytes.clone());
                return frame;
            }
            let mut chunk = [0u8; 8192];
            let n = match self.stream.read(&mut chunk) {
                // A read with a timeout returns EINTR after the process is stopped and
                // continued (as a loaded CI host may do), even without a signal handler.
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                other => other.expect("read"),
            };
            assert!(n > 0, "server closed the connection");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Reads frames up to and including ReadyForQuery.
    pub fn read_until_ready(&mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        loop {
            let frame = self.read_frame();
            let done = frame.code() == b'Z';
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}

pub fn codes(frames: &[Frame]) -> String {
    frames.iter().map(|f| f.code() as char).collect()
}
