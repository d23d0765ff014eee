//! Byte-level reading and writing shared by every message: big-endian integers, C strings,
//! and the length word patched in after a body is written.
//!
//! Reading never copies: every slice it returns borrows from the frame. Writing appends to the
//! caller's `BytesMut` and reserves once per message.

use bytes::{BufMut, BytesMut};

use crate::error::ProtocolError;

/// A cursor over a message body that fails with a [`ProtocolError`] naming the message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'a> {
    rest: &'a [u8],
    message: &'static str,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(body: &'a [u8], message: &'static str) -> Self {
        Self {
            rest: body,
            message,
        }
    }

    pub(crate) fn truncated(&self) -> ProtocolError {
        ProtocolError::Truncated {
            message: self.message,
        }
    }

    pub(crate) fn invalid(&self, field: &'static str) -> ProtocolError {
        ProtocolError::InvalidValue {
            message: self.message,
            field,
        }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub(crate) fn bytes(&mut self, len: usize) -> Result<&'a [u8], ProtocolError> {
        if self.rest.len() < len {
            return Err(self.truncated());
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let bytes = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.array::<1>()?[0])
    }

    pub(crate) fn i16(&mut self) -> Result<i16, ProtocolError> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    pub(crate) fn i32(&mut self) -> Result<i32, ProtocolError> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    pub(crate) fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    /// A NUL-terminated string, returned without its NUL.
    pub(crate) fn cstr(&mut self) -> Result<&'a [u8], ProtocolError> {
        // An empty string (the unnamed statement or portal) without memchr's set-up.
        let nul = match self.rest.first() {
            Some(0) => Some(0),
            _ => memchr::memchr(0, self.rest),
        };
        let Some(nul) = nul else {
            return Err(ProtocolError::MissingNul {
                message: self.message,
            });
        };
        let value = &self.rest[..nul];
        self.rest = &self.rest[nul + 1..];
        Ok(value)
    }

    /// A NUL-terminated string that must be UTF-8.
    pub(crate) fn cstr_utf8(&mut self) -> Result<&'a str, ProtocolError> {
        let raw = self.cstr()?;
        core::str::from_utf8(raw).map_err(|_| ProtocolError::InvalidUtf8 {
            message: self.message,
        })
    }

    /// A length-prefixed value where -1 means SQL NULL.
    pub(crate) fn nullable_value(&mut self) -> Result<Option<&'a [u8]>, ProtocolError> {
        match self.i32()? {
            -1 => Ok(None),
            len if len < 0 => Err(self.invalid("value length")),
            len => Ok(Some(self.bytes(len as usize)?)),
        }
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        core::mem::take(&mut self.rest)
    }

    /// Asserts the body is fully consumed.
    pub(crate) fn finish(self) -> Result<(), ProtocolError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ProtocolError::TrailingBytes {
                message: self.message,
            })
        }
    }
}

/// Writes a message header with a placeholder length; returns the offset to pass to
/// [`end_message`]. `body_len_hint` sizes the single reservation.
pub(crate) fn begin_message(out: &mut BytesMut, code: u8, body_len_hint: usize) -> usize {
    out.reserve(5 + body_len_hint);
    out.put_u8(code);
    let length_at = out.len();
    out.put_u32(0);
    length_at
}

/// Patches the length word written by [`begin_message`] (or by a startup packet writer).
pub(crate) fn end_message(out: &mut BytesMut, length_at: usize) {
    let len = out.len() - length_at;
    debug_assert!(
        len <= i32::MAX as usize,
        "encoded message longer than the protocol allows"
    );
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    out[length_at..length_at + 4].copy_from_slice(&len.to_be_bytes());
}

/// Writes a whole message whose body is `parts` concatenated.
pub(crate) fn put_message(out: &mut BytesMut, code: u8, parts: &[&[u8]]) {
    let body_len: usize = parts.iter().map(|p| p.len()).sum();
    let at = begin_message(out, code, body_len);
    for part in parts {
        out.put_slice(part);
    }
    end_message(out, at);
}

pub(crate) fn put_cstr(out: &mut BytesMut, value: &[u8]) {
    debug_assert!(!value.contains(&0), "C string field contains NUL");
    out.put_slice(value);
    out.put_u8(0);
}

/// Writes a length-prefixed value, -1 for SQL NULL.
pub(crate) fn put_nullable_value(out: &mut BytesMut, value: Option<&[u8]>) {
    match value {
        None => out.put_i32(-1),
        Some(v) => {
            out.put_i32(i32::try_from(v.len()).unwrap_or(i32::MAX));
            out.put_slice(v);
        }
    }
}

/// Walks `count` length-prefixed values, returning the bytes they occupy.
#[inline]
pub(crate) fn take_values<'a>(
    reader: &mut Reader<'a>,
    count: usize,
) -> Result<&'a [u8], ProtocolError> {
    let start = *reader;
    let before = reader.remaining();
    for _ in 0..count {
        reader.nullable_value()?;
    }
    let used = before - reader.remaining();
    let mut start = start;
    start.bytes(used)
}
