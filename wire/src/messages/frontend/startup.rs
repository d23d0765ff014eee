//! The startup phase: packets without a type byte, told apart by the word after the length,
//! and the StartupMessage with its ordered parameters.

use bytes::{BufMut, BytesMut};

use crate::codec::{Reader, put_cstr};
use crate::error::ProtocolError;
use crate::messages::frontend::{CancelRequest, GssEncRequest, SslRequest};

/// A protocol version as sent in StartupMessage: major in the high 16 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProtocolVersion(pub u32);

impl ProtocolVersion {
    pub const V3_0: Self = Self::new(3, 0);
    /// PostgreSQL 18's version with variable-length cancel keys.
    pub const V3_2: Self = Self::new(3, 2);

    pub const fn new(major: u16, minor: u16) -> Self {
        Self(((major as u32) << 16) | minor as u32)
    }

    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }

    pub const fn minor(self) -> u16 {
        self.0 as u16
    }
}

/// Any packet a client may send before authentication, decoded from
/// [`crate::framing::split_startup`]'s output (length word included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartupPacket<'a> {
    Startup(StartupMessage<'a>),
    SslRequest,
    GssEncRequest,
    Cancel(CancelRequest<'a>),
}

impl<'a> StartupPacket<'a> {
    /// Decodes a whole startup packet. A request code whose major version is not 3 (and is
    /// not one of the special request codes) is [`ProtocolError::UnsupportedProtocol`].
    pub fn decode(packet: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(packet, "startup packet");
        let len = reader.u32()?;
        if len as usize != packet.len() {
            return Err(reader.invalid("length"));
        }
        let mut peek = reader;
        let code = peek.u32()?;
        match code {
            SslRequest::CODE => SslRequest::decode_body(reader.rest()).map(|_| Self::SslRequest),
            GssEncRequest::CODE => {
                GssEncRequest::decode_body(reader.rest()).map(|_| Self::GssEncRequest)
            }
            CancelRequest::CODE => CancelRequest::decode_body(reader.rest()).map(Self::Cancel),
            _ => StartupMessage::decode_body(reader.rest()).map(Self::Startup),
        }
    }
}

/// StartupMessage: the protocol version and the session parameters, in the order sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupMessage<'a> {
    pub version: ProtocolVersion,
    pub params: StartupParams<'a>,
}

impl<'a> StartupMessage<'a> {
    const NAME: &'static str = "StartupMessage";

    /// Decodes the body after the length word (version, then parameters).
    pub fn decode_body(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, Self::NAME);
        let version = ProtocolVersion(reader.u32()?);
        if version.major() != 3 {
            return Err(ProtocolError::UnsupportedProtocol {
                major: version.major(),
                minor: version.minor(),
            });
        }
        let params = StartupParams::read(reader.rest())?;
        Ok(Self { version, params })
    }

    /// Appends the packet, length word included.
    pub fn encode(&self, out: &mut BytesMut) {
        let at = out.len();
        out.reserve(8 + self.params.raw.len() + 1);
        out.put_u32(0);
        out.put_u32(self.version.0);
        out.put_slice(self.params.raw);
        out.put_u8(0);
        crate::codec::end_message(out, at);
    }

    /// Appends a packet built from parameters. Names and values must not contain NUL.
    pub fn encode_parts(out: &mut BytesMut, version: ProtocolVersion, params: &[(&str, &str)]) {
        let at = out.len();
        let hint: usize = params.iter().map(|(n, v)| n.len() + v.len() + 2).sum();
        out.reserve(9 + hint);
        out.put_u32(0);
        out.put_u32(version.0);
        for (name, value) in params {
            put_cstr(out, name.as_bytes());
            put_cstr(out, value.as_bytes());
        }
        out.put_u8(0);
        crate::codec::end_message(out, at);
    }

    pub fn user(&self) -> Option<&'a str> {
        self.params.get("user")
    }

    /// The database, which defaults to the user name as in PostgreSQL.
    pub fn database(&self) -> Option<&'a str> {
        self.params.get("database").or_else(|| self.user())
    }

    pub fn options(&self) -> Option<&'a str> {
        self.params.get("options")
    }

    pub fn replication(&self) -> Option<&'a str> {
        self.params.get("replication")
    }

    pub fn application_name(&self) -> Option<&'a str> {
        self.params.get("application_name")
    }
}

