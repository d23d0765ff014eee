//! Loading the TLS files the settings name: the one place that reads `client_tls_*` and
//! `server_tls_*` PEM files, hands their bytes to the engine's pure builders
//! (`pgtier_engine::tls`) and returns both sides' configurations as [`TlsContexts`]. Used at
//! start and on every reload (SIGHUP, `RELOAD`): the files are read again even when the
//! settings did not change, so a renewed certificate is picked up; a reload whose files are
//! broken fails as a whole and the running contexts stay in use.

use pgtier_core::config::{Settings, SslMode, TlsCiphers, TlsProtocols};
use pgtier_engine::tls::{
    AcceptorParams, ConnectorParams, PemFile, TlsAcceptor, TlsConfigError, TlsConnector,
};
use std::fmt;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Largest PEM file read (a CA bundle of every public root is about 250 KiB): a path that
/// names something else by mistake (a device, a log) fails instead of filling memory.
pub(crate) const MAX_PEM_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Both sides' TLS configurations, cheap to clone (each is an `Arc` inside).
#[derive(Clone, Debug)]
pub(crate) struct TlsContexts {
    /// `None` when `client_tls_sslmode = disable`.
    acceptor: Option<TlsAcceptor>,
    /// `None` when `server_tls_sslmode = disable`.
    connector: Option<TlsConnector>,
    warnings: Vec<String>,
}

impl TlsContexts {
    /// Reads the files `settings` names and builds both sides. A side whose mode is `disable`
    /// reads nothing. The error names the setting, the file and what is wrong.
    pub fn load(settings: &Settings) -> Result<TlsContexts, TlsFilesError> {
        let mut warnings = Vec::new();
        let client = usable_side(
            "client_tls_protocols",
            settings.client_tls_sslmode,
            settings.client_tls_protocols,
            &mut warnings,
        );
        let acceptor = match client {
            true => Some(load_acceptor(settings, &mut warnings)?),
            false => None,
        };
        let server_mode = settings.server_tls_sslmode;
        let server = usable_side(
            "server_tls_protocols",
            server_mode,
            settings.server_tls_protocols,
            &mut warnings,
        );
        // Without a connector no SSLRequest is sent: only modes that allow plain text may
        // lack one.
        if !server && server_mode.requires_tls() {
            return Err(TlsFilesError::NoProtocol { mode: server_mode });
        }
        let connector = match server {
            true => Some(load_connector(settings, &mut warnings)?),
            false => None,
        };
        Ok(TlsContexts {
            acceptor,
            connector,
            warnings,
        })
    }

    /// The client-facing configuration, unless `client_tls_sslmode = disable`.
    pub fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.acceptor.as_ref()
    }

    /// The server-facing configuration, unless `server_tls_sslmode = disable`.
    pub fn connector(&self) -> Option<&TlsConnector> {
        self.connector.as_ref()
    }

    /// Things an operator should hear about that do not stop pgtier (a private key others
    /// can read, TLS versions in a list that rustls does not implement). Log them once.
    pub(crate) fn warnings(&self) -> &[String] {
        &self.warnings
    }
}

/// Why the TLS files could not be loaded.
#[derive(Debug)]
pub(crate) enum TlsFilesError {
    /// The mode needs a file the settings do not name (validation catches the client side's
    /// first; the server side's CA falls back on the system bundle, when there is one).
    Missing {
        setting: &'static str,
        mode: SslMode,
    },
    /// A `*_tls13_ciphers` value names something that is not a TLS 1.3 suite rustls has.
    Tls13Ciphers {
        setting: &'static str,
        reason: String,
    },
    /// `server_tls_protocols` allows no version pgtier implements, and the mode requires TLS.
    NoProtocol { mode: SslMode },
    /// The file could not be read.
    Read {
        setting: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    /// The file is larger than [`MAX_PEM_FILE_BYTES`].
    TooLarge {
        setting: &'static str,
        path: PathBuf,
    },
    /// The files were read but do not make a configuration (the error names the file).
    Config {
        /// `client_tls` or `server_tls`: which side's settings.
        side: &'static str,
        error: TlsConfigError,
    },
}

impl fmt::Display for TlsFilesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsFilesError::Missing { setting, mode } => {
                let side = setting.split("_tls").next().unwrap_or(setting);
                write!(f, "{side}_tls_sslmode = \"{mode}\" needs {setting}")
            }
            // OpenSSL's words first (PgBouncer logs them; operators grep for them).
            TlsFilesError::Tls13Ciphers { setting, reason } => write!(
                f,
                "{setting}: failed to set the TLSv1.3 cipher suites: {reason}"
            ),
            TlsFilesError::NoProtocol { mode } => write!(
                f,
                "server_tls_sslmode = \"{mode}\" requires TLS, and server_tls_protocols allows \
                 neither TLS 1.2 nor TLS 1.3, the versions pgtier implements (rustls)"
            ),
            TlsFilesError::Read {
                setting,
                path,
                error,
            } => write!(f, "{setting}: cannot read {}: {error}", path.display()),
            TlsFilesError::TooLarge { setting, path } => write!(
                f,
                "{setting}: {} is larger than {} MiB; is it a PEM file?",
                path.display(),
                MAX_PEM_FILE_BYTES / (1024 * 1024)
            ),
            TlsFilesError::Config { side, error } => write!(f, "{side}_*: {error}"),
        }
    }
}

