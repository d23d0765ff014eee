//! The two errors of the TLS module: a configuration that cannot be built
//! ([`TlsConfigError`], at start or reload, naming the file and what to fix) and a connection
//! that failed ([`TlsError`], which says whether an alert is waiting to be sent).

use std::fmt;

/// Why a TLS configuration could not be built. `file` fields hold the name the caller gave the
/// PEM input (the path from the configuration), so the message tells an operator which file
/// to fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsConfigError {
    /// The PEM text is malformed (a section without its end line, bad base64...).
    BadPem { file: String, reason: String },
    /// No `CERTIFICATE` block.
    NoCertificate { file: String },
    /// No private key block (`PRIVATE KEY`, `RSA PRIVATE KEY` or `EC PRIVATE KEY`).
    NoPrivateKey { file: String },
    /// The key is encrypted: pgtier cannot ask for a passphrase.
    EncryptedKey { file: String },
    /// More than one private key: which one is meant is ambiguous.
    SeveralPrivateKeys { file: String },
    /// The key is of a type or size the crypto provider cannot sign with.
    UnsupportedKey { file: String, reason: String },
    /// The key does not belong to the first certificate of the chain.
    KeyMismatch { key_file: String, cert_file: String },
    /// A certificate could not be parsed or used.
    BadCertificate { file: String, reason: String },
    /// A CA certificate could not be used as a trust anchor.
    BadCa { file: String, reason: String },
    /// The mode needs a CA file and none was given.
    MissingCa {
        setting: &'static str,
        mode: &'static str,
    },
    /// With the allowed protocols and ciphers, no suite can be used with this key.
    NoSuiteForKey { key_file: String, reason: String },
    /// rustls refused the combination (should not happen with validated settings).
    Rustls { reason: String },
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsConfigError::BadPem { file, reason } => {
                write!(f, "{file}: not a valid PEM file: {reason}")
            }
            TlsConfigError::NoCertificate { file } => write!(
                f,
                "{file}: no certificate found (expected a \"-----BEGIN CERTIFICATE-----\" block)"
            ),
            TlsConfigError::NoPrivateKey { file } => write!(
                f,
                "{file}: no private key found (expected a PRIVATE KEY, RSA PRIVATE KEY or EC \
                 PRIVATE KEY block)"
            ),
            TlsConfigError::EncryptedKey { file } => write!(
                f,
                "{file}: the private key is encrypted; pgtier needs it unencrypted (restrict \
                 the file's permissions instead, e.g. chmod 600)"
            ),
            TlsConfigError::SeveralPrivateKeys { file } => write!(
                f,
                "{file}: more than one private key; keep only the key of the certificate"
            ),
            TlsConfigError::UnsupportedKey { file, reason } => write!(
                f,
                "{file}: unsupported private key ({reason}); pgtier takes RSA (2048 to 8192 \
                 bits), ECDSA P-256 or P-384, or Ed25519 keys"
            ),
            TlsConfigError::KeyMismatch {
                key_file,
                cert_file,
            } => write!(
                f,
                "{key_file}: this private key does not belong to the first certificate in \
                 {cert_file}"
            ),
            TlsConfigError::BadCertificate { file, reason } => {
                write!(f, "{file}: unusable certificate: {reason}")
            }
            TlsConfigError::BadCa { file, reason } => {
                write!(f, "{file}: unusable CA certificate: {reason}")
            }
            TlsConfigError::MissingCa { setting, mode } => {
                write!(f, "sslmode {mode} needs {setting}")
            }
            TlsConfigError::NoSuiteForKey { key_file, reason } => {
                write!(f, "{key_file}: {reason}")
            }
            TlsConfigError::Rustls { reason } => write!(f, "TLS configuration refused: {reason}"),
        }
    }
}

impl std::error::Error for TlsConfigError {}

/// A TLS connection that cannot go on. After an error the session is dead: send what
/// [`take_output`](super::TlsSession::take_output) still returns (the alert, when
/// [`alert_queued`](TlsError::alert_queued)) and close the connection.
#[derive(Debug)]
pub enum TlsError {
    /// The peer broke the protocol, offered nothing acceptable, or failed verification.
    Protocol {
        /// What rustls found.
        error: rustls::Error,
        /// Whether an alert telling the peer why is waiting in the session's output.
        alert_queued: bool,
    },
    /// More plaintext was queued before the handshake finished than the session buffers.
    SendBufferFull,
    /// The name given to `connect` is neither a DNS name nor an IP address.
    InvalidServerName { name: String },
    /// The session's output is not drained, so its secrets cannot be handed over yet.
    OutputPending,
    /// rustls refused the operation (for example extracting secrets during the handshake).
    Refused(rustls::Error),
}

impl TlsError {
    /// Whether an alert for the peer is queued in the session's output.
    #[cfg(test)]
    pub(crate) fn alert_queued(&self) -> bool {
        matches!(
            self,
            TlsError::Protocol {
                alert_queued: true,
                ..
            }
        )
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::Protocol {
                error: rustls::Error::InvalidCertificate(problem),
                ..
            } => {
                // PgBouncer's (OpenSSL's) words first: operators grep for them.
                write!(f, "TLS error: certificate verify failed: {problem}")
            }
            TlsError::Protocol { error, .. } => write!(f, "TLS error: {error}"),
            TlsError::SendBufferFull => f.write_str("TLS send buffer full during the handshake"),
            TlsError::InvalidServerName { name } => {
                write!(f, "\"{name}\" is neither a DNS name nor an IP address")
            }
            TlsError::OutputPending => f.write_str("TLS output not yet sent"),
            TlsError::Refused(error) => write!(f, "TLS operation refused: {error}"),
        }
    }
}

impl std::error::Error for TlsError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_protocol_errors_can_have_an_alert() {
        let with_alert = TlsError::Protocol {
            error: rustls::Error::DecryptError,
            alert_queued: true,
        };
        assert!(with_alert.alert_queued());
        assert_eq!(
            with_alert.to_string(),
            "TLS error: cannot decrypt peer's message"
        );
        let without = TlsError::Protocol {
            error: rustls::Error::DecryptError,
            alert_queued: false,
        };
        assert!(!without.alert_queued());
        assert!(!TlsError::SendBufferFull.alert_queued());
    }

    #[test]
    fn certificate_errors_use_openssls_words_first() {
        let unknown = TlsError::Protocol {
            error: rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
            alert_queued: true,
        };
        assert!(
            unknown
                .to_string()
                .starts_with("TLS error: certificate verify failed: "),
            "{unknown}"
        );
    }

    #[test]
    fn config_errors_say_what_to_do() {
        let encrypted = TlsConfigError::EncryptedKey {
            file: "/etc/pgtier/server.key".to_string(),
        };
        assert!(encrypted.to_string().contains("chmod 600"), "{encrypted}");
        let missing = TlsConfigError::MissingCa {
            setting: "server_tls_ca_file",
            mode: "verify-full",
        };
        assert_eq!(
            missing.to_string(),
            "sslmode verify-full needs server_tls_ca_file"
        );
    }
}
