//! The user name maps of `auth_ident_file` (pg_ident.conf syntax) that a `map=` option of an
//! `auth_hba_file` line names: which system user (for `peer`) or certificate name (for
//! `cert`) may log in as which database user. Parsing and lookup are pure; the file is read
//! by [`IdentFile::load`] only.
//!
//! A line is `MAPNAME SYSTEM-USERNAME DATABASE-USERNAME`; names may be quoted, and an
//! unquoted `all` as the database user lets the system user log in as anyone, as PgBouncer
//! reads it. Names are compared literally (PgBouncer does not read PostgreSQL's `/regex`).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::hba::{logical_lines, tokenize};

/// One line of a map.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mapping {
    map: String,
    system_user: String,
    /// `None`: `all`, any database user.
    database_user: Option<String>,
}

/// A file that could not be used: the file, the line and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdentError {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub reason: String,
}

impl fmt::Display for IdentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file.display(), self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for IdentError {}

/// The maps of an ident file, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentFile {
    mappings: Vec<Mapping>,
}

impl IdentFile {
    /// Reads and parses the file at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<IdentFile, IdentError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| IdentError {
            file: path.to_path_buf(),
            line: None,
            reason: format!("cannot read the file: {error}"),
        })?;
        IdentFile::parse(&text, path)
    }

    /// Parses `text`, the contents of `file`.
    pub fn parse(text: &str, file: &Path) -> Result<IdentFile, IdentError> {
        let mut mappings = Vec::new();
        for (index, raw) in logical_lines(text) {
            let error = |reason: String| IdentError {
                file: file.to_path_buf(),
                line: Some(index + 1),
                reason,
            };
            let fields = tokenize(&raw).map_err(error)?;
            if fields.is_empty() {
                continue;
            }
            let mut names = Vec::with_capacity(3);
            for field in fields {
                let [token] = <[_; 1]>::try_from(field)
                    .map_err(|_| error("a user name map field cannot be a list".to_string()))?;
                names.push(token);
            }
            let [map, system, database] = <[_; 3]>::try_from(names).map_err(|names| {
                error(format!(
                    "a user name map line has three fields (map, system user, database user), not {}",
                    names.len()
                ))
            })?;
            let database_user =
                (database.quoted || database.text != "all").then_some(database.text);
            mappings.push(Mapping {
                map: map.text,
                system_user: system.text,
                database_user,
            });
        }
        Ok(IdentFile { mappings })
    }

    /// Whether a map called `map` exists.
    pub fn has_map(&self, map: &str) -> bool {
        self.mappings.iter().any(|mapping| mapping.map == map)
    }

    /// Whether map `map` lets one of `system_names` log in as `database_user`.
    pub fn permits<'a>(
        &self,
        map: &str,
        mut system_names: impl FnMut(&str) -> bool + 'a,
        database_user: &str,
    ) -> bool {
        self.mappings.iter().any(|mapping| {
            mapping.map == map
                && mapping
                    .database_user
                    .as_deref()
                    .is_none_or(|user| user == database_user)
                && system_names(&mapping.system_user)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<IdentFile, IdentError> {
        IdentFile::parse(text, Path::new("ident.conf"))
    }

    #[test]
    fn maps_let_system_names_in_as_database_users() {
        let ident = parse(
            "# MAPNAME SYSTEM-USERNAME PG-USERNAME\n\
             test  pgbouncer.acme.org  someuser\n\
             test  pgbouncer.acme.org  anotheruser\n\
             test2 \"bouncer\"          all\n\
             test2 pgbouncer.acme.org  \"anotheruser\"\n\
             quoted alice \"all\"\n",
        )
        .expect("valid");
        let is = |name: &'static str| move |system: &str| system == name;
        assert!(ident.permits("test", is("pgbouncer.acme.org"), "someuser"));
        assert!(ident.permits("test", is("pgbouncer.acme.org"), "anotheruser"));
        assert!(!ident.permits("test", is("pgbouncer.acme.org"), "bouncer"));
        assert!(ident.permits("test2", is("bouncer"), "anyone"));
        assert!(!ident.permits("test2", is("pgbouncer.acme.org"), "someuser"));
        assert!(!ident.permits("nosuchmap", is("bouncer"), "someuser"));
        // A quoted `all` is a user called all.
        assert!(ident.permits("quoted", is("alice"), "all"));
        assert!(!ident.permits("quoted", is("alice"), "bob"));
        assert!(ident.has_map("test2") && !ident.has_map("other"));
    }

    #[test]
    fn a_line_needs_three_single_names() {
        let error = parse("ok a b\nbad a\n").expect_err("two fields");
        assert_eq!(error.line, Some(2));
        assert!(error.reason.contains("three fields"), "{error}");
        let error = parse("m a,b c\n").expect_err("a list");
        assert!(error.reason.contains("list"), "{error}");
    }
}
