//! Parsing of PgBouncer's process-controlling admin commands (PAUSE, RESUME, RECONNECT,
//! KILL, KILL_CLIENT, SUSPEND, SHUTDOWN [WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS], WAIT_CLOSE,
//! ENABLE, DISABLE, RELOAD, SET key = value) into what the engine runs, with PgBouncer's
//! rights check (`admin_users` only) and its error texts. `SET` is applied here to a copy of
//! the settings, for the keys a reload can change at runtime.

use std::sync::Arc;

use pgtier_core::config::{ADMIN_DATABASE, Config, Seconds, Settings};
use pgtier_engine::ShutdownMode;
use pgtier_engine::gates::{AdminOp, AdminRequest, Scope};
use pgtier_engine::services::Refusal;
use pgtier_wire::sqlstate;

use super::format::{ConnKind, parse_ptr};

/// The other name of the admin database, as PgBouncer's users type it.
const PGBOUNCER_DATABASE: &str = "pgbouncer";

/// What a process-controlling statement became, before the rights check and the side effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    Op(AdminOp),
    Reload,
    Set { key: String, value: String },
}

/// `None` when `query` is not a process-controlling command (SHOW, or anything the SHOW parser
/// answers); otherwise the parsed command or PgBouncer's refusal.
pub fn parse(query: &str, admin: bool, config: &Config) -> Option<Result<Parsed, Refusal>> {
    let statement = query.trim().trim_end_matches(';').trim();
    let (verb, rest) = split_word(statement);
    let verb = verb.to_ascii_uppercase();
    if !VERBS.contains(&verb.as_str()) {
        return None;
    }
    let invalid = || refusal(&format!("invalid command '{statement}', use SHOW HELP;"));
    if rest.contains(';') {
        return Some(Err(invalid()));
    }
    let arg = rest.trim();
    let parsed = match verb.as_str() {
        "SET" => parse_set(arg).ok_or_else(invalid),
        "RELOAD" if arg.is_empty() => Ok(Parsed::Reload),
        "SUSPEND" if arg.is_empty() => Ok(Parsed::Op(AdminOp::Suspend)),
        "SHUTDOWN" => match arg.to_ascii_uppercase().as_str() {
            "" => Ok(ShutdownMode::Immediate),
            "WAIT_FOR_SERVERS" => Ok(ShutdownMode::WaitForTransactions),
            "WAIT_FOR_CLIENTS" => Ok(ShutdownMode::WaitForClients),
            _ => Err(invalid()),
        }
        .map(|mode| Parsed::Op(AdminOp::Shutdown(mode))),
        "KILL_CLIENT" => match parse_ptr(arg) {
            Some(ptr) if ptr.kind == ConnKind::Client => Ok(Parsed::Op(AdminOp::KillClient {
                shard: usize::from(ptr.shard),
                key: (u64::from(ptr.generation) << 32) | u64::from(ptr.index),
            })),
            _ => Err(refusal("invalid client pointer supplied")),
        },
        "PAUSE" | "RESUME" | "RECONNECT" | "WAIT_CLOSE" => {
            database_op(&verb, optional_word(arg), config).map(Parsed::Op)
        }
        "KILL" | "ENABLE" | "DISABLE" => match optional_word(arg) {
            Some(database) => database_op(&verb, Some(database), config).map(Parsed::Op),
            None => Err(refusal("a database is required")),
        },
        _ => Err(invalid()),
    };
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return Some(Err(error)),
    };
    // PgBouncer checks the syntax first, then the rights.
    if !admin {
        return Some(Err(refusal("admin access needed")));
    }
    Some(Ok(parsed))
}

/// Turns a parsed command into the engine's request; RELOAD and SET act here (`reload`
/// asks the process to reread its files).
pub(crate) fn into_request(
    parsed: Parsed,
    config: &Config,
    reload: impl FnOnce() -> Result<(), String>,
) -> Result<AdminRequest, Refusal> {
    match parsed {
        Parsed::Op(op) => Ok(AdminRequest::Op(op)),
        Parsed::Reload => match reload() {
            Ok(()) => Ok(AdminRequest::Reloaded),
            Err(message) => Err(Refusal {
                code: pgtier_wire::SqlState::new(b"F0000"),
                message: format!("RELOAD failed: {message}"),
            }),
        },
        Parsed::Set { key, value } => {
            let settings =
                set_setting(&config.pgtier, &key, &value).map_err(|message| Refusal {
                    code: sqlstate::PROTOCOL_VIOLATION,
                    message,
                })?;
            let mut config = config.clone();
            config.pgtier = settings;
            Ok(AdminRequest::Set {
                config: Arc::new(config),
                key,
            })
        }
    }
}

/// Every verb this module answers.
const VERBS: [&str; 12] = [
    "PAUSE",
    "RESUME",
    "RECONNECT",
    "WAIT_CLOSE",
    "KILL",
    "KILL_CLIENT",
    "ENABLE",
    "DISABLE",
    "SUSPEND",
    "SHUTDOWN",
    "RELOAD",
    "SET",
];

