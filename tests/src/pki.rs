//! A throw-away PKI on disk for the TLS end-to-end tests: a CA, a server certificate for
//! `localhost` and `127.0.0.1`, and client certificates whose common name is a user name, as
//! PEM files in a directory (keys mode 0600, as libpq and PostgreSQL insist). The same files
//! serve pgtier (`client_tls_*`, `server_tls_*`), PostgreSQL ([`TestPki::pg_tls`]) and psql
//! (`sslrootcert`, `sslcert`, `sslkey`). Keys are ECDSA P-256, generated per PKI.

use pgtier_core::localpg::PgTls;
use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::fmt;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Names the server certificate is valid for.
pub const SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// A certificate and its key on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The CA, the server certificate and one client certificate, written to a directory; more
/// client certificates can be issued later.
pub struct TestPki {
    dir: PathBuf,
    /// `ca.crt`.
    pub ca_cert: PathBuf,
    /// `server.crt` / `server.key`: for `localhost` and `127.0.0.1`.
    pub server: CertFiles,
    /// `<user>.crt` / `<user>.key`: the client certificate made with the PKI.
    pub client: CertFiles,
    ca: Certificate,
    ca_key: KeyPair,
}

impl TestPki {
    /// Generates the PKI and writes it into `dir` (which must exist), with a client
    /// certificate for `client_user`.
    pub fn write(dir: &Path, client_user: &str) -> io::Result<TestPki> {
        let ca_key = KeyPair::generate().map_err(rcgen_error)?;
        let ca = ca_params()?.self_signed(&ca_key).map_err(rcgen_error)?;
        let ca_cert = dir.join("ca.crt");
        write_file(&ca_cert, &ca.pem(), 0o644)?;
        let server_key = KeyPair::generate().map_err(rcgen_error)?;
        let server = server_params()?
            .signed_by(&server_key, &ca, &ca_key)
            .map_err(rcgen_error)?;
        let server = write_pair(dir, "server", &server, &server_key)?;
        let mut pki = TestPki {
            dir: dir.to_path_buf(),
            ca_cert,
            client: server.clone(),
            server,
            ca,
            ca_key,
        };
        pki.client = pki.issue_client(client_user)?;
        Ok(pki)
    }

    /// A client certificate for `user` (its common name), written as `<user>.crt` and
    /// `<user>.key` next to the others.
    pub fn issue_client(&self, user: &str) -> io::Result<CertFiles> {
        if user.is_empty() || !user.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(io::Error::other(format!(
                "test user names are [A-Za-z0-9_]+ (they name files): {user:?}"
            )));
        }
        let key = KeyPair::generate().map_err(rcgen_error)?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
        params.distinguished_name.push(DnType::CommonName, user);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .map_err(rcgen_error)?;
        write_pair(&self.dir, user, &cert, &key)
    }

    /// An X.509 version 1 certificate from this CA with subject `CN=common_name`, made the
    /// way PgBouncer's test suite makes its certificates (OpenSSL's `x509 -req` without
    /// extensions; rcgen makes only version 3), written as `<stem>.crt` and `<stem>.key`.
    /// Needs the `openssl` command.
    pub fn issue_v1_with_openssl(&self, stem: &str, common_name: &str) -> io::Result<CertFiles> {
        let ca_key = self.dir.join("ca.key");
        write_file(&ca_key, &self.ca_key.serialize_pem(), 0o600)?;
        let files = CertFiles {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
        };
        let request = self.dir.join(format!("{stem}.csr"));
        let subject = format!("/CN={common_name}");
        let steps: [Vec<&std::ffi::OsStr>; 3] = [
            vec![
                "ecparam".as_ref(),
                "-name".as_ref(),
                "prime256v1".as_ref(),
                "-genkey".as_ref(),
                "-noout".as_ref(),
                "-out".as_ref(),
                files.key.as_os_str(),
            ],
            vec![
                "req".as_ref(),
                "-new".as_ref(),
                "-key".as_ref(),
                files.key.as_os_str(),
                "-subj".as_ref(),
                subject.as_ref(),
                "-out".as_ref(),
                request.as_os_str(),
            ],
            vec![
                "x509".as_ref(),
                "-req".as_ref(),
                "-in".as_ref(),
                request.as_os_str(),
                "-CA".as_ref(),
                self.ca_cert.as_os_str(),
                "-CAkey".as_ref(),
                ca_key.as_os_str(),
                "-set_serial".as_ref(),
                "7".as_ref(),
                "-days".as_ref(),
                "30".as_ref(),
                "-out".as_ref(),
                files.cert.as_os_str(),
            ],
        ];
        for args in steps {
            let output = std::process::Command::new("openssl").args(&args).output()?;
            if !output.status.success() {
                return Err(io::Error::other(format!(
                    "openssl {:?}: {}",
                    args,
                    String::from_utf8_lossy(&output.stderr)
                )));
            }
        }
        std::fs::set_permissions(&files.key, std::fs::Permissions::from_mode(0o600))?;
        Ok(files)
    }

    /// TLS for a [`pgtier_core::localpg::LocalPg`]: this server certificate, client
    /// certificates checked against this CA, and `cert_users` logging in by certificate.
    /// A rustls client configuration that trusts this PKI's CA (no client certificate).
    pub fn rustls_client(&self) -> io::Result<std::sync::Arc<rustls::ClientConfig>> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(self.ca.der().clone())
            .map_err(|error| io::Error::other(format!("CA certificate: {error}")))?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| io::Error::other(format!("TLS versions: {error}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(std::sync::Arc::new(config))
    }

    pub fn pg_tls(&self, cert_users: &[&str]) -> PgTls {
        PgTls {
            ca_file: Some(self.ca_cert.clone()),
            cert_users: cert_users.iter().map(|user| user.to_string()).collect(),
            ..PgTls::new(&self.server.cert, &self.server.key)
        }
    }

    /// libpq options that verify a server against this CA (`sslmode=verify-full`).
    pub fn verify_full_conninfo(&self) -> String {
        format!("sslmode=verify-full sslrootcert={}", self.ca_cert.display())
    }

    /// libpq options that present `client`'s certificate.
    pub fn client_cert_conninfo(client: &CertFiles) -> String {
        format!(
            "sslcert={} sslkey={}",
            client.cert.display(),
            client.key.display()
        )
    }
}

