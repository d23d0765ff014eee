//! The configuration as pgtier's TOML tables (`pgtier`, `databases.NAME`, `users.NAME`) with
//! the origin of every value: built from a pgbouncer.ini, optionally overlaid by a TOML file,
//! then rendered as TOML text for the one loader every format goes through. Rendering one key
//! per line lets an error found in that text be traced back to the file and line the value
//! came from.

use super::super::error::ConfigError;
use super::lexer::Origin;
use std::collections::BTreeMap;
use std::path::Path;

/// Where one value came from, and how to name it in an error.
#[derive(Clone, Debug, PartialEq)]
pub(in crate::config) struct Provenance {
    pub origin: Origin,
    /// The key as the operator wrote it (`[databases] app: pool_size`); `None` keeps pgtier's
    /// dotted key path (for TOML values).
    pub label: Option<String>,
}

/// One value with its provenance (none for values pgtier derives, such as PgBouncer defaults).
#[derive(Clone, Debug, PartialEq)]
pub(in crate::config) struct Tagged {
    pub value: toml::Value,
    pub provenance: Option<Provenance>,
}

/// An ordered table whose later `set` of a key replaces the earlier value.
#[derive(Clone, Debug, Default, PartialEq)]
pub(in crate::config) struct Table {
    pub header: Option<Provenance>,
    pub entries: Vec<(String, Tagged)>,
}

impl Table {
    pub fn set(&mut self, key: &str, value: toml::Value, provenance: Option<Provenance>) {
        let tagged = Tagged { value, provenance };
        match self.entries.iter_mut().find(|(name, _)| name == key) {
            Some((_, slot)) => *slot = tagged,
            None => self.entries.push((key.to_string(), tagged)),
        }
    }

    pub fn remove(&mut self, key: &str) {
        self.entries.retain(|(name, _)| name != key);
    }

    pub fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(name, _)| name == key)
    }
}

/// The three tables of a pgtier configuration.
#[derive(Clone, Debug, Default, PartialEq)]
pub(in crate::config) struct Document {
    pub pgtier: Table,
    pub databases: BTreeMap<String, Table>,
    pub users: BTreeMap<String, Table>,
    pub peers: BTreeMap<String, Table>,
}

/// The rendered TOML and, for each of its lines, where that line's value came from.
pub(in crate::config) struct Rendered {
    pub(in crate::config) text: String,
    lines: Vec<Option<Provenance>>,
    paths: BTreeMap<String, Provenance>,
}

impl Document {
    /// TOML text with one key per line.
    pub(in crate::config) fn render(&self) -> Rendered {
        let mut out = Rendered {
            text: String::new(),
            lines: Vec::new(),
            paths: BTreeMap::new(),
        };
        out.table("pgtier", &self.pgtier);
        for (section, entries) in [
            ("databases", &self.databases),
            ("users", &self.users),
            ("peers", &self.peers),
        ] {
            for (name, table) in entries {
                out.table(&format!("{section}.{}", quote_key(name)), table);
                if let Some(header) = &table.header {
                    out.paths
                        .insert(format!("{section}.{name}"), header.clone());
                }
            }
        }
        out
    }
}

impl Rendered {
    fn table(&mut self, header: &str, table: &Table) {
        self.line(&format!("[{header}]"), table.header.clone());
        let path_prefix = header.replace('"', "");
        for (key, tagged) in &table.entries {
            self.line(
                &format!("{} = {}", quote_key(key), tagged.value),
                tagged.provenance.clone(),
            );
            if let Some(provenance) = &tagged.provenance {
                self.paths
                    .insert(format!("{path_prefix}.{key}"), provenance.clone());
            }
        }
    }

    fn line(&mut self, text: &str, provenance: Option<Provenance>) {
        self.text.push_str(text);
        self.text.push('\n');
        self.lines.push(provenance);
    }

    /// Points an error found in the rendered text at the file and line the value came from;
    /// `main` is the file the operator named, for problems no single line explains (named with
    /// the ini's spelling of the key when `ini_only`).
    pub(in crate::config) fn locate(
        &self,
        mut error: ConfigError,
        main: &Path,
        ini_only: bool,
    ) -> ConfigError {
        let by_line = error
            .line
            .and_then(|line| self.lines.get(line.checked_sub(1)?))
            .cloned()
            .flatten();
        let key_path = error.key.split('[').next().unwrap_or_default().to_string();
        let provenance = by_line.or_else(|| self.paths.get(&key_path).cloned());
        match provenance {
            Some(provenance) => {
                error.file = provenance.origin.file;
                error.line = Some(provenance.origin.line);
                if let Some(label) = provenance.label {
                    error.key = label;
                }
            }
            None => {
                error.file = main.to_path_buf();
                error.line = None;
                if ini_only {
                    error.key = ini_label(&error.key);
                }
            }
        }
        error
    }
}

/// pgtier's key path in the ini's words: `pgtier.auth_file` is `[pgbouncer] auth_file`,
/// `databases.app.reserve_pool_size` is `[databases] app: reserve_pool`.
fn ini_label(key_path: &str) -> String {
    let Some((table, rest)) = key_path.split_once('.') else {
        return key_path.to_string();
    };
    match table {
        "pgtier" => format!("[pgbouncer] {rest}"),
        "databases" | "users" => match rest.split_once('.') {
            Some((name, key)) => {
                let key = if key == "reserve_pool_size" {
                    "reserve_pool"
                } else {
                    key
                };
                format!("[{table}] {name}: {key}")
            }
            None => format!("[{table}] {rest}"),
        },
        _ => key_path.to_string(),
    }
}

/// A TOML key: bare when it can be, else a basic string.
fn quote_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
    if bare {
        key.to_string()
    } else {
        toml::Value::String(key.to_string()).to_string()
    }
}
