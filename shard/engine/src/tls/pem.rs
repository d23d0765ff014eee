//! PEM input: certificate chains, one private key and CA bundles read from bytes the caller
//! loaded, with errors that name the file they came from.

use super::error::TlsConfigError;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// One PEM input: the bytes of a file and the name to use in messages (its path).
#[derive(Clone, Copy, Debug)]
pub struct PemFile<'a> {
    /// Shown in errors: the path from the configuration.
    pub name: &'a str,
    /// The file's contents.
    pub contents: &'a [u8],
}

impl<'a> PemFile<'a> {
    /// A named PEM input.
    pub fn new(name: &'a str, contents: &'a [u8]) -> PemFile<'a> {
        PemFile { name, contents }
    }
}

/// Every certificate in `file`, in order; at least one.
pub(super) fn certificates(
    file: &PemFile<'_>,
) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certificates = CertificateDer::pem_slice_iter(file.contents)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| bad_pem(file, &error))?;
    if certificates.is_empty() {
        return Err(TlsConfigError::NoCertificate {
            file: file.name.to_string(),
        });
    }
    Ok(certificates)
}

/// The one private key in `file`.
pub(super) fn private_key(file: &PemFile<'_>) -> Result<PrivateKeyDer<'static>, TlsConfigError> {
    let mut keys = PrivateKeyDer::pem_slice_iter(file.contents);
    let key = match keys.next() {
        Some(Ok(key)) => key,
        Some(Err(error)) => return Err(bad_pem(file, &error)),
        None if contains(file.contents, b"ENCRYPTED PRIVATE KEY") => {
            return Err(TlsConfigError::EncryptedKey {
                file: file.name.to_string(),
            });
        }
        None => {
            return Err(TlsConfigError::NoPrivateKey {
                file: file.name.to_string(),
            });
        }
    };
    match keys.next() {
        None => Ok(key),
        Some(Err(error)) => Err(bad_pem(file, &error)),
        Some(Ok(_)) => Err(TlsConfigError::SeveralPrivateKeys {
            file: file.name.to_string(),
        }),
    }
}

fn bad_pem(file: &PemFile<'_>, error: &pem::Error) -> TlsConfigError {
    let reason = match error {
        pem::Error::MissingSectionEnd { .. } => "a section has no END line".to_string(),
        pem::Error::IllegalSectionStart { .. } => "a BEGIN line is malformed".to_string(),
        other => other.to_string(),
    };
    TlsConfigError::BadPem {
        file: file.name.to_string(),
        reason,
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_pki::TestPki;

    fn file(contents: &[u8]) -> PemFile<'_> {
        PemFile::new("/etc/pgtier/x.pem", contents)
    }

    #[test]
    fn reads_chains_and_keys() {
        let pki = TestPki::new();
        let chain = format!("{}{}", pki.server_cert_pem, pki.ca_cert_pem);
        assert_eq!(certificates(&file(chain.as_bytes())).unwrap().len(), 2);
        assert!(private_key(&file(pki.server_key_pem.as_bytes())).is_ok());
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let pki = TestPki::new();
        let certificate_error = |contents: &[u8]| certificates(&file(contents)).unwrap_err();
        let key_error = |contents: &[u8]| private_key(&file(contents)).unwrap_err();
        let unterminated = b"-----BEGIN CERTIFICATE-----\nAAAA\n";
        let encrypted =
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        let bad_base64 = b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n";
        let cases = [
            (certificate_error(b""), "no certificate found"),
            (
                certificate_error(pki.server_key_pem.as_bytes()),
                "no certificate found",
            ),
            (
                key_error(pki.server_cert_pem.as_bytes()),
                "no private key found",
            ),
            (
                certificate_error(unterminated),
                "not a valid PEM file: a section has no END line",
            ),
            (key_error(encrypted), "the private key is encrypted"),
            (certificate_error(bad_base64), "not a valid PEM file"),
        ];
        for (error, expected) in cases {
            let message = error.to_string();
            assert!(
                message.starts_with("/etc/pgtier/x.pem: ") && message.contains(expected),
                "{message}"
            );
        }
        let two = format!("{}{}", pki.server_key_pem, pki.client_key_pem);
        let message = private_key(&file(two.as_bytes())).unwrap_err().to_string();
        assert!(message.contains("more than one private key"), "{message}");
    }
}
