//! SASLResponse: a later client message of a SASL exchange (SCRAM's client-final-message).

use bytes::BytesMut;

use crate::codec::{Reader, put_message};
use crate::codes::frontend::AUTH_RESPONSE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// SASLResponse ('p'): the body is the mechanism's data, unframed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SaslResponse<'a> {
    pub data: &'a [u8],
}

impl<'a> Message<'a> for SaslResponse<'a> {
    const CODE: u8 = AUTH_RESPONSE;
    const NAME: &'static str = "SASLResponse";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        Ok(Self {
            data: reader.rest(),
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        put_message(out, AUTH_RESPONSE, &[self.data]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(data in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut out = BytesMut::new();
            round_trip(&SaslResponse { data: &data }, &mut out);
        }
    }
}
