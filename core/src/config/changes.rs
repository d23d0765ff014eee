//! What a reload changes: which database entries appeared, went away or changed, and whether
//! the `[pgtier]` or `[users]` tables differ. The proxy drains the pools of removed and changed
//! entries and keeps everything else, so a SIGHUP never drops clients of untouched databases.

use super::Config;

/// Differences between a running configuration and a newly loaded one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConfigChanges {
    /// Entries only in the new configuration.
    pub added_databases: Vec<String>,
    /// Entries only in the old configuration.
    pub removed_databases: Vec<String>,
    /// Entries in both whose settings differ.
    pub changed_databases: Vec<String>,
    /// Whether `[pgtier]` differs.
    pub settings_changed: bool,
    /// Whether `[users]` differs.
    pub users_changed: bool,
}

impl ConfigChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        *self == ConfigChanges::default()
    }
}

impl Config {
    /// What changes when `self` replaces `old`.
    pub fn changes_from(&self, old: &Config) -> ConfigChanges {
        let mut changes = ConfigChanges {
            settings_changed: self.pgtier != old.pgtier,
            users_changed: self.users != old.users,
            ..ConfigChanges::default()
        };
        for (name, database) in &self.databases {
            match old.databases.get(name) {
                None => changes.added_databases.push(name.clone()),
                Some(previous) if previous != database => {
                    changes.changed_databases.push(name.clone());
                }
                Some(_) => {}
            }
        }
        changes.removed_databases = old
            .databases
            .keys()
            .filter(|name| !self.databases.contains_key(*name))
            .cloned()
            .collect();
        // The `*` fallback counts as the entry named `*`.
        let star = super::FALLBACK_DATABASE.to_string();
        match (&old.fallback, &self.fallback) {
            (None, Some(_)) => changes.added_databases.push(star),
            (Some(_), None) => changes.removed_databases.push(star),
            (Some(previous), Some(current)) if previous != current => {
                changes.changed_databases.push(star);
            }
            _ => {}
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        let text = format!("[pgtier]\nauth_type = \"trust\"\n{text}");
        Config::from_str(&text, "pgtier.toml").expect("valid config")
    }

    #[test]
    fn reload_reports_added_removed_and_changed_entries() {
        let old = config("[databases.a]\n[databases.b]\n[databases.c]\n");
        let new = config("[databases.a]\n[databases.b]\nport = 5433\n[databases.d]\n");
        let changes = new.changes_from(&old);
        assert_eq!(changes.added_databases, ["d"]);
        assert_eq!(changes.removed_databases, ["c"]);
        assert_eq!(changes.changed_databases, ["b"]);
        assert!(!changes.settings_changed && !changes.users_changed);
    }

    #[test]
    fn the_fallback_is_the_entry_named_star() {
        let old = config("[databases.a]\n");
        let new = config("[databases.a]\n[databases.\"*\"]\nport = 5433\n");
        assert_eq!(new.changes_from(&old).added_databases, ["*"]);
        assert_eq!(old.changes_from(&new).removed_databases, ["*"]);
        let moved = config("[databases.a]\n[databases.\"*\"]\nport = 5434\n");
        assert_eq!(moved.changes_from(&new).changed_databases, ["*"]);
        assert!(new.fallback.is_some() && !new.databases.contains_key("*"));
    }

    #[test]
    fn identical_reload_changes_nothing() {
        let text = "[databases.a]\n[users.x]\nclass = \"premium\"\n";
        assert!(config(text).changes_from(&config(text)).is_empty());
    }
}
