//! SCRAM channel binding data: the `tls-server-end-point` binding (RFC 5929 section 4), the
//! only channel-binding type PostgreSQL implements, and the DER reading it needs.
//!
//! Both sides bind to the same value: a hash of the TLS server's certificate (the server
//! hashes its own certificate, the client the one the server presented). The hash function is
//! the one of the certificate's signature algorithm, except that MD5 and SHA-1 are replaced
//! by SHA-256 (RFC 5929 section 4.1); RSA-PSS names its hash in its parameters. Algorithms
//! without a hash function (Ed25519, Ed448) leave the binding undefined, so such a certificate
//! gives an error and the caller runs SCRAM without `-PLUS`.
//!
//! The DER walker reads just enough of `Certificate ::= SEQUENCE { tbsCertificate,
//! signatureAlgorithm, signatureValue }` to find the signature algorithm. It is bounds-checked
//! and never panics: the certificate is peer input on the client side.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};

use super::AuthError;

/// The channel-binding type name carried in the GS2 header (`p=tls-server-end-point`).
pub(crate) const TLS_SERVER_END_POINT: &str = "tls-server-end-point";

/// The GS2 header of a client that binds to `tls-server-end-point` (no authzid: PostgreSQL
/// refuses one).
pub(crate) const PLUS_GS2_HEADER: &str = "p=tls-server-end-point,,";

/// The longest end-point hash (SHA-512).
const MAX_HASH_LEN: usize = 64;

/// The data a side binds its SCRAM exchange to: the `tls-server-end-point` hash of the TLS
/// server's certificate. Not secret (anyone who sees the certificate can compute it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ChannelBinding {
    hash: [u8; MAX_HASH_LEN],
    len: u8,
}

impl core::fmt::Debug for ChannelBinding {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ChannelBinding({TLS_SERVER_END_POINT}, ")?;
        for byte in self.data() {
            write!(f, "{byte:02x}")?;
        }
        f.write_str(")")
    }
}

impl ChannelBinding {
    /// The binding for a TLS server presenting the certificate `cert_der` (the leaf
    /// certificate's DER bytes, as TLS carries them).
    pub fn from_certificate(cert_der: &[u8]) -> Result<Self, AuthError> {
        let hash = EndPointHash::of_certificate(cert_der)?;
        let mut binding = Self {
            hash: [0; MAX_HASH_LEN],
            len: 0,
        };
        let len = hash.digest_into(cert_der, &mut binding.hash);
        // A digest is at most 64 bytes, so the length always fits.
        binding.len = u8::try_from(len).unwrap_or(0);
        Ok(binding)
    }

    /// A binding from an end-point hash computed elsewhere; `None` if it is empty or longer
    /// than a SHA-512 digest.
    pub fn from_end_point_hash(hash: &[u8]) -> Option<Self> {
        if hash.is_empty() || hash.len() > MAX_HASH_LEN {
            return None;
        }
        let mut binding = Self {
            hash: [0; MAX_HASH_LEN],
            len: u8::try_from(hash.len()).ok()?,
        };
        binding.hash[..hash.len()].copy_from_slice(hash);
        Some(binding)
    }

    /// The channel-binding type name, always [`TLS_SERVER_END_POINT`].
    pub fn binding_type(&self) -> &'static str {
        TLS_SERVER_END_POINT
    }

    /// The binding data: the certificate hash.
    pub fn data(&self) -> &[u8] {
        &self.hash[..usize::from(self.len)]
    }

    /// The value of the client-final-message's `c=` attribute for a client whose GS2 header
    /// is `gs2_header`: base64 of the header followed by the binding data (RFC 5802 section 7,
    /// `cbind-input`).
    pub(crate) fn channel_binding_attribute(&self, gs2_header: &str) -> String {
        let mut input = Vec::with_capacity(gs2_header.len() + self.data().len());
        input.extend_from_slice(gs2_header.as_bytes());
        input.extend_from_slice(self.data());
        STANDARD.encode(input)
    }
}