/// Ordered `(name, value)` pairs of a StartupMessage, validated as UTF-8 C strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupParams<'a> {
    /// The pairs without the final terminating NUL.
    raw: &'a [u8],
}

impl<'a> StartupParams<'a> {
    fn read(body: &'a [u8]) -> Result<Self, ProtocolError> {
        let mut reader = Reader::new(body, StartupMessage::NAME);
        loop {
            let name = reader.cstr_utf8()?;
            if name.is_empty() {
                break;
            }
            reader.cstr_utf8()?;
        }
        reader.finish()?;
        Ok(Self {
            raw: &body[..body.len() - 1],
        })
    }

    pub fn iter(&self) -> StartupParamsIter<'a> {
        StartupParamsIter { rest: self.raw }
    }

    /// The value of the first parameter called `name`.
    pub fn get(&self, name: &str) -> Option<&'a str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }
}

/// Iterator over [`StartupParams`]; validated at decode, so it cannot fail.
#[derive(Debug, Clone)]
pub struct StartupParamsIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for StartupParamsIter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        let mut reader = Reader::new(self.rest, StartupMessage::NAME);
        let name = reader.cstr_utf8().ok()?;
        let value = reader.cstr_utf8().ok()?;
        self.rest = reader.rest();
        Some((name, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn decodes_libpq_startup() {
        let mut out = BytesMut::new();
        let params = [
            ("user", "alice"),
            ("database", "app"),
            ("options", "-c pgtier.class=premium"),
        ];
        StartupMessage::encode_parts(&mut out, ProtocolVersion::V3_0, &params);
        let StartupPacket::Startup(startup) = StartupPacket::decode(&out).unwrap() else {
            panic!("not a startup message");
        };
        assert_eq!(startup.params.iter().collect::<Vec<_>>(), params);
        assert_eq!(startup.user(), Some("alice"));
        assert_eq!(startup.database(), Some("app"));
        assert_eq!(startup.replication(), None);
        let mut again = BytesMut::new();
        startup.encode(&mut again);
        assert_eq!(again, out);
        for cut in 0..out.len() {
            assert!(StartupPacket::decode(&out[..cut]).is_err());
        }
    }

    #[test]
    fn database_defaults_to_user() {
        let mut out = BytesMut::new();
        StartupMessage::encode_parts(&mut out, ProtocolVersion::V3_0, &[("user", "bob")]);
        let StartupPacket::Startup(startup) = StartupPacket::decode(&out).unwrap() else {
            panic!("not a startup message");
        };
        assert_eq!(startup.database(), Some("bob"));
    }

    #[test]
    fn rejects_protocol_2_and_missing_terminator() {
        let mut out = BytesMut::new();
        StartupMessage::encode_parts(&mut out, ProtocolVersion::new(2, 0), &[("user", "a")]);
        let err = StartupPacket::decode(&out).unwrap_err();
        assert_eq!(
            err,
            ProtocolError::UnsupportedProtocol { major: 2, minor: 0 }
        );
        assert_eq!(err.sqlstate(), crate::sqlstate::FEATURE_NOT_SUPPORTED);
        let unterminated = b"\0\0\0\x0e\0\x03\0\0user\0a\0";
        assert!(StartupPacket::decode(unterminated).is_err());
    }

    proptest! {
        #[test]
        fn round_trip_any(
            minor in 0u16..4,
            params in proptest::collection::vec(("[a-z_.]{1,12}", "[^\u{0}]{0,20}"), 0..8),
        ) {
            let pairs: Vec<(&str, &str)> = params.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            let mut out = BytesMut::new();
            StartupMessage::encode_parts(&mut out, ProtocolVersion::new(3, minor), &pairs);
            let StartupPacket::Startup(startup) = StartupPacket::decode(&out).unwrap() else {
                panic!("not a startup message");
            };
            prop_assert_eq!(startup.version.minor(), minor);
            prop_assert_eq!(startup.params.iter().collect::<Vec<_>>(), pairs);
            let mut again = BytesMut::new();
            startup.encode(&mut again);
            prop_assert_eq!(again, out);
        }
    }
}
