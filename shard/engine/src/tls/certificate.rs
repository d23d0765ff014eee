//! An X.509 certificate read into the fields pgtier's own chain checks need ([`super::chain`]):
//! versions 1, 2 and 3 alike, since rustls's WebPKI parser takes only version 3 and
//! OpenSSL-made test and in-house certificates are often version 1 (`openssl ca` or
//! `x509 -req` without extensions). Reading only: nothing here decides whether a certificate
//! is trusted. Input may come from an unauthenticated peer: every read is bounds-checked and a
//! malformed certificate gives `None`, never a panic.

use super::der::{
    self, BIT_STRING, BOOLEAN, Element, GENERALIZED_TIME, INTEGER, OCTET_STRING, OID, SEQUENCE,
    UTC_TIME, element, expect, optional,
};

/// `[0] EXPLICIT Version`, `[1] IMPLICIT issuerUniqueID`, `[2] IMPLICIT subjectUniqueID`,
/// `[3] EXPLICIT Extensions` inside tbsCertificate.
const VERSION_TAG: u8 = 0xa0;
const ISSUER_UNIQUE_ID_TAG: u8 = 0x81;
const SUBJECT_UNIQUE_ID_TAG: u8 = 0x82;
const EXTENSIONS_TAG: u8 = 0xa3;

/// Extensions read here (id-ce, 2.5.29.x).
const KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x0f];
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const EXTENDED_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];

/// id-kp-serverAuth and id-kp-clientAuth (1.3.6.1.5.5.7.3.1 and .2).
pub(super) const SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
pub(super) const CLIENT_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];

/// GeneralName tags of subjectAltName entries: `[2] dNSName`, `[7] iPAddress`.
const DNS_NAME_TAG: u8 = 0x82;
const IP_ADDRESS_TAG: u8 = 0x87;

/// One certificate's fields, borrowed from its DER.
#[derive(Clone, Debug)]
pub(super) struct Certificate<'a> {
    /// 1, 2 or 3, as X.509 numbers versions (the field holds 0, 1 or 2).
    pub(super) version: u8,
    /// The whole tbsCertificate encoding: the bytes the issuer signed.
    pub(super) signed: &'a [u8],
    /// The contents of the outer signatureAlgorithm (OID and parameters).
    pub(super) signature_algorithm: &'a [u8],
    pub(super) signature: &'a [u8],
    /// The issuer and subject Names, whole encodings (compared byte for byte, as WebPKI does).
    pub(super) issuer: &'a [u8],
    pub(super) subject: &'a [u8],
    /// The subject Name's contents (for its common name).
    pub(super) subject_contents: &'a [u8],
    /// notBefore and notAfter, in seconds since the Unix epoch.
    pub(super) not_before: i64,
    pub(super) not_after: i64,
    /// The whole SubjectPublicKeyInfo encoding.
    pub(super) spki: &'a [u8],
    /// Its algorithm's contents (OID and parameters) and the key itself.
    pub(super) key_algorithm: &'a [u8],
    pub(super) public_key: &'a [u8],
    pub(super) extensions: Extensions<'a>,
}

/// The extensions pgtier understands, and whether there was a critical one it does not.
/// All empty for version 1 and 2 certificates, which have no extensions.
#[derive(Clone, Debug, Default)]
pub(super) struct Extensions<'a> {
    /// basicConstraints cA.
    pub(super) is_ca: bool,
    /// basicConstraints pathLenConstraint.
    pub(super) path_len: Option<u64>,
    /// keyUsage's first two bytes of bits, when present.
    pub(super) key_usage: Option<[u8; 2]>,
    /// extKeyUsage's contents (a sequence of OIDs), when present.
    pub(super) extended_key_usage: Option<&'a [u8]>,
    /// subjectAltName's contents (a sequence of GeneralNames), when present.
    pub(super) subject_alt_names: Option<&'a [u8]>,
    /// A critical extension not listed above (the certificate must then be refused).
    pub(super) unknown_critical: bool,
}

/// keyUsage's keyCertSign bit (in the first byte).
pub(super) const KEY_USAGE_KEY_CERT_SIGN: u8 = 0x04;

