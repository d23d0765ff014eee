//! Decoding any typed server message by its type byte.

use bytes::BytesMut;

use crate::codes::backend as code;
use crate::error::ProtocolError;
use crate::messages::backend::*;
use crate::messages::{CopyData, CopyDone, Message, split_frame};

/// Any typed message a server sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendMessage<'a> {
    Authentication(Authentication<'a>),
    BackendKeyData(BackendKeyData<'a>),
    BindComplete(BindComplete),
    CloseComplete(CloseComplete),
    CommandComplete(CommandComplete<'a>),
    CopyData(CopyData<'a>),
    CopyDone(CopyDone),
    CopyInResponse(CopyInResponse<'a>),
    CopyOutResponse(CopyOutResponse<'a>),
    CopyBothResponse(CopyBothResponse<'a>),
    DataRow(DataRow<'a>),
    EmptyQueryResponse(EmptyQueryResponse),
    ErrorResponse(ErrorResponse<'a>),
    FunctionCallResponse(FunctionCallResponse<'a>),
    NegotiateProtocolVersion(NegotiateProtocolVersion<'a>),
    NoData(NoData),
    NoticeResponse(NoticeResponse<'a>),
    NotificationResponse(NotificationResponse<'a>),
    ParameterDescription(ParameterDescription<'a>),
    ParameterStatus(ParameterStatus<'a>),
    ParseComplete(ParseComplete),
    PortalSuspended(PortalSuspended),
    ReadyForQuery(ReadyForQuery),
    RowDescription(RowDescription<'a>),
}

/// Forwards a method to the message inside every variant.
macro_rules! each_variant {
    ($self:ident, $m:ident => $body:expr) => {
        match $self {
            Self::Authentication($m) => $body,
            Self::BackendKeyData($m) => $body,
            Self::BindComplete($m) => $body,
            Self::CloseComplete($m) => $body,
            Self::CommandComplete($m) => $body,
            Self::CopyData($m) => $body,
            Self::CopyDone($m) => $body,
            Self::CopyInResponse($m) => $body,
            Self::CopyOutResponse($m) => $body,
            Self::CopyBothResponse($m) => $body,
            Self::DataRow($m) => $body,
            Self::EmptyQueryResponse($m) => $body,
            Self::ErrorResponse($m) => $body,
            Self::FunctionCallResponse($m) => $body,
            Self::NegotiateProtocolVersion($m) => $body,
            Self::NoData($m) => $body,
            Self::NoticeResponse($m) => $body,
            Self::NotificationResponse($m) => $body,
            Self::ParameterDescription($m) => $body,
            Self::ParameterStatus($m) => $body,
            Self::ParseComplete($m) => $body,
            Self::PortalSuspended($m) => $body,
            Self::ReadyForQuery($m) => $body,
            Self::RowDescription($m) => $body,
        }
    };
}

/// The type byte of a message type, for use in a match.
fn code_of<'a, M: Message<'a>>(_: &M) -> u8 {
    M::CODE
}

impl<'a> BackendMessage<'a> {
    /// Decodes a whole frame (type byte, length, body).
    pub fn decode(frame: &'a [u8]) -> Result<Self, ProtocolError> {
        let (code, body) = split_frame(frame)?;
        Self::decode_body(code, body)
    }

    /// Decodes a body given its type byte.
    pub fn decode_body(code: u8, body: &'a [u8]) -> Result<Self, ProtocolError> {
        Ok(match code {
            code::AUTHENTICATION => Self::Authentication(Message::decode_body(body)?),
            code::BACKEND_KEY_DATA => Self::BackendKeyData(Message::decode_body(body)?),
            code::BIND_COMPLETE => Self::BindComplete(Message::decode_body(body)?),
            code::CLOSE_COMPLETE => Self::CloseComplete(Message::decode_body(body)?),
            code::COMMAND_COMPLETE => Self::CommandComplete(Message::decode_body(body)?),
            code::COPY_DATA => Self::CopyData(Message::decode_body(body)?),
            code::COPY_DONE => Self::CopyDone(Message::decode_body(body)?),
            code::COPY_IN_RESPONSE => Self::CopyInResponse(Message::decode_body(body)?),
            code::COPY_OUT_RESPONSE => Self::CopyOutResponse(Message::decode_body(body)?),
            code::COPY_BOTH_RESPONSE => Self::CopyBothResponse(Message::decode_body(body)?),
            code::DATA_ROW => Self::DataRow(Message::decode_body(body)?),
            code::EMPTY_QUERY_RESPONSE => Self::EmptyQueryResponse(Message::decode_body(body)?),
            code::ERROR_RESPONSE => Self::ErrorResponse(Message::decode_body(body)?),
            code::FUNCTION_CALL_RESPONSE => Self::FunctionCallResponse(Message::decode_body(body)?),
            code::NEGOTIATE_PROTOCOL_VERSION => {
                Self::NegotiateProtocolVersion(Message::decode_body(body)?)
            }
            code::NO_DATA => Self::NoData(Message::decode_body(body)?),
            code::NOTICE_RESPONSE => Self::NoticeResponse(Message::decode_body(body)?),
            code::NOTIFICATION_RESPONSE => Self::NotificationResponse(Message::decode_body(body)?),
            code::PARAMETER_DESCRIPTION => Self::ParameterDescription(Message::decode_body(body)?),
            code::PARAMETER_STATUS => Self::ParameterStatus(Message::decode_body(body)?),
            code::PARSE_COMPLETE => Self::ParseComplete(Message::decode_body(body)?),
            code::PORTAL_SUSPENDED => Self::PortalSuspended(Message::decode_body(body)?),
            code::READY_FOR_QUERY => Self::ReadyForQuery(Message::decode_body(body)?),
            code::ROW_DESCRIPTION => Self::RowDescription(Message::decode_body(body)?),
            _ => return Err(ProtocolError::UnknownCode { code }),
        })
    }

    pub fn code(&self) -> u8 {
        each_variant!(self, m => code_of(m))
    }

    pub fn encode(&self, out: &mut BytesMut) {
        each_variant!(self, m => m.encode(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_by_code_and_re_encodes() {
        let mut out = BytesMut::new();
        ReadyForQuery {
            status: TransactionStatus::Idle,
        }
        .encode(&mut out);
        let message = BackendMessage::decode(&out).unwrap();
        assert_eq!(message.code(), b'Z');
        let mut again = BytesMut::new();
        message.encode(&mut again);
        assert_eq!(again, out);
        assert!(BackendMessage::decode(b"Z\0\0\0\x05").is_err());
    }
}
