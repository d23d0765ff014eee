//! The limits the engine reads from the configuration once per (re)load, so the hot path
//! reads plain fields rather than walking the config.

use std::time::Duration;

use pgtier_core::config::Config;

/// Longest startup packet accepted (PostgreSQL's own limit).
pub(crate) const MAX_STARTUP_BYTES: u32 = 10_000;

/// Housekeeping period: timeouts are checked at this granularity, as PgBouncer's janitor does.
pub(crate) const HOUSEKEEPING_PERIOD: Duration = Duration::from_millis(250);

/// How long a shard waits for another shard to lend it an idle server before it opens one
/// (`pgtier_pool`'s `borrow.rs`): the answer is one mailbox hop, so this only bounds a shard
/// that is stuck or gone.
pub(crate) const BORROW_WAIT: Duration = Duration::from_millis(100);

/// How long a client closed with an error may take to receive it before it is cut off.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(5);

/// How long an admin session waits for the other shards' rows.
pub(crate) const LISTING_WAIT: Duration = Duration::from_secs(1);

/// How long a server may take to finish with a client that left (drain, rollback, reset)
/// when `server_connect_timeout` is off.
pub(crate) const DEFAULT_DRAIN_LIMIT: Duration = Duration::from_secs(15);

/// Largest message accepted from a server that is idle in its pool (they are tiny notices).
pub(crate) const MAX_IDLE_MESSAGE_BYTES: usize = 1 << 20;

/// Limits read from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_client_message_bytes: u32,
    pub max_server_message_bytes: usize,
    /// Bytes queued toward one client before its server's output is paused.
    pub client_buffer_limit_bytes: usize,
    /// Client input held (a pipeline waiting for a server) before the client is paused.
    pub client_input_limit_bytes: usize,
    /// Client spellings of tracked parameters one pool remembers.
    pub max_spellings_per_pool: usize,
    pub max_pools_per_worker: usize,
    /// Statements one transaction-mode server keeps (`max_prepared_statements`); 0: named
    /// statements are not rewritten, and a client that makes one is pinned to its server.
    pub max_prepared_statements: usize,
    /// Names and definitions one client's statements may hold.
    pub max_client_prepared_bytes: usize,
    /// Session state pins a transaction-mode client to its server (`pin_session_state`).
    pub pin_session_state: bool,
}

impl Limits {
    pub fn from_config(config: &Config) -> Limits {
        let s = &config.pgtier;
        let client_buffer_limit_bytes = (s.client_buffer_limit_bytes as usize).max(4096);
        Limits {
            max_client_message_bytes: s.max_client_message_bytes,
            max_server_message_bytes: s.max_server_message_bytes as usize,
            client_buffer_limit_bytes,
            client_input_limit_bytes: client_buffer_limit_bytes,
            max_spellings_per_pool: s.max_spellings_per_pool as usize,
            max_pools_per_worker: (s.max_pools_per_worker as usize).max(1),
            max_prepared_statements: s.max_prepared_statements as usize,
            max_client_prepared_bytes: s.max_client_prepared_bytes as usize,
            pin_session_state: s.pin_session_state,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_follow_the_configuration_with_floors() {
        let text = "[pgtier]\nauth_type = \"trust\"\nmax_pools_per_worker = 7\n";
        let config = Config::from_str(text, "/tmp/limits.toml").expect("config");
        let limits = Limits::from_config(&config);
        assert_eq!(limits.max_pools_per_worker, 7);
        assert!(limits.client_buffer_limit_bytes >= 4096);
        assert_eq!(
            limits.client_input_limit_bytes,
            limits.client_buffer_limit_bytes
        );
        assert_eq!(
            limits.max_client_message_bytes,
            config.pgtier.max_client_message_bytes
        );
    }
}
