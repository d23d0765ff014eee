//! Execute: runs a bound portal, returning at most `max_rows` rows (0 = all).

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::frontend::EXECUTE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// Execute ('E').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Execute<'a> {
    pub portal: &'a [u8],
    pub max_rows: i32,
}

impl<'a> Message<'a> for Execute<'a> {
    const CODE: u8 = EXECUTE;
    const NAME: &'static str = "Execute";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let portal = reader.cstr()?;
        let max_rows = reader.i32()?;
        reader.finish()?;
        Ok(Self { portal, max_rows })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, EXECUTE, self.portal.len() + 5);
        put_cstr(out, self.portal);
        out.put_i32(self.max_rows);
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
        fn round_trip_any(portal in proptest::collection::vec(1u8..=255, 0..30), max_rows: i32) {
            let mut out = BytesMut::new();
            round_trip(&Execute { portal: &portal, max_rows }, &mut out);
            prefixes_fail::<Execute>(&out);
        }
    }
}
