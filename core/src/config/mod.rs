//! `pgtier.toml` or a `pgbouncer.ini`: parsing (serde + toml, unknown keys rejected; the ini
//! through `ini`, which renders it as the same TOML tables), PgBouncer's setting names and
//! defaults, and validation whose errors name the file, the key path and the reason.
//!
//! The shard reads a [`Config`] once at start and again on SIGHUP; nothing here is global.

mod changes;
mod database;
mod display;
mod error;
mod function_names;
mod ini;
mod locate;
mod peers;
mod raw;
mod seconds;
mod set;
mod settings;
pub mod show;
mod tls;
mod validate;

pub use database::UserConfig;
pub use database::{
    DatabaseConfig, DedicatedSplit, HostList, HostPort, LoadBalanceHosts, PlbLoadSignal,
    PlbSettings, ReadSettings, ReplicaIndex, ReplicaSet, Routing, RoutingKind, RywScope, ServerSet,
    TargetSessionAttrs, TierSettings,
};
pub use error::ConfigError;
pub use function_names::{FunctionNames, FunctionOverrides};
pub use peers::{MAX_PEER_ID, PeerConfig};

pub use seconds::Seconds;
pub use set::SetOutcome;
pub use settings::{AuthType, ListenAddrs, PoolMode, Settings, WaiterPolicy};
pub use tls::{CipherSuite, SslMode, TlsCiphers, TlsProtocols};
pub use validate::{ADMIN_DATABASE, ADMIN_DATABASE_ALIAS};

/// The `key=value` pairs of a `fleet_store` setting (keys lowercased), checked as the
/// configuration's validation checks them.
pub fn fleet_store_pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    ini::conninfo(text)
}

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
    /// `[peers]`: the other processes of a peered group, by peer id (cancel forwarding).
    pub peers: BTreeMap<u16, PeerConfig>,
    /// The `*` entry of a pgbouncer.ini: the template for databases no entry names (its
    /// `dbname` is replaced by the name the client asked for; see [`Config::database_or_fallback`]).
    pub fallback: Option<DatabaseConfig>,
    /// Keys that were read and are valid PgBouncer settings, but that pgtier does not act on:
    /// listed once at startup as a warning, and by `pgtier check-config`.
    pub unhonoured: Vec<String>,
    /// What it was read from, for the admin console's SET (`set.rs`).
    source: set::Source,
}

/// Whether `name` is the admin console's database, under either of its names.
pub fn is_admin_database(name: &str) -> bool {
    name == ADMIN_DATABASE || name == ADMIN_DATABASE_ALIAS
}

