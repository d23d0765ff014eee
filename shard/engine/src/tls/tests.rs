//! Both sides of the module together: a [`TlsAcceptor`] session and a [`TlsConnector`] session
//! handshaking in memory, byte-in, byte-out, with the test PKI. Each test is one rule of the
//! configurations (ALPN, client certificates per `client_tls_sslmode`, server checks per
//! `server_tls_sslmode`, protocol and cipher limits) or of the session (data both ways, close,
//! hostile bytes).

use super::config::{AcceptorParams, ConnectorParams, TlsAcceptor, TlsConnector};
use super::error::TlsError;
use super::pem::PemFile;
use super::session::TlsSession;
use super::test_pki::{Issued, TestPki};
use bytes::BytesMut;
use pgtier_core::config::{CipherSuite, SslMode, TlsCiphers, TlsProtocols};
use proptest::prelude::*;
use rustls::{AlertDescription, CertificateError, Error};
use std::sync::Arc;

/// How the client-facing side is set up in a test.
struct Accept<'a> {
    mode: SslMode,
    protocols: &'a str,
    ciphers: &'a str,
    /// Certificate and key the server presents (the PKI's server certificate by default).
    cert: Option<(&'a str, &'a str)>,
    ca: Option<&'a str>,
}

impl<'a> Accept<'a> {
    fn new(mode: SslMode) -> Accept<'a> {
        Accept {
            mode,
            protocols: "secure",
            ciphers: "default",
            cert: None,
            ca: None,
        }
    }

    fn build(&self, pki: &TestPki) -> TlsAcceptor {
        self.try_build(pki).unwrap()
    }

    fn try_build(&self, pki: &TestPki) -> Result<TlsAcceptor, super::TlsConfigError> {
        let (cert, key) = self
            .cert
            .unwrap_or((&pki.server_cert_pem, &pki.server_key_pem));
        let ciphers = TlsCiphers::parse(self.ciphers).unwrap();
        TlsAcceptor::new(&AcceptorParams {
            mode: self.mode,
            protocols: TlsProtocols::parse(self.protocols).unwrap(),
            ciphers: &ciphers,
            cert_chain: PemFile::new("server.crt", cert.as_bytes()),
            key: PemFile::new("server.key", key.as_bytes()),
            ca: self
                .ca
                .map(|ca| PemFile::new("clients-ca.crt", ca.as_bytes())),
        })
    }
}

/// How the server-facing side is set up in a test.
struct Connect<'a> {
    mode: SslMode,
    protocols: &'a str,
    ciphers: &'a str,
    ca: Option<&'a str>,
    client_cert: Option<(&'a str, &'a str)>,
}

impl<'a> Connect<'a> {
    fn new(mode: SslMode) -> Connect<'a> {
        Connect {
            mode,
            protocols: "secure",
            ciphers: "default",
            ca: None,
            client_cert: None,
        }
    }

    fn build(&self) -> TlsConnector {
        let ciphers = TlsCiphers::parse(self.ciphers).unwrap();
        TlsConnector::new(&ConnectorParams {
            mode: self.mode,
            protocols: TlsProtocols::parse(self.protocols).unwrap(),
            ciphers: &ciphers,
            ca: self
                .ca
                .map(|ca| PemFile::new("servers-ca.crt", ca.as_bytes())),
            client_cert: self.client_cert.map(|(cert, key)| {
                (
                    PemFile::new("client.crt", cert.as_bytes()),
                    PemFile::new("client.key", key.as_bytes()),
                )
            }),
        })
        .unwrap()
    }
}

/// Which side failed a handshake.
#[derive(Debug, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// A connecting (client) and an accepting (server) session with what each decrypted.
struct Pair {
    client: TlsSession,
    server: TlsSession,
    client_plain: BytesMut,
    server_plain: BytesMut,
}

impl Pair {
    fn new(accept: &TlsAcceptor, connect: &TlsConnector, server_name: &str) -> Pair {
        Pair {
            client: TlsSession::connect(connect, server_name).unwrap(),
            server: TlsSession::accept(accept).unwrap(),
            client_plain: BytesMut::new(),
            server_plain: BytesMut::new(),
        }
    }

