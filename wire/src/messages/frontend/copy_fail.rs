//! CopyFail: the client aborts a COPY FROM STDIN with a reason.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::frontend::COPY_FAIL;
use crate::error::ProtocolError;
use crate::messages::Message;

/// CopyFail ('f').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFail<'a> {
    pub reason: &'a [u8],
}

impl<'a> Message<'a> for CopyFail<'a> {
    const CODE: u8 = COPY_FAIL;
    const NAME: &'static str = "CopyFail";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let reason = reader.cstr()?;
        reader.finish()?;
        Ok(Self { reason })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, COPY_FAIL, self.reason.len() + 1);
        put_cstr(out, self.reason);
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
        fn round_trip_any(reason in proptest::collection::vec(1u8..=255, 0..100)) {
            let mut out = BytesMut::new();
            round_trip(&CopyFail { reason: &reason }, &mut out);
            prefixes_fail::<CopyFail>(&out);
        }
    }
}
