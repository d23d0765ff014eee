//! CancelRequest: sent on a new connection to cancel the query running on another one,
//! identified by the process id and secret key from BackendKeyData.
//!
//! Protocol 3.0 keys are 4 bytes; protocol 3.2 allows up to 256. We negotiate clients down to
//! 3.0 (see the crate doc), but accept any length in that range so a cancel is never a
//! protocol error merely for its key size.

use bytes::{BufMut, BytesMut};

use crate::codec::Reader;
use crate::error::ProtocolError;

/// Longest secret key protocol 3.2 allows.
pub(crate) const MAX_CANCEL_KEY_LEN: usize = 256;

/// CancelRequest: length, the request code 80877102, process id, secret key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CancelRequest<'a> {
    pub process_id: u32,
    pub secret_key: &'a [u8],
}

impl<'a> CancelRequest<'a> {
    pub const CODE: u32 = 80_877_102;

    /// Decodes the body after the length word.
    pub fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, "CancelRequest");
        if reader.u32()? != Self::CODE {
            return Err(reader.invalid("request code"));
        }
        let process_id = reader.u32()?;
        let secret_key = reader.rest();
        if !(4..=MAX_CANCEL_KEY_LEN).contains(&secret_key.len()) {
            return Err(ProtocolError::InvalidValue {
                message: "CancelRequest",
                field: "secret key length",
            });
        }
        Ok(Self {
            process_id,
            secret_key,
        })
    }

    /// Appends the packet, length word included.
    pub fn encode(&self, out: &mut BytesMut) {
        let len = 12 + self.secret_key.len();
        out.reserve(len);
        out.put_u32(len as u32);
        out.put_u32(Self::CODE);
        out.put_u32(self.process_id);
        out.put_slice(self.secret_key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::frontend::StartupPacket;
    use proptest::prelude::*;

    #[test]
    fn fixed_bytes_and_key_bounds() {
        let mut out = BytesMut::new();
        CancelRequest {
            process_id: 42,
            secret_key: &7u32.to_be_bytes(),
        }
        .encode(&mut out);
        assert_eq!(
            &out[..],
            &[0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e, 0, 0, 0, 42, 0, 0, 0, 7]
        );
        let mut short = BytesMut::new();
        CancelRequest {
            process_id: 1,
            secret_key: b"abc",
        }
        .encode(&mut short);
        assert!(StartupPacket::decode(&short).is_err());
    }

    proptest! {
        #[test]
        fn round_trip_any(pid: u32, key in proptest::collection::vec(any::<u8>(), 4..=256)) {
            let message = CancelRequest { process_id: pid, secret_key: &key };
            let mut out = BytesMut::new();
            message.encode(&mut out);
            prop_assert_eq!(StartupPacket::decode(&out).unwrap(), StartupPacket::Cancel(message));
        }
    }
}