impl std::error::Error for TlsFilesError {}

/// One file's name (as configured, for messages) and bytes.
struct Loaded {
    name: String,
    contents: Vec<u8>,
}

impl Loaded {
    fn pem(&self) -> PemFile<'_> {
        PemFile::new(&self.name, &self.contents)
    }
}

fn load_acceptor(
    settings: &Settings,
    warnings: &mut Vec<String>,
) -> Result<TlsAcceptor, TlsFilesError> {
    let mode = settings.client_tls_sslmode;
    let cert = required("client_tls_cert_file", &settings.client_tls_cert_file, mode)?;
    let key = required("client_tls_key_file", &settings.client_tls_key_file, mode)?;
    let ca = optional("client_tls_ca_file", &settings.client_tls_ca_file)?;
    warn_key_permissions(
        "client_tls_key_file",
        settings.client_tls_key_file.as_deref(),
        warnings,
    );
    warn_legacy(
        "client_tls_protocols",
        settings.client_tls_protocols,
        warnings,
    );
    let ciphers = with_tls13(
        "client_tls13_ciphers",
        &settings.client_tls_ciphers,
        &settings.client_tls13_ciphers,
    )?;
    TlsAcceptor::new(&AcceptorParams {
        mode,
        protocols: settings.client_tls_protocols,
        ciphers: &ciphers,
        cert_chain: cert.pem(),
        key: key.pem(),
        ca: ca.as_ref().map(Loaded::pem),
    })
    .map_err(|error| TlsFilesError::Config {
        side: "client_tls",
        error,
    })
}

fn load_connector(
    settings: &Settings,
    warnings: &mut Vec<String>,
) -> Result<TlsConnector, TlsFilesError> {
    let mode = settings.server_tls_sslmode;
    // As PgBouncer, the CA is used only by the modes that verify; in the others it is not read.
    // Without server_tls_ca_file they verify against the system's CA bundle, as PgBouncer's
    // TLS library does.
    let ca = match (mode.verifies_certificate(), &settings.server_tls_ca_file) {
        (false, _) => None,
        (true, Some(path)) => Some(read("server_tls_ca_file", path)?),
        (true, None) => Some(system_ca_bundle(mode, SYSTEM_CA_BUNDLES)?),
    };
    let cert = optional("server_tls_cert_file", &settings.server_tls_cert_file)?;
    let key = optional("server_tls_key_file", &settings.server_tls_key_file)?;
    // PgBouncer's settings change one SET at a time, so one of the pair may be set before
    // the other: no client certificate until both are.
    let client_cert = match (&cert, &key) {
        (Some(cert), Some(key)) => Some((cert.pem(), key.pem())),
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            let (set, unset) = match cert.is_some() {
                true => ("server_tls_cert_file", "server_tls_key_file"),
                false => ("server_tls_key_file", "server_tls_cert_file"),
            };
            warnings.push(format!(
                "{set} is set without {unset}: no client certificate is presented to servers \
                 until both are set"
            ));
            None
        }
    };
    if key.is_some() {
        warn_key_permissions(
            "server_tls_key_file",
            settings.server_tls_key_file.as_deref(),
            warnings,
        );
    }
    warn_legacy(
        "server_tls_protocols",
        settings.server_tls_protocols,
        warnings,
    );
    let ciphers = with_tls13(
        "server_tls13_ciphers",
        &settings.server_tls_ciphers,
        &settings.server_tls13_ciphers,
    )?;
    TlsConnector::new(&ConnectorParams {
        mode,
        protocols: settings.server_tls_protocols,
        ciphers: &ciphers,
        ca: ca.as_ref().map(Loaded::pem),
        client_cert,
    })
    .map_err(|error| TlsFilesError::Config {
        side: "server_tls",
        error,
    })
}