    /// Moves records both ways until neither side has any. On an error, the failing side's
    /// alert (if any) is delivered to the other side before returning.
    fn pump(&mut self) -> Result<(), (Side, TlsError)> {
        loop {
            let mut moved = false;
            if let Some(records) = self.client.take_output() {
                moved = true;
                if let Err(error) = self.server.receive(&records, &mut self.server_plain) {
                    self.deliver_alert_to_client();
                    return Err((Side::Server, error));
                }
            }
            if let Some(records) = self.server.take_output() {
                moved = true;
                if let Err(error) = self.client.receive(&records, &mut self.client_plain) {
                    self.deliver_alert_to_server();
                    return Err((Side::Client, error));
                }
            }
            if !moved {
                return Ok(());
            }
        }
    }

    fn deliver_alert_to_client(&mut self) {
        if let Some(alert) = self.server.take_output() {
            let _ = self.client.receive(&alert, &mut self.client_plain);
        }
    }

    fn deliver_alert_to_server(&mut self) {
        if let Some(alert) = self.client.take_output() {
            let _ = self.server.receive(&alert, &mut self.server_plain);
        }
    }

    fn established(&self) -> bool {
        !self.client.is_handshaking() && !self.server.is_handshaking()
    }
}

/// A handshake between the two configurations, expected to succeed.
fn handshake(accept: &TlsAcceptor, connect: &TlsConnector, server_name: &str) -> Pair {
    let mut pair = Pair::new(accept, connect, server_name);
    pair.pump().unwrap();
    assert!(pair.established());
    pair
}

/// A handshake expected to fail: which side failed and why.
fn refused(accept: &TlsAcceptor, connect: &TlsConnector, server_name: &str) -> (Side, Error) {
    let mut pair = Pair::new(accept, connect, server_name);
    match pair.pump() {
        Ok(()) => panic!("the handshake succeeded"),
        Err((side, TlsError::Protocol { error, .. })) => (side, error),
        Err((side, other)) => panic!("{side:?}: not a protocol error: {other}"),
    }
}

fn client_cert(pki: &TestPki) -> Option<(&str, &str)> {
    Some((&pki.client_cert_pem, &pki.client_key_pem))
}

fn issued_pair(issued: &Issued) -> Option<(&str, &str)> {
    Some((&issued.cert_pem, &issued.key_pem))
}

#[test]
fn handshake_negotiates_alpn_and_describes_the_connection() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::VerifyFull)
        .with_ca(&pki.ca_cert_pem)
        .build();
    let mut pair = Pair::new(&accept, &connect, "localhost");
    assert!(pair.client.is_handshaking() && pair.server.is_handshaking());
    assert_eq!(pair.client.description(), None);

    // The ClientHello is ready at once; follow the handshake flight by flight to see which
    // call finishes it on each side.
    let hello = pair.client.take_output().unwrap();
    let received = pair.server.receive(&hello, &mut pair.server_plain).unwrap();
    assert!(!received.handshake_finished);
    let flight = pair.server.take_output().unwrap();
    let received = pair
        .client
        .receive(&flight, &mut pair.client_plain)
        .unwrap();
    assert!(
        received.handshake_finished,
        "TLS 1.3: the client is done first"
    );
    let finished = pair.client.take_output().unwrap();
    let received = pair
        .server
        .receive(&finished, &mut pair.server_plain)
        .unwrap();
    assert!(received.handshake_finished && !received.peer_closed);
    assert_eq!(pair.server.take_output(), None, "no session tickets");

    for side in [&pair.client, &pair.server] {
        assert_eq!(side.alpn_protocol(), Some(super::ALPN_POSTGRESQL));
        assert_eq!(side.protocol_version_name(), Some("TLSv1.3"));
        assert_eq!(
            side.description().as_deref(),
            Some("TLSv1.3/TLS_AES_256_GCM_SHA384/ECDH=X25519")
        );
    }
    let server_der = pki.server_cert_der();
    assert_eq!(pair.client.peer_certificate_der(), Some(&server_der[..]));
    assert_eq!(pair.server.local_certificate_der(), Some(&server_der[..]));
    assert_eq!(accept.leaf_certificate_der(), &server_der[..]);
    assert_eq!(pair.client.local_certificate_der(), None);
    assert_eq!(pair.server.peer_certificate_der(), None, "none asked for");
    let binding = pair.server.tls_server_end_point().unwrap();
    assert_eq!(binding.len(), 32, "SHA-256 for an ECDSA-SHA256 certificate");
    assert_eq!(pair.client.tls_server_end_point(), Some(binding));
}

