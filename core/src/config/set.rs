//! The admin console's `SET key = value`, read exactly as the line `key = value` in the
//! `[pgbouncer]` section of pgbouncer.ini would be (same catalogue, conversions and errors),
//! applied to the tables the running configuration was validated from, and validated again as
//! a whole: what comes out is a new [`Config`] the process applies as it applies a reload.
//!
//! As in PgBouncer, a SET lasts until the next reload: a reload reads the file afresh, so keys
//! the file sets take its value and the others return to their defaults.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::error::ConfigError;
use super::ini;
use super::{Config, ini::Document};

/// PgBouncer's settings it reads at start only (`CF_NO_RELOAD` in its settings table): a SET
/// of one is accepted and changes nothing, as in PgBouncer.
const START_ONLY: &[&str] = &[
    "disable_pqexec",
    "job_name",
    "listen_addr",
    "listen_backlog",
    "listen_port",
    "pidfile",
    "pkt_buf",
    "resolv_conf",
    "so_reuseport",
    "track_extra_parameters",
    "unix_socket_dir",
    "unix_socket_group",
    "unix_socket_mode",
    "user",
];

/// What a SET does.
#[derive(Debug)]
pub enum SetOutcome {
    /// The configuration with the new value, to apply as a reload.
    Changed(Box<Config>),
    /// A key PgBouncer reads at start only: accepted, nothing changes.
    StartOnly,
    /// A PgBouncer key pgtier does not act on: accepted, nothing changes.
    NotActedOn,
}

impl Config {
    /// `SET key = value` on this configuration (see the module doc). `key` is compared
    /// without case, as the file reader does.
    pub fn set(&self, key: &str, value: &str) -> Result<SetOutcome, ConfigError> {
        let key = key.to_ascii_lowercase();
        // PgBouncer ignores these before it looks at the value.
        if START_ONLY.contains(&key.as_str()) {
            return Ok(SetOutcome::StartOnly);
        }
        let line = ini::read_line(&key, value, &self.file)?;
        if !line.honoured {
            return Ok(SetOutcome::NotActedOn);
        }
        let mut document = self.source.document(&self.file)?;
        for (name, tagged) in line.table.entries {
            document.pgtier.set(&name, tagged.value, tagged.provenance);
        }
        for name in &line.cleared {
            document.pgtier.remove(name);
        }
        let config = Config::from_document(
            &document,
            self.unhonoured.clone(),
            &self.file,
            self.source.ini_only,
        )?;
        Ok(SetOutcome::Changed(Box::new(config)))
    }
}

/// What a configuration was validated from, so that a SET can be read against it.
#[derive(Clone, Default)]
pub(super) struct Source {
    tables: Tables,
    /// The tables came from a pgbouncer.ini alone (errors use the ini's key names).
    ini_only: bool,
}

#[derive(Clone, Default)]
enum Tables {
    /// Built in code, not from a file: nothing to set against (SET is refused).
    #[default]
    None,
    /// A TOML file's text, read into tables only when a SET needs them.
    Toml(Arc<str>),
    /// Tables read from an ini (perhaps overlaid by a TOML file).
    Document(Arc<Document>),
}

impl Source {
    pub(super) fn toml(text: &str) -> Source {
        Source {
            tables: Tables::Toml(Arc::from(text)),
            ini_only: false,
        }
    }

    pub(super) fn tables(document: &Document, ini_only: bool) -> Source {
        Source {
            tables: Tables::Document(Arc::new(document.clone())),
            ini_only,
        }
    }

    /// The tables, as a document a SET can change (`file` names the configuration).
    fn document(&self, file: &Path) -> Result<Document, ConfigError> {
        match &self.tables {
            Tables::Document(document) => Ok(Document::clone(document)),
            Tables::Toml(text) => {
                let root = toml::de::DeTable::parse(text)
                    .map_err(|error| ConfigError::file(file, error.message().to_string()))?;
                let mut document = Document::default();
                // A plain TOML file has no `pgbouncer_ini` (it would have been read as an
                // overlay), so the ini path is never written.
                ini::apply_overlay(&mut document, text, file, root.get_ref(), file)?;
                Ok(document)
            }
            Tables::None => Err(ConfigError::file(
                file,
                "this configuration was not read from a file",
            )),
        }
    }
}

