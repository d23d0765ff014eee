//! DataRow: one result row. The hottest message on the wire: decoding validates the column
//! lengths once and keeps the values as slices of the frame.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message};
use crate::codes::backend::DATA_ROW;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::views::Values;

/// DataRow ('D').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRow<'a> {
    pub values: Values<'a>,
}

impl DataRow<'_> {
    /// Writes a DataRow built from column values (`None` = NULL).
    pub fn encode_parts(out: &mut BytesMut, values: &[Option<&[u8]>]) {
        let at = begin_message(out, DATA_ROW, Values::values_len(values));
        Values::write_values(out, values);
        end_message(out, at);
    }
}

impl<'a> Message<'a> for DataRow<'a> {
    const CODE: u8 = DATA_ROW;
    const NAME: &'static str = "DataRow";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let values = Values::read(&mut reader)?;
        reader.finish()?;
        Ok(Self { values })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, DATA_ROW, self.values.encoded_len());
        self.values.write(out);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::collection::vec;
    use proptest::prelude::*;

    #[test]
    fn fixed_bytes() {
        let mut out = BytesMut::new();
        DataRow::encode_parts(&mut out, &[Some(b"1"), None]);
        assert_eq!(&out[..], b"D\0\0\0\x0f\0\x02\0\0\0\x011\xff\xff\xff\xff");
    }

    proptest! {
        #[test]
        fn round_trip_any(values in vec(proptest::option::of(vec(any::<u8>(), 0..30)), 0..12)) {
            let refs: Vec<Option<&[u8]>> = values.iter().map(|v| v.as_deref()).collect();
            let mut out = BytesMut::new();
            DataRow::encode_parts(&mut out, &refs);
            let decoded = DataRow::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.values.iter().collect::<Vec<_>>(), refs);
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prop_assert_eq!(&again[..], &out[..]);
            prefixes_fail::<DataRow>(&out);
        }
    }
}