#[test]
fn data_flows_both_ways_in_odd_chunks() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::Require).build();
    let mut pair = handshake(&accept, &connect, "localhost");
    let data: Vec<u8> = (0..1024 * 1024u32)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();

    for chunk in data.chunks(7919) {
        pair.client.send(chunk).unwrap();
    }
    let mut records = Vec::new();
    while let Some(output) = pair.client.take_output() {
        records.extend_from_slice(&output);
    }
    assert!(records.len() > data.len(), "records carry overhead");
    let mut given = 0;
    for chunk in records.chunks(1237) {
        let received = pair.server.receive(chunk, &mut pair.server_plain).unwrap();
        given += chunk.len();
        assert!(pair.server_plain.len() <= given, "never more than given");
        assert!(received.plaintext_bytes <= chunk.len() + super::MAX_PARTIAL_RECORD_BYTES);
        assert!(!received.handshake_finished && !received.peer_closed);
    }
    assert_eq!(pair.server_plain.len(), data.len());
    assert!(pair.server_plain[..] == data[..]);

    pair.server.send(&data).unwrap();
    let records = pair.server.take_output().unwrap();
    for chunk in records.chunks(16_411) {
        pair.client.receive(chunk, &mut pair.client_plain).unwrap();
    }
    assert!(pair.client_plain[..] == data[..]);
}

#[test]
fn data_sent_during_the_handshake_waits_for_it() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::Require).build();
    let mut pair = Pair::new(&accept, &connect, "localhost");
    pair.client.send(b"startup message").unwrap();
    let limit = super::HANDSHAKE_SEND_LIMIT_BYTES;
    let too_much = vec![0u8; limit];
    assert!(matches!(
        pair.client.send(&too_much),
        Err(TlsError::SendBufferFull)
    ));
    pair.pump().unwrap();
    assert_eq!(
        &pair.server_plain[..],
        b"startup message",
        "nothing of the refused send"
    );
    pair.client.send(&too_much).unwrap();
    pair.pump().unwrap();
    assert_eq!(
        pair.server_plain.len(),
        15 + limit,
        "no limit after the handshake"
    );
}

#[test]
fn a_client_offering_only_another_alpn_is_refused() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let mut config = (**Connect::new(SslMode::Require).build().rustls_config()).clone();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let other = TlsConnector::from_rustls(Arc::new(config), SslMode::Require);
    let (side, error) = refused(&accept, &other, "localhost");
    assert_eq!(side, Side::Server);
    assert_eq!(error, Error::NoApplicationProtocol);

    // A client that offers no ALPN at all (libpq before 17) is accepted.
    let mut config = (**Connect::new(SslMode::Require).build().rustls_config()).clone();
    config.alpn_protocols.clear();
    let none = TlsConnector::from_rustls(Arc::new(config), SslMode::Require);
    let pair = handshake(&accept, &none, "localhost");
    assert_eq!(pair.server.alpn_protocol(), None);
}

#[test]
fn verify_modes_require_a_client_certificate_from_the_ca() {
    let pki = TestPki::shared();
    let other = TestPki::new();
    for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
        let accept = Accept::new(mode).with_ca(&pki.ca_cert_pem).build(pki);
        let good = Connect::new(SslMode::Require)
            .with_client_cert(client_cert(pki))
            .build();
        let pair = handshake(&accept, &good, "localhost");
        assert_eq!(pair.server.peer_common_name().as_deref(), Some("alice"));
        assert_eq!(
            pair.server.peer_certificate_der(),
            Some(&pki.client_cert_der()[..])
        );

        let missing = Connect::new(SslMode::Require).build();
        let (side, error) = refused(&accept, &missing, "localhost");
        assert_eq!(
            (side, error),
            (Side::Server, Error::NoCertificatesPresented)
        );

        let foreign = Connect::new(SslMode::Require)
            .with_client_cert(client_cert(&other))
            .build();
        let (side, error) = refused(&accept, &foreign, "localhost");
        assert_eq!(side, Side::Server);
        // The other CA has the same name as ours, so webpki tries ours and the signature fails.
        assert!(
            matches!(
                error,
                Error::InvalidCertificate(
                    CertificateError::UnknownIssuer | CertificateError::BadSignature
                )
            ),
            "{mode}: {error:?}"
        );
    }
}

