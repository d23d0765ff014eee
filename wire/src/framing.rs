//! Splitting a receive buffer into whole messages without copying them.
//!
//! A typed message is a type byte, a big-endian u32 length that counts itself and the body, then
//! the body. [`split_message`] detaches one complete message from the front of a `BytesMut` as a
//! frozen `Bytes` (`split_to` + `freeze`: a reference-count bump, no copy, no allocation).
//! [`scan_run`] measures a run of complete messages that a forwarder can pass on as one chunk,
//! stopping before the first message whose type the caller wants to inspect (ReadyForQuery,
//! ErrorResponse, ...). Startup packets have no type byte and are framed by [`split_startup`].
//!
//! Lengths are checked against [`FrameLimits`] from the header alone, so a hostile length is
//! rejected before the caller grows a buffer for it.

use bytes::{Bytes, BytesMut};

use crate::codes::CodeSet;
use crate::error::ProtocolError;

/// Bytes before a typed message's body: the type byte and the length word.
pub const HEADER_LEN: usize = 5;

/// PostgreSQL refuses startup packets longer than this (`MAX_STARTUP_PACKET_LENGTH`).
pub(crate) const DEFAULT_MAX_STARTUP_LEN: u32 = 10_000;

/// PostgreSQL's own ceiling for one message (`PQ_LARGE_MESSAGE_LIMIT`, 1 GiB - 1).
pub(crate) const DEFAULT_MAX_MESSAGE_LEN: u32 = (1 << 30) - 1;

/// Size limits applied while framing. Both count the length word itself, as the protocol does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameLimits {
    /// Largest value accepted in a typed message's length word.
    pub max_message_len: u32,
    /// Largest value accepted in a startup packet's length word.
    pub max_startup_len: u32,
}

impl Default for FrameLimits {
    fn default() -> Self {
        Self {
            max_message_len: DEFAULT_MAX_MESSAGE_LEN,
            max_startup_len: DEFAULT_MAX_STARTUP_LEN,
        }
    }
}

/// The first five bytes of a typed message, validated against the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub code: u8,
    /// The length word: body length + 4.
    pub len: u32,
}

impl FrameHeader {
    /// Bytes the whole frame occupies, type byte included.
    pub const fn frame_len(&self) -> usize {
        self.len as usize + 1
    }

    pub const fn body_len(&self) -> usize {
        self.len as usize - 4
    }
}

/// One complete typed message detached from a receive buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Type byte, length word and body, exactly as received.
    pub bytes: Bytes,
}

impl Frame {
    pub fn code(&self) -> u8 {
        self.bytes[0]
    }

    /// The body after the type byte and length word.
    pub fn body(&self) -> &[u8] {
        &self.bytes[HEADER_LEN..]
    }
}

/// Reads and checks the header at the front of `buf`; `Ok(None)` while fewer than five bytes
/// are buffered. A length below 4 or above `limits.max_message_len` is a protocol violation.
#[inline]
pub fn peek_header(buf: &[u8], limits: &FrameLimits) -> Result<Option<FrameHeader>, ProtocolError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let code = header[0];
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if len < 4 {
        return Err(ProtocolError::LengthTooShort { code, len });
    }
    if len > limits.max_message_len {
        return Err(ProtocolError::LengthTooLong {
            code,
            len,
            max_len: limits.max_message_len,
        });
    }
    Ok(Some(FrameHeader { code, len }))
}

/// Detaches the first message of `buf` if it is complete; `Ok(None)` if more bytes are needed.
#[inline]
pub fn split_message(
    buf: &mut BytesMut,
    limits: &FrameLimits,
) -> Result<Option<Frame>, ProtocolError> {
    let Some(header) = peek_header(buf, limits)? else {
        return Ok(None);
    };
    if buf.len() < header.frame_len() {
        return Ok(None);
    }
    Ok(Some(Frame {
        bytes: buf.split_to(header.frame_len()).freeze(),
    }))
}

/// Detaches the first `len` bytes, normally a [`Run::len`] measured by [`scan_run`].
#[inline]
pub fn split_run(buf: &mut BytesMut, len: usize) -> Bytes {
    buf.split_to(len.min(buf.len())).freeze()
}

/// What lies after the complete messages a [`scan_run`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The buffer ends exactly at a message boundary.
    Empty,
    /// An incomplete message; `header` is `None` while fewer than five bytes of it are buffered.
    Partial { header: Option<FrameHeader> },
    /// A complete message whose type is in the stop set; it is not part of the run.
    Stop { header: FrameHeader },
}

/// A run of complete messages at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    /// Bytes of the run: always a message boundary.
    pub len: usize,
    /// Messages in the run.
    pub messages: usize,
    pub end: RunEnd,
}

