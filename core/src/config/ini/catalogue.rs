//! Every key PgBouncer 1.25 accepts, by section, and what pgtier does with it: honoured
//! (read into the `Settings` field of the same name, with its value type) or unhonoured (a
//! valid PgBouncer key pgtier does not act on: reported, never fatal). A key in neither list
//! is one PgBouncer 1.25 does not have (a misspelling, or a key of another version), reported
//! with the closest known key. The lists follow PgBouncer 1.25's `src/main.c` (`[pgbouncer]`),
//! `src/loader.c` (`[databases]`, `[users]`) and `doc/config.md`.

/// How an honoured `[pgbouncer]` value is written and converted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// Text as written (an empty value is the empty string).
    Text,
    /// Text; an empty value means "not set".
    OptionalText,
    /// A file or directory; relative to the file it is written in; empty = not set.
    Path,
    /// A non-negative integer that fits in u32.
    Count,
    /// A TCP port.
    Port,
    /// An octal file mode (`0777`).
    Mode,
    /// Seconds, fractions allowed.
    Seconds,
    /// 0/1, yes/no, on/off, true/false.
    Bool,
    /// A comma-separated list.
    List,
    /// `verbose = N`, which becomes pgtier's `log_level`.
    Verbosity,
}

/// What pgtier does with a `[pgbouncer]` key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Treatment {
    Honoured(Kind),
    Unhonoured,
}

use Kind::*;
use Treatment::{Honoured, Unhonoured};

/// The PgBouncer version whose keys these are, for the messages that name it.
pub(super) const PGBOUNCER_VERSION: &str = "PgBouncer 1.25";

/// `[pgbouncer]`: PgBouncer 1.25's settings.
pub(super) const PGBOUNCER_KEYS: &[(&str, Treatment)] = &[
    ("logfile", Honoured(Path)),
    ("pidfile", Honoured(Path)),
    ("listen_addr", Honoured(Text)),
    ("listen_port", Honoured(Port)),
    ("unix_socket_dir", Honoured(Path)),
    ("unix_socket_mode", Honoured(Mode)),
    ("unix_socket_group", Honoured(OptionalText)),
    ("user", Honoured(OptionalText)),
    ("pool_mode", Honoured(Text)),
    ("max_client_conn", Honoured(Count)),
    ("default_pool_size", Honoured(Count)),
    ("min_pool_size", Honoured(Count)),
    ("reserve_pool_size", Honoured(Count)),
    ("reserve_pool_timeout", Honoured(Seconds)),
    ("max_db_connections", Honoured(Count)),
    ("max_db_client_connections", Honoured(Count)),
    ("max_user_connections", Honoured(Count)),
    ("max_user_client_connections", Honoured(Count)),
    ("server_round_robin", Unhonoured),
    // pgtier's tracked set is fixed (client_encoding, datestyle, timezone,
    // standard_conforming_strings, application_name, IntervalStyle): accepted and reported.
    ("track_extra_parameters", Honoured(List)),
    ("ignore_startup_parameters", Honoured(List)),
    // Peering (1.19): cancel keys carry it, and `[peers]` says where to forward them.
    ("peer_id", Honoured(Count)),
    ("disable_pqexec", Unhonoured),
    ("application_name_add_host", Unhonoured),
    ("conffile", Unhonoured),
    ("service_name", Unhonoured),
    ("job_name", Unhonoured),
    ("stats_period", Honoured(Seconds)),
    ("scram_iterations", Unhonoured),
    ("auth_type", Honoured(Text)),
    ("auth_hba_file", Honoured(Path)),
    ("auth_ident_file", Honoured(Path)),
    ("auth_file", Honoured(Path)),
    ("auth_user", Honoured(OptionalText)),
    ("auth_query", Honoured(Text)),
    ("auth_dbname", Honoured(OptionalText)),
    ("auth_ldap_options", Unhonoured),
    ("syslog", Honoured(Bool)),
    ("syslog_ident", Honoured(Text)),
    ("syslog_facility", Honoured(Text)),
    ("log_connections", Honoured(Bool)),
    ("log_disconnections", Unhonoured),
    ("log_pooler_errors", Unhonoured),
    ("log_stats", Unhonoured),
    ("verbose", Honoured(Verbosity)),
    ("admin_users", Honoured(List)),
    ("stats_users", Honoured(List)),
    ("server_reset_query", Honoured(Text)),
    ("server_reset_query_always", Honoured(Bool)),
    ("server_check_delay", Honoured(Seconds)),
    ("server_check_query", Honoured(Text)),
    ("server_fast_close", Honoured(Bool)),
    ("server_lifetime", Honoured(Seconds)),
    ("server_idle_timeout", Honoured(Seconds)),
    ("server_connect_timeout", Honoured(Seconds)),
    ("server_login_retry", Honoured(Seconds)),
    ("client_login_timeout", Honoured(Seconds)),
    ("autodb_idle_timeout", Unhonoured),
    ("pool_idle_timeout", Honoured(Seconds)),
    ("dns_max_ttl", Unhonoured),
    ("dns_nxdomain_ttl", Unhonoured),
    ("dns_zone_check_period", Unhonoured),
    ("resolv_conf", Unhonoured),
    ("query_wait_notify", Honoured(Seconds)),
    ("login_notify_message", Honoured(Text)),
    ("client_tls_sslmode", Honoured(Text)),
    ("client_tls_key_file", Honoured(Path)),
    ("client_tls_cert_file", Honoured(Path)),
    ("client_tls_ca_file", Honoured(Path)),
    ("client_tls_protocols", Honoured(Text)),
    ("client_tls_ciphers", Honoured(Text)),
    ("client_tls13_ciphers", Honoured(Text)),
    ("client_tls_ecdhcurve", Unhonoured),
    ("client_tls_dheparams", Unhonoured),
    ("server_tls_sslmode", Honoured(Text)),
    ("server_tls_ca_file", Honoured(Path)),
    ("server_tls_key_file", Honoured(Path)),
    ("server_tls_cert_file", Honoured(Path)),
    ("server_tls_protocols", Honoured(Text)),
    ("server_tls_ciphers", Honoured(Text)),
    ("server_tls13_ciphers", Honoured(Text)),
    ("query_timeout", Honoured(Seconds)),
    ("query_wait_timeout", Honoured(Seconds)),
    ("cancel_wait_timeout", Unhonoured),
    ("client_idle_timeout", Honoured(Seconds)),
    ("idle_transaction_timeout", Honoured(Seconds)),
    ("transaction_timeout", Honoured(Seconds)),
    ("suspend_timeout", Unhonoured),
    ("pkt_buf", Unhonoured),
    ("max_packet_size", Unhonoured),
    ("listen_backlog", Unhonoured),
    ("sbuf_loopcnt", Unhonoured),
    ("so_reuseport", Honoured(Bool)),
    ("tcp_defer_accept", Unhonoured),
    ("tcp_socket_buffer", Unhonoured),
    ("tcp_keepalive", Unhonoured),
    ("tcp_keepcnt", Unhonoured),
    ("tcp_keepidle", Unhonoured),
    ("tcp_keepintvl", Unhonoured),
    ("tcp_user_timeout", Unhonoured),
    ("max_prepared_statements", Honoured(Count)),
];