impl Config {
    /// Reads and validates the file at `path`: a pgbouncer.ini when its name ends in `.ini` or
    /// its first section is `[databases]`, `[pgbouncer]` or `[users]`, else pgtier's TOML.
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|error| ConfigError::file(path, format!("cannot read the file: {error}")))?;
        if ini::is_ini(path, &text) {
            Config::from_ini_str(&text, path)
        } else {
            Config::from_str(&text, path)
        }
    }

    /// Parses and validates `text` as a pgbouncer.ini; `origin` names the file in errors and
    /// anchors `%include`s and relative paths.
    pub(crate) fn from_ini_str(
        text: &str,
        origin: impl AsRef<Path>,
    ) -> Result<Config, ConfigError> {
        let origin = origin.as_ref();
        let loaded = ini::load_text(text, origin)?;
        Config::from_document(&loaded.document, loaded.unhonoured, origin, true)
    }

    /// Parses and validates `text` as TOML; `origin` names the file in errors and anchors
    /// relative paths such as `auth_file`. With `[pgtier] pgbouncer_ini = "FILE"`, that ini is
    /// read first and this file's keys override and extend it.
    pub fn from_str(text: &str, origin: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let origin = origin.as_ref();
        let root =
            toml::de::DeTable::parse(text).map_err(|error| toml_error(origin, text, "", &error))?;
        if let Some(ini_path) = pgbouncer_ini(root.get_ref(), origin)? {
            let mut loaded = ini::load_file(&ini_path)?;
            ini::apply_overlay(
                &mut loaded.document,
                text,
                origin,
                root.get_ref(),
                &ini_path,
            )?;
            return Config::from_document(&loaded.document, loaded.unhonoured, origin, false);
        }
        let mut config = Config::from_toml(text, origin, root)?;
        config.source = set::Source::toml(text);
        Ok(config)
    }

    /// Loads tables read from an ini (and perhaps a TOML overlay), pointing errors back at the
    /// line each value came from.
    fn from_document(
        document: &ini::Document,
        unhonoured: Vec<String>,
        origin: &Path,
        ini_only: bool,
    ) -> Result<Config, ConfigError> {
        let rendered = document.render();
        let parsed = toml::de::DeTable::parse(&rendered.text)
            .map_err(|error| toml_error(origin, &rendered.text, "", &error))
            .and_then(|root| Config::from_toml(&rendered.text, origin, root));
        let mut config = parsed.map_err(|error| rendered.locate(error, origin, ini_only))?;
        config.unhonoured = unhonoured;
        config.source = set::Source::tables(document, ini_only);
        Ok(config)
    }

    fn from_toml(
        text: &str,
        origin: &Path,
        root: toml::Spanned<toml::de::DeTable<'_>>,
    ) -> Result<Config, ConfigError> {
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
        if pgtier.peer_id > MAX_PEER_ID {
            return Err(ConfigError::at(
                origin,
                "pgtier.peer_id",
                format!("{} is above {MAX_PEER_ID}", pgtier.peer_id),
            ));
        }
        pgtier.auth_file = pgtier.auth_file.map(|path| resolve_relative(origin, path));
        pgtier.auth_hba_file = pgtier
            .auth_hba_file
            .map(|path| resolve_relative(origin, path));
        pgtier.resolve_tls_files(|path| resolve_relative(origin, path));
        let mut databases = BTreeMap::new();
        let mut fallback = None;
        for (name, database) in raw.databases {
            let database = validate::database(origin, &name, database, &pgtier)?;
            if name == FALLBACK_DATABASE {
                validate::fallback(origin, &database)?;
                fallback = Some(database);
            } else {
                databases.insert(name, database);
            }
        }
        let peers = peers::validated(origin, raw.peers)?;
        Ok(Config {
            file: origin.to_path_buf(),
            pgtier,
            databases,
            users: raw.users,
            peers,
            fallback,
            unhonoured: Vec::new(),
            source: set::Source::default(),
        })
    }

    /// The entry clients name with `database=`, else the `*` fallback itself (whose `name` is
    /// `*`): what the engine needs for pool limits and modes. The database to ask the server
    /// for is [`DatabaseConfig::server_dbname`]; [`Config::database_or_fallback`] gives the
    /// instantiated entry.
    pub fn database(&self, name: &str) -> Option<&DatabaseConfig> {
        match self.databases.get(name) {
            Some(entry) => Some(entry),
            // The admin console's names never reach a server through the fallback.
            None if name == ADMIN_DATABASE || name == PGBOUNCER_ADMIN_ALIAS => None,
            None => self.fallback.as_ref(),
        }
    }

    /// The entry for `name`, else the `*` fallback instantiated for it (`name` and, unless the
    /// fallback sets one, `dbname` become the requested name).
    pub fn database_or_fallback(&self, name: &str) -> Option<std::borrow::Cow<'_, DatabaseConfig>> {
        if let Some(entry) = self.databases.get(name) {
            return Some(std::borrow::Cow::Borrowed(entry));
        }
        let template = self.database(name)?;
        let mut entry = template.clone();
        entry.dbname = template.server_dbname(name).to_string();
        entry.name = name.to_string();
        Some(std::borrow::Cow::Owned(entry))
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

    /// Client connections `user` may have open across all databases (0 = unlimited): the
    /// `[users]` entry's limit when it sets one, else the global one.
    pub fn max_user_client_connections(&self, user: &str) -> u32 {
        match self.user(user) {
            Some(entry) if entry.max_user_client_connections > 0 => {
                entry.max_user_client_connections
            }
            _ => self.pgtier.max_user_client_connections,
        }
    }

    /// `query_wait_timeout` of a client of `user` on `database`: the user's, else the
    /// entry's, else the global one (PgBouncer's order; a set 0 means no limit).
    pub fn query_wait_timeout(&self, database: Option<&DatabaseConfig>, user: &str) -> Seconds {
        self.user(user)
            .and_then(|entry| entry.query_wait_timeout)
            .or_else(|| database.and_then(|db| db.query_wait_timeout))
            .unwrap_or(self.pgtier.query_wait_timeout)
    }

    /// A client of `user`'s `query_timeout`, `idle_transaction_timeout`,
    /// `transaction_timeout` and `client_idle_timeout`: the user's where it sets one above
    /// 0, else the global ones.
    pub fn client_timeouts(&self, user: &str) -> UserTimeouts {
        let settings = &self.pgtier;
        let entry = self.user(user);
        let pick = |own: Option<Seconds>, global: Seconds| {
            own.filter(|value| !value.is_zero()).unwrap_or(global)
        };
        UserTimeouts {
            query_timeout: pick(entry.and_then(|e| e.query_timeout), settings.query_timeout),
            idle_transaction_timeout: pick(
                entry.and_then(|e| e.idle_transaction_timeout),
                settings.idle_transaction_timeout,
            ),
            transaction_timeout: pick(
                entry.and_then(|e| e.transaction_timeout),
                settings.transaction_timeout,
            ),
            client_idle_timeout: pick(
                entry.and_then(|e| e.client_idle_timeout),
                settings.client_idle_timeout,
            ),
        }
    }

    /// Whether any `[users]` or database entry sets its own client timeout (when none does,
    /// every client has the global ones).
    pub fn has_own_client_timeouts(&self) -> bool {
        self.users.values().any(|user| {
            user.query_timeout.is_some()
                || user.idle_transaction_timeout.is_some()
                || user.transaction_timeout.is_some()
                || user.client_idle_timeout.is_some()
                || user.query_wait_timeout.is_some()
        }) || self
            .databases
            .values()
            .chain(self.fallback.as_ref())
            .any(|db| db.query_wait_timeout.is_some())
    }

    /// Servers of a pool of `database` whose server user is `user`: the user's
    /// `pool_size`, else the entry's (which already falls back to `default_pool_size`).
    pub fn pool_size(&self, database: Option<&DatabaseConfig>, user: &str) -> u32 {
        self.user(user)
            .and_then(|entry| entry.pool_size)
            .or(database.map(|db| db.pool_size))
            .unwrap_or(self.pgtier.default_pool_size)
    }

    /// Reserve servers of such a pool: the user's `reserve_pool_size`, else the entry's,
    /// else the global one.
    pub fn reserve_pool_size(&self, database: Option<&DatabaseConfig>, user: &str) -> u32 {
        self.user(user)
            .and_then(|entry| entry.reserve_pool_size)
            .or(database.map(|db| db.reserve_pool_size))
            .unwrap_or(self.pgtier.reserve_pool_size)
    }
}

