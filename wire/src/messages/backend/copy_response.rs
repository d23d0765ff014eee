//! The body shared by CopyInResponse, CopyOutResponse and CopyBothResponse: the overall
//! format and one format code per column.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message};
use crate::error::ProtocolError;
use crate::messages::views::FormatCodes;

/// Overall format and per-column formats of a COPY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFormats<'a> {
    /// 0 textual, 1 binary.
    pub format: u8,
    pub column_formats: FormatCodes<'a>,
}

impl<'a> CopyFormats<'a> {
    pub(crate) fn decode(body: &'a [u8], message: &'static str) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, message);
        let format = reader.u8()?;
        let column_formats = FormatCodes::read(&mut reader)?;
        reader.finish()?;
        Ok(Self {
            format,
            column_formats,
        })
    }

    pub(crate) fn encode(&self, out: &mut BytesMut, code: u8) {
        let at = begin_message(out, code, 1 + self.column_formats.encoded_len());
        out.put_u8(self.format);
        self.column_formats.write(out);
        end_message(out, at);
    }

    /// Writes a copy response with `code` from parts.
    pub fn encode_parts(out: &mut BytesMut, code: u8, format: u8, column_formats: &[i16]) {
        let at = begin_message(out, code, 3 + 2 * column_formats.len());
        out.put_u8(format);
        FormatCodes::write_codes(out, column_formats);
        end_message(out, at);
    }
}

/// Defines one of the three copy responses around [`CopyFormats`].
macro_rules! copy_response {
    ($(#[$doc:meta])* $name:ident, $code:expr, $label:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub struct $name<'a>(pub $crate::messages::backend::copy_response::CopyFormats<'a>);

        impl<'a> $crate::messages::Message<'a> for $name<'a> {
            const CODE: u8 = $code;
            const NAME: &'static str = $label;

            fn decode_body(body: &'a [u8]) -> Result<Self, $crate::error::ProtocolError> {
                $crate::messages::backend::copy_response::CopyFormats::decode(body, $label).map(Self)
            }

            fn encode(&self, out: &mut bytes::BytesMut) {
                self.0.encode(out, $code);
            }
        }

        #[cfg(test)]
        mod tests {
            use super::*;
            use $crate::messages::Message;
            use $crate::messages::backend::copy_response::CopyFormats;
            use $crate::messages::testing::{prefixes_fail, round_trip};
            use bytes::BytesMut;
            use proptest::prelude::*;

            proptest! {
                #[test]
                fn round_trip_any(format in 0u8..=1, columns in proptest::collection::vec(0i16..=1, 0..10)) {
                    let mut out = BytesMut::new();
                    CopyFormats::encode_parts(&mut out, $code, format, &columns);
                    let decoded = $name::decode_frame(&out).unwrap();
                    prop_assert_eq!(decoded.0.format, format);
                    prop_assert_eq!(decoded.0.column_formats.iter().collect::<Vec<_>>(), columns);
                    let mut again = BytesMut::new();
                    round_trip(&decoded, &mut again);
                    prefixes_fail::<$name>(&out);
                }
            }
        }
    };
}
pub(crate) use copy_response;