#[test]
fn lower_modes_with_a_ca_take_an_optional_client_certificate() {
    let pki = TestPki::shared();
    let other = TestPki::new();
    let accept = Accept::new(SslMode::Require)
        .with_ca(&pki.ca_cert_pem)
        .build(pki);
    let bob = pki.issue_client("bob");
    let good = Connect::new(SslMode::Require)
        .with_client_cert(issued_pair(&bob))
        .build();
    let pair = handshake(&accept, &good, "localhost");
    assert_eq!(pair.server.peer_common_name().as_deref(), Some("bob"));

    let none = Connect::new(SslMode::Require).build();
    let pair = handshake(&accept, &none, "localhost");
    assert_eq!(pair.server.peer_common_name(), None);

    let foreign = Connect::new(SslMode::Require)
        .with_client_cert(client_cert(&other))
        .build();
    let (side, _) = refused(&accept, &foreign, "localhost");
    assert_eq!(side, Side::Server, "a presented certificate must verify");

    // Without a CA no certificate is asked for, so one the client has is not sent.
    let no_ca = Accept::new(SslMode::Prefer).build(pki);
    let pair = handshake(&no_ca, &good, "localhost");
    assert_eq!(pair.server.peer_certificate_der(), None);
}

#[test]
fn verify_full_checks_the_host_name_or_address() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::VerifyFull)
        .with_ca(&pki.ca_cert_pem)
        .build();
    handshake(&accept, &connect, "localhost");
    handshake(&accept, &connect, "127.0.0.1");
    for name in ["db.example.com", "127.0.0.2", "::1"] {
        let (side, error) = refused(&accept, &connect, name);
        assert_eq!(side, Side::Client, "{name}");
        assert!(
            matches!(
                error,
                Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{name}: {error:?}"
        );
    }
}

#[test]
fn verify_ca_checks_the_chain_but_not_the_name() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::VerifyCa)
        .with_ca(&pki.ca_cert_pem)
        .build();
    handshake(&accept, &connect, "db.example.com");
    handshake(&accept, &connect, "10.1.2.3");

    let self_signed = TestPki::self_signed_server(&["localhost"]);
    let untrusted = Accept::new(SslMode::Require)
        .with_cert(issued_pair(&self_signed))
        .build(pki);
    let (side, error) = refused(&untrusted, &connect, "localhost");
    assert_eq!(side, Side::Client);
    assert_eq!(
        error,
        Error::InvalidCertificate(CertificateError::UnknownIssuer)
    );
}

#[test]
fn require_and_prefer_accept_any_certificate_even_with_a_ca() {
    let pki = TestPki::shared();
    let self_signed = TestPki::self_signed_server(&["elsewhere"]);
    let accept = Accept::new(SslMode::Require)
        .with_cert(issued_pair(&self_signed))
        .build(pki);
    for mode in [SslMode::Allow, SslMode::Prefer, SslMode::Require] {
        let connect = Connect::new(mode).with_ca(&pki.ca_cert_pem).build();
        let pair = handshake(&accept, &connect, "localhost");
        assert_eq!(
            pair.client.peer_certificate_der(),
            Some(&self_signed.cert_der()[..])
        );
    }
}