/// `*_tls_ciphers` with its TLS 1.3 suites replaced by `*_tls13_ciphers`, when set.
fn with_tls13(
    setting: &'static str,
    ciphers: &TlsCiphers,
    tls13: &Option<String>,
) -> Result<TlsCiphers, TlsFilesError> {
    ciphers
        .with_tls13(tls13.as_deref().unwrap_or(""))
        .map_err(|reason| TlsFilesError::Tls13Ciphers { setting, reason })
}

/// Where distributions keep the system's CA bundle (Debian and Ubuntu, Fedora and RHEL,
/// openSUSE, Alpine and the BSDs), first found first used.
const SYSTEM_CA_BUNDLES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// The first of `candidates` that exists, read; none is a `Missing` server_tls_ca_file.
fn system_ca_bundle(mode: SslMode, candidates: &[&str]) -> Result<Loaded, TlsFilesError> {
    match candidates.iter().map(Path::new).find(|path| path.exists()) {
        Some(path) => read("server_tls_ca_file", path),
        None => Err(TlsFilesError::Missing {
            setting: "server_tls_ca_file",
            mode,
        }),
    }
}

/// Whether a side whose mode is `mode` has TLS: not disabled, and `protocols` allows a
/// version pgtier implements (else a warning says TLS is off on that side).
fn usable_side(
    setting: &str,
    mode: SslMode,
    protocols: TlsProtocols,
    warnings: &mut Vec<String>,
) -> bool {
    if !mode.is_enabled() {
        return false;
    }
    if !protocols.implemented() {
        warnings.push(format!(
            "{setting} allows neither TLS 1.2 nor TLS 1.3, the versions pgtier implements \
             (rustls): TLS is not offered on that side"
        ));
        return false;
    }
    true
}

fn required(
    setting: &'static str,
    path: &Option<PathBuf>,
    mode: SslMode,
) -> Result<Loaded, TlsFilesError> {
    match path {
        Some(path) => read(setting, path),
        None => Err(TlsFilesError::Missing { setting, mode }),
    }
}

fn optional(
    setting: &'static str,
    path: &Option<PathBuf>,
) -> Result<Option<Loaded>, TlsFilesError> {
    path.as_deref().map(|path| read(setting, path)).transpose()
}

/// Reads at most [`MAX_PEM_FILE_BYTES`] of `path`.
fn read(setting: &'static str, path: &Path) -> Result<Loaded, TlsFilesError> {
    let read_error = |error| TlsFilesError::Read {
        setting,
        path: path.to_path_buf(),
        error,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut contents = Vec::new();
    file.take(MAX_PEM_FILE_BYTES + 1)
        .read_to_end(&mut contents)
        .map_err(read_error)?;
    if contents.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(TlsFilesError::TooLarge {
            setting,
            path: path.to_path_buf(),
        });
    }
    Ok(Loaded {
        name: path.display().to_string(),
        contents,
    })
}

/// PostgreSQL refuses a key others may read; pgtier, like PgBouncer, uses it and says so.
fn warn_key_permissions(setting: &str, path: Option<&Path>, warnings: &mut Vec<String>) {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = path else { return };
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let mode = metadata.permissions().mode();
    if mode & 0o077 != 0 {
        warnings.push(format!(
            "{setting}: {} can be read by others (mode {:04o}); chmod 600 it",
            path.display(),
            mode & 0o7777
        ));
    }
}

