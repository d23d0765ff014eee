//! The TLS vocabulary of the configuration: `*_tls_sslmode`, `*_tls_protocols` and
//! `*_tls_ciphers` with PgBouncer's spellings, parsed into plain values.
//!
//! Core does not know the TLS library: it only knows which protocol versions and cipher suites
//! pgtier's TLS provider implements (rustls with the `ring` provider: TLS 1.2 and 1.3, AEAD
//! suites with ECDHE only) and turns the operator's strings into those. The engine maps the
//! results to rustls types (`pgtier_engine::tls`). Parsing is strict: a name pgtier does not
//! implement is an error that lists what it does implement, never silently dropped.

use serde::Deserialize;
use std::fmt;

/// TLS mode of one side, with PgBouncer's names (`client_tls_sslmode`, `server_tls_sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
pub enum SslMode {
    /// No TLS. Client side: an SSLRequest is answered `N`. Server side: TLS is not asked for.
    #[serde(rename = "disable")]
    Disable,
    /// Client side: TLS if the client asks for it. Server side: as `prefer` (PgBouncer
    /// documents no separate behaviour).
    #[serde(rename = "allow")]
    Allow,
    /// Client side: as `allow`. Server side: TLS is asked for, plain TCP if the server
    /// refuses; the certificate is not checked.
    #[serde(rename = "prefer")]
    Prefer,
    /// TLS is required; the peer's certificate is not checked.
    #[serde(rename = "require")]
    Require,
    /// TLS is required and the peer's certificate must chain to the configured CA.
    #[serde(rename = "verify-ca")]
    VerifyCa,
    /// As `verify-ca`; on the server side the host name must also match the certificate.
    #[serde(rename = "verify-full")]
    VerifyFull,
}

impl SslMode {
    /// Spelling used in the file and in admin output.
    pub const fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// Whether TLS is used at all (anything but `disable`).
    pub const fn is_enabled(self) -> bool {
        !matches!(self, SslMode::Disable)
    }

    /// Whether a connection without TLS is refused (`require` and above).
    pub const fn requires_tls(self) -> bool {
        matches!(
            self,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull
        )
    }

