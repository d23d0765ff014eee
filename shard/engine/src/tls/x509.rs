//! The two facts pgtier reads from a certificate itself, with a minimal DER walker: the
//! subject's common name (PgBouncer matches it against the user name for certificate logins)
//! and the hash of the signature algorithm (SCRAM's `tls-server-end-point` channel binding,
//! RFC 5929). Input may come from an unauthenticated peer: every read is bounds-checked and a
//! malformed certificate gives `None`, never a panic.

use super::der::{
    BMP_STRING, Element, IA5_STRING, OID, PRINTABLE_STRING, SEQUENCE, SET, T61_STRING, UTF8_STRING,
    element, expect,
};

/// The `[0] EXPLICIT` tag of a certificate's version field.
const EXPLICIT_VERSION: u8 = 0xa0;

/// id-at-commonName, 2.5.4.3.
const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// A hash function for `tls-server-end-point`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndPointHash {
    Sha256,
    Sha384,
    Sha512,
}

/// The tbsCertificate's contents and the outer signatureAlgorithm's contents.
fn certificate_parts(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let (certificate, _) = expect(der, SEQUENCE)?;
    let (tbs, rest) = expect(certificate.contents, SEQUENCE)?;
    let (algorithm, _) = expect(rest, SEQUENCE)?;
    Some((tbs.contents, algorithm.contents))
}

/// The subject Name's contents.
fn subject(tbs: &[u8]) -> Option<&[u8]> {
    let mut rest = tbs;
    if let Some((version, after)) = element(rest) {
        if version.tag == EXPLICIT_VERSION {
            rest = after;
        }
    }
    // serialNumber, signature, issuer, validity, then subject.
    for _ in 0..4 {
        rest = element(rest)?.1;
    }
    expect(rest, SEQUENCE).map(|(subject, _)| subject.contents)
}

/// The last commonName of the certificate's subject (the most specific one, as OpenSSL's
/// lookups and PostgreSQL report), as text.
pub(crate) fn common_name(der: &[u8]) -> Option<String> {
    let (tbs, _) = certificate_parts(der)?;
    last_common_name(subject(tbs)?)
}

/// The last commonName of a Name (given its contents: the sequence of RDN sets).
pub(super) fn last_common_name(name: &[u8]) -> Option<String> {
    let mut rdns = name;
    let mut found = None;
    while !rdns.is_empty() {
        let (set, rest) = expect(rdns, SET)?;
        rdns = rest;
        let mut attributes = set.contents;
        while !attributes.is_empty() {
            let (attribute, rest) = expect(attributes, SEQUENCE)?;
            attributes = rest;
            let (oid, value) = expect(attribute.contents, OID)?;
            if oid.contents == COMMON_NAME {
                let (value, _) = element(value)?;
                found = Some(decode_string(&value)?);
            }
        }
    }
    found
}

fn decode_string(value: &Element<'_>) -> Option<String> {
    match value.tag {
        UTF8_STRING | PRINTABLE_STRING | IA5_STRING => {
            std::str::from_utf8(value.contents).ok().map(str::to_string)
        }
        // Teletex is in practice Latin-1.
        T61_STRING => Some(value.contents.iter().map(|b| char::from(*b)).collect()),
        BMP_STRING => {
            let units = value.contents.chunks_exact(2);
            if !units.remainder().is_empty() {
                return None;
            }
            char::decode_utf16(units.map(|pair| u16::from_be_bytes([pair[0], pair[1]])))
                .collect::<Result<String, _>>()
                .ok()
        }
        _ => None,
    }
}

/// The hash `tls-server-end-point` uses for this certificate: its signature algorithm's hash,
/// with MD5 and SHA-1 replaced by SHA-256 (RFC 5929 section 4.1). `None` for algorithms with
/// no single hash (RSA-PSS, Ed25519), for which PostgreSQL offers no channel binding either,
/// and for SHA-224 signatures (the binding would be a SHA-224 hash, which ring lacks; a
/// client then cannot use `channel_binding=require` through pgtier).
pub fn end_point_hash(der: &[u8]) -> Option<EndPointHash> {
    let (_, algorithm) = certificate_parts(der)?;
    let (oid, _) = expect(algorithm, OID)?;
    let oid = oid.contents;
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    if let Some(last) = oid.strip_prefix(RSA) {
        return match last {
            [0x04] | [0x05] | [0x0b] => Some(EndPointHash::Sha256), // md5, sha1, sha256
            [0x0c] => Some(EndPointHash::Sha384),
            [0x0d] => Some(EndPointHash::Sha512),
            _ => None,
        };
    }
    match oid.strip_prefix(ECDSA)? {
        [0x01] | [0x03, 0x02] => Some(EndPointHash::Sha256), // sha1, sha256
        [0x03, 0x03] => Some(EndPointHash::Sha384),
        [0x03, 0x04] => Some(EndPointHash::Sha512),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_pki::TestPki;
    use proptest::prelude::*;

    #[test]
    fn reads_the_common_name_and_hash_of_real_certificates() {
        let pki = TestPki::new();
        assert_eq!(
            common_name(&pki.client_cert_der()).as_deref(),
            Some("alice")
        );
        assert_eq!(
            common_name(&pki.server_cert_der()).as_deref(),
            Some("pgtier test server")
        );
        assert_eq!(
            end_point_hash(&pki.server_cert_der()),
            Some(EndPointHash::Sha256)
        );
        let rsa = TestPki::with_rsa_server();
        assert_eq!(
            end_point_hash(&rsa.server_cert_der()),
            Some(EndPointHash::Sha256)
        );
    }

    #[test]
    fn strings_decode_per_type() {
        let bmp = Element {
            tag: BMP_STRING,
            contents: &[0x00, 0x61, 0x00, 0xe9],
            encoded: &[],
        };
        assert_eq!(decode_string(&bmp).as_deref(), Some("aé"));
        let odd = Element {
            tag: BMP_STRING,
            contents: &[0x00],
            encoded: &[],
        };
        assert_eq!(decode_string(&odd), None);
        let latin = Element {
            tag: T61_STRING,
            contents: &[0x62, 0xe9],
            encoded: &[],
        };
        assert_eq!(decode_string(&latin).as_deref(), Some("bé"));
        let bad_utf8 = Element {
            tag: UTF8_STRING,
            contents: &[0xff],
            encoded: &[],
        };
        assert_eq!(decode_string(&bad_utf8), None);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = common_name(&bytes);
            let _ = end_point_hash(&bytes);
        }

        #[test]
        fn mutated_certificates_never_panic(
            position in 0usize..2048,
            byte in any::<u8>(),
            cut in 0usize..2048,
        ) {
            let mut der = TestPki::shared().client_cert_der();
            if position < der.len() {
                der[position] = byte;
            }
            der.truncate(cut.max(1));
            let _ = common_name(&der);
            let _ = end_point_hash(&der);
        }
    }
}
