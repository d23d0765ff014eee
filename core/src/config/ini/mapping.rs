//! pgbouncer.ini entries to pgtier's tables: each `[pgbouncer]` key to its `Settings` field
//! (same name, same units), each `[databases]` connection string to a `databases.NAME` table,
//! each `[users]` value to a `users.NAME` table. PgBouncer keys pgtier does not act on are
//! collected by name; keys PgBouncer does not have are errors.

use super::super::error::ConfigError;
use super::catalogue::{self, Kind, Treatment};
use super::connstr;
use super::document::{Document, Provenance, Table};
use super::lexer::{Entry, Lexed, Origin, error_at};
use std::path::Path;
use toml::Value;

/// Where PgBouncer puts its Unix sockets (and looks for servers' sockets) by default.
pub(super) const DEFAULT_UNIX_SOCKET_DIR: &str = "/tmp";
/// The admin console's name in PgBouncer; an entry may not take it.
const PGBOUNCER_ADMIN_DATABASE: &str = "pgbouncer";

/// The tables an ini file describes, and the PgBouncer keys pgtier does not act on.
#[derive(Debug, Default)]
pub(super) struct Mapped {
    pub document: Document,
    pub unhonoured: Vec<String>,
    /// The keys the file sets that pgtier acts on (`[pgbouncer]` keys by name, connection
    /// parameters as `[databases] KEY` and `[users] KEY`), each once.
    pub honoured: Vec<String>,
    /// `[pgbouncer]` keys written with an empty value ("not set"): no default is filled in.
    pub cleared: Vec<String>,
}

/// Maps every entry; the first problem is returned with its file and line.
pub(super) fn map(lexed: &Lexed) -> Result<Mapped, ConfigError> {
    let mut mapped = Mapped::default();
    for section in &lexed.sections {
        match section.name.as_str() {
            "pgbouncer" | "databases" | "users" | "peers" => {}
            other => {
                let hint = catalogue::suggestion(other, ["pgbouncer", "databases", "users"]);
                return Err(error_at(
                    &section.origin,
                    &format!("[{other}]"),
                    format!("{} has no such section{hint}", catalogue::PGBOUNCER_VERSION),
                ));
            }
        }
    }
    for entry in lexed.entries.iter().filter(|e| e.section == "pgbouncer") {
        mapped.setting(entry)?;
    }
    mapped.pgbouncer_defaults();
    let socket_dir = mapped.unix_socket_dir();
    for entry in &lexed.entries {
        match entry.section.as_str() {
            "databases" => mapped.database(entry, socket_dir.as_deref())?,
            "users" => mapped.user(entry)?,
            "peers" => mapped.peer(entry)?,
            _ => {}
        }
    }
    Ok(mapped)
}

impl Mapped {
    fn honour(&mut self, key: String) {
        if !self.honoured.contains(&key) {
            self.honoured.push(key);
        }
    }

    fn unhonour(&mut self, key: String) {
        if !self.unhonoured.contains(&key) {
            self.unhonoured.push(key);
        }
    }