    /// Whether the peer's certificate chain is checked against a CA (`verify-ca`, `verify-full`).
    pub const fn verifies_certificate(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The TLS versions a `*_tls_protocols` list allows, among those pgtier speaks.
///
/// PgBouncer's syntax: a list separated by commas, colons or spaces of `tlsv1.0`, `tlsv1.1`,
/// `tlsv1.2`, `tlsv1.3`, `tlsv1` (all of them), `all`, `legacy` (= `all`, older PgBouncer),
/// `secure` and `default` (= `tlsv1.2,tlsv1.3`); an item written `!item` removes versions (a
/// list that starts with a removal starts from `all`). Case does not matter; an empty string is
/// the default. pgtier's TLS library implements TLS 1.2 and 1.3 only: TLS 1.0 and 1.1 in a list
/// are accepted and ignored ([`TlsProtocols::ignored_legacy`]); a list that leaves neither
/// 1.2 nor 1.3 loads too (PgBouncer takes it), and that side then has no TLS to offer
/// ([`TlsProtocols::implemented`]; the TLS files' loader says so, or refuses it where the mode
/// requires TLS with servers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize)]
#[serde(try_from = "String")]
pub struct TlsProtocols {
    tls12: bool,
    tls13: bool,
    ignored_legacy: bool,
}

/// Bits of the protocol set while parsing.
const TLS10: u8 = 1;
const TLS11: u8 = 2;
const TLS12: u8 = 4;
const TLS13: u8 = 8;
const ALL_VERSIONS: u8 = TLS10 | TLS11 | TLS12 | TLS13;
const SECURE_VERSIONS: u8 = TLS12 | TLS13;

impl TlsProtocols {
    /// `secure`: TLS 1.2 and TLS 1.3 (PgBouncer's default).
    pub const SECURE: TlsProtocols = TlsProtocols {
        tls12: true,
        tls13: true,
        ignored_legacy: false,
    };

    /// Parses a `*_tls_protocols` value; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<TlsProtocols, String> {
        let mut versions = 0u8;
        let mut any = false;
        for item in list_items(text) {
            let (negate, name) = match item.strip_prefix('!') {
                Some(name) => (true, name),
                None => (false, item),
            };
            let Some(named) = protocol_bits(name) else {
                return Err(format!(
                    "unknown TLS protocol `{item}`: expected tlsv1.0, tlsv1.1, tlsv1.2, tlsv1.3, \
                     all, secure, default or legacy"
                ));
            };
            if negate {
                if !any {
                    versions = ALL_VERSIONS;
                }
                versions &= !named;
            } else {
                versions |= named;
            }
            any = true;
        }
        if !any {
            return Ok(TlsProtocols::SECURE);
        }
        let protocols = TlsProtocols {
            tls12: versions & TLS12 != 0,
            tls13: versions & TLS13 != 0,
            ignored_legacy: versions & (TLS10 | TLS11) != 0,
        };
        // Only TLS 1.0/1.1 (`tlsv1.0`): PgBouncer takes it, so it loads, and the side finds
        // at use that it has no version to offer (`implemented`).
        Ok(protocols)
    }

    /// Whether TLS 1.2 is allowed.
    pub const fn tls12(self) -> bool {
        self.tls12
    }

    /// Whether TLS 1.3 is allowed.
    pub const fn tls13(self) -> bool {
        self.tls13
    }

    /// Whether the list allows a version pgtier implements (1.2 or 1.3); without one, that
    /// side cannot use TLS at all.
    pub const fn implemented(self) -> bool {
        self.tls12 || self.tls13
    }

    /// Whether the list also named TLS 1.0 or 1.1, which pgtier does not implement and ignores.
    pub const fn ignored_legacy(self) -> bool {
        self.ignored_legacy
    }
}

impl Default for TlsProtocols {
    fn default() -> TlsProtocols {
        TlsProtocols::SECURE
    }
}

impl TryFrom<String> for TlsProtocols {
    type Error = String;

    fn try_from(text: String) -> Result<TlsProtocols, String> {
        TlsProtocols::parse(&text)
    }
}

impl fmt::Display for TlsProtocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tls12, self.tls13) {
            (true, true) => f.write_str("tlsv1.2,tlsv1.3"),
            (true, false) => f.write_str("tlsv1.2"),
            (false, true) => f.write_str("tlsv1.3"),
            // Only versions pgtier does not implement; this spelling parses back to it.
            (false, false) => f.write_str("tlsv1.0,tlsv1.1"),
        }
    }
}

fn protocol_bits(name: &str) -> Option<u8> {
    let bits = match name.to_ascii_lowercase().as_str() {
        "tlsv1.0" => TLS10,
        "tlsv1.1" => TLS11,
        "tlsv1.2" => TLS12,
        "tlsv1.3" => TLS13,
        "tlsv1" | "all" | "legacy" => ALL_VERSIONS,
        "secure" | "default" => SECURE_VERSIONS,
        _ => return None,
    };
    Some(bits)
}

/// Items of a list separated by commas, colons or white space; empty items are skipped.
fn list_items(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c == ',' || c == ':' || c.is_whitespace())
        .filter(|item| !item.is_empty())
}

