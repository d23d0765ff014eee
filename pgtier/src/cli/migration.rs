//! What `pgtier check-config` tells someone moving a PgBouncer host to pgtier about their
//! pgbouncer.ini: the keys it sets that pgtier honours but with a visible difference (and
//! what the difference is), the keys pgtier reads and does not act on, and the command line
//! that starts pgtier with the file, as PgBouncer's was started. The differences are those
//! docs/compatibility.md describes, keyed by the setting an operator would look at.

use std::path::Path;

use pgtier_core::config::{Config, IniKeyReport, PoolMode};

/// Honoured keys whose effect an operator can tell apart from PgBouncer's, and how.
const DIFFERENCES: &[(&str, &str)] = &[
    (
        "so_reuseport",
        "pgtier's listeners always have SO_REUSEPORT (its workers share the port), so a \
         second process of the same user can join the port whatever this says; the rolling \
         restart relies on it",
    ),
    (
        "user",
        "PgBouncer switches user before binding and refuses to run as root; pgtier binds \
         first and then switches (a port below 1024 works), and gives the log file and the \
         socket file to that user",
    ),
    (
        "logfile",
        "lines have pgtier's format (UTC time, level, message) rather than PgBouncer's \
         (`LOG`/`WARNING` and the pid): adjust log parsers; the file is still appended to \
         and reopened on SIGHUP",
    ),
    (
        "verbose",
        "becomes pgtier's log_level: 1 is debug, 2 or more trace",
    ),
    (
        "track_extra_parameters",
        "accepted; pgtier tracks a fixed set (client_encoding, DateStyle, TimeZone, \
         standard_conforming_strings, application_name, IntervalStyle)",
    ),
    (
        "peer_id",
        "a forwarded CancelRequest uses one short connection to the peer; pgtier keeps no \
         pool per peer, so SHOW PEER_POOLS has no rows",
    ),
    (
        "client_tls_ciphers",
        "TLS is rustls: OpenSSL cipher expressions (`HIGH:!aNULL`) are refused, and TLS 1.0/1.1 \
         and CBC suites do not exist",
    ),
    (
        "server_tls_ciphers",
        "TLS is rustls: OpenSSL cipher expressions (`HIGH:!aNULL`) are refused, and TLS 1.0/1.1 \
         and CBC suites do not exist",
    ),
    (
        "client_tls_protocols",
        "TLS 1.0 and 1.1 are ignored with a warning (rustls has neither)",
    ),
    (
        "server_tls_protocols",
        "TLS 1.0 and 1.1 are ignored with a warning (rustls has neither)",
    ),
    (
        "server_tls_sslmode",
        "`allow` behaves as `prefer` (TLS is asked for first)",
    ),
];

/// How a transaction- or statement-mode pool differs: session state pins (pgtier's default).
const PINNING: &str = "a client that creates session state (a plain SET, LISTEN, SQL PREPARE, \
     a temporary table, a session advisory lock; a named protocol-level statement only with \
     max_prepared_statements = 0) keeps its server until the state is undone, where PgBouncer \
     hands the server on with the state on it; pin_session_state = false (a pgtier TOML key) \
     is PgBouncer's behaviour";

/// The report for an ini file that loads (after the lists of honoured and unhonoured keys):
/// the differences and the start line.
pub(super) fn render(report: &IniKeyReport, config: &Config, checked: &Path) -> String {
    let mut out = String::new();
    let differences = differences(report, config);
    out.push_str("behaves differently under pgtier:\n");
    if differences.is_empty() {
        out.push_str("  (none)\n");
    }
    for (key, how) in &differences {
        out.push_str(&format!("  {key}: {how}\n"));
    }
    out.push_str("start pgtier with this file:\n");
    for line in start_lines(config, checked) {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

/// The file's keys (and absent keys whose default differs) that behave differently.
fn differences(report: &IniKeyReport, config: &Config) -> Vec<(String, String)> {
    let sets = |key: &str| report.honoured.iter().any(|honoured| honoured == key);
    let mut found: Vec<(String, String)> = DIFFERENCES
        .iter()
        .filter(|(key, _)| sets(key))
        .map(|(key, how)| (key.to_string(), how.to_string()))
        .collect();
    if config.pgtier.syslog && !sets("syslog_ident") {
        found.push((
            "syslog_ident".to_string(),
            "not set: syslog lines are tagged `pgtier`, not `pgbouncer` (set syslog_ident = \
             pgbouncer to keep PgBouncer's)"
                .to_string(),
        ));
    }
    let pooled = config.pgtier.pool_mode != PoolMode::Session
        || config
            .databases
            .values()
            .chain(config.fallback.iter())
            .any(|database| database.pool_mode != PoolMode::Session)
        || config
            .users
            .values()
            .any(|user| user.pool_mode.is_some_and(|mode| mode != PoolMode::Session));
    if pooled && config.pgtier.pin_session_state {
        found.push(("pool_mode".to_string(), PINNING.to_string()));
    }
    found
}

/// The command that starts pgtier on `checked` in the foreground, and, when the file has
/// what PgBouncer's `-d` needs (a pidfile, and a log file or syslog), in the background.
fn start_lines(config: &Config, checked: &Path) -> Vec<String> {
    let path = std::path::absolute(checked).unwrap_or_else(|_| checked.to_path_buf());
    let file = shell_word(&path.to_string_lossy());
    let mut lines = vec![format!("pgtier {file}")];
    let settings = &config.pgtier;
    if settings.pidfile.is_some() && (settings.logfile.is_some() || settings.syslog) {
        lines.push(format!(
            "pgtier -d {file}    (in the background, as `pgbouncer -d`)"
        ));
    }
    lines.push(format!(
        "systemd: ExecStart=/usr/sbin/pgtier -q {file}, or copy it to /etc/pgtier/NAME.ini and \
         `systemctl start pgtier@NAME`"
    ));
    lines
}

/// `text` as one shell word: as is when it needs no quoting, else in single quotes.
fn shell_word(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%=".contains(c));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: &str = include_str!("../../../docs/config.md");

    #[test]
    fn every_difference_is_of_a_key_pgtier_honours() {
        let honoured = REFERENCE
            .split("- **honoured**:")
            .nth(1)
            .and_then(|rest| rest.split("- **read but not honoured**:").next())
            .expect("docs/config.md's honoured list");
        for (key, _) in DIFFERENCES {
            assert!(
                honoured.contains(&format!("`{key}`")),
                "{key} is not an honoured PgBouncer key"
            );
        }
    }

    #[test]
    fn a_path_is_quoted_only_when_the_shell_needs_it() {
        assert_eq!(
            shell_word("/etc/pgbouncer/pgbouncer.ini"),
            "/etc/pgbouncer/pgbouncer.ini"
        );
        assert_eq!(
            shell_word("/etc/my files/it's.ini"),
            "'/etc/my files/it'\\''s.ini'"
        );
    }
}
