//! CommandComplete: a statement finished; the tag says which and how many rows.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::COMMAND_COMPLETE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// CommandComplete ('C').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommandComplete<'a> {
    /// E.g. `SELECT 3`, `INSERT 0 1`, `BEGIN`.
    pub tag: &'a [u8],
}

impl<'a> CommandComplete<'a> {
    /// The row count at the end of the tag, if the command reports one.
    /// Read on every answer, so digit by digit rather than through `str::parse`.
    pub fn rows(&self) -> Option<u64> {
        let space = self.tag.iter().rposition(|&b| b == b' ')?;
        let digits = &self.tag[space + 1..];
        if digits.is_empty() {
            return None;
        }
        digits.iter().try_fold(0u64, |rows, &digit| {
            if !digit.is_ascii_digit() {
                return None;
            }
            rows.checked_mul(10)?.checked_add(u64::from(digit - b'0'))
        })
    }
}

impl<'a> Message<'a> for CommandComplete<'a> {
    const CODE: u8 = COMMAND_COMPLETE;
    const NAME: &'static str = "CommandComplete";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let tag = reader.cstr()?;
        reader.finish()?;
        Ok(Self { tag })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, COMMAND_COMPLETE, self.tag.len() + 1);
        put_cstr(out, self.tag);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::prelude::*;

    #[test]
    fn row_counts() {
        assert_eq!(CommandComplete { tag: b"SELECT 3" }.rows(), Some(3));
        assert_eq!(
            CommandComplete {
                tag: b"INSERT 0 12"
            }
            .rows(),
            Some(12)
        );
        assert_eq!(CommandComplete { tag: b"BEGIN" }.rows(), None);
        assert_eq!(CommandComplete { tag: b"SELECT " }.rows(), None);
        assert_eq!(CommandComplete { tag: b"SELECT 1x" }.rows(), None);
        assert_eq!(
            CommandComplete {
                tag: b"SELECT 18446744073709551615"
            }
            .rows(),
            Some(u64::MAX)
        );
        assert_eq!(
            CommandComplete {
                tag: b"SELECT 18446744073709551616"
            }
            .rows(),
            None,
            "past u64"
        );
    }

    proptest! {
        /// The count as `str::parse` reads it, for tags of digits and spaces.
        #[test]
        fn rows_as_parse_reads_them(tag in "[A-Z]{1,6}( [0-9]{0,21}){0,2}") {
            let last = tag.rsplit(' ').next().unwrap_or_default();
            let parsed = if last.len() == tag.len() { None } else { last.parse::<u64>().ok() };
            prop_assert_eq!(CommandComplete { tag: tag.as_bytes() }.rows(), parsed);
        }

        #[test]
        fn round_trip_any(tag in proptest::collection::vec(1u8..=255, 0..40)) {
            let mut out = BytesMut::new();
            round_trip(&CommandComplete { tag: &tag }, &mut out);
            prefixes_fail::<CommandComplete>(&out);
        }
    }
}