    /// One `[pgbouncer]` line.
    pub(super) fn setting(&mut self, entry: &Entry) -> Result<(), ConfigError> {
        let key = entry.key.to_ascii_lowercase();
        let label = format!("[pgbouncer] {key}");
        let treatment = catalogue::pgbouncer_key(&key).ok_or_else(|| {
            let known = catalogue::PGBOUNCER_KEYS.iter().map(|(name, _)| *name);
            let hint = catalogue::suggestion(&key, known);
            error_at(
                &entry.origin,
                &label,
                format!("{} has no such setting{hint}", catalogue::PGBOUNCER_VERSION),
            )
        })?;
        let Treatment::Honoured(kind) = treatment else {
            self.unhonour(key);
            return Ok(());
        };
        self.honour(key.clone());
        let provenance = Some(Provenance {
            origin: entry.origin.clone(),
            label: Some(label.clone()),
        });
        let fail = |reason: String| error_at(&entry.origin, &label, reason);
        let value = entry.value.as_str();
        let converted = match kind {
            Kind::Verbosity => {
                let level = match parse_count(value).map_err(fail)? {
                    0 => "info",
                    1 => "debug",
                    _ => "trace",
                };
                let level = Value::String(level.into());
                self.document.pgtier.set("log_level", level, provenance);
                return Ok(());
            }
            Kind::Text => Some(Value::String(text_setting(&key, value).map_err(fail)?)),
            Kind::OptionalText => (!value.is_empty()).then(|| Value::String(value.into())),
            Kind::Path => (!value.is_empty()).then(|| path_value(&entry.origin, value)),
            Kind::Count => Some(Value::Integer(parse_count(value).map_err(fail)?)),
            Kind::Port => Some(Value::Integer(parse_port(value).map_err(fail)?.into())),
            Kind::Mode => Some(Value::Integer(parse_c_integer(value).map_err(fail)?)),
            Kind::Seconds => Some(Value::Float(parse_seconds(value).map_err(fail)?)),
            Kind::Bool => Some(Value::Boolean(parse_bool(value).map_err(fail)?)),
            Kind::List => Some(Value::Array(list(value))),
        };
        match converted {
            Some(value) => self.document.pgtier.set(&key, value, provenance),
            // An empty value means "not set": a later line may clear an earlier one.
            None => {
                self.document.pgtier.remove(&key);
                self.cleared.push(key);
            }
        }
        Ok(())
    }

    /// PgBouncer's defaults where they differ from pgtier's TOML defaults: no TCP listener
    /// unless `listen_addr` is set, and a Unix socket in /tmp unless `unix_socket_dir` is set.
    fn pgbouncer_defaults(&mut self) {
        let table = &mut self.document.pgtier;
        if !table.contains("listen_addr") {
            table.set("listen_addr", Value::String(String::new()), None);
        }
        let cleared = self.cleared.iter().any(|key| key == "unix_socket_dir");
        if !table.contains("unix_socket_dir") && !cleared {
            let dir = Value::String(DEFAULT_UNIX_SOCKET_DIR.into());
            table.set("unix_socket_dir", dir, None);
        }
    }

    fn unix_socket_dir(&self) -> Option<String> {
        self.document
            .pgtier
            .entries
            .iter()
            .find(|(key, _)| key == "unix_socket_dir")
            .and_then(|(_, tagged)| tagged.value.as_str().map(str::to_string))
    }

