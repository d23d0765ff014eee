//! What a client of a reader entry receives, byte for byte, when its transaction's primary
//! goes away: PostgreSQL-shaped FATAL ErrorResponse, then the close, never a bare close.
//! - A switchover (`pg_ctl stop -m fast`, then `pg_ctl promote` of the replica): the
//!   server's own FATAL 57P01, relayed, whether the client was idle in its transaction or
//!   waiting for a statement.
//! - The primary moving under a live server (a replica promoted while the old primary
//!   runs on): pgtier's FATAL 08006 as it closes the server on the old primary.
//!
//! And how tokio-postgres, the fault harness's client, reports the FATAL of a session idle
//! in its transaction: only on its connection task; the next statement fails with
//! "connection closed", unsent. The harness's `Session` (tests/src/faults/session.rs)
//! files that statement under the SQLSTATE that was sent, which this test checks, so
//! docs/reliability.md's ledger names the SQLSTATE instead of a bare "connection closed".

use std::io::Write;
use std::time::Duration;

use pgtier_tests::faults::session::{Failure, Session};
use pgtier_tests::fixtures::start_proxy;
use pgtier_tests::rawwire::{self, Message, RawSession};
use pgtier_tests::{LocalPg, PgOptions, Pgtier, ProxyConfig};

/// A bound on every wait, so a hang fails the test instead of stalling it.
const BOUND: Duration = Duration::from_secs(30);

struct Lab {
    primary: LocalPg,
    replica: LocalPg,
    proxy: Pgtier,
}

fn lab() -> Lab {
    let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
    let replica = LocalPg::start_replica(&primary).expect("replica");
    primary
        .psql("postgres", "CREATE TABLE t(id int)")
        .expect("table");
    let config = ProxyConfig::new(primary.port())
        .reader_database("app", primary.port(), &[replica.port()], "postgres")
        .setting("health_check_user", "\"postgres\"")
        .pool_size(8);
    let proxy = start_proxy(config);
    Lab {
        primary,
        replica,
        proxy,
    }
}

/// A raw session idle in a transaction that wrote on the primary.
fn idle_in_transaction(port: u16) -> RawSession {
    let mut session = rawwire::login(port, "postgres", "app", BOUND).expect("login");
    session.simple_query("BEGIN").expect("BEGIN");
    session
        .simple_query("INSERT INTO t VALUES (1)")
        .expect("INSERT");
    session
}

/// "E FATAL 57P01" for an ErrorResponse, the type letter for anything else.
fn describe(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m.tag {
            b'E' | b'N' => format!(
                "{} {} {}",
                m.tag as char,
                m.field(b'S').unwrap_or_default(),
                m.sqlstate().unwrap_or_default()
            ),
            tag => (tag as char).to_string(),
        })
        .collect()
}

/// Everything `session` receives until pgtier closes it, which it must within `BOUND`.
fn until_closed(session: &mut RawSession) -> Vec<String> {
    let (messages, closed) = rawwire::read_until_closed(&mut session.stream, BOUND);
    let seen = describe(&messages);
    assert!(closed, "not closed within {BOUND:?}; received {seen:?}");
    seen
}

/// A tokio-postgres `Session` idles in a transaction that wrote on the primary while
/// `fault` runs (on a blocking thread); then its next statement must fail. Returns how the
/// session files that failure, and what `fault` returned.
fn tokio_session_through<T: Send + 'static>(
    port: u16,
    fault: impl FnOnce() -> T + Send + 'static,
) -> (Failure, T) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(port)
            .user("postgres")
            .dbname("app");
        let session = Session::connect(&config, BOUND).await.expect("connect");
        session.client().simple_query("BEGIN").await.expect("BEGIN");
        session
            .client()
            .simple_query("INSERT INTO t VALUES (2)")
            .await
            .expect("INSERT");
        let faulted = tokio::task::spawn_blocking(fault).await.expect("the fault");
        // The FATAL arrives on the connection task while the session idles; wait for it
        // (bounded), as the load's next statement would come after it.
        let deadline = tokio::time::Instant::now() + BOUND;
        while !session.client().is_closed() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let error = session
            .client()
            .simple_query("COMMIT")
            .await
            .expect_err("COMMIT on a connection pgtier closed");
        assert!(error.is_closed(), "tokio-postgres reports {error}");
        (session.failure(&error), faulted)
    })
}

#[test]
fn a_switchover_ends_transactions_with_postgresqls_fatal_before_the_close() {
    let lab = lab();
    let port = lab.proxy.port();
    let mut idle = idle_in_transaction(port);
    let mut waiting = idle_in_transaction(port);
    waiting
        .stream
        .write_all(&rawwire::query_message("SELECT pg_sleep(60)"))
        .expect("send");
    let Lab {
        primary, replica, ..
    } = lab;
    let (failure, _servers) = tokio_session_through(port, move || {
        primary.stop().expect("pg_ctl stop -m fast");
        replica.promote().expect("pg_ctl promote");
        (primary, replica)
    });
    let idle_saw = until_closed(&mut idle);
    assert_eq!(idle_saw, ["E FATAL 57P01"], "idle in a transaction");
    let waiting_saw = until_closed(&mut waiting);
    assert_eq!(
        waiting_saw.last().map(String::as_str),
        Some("E FATAL 57P01"),
        "waiting for a statement: {waiting_saw:?}"
    );
    assert_eq!(
        failure,
        Failure {
            kind: "57P01 while idle".to_string(),
            sent: false,
            died: true,
        }
    );
}

#[test]
fn a_primary_moving_under_a_live_server_ends_its_transactions_with_08006() {
    let lab = lab();
    let port = lab.proxy.port();
    let mut idle = idle_in_transaction(port);
    let Lab {
        primary, replica, ..
    } = lab;
    let (failure, _servers) = tokio_session_through(port, move || {
        replica.promote().expect("pg_ctl promote");
        (primary, replica)
    });
    assert_eq!(until_closed(&mut idle), ["E FATAL 08006"]);
    assert_eq!(failure.kind, "08006 while idle");
    assert!(!failure.sent);
}
