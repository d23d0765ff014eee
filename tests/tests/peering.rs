//! Peering (`peer_id`, `[peers]`), end to end: two pgtier processes in front of one
//! PostgreSQL, as two members of a group behind a load balancer. A CancelRequest for a query
//! running through the first that reaches the second is forwarded to the first, which
//! cancels the query; keys carry the issuing peer's id where PgBouncer's do.

use std::io::Write;
use std::time::{Duration, Instant};

use pgtier_tests::ProxyConfig;
use pgtier_tests::fixtures::start_proxy;
use pgtier_tests::rawwire;
use pgtier_tests::shared_server::shared_server;

const TIMEOUT: Duration = Duration::from_secs(20);

#[test]
fn a_cancel_request_reaching_another_peer_is_forwarded_to_the_one_running_the_query() {
    let pg = shared_server();
    let first = start_proxy(ProxyConfig::new(pg.port()).setting("peer_id", "1"));
    let mut config = ProxyConfig::new(pg.port()).setting("peer_id", "2");
    // One [peers] section for the whole group: the entry of the process's own id is ignored.
    config.raw_tables = format!(
        "\n[peers.1]\nhost = \"127.0.0.1\"\nport = {}\n\n[peers.2]\nhost = \"127.0.0.1\"\nport = 1\n",
        first.port()
    );
    let second = start_proxy(config);

    let mut session = rawwire::login(first.port(), "postgres", "postgres", TIMEOUT).expect("login");
    let pid = session.process_id.to_be_bytes();
    assert_eq!((pid[1], pid[2]), (1, 0), "the key carries peer id 1");
    assert_eq!(session.secret_key & 0b11, 0b11, "and a full forwarding TTL");
    // The NOTICE before the sleep is flushed at once: the query surely runs after it.
    let sql = "DO $$BEGIN RAISE NOTICE 'started'; END$$; SELECT pg_sleep(30)";
    session
        .stream
        .write_all(&rawwire::query_message(sql))
        .expect("query");
    session.read_until(b'N').expect("notice before the sleep");
    let started = Instant::now();
    let mut cancel = rawwire::connect(second.port(), TIMEOUT).expect("cancel connection");
    cancel
        .write_all(&rawwire::cancel_message(
            session.process_id,
            session.secret_key,
        ))
        .expect("cancel request");
    let messages = session.read_until(b'E').expect("the query's error");
    let error = messages.last().expect("an error");
    assert_eq!(error.sqlstate().as_deref(), Some("57014"), "{messages:?}");
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "cancelled, not finished: {:?}",
        started.elapsed()
    );
    session.read_until_ready().expect("ready after the error");
    let rows = session
        .simple_query("SELECT 1")
        .expect("the session goes on");
    assert!(rows.iter().all(|m| m.tag != b'E'), "{rows:?}");
}
