//! Parsing of admin-console statements: the `SHOW` commands pgtier answers, recognized
//! case-insensitively, with everything else turned into a precise error.

use core::fmt;

/// A recognized admin command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AdminCommand {
    /// `SHOW REPLICAS`: role, sessions and health of every replica.
    Replicas,
    /// `SHOW ROUTERS`: strategy, layout generation and admission counters per replica set.
    Routers,
    /// `SHOW FLEET`: the hosts sharing this one's PLB view, the leader, the table version.
    Fleet,
    /// `SHOW READERS`: per reader entry, the primary's WAL position and read counters.
    Readers,
    /// `SHOW ROLE_EVENTS`: recent borrows and returns.
    RoleEvents,
    /// `SHOW EVENTS`: Down/Rejoin and the repair steps they caused.
    Events,
    /// `SHOW CLASS_STATS`: per-class completed queries and latency percentiles.
    ClassStats,
    /// `SHOW STATS`: PgBouncer's per-database totals and averages.
    Stats,
    /// `SHOW STATS_TOTALS`: PgBouncer's per-database totals.
    StatsTotals,
    /// `SHOW STATS_AVERAGES`: PgBouncer's per-database averages.
    StatsAverages,
    /// `SHOW TOTALS`: PgBouncer's totals and averages over every database.
    Totals,
    /// `SHOW QUERIES`: the query digests with the most total time.
    Queries,
    /// `SHOW CLIENTS`: PgBouncer's columns, one row per client on every shard.
    Clients,
    /// `SHOW SERVERS`: PgBouncer's columns, one row per server on every shard.
    Servers,
    /// `SHOW POOLS`: PgBouncer's columns, one row per (database, user) across shards.
    Pools,
    /// `SHOW DATABASES`: the configured entries.
    Databases,
    /// `SHOW USERS`.
    Users,
    /// `SHOW LISTS`: counts of databases, users, pools, clients, servers.
    Lists,
    /// `SHOW CONFIG`: every setting with its value and default.
    Config,
    /// `SHOW MEM`: PgBouncer's memory caches (pgtier has none: no rows).
    Mem,
    /// `SHOW FDS`: sockets for PgBouncer's online restart (pgtier has none: no rows).
    Fds,
    /// `SHOW SOCKETS`: clients and servers with buffer columns.
    Sockets,
    /// `SHOW ACTIVE_SOCKETS`: the active ones of `SHOW SOCKETS`.
    ActiveSockets,
    /// `SHOW PEERS`: the `[peers]` entries cancel requests are forwarded to.
    Peers,
    /// `SHOW PEER_POOLS`: PgBouncer's pools of cancel connections to peers (pgtier has none).
    PeerPools,
    /// `SHOW DNS_HOSTS`.
    DnsHosts,
    /// `SHOW DNS_ZONES`.
    DnsZones,
    /// `SHOW STATE`: active, paused, suspended.
    State,
    /// `SHOW VERSION`.
    Version,
    /// `SHOW HELP`.
    Help,
}