fn refusal(message: &str) -> Refusal {
    Refusal {
        code: sqlstate::PROTOCOL_VIOLATION,
        message: message.to_string(),
    }
}

fn split_word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(|c: char| c.is_ascii_whitespace() || c == ';') {
        Some(end) => (&text[..end], &text[end..]),
        None => (text, ""),
    }
}

/// An optional single database name (PgBouncer's identifiers: unquoted, or in "quotes").
fn optional_word(arg: &str) -> Option<&str> {
    let arg = arg.trim();
    if arg.is_empty() {
        return None;
    }
    Some(
        arg.strip_prefix('"')
            .and_then(|inner| inner.strip_suffix('"'))
            .unwrap_or(arg),
    )
}

fn database_op(verb: &str, database: Option<&str>, config: &Config) -> Result<AdminOp, Refusal> {
    if let Some(name) = database {
        if name.split_ascii_whitespace().count() != 1 {
            return Err(refusal(&format!(
                "invalid command '{verb} {name}', use SHOW HELP;"
            )));
        }
        if name == ADMIN_DATABASE || name == PGBOUNCER_DATABASE {
            let action = verb.to_ascii_lowercase();
            return Err(refusal(&format!("cannot {action} admin db: {name}")));
        }
        if config.database_or_fallback(name).is_none() {
            return Err(refusal(&format!("no such database: {name}")));
        }
    }
    let scope = Scope::of(database);
    Ok(match (verb, database) {
        ("PAUSE", _) => AdminOp::Pause(scope),
        ("RESUME", _) => AdminOp::Resume(scope),
        ("RECONNECT", _) => AdminOp::Reconnect(scope),
        ("WAIT_CLOSE", _) => AdminOp::WaitClose(scope),
        ("KILL", Some(name)) => AdminOp::Kill(name.to_string()),
        ("ENABLE", Some(name)) => AdminOp::Enable(name.to_string()),
        ("DISABLE", Some(name)) => AdminOp::Disable(name.to_string()),
        _ => return Err(refusal("a database is required")),
    })
}

/// `key = value` or `key to value`; the value may be in single quotes.
fn parse_set(arg: &str) -> Option<Parsed> {
    let (key, rest) = match arg.split_once('=') {
        Some((key, rest)) => (key.trim(), rest.trim()),
        None => {
            let (key, rest) = split_word(arg);
            let (to, rest) = split_word(rest);
            if !to.eq_ignore_ascii_case("TO") {
                return None;
            }
            (key.trim(), rest.trim())
        }
    };
    if key.is_empty() || key.contains(char::is_whitespace) || rest.is_empty() {
        return None;
    }
    let value = match rest.strip_prefix('\'') {
        Some(inner) => inner.strip_suffix('\'')?.replace("''", "'"),
        None => rest.to_string(),
    };
    Some(Parsed::Set {
        key: key.to_ascii_lowercase(),
        value,
    })
}

