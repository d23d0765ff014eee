//! ParameterStatus: the server reports a run-time parameter (at startup and whenever a
//! GUC_REPORT setting changes). The proxy replays these to clients that reuse a server.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::PARAMETER_STATUS;
use crate::error::ProtocolError;
use crate::messages::Message;

/// ParameterStatus ('S').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParameterStatus<'a> {
    pub name: &'a [u8],
    pub value: &'a [u8],
}

impl<'a> Message<'a> for ParameterStatus<'a> {
    const CODE: u8 = PARAMETER_STATUS;
    const NAME: &'static str = "ParameterStatus";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let name = reader.cstr()?;
        let value = reader.cstr()?;
        reader.finish()?;
        Ok(Self { name, value })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(
            out,
            PARAMETER_STATUS,
            self.name.len() + self.value.len() + 2,
        );
        put_cstr(out, self.name);
        put_cstr(out, self.value);
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
        fn round_trip_any(name in vec(1u8..=255, 0..20), value in vec(1u8..=255, 0..40)) {
            let mut out = BytesMut::new();
            round_trip(&ParameterStatus { name: &name, value: &value }, &mut out);
            prefixes_fail::<ParameterStatus>(&out);
        }
    }
}
