//! PgBouncer's configuration format, so an unchanged pgbouncer.ini runs pgtier: `lexer` reads
//! sections, comments and `%include`s; `connstr` parses `[databases]`/`[users]` values;
//! `catalogue` lists every PgBouncer key and what pgtier does with it; `mapping` turns the
//! entries into pgtier's tables; `document` renders those tables as TOML for the one loader
//! and validator every format goes through, so an ini and a TOML with the same meaning give
//! the same `Config`. `overlay` lets a TOML file start from an ini and extend it.

mod catalogue;
mod connstr;
mod document;
mod lexer;
mod mapping;
mod overlay;

pub(super) use document::{Document, Table};
pub(super) use overlay::apply as apply_overlay;

use super::error::ConfigError;
use std::path::Path;

/// The keys of a libpq-style `fleet_store` ("" is valid: no explicit store). Only the keys
/// the fleet's connection uses are accepted, so a typo is an error, not a silent default.
pub(super) fn conninfo(text: &str) -> Result<Vec<(String, String)>, String> {
    const KEYS: [&str; 5] = ["host", "port", "dbname", "user", "password"];
    let pairs = connstr::parse(text)?;
    if let Some((key, _)) = pairs.iter().find(|(key, _)| !KEYS.contains(&key.as_str())) {
        return Err(format!(
            "unknown key {key} (use host, port, dbname, user, password)"
        ));
    }
    if !pairs.is_empty() && !pairs.iter().any(|(key, _)| key == "host") {
        return Err("needs host=".to_string());
    }
    Ok(pairs)
}

/// An ini file read into pgtier's tables.
pub(super) struct Loaded {
    pub document: Document,
    /// PgBouncer keys present in the file that pgtier does not act on.
    pub unhonoured: Vec<String>,
    /// Keys present in the file that pgtier acts on.
    pub honoured: Vec<String>,
}

/// Reads the ini at `path` (with its includes).
pub(super) fn load_file(path: &Path) -> Result<Loaded, ConfigError> {
    let path = absolute(path);
    loaded(lexer::read_file(&path)?)
}

/// Reads `text` as the ini at `path` (includes are resolved against `path`).
pub(super) fn load_text(text: &str, path: &Path) -> Result<Loaded, ConfigError> {
    loaded(lexer::read_text(text, &absolute(path))?)
}

fn loaded(lexed: lexer::Lexed) -> Result<Loaded, ConfigError> {
    let mapped = mapping::map(&lexed)?;
    Ok(Loaded {
        document: mapped.document,
        unhonoured: mapped.unhonoured,
        honoured: mapped.honoured,
    })
}

/// One `[pgbouncer]` line read on its own, as the file reader reads it (the admin console's
/// `SET key = value`).
pub(super) struct Line {
    /// What the line sets in the `pgtier` table (`verbose` sets `log_level`).
    pub table: Table,
    /// Keys it clears (an empty value means "not set").
    pub cleared: Vec<String>,
    /// Whether pgtier acts on the key (false: a PgBouncer key pgtier does not honour).
    pub honoured: bool,
}

/// Reads `key = value` as a line of the `[pgbouncer]` section of `file` (relative paths are
/// resolved against its directory): the same catalogue, conversions and errors as the file.
pub(super) fn read_line(key: &str, value: &str, file: &Path) -> Result<Line, ConfigError> {
    let entry = lexer::Entry {
        section: "pgbouncer".to_string(),
        key: key.to_string(),
        value: value.trim().to_string(),
        // Not a line of the file; errors name the file and the key.
        origin: lexer::Origin {
            file: absolute(file),
            line: 0,
        },
    };
    let mut mapped = mapping::Mapped::default();
    mapped.setting(&entry)?;
    Ok(Line {
        table: mapped.document.pgtier,
        cleared: mapped.cleared,
        honoured: mapped.unhonoured.is_empty(),
    })
}

/// Relative ini paths are made absolute first, so that the paths written in the file, which
/// are resolved against its directory, stay right whatever resolves them later.
fn absolute(path: &Path) -> std::path::PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Whether the file is a pgbouncer.ini: by extension (`.ini`), else by content (the first
/// line that is not blank or a comment is `[databases]`, `[pgbouncer]`, `[users]` or a
/// `%include`).
pub(super) fn is_ini(path: &Path, text: &str) -> bool {
    match path.extension().and_then(|extension| extension.to_str()) {
        Some(extension) if extension.eq_ignore_ascii_case("ini") => return true,
        Some(extension) if extension.eq_ignore_ascii_case("toml") => return false,
        _ => {}
    }
    let first = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with('#') && !line.starts_with(';'));
    let Some(first) = first else {
        return false;
    };
    if first.starts_with("%include") {
        return true;
    }
    let section = first
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .map(|name| name.trim().to_ascii_lowercase());
    matches!(
        section.as_deref(),
        Some("databases" | "pgbouncer" | "users")
    )
}

/// Every `[pgbouncer]` key PgBouncer has, with whether pgtier honours it (the catalogue that
/// docs/config.md lists, for tools such as an admin `SHOW CONFIG`).
#[cfg(test)]
pub(crate) fn pgbouncer_keys() -> impl Iterator<Item = (&'static str, bool)> {
    catalogue::PGBOUNCER_KEYS.iter().map(|(name, treatment)| {
        (
            *name,
            matches!(treatment, catalogue::Treatment::Honoured(_)),
        )
    })
}

#[cfg(test)]
mod tests;
