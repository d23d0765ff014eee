//! CopyData: a chunk of COPY data, sent by either side.

use bytes::BytesMut;

use crate::codec::{Reader, put_message};
use crate::codes::frontend::COPY_DATA;
use crate::error::ProtocolError;
use crate::messages::Message;

/// CopyData ('d'), both directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyData<'a> {
    pub data: &'a [u8],
}

impl<'a> Message<'a> for CopyData<'a> {
    const CODE: u8 = COPY_DATA;
    const NAME: &'static str = "CopyData";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        Ok(Self {
            data: Reader::new(body, Self::NAME).rest(),
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        put_message(out, COPY_DATA, &[self.data]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut out = BytesMut::new();
            round_trip(&CopyData { data: &data }, &mut out);
        }
    }
}