/// Measures the longest run of complete messages at the front of `buf` that contains no
/// message whose type is in `stop`. A forwarder sends `buf[..run.len]` on as one chunk, then
/// splits and inspects the stopping message, if any.
///
/// Every header in the run is checked against `limits`, and so is the header after it.
pub fn scan_run(buf: &[u8], stop: &CodeSet, limits: &FrameLimits) -> Result<Run, ProtocolError> {
    let mut offset = 0;
    let mut messages = 0;
    loop {
        let rest = &buf[offset..];
        if rest.is_empty() {
            return Ok(Run {
                len: offset,
                messages,
                end: RunEnd::Empty,
            });
        }
        let header = peek_header(rest, limits)?;
        let end = match header {
            Some(h) if rest.len() >= h.frame_len() && !stop.contains(h.code) => {
                offset += h.frame_len();
                messages += 1;
                continue;
            }
            Some(h) if rest.len() >= h.frame_len() => RunEnd::Stop { header: h },
            partial => RunEnd::Partial { header: partial },
        };
        return Ok(Run {
            len: offset,
            messages,
            end,
        });
    }
}

/// Iterates over the complete messages of a buffer, detaching each.
#[derive(Debug)]
pub struct Messages<'b> {
    buf: &'b mut BytesMut,
    limits: FrameLimits,
}

impl<'b> Messages<'b> {
    pub fn new(buf: &'b mut BytesMut, limits: FrameLimits) -> Self {
        Self { buf, limits }
    }
}

impl Iterator for Messages<'_> {
    type Item = Result<Frame, ProtocolError>;

    fn next(&mut self) -> Option<Self::Item> {
        split_message(self.buf, &self.limits).transpose()
    }
}

/// Reads the length word of a startup-phase packet (no type byte); `Ok(None)` while fewer than
/// four bytes are buffered. Lengths below 8 (length + request code) or above
/// `limits.max_startup_len` are protocol violations.
pub fn peek_startup_len(buf: &[u8], limits: &FrameLimits) -> Result<Option<u32>, ProtocolError> {
    let Some(word) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
    if len < 8 {
        return Err(ProtocolError::LengthTooShort { code: 0, len });
    }
    if len > limits.max_startup_len {
        return Err(ProtocolError::LengthTooLong {
            code: 0,
            len,
            max_len: limits.max_startup_len,
        });
    }
    Ok(Some(len))
}

