//! Query: a simple-protocol query string, possibly several statements.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::frontend::QUERY;
use crate::error::ProtocolError;
use crate::messages::Message;

/// Query ('Q'). `sql` is in the client encoding and is not validated as UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query<'a> {
    pub sql: &'a [u8],
}

impl<'a> Message<'a> for Query<'a> {
    const CODE: u8 = QUERY;
    const NAME: &'static str = "Query";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let sql = reader.cstr()?;
        reader.finish()?;
        Ok(Self { sql })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, QUERY, self.sql.len() + 1);
        put_cstr(out, self.sql);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::prelude::*;

    #[test]
    fn fixed_bytes() {
        let mut out = BytesMut::new();
        round_trip(&Query { sql: b"SELECT 1" }, &mut out);
        assert_eq!(&out[..], b"Q\0\0\0\x0dSELECT 1\0");
        prefixes_fail::<Query>(&out);
    }

    proptest! {
        #[test]
        fn round_trip_any(sql in proptest::collection::vec(1u8..=255, 0..200)) {
            let mut out = BytesMut::new();
            round_trip(&Query { sql: &sql }, &mut out);
        }
    }
}
