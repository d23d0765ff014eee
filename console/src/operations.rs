//! Parsing of PgBouncer's process-controlling admin commands (PAUSE, RESUME, RECONNECT,
//! KILL, KILL_CLIENT, SUSPEND, SHUTDOWN [WAIT_FOR_SERVERS|WAIT_FOR_CLIENTS], WAIT_CLOSE,
//! ENABLE, DISABLE, RELOAD, SET key = value) into what the engine runs, with PgBouncer's
//! rights check (`admin_users` only) and its error texts. RELOAD and SET are carried out by
//! the process (`pgtier_engine::reconfigure`): SET reads its value as the file reader does.

use pgtier_core::config::{ADMIN_DATABASE, Config};
use pgtier_engine::ShutdownMode;
use pgtier_engine::SocketId;
use pgtier_engine::gates::{AdminOp, AdminRequest, ClientRef, Scope};
use pgtier_engine::reconfigure::Change;
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
    Set {
        key: String,
        value: String,
    },
    /// A SET of a client parameter PgBouncer's console pretends to take.
    IgnoredSet,
}

/// The client parameters drivers set on connecting, which PgBouncer's console answers with
/// "SET ignored" (for every user: it does so before the rights check).
const IGNORED_SET_KEYS: [&str; 5] = [
    "client_encoding",
    "default_transaction_isolation",
    "standard_conforming_strings",
    "datestyle",
    "timezone",
];

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
        "KILL_CLIENT" => kill_client_target(arg)
            .map(|target| Parsed::Op(AdminOp::KillClient(target)))
            .ok_or_else(|| refusal("invalid client pointer supplied")),
        "PAUSE" | "RESUME" | "RECONNECT" | "WAIT_CLOSE" | "KILL" => {
            database_op(&verb, optional_word(arg), config).map(Parsed::Op)
        }
        "ENABLE" | "DISABLE" => match optional_word(arg) {
            Some(database) => database_op(&verb, Some(database), config).map(Parsed::Op),
            None => Err(refusal("a database is required")),
        },
        _ => Err(invalid()),
    };
    let parsed = match parsed {
        Ok(Parsed::Set { key, .. }) if IGNORED_SET_KEYS.contains(&key.as_str()) => {
            return Some(Ok(Parsed::IgnoredSet));
        }
        Ok(parsed) => parsed,
        Err(error) => return Some(Err(error)),
    };
    // PgBouncer checks the syntax first, then the rights.
    if !admin {
        return Some(Err(refusal("admin access needed")));
    }
    Some(Ok(parsed))
}

/// Turns a parsed command into the engine's request.
pub(crate) fn into_request(parsed: Parsed) -> AdminRequest {
    match parsed {
        Parsed::Op(op) => AdminRequest::Op(op),
        Parsed::Reload => AdminRequest::Reconfigure(Change::Reload),
        Parsed::Set { key, value } => AdminRequest::Reconfigure(Change::Set { key, value }),
        Parsed::IgnoredSet => AdminRequest::IgnoredSet,
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
        ("KILL", _) => AdminOp::Kill(scope),
        ("ENABLE", Some(name)) => AdminOp::Enable(name.to_string()),
        ("DISABLE", Some(name)) => AdminOp::Disable(name.to_string()),
        _ => return Err(refusal("a database is required")),
    })
}

/// The client `KILL_CLIENT` names: the `id` of SHOW CLIENTS (PgBouncer 1.25), or its `ptr`
/// (what pgtier took before ids).
fn kill_client_target(arg: &str) -> Option<ClientRef> {
    let arg = arg.trim();
    if let Ok(id) = arg.parse::<u64>() {
        return Some(ClientRef::Id(SocketId(id)));
    }
    let ptr = parse_ptr(arg).filter(|ptr| ptr.kind == ConnKind::Client)?;
    Some(ClientRef::Ptr {
        shard: usize::from(ptr.shard),
        key: (u64::from(ptr.generation) << 32) | u64::from(ptr.index),
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
            Some(Ok(Parsed::Op(AdminOp::Kill(Scope::of(Some("app"))))))
        );
        assert_eq!(
            run("KILL"),
            Some(Ok(Parsed::Op(AdminOp::Kill(Scope::All)))),
            "KILL without a database kills every one but the console"
        );
        assert_eq!(refused("KILL pgbouncer"), "cannot kill admin db: pgbouncer");
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
    fn set_parses_key_and_value() {
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
        assert_eq!(
            run("set auth_type='md5'"),
            Some(Ok(Parsed::Set {
                key: "auth_type".into(),
                value: "md5".into()
            }))
        );
        assert!(refused("SET nonsense").starts_with("invalid command"));
    }

    #[test]
    fn client_parameters_are_ignored_for_every_user() {
        assert_eq!(
            parse("SET client_encoding = 'UTF8'", false, &config()),
            Some(Ok(Parsed::IgnoredSet))
        );
        assert_eq!(run("set DateStyle to ISO"), Some(Ok(Parsed::IgnoredSet)));
        assert!(matches!(
            parse("SET default_pool_size = 3", false, &config()),
            Some(Err(refusal)) if refusal.message == "admin access needed"
        ));
    }

    #[test]
    fn kill_client_takes_an_id_or_a_pointer() {
        assert_eq!(
            run("KILL_CLIENT 1234"),
            Some(Ok(Parsed::Op(AdminOp::KillClient(ClientRef::Id(
                SocketId(1234)
            )))))
        );
        assert_eq!(
            run("KILL_CLIENT 0x300010000002a"),
            Some(Ok(Parsed::Op(AdminOp::KillClient(ClientRef::Ptr {
                shard: 3,
                key: 0x1_0000_002a
            }))))
        );
        assert_eq!(refused("KILL_CLIENT zz"), "invalid client pointer supplied");
        assert_eq!(refused("KILL_CLIENT"), "invalid client pointer supplied");
    }
}
