//! FunctionCallResponse: the result of a fast-path FunctionCall.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_nullable_value};
use crate::codes::backend::FUNCTION_CALL_RESPONSE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// FunctionCallResponse ('V').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionCallResponse<'a> {
    /// `None` for SQL NULL.
    pub result: Option<&'a [u8]>,
}

impl<'a> Message<'a> for FunctionCallResponse<'a> {
    const CODE: u8 = FUNCTION_CALL_RESPONSE;
    const NAME: &'static str = "FunctionCallResponse";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let result = reader.nullable_value()?;
        reader.finish()?;
        Ok(Self { result })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(
            out,
            FUNCTION_CALL_RESPONSE,
            4 + self.result.map_or(0, <[u8]>::len),
        );
        put_nullable_value(out, self.result);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(result in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40))) {
            let mut out = BytesMut::new();
            round_trip(&FunctionCallResponse { result: result.as_deref() }, &mut out);
            prefixes_fail::<FunctionCallResponse>(&out);
        }
    }
}
