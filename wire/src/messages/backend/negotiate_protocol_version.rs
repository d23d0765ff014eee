//! NegotiateProtocolVersion: the server's newest supported minor version and the `_pq_.*`
//! startup options it did not recognise. pgtier sends it to clients asking for 3.1+ (see
//! [`crate::negotiate`]).

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::NEGOTIATE_PROTOCOL_VERSION;
use crate::error::ProtocolError;
use crate::messages::Message;

/// NegotiateProtocolVersion ('v').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NegotiateProtocolVersion<'a> {
    /// The newest version the server speaks for the requested major, as a full version
    /// word (PostgreSQL sends `3 << 16 | minor`, e.g. 196608 for 3.0), not a bare minor.
    pub newest_version: u32,
    count: u32,
    /// The option names, each NUL-terminated.
    raw: &'a [u8],
}

impl<'a> NegotiateProtocolVersion<'a> {
    pub fn unrecognized(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut reader = Reader::new(self.raw, Self::NAME);
        (0..self.count).map_while(move |_| reader.cstr().ok())
    }

    /// Writes the message from its parts.
    pub fn encode_parts<'o>(
        out: &mut BytesMut,
        newest_version: u32,
        unrecognized: impl Iterator<Item = &'o [u8]> + Clone,
    ) {
        let hint = 8 + unrecognized.clone().map(|o| o.len() + 1).sum::<usize>();
        let at = begin_message(out, NEGOTIATE_PROTOCOL_VERSION, hint);
        out.put_u32(newest_version);
        let count_at = out.len();
        out.put_u32(0);
        let mut count = 0u32;
        for option in unrecognized {
            put_cstr(out, option);
            count += 1;
        }
        out[count_at..count_at + 4].copy_from_slice(&count.to_be_bytes());
        end_message(out, at);
    }
}

impl<'a> Message<'a> for NegotiateProtocolVersion<'a> {
    const CODE: u8 = NEGOTIATE_PROTOCOL_VERSION;
    const NAME: &'static str = "NegotiateProtocolVersion";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let newest_version = reader.u32()?;
        let count = reader.u32()?;
        let raw = reader.rest();
        let mut names = Reader::new(raw, Self::NAME);
        for _ in 0..count {
            names.cstr()?;
        }
        names.finish()?;
        Ok(Self {
            newest_version,
            count,
            raw,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, NEGOTIATE_PROTOCOL_VERSION, 8 + self.raw.len());
        out.put_u32(self.newest_version);
        out.put_u32(self.count);
        out.put_slice(self.raw);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::collection::vec;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(minor: u32, options in vec(vec(1u8..=255, 0..20), 0..5)) {
            let mut out = BytesMut::new();
            NegotiateProtocolVersion::encode_parts(&mut out, minor, options.iter().map(Vec::as_slice));
            let decoded = NegotiateProtocolVersion::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.newest_version, minor);
            prop_assert_eq!(decoded.unrecognized().collect::<Vec<_>>(), options.iter().map(Vec::as_slice).collect::<Vec<_>>());
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prefixes_fail::<NegotiateProtocolVersion>(&out);
        }
    }
}