/// A cipher suite pgtier's TLS provider implements: every one is an AEAD with an ephemeral
/// (EC)DHE key exchange, so none of OpenSSL's weak classes (CBC, RC4, 3DES, static RSA) exists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CipherSuite {
    /// TLS 1.3 `TLS_AES_256_GCM_SHA384`.
    Tls13Aes256GcmSha384,
    /// TLS 1.3 `TLS_AES_128_GCM_SHA256`.
    Tls13Aes128GcmSha256,
    /// TLS 1.3 `TLS_CHACHA20_POLY1305_SHA256`.
    Tls13Chacha20Poly1305Sha256,
    /// TLS 1.2 `TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384` (OpenSSL: ECDHE-ECDSA-AES256-GCM-SHA384).
    EcdheEcdsaAes256GcmSha384,
    /// TLS 1.2 `TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256` (OpenSSL: ECDHE-ECDSA-AES128-GCM-SHA256).
    EcdheEcdsaAes128GcmSha256,
    /// TLS 1.2 `TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256` (OpenSSL: ECDHE-ECDSA-CHACHA20-POLY1305).
    EcdheEcdsaChacha20Poly1305Sha256,
    /// TLS 1.2 `TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384` (OpenSSL: ECDHE-RSA-AES256-GCM-SHA384).
    EcdheRsaAes256GcmSha384,
    /// TLS 1.2 `TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256` (OpenSSL: ECDHE-RSA-AES128-GCM-SHA256).
    EcdheRsaAes128GcmSha256,
    /// TLS 1.2 `TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256` (OpenSSL: ECDHE-RSA-CHACHA20-POLY1305).
    EcdheRsaChacha20Poly1305Sha256,
}

impl CipherSuite {
    /// Every suite, in the provider's default preference order: TLS 1.3 first, AES-256 before
    /// AES-128 before ChaCha20, ECDSA before RSA.
    pub const ALL: [CipherSuite; 9] = [
        CipherSuite::Tls13Aes256GcmSha384,
        CipherSuite::Tls13Aes128GcmSha256,
        CipherSuite::Tls13Chacha20Poly1305Sha256,
        CipherSuite::EcdheEcdsaAes256GcmSha384,
        CipherSuite::EcdheEcdsaAes128GcmSha256,
        CipherSuite::EcdheEcdsaChacha20Poly1305Sha256,
        CipherSuite::EcdheRsaAes256GcmSha384,
        CipherSuite::EcdheRsaAes128GcmSha256,
        CipherSuite::EcdheRsaChacha20Poly1305Sha256,
    ];

    /// The IANA name (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`).
    pub const fn iana_name(self) -> &'static str {
        match self {
            CipherSuite::Tls13Aes256GcmSha384 => "TLS_AES_256_GCM_SHA384",
            CipherSuite::Tls13Aes128GcmSha256 => "TLS_AES_128_GCM_SHA256",
            CipherSuite::Tls13Chacha20Poly1305Sha256 => "TLS_CHACHA20_POLY1305_SHA256",
            CipherSuite::EcdheEcdsaAes256GcmSha384 => "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            CipherSuite::EcdheEcdsaAes128GcmSha256 => "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            CipherSuite::EcdheEcdsaChacha20Poly1305Sha256 => {
                "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
            }
            CipherSuite::EcdheRsaAes256GcmSha384 => "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            CipherSuite::EcdheRsaAes128GcmSha256 => "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            CipherSuite::EcdheRsaChacha20Poly1305Sha256 => {
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"
            }
        }
    }

    /// OpenSSL's name, as PgBouncer shows it in the `tls` column of SHOW CLIENTS (TLS 1.3
    /// suites have the IANA name in OpenSSL too).
    pub const fn openssl_name(self) -> &'static str {
        match self {
            CipherSuite::Tls13Aes256GcmSha384
            | CipherSuite::Tls13Aes128GcmSha256
            | CipherSuite::Tls13Chacha20Poly1305Sha256 => self.iana_name(),
            CipherSuite::EcdheEcdsaAes256GcmSha384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
            CipherSuite::EcdheEcdsaAes128GcmSha256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
            CipherSuite::EcdheEcdsaChacha20Poly1305Sha256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
            CipherSuite::EcdheRsaAes256GcmSha384 => "ECDHE-RSA-AES256-GCM-SHA384",
            CipherSuite::EcdheRsaAes128GcmSha256 => "ECDHE-RSA-AES128-GCM-SHA256",
            CipherSuite::EcdheRsaChacha20Poly1305Sha256 => "ECDHE-RSA-CHACHA20-POLY1305",
        }
    }

    /// Whether this is a TLS 1.3 suite (else TLS 1.2).
    pub const fn is_tls13(self) -> bool {
        matches!(
            self,
            CipherSuite::Tls13Aes256GcmSha384
                | CipherSuite::Tls13Aes128GcmSha256
                | CipherSuite::Tls13Chacha20Poly1305Sha256
        )
    }

    /// Whether this suite uses AES-128 (the `fast` preference puts those first).
    const fn is_aes128(self) -> bool {
        matches!(
            self,
            CipherSuite::Tls13Aes128GcmSha256
                | CipherSuite::EcdheEcdsaAes128GcmSha256
                | CipherSuite::EcdheRsaAes128GcmSha256
        )
    }

    /// The suite named `name` in IANA or OpenSSL spelling (or rustls's `TLS13_` spelling),
    /// ignoring case.
    pub fn from_name(name: &str) -> Option<CipherSuite> {
        CipherSuite::ALL.into_iter().find(|suite| {
            name.eq_ignore_ascii_case(suite.iana_name())
                || name.eq_ignore_ascii_case(suite.openssl_name())
                || suite.is_tls13() && rustls_spelling(name, suite.iana_name())
        })
    }
}

