//! Borrowed views over repeated fields (format codes, nullable values, OIDs) that a decoder has
//! already validated, so iterating them later cannot fail and never allocates.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, put_nullable_value, take_values};
use crate::error::ProtocolError;

/// An `Int16` count followed by that many `Int16` format codes (0 text, 1 binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FormatCodes<'a> {
    raw: &'a [u8],
}

impl<'a> FormatCodes<'a> {
    pub(crate) fn read(reader: &mut Reader<'a>) -> Result<Self, ProtocolError> {
        let count = reader.i16()?;
        if count < 0 {
            return Err(reader.invalid("format code count"));
        }
        Ok(Self {
            raw: reader.bytes(count as usize * 2)?,
        })
    }

    pub fn len(&self) -> usize {
        self.raw.len() / 2
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = i16> + 'a {
        self.raw
            .chunks_exact(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
    }

    pub(crate) fn encoded_len(&self) -> usize {
        2 + self.raw.len()
    }

    pub(crate) fn write(&self, out: &mut BytesMut) {
        out.put_i16(self.len() as i16);
        out.put_slice(self.raw);
    }

    /// Writes a count and codes from a slice, for building messages.
    pub(crate) fn write_codes(out: &mut BytesMut, codes: &[i16]) {
        out.put_i16(i16::try_from(codes.len()).unwrap_or(i16::MAX));
        for code in codes {
            out.put_i16(*code);
        }
    }
}

/// An `Int16` count followed by that many length-prefixed values (-1 = NULL), as in DataRow,
/// Bind and FunctionCall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Values<'a> {
    count: u16,
    raw: &'a [u8],
}

impl<'a> Values<'a> {
    #[inline]
    pub(crate) fn read(reader: &mut Reader<'a>) -> Result<Self, ProtocolError> {
        let count = reader.i16()?;
        if count < 0 {
            return Err(reader.invalid("value count"));
        }
        let raw = take_values(reader, count as usize)?;
        Ok(Self {
            count: count as u16,
            raw,
        })
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The values in order; `None` is SQL NULL.
    pub fn iter(&self) -> ValuesIter<'a> {
        ValuesIter {
            left: self.count,
            rest: self.raw,
        }
    }

    /// The encoded values after the count, as received.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    pub(crate) fn encoded_len(&self) -> usize {
        2 + self.raw.len()
    }

    pub(crate) fn write(&self, out: &mut BytesMut) {
        out.put_u16(self.count);
        out.put_slice(self.raw);
    }

    /// Writes a count and values from a slice, for building messages.
    pub(crate) fn write_values(out: &mut BytesMut, values: &[Option<&[u8]>]) {
        out.put_i16(i16::try_from(values.len()).unwrap_or(i16::MAX));
        for value in values {
            put_nullable_value(out, *value);
        }
    }

    pub(crate) fn values_len(values: &[Option<&[u8]>]) -> usize {
        2 + values
            .iter()
            .map(|v| 4 + v.map_or(0, <[u8]>::len))
            .sum::<usize>()
    }
}

/// Iterator over [`Values`]; the decoder validated every length, so it cannot fail.
#[derive(Debug, Clone)]
pub struct ValuesIter<'a> {
    left: u16,
    rest: &'a [u8],
}

impl<'a> Iterator for ValuesIter<'a> {
    type Item = Option<&'a [u8]>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let mut reader = Reader::new(self.rest, "values");
        let value = reader.nullable_value().ok()?;
        self.rest = reader.rest();
        Some(value)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

impl ExactSizeIterator for ValuesIter<'_> {}

/// An `Int16` count followed by that many `Int32` type OIDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Oids<'a> {
    raw: &'a [u8],
}

impl<'a> Oids<'a> {
    pub(crate) fn read(reader: &mut Reader<'a>) -> Result<Self, ProtocolError> {
        let count = reader.i16()?;
        if count < 0 {
            return Err(reader.invalid("type count"));
        }
        Ok(Self {
            raw: reader.bytes(count as usize * 4)?,
        })
    }

    pub fn len(&self) -> usize {
        self.raw.len() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.raw
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }

    pub(crate) fn encoded_len(&self) -> usize {
        2 + self.raw.len()
    }

    pub(crate) fn write(&self, out: &mut BytesMut) {
        out.put_i16(self.len() as i16);
        out.put_slice(self.raw);
    }

    /// Writes a count and OIDs from a slice, for building messages.
    pub(crate) fn write_oids(out: &mut BytesMut, oids: &[u32]) {
        out.put_i16(i16::try_from(oids.len()).unwrap_or(i16::MAX));
        for oid in oids {
            out.put_u32(*oid);
        }
    }
}
