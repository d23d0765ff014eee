//! PasswordMessage: a cleartext or MD5-hashed password answering an authentication request.
//!
//! Shares the type byte 'p' with SASLInitialResponse and SASLResponse; the authentication
//! state decides which decoder applies.

use bytes::BytesMut;

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::frontend::AUTH_RESPONSE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// PasswordMessage ('p').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PasswordMessage<'a> {
    /// Cleartext, or `md5` followed by 32 hex digits.
    pub password: &'a [u8],
}

impl<'a> Message<'a> for PasswordMessage<'a> {
    const CODE: u8 = AUTH_RESPONSE;
    const NAME: &'static str = "PasswordMessage";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let password = reader.cstr()?;
        reader.finish()?;
        Ok(Self { password })
    }

    fn encode(&self, out: &mut BytesMut) {
        let at = begin_message(out, AUTH_RESPONSE, self.password.len() + 1);
        put_cstr(out, self.password);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(password in proptest::collection::vec(1u8..=255, 0..64)) {
            let mut out = BytesMut::new();
            round_trip(&PasswordMessage { password: &password }, &mut out);
            prefixes_fail::<PasswordMessage>(&out);
        }
    }
}