/// Whether `name` is rustls's `TLS13_AES_128_GCM_SHA256` spelling of the TLS 1.3 suite
/// `iana` (`TLS_AES_128_GCM_SHA256`), ignoring case.
fn rustls_spelling(name: &str, iana: &str) -> bool {
    let (Some(prefix), Some(rest)) = (name.get(..6), name.get(6..)) else {
        return false;
    };
    prefix.eq_ignore_ascii_case("TLS13_")
        && iana
            .get(4..)
            .is_some_and(|suffix| rest.eq_ignore_ascii_case(suffix))
}

impl fmt::Display for CipherSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.iana_name())
    }
}

/// A `*_tls_ciphers` value: the spelling as written and the suites it allows, in preference
/// order (the accepting side uses its own order, as PgBouncer does).
///
/// Keywords, as PgBouncer defines their intent: `default`, `secure` and `normal` (every AEAD
/// suite with forward secrecy, AES-256 first), `fast` (the same, AES-128 first), `compat`,
/// `legacy` and `all` (everything the provider has; rustls has no weaker suites, so these equal
/// `default`). Or a list of suite names separated by colons, commas or spaces, in IANA
/// (`TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`) or OpenSSL (`ECDHE-RSA-AES128-GCM-SHA256`)
/// spelling, in preference order. As in PgBouncer, where `*_tls_ciphers` does not touch TLS 1.3,
/// a list restricts the suites of a TLS version only when it names at least one suite of that
/// version: a list of TLS 1.2 suites keeps every TLS 1.3 suite, and the reverse.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct TlsCiphers {
    spelling: String,
    suites: Vec<CipherSuite>,
}

impl TlsCiphers {
    /// Parses a `*_tls_ciphers` value; the error names every suite pgtier does not implement.
    pub fn parse(text: &str) -> Result<TlsCiphers, String> {
        let spelling = text.trim().to_string();
        let suites = match spelling.to_ascii_lowercase().as_str() {
            "" | "default" | "secure" | "normal" | "compat" | "legacy" | "all" => {
                CipherSuite::ALL.to_vec()
            }
            "fast" => {
                let mut suites = CipherSuite::ALL.to_vec();
                // Stable: within each TLS version AES-128 moves ahead, the rest keeps its order.
                suites.sort_by_key(|suite| (!suite.is_tls13(), !suite.is_aes128()));
                suites
            }
            _ => named_suites(&spelling)?,
        };
        Ok(TlsCiphers { spelling, suites })
    }