/// Where a configuration came from is not part of what it means: two configurations that
/// say the same are equal whatever text they were read from.
impl PartialEq for Source {
    fn eq(&self, _other: &Source) -> bool {
        true
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.tables {
            Tables::None => "none",
            Tables::Toml(_) => "toml",
            Tables::Document(_) => "document",
        };
        f.debug_struct("Source").field("tables", &kind).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ini(text: &str) -> Config {
        let text = format!("[databases]\napp = host=127.0.0.1\n[pgbouncer]\n{text}");
        Config::from_ini_str(&text, "/etc/pgbouncer/pgbouncer.ini").expect("valid ini")
    }

    fn toml(text: &str) -> Config {
        let text = format!("[pgtier]\nauth_type = \"trust\"\n{text}\n[databases.app]\n");
        Config::from_str(&text, "/etc/pgtier/pgtier.toml").expect("valid toml")
    }

    fn changed(config: &Config, key: &str, value: &str) -> Config {
        match config.set(key, value) {
            Ok(SetOutcome::Changed(config)) => *config,
            other => panic!("SET {key} = {value}: {other:?}"),
        }
    }

    #[test]
    fn set_reads_the_value_as_the_file_does() {
        for config in [ini("auth_type = trust"), toml("")] {
            let next = changed(&config, "default_pool_size", "7");
            assert_eq!(next.pgtier.default_pool_size, 7);
            let next = changed(&next, "Query_Wait_Timeout", "2.5");
            assert_eq!(next.pgtier.query_wait_timeout.as_secs_f64(), 2.5);
            assert_eq!(next.pgtier.default_pool_size, 7, "an earlier SET stays");
            let next = changed(&next, "pool_mode", "Transaction");
            assert_eq!(next.pgtier.pool_mode, crate::config::PoolMode::Transaction);
            let next = changed(&next, "auth_type", "Trust");
            assert_eq!(next.pgtier.auth_type, crate::config::AuthType::Trust);
            assert_eq!(next.databases.len(), 1, "the entries stay");
        }
    }

    #[test]
    fn a_bad_value_or_key_is_the_file_readers_error() {
        let config = ini("auth_type = trust");
        let error = config.set("server_lifetime", "soon").expect_err("bad");
        assert_eq!(error.key, "[pgbouncer] server_lifetime");
        assert!(error.reason.contains("seconds"), "{error}");
        let error = config.set("defualt_pool_size", "3").expect_err("unknown");
        assert!(error.reason.contains("default_pool_size"), "{error}");
        let error = config.set("pool_mode", "sometimes").expect_err("refused");
        assert!(error.reason.contains("sometimes"), "{error}");
    }

    #[test]
    fn a_value_the_whole_configuration_refuses_is_refused() {
        // md5 needs an auth_file: the validator runs on the whole configuration.
        let error = toml("").set("auth_type", "md5").expect_err("no auth_file");
        assert!(error.reason.contains("auth_file"), "{error}");
    }

    #[test]
    fn start_only_and_unhonoured_keys_change_nothing() {
        let config = ini("auth_type = trust");
        assert!(matches!(
            config.set("listen_port", "not even a port"),
            Ok(SetOutcome::StartOnly)
        ));
        assert!(matches!(
            config.set("server_round_robin", "1"),
            Ok(SetOutcome::NotActedOn)
        ));
    }

    #[test]
    fn an_empty_value_clears_an_optional_key() {
        let config = ini("auth_type = trust\nauth_user = checker");
        assert_eq!(config.pgtier.auth_user.as_deref(), Some("checker"));
        let next = changed(&config, "auth_user", "");
        assert_eq!(next.pgtier.auth_user, None);
    }
}
