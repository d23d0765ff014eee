//! SASLInitialResponse: the client's chosen SASL mechanism and its first message.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr, put_nullable_value};
use crate::codes::frontend::AUTH_RESPONSE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// SASLInitialResponse ('p').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaslInitialResponse<'a> {
    pub mechanism: &'a [u8],
    /// `None` when the length is -1 (no initial response).
    pub data: Option<&'a [u8]>,
}

impl<'a> Message<'a> for SaslInitialResponse<'a> {
    const CODE: u8 = AUTH_RESPONSE;
    const NAME: &'static str = "SASLInitialResponse";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let mechanism = reader.cstr()?;
        let data = reader.nullable_value()?;
        reader.finish()?;
        Ok(Self { mechanism, data })
    }

    fn encode(&self, out: &mut BytesMut) {
        let hint = self.mechanism.len() + 5 + self.data.map_or(0, <[u8]>::len);
        let at = begin_message(out, AUTH_RESPONSE, hint);
        put_cstr(out, self.mechanism);
        put_nullable_value(out, self.data);
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
        fn round_trip_any(
            mechanism in proptest::collection::vec(1u8..=255, 0..20),
            data in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..100)),
        ) {
            let mut out = BytesMut::new();
            round_trip(&SaslInitialResponse { mechanism: &mechanism, data: data.as_deref() }, &mut out);
            prefixes_fail::<SaslInitialResponse>(&out);
        }
    }
}