/// When a client binds its SCRAM exchange to the TLS channel: libpq's `channel_binding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelBindingPolicy {
    /// Never bind: GS2 flag 'n' and `SCRAM-SHA-256`, even when `-PLUS` is offered.
    Disable,
    /// Bind when the server offers `SCRAM-SHA-256-PLUS` and we have binding data; with
    /// binding data and no `-PLUS` offer, say so with flag 'y' so that a server that did
    /// offer it detects the downgrade. libpq's default.
    #[default]
    Prefer,
    /// Bind or fail: refuse a server that does not offer `-PLUS`, any method but SASL, and an
    /// AuthenticationOk that did not follow a bound exchange.
    Require,
}

impl ChannelBindingPolicy {
    /// Parses libpq's values `disable`, `prefer` and `require`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "disable" => Some(Self::Disable),
            "prefer" => Some(Self::Prefer),
            "require" => Some(Self::Require),
            _ => None,
        }
    }

    /// libpq's name for the policy.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
        }
    }
}

/// The `tls-server-end-point` hash of the certificate `cert_der`: the whole DER certificate
/// hashed with its signature algorithm's hash function, SHA-256 in place of MD5 and SHA-1.
pub fn tls_server_end_point(cert_der: &[u8]) -> Result<Vec<u8>, AuthError> {
    ChannelBinding::from_certificate(cert_der).map(|binding| binding.data().to_vec())
}

/// The hash function RFC 5929 section 4.1 picks for a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndPointHash {
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl EndPointHash {
    /// Reads the certificate's signature algorithm and maps it to the hash to use.
    fn of_certificate(cert_der: &[u8]) -> Result<Self, AuthError> {
        let (oid, parameters) = signature_algorithm(cert_der)?;
        match SignatureAlgorithm::from_oid(oid)? {
            SignatureAlgorithm::WithHash(hash) => Ok(hash.end_point_hash()),
            SignatureAlgorithm::RsaPss => pss_hash(parameters).map(HashAlgorithm::end_point_hash),
        }
    }

    /// Writes the digest of `data` into `out` and returns its length.
    fn digest_into(self, data: &[u8], out: &mut [u8; MAX_HASH_LEN]) -> usize {
        fn put<D: Digest>(data: &[u8], out: &mut [u8; MAX_HASH_LEN]) -> usize {
            let digest = D::digest(data);
            let len = digest.len().min(MAX_HASH_LEN);
            out[..len].copy_from_slice(&digest[..len]);
            len
        }
        match self {
            Self::Sha224 => put::<Sha224>(data, out),
            Self::Sha256 => put::<Sha256>(data, out),
            Self::Sha384 => put::<Sha384>(data, out),
            Self::Sha512 => put::<Sha512>(data, out),
        }
    }
}

/// A hash function a signature algorithm names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HashAlgorithm {
    Md5,
    Sha1,
    Sha224,
    Sha256,
    Sha384,
    Sha512,
}

impl HashAlgorithm {
    /// RFC 5929 section 4.1: MD5 and SHA-1 are too weak to bind with, SHA-256 replaces them.
    fn end_point_hash(self) -> EndPointHash {
        match self {
            Self::Md5 | Self::Sha1 | Self::Sha256 => EndPointHash::Sha256,
            Self::Sha224 => EndPointHash::Sha224,
            Self::Sha384 => EndPointHash::Sha384,
            Self::Sha512 => EndPointHash::Sha512,
        }
    }

    /// A hash algorithm identifier's OID (RSA-PSS parameters).
    fn from_oid(oid: &[u8]) -> Option<Self> {
        Some(match oid {
            oid::MD5 => Self::Md5,
            oid::SHA1 => Self::Sha1,
            oid::SHA224 => Self::Sha224,
            oid::SHA256 => Self::Sha256,
            oid::SHA384 => Self::Sha384,
            oid::SHA512 => Self::Sha512,
            _ => return None,
        })
    }
}

/// What a certificate's signature algorithm says about its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SignatureAlgorithm {
    /// RSA PKCS#1 v1.5, ECDSA or DSA with this hash.
    WithHash(HashAlgorithm),
    /// RSASSA-PSS: the hash is in the parameters.
    RsaPss,
}

