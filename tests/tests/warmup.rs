//! `min_pool_size` servers opened before any client, seen from PostgreSQL: an entry with a
//! forced `user` has its pool's key at start, so its minimum is open without a client (and
//! two workers open it together, not twice over); a replica that is killed and restarted
//! gets its minimum again once it is back.

use std::time::Duration;

use pgtier_tests::fixtures::{server, start_proxy};
use pgtier_tests::{LocalPg, ProxyConfig, wait};

const WAIT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(50);

/// Client backends of `datname` opened by pgtier's pools (not its health probes, not this
/// query's own).
fn pool_backends(pg: &LocalPg, datname: &str) -> Option<u64> {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{datname}' \
         AND backend_type = 'client backend' AND pid <> pg_backend_pid() \
         AND application_name <> 'pgtier-health'"
    );
    pg.psql("postgres", &sql).ok()?.trim().parse().ok()
}

fn until_backends(pg: &LocalPg, count: u64) -> bool {
    wait::until(WAIT, POLL, || {
        (pool_backends(pg, "postgres") == Some(count)).then_some(())
    })
    .is_some()
}

#[test]
fn a_forced_user_entry_has_its_minimum_open_before_any_client() {
    let pg = server();
    let mut config = ProxyConfig::new(pg.port())
        .pool_size(5)
        .database_setting("user", "\"postgres\"")
        .database_setting("min_pool_size", "2");
    config.workers = 2;
    let proxy = start_proxy(config);
    assert!(
        until_backends(&pg, 2),
        "2 warm servers before any client (seen {:?})\n{}",
        pool_backends(&pg, "postgres"),
        proxy.log()
    );
    // Several housekeeping passes later it is still the minimum, not one per worker.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(pool_backends(&pg, "postgres"), Some(2), "{}", proxy.log());
}

#[test]
fn a_replica_killed_and_restarted_is_warmed_again() {
    let primary = server();
    let replica = match LocalPg::start_replica(&primary) {
        Ok(replica) => replica,
        Err(error) => panic!("starting a replica: {error}"),
    };
    let config = ProxyConfig::new(primary.port())
        .database("ro", replica.port(), "postgres")
        .database_setting("replicas", &format!("[\"127.0.0.1:{}\"]", replica.port()))
        .database_setting("user", "\"postgres\"")
        .database_setting("min_pool_size", "2");
    let proxy = start_proxy(config);
    assert!(
        until_backends(&replica, 2),
        "the replica's pool is warm (seen {:?})\n{}",
        pool_backends(&replica, "postgres"),
        proxy.log()
    );
    if let Err(error) = replica.stop_immediate() {
        panic!("killing the replica: {error}");
    }
    // Down is noticed by the health probes and by the pool's broken connections.
    std::thread::sleep(Duration::from_millis(1000));
    if let Err(error) = replica.start() {
        panic!("restarting the replica: {error}");
    }
    assert!(
        until_backends(&replica, 2),
        "warm again once the replica is back (seen {:?})\n{}",
        pool_backends(&replica, "postgres"),
        proxy.log()
    );
}