#[test]
fn version_1_certificates_work_on_both_sides_in_both_versions() {
    let pki = TestPki::shared();
    let server_v1 = pki.issue_v1("localhost", 2000, 2090);
    let client_v1 = pki.issue_v1("alice", 2000, 2090);
    for protocols in ["tlsv1.3", "tlsv1.2"] {
        let accept = Accept::new(SslMode::VerifyFull)
            .with_ca(&pki.ca_cert_pem)
            .with_cert(issued_pair(&server_v1))
            .with_protocols(protocols)
            .build(pki);
        let connect = Connect::new(SslMode::VerifyFull)
            .with_ca(&pki.ca_cert_pem)
            .with_client_cert(issued_pair(&client_v1))
            .with_protocols(protocols)
            .build();
        let pair = handshake(&accept, &connect, "localhost");
        assert_eq!(pair.server.peer_common_name().as_deref(), Some("alice"));
        assert_eq!(
            pair.client.peer_certificate_der(),
            Some(&server_v1.cert_der()[..])
        );
        // The name is the common name's: not the address.
        let (side, error) = refused(&accept, &connect, "127.0.0.1");
        assert_eq!(side, Side::Client, "{protocols}");
        assert!(
            matches!(
                error,
                Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{protocols}: {error:?}"
        );
    }
}

#[test]
fn version_1_peers_are_refused_when_expired_or_from_another_ca() {
    let pki = TestPki::shared();
    let other = TestPki::new();
    let accept = Accept::new(SslMode::VerifyCa)
        .with_ca(&pki.ca_cert_pem)
        .build(pki);
    let cases = [
        (pki.issue_v1("alice", 2000, 2001), CertificateError::Expired),
        (
            other.issue_v1("alice", 2000, 2090),
            CertificateError::BadSignature,
        ),
    ];
    for (certificate, expected) in cases {
        let connect = Connect::new(SslMode::Require)
            .with_client_cert(issued_pair(&certificate))
            .build();
        let (side, error) = refused(&accept, &connect, "localhost");
        assert_eq!(
            (side, error),
            (Side::Server, Error::InvalidCertificate(expected))
        );
    }
    // And servers' certificates the same way.
    let foreign = other.issue_v1("localhost", 2000, 2090);
    let untrusted = Accept::new(SslMode::Require)
        .with_cert(issued_pair(&foreign))
        .build(pki);
    let connect = Connect::new(SslMode::VerifyCa)
        .with_ca(&pki.ca_cert_pem)
        .build();
    let (side, error) = refused(&untrusted, &connect, "localhost");
    assert_eq!(
        (side, error),
        (
            Side::Client,
            Error::InvalidCertificate(CertificateError::BadSignature)
        )
    );
    // prefer/require take it, the handshake signature checked against its key.
    handshake(
        &untrusted,
        &Connect::new(SslMode::Require).build(),
        "localhost",
    );
}

#[test]
fn a_version_1_certificate_must_match_its_key() {
    let pki = TestPki::shared();
    let v1 = pki.issue_v1("localhost", 2000, 2090);
    let other = pki.issue_v1("localhost", 2000, 2090);
    let mismatch = Accept::new(SslMode::Require)
        .with_cert(Some((&v1.cert_pem, &other.key_pem)))
        .try_build(pki)
        .unwrap_err();
    assert_eq!(
        mismatch.to_string(),
        "server.key: this private key does not belong to the first certificate in server.crt"
    );
}

#[test]
fn servers_see_pgtiers_client_certificate() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::VerifyCa)
        .with_ca(&pki.ca_cert_pem)
        .build(pki);
    let connect = Connect::new(SslMode::VerifyFull)
        .with_ca(&pki.ca_cert_pem)
        .with_client_cert(client_cert(pki))
        .build();
    let pair = handshake(&accept, &connect, "127.0.0.1");
    assert_eq!(pair.server.peer_common_name().as_deref(), Some("alice"));
}

#[test]
fn protocol_versions_must_overlap() {
    let pki = TestPki::shared();
    let tls13 = Accept::new(SslMode::Require)
        .with_protocols("tlsv1.3")
        .build(pki);
    let tls12 = Connect::new(SslMode::Require)
        .with_protocols("tlsv1.2")
        .build();
    let (side, _) = refused(&tls13, &tls12, "localhost");
    assert_eq!(side, Side::Server);

    let tls12_server = Accept::new(SslMode::Require)
        .with_protocols("tlsv1.2")
        .build(pki);
    let tls13_client = Connect::new(SslMode::Require)
        .with_protocols("tlsv1.3")
        .build();
    let (side, _) = refused(&tls12_server, &tls13_client, "localhost");
    assert_eq!(side, Side::Server);

    let both = Connect::new(SslMode::Require).build();
    let pair = handshake(&tls12_server, &both, "localhost");
    assert_eq!(
        pair.client.description().as_deref(),
        Some("TLSv1.2/ECDHE-ECDSA-AES256-GCM-SHA384/ECDH=X25519")
    );
}

