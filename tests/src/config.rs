//! Writes pgtier.toml and userlist.txt for a test: the file format a user writes (see the
//! README's config reference), generated from a small builder so each test states only what
//! it cares about.

use std::fmt::Write as _;

/// One `[databases.NAME]` entry pointing at a single server on 127.0.0.1.
#[derive(Clone, Debug)]
pub struct DatabaseEntry {
    /// What clients put in `database=`.
    pub name: String,
    pub port: u16,
    /// Database name on the server.
    pub dbname: String,
    /// Further `key = value` lines, values already in TOML syntax (`pool_size = 1`).
    pub extra: Vec<(String, String)>,
    /// A reader entry: `port` is the primary and these are its replicas' ports.
    pub replicas: Option<Vec<u16>>,
}

/// The whole configuration of one proxy under test.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub listen_port: u16,
    pub workers: usize,
    /// `trust`, `md5` or `scram-sha-256`.
    pub auth_type: String,
    /// `session` or `transaction`.
    pub pool_mode: String,
    pub default_pool_size: u32,
    pub max_client_conn: u32,
    /// userlist.txt lines as (user, password or stored hash).
    pub users: Vec<(String, String)>,
    /// Further `[pgtier]` lines, values in TOML syntax (`query_wait_timeout = 2`).
    pub extra: Vec<(String, String)>,
    pub databases: Vec<DatabaseEntry>,
    /// `[users.NAME]` lines as (user, key, value in TOML syntax).
    pub user_settings: Vec<(String, String, String)>,
    /// Environment variables for the proxy process.
    pub env: Vec<(String, String)>,
    /// TOML appended after everything, for tables the helpers above do not build
    /// (`[peers.N]`).
    pub raw_tables: String,
}

impl ProxyConfig {
    /// Trust auth, transaction mode, one worker, user `postgres` in the userlist, and the
    /// database `postgres` of the server on `server_port`.
    pub fn new(server_port: u16) -> ProxyConfig {
        ProxyConfig {
            listen_port: 0,
            workers: 1,
            auth_type: "trust".to_string(),
            pool_mode: "transaction".to_string(),
            default_pool_size: 10,
            max_client_conn: 200,
            users: vec![("postgres".to_string(), String::new())],
            extra: Vec::new(),
            databases: Vec::new(),
            user_settings: Vec::new(),
            env: Vec::new(),
            raw_tables: String::new(),
        }
        .database("postgres", server_port, "postgres")
    }

    /// Adds a database entry.
    pub fn database(mut self, name: &str, port: u16, dbname: &str) -> ProxyConfig {
        self.databases.push(DatabaseEntry {
            name: name.to_string(),
            port,
            dbname: dbname.to_string(),
            extra: Vec::new(),
            replicas: None,
        });
        self
    }

    /// Adds a reader entry: the primary on `primary_port`, replicas on `replica_ports`.
    pub fn reader_database(
        mut self,
        name: &str,
        primary_port: u16,
        replica_ports: &[u16],
        dbname: &str,
    ) -> ProxyConfig {
        self.databases.push(DatabaseEntry {
            name: name.to_string(),
            port: primary_port,
            dbname: dbname.to_string(),
            extra: Vec::new(),
            replicas: Some(replica_ports.to_vec()),
        });
        self
    }

    /// Adds a `key = value` line to the most recently added database entry.
    pub fn database_setting(mut self, key: &str, value: &str) -> ProxyConfig {
        if let Some(entry) = self.databases.last_mut() {
            entry.extra.push((key.to_string(), value.to_string()));
        }
        self
    }

    /// Adds a `[pgtier]` line (value in TOML syntax).
    pub fn setting(mut self, key: &str, value: &str) -> ProxyConfig {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    pub fn pool_mode(mut self, mode: &str) -> ProxyConfig {
        self.pool_mode = mode.to_string();
        self
    }

    pub fn pool_size(mut self, size: u32) -> ProxyConfig {
        self.default_pool_size = size;
        self
    }

    pub fn auth(mut self, auth_type: &str) -> ProxyConfig {
        self.auth_type = auth_type.to_string();
        self
    }

    pub fn user(mut self, name: &str, password: &str) -> ProxyConfig {
        self.users.push((name.to_string(), password.to_string()));
        self
    }

    /// Adds a `key = value` line to the `[users.NAME]` table of `user` (`class`, `"premium"`).
    pub fn user_setting(mut self, user: &str, key: &str, value: &str) -> ProxyConfig {
        self.user_settings
            .push((user.to_string(), key.to_string(), value.to_string()));
        self
    }

    /// The pgtier.toml text, with the userlist at `userlist_path`.
    pub fn to_toml(&self, userlist_path: &std::path::Path) -> String {
        let mut text = String::new();
        let _ = writeln!(text, "[pgtier]");
        let _ = writeln!(text, "listen_addr = \"127.0.0.1\"");
        let _ = writeln!(text, "listen_port = {}", self.listen_port);
        let _ = writeln!(text, "workers = {}", self.workers);
        let _ = writeln!(text, "auth_type = \"{}\"", self.auth_type);
        let _ = writeln!(
            text,
            "auth_file = {}",
            toml_string(&userlist_path.display().to_string())
        );
        let _ = writeln!(text, "pool_mode = \"{}\"", self.pool_mode);
        let _ = writeln!(text, "default_pool_size = {}", self.default_pool_size);
        let _ = writeln!(text, "max_client_conn = {}", self.max_client_conn);
        for (key, value) in &self.extra {
            let _ = writeln!(text, "{key} = {value}");
        }
        for entry in &self.databases {
            let _ = writeln!(text, "\n[databases.{}]", entry.name);
            match &entry.replicas {
                // A replica set named in `extra` lists its servers itself.
                None if entry.extra.iter().any(|(key, _)| key == "replicas") => {}
                None => {
                    let _ = writeln!(text, "host = \"127.0.0.1\"");
                    let _ = writeln!(text, "port = {}", entry.port);
                }
                Some(replicas) => {
                    let _ = writeln!(text, "primary = \"127.0.0.1:{}\"", entry.port);
                    let list: Vec<String> = replicas
                        .iter()
                        .map(|port| format!("\"127.0.0.1:{port}\""))
                        .collect();
                    let _ = writeln!(text, "replicas = [{}]", list.join(", "));
                }
            }
            let _ = writeln!(text, "dbname = {}", toml_string(&entry.dbname));
            for (key, value) in &entry.extra {
                let _ = writeln!(text, "{key} = {value}");
            }
        }
        let mut users: Vec<&str> = Vec::new();
        for (user, _, _) in &self.user_settings {
            if !users.contains(&user.as_str()) {
                users.push(user);
            }
        }
        for user in users {
            let _ = writeln!(text, "\n[users.{}]", toml_string(user));
            for (_, key, value) in self.user_settings.iter().filter(|(u, _, _)| u == user) {
                let _ = writeln!(text, "{key} = {value}");
            }
        }
        text.push_str(&self.raw_tables);
        text
    }

    /// The userlist.txt text (PgBouncer format: `"user" "password"`).
    pub fn userlist(&self) -> String {
        self.users
            .iter()
            .map(|(user, password)| format!("{} {}\n", quoted(user), quoted(password)))
            .collect()
    }
}

/// A TOML basic string.
pub fn toml_string(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A userlist field: double quotes, a literal quote doubled.
fn quoted(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}
