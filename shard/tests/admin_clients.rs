//! `SHOW CLIENTS` and `SHOW POOLS` through the real proxy (two shards) over a primary and
//! five streaming replicas: premium and freemium sessions on a replica-set entry are listed
//! with their class and the replica they are pinned to, whichever shard holds them, and each
//! replica they use shows up as a pool.

mod common;

use std::collections::BTreeSet;

use common::replicas::{self, Cluster, Session, admin, open};

/// `SHOW CLIENTS` columns.
const SHARD: usize = 0;
const DATABASE: usize = 2;
const USER: usize = 3;
const STATE: usize = 4;
const CLASS: usize = 5;
const REPLICA: usize = 6;

fn replica_addr(cluster: &Cluster, session: &Session) -> String {
    format!("127.0.0.1:{}", cluster.replicas[session.replica].port())
}

fn split(lines: &[String]) -> Vec<Vec<String>> {
    lines
        .iter()
        .map(|line| line.split('|').map(str::to_string).collect())
        .collect()
}

#[test]
fn show_clients_and_pools_list_sessions_with_class_and_replica() {
    let cluster = Cluster::start();
    let proxy = common::start_proxy(&replicas::config(&cluster, "transaction", 2, ""));
    let premium: Vec<Session> = (0..2)
        .map(|_| open(&proxy, &cluster, "alice", "analytics", &[]).expect("premium"))
        .collect();
    let freemium: Vec<Session> = (0..2)
        .map(|_| open(&proxy, &cluster, "bob", "analytics", &[]).expect("freemium"))
        .collect();

    let (ok, out, notices) = common::psql(
        proxy.local_addr().port(),
        "admin",
        "pgtier",
        "SHOW CLIENTS",
        None,
    );
    assert!(ok && notices.is_empty(), "every shard answered: {notices}");
    let lines: Vec<String> = out.lines().map(str::to_string).collect();
    let clients = split(&lines);
    println!("SHOW CLIENTS:\n{clients:?}");
    let on_analytics: Vec<&Vec<String>> = clients
        .iter()
        .filter(|row| row[DATABASE] == "analytics")
        .collect();
    assert_eq!(on_analytics.len(), 4, "every session listed once");
    for (sessions, user, class) in [
        (&premium, "alice", "premium"),
        (&freemium, "bob", "freemium"),
    ] {
        let rows: Vec<&&Vec<String>> = on_analytics.iter().filter(|r| r[USER] == user).collect();
        assert_eq!(rows.len(), 2, "{user}'s sessions");
        let mut listed: Vec<&str> = rows.iter().map(|r| r[REPLICA].as_str()).collect();
        let mut expected: Vec<String> =
            sessions.iter().map(|s| replica_addr(&cluster, s)).collect();
        listed.sort_unstable();
        expected.sort_unstable();
        assert_eq!(listed, expected, "{user}'s replicas");
        for row in rows {
            assert_eq!(row[CLASS], class, "{user}'s class");
            assert_eq!(row[STATE], "idle", "transaction mode, between queries");
        }
    }
    let admin_row = clients
        .iter()
        .find(|row| row[DATABASE] == "pgtier")
        .expect("the admin session lists itself");
    assert_eq!(
        (admin_row[CLASS].as_str(), admin_row[REPLICA].as_str()),
        ("", "")
    );
    let shards: BTreeSet<&str> = clients.iter().map(|row| row[SHARD].as_str()).collect();
    println!("clients on shards {shards:?}");

    let pools = split(&admin(&proxy, "POOLS"));
    println!("SHOW POOLS:\n{pools:?}");
    for session in premium.iter().chain(&freemium) {
        let addr = replica_addr(&cluster, session);
        let row = pools
            .iter()
            .find(|row| row[1] == "analytics" && row[3] == addr)
            .unwrap_or_else(|| panic!("a pool on {addr}"));
        assert_eq!(row[4], "transaction");
    }
    let clients_active: u32 = pools
        .iter()
        .filter(|row| row[1] == "analytics")
        .map(|row| row[5].parse::<u32>().expect("cl_active"))
        .sum();
    assert_eq!(clients_active, 4, "idle logged-in clients count as active");
    let servers_idle: u32 = pools
        .iter()
        .map(|row| row[8].parse::<u32>().expect("sv_idle"))
        .sum();
    assert!(servers_idle >= 1, "servers back in their pools");

    drop((premium, freemium));

    // Session mode: a client keeps its server, so it is active with the backend's pid.
    let session_proxy = common::start_proxy(&replicas::config(&cluster, "session", 2, ""));
    let mut linked = open(&session_proxy, &cluster, "alice", "analytics", &[]).expect("premium");
    let pid = linked
        .client
        .query("SELECT pg_backend_pid()")
        .expect("pid")
        .remove(0);
    let clients = split(&admin(&session_proxy, "CLIENTS"));
    let row = clients
        .iter()
        .find(|row| row[DATABASE] == "analytics")
        .expect("the session");
    assert_eq!(
        (row[STATE].as_str(), row[CLASS].as_str(), row[9].as_str()),
        ("active", "premium", pid.as_str())
    );
    assert_eq!(row[REPLICA], replica_addr(&cluster, &linked));
    let pools = split(&admin(&session_proxy, "POOLS"));
    let row = pools
        .iter()
        .find(|row| row[3] == replica_addr(&cluster, &linked))
        .expect("its pool");
    assert_eq!(
        (row[4].as_str(), row[5].as_str(), row[7].as_str()),
        ("session", "1", "1")
    );
}
