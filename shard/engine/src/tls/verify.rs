//! The peer-certificate checks of each mode, as rustls verifiers.
//!
//! Servers (`server_tls_sslmode`): `verify-full` checks the chain and then the host name the
//! way libpq does ([`chain::verify_host_name`]: subjectAltName, else the common name);
//! `verify-ca` checks the chain only; `prefer`/`require` accept any certificate. Clients
//! (`client_tls_sslmode` with a CA file): [`ClientCa`] checks the chain of a certificate the
//! client presents. Chains of version 3 certificates are checked by rustls's WebPKI verifier;
//! a chain with a version 1 or 2 certificate, which WebPKI cannot read, by pgtier's own check
//! ([`chain::verify_chain`]) against the same CA file. In every mode the handshake signature
//! is checked against the key of the certificate presented, so the peer proves it holds that
//! key: there is no path that accepts a signature unchecked.

use super::chain::{self, Purpose, TrustAnchors, Version};
use rustls::DistinguishedName;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use std::sync::Arc;

/// `verify-ca` and `verify-full`: the chain must verify against the CA file; the host name
/// too when `check_name`.
#[derive(Debug)]
pub(super) struct ServerCa {
    webpki: Arc<WebPkiServerVerifier>,
    anchors: TrustAnchors,
    check_name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCa {
    pub(super) fn new(
        webpki: Arc<WebPkiServerVerifier>,
        anchors: TrustAnchors,
        check_name: bool,
        algorithms: WebPkiSupportedAlgorithms,
    ) -> ServerCa {
        ServerCa {
            webpki,
            anchors,
            check_name,
            algorithms,
        }
    }

    fn verify_chain(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<(), Error> {
        if chain::needs_own_check(end_entity, intermediates) {
            return chain::verify_chain(
                end_entity,
                intermediates,
                &self.anchors,
                Purpose::ServerAuth,
                now,
                &self.algorithms,
            )
            .map_err(Error::InvalidCertificate);
        }
        // WebPKI checks the chain first and the name last, so a name error means the chain
        // itself verified; the name is checked below by libpq's rule, which WebPKI's lacks
        // (the common name when there is no subjectAltName).
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(_)
            | Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

impl ServerCertVerifier for ServerCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.verify_chain(end_entity, intermediates, server_name, ocsp_response, now)?;
        if self.check_name {
            chain::verify_host_name(end_entity, server_name).map_err(Error::InvalidCertificate)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        chain::verify_signature(Version::Tls12, message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        chain::verify_signature(Version::Tls13, message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `prefer`/`require` (PgBouncer: "server certificate is not validated"): any certificate,
/// with the handshake signature still checked.
#[derive(Debug)]
pub(super) struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl AnyCertificate {
    pub(super) fn new(algorithms: WebPkiSupportedAlgorithms) -> AnyCertificate {
        AnyCertificate { algorithms }
    }
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        chain::verify_signature(Version::Tls12, message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        chain::verify_signature(Version::Tls13, message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// Client certificates against `client_tls_ca_file`: WebPKI's client verifier (which also
/// says whether a certificate is asked for and required), with pgtier's own chain check for
/// chains WebPKI cannot read.
#[derive(Debug)]
pub(super) struct ClientCa {
    webpki: Arc<dyn ClientCertVerifier>,
    anchors: TrustAnchors,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCa {
    pub(super) fn new(
        webpki: Arc<dyn ClientCertVerifier>,
        anchors: TrustAnchors,
        algorithms: WebPkiSupportedAlgorithms,
    ) -> ClientCa {
        ClientCa {
            webpki,
            anchors,
            algorithms,
        }
    }
}

impl ClientCertVerifier for ClientCa {
    fn offer_client_auth(&self) -> bool {
        self.webpki.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.webpki.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        if !chain::needs_own_check(end_entity, intermediates) {
            return self
                .webpki
                .verify_client_cert(end_entity, intermediates, now);
        }
        chain::verify_chain(
            end_entity,
            intermediates,
            &self.anchors,
            Purpose::ClientAuth,
            now,
            &self.algorithms,
        )
        .map_err(Error::InvalidCertificate)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        chain::verify_signature(Version::Tls12, message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        chain::verify_signature(Version::Tls13, message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_pki::TestPki;
    use rustls::RootCertStore;
    use rustls::crypto::ring::default_provider;
    use rustls::pki_types::pem::PemObject;

    fn server_ca(pki: &TestPki, check_name: bool) -> ServerCa {
        let mut roots = RootCertStore::empty();
        let ca = CertificateDer::from_pem_slice(pki.ca_cert_pem.as_bytes()).unwrap();
        roots.add(ca.clone()).unwrap();
        let provider = Arc::new(default_provider());
        let algorithms = provider.signature_verification_algorithms;
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        ServerCa::new(webpki, TrustAnchors::new(vec![ca]), check_name, algorithms)
    }

    fn check(verifier: &dyn ServerCertVerifier, der: &[u8], name: &str) -> Result<(), Error> {
        let name = ServerName::try_from(name.to_string()).unwrap();
        let certificate = CertificateDer::from(der.to_vec());
        verifier
            .verify_server_cert(&certificate, &[], &name, &[], UnixTime::now())
            .map(|_| ())
    }

    #[test]
    fn chain_only_forgives_the_name_and_nothing_else() {
        let pki = TestPki::shared();
        let verifier = server_ca(pki, false);
        assert_eq!(
            check(&verifier, &pki.server_cert_der(), "localhost"),
            Ok(())
        );
        assert_eq!(
            check(&verifier, &pki.server_cert_der(), "db.example.com"),
            Ok(())
        );
        assert_eq!(check(&verifier, &pki.server_cert_der(), "10.0.0.1"), Ok(()));

        let expired = pki.issue_expired_server(&["localhost"]);
        assert!(matches!(
            check(&verifier, &expired.cert_der(), "localhost"),
            Err(Error::InvalidCertificate(
                CertificateError::ExpiredContext { .. }
            ))
        ));
        let stranger = TestPki::self_signed_server(&["localhost"]);
        assert_eq!(
            check(&verifier, &stranger.cert_der(), "localhost"),
            Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
        );
        // A client certificate is not one for a server (extended key usage).
        assert!(check(&verifier, &pki.client_cert_der(), "localhost").is_err());
    }

    #[test]
    fn any_certificate_still_needs_a_supported_scheme() {
        let verifier = AnyCertificate::new(default_provider().signature_verification_algorithms);
        let stranger = TestPki::self_signed_server(&["elsewhere"]);
        assert_eq!(check(&verifier, &stranger.cert_der(), "localhost"), Ok(()));
        assert_eq!(check(&verifier, b"not even DER", "localhost"), Ok(()));
        assert!(
            verifier
                .supported_verify_schemes()
                .contains(&SignatureScheme::ECDSA_NISTP256_SHA256)
        );
    }
}