#[test]
fn cipher_restrictions_are_honoured() {
    let pki = TestPki::shared();
    let chacha = Accept::new(SslMode::Require)
        .with_ciphers("TLS_CHACHA20_POLY1305_SHA256")
        .build(pki);
    let any = Connect::new(SslMode::Require).build();
    let pair = handshake(&chacha, &any, "localhost");
    assert_eq!(
        pair.server.cipher_suite_name(),
        Some("TLS_CHACHA20_POLY1305_SHA256")
    );

    let aes128 = Connect::new(SslMode::Require)
        .with_ciphers("TLS_AES_128_GCM_SHA256")
        .build();
    let (side, error) = refused(&chacha, &aes128, "localhost");
    assert_eq!(side, Side::Server);
    assert!(
        matches!(
            error,
            Error::PeerIncompatible(_) | Error::AlertReceived(AlertDescription::HandshakeFailure)
        ),
        "{error:?}"
    );

    // The accepting side's order wins over the client's.
    let fast = Accept::new(SslMode::Require)
        .with_ciphers("fast")
        .build(pki);
    let pair = handshake(&fast, &any, "localhost");
    assert_eq!(
        pair.client.cipher_suite_name(),
        Some("TLS_AES_128_GCM_SHA256")
    );

    // TLS 1.2 with an RSA certificate picks an ECDHE-RSA suite from the list.
    let rsa = TestPki::with_rsa_server();
    let rsa_accept = Accept::new(SslMode::Require)
        .with_protocols("tlsv1.2")
        .with_ciphers("ECDHE-RSA-CHACHA20-POLY1305:ECDHE-RSA-AES128-GCM-SHA256")
        .with_cert(Some((&rsa.server_cert_pem, &rsa.server_key_pem)))
        .build(&rsa);
    let pair = handshake(&rsa_accept, &any, "localhost");
    assert_eq!(
        pair.client.cipher_suite_name(),
        Some(CipherSuite::EcdheRsaChacha20Poly1305Sha256.openssl_name())
    );
}

#[test]
fn close_notify_reaches_the_peer() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::Require).build();
    let mut pair = handshake(&accept, &connect, "localhost");
    pair.client.send(b"last words").unwrap();
    pair.client.close_notify();
    let records = pair.client.take_output().unwrap();
    let received = pair
        .server
        .receive(&records, &mut pair.server_plain)
        .unwrap();
    assert!(received.peer_closed);
    assert_eq!(&pair.server_plain[..], b"last words");
}

#[test]
fn secrets_are_handed_over_only_when_established_and_drained() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::Require).build();
    let early = TlsSession::connect(&connect, "localhost").unwrap();
    assert!(matches!(
        early.into_kernel_secrets(),
        Err(TlsError::OutputPending)
    ));
    let handshaking = TlsSession::accept(&accept).unwrap();
    assert!(matches!(
        handshaking.into_kernel_secrets(),
        Err(TlsError::Refused(Error::HandshakeNotComplete))
    ));

    let mut pair = handshake(&accept, &connect, "localhost");
    pair.server.send(b"pending").unwrap();
    let Pair { client, server, .. } = pair;
    assert!(matches!(
        server.into_kernel_secrets(),
        Err(TlsError::OutputPending)
    ));
    let secrets = client.into_kernel_secrets().unwrap();
    assert_eq!(secrets.tx.0, 0, "no record sent after the handshake");
}

#[test]
fn garbage_after_the_handshake_is_an_error_with_an_alert() {
    let pki = TestPki::shared();
    let accept = Accept::new(SslMode::Require).build(pki);
    let connect = Connect::new(SslMode::Require).build();
    let mut pair = handshake(&accept, &connect, "localhost");
    let garbage = [0x17, 0x03, 0x03, 0x00, 0x20]
        .iter()
        .chain([0xab; 32].iter());
    let garbage: Vec<u8> = garbage.copied().collect();
    let error = pair
        .server
        .receive(&garbage, &mut pair.server_plain)
        .unwrap_err();
    assert!(error.alert_queued(), "{error}");
    assert!(matches!(
        error,
        TlsError::Protocol {
            error: Error::DecryptError,
            ..
        }
    ));
    assert!(pair.server.take_output().is_some(), "the alert");
    assert!(
        pair.server
            .receive(b"more", &mut pair.server_plain)
            .is_err()
    );
}

