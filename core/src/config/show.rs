//! `SHOW CONFIG` as PgBouncer prints it: one row per setting with its current value, its
//! default and whether a reload can change it, rendered from [`Settings`] alone.
//!
//! Values are printed in PgBouncer's spelling where it has one: booleans as `0`/`1`, durations
//! in seconds, lists comma-separated, absent paths and names as the empty string. The console
//! only formats these rows; this is the one place that knows every key.

use std::net::IpAddr;
use std::path::PathBuf;

use super::{ListenAddrs, Settings};

/// One row of `SHOW CONFIG`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRow {
    pub key: &'static str,
    pub value: String,
    pub default: String,
    /// A reload (SIGHUP, `RELOAD`) applies a new value; otherwise a restart is needed.
    pub changeable: bool,
}

/// A setting's value in PgBouncer's spelling.
trait Render {
    fn render(&self) -> String;
}

macro_rules! render_display {
    ($($ty:ty),*) => {
        $(impl Render for $ty {
            fn render(&self) -> String {
                self.to_string()
            }
        })*
    };
}

render_display!(
    u16,
    u32,
    String,
    IpAddr,
    ListenAddrs,
    super::Seconds,
    super::PoolMode,
    super::WaiterPolicy,
    super::AuthType,
    super::SslMode,
    super::TlsProtocols,
    super::TlsCiphers
);

impl Render for bool {
    fn render(&self) -> String {
        if *self { "1" } else { "0" }.to_string()
    }
}

impl Render for Option<PathBuf> {
    fn render(&self) -> String {
        self.as_ref()
            .map(|path| path.display().to_string())
            .unwrap_or_default()
    }
}

impl Render for Option<String> {
    fn render(&self) -> String {
        self.clone().unwrap_or_default()
    }
}

impl Render for Option<usize> {
    fn render(&self) -> String {
        self.map(|n| n.to_string()).unwrap_or_default()
    }
}

impl Render for Vec<String> {
    fn render(&self) -> String {
        self.join(",")
    }
}

/// Octal, as the ini spells a socket mode.
struct Octal(u32);

impl Render for Octal {
    fn render(&self) -> String {
        format!("0{:o}", self.0)
    }
}

