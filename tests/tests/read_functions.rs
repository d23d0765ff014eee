//! Reads that call functions beyond the classifier's allow-list, against a real primary and
//! a real hot standby: pgtier looks each name up once in the primary's `pg_proc` and sends a
//! transaction calling only STABLE or IMMUTABLE functions to the replica; VOLATILE and
//! unknown ones (and `write_functions`) keep it on the primary, `read_only_functions` sends a
//! volatile one to the replica, and a function replaced through pgtier is looked up again.
//!
//! Which server answered is `inet_server_port()` itself (STABLE, not on the allow-list),
//! called in the same text as the function under test.

use std::time::Duration;

use pgtier_tests::fixtures::{admin, start_proxy};
use pgtier_tests::wait;
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

/// A primary and one streaming replica, with the test's functions replicated.
fn cluster() -> (LocalPg, LocalPg) {
    let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
    let replica = LocalPg::start_replica(&primary).expect("replica");
    admin(
        &primary,
        "CREATE SEQUENCE s; \
         CREATE FUNCTION my_stable() RETURNS int LANGUAGE sql STABLE AS 'SELECT 1'; \
         CREATE FUNCTION my_volatile() RETURNS int LANGUAGE sql VOLATILE AS 'SELECT 1'; \
         CREATE FUNCTION forced_write() RETURNS int LANGUAGE sql STABLE AS 'SELECT 1'; \
         CREATE FUNCTION forced_read() RETURNS int LANGUAGE sql VOLATILE AS 'SELECT 1'; \
         CREATE FUNCTION probe_1() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1'; \
         CREATE FUNCTION probe_2() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1'; \
         CREATE FUNCTION probe_3() RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT 1';",
    );
    replica
        .wait_caught_up(&primary, Duration::from_secs(30))
        .expect("replica catches up");
    (primary, replica)
}

fn proxy(primary: &LocalPg, replica: &LocalPg) -> Pgtier {
    let config = ProxyConfig::new(primary.port())
        .reader_database("app", primary.port(), &[replica.port()], "postgres")
        .setting("health_check_user", "\"postgres\"")
        .setting("read_only_functions", "[\"forced_read\"]")
        .setting("write_functions", "[\"forced_write\"]");
    start_proxy(config.pool_size(4))
}

/// The port of the server that ran `sql` (a simple Query whose first column is
/// `inet_server_port()`).
fn port_of(client: &mut postgres::Client, sql: &str) -> u16 {
    let messages = client
        .simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    messages
        .iter()
        .find_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) => row.get(0).and_then(|p| p.parse().ok()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("{sql}: no port"))
}

/// Waits (bounded) until `sql` runs on the server listening on `port`.
fn runs_on_eventually(client: &mut postgres::Client, sql: &str, port: u16) -> bool {
    wait::until(Duration::from_secs(20), Duration::from_millis(20), || {
        (port_of(client, sql) == port).then_some(())
    })
    .is_some()
}

#[test]
fn stable_functions_reach_the_replica_and_volatile_ones_the_primary() {
    let (primary, replica) = cluster();
    let proxy = proxy(&primary, &replica);
    let mut client = proxy.connect("app", "postgres").expect("connect");
    let (primary_port, replica_port) = (primary.port(), replica.port());

    assert!(
        runs_on_eventually(&mut client, "SELECT inet_server_port()", replica_port),
        "a STABLE built-in off the allow-list reaches the replica once looked up"
    );
    assert!(
        runs_on_eventually(
            &mut client,
            "SELECT inet_server_port(), my_stable()",
            replica_port
        ),
        "a user's STABLE function reaches the replica once looked up"
    );
    assert_eq!(
        port_of(&mut client, "SELECT inet_server_port(), forced_read()"),
        replica_port,
        "read_only_functions: a VOLATILE function goes to the replica, with no look-up"
    );

    // Met once each (primary), then a name met later is looked up and answered, so these
    // were looked up too: they still run on the primary.
    let volatile = [
        "SELECT inet_server_port(), nextval('s')",
        "SELECT inet_server_port(), my_volatile()",
        "SELECT inet_server_port(), forced_write()",
    ];
    for sql in volatile {
        assert_eq!(port_of(&mut client, sql), primary_port, "{sql}");
    }
    assert!(runs_on_eventually(
        &mut client,
        "SELECT inet_server_port(), probe_1()",
        replica_port
    ));
    for sql in volatile {
        assert_eq!(port_of(&mut client, sql), primary_port, "{sql}, looked up");
    }
    assert_eq!(
        port_of(&mut client, "SELECT inet_server_port(), my_stable()"),
        replica_port
    );

    // Replaced through pgtier: what was known is forgotten when the DDL commits.
    client
        .batch_execute(
            "CREATE OR REPLACE FUNCTION my_stable() RETURNS int LANGUAGE sql VOLATILE \
             AS 'SELECT 2'",
        )
        .expect("replace");
    assert_eq!(
        port_of(&mut client, "SELECT inet_server_port(), my_stable()"),
        primary_port,
        "a function replaced through pgtier is not known until looked up again"
    );
    assert!(runs_on_eventually(
        &mut client,
        "SELECT inet_server_port(), probe_2()",
        replica_port
    ));
    assert_eq!(
        port_of(&mut client, "SELECT inet_server_port(), my_stable()"),
        primary_port,
        "now VOLATILE on the primary"
    );

    // Made STABLE again, in a transaction block: it is looked up after the COMMIT.
    client
        .batch_execute("BEGIN; ALTER FUNCTION my_stable() STABLE; SELECT probe_3(); COMMIT")
        .expect("alter");
    assert!(
        runs_on_eventually(
            &mut client,
            "SELECT inet_server_port(), my_stable()",
            replica_port
        ),
        "STABLE again after the ALTER committed"
    );
}
