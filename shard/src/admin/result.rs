//! Encoding of one admin result set: a RowDescription of text columns, the DataRows, and a
//! CommandComplete, appended to the session's output buffer.
//!
//! Every admin column is text (type `text`, OID 25, text format), which is what psql and
//! drivers display without further metadata, as PgBouncer's console does.

use bytes::BytesMut;
use pgtier_wire::messages::Message;
use pgtier_wire::messages::backend::row_description::Field;
use pgtier_wire::messages::backend::{CommandComplete, DataRow, RowDescription};

/// OID of PostgreSQL's `text` type.
pub const TEXT_OID: u32 = 25;

/// Command tag of every admin result, as PgBouncer sends it.
pub const SHOW_TAG: &[u8] = b"SHOW";

/// Appends the RowDescription of `columns`, all text.
pub fn encode_header(out: &mut BytesMut, columns: &[&str]) {
    let fields: Vec<Field<'_>> = columns
        .iter()
        .map(|name| Field {
            name: name.as_bytes(),
            table_oid: 0,
            column_id: 0,
            type_oid: TEXT_OID,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        })
        .collect();
    RowDescription::encode_parts(out, &fields);
}

/// Appends one DataRow; `None` is SQL NULL.
pub fn encode_row(out: &mut BytesMut, values: &[Option<String>]) {
    let values: Vec<Option<&[u8]>> = values
        .iter()
        .map(|value| value.as_deref().map(str::as_bytes))
        .collect();
    DataRow::encode_parts(out, &values);
}

/// Appends the CommandComplete that ends a result set.
pub fn encode_complete(out: &mut BytesMut) {
    CommandComplete { tag: SHOW_TAG }.encode(out);
}
