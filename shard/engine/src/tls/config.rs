//! Building the two rustls configurations from PEM bytes and the parsed settings.
//!
//! - [`TlsAcceptor`]: the client-facing side (pgtier is the TLS server). ALPN `postgresql`;
//!   client certificates required and verified against the CA in `verify-ca`/`verify-full`;
//!   in the lower modes, asked for but optional when a CA is configured (one that is
//!   presented must verify, as OpenSSL's peer verification does in PgBouncer), not asked for
//!   without a CA; no session tickets or resumption (as PostgreSQL); the server's suite order.
//! - [`TlsConnector`]: the server-facing side (pgtier is the TLS client), with PgBouncer's
//!   `server_tls_sslmode` semantics: `prefer`/`require` encrypt without checking the
//!   certificate, even with a CA file; `verify-ca` checks the chain only; `verify-full` checks
//!   the chain and the host name (DNS name or IP address). An optional client certificate.
//!
//! Both enable secret extraction so an established session's keys can later be handed to
//! kernel TLS. Building reads nothing: the caller passes the files' bytes ([`PemFile`]).

use super::certificate::Certificate;
use super::chain::TrustAnchors;
use super::error::TlsConfigError;
use super::pem::{self, PemFile};
use super::provider;
use super::verify::{AnyCertificate, ClientCa, ServerCa};
use pgtier_core::config::{SslMode, TlsCiphers, TlsProtocols};
use rustls::client::{Resumption, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{NoServerSessionStorage, WebPkiClientVerifier};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::sync::Arc;

/// The ALPN protocol name PostgreSQL 17 registered and checks.
pub(crate) const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// What the client-facing side is built from.
#[derive(Clone, Copy, Debug)]
pub struct AcceptorParams<'a> {
    /// `client_tls_sslmode` (any mode but disable; disable builds like allow).
    pub mode: SslMode,
    /// `client_tls_protocols`.
    pub protocols: TlsProtocols,
    /// `client_tls_ciphers`.
    pub ciphers: &'a TlsCiphers,
    /// `client_tls_cert_file`: the chain pgtier presents, leaf first.
    pub cert_chain: PemFile<'a>,
    /// `client_tls_key_file`.
    pub key: PemFile<'a>,
    /// `client_tls_ca_file`.
    pub ca: Option<PemFile<'a>>,
}

/// What the server-facing side is built from.
#[derive(Clone, Copy, Debug)]
pub struct ConnectorParams<'a> {
    /// `server_tls_sslmode` (any mode but disable; disable builds like prefer).
    pub mode: SslMode,
    /// `server_tls_protocols`.
    pub protocols: TlsProtocols,
    /// `server_tls_ciphers`.
    pub ciphers: &'a TlsCiphers,
    /// `server_tls_ca_file`; used by verify-ca and verify-full only.
    pub ca: Option<PemFile<'a>>,
    /// `server_tls_cert_file` and `server_tls_key_file`: a client certificate for servers.
    pub client_cert: Option<(PemFile<'a>, PemFile<'a>)>,
}

/// The client-facing TLS configuration, cheap to clone (one per shard, shared by sessions).
#[derive(Clone, Debug)]
pub struct TlsAcceptor {
    config: Arc<ServerConfig>,
    leaf: CertificateDer<'static>,
    mode: SslMode,
}

impl TlsAcceptor {
    /// Builds it; the error names the file and what is wrong with it.
    pub fn new(params: &AcceptorParams<'_>) -> Result<TlsAcceptor, TlsConfigError> {
        let provider = Arc::new(provider::crypto_provider(params.protocols, params.ciphers));
        let certified = certified_key(&params.cert_chain, &params.key, &provider)?;
        check_suites_for_key(params, &certified)?;
        let verifier = client_verifier(params.mode, params.ca.as_ref(), &provider)?;
        let leaf =
            certified
                .cert
                .first()
                .cloned()
                .ok_or_else(|| TlsConfigError::NoCertificate {
                    file: params.cert_chain.name.to_string(),
                })?;
        let mut config = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&provider::protocol_versions(params.protocols))
            .map_err(rustls_error)?
            .with_client_cert_verifier(verifier)
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        config.ignore_client_order = true;
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        config.enable_secret_extraction = true;
        Ok(TlsAcceptor {
            config: Arc::new(config),
            leaf,
            mode: params.mode,
        })
    }

    /// The rustls configuration.
    pub(crate) fn rustls_config(&self) -> &Arc<ServerConfig> {
        &self.config
    }

    /// The certificate pgtier presents (DER), for SCRAM's `tls-server-end-point` binding.
    pub fn leaf_certificate_der(&self) -> &[u8] {
        self.leaf.as_ref()
    }

    /// `client_tls_sslmode`.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    pub(super) fn leaf(&self) -> &CertificateDer<'static> {
        &self.leaf
    }
}

