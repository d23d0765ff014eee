//! Decoding any typed client message by its type byte.

use bytes::BytesMut;

use crate::codes::frontend as code;
use crate::error::ProtocolError;
use crate::messages::frontend::*;
use crate::messages::{CopyData, CopyDone, Message, split_frame};

/// Any typed message a client sends after startup.
///
/// 'p' is ambiguous (password, SASL initial response, SASL response, GSS response): it
/// decodes to [`FrontendMessage::AuthResponse`] with the raw body, which the authentication
/// state machine decodes with the right type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontendMessage<'a> {
    Bind(Bind<'a>),
    Close(Close<'a>),
    CopyData(CopyData<'a>),
    CopyDone(CopyDone),
    CopyFail(CopyFail<'a>),
    Describe(Describe<'a>),
    Execute(Execute<'a>),
    Flush(Flush),
    FunctionCall(FunctionCall<'a>),
    Parse(Parse<'a>),
    AuthResponse { body: &'a [u8] },
    Query(Query<'a>),
    Sync(Sync),
    Terminate(Terminate),
}

impl<'a> FrontendMessage<'a> {
    /// Decodes a whole frame (type byte, length, body).
    pub fn decode(frame: &'a [u8]) -> Result<Self, ProtocolError> {
        let (code, body) = split_frame(frame)?;
        Self::decode_body(code, body)
    }

    /// Decodes a body given its type byte.
    pub fn decode_body(code: u8, body: &'a [u8]) -> Result<Self, ProtocolError> {
        Ok(match code {
            code::BIND => Self::Bind(Bind::decode_body(body)?),
            code::CLOSE => Self::Close(Close::decode_body(body)?),
            code::COPY_DATA => Self::CopyData(CopyData::decode_body(body)?),
            code::COPY_DONE => Self::CopyDone(CopyDone::decode_body(body)?),
            code::COPY_FAIL => Self::CopyFail(CopyFail::decode_body(body)?),
            code::DESCRIBE => Self::Describe(Describe::decode_body(body)?),
            code::EXECUTE => Self::Execute(Execute::decode_body(body)?),
            code::FLUSH => Self::Flush(Flush::decode_body(body)?),
            code::FUNCTION_CALL => Self::FunctionCall(FunctionCall::decode_body(body)?),
            code::PARSE => Self::Parse(Parse::decode_body(body)?),
            code::AUTH_RESPONSE => Self::AuthResponse { body },
            code::QUERY => Self::Query(Query::decode_body(body)?),
            code::SYNC => Self::Sync(Sync::decode_body(body)?),
            code::TERMINATE => Self::Terminate(Terminate::decode_body(body)?),
            _ => return Err(ProtocolError::UnknownCode { code }),
        })
    }

    pub fn code(&self) -> u8 {
        match self {
            Self::Bind(_) => code::BIND,
            Self::Close(_) => code::CLOSE,
            Self::CopyData(_) => code::COPY_DATA,
            Self::CopyDone(_) => code::COPY_DONE,
            Self::CopyFail(_) => code::COPY_FAIL,
            Self::Describe(_) => code::DESCRIBE,
            Self::Execute(_) => code::EXECUTE,
            Self::Flush(_) => code::FLUSH,
            Self::FunctionCall(_) => code::FUNCTION_CALL,
            Self::Parse(_) => code::PARSE,
            Self::AuthResponse { .. } => code::AUTH_RESPONSE,
            Self::Query(_) => code::QUERY,
            Self::Sync(_) => code::SYNC,
            Self::Terminate(_) => code::TERMINATE,
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        match self {
            Self::Bind(m) => m.encode(out),
            Self::Close(m) => m.encode(out),
            Self::CopyData(m) => m.encode(out),
            Self::CopyDone(m) => m.encode(out),
            Self::CopyFail(m) => m.encode(out),
            Self::Describe(m) => m.encode(out),
            Self::Execute(m) => m.encode(out),
            Self::Flush(m) => m.encode(out),
            Self::FunctionCall(m) => m.encode(out),
            Self::Parse(m) => m.encode(out),
            Self::AuthResponse { body } => {
                crate::codec::put_message(out, code::AUTH_RESPONSE, &[body])
            }
            Self::Query(m) => m.encode(out),
            Self::Sync(m) => m.encode(out),
            Self::Terminate(m) => m.encode(out),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_by_code_and_rejects_unknown() {
        let mut out = BytesMut::new();
        Query { sql: b"SELECT 1" }.encode(&mut out);
        Sync.encode(&mut out);
        let first = FrontendMessage::decode(&out[..14]).unwrap();
        assert_eq!(first, FrontendMessage::Query(Query { sql: b"SELECT 1" }));
        assert_eq!(
            FrontendMessage::decode(&out[14..]).unwrap(),
            FrontendMessage::Sync(Sync)
        );
        assert_eq!(
            FrontendMessage::decode(b"?\0\0\0\x04"),
            Err(ProtocolError::UnknownCode { code: b'?' })
        );
        let mut again = BytesMut::new();
        first.encode(&mut again);
        assert_eq!(&again[..], &out[..14]);
    }
}