/// The client timeouts a `[users]` entry may set, resolved against the global ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserTimeouts {
    pub query_timeout: Seconds,
    pub idle_transaction_timeout: Seconds,
    pub transaction_timeout: Seconds,
    pub client_idle_timeout: Seconds,
}

/// Which keys of a pgbouncer.ini pgtier acts on (for `pgtier check-config`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IniKeyReport {
    /// The ini file the keys were read from.
    pub file: PathBuf,
    /// Keys the file sets that pgtier acts on.
    pub honoured: Vec<String>,
    /// Valid PgBouncer keys the file sets that pgtier does not act on.
    pub unhonoured: Vec<String>,
}

/// For a pgbouncer.ini, or a TOML file that starts from one, which of the ini's keys are
/// honoured; `None` for a TOML file on its own.
pub fn ini_key_report(path: &Path) -> Result<Option<IniKeyReport>, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| ConfigError::file(path, format!("cannot read the file: {error}")))?;
    let ini_path = if ini::is_ini(path, &text) {
        path.to_path_buf()
    } else {
        let root =
            toml::de::DeTable::parse(&text).map_err(|error| toml_error(path, &text, "", &error))?;
        match pgbouncer_ini(root.get_ref(), path)? {
            Some(ini_path) => ini_path,
            None => return Ok(None),
        }
    };
    let loaded = ini::load_file(&ini_path)?;
    Ok(Some(IniKeyReport {
        file: ini_path,
        honoured: loaded.honoured,
        unhonoured: loaded.unhonoured,
    }))
}

/// PgBouncer's name for its admin console, which the `*` fallback never serves.
const PGBOUNCER_ADMIN_ALIAS: &str = "pgbouncer";

/// The `*` entry name: the template for databases no entry names.
pub(crate) const FALLBACK_DATABASE: &str = "*";

/// `[pgtier] pgbouncer_ini`, resolved against the TOML file's directory.
fn pgbouncer_ini(
    root: &toml::de::DeTable<'_>,
    origin: &Path,
) -> Result<Option<PathBuf>, ConfigError> {
    let Some(pgtier) = root.get("pgtier") else {
        return Ok(None);
    };
    let toml::de::DeValue::Table(pgtier) = pgtier.get_ref() else {
        return Ok(None);
    };
    let Some(value) = pgtier.get("pgbouncer_ini") else {
        return Ok(None);
    };
    match value.get_ref() {
        toml::de::DeValue::String(name) if !name.is_empty() => {
            Ok(Some(resolve_relative(origin, PathBuf::from(name.as_ref()))))
        }
        _ => Err(ConfigError::at(
            origin,
            "pgtier.pgbouncer_ini",
            "expected the path of a pgbouncer.ini, as a string",
        )),
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
