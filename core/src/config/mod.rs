//! `pgtier.toml`: parsing (serde + toml, unknown keys rejected), PgBouncer's setting names and
//! defaults, and validation whose errors name the file, the key path and the reason.
//!
//! The shard reads a [`Config`] once at start and again on SIGHUP; nothing here is global.

mod changes;
mod database;
mod display;
mod error;
mod locate;
mod raw;
mod seconds;
mod settings;
mod tls;
mod validate;

pub use changes::ConfigChanges;
pub use database::{
    DEFAULT_SERVER_PORT, DatabaseConfig, DedicatedSplit, HostPort, PlbSettings, ReplicaIndex,
    ReplicaSet, Routing, RoutingKind, ServerSet, UserConfig,
};
pub use error::ConfigError;
pub use seconds::Seconds;
pub use settings::{AuthType, PoolMode, Settings};
pub use tls::{CipherSuite, SslMode, TlsCiphers, TlsProtocols};
pub use validate::ADMIN_DATABASE;

use crate::class::ClassSetting;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A validated configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The file this came from (for messages and for reloads).
    pub file: PathBuf,
    /// The `[pgtier]` table; `auth_file` and the TLS files are already resolved against the
    /// file's directory.
    pub pgtier: Settings,
    /// Database entries by name.
    pub databases: BTreeMap<String, DatabaseConfig>,
    /// User entries by name.
    pub users: BTreeMap<String, UserConfig>,
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::file(path, format!("cannot read the file: {error}")))?;
        Config::from_str(&text, path)
    }

    /// Parses and validates `text`; `origin` names the file in errors and anchors relative
    /// paths such as `auth_file`.
    pub fn from_str(text: &str, origin: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let origin = origin.as_ref();
        let root =
            toml::de::DeTable::parse(text).map_err(|error| toml_error(origin, text, "", &error))?;
        let raw = deserialize(text, origin, root.clone())?;
        Config::validated(raw, origin).map_err(|mut error| {
            error.line = locate::line_of(root.get_ref(), text, &error.key);
            error
        })
    }

    /// Cross-field checks and resolution of inherited values.
    fn validated(raw: raw::FileRaw, origin: &Path) -> Result<Config, ConfigError> {
        let mut pgtier = raw.pgtier;
        validate::settings(origin, &pgtier)?;
        pgtier.auth_file = pgtier.auth_file.map(|path| resolve_relative(origin, path));
        pgtier.resolve_tls_files(|path| resolve_relative(origin, path));
        let mut databases = BTreeMap::new();
        for (name, database) in raw.databases {
            let database = validate::database(origin, &name, database, &pgtier)?;
            databases.insert(name, database);
        }
        Ok(Config {
            file: origin.to_path_buf(),
            pgtier,
            databases,
            users: raw.users,
        })
    }

    /// The entry clients name with `database=`.
    pub fn database(&self, name: &str) -> Option<&DatabaseConfig> {
        self.databases.get(name)
    }

    /// The `[users.NAME]` entry, if any.
    pub fn user(&self, name: &str) -> Option<&UserConfig> {
        self.users.get(name)
    }

    /// Pool mode for `user` on `database`: the user's, else the entry's (which already falls
    /// back to the global one).
    pub fn pool_mode(&self, database: &DatabaseConfig, user: &str) -> crate::config::PoolMode {
        self.user(user)
            .and_then(|entry| entry.pool_mode)
            .unwrap_or(database.pool_mode)
    }

    /// Class of a session of `user` on `database`: the user's class, else the entry's.
    pub fn class(&self, database: &DatabaseConfig, user: &str) -> ClassSetting {
        self.user(user)
            .and_then(|entry| entry.class)
            .unwrap_or(database.class)
    }

    /// Server connections `user` may hold across all databases (0 = unlimited).
    pub fn max_user_connections(&self, user: &str) -> u32 {
        match self.user(user) {
            Some(entry) if entry.max_user_connections > 0 => entry.max_user_connections,
            _ => self.pgtier.max_user_connections,
        }
    }
}

/// Parsed TOML to the raw structs, with the key path and line of the first problem.
fn deserialize(
    text: &str,
    origin: &Path,
    root: toml::Spanned<toml::de::DeTable<'_>>,
) -> Result<raw::FileRaw, ConfigError> {
    let deserializer = toml::de::Deserializer::from(root);
    serde_path_to_error::deserialize(deserializer).map_err(|error| {
        let key = error.path().to_string();
        let key = if key == "." { String::new() } else { key };
        toml_error(origin, text, &key, error.inner())
    })
}

fn toml_error(origin: &Path, text: &str, key: &str, error: &toml::de::Error) -> ConfigError {
    ConfigError {
        file: origin.to_path_buf(),
        key: key.to_string(),
        line: error.span().map(|span| locate::line_at(text, span.start)),
        reason: error.message().trim_end().to_string(),
    }
}

/// `path` as written if absolute, else relative to the directory of `origin`.
fn resolve_relative(origin: &Path, path: PathBuf) -> PathBuf {
    match origin.parent() {
        Some(directory) if path.is_relative() && !directory.as_os_str().is_empty() => {
            directory.join(path)
        }
        _ => path,
    }
}

#[cfg(test)]
mod tests;