    /// One `[databases]` line: `name = connection string`.
    fn database(&mut self, entry: &Entry, socket_dir: Option<&str>) -> Result<(), ConfigError> {
        let name = entry.key.as_str();
        let label = |key: &str| format!("[databases] {name}: {key}");
        if name == PGBOUNCER_ADMIN_DATABASE {
            return Err(error_at(
                &entry.origin,
                &format!("[databases] {name}"),
                "the name \"pgbouncer\" is reserved for the admin console",
            ));
        }
        let pairs = connstr::parse(&entry.value)
            .map_err(|reason| error_at(&entry.origin, &format!("[databases] {name}"), reason))?;
        let provenance = |key: &str| {
            Some(Provenance {
                origin: entry.origin.clone(),
                label: Some(label(key)),
            })
        };
        let mut table = Table {
            header: provenance("").map(|p| Provenance {
                label: Some(format!("[databases] {name}")),
                ..p
            }),
            entries: Vec::new(),
        };
        let mut host = None;
        let mut port = None;
        for (key, value) in &pairs {
            let fail = |reason: String| error_at(&entry.origin, &label(key), reason);
            if catalogue::DATABASE_UNHONOURED.contains(&key.as_str()) {
                self.unhonour(format!("[databases] {name}: {key}"));
                continue;
            }
            if key == "target_session_attrs" {
                // pgtier's key, not PgBouncer's: pgtier-only settings stay in TOML.
                return Err(fail(format!(
                    "{} has no such connection parameter; pgtier's target_session_attrs is \
                     set in a TOML file that starts from this one (pgbouncer_ini = \"...\" \
                     and [databases.{name}] target_session_attrs = \"read-write\")",
                    catalogue::PGBOUNCER_VERSION
                )));
            }
            if !catalogue::DATABASE_HONOURED.contains(&key.as_str()) {
                let known = catalogue::DATABASE_HONOURED
                    .iter()
                    .chain(catalogue::DATABASE_UNHONOURED)
                    .copied();
                let hint = catalogue::suggestion(key, known);
                return Err(fail(format!(
                    "{} has no such connection parameter{hint}",
                    catalogue::PGBOUNCER_VERSION
                )));
            }
            self.honour(format!("[databases] {key}"));
            let converted = match key.as_str() {
                "host" => {
                    host = Some(value.clone());
                    continue;
                }
                "port" => {
                    port = Some(parse_port(value).map_err(fail)?);
                    continue;
                }
                "pool_size"
                | "min_pool_size"
                | "reserve_pool"
                | "reserve_pool_size"
                | "max_db_connections"
                | "max_db_client_connections" => Value::Integer(parse_count(value).map_err(fail)?),
                "server_lifetime" => Value::Float(parse_seconds(value).map_err(fail)?),
                "query_wait_timeout" => match wait_timeout(value).map_err(fail)? {
                    Some(seconds) => Value::Float(seconds),
                    None => continue,
                },
                "load_balance_hosts" => Value::String(load_balance_hosts(value).map_err(fail)?),
                "pool_mode" => Value::String(pool_mode(value).map_err(fail)?),
                _ => Value::String(value.clone()),
            };
            let field = if key == "reserve_pool" {
                "reserve_pool_size"
            } else {
                key.as_str()
            };
            table.set(field, converted, provenance(key));
        }
        let host_label = label("host");
        let servers = servers(host.as_deref(), port, socket_dir)
            .map_err(|reason| error_at(&entry.origin, &host_label, reason))?;
        for (key, value) in servers {
            table.set(
                key,
                value,
                provenance(if key == "port" { "port" } else { "host" }),
            );
        }
        self.document.databases.insert(name.to_string(), table);
        Ok(())
    }

    /// One `[users]` line: `name = pool_mode=... pool_size=... query_timeout=...`.
    fn user(&mut self, entry: &Entry) -> Result<(), ConfigError> {
        let name = entry.key.as_str();
        let label = |key: &str| format!("[users] {name}: {key}");
        let pairs = connstr::parse(&entry.value)
            .map_err(|reason| error_at(&entry.origin, &format!("[users] {name}"), reason))?;
        let mut table = Table {
            header: Some(Provenance {
                origin: entry.origin.clone(),
                label: Some(format!("[users] {name}")),
            }),
            entries: Vec::new(),
        };
        for (key, value) in &pairs {
            let fail = |reason: String| error_at(&entry.origin, &label(key), reason);
            if catalogue::USER_UNHONOURED.contains(&key.as_str()) {
                self.unhonour(format!("[users] {name}: {key}"));
                continue;
            }
            let converted = match key.as_str() {
                "pool_mode" => Value::String(pool_mode(value).map_err(fail)?),
                "pool_size"
                | "reserve_pool_size"
                | "max_user_connections"
                | "max_user_client_connections" => {
                    Value::Integer(parse_count(value).map_err(fail)?)
                }
                "query_timeout"
                | "idle_transaction_timeout"
                | "transaction_timeout"
                | "client_idle_timeout" => Value::Float(parse_seconds(value).map_err(fail)?),
                "query_wait_timeout" => match wait_timeout(value).map_err(fail)? {
                    Some(seconds) => Value::Float(seconds),
                    None => continue,
                },
                _ => {
                    let known = catalogue::USER_HONOURED
                        .iter()
                        .chain(catalogue::USER_UNHONOURED)
                        .copied();
                    let hint = catalogue::suggestion(key, known);
                    return Err(fail(format!(
                        "{} has no such user setting{hint}",
                        catalogue::PGBOUNCER_VERSION
                    )));
                }
            };
            let provenance = Some(Provenance {
                origin: entry.origin.clone(),
                label: Some(label(key)),
            });
            table.set(key, converted, provenance);
            self.honour(format!("[users] {key}"));
        }
        self.document.users.insert(name.to_string(), table);
        Ok(())
    }
}

