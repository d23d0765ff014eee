//! Reads a pgbouncer.ini into `key = value` entries, each tagged with its section and the file
//! and line it came from: `[section]` headers, `;`/`#` comment lines, and `%include FILE`
//! (followed recursively, with a depth limit and a cycle check). What the keys mean is the
//! business of `catalogue` and `mapping`.

use super::super::error::ConfigError;
use std::path::{Path, PathBuf};

/// Deepest chain of `%include`s followed; deeper is almost certainly a mistake.
pub(super) const MAX_INCLUDE_DEPTH: usize = 16;

/// Where one entry was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::config) struct Origin {
    pub file: PathBuf,
    pub line: usize,
}

/// One `key = value` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::config) struct Entry {
    /// Section name, lowercased (`databases`, `users`, `pgbouncer`, `peers`...).
    pub section: String,
    /// The key as written, unquoted (a database or user name keeps its case).
    pub key: String,
    /// The value with surrounding white space removed.
    pub value: String,
    pub origin: Origin,
}

/// A section header, kept so that even an empty `[peers]` is seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::config) struct Section {
    pub name: String,
    pub origin: Origin,
}

/// Everything read from a file and its includes, in reading order.
#[derive(Debug, Default)]
pub(in crate::config) struct Lexed {
    pub entries: Vec<Entry>,
    pub sections: Vec<Section>,
}

/// Reads `path` and every file it includes.
pub(super) fn read_file(path: &Path) -> Result<Lexed, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| ConfigError::file(path, format!("cannot read the file: {error}")))?;
    read_text(&text, path)
}

/// Lexes `text` as the content of `path` (includes are resolved against `path`).
pub(super) fn read_text(text: &str, path: &Path) -> Result<Lexed, ConfigError> {
    let mut reader = Reader {
        lexed: Lexed::default(),
        stack: vec![identity(path)],
        section: None,
    };
    reader.text(text, path)?;
    Ok(reader.lexed)
}

struct Reader {
    lexed: Lexed,
    /// The files being read, outermost first (for the cycle check).
    stack: Vec<PathBuf>,
    /// The current section: carried into and out of included files, as PgBouncer does.
    section: Option<String>,
}

impl Reader {
    fn text(&mut self, text: &str, path: &Path) -> Result<(), ConfigError> {
        for (index, raw_line) in text.lines().enumerate() {
            let origin = Origin {
                file: path.to_path_buf(),
                line: index + 1,
            };
            let line = raw_line.trim();
            if line.is_empty() || line.starts_with(';') || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("%include") {
                self.include(rest.trim(), &origin)?;
            } else if let Some(rest) = line.strip_prefix('[') {
                let Some(name) = rest.strip_suffix(']') else {
                    return Err(error_at(&origin, "", "a section header must end with ]"));
                };
                let name = name.trim().to_ascii_lowercase();
                self.section = Some(name.clone());
                self.lexed.sections.push(Section { name, origin });
            } else {
                let (key, value) = split_entry(line, &origin)?;
                let Some(section) = self.section.clone() else {
                    return Err(error_at(
                        &origin,
                        &key,
                        "this setting comes before any [section] header",
                    ));
                };
                self.lexed.entries.push(Entry {
                    section,
                    key,
                    value,
                    origin,
                });
            }
        }
        Ok(())
    }

    fn include(&mut self, name: &str, origin: &Origin) -> Result<(), ConfigError> {
        if name.is_empty() {
            return Err(error_at(origin, "%include", "names no file"));
        }
        let path = include_path(&origin.file, name);
        if self.stack.len() > MAX_INCLUDE_DEPTH {
            return Err(error_at(
                origin,
                "%include",
                format!("includes are nested more than {MAX_INCLUDE_DEPTH} deep"),
            ));
        }
        let id = identity(&path);
        if self.stack.contains(&id) {
            return Err(error_at(
                origin,
                "%include",
                format!("{} includes itself (an include cycle)", path.display()),
            ));
        }
        let text = std::fs::read_to_string(&path).map_err(|error| {
            error_at(
                origin,
                "%include",
                format!("cannot read {}: {error}", path.display()),
            )
        })?;
        self.stack.push(id);
        let result = self.text(&text, &path);
        self.stack.pop();
        result
    }
}

/// An included name: absolute as written; relative to the including file's directory when the
/// file is there, else to the current directory (PgBouncer's own rule).
fn include_path(including: &Path, name: &str) -> PathBuf {
    let name = Path::new(name);
    if name.is_absolute() {
        return name.to_path_buf();
    }
    match including.parent() {
        Some(directory) if directory.join(name).exists() => directory.join(name),
        _ => name.to_path_buf(),
    }
}

/// The file's identity for the cycle check: its canonical path when it exists.
fn identity(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// `key = value`; a key may be written in double quotes (SQL identifier quoting, `""` for a
/// quote), which database names with unusual characters need.
fn split_entry(line: &str, origin: &Origin) -> Result<(String, String), ConfigError> {
    let (key, rest) = if let Some(quoted) = line.strip_prefix('"') {
        let mut key = String::new();
        let mut chars = quoted.char_indices().peekable();
        let mut end = None;
        while let Some((index, ch)) = chars.next() {
            if ch == '"' {
                if chars.peek().is_some_and(|(_, next)| *next == '"') {
                    chars.next();
                    key.push('"');
                } else {
                    end = Some(index + 1);
                    break;
                }
            } else {
                key.push(ch);
            }
        }
        let Some(end) = end else {
            return Err(error_at(origin, "", "a quoted name is not closed"));
        };
        (key, quoted[end..].trim_start())
    } else {
        match line.find('=') {
            Some(at) => (line[..at].trim().to_string(), &line[at..]),
            None => (line.to_string(), ""),
        }
    };
    let Some(value) = rest.strip_prefix('=') else {
        return Err(error_at(origin, &key, "expected key = value"));
    };
    if key.is_empty() {
        return Err(error_at(origin, "", "a line starts with = (no key)"));
    }
    Ok((key, value.trim().to_string()))
}

/// An error at `origin` about `key`.
pub(super) fn error_at(origin: &Origin, key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        file: origin.file.clone(),
        key: key.to_string(),
        line: Some(origin.line),
        reason: reason.into(),
    }
}