/// Detaches a complete startup-phase packet (StartupMessage, SSLRequest, GSSENCRequest or
/// CancelRequest), length word included. Decode it with
/// [`crate::messages::frontend::startup::StartupPacket::decode`].
pub fn split_startup(
    buf: &mut BytesMut,
    limits: &FrameLimits,
) -> Result<Option<Bytes>, ProtocolError> {
    let Some(len) = peek_startup_len(buf, limits)? else {
        return Ok(None);
    };
    if buf.len() < len as usize {
        return Ok(None);
    }
    Ok(Some(buf.split_to(len as usize).freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BufMut;

    fn message(out: &mut BytesMut, code: u8, body: &[u8]) {
        out.put_u8(code);
        out.put_u32(body.len() as u32 + 4);
        out.put_slice(body);
    }

    #[test]
    fn split_message_waits_for_whole_frame() {
        let limits = FrameLimits::default();
        let mut full = BytesMut::new();
        message(&mut full, b'D', b"abc");
        for cut in 0..full.len() {
            let mut partial = BytesMut::from(&full[..cut]);
            assert_eq!(split_message(&mut partial, &limits), Ok(None), "cut {cut}");
            assert_eq!(partial.len(), cut);
        }
        let frame = split_message(&mut full, &limits).unwrap().unwrap();
        assert_eq!(frame.code(), b'D');
        assert_eq!(frame.body(), b"abc");
        assert!(full.is_empty());
    }

    #[test]
    fn lengths_outside_limits_are_protocol_violations() {
        let limits = FrameLimits {
            max_message_len: 100,
            ..FrameLimits::default()
        };
        let mut short = BytesMut::from(&b"Q\0\0\0\x03"[..]);
        let err = split_message(&mut short, &limits).unwrap_err();
        assert_eq!(err, ProtocolError::LengthTooShort { code: b'Q', len: 3 });
        assert_eq!(err.sqlstate(), crate::sqlstate::PROTOCOL_VIOLATION);
        let mut long = BytesMut::from(&b"Q\xff\xff\xff\xff"[..]);
        let err = split_message(&mut long, &limits).unwrap_err();
        assert!(matches!(
            err,
            ProtocolError::LengthTooLong {
                len: u32::MAX,
                max_len: 100,
                ..
            }
        ));
        let mut at_limit = BytesMut::from(&b"Q\0\0\0\x64"[..]);
        assert_eq!(split_message(&mut at_limit, &limits), Ok(None));
    }

    #[test]
    fn scan_run_stops_before_ready_for_query() {
        let limits = FrameLimits::default();
        let mut buf = BytesMut::new();
        message(&mut buf, b'T', b"x");
        for _ in 0..3 {
            message(&mut buf, b'D', b"row");
        }
        message(&mut buf, b'C', b"SELECT 3\0");
        let run_len = buf.len();
        message(&mut buf, b'Z', b"I");
        message(&mut buf, b'D', b"next");
        buf.truncate(buf.len() - 2);
        let stop = CodeSet::of(b"Z");
        let run = scan_run(&buf, &stop, &limits).unwrap();
        assert_eq!(run.len, run_len);
        assert_eq!(run.messages, 5);
        assert_eq!(
            run.end,
            RunEnd::Stop {
                header: FrameHeader { code: b'Z', len: 5 }
            }
        );
        let chunk = split_run(&mut buf, run.len);
        assert_eq!(chunk.len(), run_len);
        let ready = split_message(&mut buf, &limits).unwrap().unwrap();
        assert_eq!(ready.body(), b"I");
        let run = scan_run(&buf, &stop, &limits).unwrap();
        assert_eq!(
            run,
            Run {
                len: 0,
                messages: 0,
                end: RunEnd::Partial {
                    header: Some(FrameHeader { code: b'D', len: 8 })
                }
            }
        );
    }

    #[test]
    fn scan_run_reports_partial_header_and_empty() {
        let limits = FrameLimits::default();
        let stop = CodeSet::EMPTY;
        assert_eq!(scan_run(&[], &stop, &limits).unwrap().end, RunEnd::Empty);
        let run = scan_run(b"D\0\0", &stop, &limits).unwrap();
        assert_eq!(run.end, RunEnd::Partial { header: None });
        assert!(scan_run(b"D\0\0\0\x01", &stop, &limits).is_err());
    }

    #[test]
    fn messages_iterator_yields_all_then_stops() {
        let mut buf = BytesMut::new();
        message(&mut buf, b'1', b"");
        message(&mut buf, b'2', b"");
        buf.put_u8(b'D');
        let codes: Vec<u8> = Messages::new(&mut buf, FrameLimits::default())
            .map(|f| f.unwrap().code())
            .collect();
        assert_eq!(codes, b"12");
        assert_eq!(&buf[..], b"D");
    }

    #[test]
    fn split_startup_checks_bounds() {
        let limits = FrameLimits::default();
        let mut ssl = BytesMut::from(&[0u8, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f][..]);
        let packet = split_startup(&mut ssl, &limits).unwrap().unwrap();
        assert_eq!(packet.len(), 8);
        let mut tiny = BytesMut::from(&[0u8, 0, 0, 7][..]);
        assert!(split_startup(&mut tiny, &limits).is_err());
        let mut huge = BytesMut::from(&[0u8, 1, 0, 0][..]);
        assert!(split_startup(&mut huge, &limits).is_err());
        let mut partial = BytesMut::from(&[0u8, 0, 0][..]);
        assert_eq!(split_startup(&mut partial, &limits), Ok(None));
    }

    proptest::proptest! {
        /// Any stream of valid messages, received in arbitrary chunks, frames back into the
        /// same messages, and `scan_run` agrees with splitting one by one.
        #[test]
        fn chunked_streams_frame_identically(
            messages in proptest::collection::vec(
                (proptest::prelude::any::<u8>(), proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)),
                0..20,
            ),
            chunk in 1usize..400,
            stop_code in proptest::prelude::any::<u8>(),
        ) {
            let limits = FrameLimits { max_message_len: 1000, ..FrameLimits::default() };
            let mut stream = BytesMut::new();
            for (code, body) in &messages {
                message(&mut stream, *code, body);
            }
            let stop = CodeSet::of(&[stop_code]);
            let run = scan_run(&stream, &stop, &limits).unwrap();
            let first_stop = messages.iter().position(|(code, _)| *code == stop_code);
            proptest::prop_assert_eq!(run.messages, first_stop.unwrap_or(messages.len()));
            let mut buf = BytesMut::new();
            let mut frames = Vec::new();
            for piece in stream.chunks(chunk) {
                buf.extend_from_slice(piece);
                while let Some(frame) = split_message(&mut buf, &limits).unwrap() {
                    frames.push(frame);
                }
            }
            proptest::prop_assert!(buf.is_empty());
            proptest::prop_assert_eq!(frames.len(), messages.len());
            for (frame, (code, body)) in frames.iter().zip(&messages) {
                proptest::prop_assert_eq!(frame.code(), *code);
                proptest::prop_assert_eq!(frame.body(), &body[..]);
            }
        }
    }
}
