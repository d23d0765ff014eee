//! Encoding of one admin result set: a RowDescription, the DataRows and a CommandComplete,
//! appended to the session's output buffer.
//!
//! Columns carry PostgreSQL types as PgBouncer's console declares them (`text`, `int4`,
//! `int8`, `numeric`, `bytea`), so drivers that map types (psycopg, JDBC, rust-postgres) get numbers
//! where PgBouncer gives numbers. Values are kept as text; a column the client asked for in
//! binary (Bind's result formats) is converted here.

use bytes::BytesMut;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::row_description::Field;
use pgtier_wire::messages::backend::{CommandComplete, DataRow, RowDescription};

/// Columns and rows of one result set.
pub(crate) struct ResultSet {
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    /// Columns with no rows (what pgtier has nothing to show for).
    pub(crate) fn empty(columns: Vec<Column>) -> ResultSet {
        ResultSet {
            columns,
            rows: Vec::new(),
        }
    }
}

/// Command tag of every admin result, as PgBouncer sends it.
pub(crate) const SHOW_TAG: &[u8] = b"SHOW";

/// A column's PostgreSQL type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ColumnType {
    Text,
    Int4,
    Int8,
    /// PgBouncer's type for every statistics figure.
    Numeric,
    Bytea,
}

impl ColumnType {
    /// The type's OID and length, as RowDescription states them.
    pub const fn oid_and_size(self) -> (u32, i16) {
        match self {
            ColumnType::Text => (25, -1),
            ColumnType::Int4 => (23, 4),
            ColumnType::Int8 => (20, 8),
            ColumnType::Numeric => (1700, -1),
            ColumnType::Bytea => (17, -1),
        }
    }
}

/// One column of a result set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColumnType,
}

/// A text column.
pub const fn text(name: &'static str) -> Column {
    Column {
        name,
        ty: ColumnType::Text,
    }
}

/// An `int4` column.
pub const fn int4(name: &'static str) -> Column {
    Column {
        name,
        ty: ColumnType::Int4,
    }
}

/// An `int8` column.
pub const fn int8(name: &'static str) -> Column {
    Column {
        name,
        ty: ColumnType::Int8,
    }
}

/// A `numeric` column.
pub const fn numeric(name: &'static str) -> Column {
    Column {
        name,
        ty: ColumnType::Numeric,
    }
}

/// A `bytea` column.
pub const fn bytea(name: &'static str) -> Column {
    Column {
        name,
        ty: ColumnType::Bytea,
    }
}

/// Text columns named `names`.
pub(crate) fn text_columns(names: &[&'static str]) -> Vec<Column> {
    names.iter().map(|name| text(name)).collect()
}

/// Bind's result format codes resolved per column (PostgreSQL's rule: none = all text, one =
/// every column, else one per column). `None` when the count fits neither.
pub(crate) fn resolve_formats(formats: &[i16], columns: usize) -> Option<Vec<i16>> {
    match formats.len() {
        0 => Some(vec![0; columns]),
        1 => Some(vec![formats[0]; columns]),
        n if n == columns => Some(formats.to_vec()),
        _ => None,
    }
}

/// Appends the RowDescription of `columns` with `formats` (one per column).
pub(crate) fn encode_header(out: &mut BytesMut, columns: &[Column], formats: &[i16]) {
    let fields: Vec<Field<'_>> = columns
        .iter()
        .enumerate()
        .map(|(index, column)| {
            let (type_oid, type_size) = column.ty.oid_and_size();
            Field {
                name: column.name.as_bytes(),
                table_oid: 0,
                column_id: 0,
                type_oid,
                type_size,
                type_modifier: -1,
                format: formats.get(index).copied().unwrap_or(0),
            }
        })
        .collect();
    RowDescription::encode_parts(out, &fields);
}

/// A text value in the binary form of its column's type.
fn binary(ty: ColumnType, value: &str) -> Vec<u8> {
    match ty {
        ColumnType::Int4 => value
            .parse::<i64>()
            .map(|n| i32::try_from(n).unwrap_or(i32::MAX).to_be_bytes().to_vec())
            .unwrap_or_else(|_| value.as_bytes().to_vec()),
        ColumnType::Int8 => value
            .parse::<i64>()
            .map(|n| n.to_be_bytes().to_vec())
            .unwrap_or_else(|_| value.as_bytes().to_vec()),
        ColumnType::Numeric => value
            .parse::<u64>()
            .map(numeric_binary)
            .unwrap_or_else(|_| value.as_bytes().to_vec()),
        ColumnType::Text | ColumnType::Bytea => value.as_bytes().to_vec(),
    }
}

/// The binary form of a non-negative whole `numeric` (the only kind the console sends):
/// digit count, weight, sign, display scale, then base-10000 digits, most significant first.
fn numeric_binary(mut value: u64) -> Vec<u8> {
    let mut digits = Vec::new();
    while value > 0 {
        digits.push((value % 10_000) as u16);
        value /= 10_000;
    }
    digits.reverse();
    let count = digits.len() as u16;
    let weight = count.saturating_sub(1);
    let mut out = Vec::with_capacity(8 + 2 * digits.len());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&weight.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    for digit in digits {
        out.extend_from_slice(&digit.to_be_bytes());
    }
    out
}

/// Appends one DataRow; `None` is SQL NULL; binary-format columns are converted.
pub(crate) fn encode_row(
    out: &mut BytesMut,
    columns: &[Column],
    formats: &[i16],
    values: &[Option<String>],
) {
    let encoded: Vec<Option<Vec<u8>>> = values
        .iter()
        .enumerate()
        .map(|(index, value)| {
            let value = value.as_deref()?;
            let ty = columns.get(index).map_or(ColumnType::Text, |c| c.ty);
            Some(if formats.get(index) == Some(&1) {
                binary(ty, value)
            } else {
                value.as_bytes().to_vec()
            })
        })
        .collect();
    let values: Vec<Option<&[u8]>> = encoded.iter().map(|v| v.as_deref()).collect();
    DataRow::encode_parts(out, &values);
}

/// Appends the CommandComplete that ends a result set.
pub(crate) fn encode_complete(out: &mut BytesMut) {
    CommandComplete { tag: SHOW_TAG }.encode(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_follow_postgresql_rules() {
        assert_eq!(resolve_formats(&[], 2), Some(vec![0, 0]));
        assert_eq!(resolve_formats(&[1], 3), Some(vec![1, 1, 1]));
        assert_eq!(resolve_formats(&[0, 1], 2), Some(vec![0, 1]));
        assert_eq!(resolve_formats(&[0, 1], 3), None);
    }

    #[test]
    fn binary_integers_are_big_endian() {
        assert_eq!(binary(ColumnType::Int4, "7"), vec![0, 0, 0, 7]);
        assert_eq!(binary(ColumnType::Int8, "-1"), vec![0xff; 8]);
        assert_eq!(binary(ColumnType::Text, "x"), b"x".to_vec());
    }

    #[test]
    fn binary_numerics_are_base_10000_digits() {
        assert_eq!(
            binary(ColumnType::Numeric, "0"),
            vec![0, 0, 0, 0, 0, 0, 0, 0]
        );
        // 123456789 = 1 | 2345 | 6789, weight 2.
        assert_eq!(
            binary(ColumnType::Numeric, "123456789"),
            vec![0, 3, 0, 2, 0, 0, 0, 0, 0, 1, 0x09, 0x29, 0x1a, 0x85]
        );
    }
}