impl SignatureAlgorithm {
    fn from_oid(oid: &[u8]) -> Result<Self, AuthError> {
        use HashAlgorithm as H;
        let hash = match oid {
            oid::MD5_WITH_RSA => H::Md5,
            oid::SHA1_WITH_RSA | oid::ECDSA_WITH_SHA1 | oid::DSA_WITH_SHA1 => H::Sha1,
            oid::SHA224_WITH_RSA | oid::ECDSA_WITH_SHA224 | oid::DSA_WITH_SHA224 => H::Sha224,
            oid::SHA256_WITH_RSA | oid::ECDSA_WITH_SHA256 | oid::DSA_WITH_SHA256 => H::Sha256,
            oid::SHA384_WITH_RSA | oid::ECDSA_WITH_SHA384 => H::Sha384,
            oid::SHA512_WITH_RSA | oid::ECDSA_WITH_SHA512 => H::Sha512,
            oid::RSASSA_PSS => return Ok(Self::RsaPss),
            // EdDSA signs the message itself, with no separate hash to bind with.
            oid::ED25519 | oid::ED448 => return Err(AuthError::CertificateHashUndefined),
            _ => return Err(AuthError::UnknownCertificateSignatureAlgorithm),
        };
        Ok(Self::WithHash(hash))
    }
}

/// The `algorithm` OID and the raw `parameters` (possibly empty) of the certificate's
/// `signatureAlgorithm`, after checking the outer structure.
fn signature_algorithm(cert_der: &[u8]) -> Result<(&[u8], &[u8]), AuthError> {
    const BAD: AuthError = AuthError::UnknownCertificateSignatureAlgorithm;
    let mut outer = Der::new(cert_der);
    let certificate = outer.expect(tag::SEQUENCE).ok_or(BAD)?;
    // Trailing bytes would make the hash differ from the certificate's.
    if !outer.is_empty() {
        return Err(BAD);
    }
    let mut fields = Der::new(certificate);
    fields.expect(tag::SEQUENCE).ok_or(BAD)?;
    let algorithm = fields.expect(tag::SEQUENCE).ok_or(BAD)?;
    fields.expect(tag::BIT_STRING).ok_or(BAD)?;
    if !fields.is_empty() {
        return Err(BAD);
    }
    let mut identifier = Der::new(algorithm);
    let oid = identifier.expect(tag::OID).ok_or(BAD)?;
    Ok((oid, identifier.rest()))
}

/// The hash of `RSASSA-PSS-params ::= SEQUENCE { hashAlgorithm [0] HashAlgorithm DEFAULT
/// sha1, maskGenAlgorithm [1] ..., saltLength [2] ..., trailerField [3] ... }` (RFC 4055).
/// The parameters must be present in a certificate; DER omits a SHA-1 hash as the default.
fn pss_hash(parameters: &[u8]) -> Result<HashAlgorithm, AuthError> {
    const BAD: AuthError = AuthError::UnknownCertificateSignatureAlgorithm;
    let mut outer = Der::new(parameters);
    let params = outer.expect(tag::SEQUENCE).ok_or(BAD)?;
    if !outer.is_empty() {
        return Err(BAD);
    }
    let mut fields = Der::new(params);
    if fields.is_empty() {
        return Ok(HashAlgorithm::Sha1);
    }
    let (field_tag, content) = fields.read().ok_or(BAD)?;
    if field_tag != tag::CONTEXT_0 {
        // hashAlgorithm is absent: the first field is a later one.
        return Ok(HashAlgorithm::Sha1);
    }
    let mut explicit = Der::new(content);
    let identifier = explicit.expect(tag::SEQUENCE).ok_or(BAD)?;
    let oid = Der::new(identifier).expect(tag::OID).ok_or(BAD)?;
    HashAlgorithm::from_oid(oid).ok_or(BAD)
}

