//! The files a login is checked against, loaded together and replaced together on reload:
//! the auth file (PgBouncer's userlist.txt), read by `pgtier_core::auth_file` — the same
//! parser `pgtier check-config` uses — and handed to the password exchanges in the text form
//! PostgreSQL itself stores (plain, `md5<hex>`, or `SCRAM-SHA-256$<iter>:<salt>$<keys>`),
//! and with `auth_type = hba` the rules of `auth_hba_file` and the user name maps of
//! `auth_ident_file` they name.

use std::path::Path;

use pgtier_core::auth_file::{AuthFile, StoredPassword};
use pgtier_core::config::{AuthType, Settings};
use pgtier_core::hba::HbaFile;
use pgtier_core::ident::IdentFile;

#[derive(Debug, Clone, Default)]
pub struct UserList {
    file: AuthFile,
    hba: Option<HbaFile>,
    /// The user name maps the HBA lines' `map=` options name.
    ident: IdentFile,
}

impl UserList {
    pub fn new() -> UserList {
        UserList::default()
    }

    /// An already parsed auth file.
    pub(crate) fn from_file(file: AuthFile) -> UserList {
        UserList {
            file,
            hba: None,
            ident: IdentFile::default(),
        }
    }

    /// With these HBA rules.
    pub(crate) fn with_hba(self, hba: HbaFile) -> UserList {
        UserList {
            hba: Some(hba),
            ..self
        }
    }

    /// With these user name maps.
    pub(crate) fn with_ident(self, ident: IdentFile) -> UserList {
        UserList { ident, ..self }
    }

    pub fn load(path: &Path) -> Result<UserList, String> {
        AuthFile::load(path)
            .map(UserList::from_file)
            .map_err(|error| error.to_string())
    }

    /// Everything `settings` names: its `auth_file` (none: no users) and, with
    /// `auth_type = hba`, its `auth_hba_file`, which must then be set.
    pub fn load_for(settings: &Settings) -> Result<UserList, String> {
        let users = match &settings.auth_file {
            Some(path) => UserList::load(path)?,
            None => UserList::new(),
        };
        if settings.auth_type != AuthType::Hba {
            return Ok(users);
        }
        let path = settings
            .auth_hba_file
            .as_ref()
            .ok_or("auth_type = \"hba\" needs auth_hba_file")?;
        let hba = HbaFile::load(path).map_err(|error| error.to_string())?;
        let ident = match &settings.auth_ident_file {
            Some(path) => IdentFile::load(path).map_err(|error| error.to_string())?,
            None => IdentFile::default(),
        };
        // A line naming a map the ident file lacks would refuse every client it matches:
        // the load is refused instead, as PgBouncer does.
        for rule in hba.rules() {
            if let Some(map) = &rule.ident_map
                && !ident.has_map(map)
            {
                return Err(format!(
                    "{}:{}: user name map \"{map}\" is not in auth_ident_file",
                    path.display(),
                    rule.line
                ));
            }
        }
        Ok(users.with_hba(hba).with_ident(ident))
    }

    /// The HBA rules, when `auth_type = hba`.
    pub fn hba(&self) -> Option<&HbaFile> {
        self.hba.as_ref()
    }

    /// The user name maps of `auth_ident_file` (empty without one).
    pub fn ident(&self) -> &IdentFile {
        &self.ident
    }

    /// The stored password of `user` in PostgreSQL's text form.
    pub fn get(&self, user: &str) -> Option<String> {
        Some(match self.file.password(user)? {
            StoredPassword::Plain(password) => password.clone(),
            StoredPassword::Md5(digest) => {
                let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
                format!("md5{hex}")
            }
            StoredPassword::ScramSha256(v) => format!(
                "SCRAM-SHA-256${}:{}${}:{}",
                v.iterations, v.salt_base64, v.stored_key_base64, v.server_key_base64
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_forms_round_trip() {
        let text = "\"alice\" \"secret\"\n\"bob\" \"md50123456789abcdef0123456789abcdef\"\n\
                    \"carol\" \"SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy\"\n";
        let users = UserList::from_file(AuthFile::parse(text, "userlist.txt").expect("valid"));
        assert_eq!(users.get("alice").as_deref(), Some("secret"));
        assert_eq!(
            users.get("bob").as_deref(),
            Some("md50123456789abcdef0123456789abcdef")
        );
        assert_eq!(
            users.get("carol").as_deref(),
            Some("SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy")
        );
        assert_eq!(users.get("dave"), None);
    }
}