/// Keys of a `[databases]` connection string that pgtier acts on (`reserve_pool` is
/// PgBouncer's older spelling of `reserve_pool_size`, still accepted).
pub(super) const DATABASE_HONOURED: &[&str] = &[
    "dbname",
    "host",
    "port",
    "user",
    "password",
    "auth_user",
    "auth_query",
    "auth_dbname",
    "connect_query",
    "pool_size",
    "min_pool_size",
    "reserve_pool",
    "reserve_pool_size",
    "pool_mode",
    "query_wait_timeout",
    "max_db_connections",
    "max_db_client_connections",
    "server_lifetime",
    "load_balance_hosts",
    "client_encoding",
    "datestyle",
    "timezone",
    "application_name",
];

/// Keys of a `[databases]` connection string that PgBouncer knows and pgtier does not act on.
pub(super) const DATABASE_UNHONOURED: &[&str] = &[];

/// Keys of a `[users]` value that pgtier acts on.
pub(super) const USER_HONOURED: &[&str] = &[
    "pool_mode",
    "pool_size",
    "reserve_pool_size",
    "max_user_connections",
    "max_user_client_connections",
    "query_timeout",
    "query_wait_timeout",
    "idle_transaction_timeout",
    "transaction_timeout",
    "client_idle_timeout",
];

/// Keys of a `[users]` value that PgBouncer knows and pgtier does not act on.
pub(super) const USER_UNHONOURED: &[&str] = &[];

/// What pgtier does with the `[pgbouncer]` key `key` (already lowercased), if PgBouncer has it.
pub(super) fn pgbouncer_key(key: &str) -> Option<Treatment> {
    PGBOUNCER_KEYS
        .iter()
        .find(|(name, _)| *name == key)
        .map(|(_, treatment)| *treatment)
}

/// " (did you mean `x`?)" when a known key is within a small edit distance of `key`.
pub(super) fn suggestion<'a>(key: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let best = known
        .into_iter()
        .map(|candidate| (edit_distance(key, candidate), candidate))
        .min();
    match best {
        Some((distance, candidate)) if distance <= 2.max(key.len() / 4) => {
            format!(" (did you mean \"{candidate}\"?)")
        }
        _ => String::new(),
    }
}

/// Levenshtein distance over bytes (keys are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_keys_only() {
        let keys = PGBOUNCER_KEYS.iter().map(|(name, _)| *name);
        assert_eq!(
            suggestion("defualt_pool_size", keys.clone()),
            " (did you mean \"default_pool_size\"?)"
        );
        assert_eq!(suggestion("completely_unrelated", keys), "");
    }

    #[test]
    fn no_key_is_listed_twice() {
        for (index, (name, _)) in PGBOUNCER_KEYS.iter().enumerate() {
            assert!(
                PGBOUNCER_KEYS[index + 1..]
                    .iter()
                    .all(|(other, _)| other != name),
                "{name}"
            );
        }
    }
}
