//! ReadyForQuery: the server finished a Query or a Sync and reports the transaction status.
//! Transaction pooling decides on this status whether a server can go back to the pool.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message};
use crate::codes::backend::READY_FOR_QUERY;
use crate::error::ProtocolError;
use crate::messages::Message;

/// The backend's transaction status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransactionStatus {
    /// 'I': not in a transaction block.
    Idle,
    /// 'T': in a transaction block.
    InTransaction,
    /// 'E': in a failed transaction block; queries are rejected until it ends.
    Failed,
}

impl TransactionStatus {
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            b'I' => Some(Self::Idle),
            b'T' => Some(Self::InTransaction),
            b'E' => Some(Self::Failed),
            _ => None,
        }
    }

    pub fn byte(self) -> u8 {
        match self {
            Self::Idle => b'I',
            Self::InTransaction => b'T',
            Self::Failed => b'E',
        }
    }
}

/// ReadyForQuery ('Z').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyForQuery {
    pub status: TransactionStatus,
}

impl<'a> Message<'a> for ReadyForQuery {
    const CODE: u8 = READY_FOR_QUERY;
    const NAME: &'static str = "ReadyForQuery";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let status = TransactionStatus::from_byte(reader.u8()?).ok_or(reader.invalid("status"))?;
        reader.finish()?;
        Ok(Self { status })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, READY_FOR_QUERY, 1);
        out.put_u8(self.status.byte());
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};

    #[test]
    fn every_status_round_trips() {
        for (status, byte) in [
            (TransactionStatus::Idle, b'I'),
            (TransactionStatus::InTransaction, b'T'),
            (TransactionStatus::Failed, b'E'),
        ] {
            let mut out = BytesMut::new();
            round_trip(&ReadyForQuery { status }, &mut out);
            assert_eq!(&out[..], &[b'Z', 0, 0, 0, 5, byte]);
            prefixes_fail::<ReadyForQuery>(&out);
        }
        assert!(ReadyForQuery::decode_body(b"X").is_err());
    }
}
