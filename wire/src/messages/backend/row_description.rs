//! RowDescription: the columns of the rows that follow.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::ROW_DESCRIPTION;
use crate::error::ProtocolError;
use crate::messages::Message;

/// One column of a RowDescription.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub name: &'a [u8],
    /// OID of the source table, 0 if none.
    pub table_oid: u32,
    /// Attribute number in the source table, 0 if none.
    pub column_id: i16,
    pub type_oid: u32,
    /// `pg_type.typlen`; negative for variable width.
    pub type_size: i16,
    pub type_modifier: i32,
    /// 0 text, 1 binary.
    pub format: i16,
}

impl<'a> Field<'a> {
    const FIXED_LEN: usize = 18;

    fn read(reader: &mut Reader<'a>) -> Result<Self, ProtocolError> {
        Ok(Self {
            name: reader.cstr()?,
            table_oid: reader.u32()?,
            column_id: reader.i16()?,
            type_oid: reader.u32()?,
            type_size: reader.i16()?,
            type_modifier: reader.i32()?,
            format: reader.i16()?,
        })
    }

    fn write(&self, out: &mut BytesMut) {
        put_cstr(out, self.name);
        out.put_u32(self.table_oid);
        out.put_i16(self.column_id);
        out.put_u32(self.type_oid);
        out.put_i16(self.type_size);
        out.put_i32(self.type_modifier);
        out.put_i16(self.format);
    }
}

/// RowDescription ('T').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowDescription<'a> {
    count: u16,
    raw: &'a [u8],
}

impl<'a> RowDescription<'a> {
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn fields(&self) -> impl Iterator<Item = Field<'a>> + 'a {
        let mut reader = Reader::new(self.raw, Self::NAME);
        (0..self.count).map_while(move |_| Field::read(&mut reader).ok())
    }

    /// Writes a RowDescription built from fields.
    pub fn encode_parts(out: &mut BytesMut, fields: &[Field<'_>]) {
        let hint = 2 + fields
            .iter()
            .map(|f| f.name.len() + 1 + Field::FIXED_LEN)
            .sum::<usize>();
        let at = begin_message(out, ROW_DESCRIPTION, hint);
        out.put_i16(i16::try_from(fields.len()).unwrap_or(i16::MAX));
        for field in fields {
            field.write(out);
        }
        end_message(out, at);
    }
}

impl<'a> Message<'a> for RowDescription<'a> {
    const CODE: u8 = ROW_DESCRIPTION;
    const NAME: &'static str = "RowDescription";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let count = reader.i16()?;
        if count < 0 {
            return Err(reader.invalid("field count"));
        }
        let mut fields_start = reader;
        for _ in 0..count {
            Field::read(&mut reader)?;
        }
        let raw = fields_start.bytes(fields_start.remaining() - reader.remaining())?;
        reader.finish()?;
        Ok(Self {
            count: count as u16,
            raw,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, ROW_DESCRIPTION, 2 + self.raw.len());
        out.put_u16(self.count);
        out.put_slice(self.raw);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::prelude::*;

    type FieldParts = (u32, i16, u32, i16, i32, i16);

    proptest! {
        #[test]
        fn round_trip_any(
            raw in proptest::collection::vec(
                (proptest::collection::vec(1u8..=255, 0..12), any::<FieldParts>()),
                0..8,
            )
        ) {
            let fields: Vec<Field> = raw
                .iter()
                .map(|(name, f)| Field {
                    name,
                    table_oid: f.0,
                    column_id: f.1,
                    type_oid: f.2,
                    type_size: f.3,
                    type_modifier: f.4,
                    format: f.5,
                })
                .collect();
            let mut out = BytesMut::new();
            RowDescription::encode_parts(&mut out, &fields);
            let decoded = RowDescription::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.fields().collect::<Vec<_>>(), fields);
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prop_assert_eq!(&again[..], &out[..]);
            prefixes_fail::<RowDescription>(&out);
        }
    }
}
