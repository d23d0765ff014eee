//! The one error a configuration can produce: which file, which key, which line when known,
//! and why. Its Display is what `pgtier check-config` prints and what a failed reload logs.

use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The file (or other origin) the text came from.
    pub file: PathBuf,
    /// Dotted key path such as `databases.analytics.plb.freemium_floor`; empty when the
    /// problem is the file as a whole (unreadable, not TOML).
    pub key: String,
    /// 1-based line of the problem, when the TOML parser knows it.
    pub line: Option<usize>,
    /// Why the value is rejected.
    pub reason: String,
}

impl ConfigError {
    /// An error about one key.
    pub fn at(file: &Path, key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            file: file.to_path_buf(),
            key: key.into(),
            line: None,
            reason: reason.into(),
        }
    }

    /// An error about the whole file.
    pub fn file(file: &Path, reason: impl Into<String>) -> ConfigError {
        ConfigError::at(file, "", reason)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": {}", self.key)?;
        }
        write!(f, ": {}", self.reason)
    }
}

impl std::error::Error for ConfigError {}
