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
    pub fn rows(&self) -> Option<u64> {
        let last = self.tag.rsplit(|b| *b == b' ').next()?;
        if last.len() == self.tag.len() {
            return None;
        }
        core::str::from_utf8(last).ok()?.parse().ok()
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
    }

    proptest! {
        #[test]
        fn round_trip_any(tag in proptest::collection::vec(1u8..=255, 0..40)) {
            let mut out = BytesMut::new();
            round_trip(&CommandComplete { tag: &tag }, &mut out);
            prefixes_fail::<CommandComplete>(&out);
        }
    }
}
