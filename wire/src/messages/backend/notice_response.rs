//! NoticeResponse: a notice or warning as typed fields; see [`crate::error_fields`] for the
//! builder and the field accessors.

use bytes::BytesMut;

use crate::codec::put_message;
use crate::codes::backend::NOTICE_RESPONSE;
use crate::error::ProtocolError;
use crate::error_fields::ErrorFields;
use crate::messages::Message;

/// NoticeResponse ('N').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoticeResponse<'a> {
    pub fields: ErrorFields<'a>,
}

impl<'a> Message<'a> for NoticeResponse<'a> {
    const CODE: u8 = NOTICE_RESPONSE;
    const NAME: &'static str = "NoticeResponse";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        ErrorFields::decode(body, Self::NAME).map(|fields| Self { fields })
    }

    fn encode(&self, out: &mut BytesMut) {
        put_message(out, NOTICE_RESPONSE, &[self.fields.raw()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error_fields::{ErrorNotice, Severity};
    use crate::messages::testing::{prefixes_fail, round_trip};
    use crate::sqlstate;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip_any(message in "[^\u{0}]{0,40}", detail in proptest::option::of("[^\u{0}]{0,40}")) {
            let mut report = ErrorNotice::new(Severity::Warning, sqlstate::WARNING, &message);
            if let Some(detail) = &detail {
                report = report.detail(detail);
            }
            let mut out = BytesMut::new();
            report.encode_notice(&mut out);
            let decoded = NoticeResponse::decode_frame(&out).unwrap();
            prop_assert_eq!(decoded.fields.message(), Some(message.as_bytes()));
            prop_assert_eq!(decoded.fields.detail(), detail.as_deref().map(str::as_bytes));
            prop_assert_eq!(decoded.fields.code(), Some(sqlstate::WARNING));
            let mut again = BytesMut::new();
            round_trip(&decoded, &mut again);
            prefixes_fail::<NoticeResponse>(&out);
        }
    }
}
