//! BackendKeyData: the process id and secret key a client needs to cancel its queries.
//!
//! Under protocol 3.0 the key is exactly 4 bytes; 3.2 allows up to 256. We decode both so a
//! proxy speaking 3.0 to clients can still read what a server sends.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message};
use crate::codes::backend::BACKEND_KEY_DATA;
use crate::error::ProtocolError;
use crate::messages::Message;
use crate::messages::frontend::cancel_request::MAX_CANCEL_KEY_LEN;

/// BackendKeyData ('K').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackendKeyData<'a> {
    pub process_id: u32,
    pub secret_key: &'a [u8],
}

impl<'a> Message<'a> for BackendKeyData<'a> {
    const CODE: u8 = BACKEND_KEY_DATA;
    const NAME: &'static str = "BackendKeyData";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let process_id = reader.u32()?;
        let secret_key = reader.rest();
        if !(4..=MAX_CANCEL_KEY_LEN).contains(&secret_key.len()) {
            return Err(ProtocolError::InvalidValue {
                message: Self::NAME,
                field: "secret key length",
            });
        }
        Ok(Self {
            process_id,
            secret_key,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, BACKEND_KEY_DATA, 4 + self.secret_key.len());
        out.put_u32(self.process_id);
        out.put_slice(self.secret_key);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(pid: u32, key in proptest::collection::vec(any::<u8>(), 4..=256)) {
            let mut out = BytesMut::new();
            round_trip(&BackendKeyData { process_id: pid, secret_key: &key }, &mut out);
            for cut in 0..8 {
                prop_assert!(BackendKeyData::decode_body(&out[5..5 + cut]).is_err());
            }
        }
    }
}