    /// The allowed suites, most preferred first; never empty.
    pub fn suites(&self) -> &[CipherSuite] {
        &self.suites
    }

    /// The value as written (trimmed), for messages and SHOW CONFIG.
    pub fn as_str(&self) -> &str {
        &self.spelling
    }

    /// These suites with the TLS 1.3 ones replaced by a `*_tls13_ciphers` value: TLS 1.3
    /// suite names (IANA spelling, as OpenSSL takes them) separated by colons, or one of the
    /// keywords; empty changes nothing. The error says which name is not a TLS 1.3 suite
    /// rustls implements.
    pub fn with_tls13(&self, tls13: &str) -> Result<TlsCiphers, String> {
        let text = tls13.trim();
        if text.is_empty() {
            return Ok(self.clone());
        }
        let keyword = TlsCiphers::parse(text)
            .ok()
            .filter(|_| !text.contains(['_', '-']));
        let chosen: Vec<CipherSuite> = match keyword {
            Some(keyword) => keyword
                .suites
                .into_iter()
                .filter(|s| s.is_tls13())
                .collect(),
            None => {
                let mut chosen = Vec::new();
                for name in list_items(text) {
                    match CipherSuite::from_name(name).filter(|suite| suite.is_tls13()) {
                        Some(suite) if !chosen.contains(&suite) => chosen.push(suite),
                        Some(_) => {}
                        None => {
                            return Err(format!(
                                "`{name}` is not a TLS 1.3 suite pgtier's TLS library (rustls) \
                                 implements (TLS_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256, \
                                 TLS_CHACHA20_POLY1305_SHA256)"
                            ));
                        }
                    }
                }
                chosen
            }
        };
        let suites = chosen
            .into_iter()
            .chain(self.suites.iter().copied().filter(|s| !s.is_tls13()))
            .collect();
        Ok(TlsCiphers {
            spelling: self.spelling.clone(),
            suites,
        })
    }
}

impl Default for TlsCiphers {
    fn default() -> TlsCiphers {
        TlsCiphers {
            spelling: "default".to_string(),
            suites: CipherSuite::ALL.to_vec(),
        }
    }
}

impl TryFrom<String> for TlsCiphers {
    type Error = String;

    fn try_from(text: String) -> Result<TlsCiphers, String> {
        TlsCiphers::parse(&text)
    }
}

impl fmt::Display for TlsCiphers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.spelling)
    }
}

