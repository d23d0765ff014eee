//! ParameterDescription: the parameter types of a described statement.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message};
use crate::codes::backend::PARAMETER_DESCRIPTION;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::views::Oids;

/// ParameterDescription ('t').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParameterDescription<'a> {
    pub types: Oids<'a>,
}

impl ParameterDescription<'_> {
    pub fn encode_parts(out: &mut BytesMut, types: &[u32]) {
        let at = begin_message(out, PARAMETER_DESCRIPTION, 2 + 4 * types.len());
        Oids::write_oids(out, types);
        end_message(out, at);
    }
}

impl<'a> Message<'a> for ParameterDescription<'a> {
    const CODE: u8 = PARAMETER_DESCRIPTION;
    const NAME: &'static str = "ParameterDescription";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let types = Oids::read(&mut reader)?;
        reader.finish()?;
        Ok(Self { types })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, PARAMETER_DESCRIPTION, self.types.encoded_len());
        self.types.write(out);
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
        fn round_trip_any(types in proptest::collection::vec(any::<u32>(), 0..20)) {
            let mut out = BytesMut::new();
            ParameterDescription::encode_parts(&mut out, &types);
            let decoded = ParameterDescription::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.types.iter().collect::<Vec<_>>(), types);
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prefixes_fail::<ParameterDescription>(&out);
        }
    }
}
