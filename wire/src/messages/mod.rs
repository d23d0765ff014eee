//! Typed protocol 3.0 messages, one per file, in both directions.
//!
//! Every message implements [`Message`]: `decode_body` borrows from the frame (names, SQL text,
//! values stay slices of the received bytes) and `encode` appends the whole frame to a caller's
//! `BytesMut`, reserving once. [`FrontendMessage`] and [`BackendMessage`] decode any frame of a
//! direction by its type byte.

use bytes::BytesMut;

use crate::error::ProtocolError;
use crate::framing::HEADER_LEN;

pub mod backend;
pub(crate) mod copy_data;
pub(crate) mod copy_done;
pub mod frontend;
pub mod views;

mod any_backend;
mod any_frontend;

pub use any_backend::BackendMessage;
pub use any_frontend::FrontendMessage;
pub use copy_data::CopyData;
pub use copy_done::CopyDone;

/// A typed message with a type byte.
pub trait Message<'a>: Sized {
    /// The type byte.
    const CODE: u8;
    /// The protocol's name for the message, used in errors.
    const NAME: &'static str;

    /// Decodes the body (after type byte and length word).
    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError>;

    /// Appends the whole frame (type byte, length, body) to `out`.
    fn encode(&self, out: &mut BytesMut);

    /// Decodes a whole frame as split by [`crate::framing::split_message`], checking its type
    /// byte and length word.
    fn decode_frame(frame: &'a [u8]) -> Result<Self, ProtocolError> {
        Self::decode_body(frame_body(frame, Self::CODE)?)
    }
}

/// Checks a frame's type byte and length word and returns its body.
pub(crate) fn frame_body(frame: &[u8], expected: u8) -> Result<&[u8], ProtocolError> {
    let (code, body) = split_frame(frame)?;
    if code != expected {
        return Err(ProtocolError::UnexpectedCode {
            expected,
            found: code,
        });
    }
    Ok(body)
}

/// Splits a whole frame into its type byte and body, checking the length word.
pub(crate) fn split_frame(frame: &[u8]) -> Result<(u8, &[u8]), ProtocolError> {
    let Some(header) = frame.get(..HEADER_LEN) else {
        return Err(ProtocolError::Truncated { message: "frame" });
    };
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    if len < 4 {
        return Err(ProtocolError::LengthTooShort {
            code: header[0],
            len,
        });
    }
    if len as usize != frame.len() - 1 {
        return Err(ProtocolError::InvalidValue {
            message: "frame",
            field: "length",
        });
    }
    Ok((header[0], &frame[HEADER_LEN..]))
}

/// Defines a message with an empty body.
macro_rules! empty_message {
    ($(#[$doc:meta])* $name:ident, $code:expr, $label:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;

        impl<'a> $crate::messages::Message<'a> for $name {
            const CODE: u8 = $code;
            const NAME: &'static str = $label;

            fn decode_body(body: &'a [u8]) -> Result<Self, $crate::error::ProtocolError> {
                $crate::codec::Reader::new(body, $label).finish()?;
                Ok(Self)
            }

            fn encode(&self, out: &mut bytes::BytesMut) {
                $crate::codec::put_message(out, $code, &[]);
            }
        }
    };
}
pub(crate) use empty_message;

#[cfg(test)]
pub(crate) mod testing {
    //! Round-trip helpers shared by the per-message tests.
    use super::Message;
    use bytes::BytesMut;

    /// Encodes, checks the length word, decodes and compares; returns the encoded frame.
    pub fn round_trip<'a, M>(message: &M, out: &'a mut BytesMut) -> M
    where
        M: Message<'a> + core::fmt::Debug + PartialEq,
    {
        message.encode(out);
        let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert_eq!(len + 1, out.len(), "length word of {}", M::NAME);
        assert_eq!(out[0], M::CODE);
        let decoded = M::decode_frame(&out[..]).expect("decode");
        assert_eq!(&decoded, message);
        decoded
    }

    /// Every strict prefix of a valid body must fail to decode (never panic).
    pub(crate) fn prefixes_fail<'a, M: Message<'a>>(frame: &'a [u8]) {
        let body = &frame[5..];
        for cut in 0..body.len() {
            assert!(
                M::decode_body(&body[..cut]).is_err(),
                "{} prefix {cut}",
                M::NAME
            );
        }
    }
}