/// The server-facing TLS configuration, cheap to clone.
#[derive(Clone, Debug)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
    mode: SslMode,
}

impl TlsConnector {
    /// Builds it; the error names the file and what is wrong with it.
    pub fn new(params: &ConnectorParams<'_>) -> Result<TlsConnector, TlsConfigError> {
        let provider = Arc::new(provider::crypto_provider(params.protocols, params.ciphers));
        let verifier = server_verifier(params.mode, params.ca.as_ref(), &provider)?;
        let client_cert = match &params.client_cert {
            Some((chain, key)) => Some(certified_key(chain, key, &provider)?),
            None => None,
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(&provider::protocol_versions(params.protocols))
            .map_err(rustls_error)?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut config = match client_cert {
            Some(certified) => {
                builder.with_client_cert_resolver(Arc::new(SingleCertAndKey::from(certified)))
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![ALPN_POSTGRESQL.to_vec()];
        config.resumption = Resumption::disabled();
        config.enable_secret_extraction = true;
        Ok(TlsConnector {
            config: Arc::new(config),
            mode: params.mode,
        })
    }

    /// The rustls configuration.
    pub(crate) fn rustls_config(&self) -> &Arc<ClientConfig> {
        &self.config
    }

    /// `server_tls_sslmode`.
    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// A connector over a hand-made rustls configuration (tests that play a misbehaving or
    /// older client).
    #[cfg(test)]
    pub(super) fn from_rustls(config: Arc<ClientConfig>, mode: SslMode) -> TlsConnector {
        TlsConnector { config, mode }
    }
}

/// A certificate chain with its key, checked to belong together. rustls's own check
/// (`CertifiedKey::keys_match`) reads the certificate with WebPKI, which refuses X.509
/// version 1 certificates; the key is compared here with the one read by pgtier's own
/// reader, which takes every version, and the pair is served through a resolver, so v1
/// certificates work as OpenSSL lets them.
fn certified_key(
    chain: &PemFile<'_>,
    key: &PemFile<'_>,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsConfigError> {
    let certificates = pem::certificates(chain)?;
    let private_key = pem::private_key(key)?;
    let signing_key = provider
        .key_provider
        .load_private_key(private_key)
        .map_err(|error| TlsConfigError::UnsupportedKey {
            file: key.name.to_string(),
            reason: error.to_string(),
        })?;
    let leaf = certificates
        .first()
        .and_then(|der| Certificate::parse(der))
        .ok_or_else(|| TlsConfigError::BadCertificate {
            file: chain.name.to_string(),
            reason: "the first certificate is not valid X.509 DER".to_string(),
        })?;
    // Every key the ring provider loads knows its public key; one that does not cannot be
    // compared, and is taken as rustls takes it.
    if let Some(public_key) = signing_key.public_key() {
        if public_key.as_ref() != leaf.spki {
            return Err(TlsConfigError::KeyMismatch {
                key_file: key.name.to_string(),
                cert_file: chain.name.to_string(),
            });
        }
    }
    Ok(CertifiedKey::new(certificates, signing_key))
}

/// With TLS 1.2 only, at least one allowed suite must fit the key (ECDSA suites need an
/// ECDSA or Ed25519 key, RSA suites an RSA key); TLS 1.3 suites fit any key.
fn check_suites_for_key(
    params: &AcceptorParams<'_>,
    certified: &CertifiedKey,
) -> Result<(), TlsConfigError> {
    if params.protocols.tls13() {
        return Ok(());
    }
    let algorithm = certified.key.algorithm();
    let usable = params
        .ciphers
        .suites()
        .iter()
        .any(|suite| !suite.is_tls13() && provider::usable_with_key(*suite, algorithm));
    if usable {
        return Ok(());
    }
    Err(TlsConfigError::NoSuiteForKey {
        key_file: params.key.name.to_string(),
        reason: format!(
            "client_tls_protocols allows TLS 1.2 only and no suite of client_tls_ciphers \
             (\"{}\") works with this {algorithm:?} key",
            params.ciphers
        ),
    })
}

/// The CA certificates of `file` as trust anchors: for WebPKI, and for pgtier's own chain
/// check (chains with version 1 certificates).
fn roots(file: &PemFile<'_>) -> Result<(Arc<RootCertStore>, TrustAnchors), TlsConfigError> {
    let certificates = pem::certificates(file)?;
    let mut store = RootCertStore::empty();
    for certificate in &certificates {
        store
            .add(certificate.clone())
            .map_err(|error| TlsConfigError::BadCa {
                file: file.name.to_string(),
                reason: error.to_string(),
            })?;
    }
    Ok((Arc::new(store), TrustAnchors::new(certificates)))
}

fn client_verifier(
    mode: SslMode,
    ca: Option<&PemFile<'_>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsConfigError> {
    let Some(ca) = ca else {
        if mode.verifies_certificate() {
            return Err(TlsConfigError::MissingCa {
                setting: "client_tls_ca_file",
                mode: mode.as_str(),
            });
        }
        return Ok(WebPkiClientVerifier::no_client_auth());
    };
    let (store, anchors) = roots(ca)?;
    let builder = WebPkiClientVerifier::builder_with_provider(store, provider.clone());
    let builder = match mode.verifies_certificate() {
        true => builder,
        false => builder.allow_unauthenticated(),
    };
    let webpki = builder.build().map_err(|error| TlsConfigError::BadCa {
        file: ca.name.to_string(),
        reason: error.to_string(),
    })?;
    Ok(Arc::new(ClientCa::new(
        webpki,
        anchors,
        provider.signature_verification_algorithms,
    )))
}

fn server_verifier(
    mode: SslMode,
    ca: Option<&PemFile<'_>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::client::danger::ServerCertVerifier>, TlsConfigError> {
    if !mode.verifies_certificate() {
        return Ok(Arc::new(AnyCertificate::new(
            provider.signature_verification_algorithms,
        )));
    }
    let Some(ca) = ca else {
        return Err(TlsConfigError::MissingCa {
            setting: "server_tls_ca_file",
            mode: mode.as_str(),
        });
    };
    let (store, anchors) = roots(ca)?;
    let webpki = WebPkiServerVerifier::builder_with_provider(store, provider.clone())
        .build()
        .map_err(|error| TlsConfigError::BadCa {
            file: ca.name.to_string(),
            reason: error.to_string(),
        })?;
    Ok(Arc::new(ServerCa::new(
        webpki,
        anchors,
        mode == SslMode::VerifyFull,
        provider.signature_verification_algorithms,
    )))
}

fn rustls_error(error: rustls::Error) -> TlsConfigError {
    TlsConfigError::Rustls {
        reason: error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_pki::TestPki;

    fn acceptor(mode: SslMode, with_ca: bool) -> TlsAcceptor {
        let pki = TestPki::shared();
        let ciphers = TlsCiphers::default();
        TlsAcceptor::new(&AcceptorParams {
            mode,
            protocols: TlsProtocols::SECURE,
            ciphers: &ciphers,
            cert_chain: PemFile::new("server.crt", pki.server_cert_pem.as_bytes()),
            key: PemFile::new("server.key", pki.server_key_pem.as_bytes()),
            ca: with_ca.then(|| PemFile::new("ca.crt", pki.ca_cert_pem.as_bytes())),
        })
        .unwrap()
    }

    #[test]
    fn the_acceptor_offers_postgresql_and_no_resumption() {
        let acceptor = acceptor(SslMode::Require, false);
        let config = acceptor.rustls_config();
        assert_eq!(config.alpn_protocols, [ALPN_POSTGRESQL.to_vec()]);
        assert_eq!(config.send_tls13_tickets, 0);
        assert!(!config.session_storage.can_cache());
        assert!(!config.ticketer.enabled());
        assert!(config.enable_secret_extraction && config.ignore_client_order);
        assert_eq!(acceptor.mode(), SslMode::Require);
        assert_eq!(
            acceptor.leaf_certificate_der(),
            &TestPki::shared().server_cert_der()[..]
        );
    }

    #[test]
    fn the_connector_offers_postgresql_and_no_resumption() {
        let ciphers = TlsCiphers::default();
        let connector = TlsConnector::new(&ConnectorParams {
            mode: SslMode::Prefer,
            protocols: TlsProtocols::SECURE,
            ciphers: &ciphers,
            ca: None,
            client_cert: None,
        })
        .unwrap();
        let config = connector.rustls_config();
        assert_eq!(config.alpn_protocols, [ALPN_POSTGRESQL.to_vec()]);
        assert!(config.enable_secret_extraction);
        assert!(!config.client_auth_cert_resolver.has_certs());
        assert_eq!(connector.mode(), SslMode::Prefer);
    }
}
