//! Parse: prepares a statement (named, or the unnamed one) with optional parameter type OIDs.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::frontend::PARSE;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::views::Oids;

/// Parse ('P').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parse<'a> {
    /// Empty for the unnamed statement.
    pub statement: &'a [u8],
    pub sql: &'a [u8],
    pub param_types: Oids<'a>,
}

impl<'a> Parse<'a> {
    /// Writes a Parse built from parts, without constructing the borrowed view first.
    pub fn encode_parts(out: &mut BytesMut, statement: &[u8], sql: &[u8], param_types: &[u32]) {
        let at = begin_message(
            out,
            PARSE,
            statement.len() + sql.len() + 4 + 4 * param_types.len(),
        );
        put_cstr(out, statement);
        put_cstr(out, sql);
        Oids::write_oids(out, param_types);
        end_message(out, at);
    }
}

impl<'a> Message<'a> for Parse<'a> {
    const CODE: u8 = PARSE;
    const NAME: &'static str = "Parse";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let statement = reader.cstr()?;
        let sql = reader.cstr()?;
        let param_types = Oids::read(&mut reader)?;
        reader.finish()?;
        Ok(Self {
            statement,
            sql,
            param_types,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let hint = self.statement.len() + self.sql.len() + 2 + self.param_types.encoded_len();
        let at = begin_message(out, PARSE, hint);
        put_cstr(out, self.statement);
        put_cstr(out, self.sql);
        self.param_types.write(out);
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
            statement in vec(1u8..=255, 0..20),
            sql in vec(1u8..=255, 0..100),
            types in vec(any::<u32>(), 0..10),
        ) {
            let mut out = BytesMut::new();
            Parse::encode_parts(&mut out, &statement, &sql, &types);
            let decoded = Parse::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.statement, &statement[..]);
            prop_assert_eq!(decoded.sql, &sql[..]);
            prop_assert_eq!(decoded.param_types.iter().collect::<Vec<_>>(), types);
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prop_assert_eq!(&again[..], &out[..]);
            prefixes_fail::<Parse>(&out);
        }
    }
}