/// Every setting of `settings`, sorted by key, with the defaults of `Settings::default()`.
pub fn config_rows(settings: &Settings) -> Vec<ConfigRow> {
    let current = settings;
    let default = Settings::default();
    let mut rows = Vec::with_capacity(96);
    macro_rules! rows {
        ($($key:ident: $changeable:expr),* $(,)?) => {
            $(rows.push(ConfigRow {
                key: stringify!($key),
                value: current.$key.render(),
                default: default.$key.render(),
                changeable: $changeable,
            });)*
        };
    }
    // Keys a reload cannot change: the sockets, the workers and their rings, the process.
    const RESTART: bool = false;
    const RELOAD: bool = true;
    rows!(
        listen_addr: RESTART,
        listen_port: RESTART,
        workers: RESTART,
        unix_socket_dir: RESTART,
        unix_socket_group: RESTART,
        so_reuseport: RESTART,
        peer_id: RELOAD,
        logfile: RELOAD,
        pidfile: RESTART,
        user: RESTART,
        syslog: RELOAD,
        syslog_ident: RELOAD,
        syslog_facility: RELOAD,
        log_connections: RELOAD,
        auth_type: RELOAD,
        auth_hba_file: RELOAD,
        auth_ident_file: RELOAD,
        auth_query: RELOAD,
        auth_user: RELOAD,
        auth_dbname: RELOAD,
        auth_file: RELOAD,
        pool_mode: RELOAD,
        max_client_conn: RELOAD,
        default_pool_size: RELOAD,
        min_pool_size: RELOAD,
        reserve_pool_size: RELOAD,
        reserve_pool_timeout: RELOAD,
        max_db_connections: RELOAD,
        max_db_client_connections: RELOAD,
        max_user_connections: RELOAD,
        max_user_client_connections: RELOAD,
        server_connect_timeout: RELOAD,
        server_login_retry: RELOAD,
        server_idle_timeout: RELOAD,
        pool_idle_timeout: RELOAD,
        server_lifetime: RELOAD,
        query_wait_timeout: RELOAD,
        waiter_policy: RELOAD,
        waiter_aging: RELOAD,
        client_idle_timeout: RELOAD,
        idle_transaction_timeout: RELOAD,
        transaction_timeout: RELOAD,
        query_timeout: RELOAD,
        client_login_timeout: RELOAD,
        auth_failure_delay: RELOAD,
        auth_failure_delay_max_addresses: RELOAD,
        server_reset_query: RELOAD,
        server_reset_query_always: RELOAD,
        server_fast_close: RELOAD,
        server_check_delay: RELOAD,
        server_check_query: RELOAD,
        login_notify_message: RELOAD,
        query_wait_notify: RELOAD,
        max_prepared_statements: RELOAD,
        max_client_prepared_bytes: RELOAD,
        pin_session_state: RELOAD,
        admin_users: RELOAD,
        stats_users: RELOAD,
        ignore_startup_parameters: RELOAD,
        track_extra_parameters: RELOAD,
        forward_startup_options: RELOAD,
        stats_period: RELOAD,
        log_level: RELOAD,
        client_tls_sslmode: RELOAD,
        client_tls_key_file: RELOAD,
        client_tls_cert_file: RELOAD,
        client_tls_ca_file: RELOAD,
        client_tls_protocols: RELOAD,
        client_tls_ciphers: RELOAD,
        client_tls13_ciphers: RELOAD,
        server_tls_sslmode: RELOAD,
        server_tls_ca_file: RELOAD,
        server_tls_key_file: RELOAD,
        server_tls_cert_file: RELOAD,
        server_tls_protocols: RELOAD,
        server_tls_ciphers: RELOAD,
        server_tls13_ciphers: RELOAD,
        max_client_message_bytes: RELOAD,
        max_server_message_bytes: RELOAD,
        send_batch_max_chunks: RELOAD,
        send_budget_bytes: RELOAD,
        client_buffer_limit_bytes: RELOAD,
        recv_buffer_bytes: RESTART,
        recv_buffer_count: RESTART,
        server_recv_buffer_bytes: RELOAD,
        ring_entries: RESTART,
        cancel_on_client_disconnect: RELOAD,
        max_pools_per_worker: RELOAD,
        max_spellings_per_pool: RELOAD,
        counter_flush_queries: RELOAD,
        counter_flush_bytes: RELOAD,
        health_check_interval: RELOAD,
        health_check_timeout: RELOAD,
        health_check_failures: RELOAD,
        health_check_successes: RELOAD,
        health_check_user: RELOAD,
        lsn_poll_interval: RELOAD,
        read_only_functions: RELOAD,
        write_functions: RELOAD,
        repin_idle_sessions: RELOAD,
        read_retries: RELOAD,
        role_events_capacity: RESTART,
        fleet_name: RESTART,
        fleet_report_interval: RESTART,
        fleet_member_timeout: RESTART,
        metrics_addr: RESTART,
        metrics_port: RESTART,
        query_digests: RELOAD,
        digest_max_text_bytes: RELOAD,
        digest_map_capacity: RELOAD,
        digest_store_capacity: RELOAD,
        digest_metrics_top: RELOAD,
    );
    rows.push(ConfigRow {
        key: "unix_socket_mode",
        value: Octal(current.unix_socket_mode).render(),
        default: Octal(default.unix_socket_mode).render(),
        changeable: RESTART,
    });
    rows.sort_by_key(|row| row.key);
    rows
}

/// The `changeable` column's text.
pub fn yes_no(changeable: bool) -> &'static str {
    if changeable { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_sorted_unique_and_render_pgbouncer_spellings() {
        let mut settings = Settings {
            admin_users: vec!["admin".into(), "ops".into()],
            so_reuseport: true,
            ..Settings::default()
        };
        settings.listen_port = 6499;
        let rows = config_rows(&settings);
        let keys: Vec<&str> = rows.iter().map(|row| row.key).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(keys, sorted, "sorted, no key twice");
        let row = |key: &str| rows.iter().find(|row| row.key == key).expect(key).clone();
        assert_eq!(row("admin_users").value, "admin,ops");
        assert_eq!(row("admin_users").default, "");
        assert_eq!(
            (
                row("so_reuseport").value.as_str(),
                row("so_reuseport").default.as_str()
            ),
            ("1", "0")
        );
        assert_eq!(row("listen_port").value, "6499");
        assert!(!row("listen_port").changeable);
        assert_eq!(row("default_pool_size").value, "20");
        assert_eq!(row("query_wait_timeout").value, "120");
        assert_eq!(row("waiter_policy").value, "class");
        assert!(row("waiter_policy").changeable);
        assert_eq!(row("waiter_aging").value, "0.02");
        assert_eq!(row("pool_mode").value, "session");
        assert_eq!(row("unix_socket_mode").value, "0777");
        assert_eq!(row("server_reset_query").value, "DISCARD ALL");
        assert!(row("server_reset_query").changeable);
        assert_eq!(yes_no(true), "yes");
    }
}
