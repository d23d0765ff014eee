//! Parsing of admin-console statements: the `SHOW` commands pgtier answers, recognized
//! case-insensitively, with everything else turned into a precise error.

use core::fmt;

/// A recognized admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminCommand {
    /// `SHOW REPLICAS`: role, sessions and health of every replica.
    Replicas,
    /// `SHOW ROUTERS`: strategy, layout generation and admission counters per replica set.
    Routers,
    /// `SHOW ROLE_EVENTS`: recent borrows and returns.
    RoleEvents,
    /// `SHOW EVENTS`: Down/Rejoin and the repair steps they caused.
    Events,
    /// `SHOW STATS`: per-class completed queries and latency percentiles.
    Stats,
    /// `SHOW CLIENTS`: every client connection on every shard, with class and replica.
    Clients,
    /// `SHOW POOLS`: every pool slice on every shard, with its client and server counts.
    Pools,
    /// `SHOW VERSION`.
    Version,
    /// `SHOW HELP`.
    Help,
}

impl AdminCommand {
    /// Every command with its one-line description, for `SHOW HELP`.
    pub const ALL: [(AdminCommand, &'static str); 9] = [
        (
            AdminCommand::Replicas,
            "role, sessions and health of every replica",
        ),
        (
            AdminCommand::Routers,
            "strategy, layout generation and admission counters per replica set",
        ),
        (
            AdminCommand::RoleEvents,
            "recent borrows and returns of replicas between classes",
        ),
        (
            AdminCommand::Events,
            "replica Down/Rejoin events and the repair steps they caused",
        ),
        (
            AdminCommand::Stats,
            "completed queries and p50/p95 latency per class",
        ),
        (
            AdminCommand::Clients,
            "every client connection: shard, state, class, replica, backend pid",
        ),
        (
            AdminCommand::Pools,
            "every pool per shard: mode, clients active/waiting, servers active/idle/opening",
        ),
        (AdminCommand::Version, "the pgtier version"),
        (AdminCommand::Help, "this list"),
    ];

    /// The command reads rows owned by every shard (gathered through the mailboxes first).
    pub const fn needs_listing(self) -> bool {
        matches!(self, AdminCommand::Clients | AdminCommand::Pools)
    }

    /// The word after `SHOW`.
    pub const fn name(self) -> &'static str {
        match self {
            AdminCommand::Replicas => "REPLICAS",
            AdminCommand::Routers => "ROUTERS",
            AdminCommand::RoleEvents => "ROLE_EVENTS",
            AdminCommand::Events => "EVENTS",
            AdminCommand::Stats => "STATS",
            AdminCommand::Clients => "CLIENTS",
            AdminCommand::Pools => "POOLS",
            AdminCommand::Version => "VERSION",
            AdminCommand::Help => "HELP",
        }
    }
}

/// Why a statement is not a command we answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// Not `SHOW <word>` (SQLSTATE 42601).
    Syntax(String),
    /// A well-formed statement we do not support (SQLSTATE 0A000).
    Unsupported(String),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Syntax(text) => write!(f, "syntax error in admin command \"{text}\""),
            CommandError::Unsupported(text) => {
                write!(f, "unsupported admin command \"{text}\"; try SHOW HELP")
            }
        }
    }
}

/// Longest statement text echoed back in an error, so a huge query cannot make a huge error.
const ECHO_LIMIT_CHARS: usize = 64;

/// Parses one statement (no `;`).
pub fn parse(statement: &str) -> Result<AdminCommand, CommandError> {
    let echo = || {
        statement
            .trim()
            .chars()
            .take(ECHO_LIMIT_CHARS)
            .collect::<String>()
    };
    let mut words = statement.split_ascii_whitespace();
    let verb = words.next().unwrap_or_default();
    if !verb.eq_ignore_ascii_case("SHOW") {
        return Err(CommandError::Unsupported(echo()));
    }
    let (Some(object), None) = (words.next(), words.next()) else {
        return Err(CommandError::Syntax(echo()));
    };
    AdminCommand::ALL
        .iter()
        .map(|(command, _)| *command)
        .find(|command| command.name().eq_ignore_ascii_case(object))
        .ok_or_else(|| CommandError::Unsupported(echo()))
}

/// Splits a simple-query string into its non-empty statements. The admin commands contain no
/// quoted text, so a plain split on `;` is exact for every statement we accept.
pub fn statements(query: &str) -> impl Iterator<Item = &str> {
    query.split(';').filter(|s| !s.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_case_insensitive() {
        assert_eq!(parse("show replicas"), Ok(AdminCommand::Replicas));
        assert_eq!(parse("  SHOW\tRole_Events "), Ok(AdminCommand::RoleEvents));
        for (command, _) in AdminCommand::ALL {
            assert_eq!(parse(&format!("SHOW {}", command.name())), Ok(command));
        }
    }

    #[test]
    fn show_without_object_is_a_syntax_error() {
        assert!(matches!(parse("SHOW"), Err(CommandError::Syntax(_))));
        assert!(matches!(
            parse("SHOW REPLICAS extra"),
            Err(CommandError::Syntax(_))
        ));
    }

    #[test]
    fn other_statements_are_unsupported() {
        assert!(matches!(
            parse("SELECT 1"),
            Err(CommandError::Unsupported(_))
        ));
        assert!(matches!(
            parse("SHOW SERVERS"),
            Err(CommandError::Unsupported(_))
        ));
    }

    #[test]
    fn error_echo_is_bounded() {
        let long = format!("SELECT {}", "x".repeat(10_000));
        let Err(CommandError::Unsupported(echo)) = parse(&long) else {
            panic!("unsupported")
        };
        assert!(echo.len() <= ECHO_LIMIT_CHARS);
    }

    #[test]
    fn statements_skip_empty_parts() {
        let parts: Vec<&str> = statements("SHOW HELP; ;SHOW VERSION;").collect();
        assert_eq!(parts, vec!["SHOW HELP", "SHOW VERSION"]);
    }
}
