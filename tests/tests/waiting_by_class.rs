//! Waiting by class against real PostgreSQL: with one server held in a transaction, a
//! freemium client and then a premium client queue for it; on COMMIT the premium one runs
//! first (`waiter_policy = "class"`), or the freemium one (`"fifo"`). The order is read from a
//! table the two clients insert into, numbered by a sequence on the server.

use std::time::Duration;

use pgtier_tests::fixtures::start_proxy;
use pgtier_tests::shared_server::shared_server;
use pgtier_tests::{Pgtier, ProxyConfig, wait};

const CONSOLE: &str = "pgtier";
/// Bounds every wait for a condition; a working proxy needs milliseconds.
const BOUND: Duration = Duration::from_secs(20);

/// One server for the entry `postgres`, which logs every client in as `postgres`, so bob
/// (the entry's freemium class) and alice (premium by her user table) share one pool.
fn proxy(policy: &str) -> Pgtier {
    let pg = shared_server();
    let config = ProxyConfig::new(pg.port())
        .database_setting("user", "\"postgres\"")
        .database_setting("class", "\"freemium\"")
        .pool_size(1)
        .setting("waiter_policy", &format!("\"{policy}\""))
        // The premium client parks a few console round trips after the freemium one: an
        // aging longer than any such gap makes the test about the order, not the aging.
        .setting("waiter_aging", "10")
        .setting("admin_users", "[\"postgres\"]")
        .user("alice", "")
        .user("bob", "")
        .user_setting("alice", "class", "\"premium\"");
    start_proxy(config)
}

fn connect(proxy: &Pgtier, user: &str) -> postgres::Client {
    match proxy.connect("postgres", user) {
        Ok(client) => client,
        Err(error) => panic!("{user}: {error}\n{}", proxy.log()),
    }
}

/// Clients waiting for a server of the entry, from SHOW POOLS.
fn waiting(console: &mut postgres::Client) -> u32 {
    let messages = console.simple_query("SHOW POOLS").expect("SHOW POOLS");
    messages
        .iter()
        .filter_map(|message| match message {
            postgres::SimpleQueryMessage::Row(row) if row.get("database") == Some("postgres") => {
                row.get("cl_waiting")
                    .and_then(|count| count.parse::<u32>().ok())
            }
            _ => None,
        })
        .sum()
}

/// Queues `client` behind the held server: it inserts `who` into `table` once it gets one.
fn queue(
    mut client: postgres::Client,
    table: &str,
    who: &str,
) -> std::thread::JoinHandle<Result<(), postgres::Error>> {
    let sql = format!("INSERT INTO {table}(who) VALUES ('{who}')");
    std::thread::spawn(move || client.batch_execute(&sql))
}

/// Who got the server first once the holder committed.
fn order_served(policy: &str) -> Vec<String> {
    let proxy = proxy(policy);
    let table = format!("served_by_{policy}");
    let mut holder = connect(&proxy, "bob");
    holder
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table}; CREATE TABLE {table}(n bigserial, who text)"
        ))
        .expect("table");
    // Logged in before the server is taken (a login may need a server in transaction mode).
    let freemium = connect(&proxy, "bob");
    let premium = connect(&proxy, "alice");
    let mut console = match proxy.connect(CONSOLE, "postgres") {
        Ok(client) => client,
        Err(error) => panic!("console: {error}"),
    };
    holder.batch_execute("BEGIN; SELECT 1").expect("BEGIN");
    let freemium = queue(freemium, &table, "freemium");
    let parked = wait::until(BOUND, Duration::from_millis(10), || {
        (waiting(&mut console) == 1).then_some(())
    });
    assert!(parked.is_some(), "the freemium client never queued");
    let premium = queue(premium, &table, "premium");
    let parked = wait::until(BOUND, Duration::from_millis(10), || {
        (waiting(&mut console) == 2).then_some(())
    });
    assert!(parked.is_some(), "the premium client never queued");
    holder.batch_execute("COMMIT").expect("COMMIT");
    for (who, thread) in [("freemium", freemium), ("premium", premium)] {
        let outcome = wait::within(BOUND, move || thread.join().expect("client thread"));
        assert!(
            matches!(outcome, Some(Ok(()))),
            "{who}: {outcome:?}\n{}",
            proxy.log()
        );
    }
    let rows = holder
        .query(&format!("SELECT who FROM {table} ORDER BY n"), &[])
        .expect("order");
    holder
        .batch_execute(&format!("DROP TABLE {table}"))
        .expect("drop");
    rows.iter().map(|row| row.get(0)).collect()
}

#[test]
fn on_commit_the_premium_client_runs_before_the_freemium_one_queued_earlier() {
    assert_eq!(order_served("class"), ["premium", "freemium"]);
}

#[test]
fn under_fifo_the_client_queued_first_runs_first_whatever_its_class() {
    assert_eq!(order_served("fifo"), ["freemium", "premium"]);
}