fn warn_legacy(setting: &str, protocols: TlsProtocols, warnings: &mut Vec<String>) {
    if protocols.ignored_legacy() {
        warnings.push(format!(
            "{setting}: TLS 1.0 and 1.1 are not implemented (rustls) and are ignored; \
             using {protocols}"
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgtier_engine::tls::test_pki::TestPki;
    use std::os::unix::fs::PermissionsExt;

    /// A directory removed on drop.
    struct Dir(PathBuf);

    impl Dir {
        fn new(label: &str) -> Dir {
            static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let path = std::env::temp_dir().join(format!(
                "pgtier-tls-files-{}-{n}-{label}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        fn write(&self, name: &str, contents: &str, mode: u32) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, contents).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            path
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Settings with the test PKI written to `dir`: clients in `client`, servers in `server`.
    fn settings(dir: &Dir, pki: &TestPki, client: SslMode, server: SslMode) -> Settings {
        Settings {
            client_tls_sslmode: client,
            client_tls_cert_file: Some(dir.write("server.crt", &pki.server_cert_pem, 0o644)),
            client_tls_key_file: Some(dir.write("server.key", &pki.server_key_pem, 0o600)),
            client_tls_ca_file: Some(dir.write("ca.crt", &pki.ca_cert_pem, 0o644)),
            server_tls_sslmode: server,
            server_tls_ca_file: Some(dir.write("ca.crt", &pki.ca_cert_pem, 0o644)),
            ..Settings::default()
        }
    }

    #[test]
    fn builds_both_sides_from_the_files() {
        let dir = Dir::new("both");
        let pki = TestPki::shared();
        let mut settings = settings(&dir, pki, SslMode::VerifyFull, SslMode::VerifyFull);
        settings.server_tls_cert_file = Some(dir.write("client.crt", &pki.client_cert_pem, 0o644));
        settings.server_tls_key_file = Some(dir.write("client.key", &pki.client_key_pem, 0o600));
        let contexts = TlsContexts::load(&settings).unwrap();
        let acceptor = contexts.acceptor().unwrap();
        assert_eq!(acceptor.leaf_certificate_der(), &pki.server_cert_der()[..]);
        assert_eq!(contexts.connector().unwrap().mode(), SslMode::VerifyFull);
        assert!(contexts.warnings().is_empty(), "{:?}", contexts.warnings());
    }

    #[test]
    fn disabled_sides_read_nothing() {
        let settings = Settings {
            client_tls_cert_file: Some("/nonexistent/server.crt".into()),
            server_tls_sslmode: SslMode::Disable,
            server_tls_ca_file: Some("/nonexistent/ca.crt".into()),
            ..Settings::default()
        };
        let contexts = TlsContexts::load(&settings).unwrap();
        assert!(contexts.acceptor().is_none() && contexts.connector().is_none());

        // The default server mode (prefer) needs no file at all.
        let contexts = TlsContexts::load(&Settings::default()).unwrap();
        assert_eq!(
            contexts.connector().map(|c| c.mode()),
            Some(SslMode::Prefer)
        );
        assert!(contexts.acceptor().is_none() && contexts.connector().is_some());
    }

    #[test]
    fn errors_name_the_setting_and_the_file() {
        let dir = Dir::new("errors");
        let pki = TestPki::shared();

        let mut missing = settings(&dir, pki, SslMode::Require, SslMode::Disable);
        missing.client_tls_key_file = Some(dir.0.join("absent.key"));
        let message = TlsContexts::load(&missing).unwrap_err().to_string();
        let expected = format!(
            "client_tls_key_file: cannot read {}/absent.key: ",
            dir.0.display()
        );
        assert!(message.starts_with(&expected), "{message}");

        let mut wrong = settings(&dir, pki, SslMode::Require, SslMode::Disable);
        wrong.client_tls_key_file = Some(dir.write("ca-as-key.pem", &pki.ca_cert_pem, 0o600));
        let message = TlsContexts::load(&wrong).unwrap_err().to_string();
        let expected = format!(
            "client_tls_*: {}/ca-as-key.pem: no private key found",
            dir.0.display()
        );
        assert!(message.starts_with(&expected), "{message}");

        let message = system_ca_bundle(SslMode::VerifyCa, &["/nonexistent/ca.crt"])
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            message,
            "server_tls_sslmode = \"verify-ca\" needs server_tls_ca_file"
        );

        let mut directory = settings(&dir, pki, SslMode::Require, SslMode::Disable);
        directory.client_tls_cert_file = Some(dir.0.clone());
        let message = TlsContexts::load(&directory).unwrap_err().to_string();
        assert!(
            message.starts_with("client_tls_cert_file: cannot read "),
            "{message}"
        );
    }

    #[test]
    fn server_settings_half_set_between_two_sets_still_load() {
        let dir = Dir::new("half");
        let pki = TestPki::shared();
        // The key before the certificate: no client certificate yet, and a warning.
        let mut half = settings(&dir, pki, SslMode::Disable, SslMode::Require);
        half.server_tls_key_file = Some(dir.write("client.key", &pki.client_key_pem, 0o600));
        let contexts = TlsContexts::load(&half).unwrap();
        assert!(contexts.connector().is_some());
        assert_eq!(
            contexts.warnings(),
            [
                "server_tls_key_file is set without server_tls_cert_file: no client certificate \
              is presented to servers until both are set"
            ]
        );
        // A verifying mode before its CA file: the system's bundle, found first of the list.
        let bundle = dir.write("bundle.crt", &pki.ca_cert_pem, 0o644);
        let bundle = bundle.to_str().unwrap();
        let loaded = system_ca_bundle(SslMode::VerifyFull, &["/nonexistent/ca.crt", bundle]);
        assert_eq!(loaded.unwrap().contents, pki.ca_cert_pem.as_bytes());
        // Where this machine has a bundle, every root in it makes a configuration.
        if system_ca_bundle(SslMode::VerifyFull, SYSTEM_CA_BUNDLES).is_ok() {
            let mut system = settings(&dir, pki, SslMode::Disable, SslMode::VerifyFull);
            system.server_tls_ca_file = None;
            let contexts = TlsContexts::load(&system).unwrap();
            assert_eq!(
                contexts.connector().map(|c| c.mode()),
                Some(SslMode::VerifyFull)
            );
        }
    }

    #[test]
    fn a_side_with_only_legacy_protocols_has_no_tls() {
        let dir = Dir::new("legacy");
        let pki = TestPki::shared();
        let legacy = TlsProtocols::parse("tlsv1.0").unwrap();
        let mut settings = settings(&dir, pki, SslMode::Require, SslMode::Prefer);
        settings.client_tls_protocols = legacy;
        settings.server_tls_protocols = legacy;
        let contexts = TlsContexts::load(&settings).unwrap();
        assert!(contexts.acceptor().is_none() && contexts.connector().is_none());
        assert_eq!(contexts.warnings().len(), 2, "{:?}", contexts.warnings());
        assert!(contexts.warnings()[1].starts_with("server_tls_protocols allows neither"));
        // Where servers must be spoken to over TLS, it is refused.
        settings.server_tls_sslmode = SslMode::Require;
        let message = TlsContexts::load(&settings).unwrap_err().to_string();
        assert!(
            message.starts_with("server_tls_sslmode = \"require\" requires TLS"),
            "{message}"
        );
    }

    #[test]
    fn tls13_ciphers_apply_when_the_configuration_is_built() {
        let dir = Dir::new("tls13");
        let pki = TestPki::shared();
        let mut settings = settings(&dir, pki, SslMode::Require, SslMode::Disable);
        settings.client_tls13_ciphers = Some("TLS_CHACHA20_POLY1305_SHA256".to_string());
        assert!(TlsContexts::load(&settings).is_ok());
        settings.client_tls13_ciphers = Some("unknown".to_string());
        let message = TlsContexts::load(&settings).unwrap_err().to_string();
        assert!(
            message.starts_with(
                "client_tls13_ciphers: failed to set the TLSv1.3 cipher suites: `unknown`"
            ),
            "{message}"
        );
    }

    #[test]
    fn oversized_files_are_refused() {
        let dir = Dir::new("large");
        let pki = TestPki::shared();
        let mut settings = settings(&dir, pki, SslMode::Require, SslMode::Disable);
        let large = "x".repeat(MAX_PEM_FILE_BYTES as usize + 1);
        settings.client_tls_cert_file = Some(dir.write("large.crt", &large, 0o644));
        let message = TlsContexts::load(&settings).unwrap_err().to_string();
        assert!(message.contains("is larger than 4 MiB"), "{message}");
    }

    #[test]
    fn readable_keys_and_legacy_protocols_are_warned_about() {
        let dir = Dir::new("warnings");
        let pki = TestPki::shared();
        let mut settings = settings(&dir, pki, SslMode::Require, SslMode::Prefer);
        settings.client_tls_key_file = Some(dir.write("open.key", &pki.server_key_pem, 0o644));
        settings.server_tls_protocols = TlsProtocols::parse("tlsv1.1,tlsv1.2").unwrap();
        let contexts = TlsContexts::load(&settings).unwrap();
        let warnings = contexts.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].starts_with("client_tls_key_file: ") && warnings[0].contains("0644"));
        assert!(
            warnings[1].starts_with("server_tls_protocols: ")
                && warnings[1].ends_with("using tlsv1.2")
        );
    }

    #[test]
    fn a_reload_reads_renewed_files() {
        let dir = Dir::new("reload");
        let first = TestPki::new();
        let settings = settings(&dir, &first, SslMode::Require, SslMode::Disable);
        let before = TlsContexts::load(&settings).unwrap();
        let second = TestPki::new();
        dir.write("server.crt", &second.server_cert_pem, 0o644);
        dir.write("server.key", &second.server_key_pem, 0o600);
        let after = TlsContexts::load(&settings).unwrap();
        let leaf =
            |contexts: &TlsContexts| contexts.acceptor().unwrap().leaf_certificate_der().to_vec();
        assert_eq!(leaf(&before), first.server_cert_der());
        assert_eq!(leaf(&after), second.server_cert_der());
    }
}