/// The DER tags this module reads.
mod tag {
    pub(crate) const BIT_STRING: u8 = 0x03;
    pub const OID: u8 = 0x06;
    pub const SEQUENCE: u8 = 0x30;
    /// `[0]` constructed (an EXPLICIT context tag).
    pub(crate) const CONTEXT_0: u8 = 0xa0;
}

/// DER encodings (content bytes) of the object identifiers this module recognises.
mod oid {
    /// 1.2.840.113549.1.1.4
    pub(crate) const MD5_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x04];
    /// 1.2.840.113549.1.1.5
    pub(crate) const SHA1_WITH_RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05];
    /// 1.2.840.113549.1.1.10
    pub(crate) const RSASSA_PSS: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a];
    /// 1.2.840.113549.1.1.11
    pub(crate) const SHA256_WITH_RSA: &[u8] =
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0b];
    /// 1.2.840.113549.1.1.12
    pub(crate) const SHA384_WITH_RSA: &[u8] =
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c];
    /// 1.2.840.113549.1.1.13
    pub(crate) const SHA512_WITH_RSA: &[u8] =
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0d];
    /// 1.2.840.113549.1.1.14
    pub(crate) const SHA224_WITH_RSA: &[u8] =
        &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0e];
    /// 1.2.840.10045.4.1
    pub(crate) const ECDSA_WITH_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x01];
    /// 1.2.840.10045.4.3.1
    pub(crate) const ECDSA_WITH_SHA224: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x01];
    /// 1.2.840.10045.4.3.2
    pub(crate) const ECDSA_WITH_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    /// 1.2.840.10045.4.3.3
    pub(crate) const ECDSA_WITH_SHA384: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x03];
    /// 1.2.840.10045.4.3.4
    pub(crate) const ECDSA_WITH_SHA512: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x04];
    /// 1.2.840.10040.4.3
    pub(crate) const DSA_WITH_SHA1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03];
    /// 2.16.840.1.101.3.4.3.1
    pub(crate) const DSA_WITH_SHA224: &[u8] =
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x01];
    /// 2.16.840.1.101.3.4.3.2
    pub(crate) const DSA_WITH_SHA256: &[u8] =
        &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x03, 0x02];
    /// 1.3.101.112
    pub const ED25519: &[u8] = &[0x2b, 0x65, 0x70];
    /// 1.3.101.113
    pub(crate) const ED448: &[u8] = &[0x2b, 0x65, 0x71];
    /// 1.2.840.113549.2.5
    pub const MD5: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x02, 0x05];
    /// 1.3.14.3.2.26
    pub(crate) const SHA1: &[u8] = &[0x2b, 0x0e, 0x03, 0x02, 0x1a];
    /// 2.16.840.1.101.3.4.2.1
    pub const SHA256: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01];
    /// 2.16.840.1.101.3.4.2.2
    pub const SHA384: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02];
    /// 2.16.840.1.101.3.4.2.3
    pub const SHA512: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x03];
    /// 2.16.840.1.101.3.4.2.4
    pub(crate) const SHA224: &[u8] = &[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x04];
}

/// A cursor over a run of DER TLVs. Every read checks its bounds and returns `None` on
/// anything it cannot read (truncation, indefinite or oversized lengths, high tag numbers).
struct Der<'a> {
    rest: &'a [u8],
}

impl<'a> Der<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn rest(&self) -> &'a [u8] {
        self.rest
    }

    /// Reads one TLV and returns its tag and content.
    fn read(&mut self) -> Option<(u8, &'a [u8])> {
        let (&tag, after_tag) = self.rest.split_first()?;
        // Tag numbers >= 31 use more bytes; nothing read here has one.
        if tag & 0x1f == 0x1f {
            return None;
        }
        let (len, after_len) = read_length(after_tag)?;
        let (content, rest) = after_len.split_at_checked(len)?;
        self.rest = rest;
        Some((tag, content))
    }

    /// Reads one TLV that must have tag `expected` and returns its content.
    fn expect(&mut self, expected: u8) -> Option<&'a [u8]> {
        match self.read()? {
            (tag, content) if tag == expected => Some(content),
            _ => None,
        }
    }
}

