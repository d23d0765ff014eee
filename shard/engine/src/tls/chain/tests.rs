//! The chain check on its own, with version 1 certificates made by the test PKI and the
//! version 3 ones rcgen makes.

use super::*;
use crate::tls::test_pki::TestPki;
use rustls::crypto::ring::default_provider;

fn algorithms() -> WebPkiSupportedAlgorithms {
    default_provider().signature_verification_algorithms
}

fn anchors(pki: &TestPki) -> TrustAnchors {
    TrustAnchors::new(vec![CertificateDer::from(pki.ca_cert_der())])
}

fn check(pki: &TestPki, leaf: &[u8], purpose: Purpose) -> Result<(), CertificateError> {
    check_at(pki, leaf, purpose, UnixTime::now())
}

fn check_at(
    pki: &TestPki,
    leaf: &[u8],
    purpose: Purpose,
    now: UnixTime,
) -> Result<(), CertificateError> {
    let leaf = CertificateDer::from(leaf.to_vec());
    verify_chain(&leaf, &[], &anchors(pki), purpose, now, &algorithms())
}

fn name(text: &str) -> ServerName<'static> {
    ServerName::try_from(text.to_string()).unwrap()
}

#[test]
fn a_version_1_leaf_from_the_ca_verifies_for_either_purpose() {
    let pki = TestPki::shared();
    let v1 = pki.issue_v1("localhost", 2000, 2090).cert_der();
    let der = CertificateDer::from(v1.clone());
    assert!(needs_own_check(&der, &[]));
    assert_eq!(check(pki, &v1, Purpose::ServerAuth), Ok(()));
    assert_eq!(check(pki, &v1, Purpose::ClientAuth), Ok(()));
}

#[test]
fn version_3_chains_verify_too_with_their_purposes() {
    let pki = TestPki::shared();
    let server = pki.server_cert_der();
    assert!(!needs_own_check(&CertificateDer::from(server.clone()), &[]));
    assert_eq!(check(pki, &server, Purpose::ServerAuth), Ok(()));
    assert_eq!(
        check(pki, &server, Purpose::ClientAuth),
        Err(CertificateError::InvalidPurpose)
    );
    assert_eq!(
        check(pki, &pki.client_cert_der(), Purpose::ClientAuth),
        Ok(())
    );
    // The CA itself is no leaf.
    assert_eq!(
        check(pki, &pki.ca_cert_der(), Purpose::ServerAuth),
        Err(CertificateError::InvalidPurpose)
    );
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let pki = TestPki::shared();
    // Same CA name, other key: the issuer is found by name and its signature fails.
    let same_name = TestPki::new().issue_v1("localhost", 2000, 2090).cert_der();
    assert_eq!(
        check(pki, &same_name, Purpose::ServerAuth),
        Err(CertificateError::BadSignature)
    );
    // A self-signed certificate names no CA of the file.
    let stranger = TestPki::self_signed_server(&["localhost"]).cert_der();
    assert_eq!(
        check(pki, &stranger, Purpose::ServerAuth),
        Err(CertificateError::UnknownIssuer)
    );
    // A tampered certificate no longer matches its signature.
    let mut tampered = pki.issue_v1("localhost", 2000, 2090).cert_der();
    let position = tampered
        .windows(9)
        .position(|window| window == b"localhost")
        .unwrap();
    tampered[position] = b'L';
    assert_eq!(
        check(pki, &tampered, Purpose::ServerAuth),
        Err(CertificateError::BadSignature)
    );
    assert_eq!(
        check(pki, b"not a certificate", Purpose::ServerAuth),
        Err(CertificateError::BadEncoding)
    );
}

#[test]
fn validity_periods_are_enforced() {
    let pki = TestPki::shared();
    let expired = pki.issue_v1("localhost", 2000, 2001).cert_der();
    assert_eq!(
        check(pki, &expired, Purpose::ServerAuth),
        Err(CertificateError::Expired)
    );
    let future = pki.issue_v1("localhost", 2080, 2090).cert_der();
    assert_eq!(
        check(pki, &future, Purpose::ServerAuth),
        Err(CertificateError::NotValidYet)
    );
    // The CA's own period counts too: rcgen's CA is valid from 1975 to 4096.
    let early = UnixTime::since_unix_epoch(std::time::Duration::from_secs(100));
    let old = pki.issue_v1("localhost", 1970, 2090).cert_der();
    assert_eq!(
        check_at(pki, &old, Purpose::ServerAuth, early),
        Err(CertificateError::NotValidYet)
    );
}

