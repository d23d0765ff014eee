//! Authentication: every server request of the authentication exchange, and its final Ok.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, begin_message, end_message, put_cstr};
use crate::codes::backend::AUTHENTICATION;
use crate::error::ProtocolError;
use crate::messages::Message;

/// Authentication ('R'), one variant per request code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authentication<'a> {
    /// 0: authentication succeeded.
    Ok,
    /// 2: Kerberos V5 (unsupported by PostgreSQL since 9.4, decoded for completeness).
    KerberosV5,
    /// 3: send the password in clear.
    CleartextPassword,
    /// 5: send `md5` + md5(md5(password + user) + salt).
    Md5Password { salt: [u8; 4] },
    /// 7: start GSSAPI.
    Gss,
    /// 8: GSSAPI or SSPI data.
    GssContinue { data: &'a [u8] },
    /// 9: start SSPI.
    Sspi,
    /// 10: start SASL with one of these mechanisms.
    Sasl { mechanisms: SaslMechanisms<'a> },
    /// 11: a SASL challenge (SCRAM's server-first-message).
    SaslContinue { data: &'a [u8] },
    /// 12: SASL outcome data (SCRAM's server-final-message).
    SaslFinal { data: &'a [u8] },
}

impl Authentication<'_> {
    /// Writes AuthenticationSASL listing `mechanisms`.
    pub fn encode_sasl(out: &mut BytesMut, mechanisms: &[&[u8]]) {
        let hint = 5 + mechanisms.iter().map(|m| m.len() + 1).sum::<usize>();
        let at = begin_message(out, AUTHENTICATION, hint);
        out.put_u32(10);
        for mechanism in mechanisms {
            put_cstr(out, mechanism);
        }
        out.put_u8(0);
        end_message(out, at);
    }
}

impl<'a> Message<'a> for Authentication<'a> {
    const CODE: u8 = AUTHENTICATION;
    const NAME: &'static str = "Authentication";

    fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let message = match reader.u32()? {
            0 => Self::Ok,
            2 => Self::KerberosV5,
            3 => Self::CleartextPassword,
            5 => Self::Md5Password {
                salt: reader.array()?,
            },
            7 => Self::Gss,
            8 => Self::GssContinue {
                data: reader.rest(),
            },
            9 => Self::Sspi,
            10 => Self::Sasl {
                mechanisms: SaslMechanisms::read(&mut reader)?,
            },
            11 => Self::SaslContinue {
                data: reader.rest(),
            },
            12 => Self::SaslFinal {
                data: reader.rest(),
            },
            _ => return Err(reader.invalid("request code")),
        };
        reader.finish()?;
        Ok(message)
    }

    fn encode(&self, out: &mut BytesMut) {
        let (code, data): (u32, &[u8]) = match self {
            Self::Ok => (0, &[]),
            Self::KerberosV5 => (2, &[]),
            Self::CleartextPassword => (3, &[]),
            Self::Md5Password { salt } => (5, salt),
            Self::Gss => (7, &[]),
            Self::GssContinue { data } => (8, data),
            Self::Sspi => (9, &[]),
            Self::Sasl { mechanisms } => (10, mechanisms.raw),
            Self::SaslContinue { data } => (11, data),
            Self::SaslFinal { data } => (12, data),
        };
        let at = begin_message(out, AUTHENTICATION, 4 + data.len());
        out.put_u32(code);
        out.put_slice(data);
        end_message(out, at);
    }
}

/// The NUL-terminated mechanism names of AuthenticationSASL, with the final empty name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaslMechanisms<'a> {
    raw: &'a [u8],
}

impl<'a> SaslMechanisms<'a> {
    fn read(reader: &mut Reader<'a>) -> Result<Self, ProtocolError> {
        let mut probe = *reader;
        let before = probe.remaining();
        while !probe.cstr()?.is_empty() {}
        let raw = reader.bytes(before - probe.remaining())?;
        Ok(Self { raw })
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.raw
            .split(|b| *b == 0)
            .take_while(|name| !name.is_empty())
    }

    pub fn contains(&self, mechanism: &[u8]) -> bool {
        self.iter().any(|m| m == mechanism)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::testing::round_trip;
    use proptest::prelude::*;

    #[test]
    fn sasl_mechanisms_round_trip() {
        let mut out = BytesMut::new();
        Authentication::encode_sasl(&mut out, &[b"SCRAM-SHA-256-PLUS", b"SCRAM-SHA-256"]);
        assert_eq!(
            &out[..],
            b"R\0\0\0\x2a\0\0\0\x0aSCRAM-SHA-256-PLUS\0SCRAM-SHA-256\0\0"
        );
        let Authentication::Sasl { mechanisms } = Authentication::decode_frame(&out).unwrap()
        else {
            panic!("not SASL");
        };
        assert!(mechanisms.contains(b"SCRAM-SHA-256"));
        assert_eq!(mechanisms.iter().count(), 2);
        let mut again = BytesMut::new();
        round_trip(&Authentication::Sasl { mechanisms }, &mut again);
        assert!(Authentication::decode_body(b"\0\0\0\x0aSCRAM").is_err());
        assert!(Authentication::decode_body(b"\0\0\0\x05salt!").is_err());
        assert!(Authentication::decode_body(b"\0\0\0\x04").is_err());
    }

    proptest! {
        #[test]
        fn round_trip_any(kind in 0usize..9, salt: [u8; 4], data in proptest::collection::vec(any::<u8>(), 0..60)) {
            let message = match kind {
                0 => Authentication::Ok,
                1 => Authentication::KerberosV5,
                2 => Authentication::CleartextPassword,
                3 => Authentication::Md5Password { salt },
                4 => Authentication::Gss,
                5 => Authentication::GssContinue { data: &data },
                6 => Authentication::Sspi,
                7 => Authentication::SaslContinue { data: &data },
                _ => Authentication::SaslFinal { data: &data },
            };
            let mut out = BytesMut::new();
            round_trip(&message, &mut out);
        }
    }
}