impl AdminCommand {
    /// Every command with its one-line description, for `SHOW HELP`.
    pub const ALL: [(AdminCommand, &'static str); 30] = [
        (
            AdminCommand::Pools,
            "one row per (database, user) pool across shards: clients and servers per state",
        ),
        (
            AdminCommand::Clients,
            "every client connection on every shard",
        ),
        (
            AdminCommand::Servers,
            "every server connection on every shard",
        ),
        (AdminCommand::Databases, "the database entries"),
        (AdminCommand::Users, "the users pgtier knows"),
        (
            AdminCommand::Lists,
            "counts of databases, users, pools, clients, servers",
        ),
        (
            AdminCommand::Config,
            "every setting: value, default, changeable by reload",
        ),
        (
            AdminCommand::Sockets,
            "clients and servers with buffer columns",
        ),
        (AdminCommand::ActiveSockets, "the active sockets"),
        (
            AdminCommand::Peers,
            "the peers cancel requests are forwarded to ([peers])",
        ),
        (
            AdminCommand::PeerPools,
            "PgBouncer's pools of cancel connections to peers (none in pgtier)",
        ),
        (
            AdminCommand::Mem,
            "PgBouncer's memory caches (none in pgtier)",
        ),
        (
            AdminCommand::Fds,
            "PgBouncer's sockets for online restart (none in pgtier)",
        ),
        (
            AdminCommand::DnsHosts,
            "the DNS cache (none kept by pgtier)",
        ),
        (
            AdminCommand::DnsZones,
            "the DNS zones (none kept by pgtier)",
        ),
        (AdminCommand::State, "active, paused, suspended"),
        (
            AdminCommand::Stats,
            "per database: totals since start and averages of the last stats_period",
        ),
        (
            AdminCommand::StatsTotals,
            "per database: totals since start",
        ),
        (
            AdminCommand::StatsAverages,
            "per database: averages of the last stats_period",
        ),
        (
            AdminCommand::Totals,
            "totals and averages over every database",
        ),
        (
            AdminCommand::Queries,
            "per normalized query text: calls, rows, time and errors (the 100 with most time)",
        ),
        (
            AdminCommand::Replicas,
            "role, sessions, health, replay position, lag and reads of every replica",
        ),
        (
            AdminCommand::Routers,
            "strategy, layout generation and admission counters per replica set",
        ),
        (
            AdminCommand::Fleet,
            "the fleet sharing this host's PLB view: members, leader, role-table version, mode",
        ),
        (
            AdminCommand::Readers,
            "per reader entry (primary plus replicas): the primary's WAL position and read counters",
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
            AdminCommand::ClassStats,
            "completed queries and p50/p95 latency per class",
        ),
        (AdminCommand::Version, "the pgtier version"),
        (AdminCommand::Help, "this list"),
    ];

    /// The command reads rows owned by every shard, or statistics every shard counts
    /// (gathered through the mailboxes first: each shard folds its counts when it answers,
    /// so `SHOW STATS` right after a query counts it, as PgBouncer's does).
    pub const fn needs_listing(self) -> bool {
        matches!(
            self,
            AdminCommand::Stats
                | AdminCommand::StatsTotals
                | AdminCommand::StatsAverages
                | AdminCommand::Totals
                | AdminCommand::Clients
                | AdminCommand::Servers
                | AdminCommand::Pools
                | AdminCommand::Databases
                | AdminCommand::Users
                | AdminCommand::Lists
                | AdminCommand::Sockets
                | AdminCommand::ActiveSockets
        )
    }

    /// The word after `SHOW`.
    pub const fn name(self) -> &'static str {
        match self {
            AdminCommand::Replicas => "REPLICAS",
            AdminCommand::Routers => "ROUTERS",
            AdminCommand::Fleet => "FLEET",
            AdminCommand::Readers => "READERS",
            AdminCommand::RoleEvents => "ROLE_EVENTS",
            AdminCommand::Events => "EVENTS",
            AdminCommand::ClassStats => "CLASS_STATS",
            AdminCommand::Stats => "STATS",
            AdminCommand::StatsTotals => "STATS_TOTALS",
            AdminCommand::StatsAverages => "STATS_AVERAGES",
            AdminCommand::Totals => "TOTALS",
            AdminCommand::Queries => "QUERIES",
            AdminCommand::Clients => "CLIENTS",
            AdminCommand::Servers => "SERVERS",
            AdminCommand::Pools => "POOLS",
            AdminCommand::Databases => "DATABASES",
            AdminCommand::Users => "USERS",
            AdminCommand::Lists => "LISTS",
            AdminCommand::Config => "CONFIG",
            AdminCommand::Mem => "MEM",
            AdminCommand::Fds => "FDS",
            AdminCommand::Sockets => "SOCKETS",
            AdminCommand::ActiveSockets => "ACTIVE_SOCKETS",
            AdminCommand::Peers => "PEERS",
            AdminCommand::PeerPools => "PEER_POOLS",
            AdminCommand::DnsHosts => "DNS_HOSTS",
            AdminCommand::DnsZones => "DNS_ZONES",
            AdminCommand::State => "STATE",
            AdminCommand::Version => "VERSION",
            AdminCommand::Help => "HELP",
        }
    }
}

/// PgBouncer's console verbs other than `SHOW`: only `admin_users` may run them, so a
/// `stats_users` member who types one is told "admin access needed", as in PgBouncer.
pub(crate) const ADMIN_VERBS: [&str; 12] = [
    "PAUSE",
    "RESUME",
    "RECONNECT",
    "RELOAD",
    "KILL",
    "KILL_CLIENT",
    "SUSPEND",
    "SHUTDOWN",
    "WAIT_CLOSE",
    "ENABLE",
    "DISABLE",
    "SET",
];

/// Why a statement is not a command we answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum CommandError {
    /// Not `SHOW <word>` (SQLSTATE 42601).
    Syntax(String),
    /// A well-formed statement we do not support (SQLSTATE 0A000).
    Unsupported(String),
    /// A command only `admin_users` may run (SQLSTATE 08P01, PgBouncer's).
    AdminOnly,
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Syntax(text) => write!(f, "syntax error in admin command \"{text}\""),
            CommandError::Unsupported(text) => {
                write!(f, "unsupported admin command \"{text}\"; try SHOW HELP")
            }
            CommandError::AdminOnly => f.write_str("admin access needed"),
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
            parse("SHOW NOTHING"),
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