impl Mapped {
    /// One `[peers]` line: `ID = host=... port=... pool_size=...` (PgBouncer's keys, and
    /// only those).
    fn peer(&mut self, entry: &Entry) -> Result<(), ConfigError> {
        let name = entry.key.as_str();
        let label = |key: &str| format!("[peers] {name}: {key}");
        let pairs = connstr::parse(&entry.value)
            .map_err(|reason| error_at(&entry.origin, &format!("[peers] {name}"), reason))?;
        let mut table = Table {
            header: Some(Provenance {
                origin: entry.origin.clone(),
                label: Some(format!("[peers] {name}")),
            }),
            entries: Vec::new(),
        };
        for (key, value) in &pairs {
            let fail = |reason: String| error_at(&entry.origin, &label(key), reason);
            let converted = match key.as_str() {
                "host" => Value::String(value.clone()),
                "port" => Value::Integer(parse_port(value).map_err(fail)?.into()),
                "pool_size" => Value::Integer(parse_count(value).map_err(fail)?),
                _ => {
                    return Err(fail(format!(
                        "{} has no such peer setting (host, port, pool_size)",
                        catalogue::PGBOUNCER_VERSION
                    )));
                }
            };
            let provenance = Some(Provenance {
                origin: entry.origin.clone(),
                label: Some(label(key)),
            });
            table.set(key, converted, provenance);
        }
        self.honour("[peers]".to_string());
        self.document.peers.insert(name.to_string(), table);
        Ok(())
    }
}

/// The server keys of an entry: `host` (one host, or PgBouncer's comma-separated host list,
/// kept as written) and `port`.
fn servers(
    host: Option<&str>,
    port: Option<u16>,
    socket_dir: Option<&str>,
) -> Result<Vec<(&'static str, Value)>, String> {
    let host = match host.map(str::trim) {
        Some(host) if !host.is_empty() => host.to_string(),
        // PgBouncer: no host means the server's Unix socket in unix_socket_dir.
        _ => match socket_dir {
            Some(dir) => dir.to_string(),
            None => {
                return Err(
                    "no host is set and unix_socket_dir is empty: there is no socket \
                     directory to reach the server in; set host="
                        .to_string(),
                );
            }
        },
    };
    if let Some(abstract_socket) = host.split(',').map(str::trim).find(|h| h.starts_with('@')) {
        return Err(format!(
            "{abstract_socket} is a Unix socket in the abstract namespace, which pgtier does \
             not support"
        ));
    }
    let mut keys = vec![("host", Value::String(host))];
    if let Some(port) = port {
        keys.push(("port", Value::Integer(port.into())));
    }
    Ok(keys)
}

/// `pool_mode` as pgtier spells it (PgBouncer compares the word without case); the value
/// itself is checked by the one validator, as in the TOML file.
fn pool_mode(value: &str) -> Result<String, String> {
    Ok(value.to_ascii_lowercase())
}

/// A `query_wait_timeout` of `[databases]` or `[users]`: seconds, or -1 for "not set" (the
/// next level's value applies), as PgBouncer reads it.
fn wait_timeout(value: &str) -> Result<Option<f64>, String> {
    if value.trim() == "-1" {
        return Ok(None);
    }
    parse_seconds(value)
        .map(Some)
        .map_err(|reason| format!("{reason}, or -1 for not set"))
}