/// A subjectAltName entry pgtier matches host names against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AltName<'a> {
    Dns(&'a [u8]),
    Ip(&'a [u8]),
}

impl<'a> Certificate<'a> {
    /// Reads a DER certificate; `None` when it is malformed (including trailing bytes).
    pub(super) fn parse(der: &'a [u8]) -> Option<Certificate<'a>> {
        let (certificate, trailing) = expect(der, SEQUENCE)?;
        if !trailing.is_empty() {
            return None;
        }
        let (tbs, rest) = expect(certificate.contents, SEQUENCE)?;
        let (outer_algorithm, rest) = expect(rest, SEQUENCE)?;
        let (signature, rest) = expect(rest, BIT_STRING)?;
        if !rest.is_empty() {
            return None;
        }
        let signature = der::whole_bytes(&signature)?;

        let (version, rest) = version(tbs.contents)?;
        let (_serial, rest) = expect(rest, INTEGER)?;
        let (inner_algorithm, rest) = expect(rest, SEQUENCE)?;
        // The algorithm is stated twice; a certificate whose two statements differ is forged
        // or broken.
        if inner_algorithm.contents != outer_algorithm.contents {
            return None;
        }
        let (issuer, rest) = expect(rest, SEQUENCE)?;
        let (validity, rest) = expect(rest, SEQUENCE)?;
        let (not_before, validity_rest) = time(validity.contents)?;
        let (not_after, validity_rest) = time(validity_rest)?;
        if !validity_rest.is_empty() {
            return None;
        }
        let (subject, rest) = expect(rest, SEQUENCE)?;
        let (spki, rest) = expect(rest, SEQUENCE)?;
        let (key_algorithm, key_rest) = expect(spki.contents, SEQUENCE)?;
        let (key_bits, key_rest) = expect(key_rest, BIT_STRING)?;
        if !key_rest.is_empty() {
            return None;
        }
        let public_key = der::whole_bytes(&key_bits)?;

        let (_, rest) = optional(rest, ISSUER_UNIQUE_ID_TAG);
        let (_, rest) = optional(rest, SUBJECT_UNIQUE_ID_TAG);
        let (extensions_field, rest) = optional(rest, EXTENSIONS_TAG);
        if !rest.is_empty() {
            return None;
        }
        let extensions = match extensions_field {
            // Extensions exist in version 3 only.
            Some(field) if version == 3 => extensions(field.contents)?,
            Some(_) => return None,
            None => Extensions::default(),
        };
        Some(Certificate {
            version,
            signed: tbs.encoded,
            signature_algorithm: outer_algorithm.contents,
            signature,
            issuer: issuer.encoded,
            subject: subject.encoded,
            subject_contents: subject.contents,
            not_before,
            not_after,
            spki: spki.encoded,
            key_algorithm: key_algorithm.contents,
            public_key,
            extensions,
        })
    }

    /// The subjectAltName entries that are DNS names or IP addresses (others are skipped).
    pub(super) fn alt_names(&self) -> impl Iterator<Item = AltName<'a>> + 'a {
        let mut rest = self.extensions.subject_alt_names.unwrap_or(&[]);
        std::iter::from_fn(move || {
            loop {
                let (name, after) = element(rest)?;
                rest = after;
                match name.tag {
                    DNS_NAME_TAG => return Some(AltName::Dns(name.contents)),
                    IP_ADDRESS_TAG => return Some(AltName::Ip(name.contents)),
                    _ => continue,
                }
            }
        })
    }

    /// Whether extKeyUsage, when present, allows `purpose` (an OID's contents).
    pub(super) fn allows_purpose(&self, purpose: &[u8]) -> bool {
        let Some(mut rest) = self.extensions.extended_key_usage else {
            return true;
        };
        while let Some((oid, after)) = expect(rest, OID) {
            if oid.contents == purpose {
                return true;
            }
            rest = after;
        }
        false
    }
}

/// The version (1 when the field is absent, its DEFAULT) and what follows it.
fn version(tbs: &[u8]) -> Option<(u8, &[u8])> {
    let (field, rest) = optional(tbs, VERSION_TAG);
    let Some(field) = field else {
        return Some((1, tbs));
    };
    let (number, trailing) = expect(field.contents, INTEGER)?;
    match (number.contents, trailing) {
        // DER leaves a DEFAULT value out, so an explicit v1 is malformed.
        ([1], []) => Some((2, rest)),
        ([2], []) => Some((3, rest)),
        _ => None,
    }
}

/// Reads the extensions' contents (a SEQUENCE of Extension); `None` when malformed or when
/// an extension read here appears twice.
fn extensions(field: &[u8]) -> Option<Extensions<'_>> {
    let (list, trailing) = expect(field, SEQUENCE)?;
    if !trailing.is_empty() || list.contents.is_empty() {
        return None;
    }
    let mut found = Extensions::default();
    let mut seen = [false; 4];
    let mut rest = list.contents;
    while !rest.is_empty() {
        let (extension, after) = expect(rest, SEQUENCE)?;
        rest = after;
        let (oid, fields) = expect(extension.contents, OID)?;
        let (critical, fields) = optional(fields, BOOLEAN);
        let critical = match critical.map(|flag| flag.contents) {
            None => false,
            Some([0xff]) => true,
            Some(_) => return None, // FALSE is the DEFAULT and must be left out; other bytes are not DER
        };
        let (value, trailing) = expect(fields, OCTET_STRING)?;
        if !trailing.is_empty() {
            return None;
        }
        let value = value.contents;
        let index = match oid.contents {
            BASIC_CONSTRAINTS => {
                (found.is_ca, found.path_len) = basic_constraints(value)?;
                0
            }
            KEY_USAGE => {
                found.key_usage = Some(key_usage(value)?);
                1
            }
            EXTENDED_KEY_USAGE => {
                let (purposes, trailing) = expect(value, SEQUENCE)?;
                (trailing.is_empty() && !purposes.contents.is_empty()).then_some(())?;
                found.extended_key_usage = Some(purposes.contents);
                2
            }
            SUBJECT_ALT_NAME => {
                let (names, trailing) = expect(value, SEQUENCE)?;
                trailing.is_empty().then_some(())?;
                found.subject_alt_names = Some(names.contents);
                3
            }
            _ => {
                found.unknown_critical |= critical;
                continue;
            }
        };
        if std::mem::replace(&mut seen[index], true) {
            return None;
        }
    }
    Some(found)
}

/// basicConstraints: `SEQUENCE { cA BOOLEAN DEFAULT FALSE, pathLenConstraint INTEGER OPTIONAL }`.
fn basic_constraints(value: &[u8]) -> Option<(bool, Option<u64>)> {
    let (sequence, trailing) = expect(value, SEQUENCE)?;
    if !trailing.is_empty() {
        return None;
    }
    let (ca, rest) = optional(sequence.contents, BOOLEAN);
    let is_ca = match ca.map(|flag| flag.contents) {
        None => false,
        Some([0xff]) => true,
        Some(_) => return None,
    };
    let (path_len, rest) = optional(rest, INTEGER);
    if !rest.is_empty() {
        return None;
    }
    let path_len = match path_len {
        None => None,
        Some(number) => Some(small_unsigned(&number)?),
    };
    Some((is_ca, path_len))
}

/// A non-negative INTEGER that fits in a u64.
fn small_unsigned(number: &Element<'_>) -> Option<u64> {
    let bytes = number.contents;
    let (&first, _) = bytes.split_first()?;
    if first & 0x80 != 0 {
        return None;
    }
    let bytes = match bytes {
        [0, rest @ ..] if !rest.is_empty() => rest,
        _ => bytes,
    };
    if bytes.len() > 8 {
        return None;
    }
    Some(bytes.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
}

/// keyUsage: a BIT STRING; its first two bytes of bits (missing bytes are zero).
fn key_usage(value: &[u8]) -> Option<[u8; 2]> {
    let (bits, trailing) = expect(value, BIT_STRING)?;
    if !trailing.is_empty() {
        return None;
    }
    let (&unused, bytes) = bits.contents.split_first()?;
    if unused > 7 || bytes.is_empty() {
        return None;
    }
    Some([bytes[0], bytes.get(1).copied().unwrap_or(0)])
}

/// A Time (UTCTime or GeneralizedTime, in the `Z` forms DER allows) as Unix seconds, and what
/// follows it.
fn time(input: &[u8]) -> Option<(i64, &[u8])> {
    let (field, rest) = element(input)?;
    let text = field.contents;
    let (year, rest_of_time) = match (field.tag, text.len()) {
        (UTC_TIME, 13) => {
            // RFC 5280: two-digit years 50..99 are 19xx, 00..49 are 20xx.
            let year = digits(&text[..2])?;
            (
                if year >= 50 { 1900 + year } else { 2000 + year },
                &text[2..],
            )
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest_of_time.last() != Some(&b'Z') {
        return None;
    }
    let month = digits(&rest_of_time[0..2])?;
    let day = digits(&rest_of_time[2..4])?;
    let hour = digits(&rest_of_time[4..6])?;
    let minute = digits(&rest_of_time[6..8])?;
    let second = digits(&rest_of_time[8..10])?;
    let valid = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour < 24
        && minute < 60
        && second < 60;
    if !valid {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3600 + minute * 60 + second, rest))
}

fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |n, byte| {
        byte.is_ascii_digit()
            .then(|| n * 10 + i64::from(byte - b'0'))
    })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_pki::TestPki;
    use proptest::prelude::*;

    #[test]
    fn reads_a_version_3_certificate() {
        let pki = TestPki::shared();
        let der = pki.server_cert_der();
        let cert = Certificate::parse(&der).unwrap();
        assert_eq!(cert.version, 3);
        assert!(!cert.extensions.is_ca && !cert.extensions.unknown_critical);
        assert!(cert.allows_purpose(SERVER_AUTH) && !cert.allows_purpose(CLIENT_AUTH));
        assert_eq!(
            cert.alt_names().collect::<Vec<_>>(),
            [AltName::Dns(b"localhost"), AltName::Ip(&[127, 0, 0, 1])]
        );
        assert!(cert.not_before < cert.not_after);
        let ca_der = pki.ca_cert_der();
        let ca = Certificate::parse(&ca_der).unwrap();
        assert!(ca.extensions.is_ca);
        assert_eq!(ca.subject, cert.issuer);
        let usage = ca.extensions.key_usage.unwrap();
        assert_ne!(usage[0] & KEY_USAGE_KEY_CERT_SIGN, 0);
    }

    #[test]
    fn reads_a_version_1_certificate() {
        let pki = TestPki::shared();
        let v1 = pki.issue_v1("localhost", 1970, 2096);
        let der = v1.cert_der();
        let cert = Certificate::parse(&der).unwrap();
        assert_eq!(cert.version, 1);
        assert_eq!(cert.not_before, 0);
        assert_eq!(cert.not_after, days_from_civil(2096, 1, 1) * 86_400);
        assert!(cert.extensions.subject_alt_names.is_none());
        assert!(cert.allows_purpose(CLIENT_AUTH));
        assert_eq!(
            crate::tls::x509::last_common_name(cert.subject_contents).as_deref(),
            Some("localhost")
        );
    }

    #[test]
    fn times_in_both_forms() {
        let utc = |text: &str| {
            let mut encoded = vec![UTC_TIME, text.len() as u8];
            encoded.extend_from_slice(text.as_bytes());
            time(&encoded).map(|(seconds, _)| seconds)
        };
        assert_eq!(utc("700101000000Z"), Some(0));
        assert_eq!(utc("491231235959Z"), Some(2_524_607_999));
        assert_eq!(utc("000229120000Z"), Some(951_825_600));
        assert_eq!(utc("010229120000Z"), None, "not a leap year");
        assert_eq!(utc("700101000000+0100"), None);
        assert_eq!(utc("701301000000Z"), None);
        let mut generalized = vec![GENERALIZED_TIME, 15];
        generalized.extend_from_slice(b"20500101000000Z");
        assert_eq!(time(&generalized).map(|t| t.0), Some(2_524_608_000));
    }

    #[test]
    fn explicit_version_1_and_extensions_outside_version_3_are_malformed() {
        assert!(version(&[VERSION_TAG, 3, INTEGER, 1, 0]).is_none());
        assert_eq!(
            version(&[VERSION_TAG, 3, INTEGER, 1, 2]).map(|v| v.0),
            Some(3)
        );
        assert_eq!(version(&[INTEGER, 1, 7]).map(|v| v.0), Some(1));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            if let Some(cert) = Certificate::parse(&bytes) {
                let _ = cert.alt_names().count();
            }
        }

        #[test]
        fn mutated_certificates_never_panic(
            position in 0usize..2048,
            byte in any::<u8>(),
            cut in 0usize..2048,
        ) {
            let mut der = TestPki::shared().server_cert_der();
            if position < der.len() {
                der[position] = byte;
            }
            der.truncate(cut.max(1));
            if let Some(cert) = Certificate::parse(&der) {
                let _ = cert.alt_names().count();
                let _ = cert.allows_purpose(SERVER_AUTH);
            }
        }
    }
}
