//! The crypto provider of one side: rustls's `ring` provider restricted to the protocol
//! versions and cipher suites the configuration allows, and the names PgBouncer shows for
//! what a connection negotiated.

use pgtier_core::config::{CipherSuite, TlsCiphers, TlsProtocols};
use rustls::crypto::CryptoProvider;
use rustls::crypto::ring::{cipher_suite, default_provider};
use rustls::{NamedGroup, ProtocolVersion, SupportedCipherSuite, SupportedProtocolVersion};

/// The ring provider with exactly the allowed suites, in the configured preference order.
/// Suites of a protocol version that is not allowed are left out.
pub(super) fn crypto_provider(protocols: TlsProtocols, ciphers: &TlsCiphers) -> CryptoProvider {
    let cipher_suites = ciphers
        .suites()
        .iter()
        .filter(|suite| match suite.is_tls13() {
            true => protocols.tls13(),
            false => protocols.tls12(),
        })
        .map(|suite| to_rustls(*suite))
        .collect();
    CryptoProvider {
        cipher_suites,
        ..default_provider()
    }
}

/// The protocol versions rustls should enable (at least one: the configuration guarantees it).
pub(super) fn protocol_versions(protocols: TlsProtocols) -> Vec<&'static SupportedProtocolVersion> {
    let mut versions = Vec::with_capacity(2);
    if protocols.tls13() {
        versions.push(&rustls::version::TLS13);
    }
    if protocols.tls12() {
        versions.push(&rustls::version::TLS12);
    }
    versions
}

/// The rustls suite for a configured one.
pub(super) fn to_rustls(suite: CipherSuite) -> SupportedCipherSuite {
    match suite {
        CipherSuite::Tls13Aes256GcmSha384 => cipher_suite::TLS13_AES_256_GCM_SHA384,
        CipherSuite::Tls13Aes128GcmSha256 => cipher_suite::TLS13_AES_128_GCM_SHA256,
        CipherSuite::Tls13Chacha20Poly1305Sha256 => cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
        CipherSuite::EcdheEcdsaAes256GcmSha384 => {
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        }
        CipherSuite::EcdheEcdsaAes128GcmSha256 => {
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        }
        CipherSuite::EcdheEcdsaChacha20Poly1305Sha256 => {
            cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        CipherSuite::EcdheRsaAes256GcmSha384 => cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        CipherSuite::EcdheRsaAes128GcmSha256 => cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        CipherSuite::EcdheRsaChacha20Poly1305Sha256 => {
            cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
    }
}

/// The configured suite a negotiated rustls suite is (every suite the provider offers is one).
pub(super) fn from_rustls(suite: SupportedCipherSuite) -> Option<CipherSuite> {
    CipherSuite::ALL
        .into_iter()
        .find(|candidate| to_rustls(*candidate).suite() == suite.suite())
}

/// Whether a TLS 1.2 suite can be used with a certificate key of `algorithm` (TLS 1.3 suites
/// work with any key).
pub(super) fn usable_with_key(suite: CipherSuite, algorithm: rustls::SignatureAlgorithm) -> bool {
    use rustls::SignatureAlgorithm as Alg;
    match suite {
        CipherSuite::Tls13Aes256GcmSha384
        | CipherSuite::Tls13Aes128GcmSha256
        | CipherSuite::Tls13Chacha20Poly1305Sha256 => true,
        CipherSuite::EcdheEcdsaAes256GcmSha384
        | CipherSuite::EcdheEcdsaAes128GcmSha256
        | CipherSuite::EcdheEcdsaChacha20Poly1305Sha256 => {
            matches!(algorithm, Alg::ECDSA | Alg::ED25519)
        }
        CipherSuite::EcdheRsaAes256GcmSha384
        | CipherSuite::EcdheRsaAes128GcmSha256
        | CipherSuite::EcdheRsaChacha20Poly1305Sha256 => matches!(algorithm, Alg::RSA),
    }
}

/// OpenSSL's spelling of a protocol version (`TLSv1.3`), as PgBouncer shows it.
pub(super) fn version_name(version: ProtocolVersion) -> &'static str {
    match version {
        ProtocolVersion::TLSv1_3 => "TLSv1.3",
        ProtocolVersion::TLSv1_2 => "TLSv1.2",
        ProtocolVersion::TLSv1_1 => "TLSv1.1",
        ProtocolVersion::TLSv1_0 => "TLSv1",
        _ => "unknown",
    }
}

/// OpenSSL's short name of a key exchange group (`X25519`, `prime256v1`), as PgBouncer shows it.
pub(super) fn group_name(group: NamedGroup) -> &'static str {
    match group {
        NamedGroup::X25519 => "X25519",
        NamedGroup::secp256r1 => "prime256v1",
        NamedGroup::secp384r1 => "secp384r1",
        NamedGroup::secp521r1 => "secp521r1",
        NamedGroup::X448 => "X448",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_configured_suite_maps_both_ways() {
        for suite in CipherSuite::ALL {
            let rustls_suite = to_rustls(suite);
            assert_eq!(from_rustls(rustls_suite), Some(suite));
            assert_eq!(
                rustls_suite.version().version == ProtocolVersion::TLSv1_3,
                suite.is_tls13(),
                "{suite}"
            );
            let rustls_name = format!("{:?}", rustls_suite.suite());
            assert_eq!(rustls_name.replace("TLS13_", "TLS_"), suite.iana_name());
        }
    }

    #[test]
    fn provider_order_is_the_configured_one() {
        assert_eq!(
            CipherSuite::ALL.map(to_rustls).map(|s| s.suite()).to_vec(),
            default_provider()
                .cipher_suites
                .iter()
                .map(|s| s.suite())
                .collect::<Vec<_>>(),
            "CipherSuite::ALL lists the ring provider's suites in its order"
        );
        let fast = TlsCiphers::parse("fast").unwrap();
        let tls13_only = TlsProtocols::parse("tlsv1.3").unwrap();
        let provider = crypto_provider(tls13_only, &fast);
        assert_eq!(
            provider.cipher_suites.first().map(|s| s.suite()),
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
        assert!(provider.cipher_suites.iter().all(|s| s.tls13().is_some()));
        assert_eq!(protocol_versions(tls13_only).len(), 1);
    }

    #[test]
    fn key_types_pick_their_tls12_suites() {
        use rustls::SignatureAlgorithm as Alg;
        assert!(usable_with_key(
            CipherSuite::EcdheRsaAes128GcmSha256,
            Alg::RSA
        ));
        assert!(!usable_with_key(
            CipherSuite::EcdheRsaAes128GcmSha256,
            Alg::ECDSA
        ));
        assert!(usable_with_key(
            CipherSuite::EcdheEcdsaAes128GcmSha256,
            Alg::ED25519
        ));
        assert!(usable_with_key(CipherSuite::Tls13Aes128GcmSha256, Alg::RSA));
    }
}