impl fmt::Debug for TestPki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestPki")
            .field("ca_cert", &self.ca_cert)
            .field("server", &self.server)
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

fn ca_params() -> io::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rcgen_error)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "pgtier e2e test CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

fn server_params() -> io::Result<CertificateParams> {
    let names: Vec<String> = SERVER_NAMES.iter().map(|name| name.to_string()).collect();
    let mut params = CertificateParams::new(names).map_err(rcgen_error)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

fn write_pair(dir: &Path, stem: &str, cert: &Certificate, key: &KeyPair) -> io::Result<CertFiles> {
    let files = CertFiles {
        cert: dir.join(format!("{stem}.crt")),
        key: dir.join(format!("{stem}.key")),
    };
    write_file(&files.cert, &cert.pem(), 0o644)?;
    write_file(&files.key, &key.serialize_pem(), 0o600)?;
    Ok(files)
}

/// Writes `contents` with `mode`, set before the contents go in so a key is never readable
/// by others.
fn write_file(path: &Path, contents: &str, mode: u32) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    // `mode` applies only when the file is created; an old file keeps its mode otherwise.
    file.set_permissions(std::fs::Permissions::from_mode(mode))?;
    file.write_all(contents.as_bytes())
}

fn rcgen_error(error: rcgen::Error) -> io::Error {
    io::Error::other(format!("rcgen: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TempDir;
    use pgtier_core::localpg::{HbaAuth, LocalPg, PgOptions};

    #[test]
    fn files_are_pem_and_keys_private() {
        let dir = TempDir::new("pki-files").unwrap();
        let pki = TestPki::write(dir.path(), "alice").unwrap();
        assert_eq!(pki.client.cert, dir.path().join("alice.crt"));
        for (path, mode) in [
            (&pki.ca_cert, 0o644),
            (&pki.server.cert, 0o644),
            (&pki.server.key, 0o600),
            (&pki.client.cert, 0o644),
            (&pki.client.key, 0o600),
        ] {
            let metadata = std::fs::metadata(path).unwrap();
            assert_eq!(
                metadata.permissions().mode() & 0o777,
                mode,
                "{}",
                path.display()
            );
            let text = std::fs::read_to_string(path).unwrap();
            assert!(text.starts_with("-----BEGIN "), "{}", path.display());
        }
        let bob = pki.issue_client("bob").unwrap();
        assert!(bob.key.exists());
        assert!(pki.issue_client("../etc").is_err());
    }

    /// PostgreSQL with TLS: psql verifies it fully (chain and IP address), plain TCP still
    /// works, and a certificate user logs in with its client certificate only.
    #[test]
    fn psql_verifies_a_tls_server() {
        let dir = TempDir::new("pki-pg").unwrap();
        let pki = TestPki::write(dir.path(), "alice").unwrap();
        let pg = LocalPg::start_primary(&PgOptions {
            auth: HbaAuth::Scram,
            tls: Some(pki.pg_tls(&["alice"])),
            ..PgOptions::default()
        })
        .unwrap();
        pg.psql("postgres", "CREATE ROLE alice LOGIN").unwrap();
        let ssl_in_use = "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()";

        let verified = format!(
            "{} {}",
            pg.conninfo("postgres", "postgres"),
            pki.verify_full_conninfo()
        );
        assert_eq!(pg.psql_conninfo(&verified, ssl_in_use).unwrap(), "t");

        let plain = format!("{} sslmode=disable", pg.conninfo("postgres", "postgres"));
        assert_eq!(pg.psql_conninfo(&plain, ssl_in_use).unwrap(), "f");

        let alice = format!(
            "{} {} {}",
            pg.conninfo("postgres", "alice"),
            pki.verify_full_conninfo(),
            TestPki::client_cert_conninfo(&pki.client)
        );
        assert_eq!(
            pg.psql_conninfo(&alice, "SELECT current_user").unwrap(),
            "alice"
        );
        let alice_plain = format!("{} sslmode=disable", pg.conninfo("postgres", "alice"));
        assert!(pg.psql_conninfo(&alice_plain, "SELECT 1").is_err());

        // A server name the certificate does not carry fails verify-full.
        let wrong_name = format!(
            "host=pgtier.invalid hostaddr=127.0.0.1 port={} dbname=postgres user=postgres {}",
            pg.port(),
            pki.verify_full_conninfo()
        );
        let error = pg.psql_conninfo(&wrong_name, "SELECT 1").unwrap_err();
        assert!(
            error.to_string().contains("does not match host name"),
            "{error}"
        );
    }
}
