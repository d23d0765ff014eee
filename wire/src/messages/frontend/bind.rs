//! Bind: binds parameter values to a prepared statement, creating a portal.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::frontend::BIND;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::views::{FormatCodes, Values};

/// Bind ('B'). Parameter values stay slices of the received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bind<'a> {
    pub portal: &'a [u8],
    pub statement: &'a [u8],
    pub param_formats: FormatCodes<'a>,
    pub params: Values<'a>,
    pub result_formats: FormatCodes<'a>,
}

impl Bind<'_> {
    /// Writes a Bind built from parts, without constructing the borrowed view first.
    pub fn encode_parts(
        out: &mut BytesMut,
        portal: &[u8],
        statement: &[u8],
        param_formats: &[i16],
        params: &[Option<&[u8]>],
        result_formats: &[i16],
    ) {
        let hint = portal.len()
            + statement.len()
            + 6
            + 2 * (param_formats.len() + result_formats.len())
            + Values::values_len(params);
        let at = begin_message(out, BIND, hint);
        put_cstr(out, portal);
        put_cstr(out, statement);
        FormatCodes::write_codes(out, param_formats);
        Values::write_values(out, params);
        FormatCodes::write_codes(out, result_formats);
        end_message(out, at);
    }
}

impl<'a> Message<'a> for Bind<'a> {
    const CODE: u8 = BIND;
    const NAME: &'static str = "Bind";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let portal = reader.cstr()?;
        let statement = reader.cstr()?;
        let param_formats = FormatCodes::read(&mut reader)?;
        let params = Values::read(&mut reader)?;
        let result_formats = FormatCodes::read(&mut reader)?;
        reader.finish()?;
        Ok(Self {
            portal,
            statement,
            param_formats,
            params,
            result_formats,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let hint = self.portal.len()
            + self.statement.len()
            + 2
            + self.param_formats.encoded_len()
            + self.params.encoded_len()
            + self.result_formats.encoded_len();
        let at = begin_message(out, BIND, hint);
        put_cstr(out, self.portal);
        put_cstr(out, self.statement);
        self.param_formats.write(out);
        self.params.write(out);
        self.result_formats.write(out);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::collection::vec;
    use proptest::prelude::*;

    #[test]
    fn rejects_negative_lengths_other_than_null() {
        let mut out = BytesMut::new();
        Bind::encode_parts(&mut out, b"", b"s", &[], &[None], &[]);
        let decoded = Bind::decode_frame(&out).unwrap();
        assert_eq!(decoded.params.iter().collect::<Vec<_>>(), vec![None]);
        let mut bad = out.clone();
        bad[12..16].copy_from_slice(&(-2i32).to_be_bytes());
        assert!(Bind::decode_frame(&bad).is_err());
    }

    proptest! {
        #[test]
        fn round_trip_any(
            portal in vec(1u8..=255, 0..10),
            statement in vec(1u8..=255, 0..10),
            param_formats in vec(0i16..=1, 0..5),
            params in vec(proptest::option::of(vec(any::<u8>(), 0..20)), 0..10),
            result_formats in vec(0i16..=1, 0..5),
        ) {
            let params_ref: Vec<Option<&[u8]>> = params.iter().map(|p| p.as_deref()).collect();
            let mut out = BytesMut::new();
            Bind::encode_parts(&mut out, &portal, &statement, &param_formats, &params_ref, &result_formats);
            let decoded = Bind::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.portal, &portal[..]);
            prop_assert_eq!(decoded.statement, &statement[..]);
            prop_assert_eq!(decoded.param_formats.iter().collect::<Vec<_>>(), param_formats);
            prop_assert_eq!(decoded.params.iter().collect::<Vec<_>>(), params_ref);
            prop_assert_eq!(decoded.result_formats.iter().collect::<Vec<_>>(), result_formats);
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prop_assert_eq!(&again[..], &out[..]);
            prefixes_fail::<Bind>(&out);
        }
    }
}