#[test]
fn the_server_name_must_be_a_name_or_an_address() {
    let connect = Connect::new(SslMode::Require).build();
    for name in ["", "not a name", "-bad-.example"] {
        assert!(
            matches!(
                TlsSession::connect(&connect, name),
                Err(TlsError::InvalidServerName { .. })
            ),
            "{name:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_bytes_to_an_acceptor_never_panic(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..6)
    ) {
        let accept = Accept::new(SslMode::Require).build(TestPki::shared());
        let mut session = TlsSession::accept(&accept).unwrap();
        let mut plaintext = BytesMut::new();
        for chunk in chunks {
            if session.receive(&chunk, &mut plaintext).is_err() {
                break;
            }
        }
        let _ = session.take_output();
        prop_assert!(plaintext.is_empty());
    }

    #[test]
    fn mutated_handshakes_never_panic(
        position in 0usize..4096,
        byte in any::<u8>(),
        cut in 1usize..4096,
    ) {
        let pki = TestPki::shared();
        let accept = Accept::new(SslMode::Require).build(pki);
        let connect = Connect::new(SslMode::Require).build();
        let mut client = TlsSession::connect(&connect, "localhost").unwrap();
        let mut server = TlsSession::accept(&accept).unwrap();
        let mut plaintext = BytesMut::new();
        let hello = client.take_output().unwrap();
        prop_assert!(server.receive(&hello, &mut plaintext).is_ok());
        let mut flight = server.take_output().unwrap().to_vec();
        if position < flight.len() {
            flight[position] = byte;
        }
        flight.truncate(cut);
        let _ = client.receive(&flight, &mut plaintext);
        let _ = client.take_output();
        prop_assert!(plaintext.is_empty());
    }
}

impl<'a> Accept<'a> {
    fn with_ca(mut self, ca: &'a str) -> Accept<'a> {
        self.ca = Some(ca);
        self
    }

    fn with_cert(mut self, cert: Option<(&'a str, &'a str)>) -> Accept<'a> {
        self.cert = cert;
        self
    }

    fn with_protocols(mut self, protocols: &'a str) -> Accept<'a> {
        self.protocols = protocols;
        self
    }

    fn with_ciphers(mut self, ciphers: &'a str) -> Accept<'a> {
        self.ciphers = ciphers;
        self
    }
}

impl<'a> Connect<'a> {
    fn with_ca(mut self, ca: &'a str) -> Connect<'a> {
        self.ca = Some(ca);
        self
    }

    fn with_client_cert(mut self, cert: Option<(&'a str, &'a str)>) -> Connect<'a> {
        self.client_cert = cert;
        self
    }

    fn with_protocols(mut self, protocols: &'a str) -> Connect<'a> {
        self.protocols = protocols;
        self
    }

    fn with_ciphers(mut self, ciphers: &'a str) -> Connect<'a> {
        self.ciphers = ciphers;
        self
    }
}

#[test]
fn configuration_errors_name_the_file() {
    let pki = TestPki::shared();
    let other = TestPki::new();
    let mismatch = Accept::new(SslMode::Require)
        .with_cert(Some((&pki.server_cert_pem, &other.server_key_pem)))
        .try_build(pki)
        .unwrap_err();
    assert_eq!(
        mismatch.to_string(),
        "server.key: this private key does not belong to the first certificate in server.crt"
    );
    let missing_ca = Accept::new(SslMode::VerifyFull).try_build(pki).unwrap_err();
    assert_eq!(
        missing_ca.to_string(),
        "sslmode verify-full needs client_tls_ca_file"
    );
    let no_suite = Accept::new(SslMode::Require)
        .with_protocols("tlsv1.2")
        .with_ciphers("ECDHE-RSA-AES128-GCM-SHA256")
        .try_build(pki)
        .unwrap_err();
    assert!(
        no_suite
            .to_string()
            .starts_with("server.key: client_tls_protocols allows TLS 1.2 only"),
        "{no_suite}"
    );
    let bad_ca = Accept::new(SslMode::VerifyCa)
        .with_ca("not pem")
        .try_build(pki)
        .unwrap_err();
    assert_eq!(
        bad_ca.to_string(),
        "clients-ca.crt: no certificate found (expected a \"-----BEGIN CERTIFICATE-----\" block)"
    );
    let ciphers = TlsCiphers::default();
    let server_side = TlsConnector::new(&ConnectorParams {
        mode: SslMode::VerifyCa,
        protocols: TlsProtocols::SECURE,
        ciphers: &ciphers,
        ca: None,
        client_cert: None,
    })
    .unwrap_err();
    assert_eq!(
        server_side.to_string(),
        "sslmode verify-ca needs server_tls_ca_file"
    );
}
