//! A TOML file that starts from a pgbouncer.ini (`[pgtier] pgbouncer_ini = "FILE"`): the ini
//! is read first, then every key the TOML sets replaces the ini's value for that key, table by
//! table (`pgtier`, `databases.NAME`, `users.NAME`); entries only one of them has are kept.
//! A TOML entry with `replicas` drops the ini entry's `host`, `port` and `routing`, since the
//! replica list says where the servers are.

use super::super::error::ConfigError;
use super::super::locate;
use super::document::{Document, Provenance, Table};
use super::lexer::Origin;
use std::path::Path;
use toml::Value;

/// Applies the TOML `text` (read from `path`, whose parsed form with spans is `root`) on top
/// of `document`. `ini_path` is the resolved `pgbouncer_ini`, written back as an absolute path.
pub(in crate::config) fn apply(
    document: &mut Document,
    text: &str,
    path: &Path,
    root: &toml::de::DeTable<'_>,
    ini_path: &Path,
) -> Result<(), ConfigError> {
    let table: toml::Table = text
        .parse()
        .map_err(|error: toml::de::Error| ConfigError::file(path, error.message().to_string()))?;
    let provenance = |key_path: &str| {
        let line = locate::line_of(root, text, key_path)?;
        Some(Provenance {
            origin: Origin {
                file: path.to_path_buf(),
                line,
            },
            label: None,
        })
    };
    for (section, value) in table {
        let Value::Table(entries) = value else {
            return Err(not_a_table(path, &section));
        };
        match section.as_str() {
            "pgtier" => {
                for (key, mut value) in entries {
                    if key == "pgbouncer_ini" {
                        value = Value::String(ini_path.to_string_lossy().into_owned());
                    }
                    let at = provenance(&format!("pgtier.{key}"));
                    document.pgtier.set(&key, value, at);
                }
            }
            "databases" | "users" => {
                for (name, value) in entries {
                    let key_path = format!("{section}.{name}");
                    let Value::Table(keys) = value else {
                        return Err(not_a_table(path, &key_path));
                    };
                    let tables = if section == "databases" {
                        &mut document.databases
                    } else {
                        &mut document.users
                    };
                    let target = tables.entry(name.clone()).or_insert_with(|| Table {
                        header: provenance(&key_path),
                        entries: Vec::new(),
                    });
                    if keys.contains_key("replicas") {
                        for replaced in ["host", "port", "routing"] {
                            target.remove(replaced);
                        }
                    }
                    for (key, value) in keys {
                        target.set(&key, value, provenance(&format!("{key_path}.{key}")));
                    }
                }
            }
            _ => {
                return Err(ConfigError::at(
                    path,
                    section,
                    "unknown table: expected pgtier, databases or users",
                ));
            }
        }
    }
    Ok(())
}

fn not_a_table(path: &Path, key: &str) -> ConfigError {
    ConfigError::at(path, key, "expected a table")
}