/// Reads a DER length: short form, or long form of one to four bytes. The indefinite form
/// (0x80) is BER only.
fn read_length(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let (&first, rest) = bytes.split_first()?;
    if first < 0x80 {
        return Some((usize::from(first), rest));
    }
    let count = usize::from(first & 0x7f);
    if count == 0 || count > 4 {
        return None;
    }
    let (digits, rest) = rest.split_at_checked(count)?;
    let len = digits
        .iter()
        .fold(0u32, |len, &digit| (len << 8) | u32::from(digit));
    Some((usize::try_from(len).ok()?, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// `tests/fixtures/certs/make.sh` made these with the openssl CLI; `expected.txt` holds
    /// openssl's own fingerprint of each with the hash RFC 5929 picks.
    const FIXTURES: &[(&str, &[u8])] = &[
        (
            "dsa_sha256.der",
            include_bytes!("../../tests/fixtures/certs/dsa_sha256.der"),
        ),
        (
            "ecdsa_p256_sha256.der",
            include_bytes!("../../tests/fixtures/certs/ecdsa_p256_sha256.der"),
        ),
        (
            "ecdsa_p384_sha384.der",
            include_bytes!("../../tests/fixtures/certs/ecdsa_p384_sha384.der"),
        ),
        (
            "ecdsa_p521_sha512.der",
            include_bytes!("../../tests/fixtures/certs/ecdsa_p521_sha512.der"),
        ),
        (
            "ecdsa_sha1.der",
            include_bytes!("../../tests/fixtures/certs/ecdsa_sha1.der"),
        ),
        (
            "rsa_md5.der",
            include_bytes!("../../tests/fixtures/certs/rsa_md5.der"),
        ),
        (
            "rsa_pss_sha1.der",
            include_bytes!("../../tests/fixtures/certs/rsa_pss_sha1.der"),
        ),
        (
            "rsa_pss_sha256.der",
            include_bytes!("../../tests/fixtures/certs/rsa_pss_sha256.der"),
        ),
        (
            "rsa_pss_sha384.der",
            include_bytes!("../../tests/fixtures/certs/rsa_pss_sha384.der"),
        ),
        (
            "rsa_pss_sha512.der",
            include_bytes!("../../tests/fixtures/certs/rsa_pss_sha512.der"),
        ),
        (
            "rsa_sha1.der",
            include_bytes!("../../tests/fixtures/certs/rsa_sha1.der"),
        ),
        (
            "rsa_sha224.der",
            include_bytes!("../../tests/fixtures/certs/rsa_sha224.der"),
        ),
        (
            "rsa_sha256.der",
            include_bytes!("../../tests/fixtures/certs/rsa_sha256.der"),
        ),
        (
            "rsa_sha384.der",
            include_bytes!("../../tests/fixtures/certs/rsa_sha384.der"),
        ),
        (
            "rsa_sha512.der",
            include_bytes!("../../tests/fixtures/certs/rsa_sha512.der"),
        ),
    ];
    const EXPECTED: &str = include_str!("../../tests/fixtures/certs/expected.txt");
    const ED25519_CERT: &[u8] = include_bytes!("../../tests/fixtures/certs/ed25519.der");
    const ED448_CERT: &[u8] = include_bytes!("../../tests/fixtures/certs/ed448.der");

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn fixture(name: &str) -> &'static [u8] {
        FIXTURES
            .iter()
            .find(|(file, _)| *file == name)
            .map(|(_, der)| *der)
            .unwrap()
    }

    #[test]
    fn end_point_hash_matches_openssl_for_every_signature_algorithm() {
        let mut checked = 0;
        for line in EXPECTED.lines() {
            let mut fields = line.split(' ');
            let (file, hash, fingerprint) = (
                fields.next().unwrap(),
                fields.next().unwrap(),
                fields.next().unwrap(),
            );
            let data = tls_server_end_point(fixture(file)).unwrap();
            assert_eq!(hex(&data), fingerprint, "{file} ({hash})");
            let expected_len = match hash {
                "sha224" => 28,
                "sha256" => 32,
                "sha384" => 48,
                "sha512" => 64,
                other => panic!("{other}"),
            };
            assert_eq!(data.len(), expected_len, "{file}");
            checked += 1;
        }
        assert_eq!(checked, FIXTURES.len());
    }

    #[test]
    fn md5_and_sha1_are_replaced_by_sha256() {
        for file in [
            "rsa_md5.der",
            "rsa_sha1.der",
            "ecdsa_sha1.der",
            "rsa_pss_sha1.der",
        ] {
            let der = fixture(file);
            let binding = ChannelBinding::from_certificate(der).unwrap();
            assert_eq!(binding.data(), Sha256::digest(der).as_slice(), "{file}");
        }
    }

    #[test]
    fn eddsa_certificates_have_no_end_point_hash() {
        for der in [ED25519_CERT, ED448_CERT] {
            let error = ChannelBinding::from_certificate(der).unwrap_err();
            assert_eq!(error, AuthError::CertificateHashUndefined);
        }
    }

    #[test]
    fn malformed_certificates_are_errors() {
        let der = fixture("rsa_sha256.der");
        let unknown = Err(AuthError::UnknownCertificateSignatureAlgorithm);
        assert_eq!(tls_server_end_point(&[]), unknown);
        assert_eq!(tls_server_end_point(&der[..der.len() - 1]), unknown);
        let mut trailing = der.to_vec();
        trailing.push(0);
        assert_eq!(tls_server_end_point(&trailing), unknown);
        // A SEQUENCE of nothing, an indefinite length, a five-byte length.
        for bad in [
            &[0x30, 0x00][..],
            &[0x30, 0x80, 0, 0],
            &[0x30, 0x85, 0, 0, 0, 0, 1, 0],
        ] {
            assert_eq!(tls_server_end_point(bad), unknown, "{bad:02x?}");
        }
    }

    /// A certificate-shaped DER value: an empty tbsCertificate, the given AlgorithmIdentifier
    /// content and an empty signature.
    fn certificate_with_algorithm(algorithm: &[u8]) -> Vec<u8> {
        let mut fields = vec![0x30, 0x00, 0x30, u8::try_from(algorithm.len()).unwrap()];
        fields.extend_from_slice(algorithm);
        fields.extend_from_slice(&[0x03, 0x01, 0x00]);
        let mut der = vec![0x30, u8::try_from(fields.len()).unwrap()];
        der.extend_from_slice(&fields);
        der
    }

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag, u8::try_from(content.len()).unwrap()];
        out.extend_from_slice(content);
        out
    }

    fn pss_certificate(params: Option<&[u8]>) -> Vec<u8> {
        let mut algorithm = tlv(tag::OID, oid::RSASSA_PSS);
        if let Some(params) = params {
            algorithm.extend_from_slice(params);
        }
        certificate_with_algorithm(&algorithm)
    }

    fn hash_param(hash_oid: &[u8]) -> Vec<u8> {
        let identifier = tlv(tag::SEQUENCE, &tlv(tag::OID, hash_oid));
        tlv(tag::CONTEXT_0, &identifier)
    }

    #[test]
    fn pss_parameters() {
        let expect = |params: Option<&[u8]>| EndPointHash::of_certificate(&pss_certificate(params));
        // All defaults: SHA-1, so SHA-256.
        assert_eq!(
            expect(Some(&tlv(tag::SEQUENCE, &[]))),
            Ok(EndPointHash::Sha256)
        );
        let salt_only = tlv(tag::SEQUENCE, &tlv(0xa2, &[0x02, 0x01, 0x20]));
        assert_eq!(expect(Some(&salt_only)), Ok(EndPointHash::Sha256));
        for (hash, expected) in [
            (oid::SHA1, EndPointHash::Sha256),
            (oid::SHA224, EndPointHash::Sha224),
            (oid::SHA256, EndPointHash::Sha256),
            (oid::SHA384, EndPointHash::Sha384),
            (oid::SHA512, EndPointHash::Sha512),
        ] {
            let params = tlv(tag::SEQUENCE, &hash_param(hash));
            assert_eq!(expect(Some(&params)), Ok(expected));
        }
        let unknown = Err(AuthError::UnknownCertificateSignatureAlgorithm);
        // Parameters are mandatory for PSS; an unknown hash has no binding.
        assert_eq!(expect(None), unknown);
        assert_eq!(expect(Some(&[0x05, 0x00])), unknown);
        let sha3 = [0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x08];
        assert_eq!(
            expect(Some(&tlv(tag::SEQUENCE, &hash_param(&sha3)))),
            unknown
        );
    }

    #[test]
    fn unknown_algorithms_are_errors() {
        // sha256WithRSA with one more arc: not an algorithm we know.
        let mut oid = oid::SHA256_WITH_RSA.to_vec();
        oid.push(1);
        let der = certificate_with_algorithm(&tlv(tag::OID, &oid));
        assert_eq!(
            ChannelBinding::from_certificate(&der),
            Err(AuthError::UnknownCertificateSignatureAlgorithm)
        );
        let der = certificate_with_algorithm(&tlv(tag::OID, oid::ED25519));
        assert_eq!(
            ChannelBinding::from_certificate(&der),
            Err(AuthError::CertificateHashUndefined)
        );
    }

    #[test]
    fn binding_data_and_attribute() {
        let binding = ChannelBinding::from_end_point_hash(&[1, 2, 3]).unwrap();
        assert_eq!(binding.data(), &[1, 2, 3]);
        assert_eq!(binding.binding_type(), "tls-server-end-point");
        assert_eq!(
            binding.channel_binding_attribute(PLUS_GS2_HEADER),
            STANDARD.encode(b"p=tls-server-end-point,,\x01\x02\x03")
        );
        assert!(format!("{binding:?}").contains("010203"));
        assert!(ChannelBinding::from_end_point_hash(&[]).is_none());
        assert!(ChannelBinding::from_end_point_hash(&[0; 65]).is_none());
        assert!(ChannelBinding::from_end_point_hash(&[0; 64]).is_some());
    }

    #[test]
    fn policy_names_are_libpq_s() {
        for policy in [
            ChannelBindingPolicy::Disable,
            ChannelBindingPolicy::Prefer,
            ChannelBindingPolicy::Require,
        ] {
            assert_eq!(ChannelBindingPolicy::parse(policy.as_str()), Some(policy));
        }
        assert_eq!(ChannelBindingPolicy::parse("allow"), None);
        assert_eq!(
            ChannelBindingPolicy::default(),
            ChannelBindingPolicy::Prefer
        );
    }

    #[test]
    fn long_form_lengths() {
        assert_eq!(read_length(&[0x81, 0x80]), Some((128, &[][..])));
        assert_eq!(read_length(&[0x82, 0x01, 0x00, 9]), Some((256, &[9][..])));
        assert_eq!(
            read_length(&[0x84, 0xff, 0xff, 0xff, 0xff]).map(|(l, _)| l),
            Some(u32::MAX as usize)
        );
        assert_eq!(read_length(&[0x82, 0x01]), None);
        assert_eq!(read_length(&[]), None);
        let mut der = Der::new(&[0x04, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00]);
        assert_eq!(der.read(), None);
        let mut der = Der::new(&[0x1f, 0x01, 0x00]);
        assert_eq!(der.read(), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = ChannelBinding::from_certificate(&bytes);
        }

        #[test]
        fn mutated_certificates_never_panic(
            which in 0..FIXTURES.len(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<prop::sample::Index>(),
        ) {
            let original = FIXTURES[which].1;
            let mut der = original.to_vec();
            let at = at.index(der.len());
            der[at] = byte;
            let _ = ChannelBinding::from_certificate(&der);
            der.truncate(cut.index(der.len()));
            let _ = ChannelBinding::from_certificate(&der);
            let truncated = &original[..cut.index(original.len())];
            prop_assert!(ChannelBinding::from_certificate(truncated).is_err());
        }
    }
}
