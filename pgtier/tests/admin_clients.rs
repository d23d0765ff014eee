//! `SHOW CLIENTS`, `SHOW SERVERS` and `SHOW POOLS` through the real proxy (two shards) over
//! a primary and five streaming replicas: premium and freemium sessions on a replica-set entry
//! are listed with their class and the replica they are pinned to, whichever shard holds
//! them, each replica they use has servers, and each (database, user) is one pool row.

mod common;

use std::collections::BTreeSet;

use common::replicas::{self, Cluster, Session, admin, open};

/// `SHOW CLIENTS` columns: PgBouncer 1.25's first, then pgtier's.
const USER: usize = 1;
const DATABASE: usize = 2;
const STATE: usize = 4;
const ADDR: usize = 5;
const PORT: usize = 6;
const SHARD: usize = 21;
const PGTIER_STATE: usize = 22;
const CLASS: usize = 23;
const REPLICA: usize = 24;
const BACKEND_PID: usize = 25;

/// `SHOW POOLS` columns.
const POOL_USER: usize = 1;
const CL_ACTIVE: usize = 2;
const SV_ACTIVE: usize = 6;
const SV_IDLE: usize = 9;
const POOL_MODE: usize = 15;

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
            assert_eq!(
                row[STATE], "idle",
                "PgBouncer's word for a client with no server and nothing pending"
            );
            assert_eq!(
                row[PGTIER_STATE], "idle",
                "transaction mode, between queries"
            );
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

    let servers = split(&admin(&proxy, "SERVERS"));
    println!("SHOW SERVERS:\n{servers:?}");
    for session in premium.iter().chain(&freemium) {
        let addr = replica_addr(&cluster, session);
        assert!(
            servers.iter().any(|row| row[DATABASE] == "analytics"
                && format!("{}:{}", row[ADDR], row[PORT]) == addr),
            "a server on {addr}"
        );
    }
    let pools = split(&admin(&proxy, "POOLS"));
    println!("SHOW POOLS:\n{pools:?}");
    let analytics: Vec<&Vec<String>> = pools.iter().filter(|row| row[0] == "analytics").collect();
    let users: Vec<&str> = analytics
        .iter()
        .map(|row| row[POOL_USER].as_str())
        .collect();
    // The entry logs in to its servers as one user, so alice and bob share its pool, as
    // PgBouncer's pools with a forced user do: one row across shards and replicas.
    assert_eq!(users, ["postgres"], "one row per (database, server user)");
    for row in &analytics {
        assert_eq!(row[POOL_MODE], "transaction");
    }
    let clients_active: u32 = analytics
        .iter()
        .map(|row| row[CL_ACTIVE].parse::<u32>().expect("cl_active"))
        .sum();
    assert_eq!(clients_active, 4, "idle logged-in clients count as active");
    let servers_idle: u32 = pools
        .iter()
        .map(|row| row[SV_IDLE].parse::<u32>().expect("sv_idle"))
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
        (
            row[PGTIER_STATE].as_str(),
            row[CLASS].as_str(),
            row[BACKEND_PID].as_str()
        ),
        ("active", "premium", pid.as_str())
    );
    assert_eq!(row[REPLICA], replica_addr(&cluster, &linked));
    assert_eq!(row[STATE], "active", "linked to its server");
    let pools = split(&admin(&session_proxy, "POOLS"));
    let row = pools
        .iter()
        .find(|row| row[0] == "analytics" && row[POOL_USER] == "postgres")
        .expect("its pool");
    assert_eq!(
        (
            row[POOL_MODE].as_str(),
            row[CL_ACTIVE].as_str(),
            row[SV_ACTIVE].as_str()
        ),
        ("session", "1", "1")
    );
}