#[test]
fn an_intermediate_must_be_a_ca() {
    let pki = TestPki::shared();
    // The leaf names the CA as its issuer; a non-CA certificate from the peer with that name
    // (here: a v1 certificate whose subject is the CA's) cannot stand in for it.
    let v1 = pki.issue_v1("localhost", 2000, 2090).cert_der();
    let leaf = CertificateDer::from(v1.clone());
    let other_pki = TestPki::new();
    let impostor = CertificateDer::from(other_pki.ca_cert_der());
    let only_other = TrustAnchors::new(vec![CertificateDer::from(
        TestPki::self_signed_server(&["x"]).cert_der(),
    )]);
    let result = verify_chain(
        &leaf,
        &[impostor],
        &only_other,
        Purpose::ServerAuth,
        UnixTime::now(),
        &algorithms(),
    );
    // The other CA is a CA, but its key did not sign the leaf.
    assert_eq!(result, Err(CertificateError::BadSignature));
    let not_a_ca = CertificateDer::from(pki.issue_v1("pgtier test CA", 2000, 2090).cert_der());
    let result = verify_chain(
        &leaf,
        &[not_a_ca],
        &only_other,
        Purpose::ServerAuth,
        UnixTime::now(),
        &algorithms(),
    );
    assert_eq!(result, Err(CertificateError::InvalidPurpose));
}

#[test]
fn host_names_follow_libpq() {
    let pki = TestPki::shared();
    // No subjectAltName: the common name.
    let v1 = CertificateDer::from(pki.issue_v1("localhost", 2000, 2090).cert_der());
    assert_eq!(verify_host_name(&v1, &name("localhost")), Ok(()));
    assert_eq!(verify_host_name(&v1, &name("LOCALHOST.")), Ok(()));
    assert_eq!(
        verify_host_name(&v1, &name("127.0.0.1")),
        Err(CertificateError::NotValidForNameContext {
            expected: name("127.0.0.1"),
            presented: vec!["localhost".to_string()],
        })
    );
    let by_address = CertificateDer::from(pki.issue_v1("10.0.0.7", 2000, 2090).cert_der());
    assert_eq!(verify_host_name(&by_address, &name("10.0.0.7")), Ok(()));
    let wildcard = CertificateDer::from(pki.issue_v1("*.example.com", 2000, 2090).cert_der());
    assert_eq!(verify_host_name(&wildcard, &name("db.example.com")), Ok(()));
    assert!(verify_host_name(&wildcard, &name("a.db.example.com")).is_err());
    assert!(verify_host_name(&wildcard, &name("example.com")).is_err());
    // With subjectAltName entries, those and not the common name ("pgtier test server").
    let v3 = CertificateDer::from(pki.server_cert_der());
    assert_eq!(verify_host_name(&v3, &name("localhost")), Ok(()));
    assert_eq!(verify_host_name(&v3, &name("127.0.0.1")), Ok(()));
    assert_eq!(
        verify_host_name(&v3, &name("db.example.com")),
        Err(CertificateError::NotValidForNameContext {
            expected: name("db.example.com"),
            presented: vec!["localhost".to_string(), "127.0.0.1".to_string()],
        })
    );
}

#[test]
fn unreadable_anchors_are_left_out() {
    let pki = TestPki::shared();
    let anchors = TrustAnchors::new(vec![
        CertificateDer::from(b"not a certificate".to_vec()),
        CertificateDer::from(pki.ca_cert_der()),
    ]);
    assert_eq!(anchors.parsed().count(), 1);
    let v1 = pki.issue_v1("localhost", 2000, 2090).cert_der();
    let leaf = CertificateDer::from(v1);
    let result = verify_chain(
        &leaf,
        &[],
        &anchors,
        Purpose::ServerAuth,
        UnixTime::now(),
        &algorithms(),
    );
    assert_eq!(result, Ok(()));
}

#[test]
fn dns_patterns() {
    assert!(dns_matches(b"Db.Example.com", "db.example.COM"));
    assert!(dns_matches(b"*.example.com", "x.example.com"));
    assert!(!dns_matches(b"*.example.com", ".example.com"));
    assert!(!dns_matches(b"db*.example.com", "db1.example.com"));
    assert!(!dns_matches(b"*", "localhost"));
    assert!(!dns_matches(b"", "localhost"));
}