/// The settings with `key` set to `value`, for the keys a running pgtier applies on
/// reload (pool sizes, limits, timeouts, the reset and check queries); others are refused.
pub(crate) fn set_setting(settings: &Settings, key: &str, value: &str) -> Result<Settings, String> {
    let mut next = settings.clone();
    let bad = |what: &str| format!("SET failed: {key} expects {what}, got '{value}'");
    let count = || value.parse::<u32>().map_err(|_| bad("a whole number"));
    let seconds = || {
        value
            .parse::<f64>()
            .ok()
            .and_then(|secs| Seconds::try_from(secs).ok())
            .ok_or_else(|| bad("seconds"))
    };
    let flag = || match value.to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => Ok(true),
        "0" | "off" | "false" | "no" => Ok(false),
        _ => Err(bad("a boolean")),
    };
    match key {
        "max_client_conn" => next.max_client_conn = count()?,
        "default_pool_size" => next.default_pool_size = count()?,
        "min_pool_size" => next.min_pool_size = count()?,
        "reserve_pool_size" => next.reserve_pool_size = count()?,
        "max_db_connections" => next.max_db_connections = count()?,
        "max_user_connections" => next.max_user_connections = count()?,
        "max_prepared_statements" => next.max_prepared_statements = count()?,
        "reserve_pool_timeout" => next.reserve_pool_timeout = seconds()?,
        "server_connect_timeout" => next.server_connect_timeout = seconds()?,
        "server_login_retry" => next.server_login_retry = seconds()?,
        "server_idle_timeout" => next.server_idle_timeout = seconds()?,
        "server_lifetime" => next.server_lifetime = seconds()?,
        "query_wait_timeout" => next.query_wait_timeout = seconds()?,
        "client_idle_timeout" => next.client_idle_timeout = seconds()?,
        "idle_transaction_timeout" => next.idle_transaction_timeout = seconds()?,
        "query_timeout" => next.query_timeout = seconds()?,
        "client_login_timeout" => next.client_login_timeout = seconds()?,
        "server_check_delay" => next.server_check_delay = seconds()?,
        "server_reset_query" => next.server_reset_query = value.to_string(),
        "server_check_query" => next.server_check_query = value.to_string(),
        "server_reset_query_always" => next.server_reset_query_always = flag()?,
        "cancel_on_client_disconnect" => next.cancel_on_client_disconnect = flag()?,
        _ => {
            return Err(format!(
                "SET failed: {key} cannot be changed at runtime (edit the file and RELOAD, \
                 or restart for settings that need it)"
            ));
        }
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let text = "[pgtier]\nauth_type = \"trust\"\n\n[databases.app]\nhost = \"127.0.0.1\"\n";
        Config::from_str(text, "/tmp/pgtier-operations.toml").expect("valid config")
    }

    fn run(query: &str) -> Option<Result<Parsed, Refusal>> {
        parse(query, true, &config())
    }

    fn refused(query: &str) -> String {
        match run(query) {
            Some(Err(refusal)) => refusal.message,
            other => panic!("{query}: {other:?}"),
        }
    }

    #[test]
    fn show_and_other_statements_are_not_process_commands() {
        assert_eq!(run("SHOW POOLS"), None);
        assert_eq!(run("select 1"), None);
    }

    #[test]
    fn database_commands_take_an_optional_or_required_database() {
        assert_eq!(
            run("pause"),
            Some(Ok(Parsed::Op(AdminOp::Pause(Scope::All))))
        );
        assert_eq!(
            run("PAUSE app;"),
            Some(Ok(Parsed::Op(AdminOp::Pause(Scope::of(Some("app"))))))
        );
        assert_eq!(
            run("kill app"),
            Some(Ok(Parsed::Op(AdminOp::Kill("app".into()))))
        );
        assert_eq!(refused("KILL"), "a database is required");
        assert_eq!(refused("DISABLE"), "a database is required");
        assert_eq!(refused("PAUSE nosuch"), "no such database: nosuch");
        assert_eq!(
            refused("PAUSE pgbouncer"),
            "cannot pause admin db: pgbouncer"
        );
    }

    #[test]
    fn only_admins_run_them_and_syntax_comes_first() {
        let refusal = parse("PAUSE", false, &config());
        assert!(
            matches!(refusal, Some(Err(r)) if r.message == "admin access needed"
            && r.code == sqlstate::PROTOCOL_VIOLATION)
        );
        let syntax = parse("SHUTDOWN NOW", false, &config());
        assert!(matches!(syntax, Some(Err(r)) if r.message.starts_with("invalid command")));
    }

    #[test]
    fn shutdown_modes() {
        for (text, mode) in [
            ("SHUTDOWN", ShutdownMode::Immediate),
            (
                "shutdown wait_for_servers",
                ShutdownMode::WaitForTransactions,
            ),
            ("SHUTDOWN WAIT_FOR_CLIENTS", ShutdownMode::WaitForClients),
        ] {
            assert_eq!(run(text), Some(Ok(Parsed::Op(AdminOp::Shutdown(mode)))));
        }
    }

    #[test]
    fn suspend_parses_and_takes_no_argument() {
        assert_eq!(run("SUSPEND"), Some(Ok(Parsed::Op(AdminOp::Suspend))));
        assert!(refused("SUSPEND now").starts_with("invalid command"));
    }

    #[test]
    fn several_statements_are_invalid() {
        assert!(refused("PAUSE; PAUSE").starts_with("invalid command"));
    }

    #[test]
    fn set_parses_and_applies_runtime_keys_only() {
        assert_eq!(
            run("SET default_pool_size = 7"),
            Some(Ok(Parsed::Set {
                key: "default_pool_size".into(),
                value: "7".into()
            }))
        );
        assert_eq!(
            run("set server_check_query to 'select ''2'''"),
            Some(Ok(Parsed::Set {
                key: "server_check_query".into(),
                value: "select '2'".into()
            }))
        );
        let settings = config().pgtier;
        let next = set_setting(&settings, "default_pool_size", "7").expect("runtime key");
        assert_eq!(next.default_pool_size, 7);
        let next = set_setting(&settings, "query_wait_timeout", "2.5").expect("seconds");
        assert_eq!(next.query_wait_timeout.as_secs_f64(), 2.5);
        assert!(set_setting(&settings, "listen_port", "5").is_err());
        assert!(set_setting(&settings, "default_pool_size", "many").is_err());
        assert!(refused("SET nonsense").starts_with("invalid command"));
    }

    #[test]
    fn kill_client_takes_a_pointer() {
        assert_eq!(
            run("KILL_CLIENT 0x300010000002a"),
            Some(Ok(Parsed::Op(AdminOp::KillClient {
                shard: 3,
                key: 0x1_0000_002a
            })))
        );
        assert_eq!(refused("KILL_CLIENT zz"), "invalid client pointer supplied");
    }
}
