//! SSLRequest: asks the server to switch to TLS before the StartupMessage.
//!
//! The proxy answers 'N' (not supported) when it does not offer it; the client then continues
//! in the clear or closes, by its own sslmode/gssencmode.

use bytes::{BufMut, BytesMut};

use crate::codec::Reader;
use crate::error::ProtocolError;

/// SSLRequest: length 8 and the request code 80877103.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SslRequest;

impl SslRequest {
    pub const CODE: u32 = 80877103;

    /// Decodes the body after the length word.
    pub fn decode_body(body: &[u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, "SSLRequest");
        if reader.u32()? != Self::CODE {
            return Err(reader.invalid("request code"));
        }
        reader.finish()?;
        Ok(Self)
    }

    /// Appends the packet, length word included.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(8);
        out.put_u32(8);
        out.put_u32(Self::CODE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::frontend::StartupPacket;

    #[test]
    fn fixed_bytes_round_trip() {
        let mut out = BytesMut::new();
        SslRequest.encode(&mut out);
        assert_eq!(&out[..], &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
        assert_eq!(
            StartupPacket::decode(&out).unwrap(),
            StartupPacket::SslRequest
        );
        assert!(StartupPacket::decode(b"\0\0\0\x09\x04\xd2\x16\x2f\0").is_err());
    }
}
