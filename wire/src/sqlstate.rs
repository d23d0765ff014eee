//! SQLSTATE codes the proxy reports or reacts to, as named constants.
//!
//! The proxy invents errors of its own (pool exhausted, bad password, protocol violation) and
//! must label them with the code a PostgreSQL client library expects, so drivers take the same
//! branch they would take against a real server.

use core::fmt;

/// A five-character SQLSTATE code.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlState([u8; 5]);

impl SqlState {
    /// Builds a code from its five ASCII characters.
    pub const fn new(code: &[u8; 5]) -> Self {
        Self(*code)
    }

    /// Parses a code received from a peer; `None` unless it is exactly five ASCII alphanumerics.
    pub fn parse(code: &[u8]) -> Option<Self> {
        let code: [u8; 5] = code.try_into().ok()?;
        code.iter()
            .all(u8::is_ascii_alphanumeric)
            .then_some(Self(code))
    }

    /// The five bytes as sent on the wire.
    pub const fn as_bytes(&self) -> &[u8; 5] {
        &self.0
    }

    /// The code as text, e.g. `"08P01"`.
    pub fn as_str(&self) -> &str {
        // Every constructor admits ASCII only, so this never falls back.
        core::str::from_utf8(&self.0).unwrap_or("XX000")
    }
}

impl fmt::Debug for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SqlState({})", self.as_str())
    }
}

impl fmt::Display for SqlState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub const SUCCESSFUL_COMPLETION: SqlState = SqlState::new(b"00000");
pub const WARNING: SqlState = SqlState::new(b"01000");
pub const CONNECTION_EXCEPTION: SqlState = SqlState::new(b"08000");
pub(crate) const SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION: SqlState = SqlState::new(b"08001");
pub const CONNECTION_DOES_NOT_EXIST: SqlState = SqlState::new(b"08003");
pub const SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION: SqlState = SqlState::new(b"08004");
pub const CONNECTION_FAILURE: SqlState = SqlState::new(b"08006");
pub const PROTOCOL_VIOLATION: SqlState = SqlState::new(b"08P01");
pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState::new(b"0A000");
pub const INVALID_TRANSACTION_STATE: SqlState = SqlState::new(b"25000");
pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState::new(b"25001");
pub const READ_ONLY_SQL_TRANSACTION: SqlState = SqlState::new(b"25006");
pub const NO_ACTIVE_SQL_TRANSACTION: SqlState = SqlState::new(b"25P01");
pub const IN_FAILED_SQL_TRANSACTION: SqlState = SqlState::new(b"25P02");
pub const IDLE_IN_TRANSACTION_SESSION_TIMEOUT: SqlState = SqlState::new(b"25P03");
pub const INVALID_AUTHORIZATION_SPECIFICATION: SqlState = SqlState::new(b"28000");
pub const INVALID_PASSWORD: SqlState = SqlState::new(b"28P01");
pub const INVALID_CATALOG_NAME: SqlState = SqlState::new(b"3D000");
pub const INVALID_SQL_STATEMENT_NAME: SqlState = SqlState::new(b"26000");
pub const DUPLICATE_PREPARED_STATEMENT: SqlState = SqlState::new(b"42P05");
/// A startup parameter with a value PostgreSQL does not take (`replication=maybe`).
pub const INVALID_PARAMETER_VALUE: SqlState = SqlState::new(b"22023");
pub const SYNTAX_ERROR: SqlState = SqlState::new(b"42601");
pub const UNDEFINED_OBJECT: SqlState = SqlState::new(b"42704");
pub const INSUFFICIENT_RESOURCES: SqlState = SqlState::new(b"53000");
pub const OUT_OF_MEMORY: SqlState = SqlState::new(b"53200");
pub const TOO_MANY_CONNECTIONS: SqlState = SqlState::new(b"53300");
pub const CONFIGURATION_LIMIT_EXCEEDED: SqlState = SqlState::new(b"53400");
pub const PROGRAM_LIMIT_EXCEEDED: SqlState = SqlState::new(b"54000");
pub const OPERATOR_INTERVENTION: SqlState = SqlState::new(b"57000");
pub const QUERY_CANCELED: SqlState = SqlState::new(b"57014");
pub const ADMIN_SHUTDOWN: SqlState = SqlState::new(b"57P01");
pub const CRASH_SHUTDOWN: SqlState = SqlState::new(b"57P02");
pub const CANNOT_CONNECT_NOW: SqlState = SqlState::new(b"57P03");
pub const DATABASE_DROPPED: SqlState = SqlState::new(b"57P04");
pub const IDLE_SESSION_TIMEOUT: SqlState = SqlState::new(b"57P05");
pub const INTERNAL_ERROR: SqlState = SqlState::new(b"XX000");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_only_five_alphanumerics() {
        assert_eq!(SqlState::parse(b"08P01"), Some(PROTOCOL_VIOLATION));
        assert_eq!(SqlState::parse(b"08P0"), None);
        assert_eq!(SqlState::parse(b"08P0\0"), None);
        assert_eq!(PROTOCOL_VIOLATION.to_string(), "08P01");
    }
}