/// An explicit list of suite names, completed per TLS version as [`TlsCiphers`] describes.
fn named_suites(text: &str) -> Result<Vec<CipherSuite>, String> {
    let mut suites = Vec::new();
    let mut unknown = Vec::new();
    for name in list_items(text) {
        match CipherSuite::from_name(name) {
            Some(suite) if !suites.contains(&suite) => suites.push(suite),
            Some(_) => {}
            None => unknown.push(format!("`{name}`")),
        }
    }
    if !unknown.is_empty() {
        let supported: Vec<String> = CipherSuite::ALL
            .iter()
            .map(|suite| match suite.is_tls13() {
                true => suite.iana_name().to_string(),
                false => format!("{} ({})", suite.openssl_name(), suite.iana_name()),
            })
            .collect();
        return Err(format!(
            "unknown or unsupported cipher suite {}: pgtier's TLS library (rustls) implements \
             {}; or use one of default, secure, fast, normal, compat, legacy, all",
            unknown.join(", "),
            supported.join(", ")
        ));
    }
    for tls13 in [true, false] {
        if !suites.iter().any(|suite| suite.is_tls13() == tls13) {
            suites.extend(
                CipherSuite::ALL
                    .into_iter()
                    .filter(|suite| suite.is_tls13() == tls13),
            );
        }
    }
    Ok(suites)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocol_keywords_follow_pgbouncer() {
        let both = (true, true, false);
        let cases = [
            ("secure", both),
            ("default", both),
            ("", both),
            ("  ", both),
            ("tlsv1.2,tlsv1.3", both),
            ("TLSv1.3", (false, true, false)),
            ("tlsv1.2", (true, false, false)),
            ("all", (true, true, true)),
            ("legacy", (true, true, true)),
            ("tlsv1", (true, true, true)),
            ("tlsv1.0, tlsv1.2", (true, false, true)),
            ("tlsv1.1:tlsv1.3", (false, true, true)),
            ("tlsv1.2 tlsv1.3", both),
            ("!tlsv1.2", (false, true, true)),
            ("all,!tlsv1.0,!tlsv1.1", both),
            ("secure,!tlsv1.3", (true, false, false)),
        ];
        for (text, (tls12, tls13, legacy)) in cases {
            let parsed =
                TlsProtocols::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
            assert_eq!(
                (parsed.tls12(), parsed.tls13(), parsed.ignored_legacy()),
                (tls12, tls13, legacy),
                "{text}"
            );
        }
    }

    #[test]
    fn protocol_errors_say_why() {
        // Only versions pgtier lacks: loaded (PgBouncer takes it), and said at use.
        let legacy = TlsProtocols::parse("tlsv1.0,tlsv1.1").unwrap();
        assert!(!legacy.implemented() && legacy.ignored_legacy());
        assert_eq!(TlsProtocols::parse(&legacy.to_string()), Ok(legacy));
        let error = TlsProtocols::parse("tlsv1.2,tlsv1.4").unwrap_err();
        assert!(
            error.starts_with("unknown TLS protocol `tlsv1.4`"),
            "{error}"
        );
        assert!(!TlsProtocols::parse("all,!secure").unwrap().implemented());
        assert!(
            !TlsProtocols::parse("!tlsv1.2,!tlsv1.3")
                .unwrap()
                .implemented()
        );
    }

    #[test]
    fn tls13_ciphers_replace_the_tls13_suites_only() {
        let base = TlsCiphers::parse("ECDHE-RSA-AES128-GCM-SHA256").unwrap();
        let chosen = base.with_tls13("TLS_CHACHA20_POLY1305_SHA256").unwrap();
        assert_eq!(
            chosen.suites(),
            [
                CipherSuite::Tls13Chacha20Poly1305Sha256,
                CipherSuite::EcdheRsaAes128GcmSha256
            ]
        );
        assert_eq!(base.with_tls13("").unwrap(), base);
        let all13 = base.with_tls13("default").unwrap();
        assert_eq!(all13.suites().iter().filter(|s| s.is_tls13()).count(), 3);
        let error = base.with_tls13("unknown").unwrap_err();
        assert!(
            error.starts_with("`unknown` is not a TLS 1.3 suite"),
            "{error}"
        );
        assert!(base.with_tls13("ECDHE-RSA-AES128-GCM-SHA256").is_err());
    }

    #[test]
    fn protocols_display_canonically() {
        for (text, shown) in [
            ("secure", "tlsv1.2,tlsv1.3"),
            ("tlsv1.0,tlsv1.2", "tlsv1.2"),
            ("tlsv1.3", "tlsv1.3"),
        ] {
            assert_eq!(TlsProtocols::parse(text).unwrap().to_string(), shown);
        }
    }

    #[test]
    fn suite_names_in_every_spelling() {
        for suite in CipherSuite::ALL {
            assert_eq!(CipherSuite::from_name(suite.iana_name()), Some(suite));
            assert_eq!(CipherSuite::from_name(suite.openssl_name()), Some(suite));
            let lower = suite.openssl_name().to_ascii_lowercase();
            assert_eq!(CipherSuite::from_name(&lower), Some(suite));
        }
        assert_eq!(
            CipherSuite::from_name("TLS13_AES_128_GCM_SHA256"),
            Some(CipherSuite::Tls13Aes128GcmSha256)
        );
        assert_eq!(
            CipherSuite::from_name("TLS13_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
            None
        );
        assert_eq!(CipherSuite::from_name("AES128-SHA"), None);
        assert_eq!(CipherSuite::from_name(""), None);
        assert_eq!(CipherSuite::from_name("TLS13_"), None);
        assert_eq!(CipherSuite::from_name("é"), None);
    }

    #[test]
    fn cipher_keywords_give_every_suite() {
        for keyword in [
            "default", "secure", "normal", "compat", "legacy", "all", "ALL", "",
        ] {
            let ciphers = TlsCiphers::parse(keyword).unwrap();
            assert_eq!(ciphers.suites(), CipherSuite::ALL, "{keyword}");
        }
        let fast = TlsCiphers::parse("fast").unwrap();
        assert_eq!(
            fast.suites()[..3],
            [
                CipherSuite::Tls13Aes128GcmSha256,
                CipherSuite::Tls13Aes256GcmSha384,
                CipherSuite::Tls13Chacha20Poly1305Sha256
            ]
        );
        assert_eq!(fast.suites()[3], CipherSuite::EcdheEcdsaAes128GcmSha256);
        assert_eq!(fast.suites().len(), 9);
        assert_eq!(fast.to_string(), "fast");
        assert_eq!(TlsCiphers::default(), TlsCiphers::parse("default").unwrap());
    }

    #[test]
    fn cipher_list_restricts_only_the_versions_it_names() {
        let ciphers = TlsCiphers::parse("ECDHE-RSA-AES128-GCM-SHA256").unwrap();
        let tls12: Vec<_> = ciphers.suites().iter().filter(|s| !s.is_tls13()).collect();
        assert_eq!(tls12, [&CipherSuite::EcdheRsaAes128GcmSha256]);
        assert_eq!(
            ciphers.suites().iter().filter(|s| s.is_tls13()).count(),
            3,
            "TLS 1.3 keeps its suites"
        );
        let ciphers = TlsCiphers::parse(
            "TLS_CHACHA20_POLY1305_SHA256:TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        )
        .unwrap();
        assert_eq!(
            ciphers.suites(),
            [
                CipherSuite::Tls13Chacha20Poly1305Sha256,
                CipherSuite::EcdheEcdsaAes256GcmSha384
            ]
        );
        let ciphers = TlsCiphers::parse("TLS_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256").unwrap();
        assert_eq!(ciphers.suites()[0], CipherSuite::Tls13Aes128GcmSha256);
        assert_eq!(
            ciphers.suites().len(),
            7,
            "one TLS 1.3 suite and six TLS 1.2"
        );
    }

    #[test]
    fn unknown_cipher_names_are_all_named() {
        let error =
            TlsCiphers::parse("HIGH:!aNULL:ECDHE-RSA-AES128-GCM-SHA256:AES128-SHA").unwrap_err();
        assert!(
            error
                .starts_with("unknown or unsupported cipher suite `HIGH`, `!aNULL`, `AES128-SHA`:"),
            "{error}"
        );
        assert!(
            error.contains("ECDHE-RSA-AES128-GCM-SHA256 (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)")
        );
    }

    #[test]
    fn sslmode_predicates() {
        use SslMode::*;
        let modes = [Disable, Allow, Prefer, Require, VerifyCa, VerifyFull];
        let enabled: Vec<bool> = modes.iter().map(|m| m.is_enabled()).collect();
        let required: Vec<bool> = modes.iter().map(|m| m.requires_tls()).collect();
        let verified: Vec<bool> = modes.iter().map(|m| m.verifies_certificate()).collect();
        assert_eq!(enabled, [false, true, true, true, true, true]);
        assert_eq!(required, [false, false, false, true, true, true]);
        assert_eq!(verified, [false, false, false, false, true, true]);
        assert_eq!(VerifyFull.to_string(), "verify-full");
    }
}