/// `load_balance_hosts`: PgBouncer's two values, in any case.
fn load_balance_hosts(value: &str) -> Result<String, String> {
    let lowered = value.to_ascii_lowercase();
    match lowered.as_str() {
        "round-robin" | "disable" => Ok(lowered),
        _ => Err(format!(
            "invalid load_balance_hosts \"{value}\": PgBouncer accepts round-robin or disable"
        )),
    }
}

/// Text settings whose spelling PgBouncer compares without case, and the values pgtier
/// refuses outright.
fn text_setting(key: &str, value: &str) -> Result<String, String> {
    match key {
        "pool_mode" => pool_mode(value),
        "auth_type" => {
            let method = value.to_ascii_lowercase();
            if method == "pam" {
                return Err(
                    "pgtier has no PAM support: use md5, scram-sha-256, plain, cert, hba or trust"
                        .to_string(),
                );
            }
            Ok(method)
        }
        "client_tls_sslmode" | "server_tls_sslmode" => Ok(value.to_ascii_lowercase()),
        _ => Ok(value.to_string()),
    }
}

/// A path as written if absolute, `~/...` in the home directory (PgBouncer expands a leading
/// tilde), else relative to the directory of the file it is in (made absolute, so nothing
/// later resolves it a second time) — unless the file exists only in the working
/// directory, where PgBouncer, which opens the path as written, would find it.
fn path_value(origin: &Origin, value: &str) -> Value {
    let home = std::env::var_os("HOME");
    let expanded = match (value.strip_prefix('~'), &home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            format!("{}{rest}", Path::new(home).display())
        }
        _ => value.to_string(),
    };
    let path = Path::new(&expanded);
    let resolved = if path.is_absolute() {
        path.to_path_buf()
    } else {
        let directory = origin.file.parent().unwrap_or(Path::new(""));
        let beside = directory.join(path);
        let from_cwd = std::path::absolute(path).ok();
        match from_cwd {
            Some(from_cwd) if !beside.exists() && from_cwd.exists() => from_cwd,
            _ => std::path::absolute(&beside).unwrap_or(beside),
        }
    };
    Value::String(resolved.to_string_lossy().into_owned())
}

fn parse_count(value: &str) -> Result<i64, String> {
    value
        .parse::<u32>()
        .map(i64::from)
        .map_err(|_| format!("\"{value}\" is not a whole number from 0 to {}", u32::MAX))
}

fn parse_port(value: &str) -> Result<u16, String> {
    match value.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("\"{value}\" is not a port number (1 to 65535)")),
    }
}

/// An integer as C's strtol reads it with base 0 (how PgBouncer reads `unix_socket_mode`):
/// `0x` hexadecimal, a leading `0` octal, else decimal.
fn parse_c_integer(value: &str) -> Result<i64, String> {
    let parsed = if let Some(hex) = value.strip_prefix("0x").or(value.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16)
    } else if value.len() > 1 && value.starts_with('0') {
        u32::from_str_radix(&value[1..], 8)
    } else {
        value.parse::<u32>()
    };
    parsed
        .map(i64::from)
        .map_err(|_| format!("\"{value}\" is not a number (write a mode in octal, e.g. 0777)"))
}

fn parse_seconds(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => Ok(seconds),
        _ => Err(format!("\"{value}\" is not a number of seconds >= 0")),
    }
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "yes" | "on" | "true" => Ok(true),
        "0" | "no" | "off" | "false" => Ok(false),
        _ => Err(format!(
            "\"{value}\" is not a boolean: write 0/1, yes/no, on/off or true/false"
        )),
    }
}

/// `a, b ,c` into ["a", "b", "c"].
fn list(value: &str) -> Vec<Value> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| Value::String(item.to_string()))
        .collect()
}
