//! FunctionCall: the legacy fast-path call of a function by OID.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message};
use crate::codes::frontend::FUNCTION_CALL;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::views::{FormatCodes, Values};

/// FunctionCall ('F').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionCall<'a> {
    pub function_oid: u32,
    pub arg_formats: FormatCodes<'a>,
    pub args: Values<'a>,
    pub result_format: i16,
}

impl FunctionCall<'_> {
    /// Writes a FunctionCall built from parts.
    pub fn encode_parts(
        out: &mut BytesMut,
        function_oid: u32,
        arg_formats: &[i16],
        args: &[Option<&[u8]>],
        result_format: i16,
    ) {
        let at = begin_message(
            out,
            FUNCTION_CALL,
            8 + 2 * arg_formats.len() + Values::values_len(args),
        );
        out.put_u32(function_oid);
        FormatCodes::write_codes(out, arg_formats);
        Values::write_values(out, args);
        out.put_i16(result_format);
        end_message(out, at);
    }
}

impl<'a> Message<'a> for FunctionCall<'a> {
    const CODE: u8 = FUNCTION_CALL;
    const NAME: &'static str = "FunctionCall";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let function_oid = reader.u32()?;
        let arg_formats = FormatCodes::read(&mut reader)?;
        let args = Values::read(&mut reader)?;
        let result_format = reader.i16()?;
        reader.finish()?;
        Ok(Self {
            function_oid,
            arg_formats,
            args,
            result_format,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let hint = 6 + self.arg_formats.encoded_len() + self.args.encoded_len();
        let at = begin_message(out, FUNCTION_CALL, hint);
        out.put_u32(self.function_oid);
        self.arg_formats.write(out);
        self.args.write(out);
        out.put_i16(self.result_format);
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
        fn round_trip_any(
            oid: u32,
            formats in vec(0i16..=1, 0..4),
            args in vec(proptest::option::of(vec(any::<u8>(), 0..20)), 0..6),
            result_format in 0i16..=1,
        ) {
            let args_ref: Vec<Option<&[u8]>> = args.iter().map(|a| a.as_deref()).collect();
            let mut out = BytesMut::new();
            FunctionCall::encode_parts(&mut out, oid, &formats, &args_ref, result_format);
            let decoded = FunctionCall::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.function_oid, oid);
            prop_assert_eq!(decoded.args.iter().collect::<Vec<_>>(), args_ref);
            prop_assert_eq!(decoded.arg_formats.iter().collect::<Vec<_>>(), formats);
            prop_assert_eq!(decoded.result_format, result_format);
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prefixes_fail::<FunctionCall>(&out);
        }
    }
}
