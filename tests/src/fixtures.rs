//! Shared set-ups of the end-to-end tests: a fresh server, psql and pgbench through the
//! proxy, and looks at the server's own view (pg_stat_activity, pg_locks).

use std::process::Command;
use std::time::Duration;

use crate::process::{Finished, pg_tool, run};
use crate::{LocalPg, PgOptions, Pgtier, ProxyConfig};

/// Time limit for one psql invocation.
pub const PSQL_TIMEOUT: Duration = Duration::from_secs(30);
/// Time limit for one pgbench run.
pub const PGBENCH_TIMEOUT: Duration = Duration::from_secs(120);

/// A primary with default options (trust for everyone).
pub fn server() -> LocalPg {
    match LocalPg::start_primary(&PgOptions::default()) {
        Ok(pg) => pg,
        Err(error) => panic!("starting PostgreSQL: {error}"),
    }
}

/// A server and a proxy in front of its `postgres` database, configured by `adjust`.
pub fn server_and_proxy(adjust: impl FnOnce(ProxyConfig) -> ProxyConfig) -> (LocalPg, Pgtier) {
    let pg = server();
    let proxy = start_proxy(adjust(ProxyConfig::new(pg.port())));
    (pg, proxy)
}

/// Starts a proxy or fails the test with its log.
pub fn start_proxy(config: ProxyConfig) -> Pgtier {
    match Pgtier::start(config) {
        Ok(proxy) => proxy,
        Err(error) => panic!("starting pgtier: {error}"),
    }
}

/// Runs SQL on the server directly (superuser), failing the test on error.
pub fn admin(pg: &LocalPg, sql: &str) -> String {
    match pg.psql("postgres", sql) {
        Ok(out) => out,
        Err(error) => panic!("{sql}: {error}"),
    }
}

/// `psql -XAt -c SQL` through the proxy as `postgres`.
pub fn psql_through(proxy: &Pgtier, dbname: &str, sql: &str) -> Finished {
    let mut command = pg_tool("psql");
    command
        .args(["-XAtq", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(proxy.conninfo(dbname, "postgres"))
        .args(["-c", sql]);
    run_or_panic(&mut command, PSQL_TIMEOUT)
}

/// `pgbench -i -s SCALE` directly against the server's `postgres` database.
pub fn pgbench_init(pg: &LocalPg, scale: u32) {
    let mut command = pg_tool("pgbench");
    command
        .args([
            "-i",
            "-q",
            "-s",
            &scale.to_string(),
            "-h",
            "127.0.0.1",
            "-p",
        ])
        .arg(pg.port().to_string())
        .args(["-U", "postgres", "postgres"]);
    let finished = run_or_panic(&mut command, PGBENCH_TIMEOUT);
    assert!(finished.success(), "pgbench -i failed: {finished:?}");
}

/// `pgbench -S -n` through the proxy with the given protocol, clients and transactions per
/// client; returns the finished run.
pub fn pgbench_select_only(
    proxy: &Pgtier,
    protocol: &str,
    clients: u32,
    transactions: u32,
) -> Finished {
    let mut command = pg_tool("pgbench");
    command
        .args([
            "-S",
            "-n",
            "-M",
            protocol,
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-t",
        ])
        .arg(transactions.to_string())
        .args(["-h", "127.0.0.1", "-p"])
        .arg(proxy.port().to_string())
        .args(["-U", "postgres", "postgres"]);
    run_or_panic(&mut command, PGBENCH_TIMEOUT)
}

/// "number of transactions actually processed: N" from pgbench's summary.
pub fn pgbench_processed(output: &str) -> Option<u64> {
    output
        .lines()
        .find_map(|line| line.strip_prefix("number of transactions actually processed: "))
        .and_then(|rest| rest.split('/').next())
        .and_then(|count| count.trim().parse().ok())
}

fn run_or_panic(command: &mut Command, timeout: Duration) -> Finished {
    match run(command, timeout) {
        Ok(finished) => finished,
        Err(error) => panic!("running {command:?}: {error}"),
    }
}

/// Server connections to `datname` other than the one asking, by state (`idle`, `active`,
/// `idle in transaction`, ...), as the server sees them.
pub fn server_sessions(pg: &LocalPg, datname: &str, state: &str) -> u64 {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{datname}' \
         AND state = '{state}' AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    );
    admin(pg, &sql).parse().unwrap_or(u64::MAX)
}

/// All client-backend connections to `datname` except the asking one.
pub fn server_connections(pg: &LocalPg, datname: &str) -> u64 {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{datname}' \
         AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
    );
    admin(pg, &sql).parse().unwrap_or(u64::MAX)
}

/// The SQLSTATE of a rust-postgres error, if the server (or proxy) sent one.
pub fn sqlstate(error: &postgres::Error) -> Option<String> {
    error.code().map(|code| code.code().to_string())
}

/// One row describing the session state a server holds, as seen from the inside: prepared
/// statements (SQL and protocol), settings changed in the session (other than the six
/// parameters a pooler re-applies per client), temp tables, advisory locks, LISTEN channels
/// and open cursors.
pub const LEFTOVER_STATE: &str = "SELECT format(\
    'prepared=%s settings=[%s] temp=%s locks=%s listening=%s cursors=%s', \
    (SELECT count(*) FROM pg_prepared_statements), \
    (SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM pg_settings \
      WHERE source = 'session' AND name NOT IN ('client_encoding', 'DateStyle', 'TimeZone', \
      'IntervalStyle', 'standard_conforming_strings', 'application_name')), \
    (SELECT count(*) FROM pg_class WHERE relnamespace = pg_my_temp_schema()), \
    (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()), \
    (SELECT count(*) FROM pg_listening_channels()), \
    (SELECT count(*) FROM pg_cursors))";

/// What `LEFTOVER_STATE` says of a server no client has changed.
pub const NO_LEFTOVER_STATE: &str = "prepared=0 settings=[] temp=0 locks=0 listening=0 cursors=0";

/// Holds `pool_size` servers of the proxy's `postgres` pool at once (each client inside a
/// transaction, so in transaction mode too each has its own), and checks that none holds
/// state from an earlier client. Waits for servers still finishing with earlier clients,
/// since they count against the pool.
pub fn assert_no_leftover_state(proxy: &Pgtier, pool_size: usize, context: &str) {
    let timeout = Duration::from_secs(30);
    let mut held = Vec::with_capacity(pool_size);
    for _ in 0..pool_size {
        let mut session = crate::rawwire::login(proxy.port(), "postgres", "postgres", timeout)
            .unwrap_or_else(|error| panic!("{context}: login: {error}"));
        let messages = session
            .simple_query(&format!("BEGIN; {LEFTOVER_STATE}"))
            .unwrap_or_else(|error| panic!("{context}: state check: {error}"));
        let state = crate::rawwire::RawSession::first_value(&messages);
        assert_eq!(
            state.as_deref(),
            Some(NO_LEFTOVER_STATE),
            "{context}: a server was handed on with an earlier client's state ({messages:?})"
        );
        held.push(session);
    }
}
