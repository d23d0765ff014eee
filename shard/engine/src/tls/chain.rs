//! pgtier's own check of a peer's certificate chain, for the chains rustls's WebPKI verifier
//! cannot read: any with an X.509 version 1 (or 2) certificate, which OpenSSL accepts and
//! PgBouncer therefore takes (`openssl ca` without an extensions section makes them). Chains
//! of version 3 certificates only go to WebPKI as before ([`super::verify`] decides).
//!
//! What is checked, as OpenSSL and WebPKI do: the leaf and every certificate up to a trust
//! anchor of the configured CA file are within their validity period; each is signed by the
//! next (the signature verified with ring, through the crypto provider's algorithms: RSA
//! PKCS#1 and PSS, ECDSA P-256/P-384, Ed25519); a certificate between the leaf and the anchor
//! is a version 3 CA (basicConstraints cA, keyCertSign when keyUsage is present, its path
//! length respected); extended key usages, where present, allow the purpose; no certificate
//! has a critical extension pgtier does not understand. Names are compared byte for byte.
//! The host name check ([`verify_host_name`]) follows libpq: subjectAltName DNS names and IP
//! addresses when there are any, else the subject's common name.
//!
//! Handshake signatures ([`verify_signature`]) are checked against the key read from the
//! certificate, for every version, so a peer proves it holds the key of what it presented.

use super::certificate::{AltName, CLIENT_AUTH, Certificate, KEY_USAGE_KEY_CERT_SIGN, SERVER_AUTH};
use super::x509;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls13_signature_with_raw_key};
use rustls::pki_types::{CertificateDer, ServerName, SubjectPublicKeyInfoDer, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, PeerMisbehaved};
use std::net::IpAddr;

/// The most certificates allowed between a leaf and its trust anchor (WebPKI allows 6 too).
const MAX_INTERMEDIATES: usize = 6;

/// What the peer's certificate must be good for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    /// pgtier connects to a server (`server_tls_sslmode` verify-ca/verify-full).
    ServerAuth,
    /// A client connects to pgtier (`client_tls_sslmode` verify-ca/verify-full, or a CA file).
    ClientAuth,
}

impl Purpose {
    fn oid(self) -> &'static [u8] {
        match self {
            Purpose::ServerAuth => SERVER_AUTH,
            Purpose::ClientAuth => CLIENT_AUTH,
        }
    }
}

/// The certificates of a CA file, each readable by [`Certificate::parse`].
#[derive(Clone, Debug)]
pub(super) struct TrustAnchors {
    certificates: Vec<CertificateDer<'static>>,
}

impl TrustAnchors {
    /// The anchors of a CA file. A certificate pgtier's reader cannot read (WebPKI took it,
    /// or the file would have been refused) stays usable for version 3 chains through WebPKI
    /// and is left out here, so an odd root in a system bundle does not stop the start.
    pub(super) fn new(certificates: Vec<CertificateDer<'static>>) -> TrustAnchors {
        let certificates = certificates
            .into_iter()
            .filter(|der| Certificate::parse(der).is_some())
            .collect();
        TrustAnchors { certificates }
    }

    fn parsed(&self) -> impl Iterator<Item = Certificate<'_>> {
        self.certificates
            .iter()
            .filter_map(|der| Certificate::parse(der))
    }
}

/// Whether WebPKI cannot read this chain because one of its certificates is not version 3
/// (then [`verify_chain`] is the check). Certificates this module cannot read either are left
/// to WebPKI, which refuses them with its own reason.
pub(super) fn needs_own_check(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
) -> bool {
    std::iter::once(end_entity)
        .chain(intermediates)
        .filter_map(|der| Certificate::parse(der))
        .any(|certificate| certificate.version < 3)
}

