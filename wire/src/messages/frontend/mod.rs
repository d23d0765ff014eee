//! Messages a client sends: the startup-phase packets (no type byte) and the typed messages.

pub mod bind;
pub mod cancel_request;
pub mod close;
pub(crate) mod copy_fail;
pub mod describe;
pub mod execute;
pub mod flush;
pub mod function_call;
pub(crate) mod gssenc_request;
pub mod parse;
pub mod password_message;
pub mod query;
pub(crate) mod sasl_initial_response;
pub(crate) mod sasl_response;
pub(crate) mod ssl_request;
pub mod startup;
pub mod sync;
pub mod terminate;

pub use bind::Bind;
pub use cancel_request::CancelRequest;
pub use close::Close;
pub use copy_fail::CopyFail;
pub use describe::Describe;
pub use execute::Execute;
pub use flush::Flush;
pub use function_call::FunctionCall;
pub use gssenc_request::GssEncRequest;
pub use parse::Parse;
pub use password_message::PasswordMessage;
pub use query::Query;
pub use sasl_initial_response::SaslInitialResponse;
pub(crate) use sasl_response::SaslResponse;
pub use ssl_request::SslRequest;
pub use startup::StartupParams;
pub use startup::{ProtocolVersion, StartupMessage, StartupPacket};
pub use sync::Sync;
pub use terminate::Terminate;

/// Whether Describe and Close address a prepared statement or a portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Statement,
    Portal,
}

impl Target {
    pub(crate) fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            b'S' => Some(Self::Statement),
            b'P' => Some(Self::Portal),
            _ => None,
        }
    }

    pub(crate) fn byte(self) -> u8 {
        match self {
            Self::Statement => b'S',
            Self::Portal => b'P',
        }
    }

    /// Decodes the body Describe and Close share: a target byte and a name.
    pub(crate) fn decode_named<'a>(
        body: &'a [u8],
        message: &'static str,
    ) -> Result<(Target, &'a [u8]), crate::error::ProtocolError> {
        let mut reader = crate::codec::Reader::new(body, message);
        let target = Target::from_byte(reader.u8()?).ok_or(reader.invalid("target"))?;
        let name = reader.cstr()?;
        reader.finish()?;
        Ok((target, name))
    }

    /// Appends a Describe or Close (`code`) addressing `name`.
    pub(crate) fn encode_named(self, out: &mut bytes::BytesMut, code: u8, name: &[u8]) {
        use bytes::BufMut;
        let at = crate::codec::begin_message(out, code, name.len() + 2);
        out.put_u8(self.byte());
        crate::codec::put_cstr(out, name);
        crate::codec::end_message(out, at);
    }
}
