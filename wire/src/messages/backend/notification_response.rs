//! NotificationResponse: a NOTIFY delivered to a listening session.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::NOTIFICATION_RESPONSE;
use crate::error::ProtocolError;
use crate::messages::Message;

/// NotificationResponse ('A').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotificationResponse<'a> {
    pub process_id: u32,
    pub channel: &'a [u8],
    pub payload: &'a [u8],
}

impl<'a> Message<'a> for NotificationResponse<'a> {
    const CODE: u8 = NOTIFICATION_RESPONSE;
    const NAME: &'static str = "NotificationResponse";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let process_id = reader.u32()?;
        let channel = reader.cstr()?;
        let payload = reader.cstr()?;
        reader.finish()?;
        Ok(Self {
            process_id,
            channel,
            payload,
        })
    }

    fn encode(&self, out: &mut BytesMut) {
        let hint = 6 + self.channel.len() + self.payload.len();
        let at = begin_message(out, NOTIFICATION_RESPONSE, hint);
        out.put_u32(self.process_id);
        put_cstr(out, self.channel);
        put_cstr(out, self.payload);
        end_message(out, at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::{prefixes_fail, round_trip};
    use proptest::collection::vec;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(pid: u32, channel in vec(1u8..=255, 0..20), payload in vec(1u8..=255, 0..40)) {
            let mut out = BytesMut::new();
            round_trip(&NotificationResponse { process_id: pid, channel: &channel, payload: &payload }, &mut out);
            prefixes_fail::<NotificationResponse>(&out);
        }
    }
}
