//! How the connecting side checks a server's certificate, per `server_tls_sslmode`:
//! `verify-full` uses rustls's WebPKI verifier as it is; `verify-ca` wraps it and forgives only
//! a name mismatch (the chain, validity and key usage are still checked); `prefer`/`require`
//! accept any certificate, but the handshake signature is still checked against the
//! certificate's key, so the server proves it holds the key it presented.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{WebPkiSupportedAlgorithms, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};
use std::sync::Arc;

/// `verify-ca`: the chain must verify against the CA; the host name is not checked.
#[derive(Debug)]
pub(super) struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

impl ChainOnly {
    pub(super) fn new(inner: Arc<WebPkiServerVerifier>) -> ChainOnly {
        ChainOnly { inner }
    }
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        // WebPKI checks the chain first and the name last, so a name error means the chain
        // itself verified.
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
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
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
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

    fn chain_only(pki: &TestPki) -> ChainOnly {
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(pki.ca_cert_pem.as_bytes()).unwrap())
            .unwrap();
        let provider = Arc::new(default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap();
        ChainOnly::new(webpki)
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
        let verifier = chain_only(pki);
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