/// Checks that `end_entity` chains to one of `anchors` through `intermediates` (as the peer
/// sent them, in any order) and is valid at `now` for `purpose`.
pub(super) fn verify_chain(
    end_entity: &CertificateDer<'_>,
    intermediates: &[CertificateDer<'_>],
    anchors: &TrustAnchors,
    purpose: Purpose,
    now: UnixTime,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<(), CertificateError> {
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let leaf = Certificate::parse(end_entity).ok_or(CertificateError::BadEncoding)?;
    usable_at(&leaf, now)?;
    if leaf.extensions.is_ca || !leaf.allows_purpose(purpose.oid()) {
        return Err(CertificateError::InvalidPurpose);
    }
    let intermediates = intermediates
        .iter()
        .map(|der| Certificate::parse(der).ok_or(CertificateError::BadEncoding))
        .collect::<Result<Vec<_>, _>>()?;
    let mut current = leaf;
    for depth in 0..=MAX_INTERMEDIATES {
        // The first failure seen on the way is the most telling reason.
        let mut failure = None;
        for anchor in anchors.parsed().filter(|a| a.subject == current.issuer) {
            match signed_by(&current, &anchor, algorithms).and_then(|()| usable_at(&anchor, now)) {
                Ok(()) => return Ok(()),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        if depth == MAX_INTERMEDIATES {
            break;
        }
        let mut next = None;
        for candidate in intermediates.iter().filter(|c| c.subject == current.issuer) {
            let step = may_issue(candidate, depth, purpose, now)
                .and_then(|()| signed_by(&current, candidate, algorithms));
            match step {
                Ok(()) => {
                    next = Some(candidate.clone());
                    break;
                }
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        match next {
            Some(issuer) => current = issuer,
            None => return Err(failure.unwrap_or(CertificateError::UnknownIssuer)),
        }
    }
    Err(CertificateError::UnknownIssuer)
}

/// Within its validity period at `now`, and no critical extension pgtier does not understand.
fn usable_at(certificate: &Certificate<'_>, now: i64) -> Result<(), CertificateError> {
    if certificate.extensions.unknown_critical {
        return Err(CertificateError::UnhandledCriticalExtension);
    }
    if now < certificate.not_before {
        return Err(CertificateError::NotValidYet);
    }
    if now > certificate.not_after {
        return Err(CertificateError::Expired);
    }
    Ok(())
}

/// Whether `issuer` may sign certificates, with `depth` certificates between it and the leaf
/// (0 for the leaf's own issuer; its path length limit counts those).
fn may_issue(
    issuer: &Certificate<'_>,
    depth: usize,
    purpose: Purpose,
    now: i64,
) -> Result<(), CertificateError> {
    usable_at(issuer, now)?;
    let extensions = &issuer.extensions;
    let key_cert_sign = extensions
        .key_usage
        .is_none_or(|bits| bits[0] & KEY_USAGE_KEY_CERT_SIGN != 0);
    let path_ok = extensions
        .path_len
        .is_none_or(|limit| u64::try_from(depth).is_ok_and(|depth| depth <= limit));
    let is_ca = issuer.version == 3 && extensions.is_ca && key_cert_sign && path_ok;
    if !is_ca || !issuer.allows_purpose(purpose.oid()) {
        return Err(CertificateError::InvalidPurpose);
    }
    Ok(())
}

/// Whether `issuer`'s key signed `certificate`.
fn signed_by(
    certificate: &Certificate<'_>,
    issuer: &Certificate<'_>,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<(), CertificateError> {
    let mut candidates = algorithms.all.iter().filter(|algorithm| {
        algorithm.signature_alg_id().as_ref() == certificate.signature_algorithm
            && algorithm.public_key_alg_id().as_ref() == issuer.key_algorithm
    });
    let mut any = false;
    let verified = candidates.any(|algorithm| {
        any = true;
        algorithm
            .verify_signature(issuer.public_key, certificate.signed, certificate.signature)
            .is_ok()
    });
    match (verified, any) {
        (true, _) => Ok(()),
        (false, true) => Err(CertificateError::BadSignature),
        (false, false) => Err(CertificateError::UnsupportedSignatureAlgorithmContext {
            signature_algorithm_id: certificate.signature_algorithm.to_vec(),
            supported_algorithms: algorithms
                .all
                .iter()
                .map(|algorithm| algorithm.signature_alg_id())
                .collect(),
        }),
    }
}

/// libpq's `verify-full` name check: the subjectAltName DNS names and IP addresses when the
/// certificate has any, else its subject's (last) common name.
pub(super) fn verify_host_name(
    end_entity: &CertificateDer<'_>,
    name: &ServerName<'_>,
) -> Result<(), CertificateError> {
    let certificate = Certificate::parse(end_entity).ok_or(CertificateError::BadEncoding)?;
    let alt_names: Vec<AltName<'_>> = certificate.alt_names().collect();
    let (matched, presented) = match alt_names.is_empty() {
        false => {
            let matched = alt_names.iter().any(|alt_name| match (alt_name, name) {
                (AltName::Dns(pattern), ServerName::DnsName(host)) => {
                    dns_matches(pattern, host.as_ref())
                }
                (AltName::Ip(address), ServerName::IpAddress(host)) => {
                    ip_bytes(&IpAddr::from(*host)) == *address
                }
                _ => false,
            });
            (matched, alt_names.iter().map(describe).collect())
        }
        true => {
            let common_name = x509::last_common_name(certificate.subject_contents);
            let matched = common_name
                .as_deref()
                .is_some_and(|common_name| match name {
                    ServerName::DnsName(host) => dns_matches(common_name.as_bytes(), host.as_ref()),
                    ServerName::IpAddress(host) => common_name == IpAddr::from(*host).to_string(),
                    _ => false,
                });
            (matched, common_name.into_iter().collect())
        }
    };
    match matched {
        true => Ok(()),
        false => Err(CertificateError::NotValidForNameContext {
            expected: name.to_owned(),
            presented,
        }),
    }
}

/// A subjectAltName entry as text, for the refusal's message.
fn describe(alt_name: &AltName<'_>) -> String {
    match alt_name {
        AltName::Dns(name) => String::from_utf8_lossy(name).into_owned(),
        AltName::Ip([a, b, c, d]) => IpAddr::from([*a, *b, *c, *d]).to_string(),
        AltName::Ip(bytes) => match <[u8; 16]>::try_from(*bytes) {
            Ok(v6) => IpAddr::from(v6).to_string(),
            Err(_) => format!("{bytes:02x?}"),
        },
    }
}

fn ip_bytes(address: &IpAddr) -> Vec<u8> {
    match address {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// A certificate name against a host name, case-insensitively; `*.` as the whole first label
/// matches exactly one label of the host (libpq's rule: `*.example.com` matches
/// `db.example.com`, not `example.com` nor `a.b.example.com`).
fn dns_matches(pattern: &[u8], host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host).as_bytes();
    let pattern = pattern.strip_suffix(b".").unwrap_or(pattern);
    match pattern.strip_prefix(b"*.") {
        Some(suffix) => match host.iter().position(|byte| *byte == b'.') {
            Some(dot) => dot > 0 && host[dot + 1..].eq_ignore_ascii_case(suffix),
            None => false,
        },
        None => pattern.eq_ignore_ascii_case(host),
    }
}

/// Which TLS version a handshake signature comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Version {
    Tls12,
    Tls13,
}

/// Checks a handshake signature (CertificateVerify, or TLS 1.2's ServerKeyExchange) against
/// the key of the peer's certificate, whatever its version.
pub(super) fn verify_signature(
    version: Version,
    message: &[u8],
    certificate: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
    algorithms: &WebPkiSupportedAlgorithms,
) -> Result<HandshakeSignatureValid, Error> {
    let certificate = Certificate::parse(certificate)
        .ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let spki = SubjectPublicKeyInfoDer::from(certificate.spki);
    if version == Version::Tls13 {
        return verify_tls13_signature_with_raw_key(message, &spki, dss, algorithms);
    }
    // TLS 1.2 names a scheme that may map to several algorithms (RSA key sizes): any of those
    // for this key's type may verify it.
    let candidates = algorithms
        .mapping
        .iter()
        .find(|(scheme, _)| *scheme == dss.scheme)
        .map(|(_, candidates)| *candidates)
        .ok_or(Error::PeerMisbehaved(
            PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
        ))?;
    let mut for_this_key = candidates
        .iter()
        .filter(|algorithm| algorithm.public_key_alg_id().as_ref() == certificate.key_algorithm)
        .peekable();
    if for_this_key.peek().is_none() {
        return Err(Error::InvalidCertificate(
            CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext {
                signature_algorithm_id: u16::from(dss.scheme).to_be_bytes().to_vec(),
                public_key_algorithm_id: certificate.key_algorithm.to_vec(),
            },
        ));
    }
    match for_this_key.any(|algorithm| {
        algorithm
            .verify_signature(certificate.public_key, message, dss.signature())
            .is_ok()
    }) {
        true => Ok(HandshakeSignatureValid::assertion()),
        false => Err(Error::InvalidCertificate(CertificateError::BadSignature)),
    }
}

#[cfg(test)]
mod tests;
