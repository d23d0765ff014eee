//! PLB over three ranked classes through the real proxy (`tiers = [...]`): five streaming
//! replicas with one pool per rank (premium r0, freemium r1, tier2 r2 and r3) and r4 Mixed.
//! Sessions opened one at a time land where the tiered rules say: the bottom rank borrows
//! Mixed, premium reclaims that Mixed replica, freemium borrows from the rank it outranks; a
//! killed replica is repaired so every rank keeps a replica, and it rejoins. A `tier2` user
//! on a two-class entry is served as freemium there.

mod common;

use std::time::Duration;

use common::replicas::{self, Cluster, Session, admin, layout, open, wait_for};

const RETURN_WAIT: Duration = Duration::from_secs(5);
const DETECTION_LIMIT: Duration = Duration::from_secs(2);
const REJOIN_LIMIT: Duration = Duration::from_secs(15);

fn config(cluster: &Cluster) -> String {
    let port = pgtier_core::localpg::free_port().expect("free port");
    let addrs = cluster.addrs();
    format!(
        r#"
[pgtier]
listen_addr = "127.0.0.1"
listen_port = {port}
workers = 2
auth_type = "trust"
pool_mode = "transaction"
default_pool_size = 20
admin_users = ["admin"]
[databases.ranked]
dbname = "postgres"
user = "postgres"
replicas = [{all}]
routing = "plb"
[databases.ranked.plb]
tiers = [[{r0}], [{r1}], [{r2}, {r3}]]
tier_theta = [2, 2, 2]
tier_target = [1, 1, 2]
{classic}
[users.alice]
class = "premium"
[users.bob]
class = "freemium"
[users.carol]
class = "tier2"
"#,
        all = addrs.join(", "),
        r0 = addrs[0],
        r1 = addrs[1],
        r2 = addrs[2],
        r3 = addrs[3],
        classic = replicas::plb_entry(cluster, "classic", "freemium", 2),
    )
}

fn expect_on(session: &Session, replica: usize, step: &str) {
    assert_eq!(
        session.replica, replica,
        "{step}: landed on the wrong replica"
    );
}

fn reasons(proxy: &pgtier::ProxyHandle, what: &str) -> Vec<String> {
    admin(proxy, what)
        .iter()
        .filter(|line| line.contains("|ranked|"))
        .map(|line| line.to_string())
        .collect()
}

#[test]
fn three_ranked_classes_borrow_reclaim_and_repair_as_the_tiered_rules_say() {
    let cluster = Cluster::start();
    let proxy = common::start_proxy(&config(&cluster));
    let open_as = |user: &str| open(&proxy, &cluster, user, "ranked", &[]).expect(user);
    let ranked_roles = || -> Vec<String> {
        let rows = admin(&proxy, "REPLICAS");
        let mut roles = vec![String::new(); 5];
        for line in rows.iter().filter(|line| line.starts_with("ranked|")) {
            let cols: Vec<&str> = line.split('|').collect();
            let port = cols[1].rsplit(':').next().unwrap_or_default();
            roles[cluster.index_of(port)] = cols[2].to_string();
        }
        roles
    };
    assert_eq!(
        ranked_roles(),
        ["premium", "freemium", "tier2", "tier2", "mixed"]
    );

    // The bottom rank fills its own pool (least loaded, ties to the lowest index) ...
    let c1 = open_as("carol");
    expect_on(&c1, 2, "c1 headroom");
    let c2 = open_as("carol");
    expect_on(&c2, 3, "c2 headroom");
    let c3 = open_as("carol");
    expect_on(&c3, 2, "c3 headroom");
    let c4 = open_as("carol");
    expect_on(&c4, 3, "c4 headroom");
    // ... then borrows the Mixed replica.
    let c5 = open_as("carol");
    expect_on(&c5, 4, "c5 borrows Mixed");
    assert_eq!(ranked_roles()[4], "borrowed_to_tier2");

    // Premium fills r0, then takes the Mixed replica back from the rank it outranks (reclaim:
    // Mixed is empty, and r4 carries less than premium's best replica).
    let a1 = open_as("alice");
    expect_on(&a1, 0, "a1 headroom");
    let a2 = open_as("alice");
    expect_on(&a2, 0, "a2 headroom");
    let a3 = open_as("alice");
    expect_on(&a3, 4, "a3 reclaims the Mixed replica tier2 borrowed");
    assert_eq!(ranked_roles()[4], "borrowed_to_premium");

    // Freemium fills r1, then borrows from the rank it outranks: r2, once a carol session
    // left it and it carries less than freemium's best replica (tier2 keeps its floor of 1).
    drop(c1);
    let b1 = open_as("bob");
    expect_on(&b1, 1, "b1 headroom");
    let b2 = open_as("bob");
    expect_on(&b2, 1, "b2 headroom");
    let b3 = open_as("bob");
    expect_on(&b3, 2, "b3 borrows from tier2");
    assert_eq!(
        ranked_roles(),
        [
            "premium",
            "freemium",
            "borrowed_to_freemium",
            "tier2",
            "borrowed_to_premium"
        ]
    );
    // SHOW REPLICAS counts every rank of a tiered router, premium first.
    let counts: Vec<String> = admin(&proxy, "REPLICAS")
        .iter()
        .filter(|line| line.starts_with("ranked|"))
        .map(|line| line.rsplit('|').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(counts, ["2/0/0", "0/2/0", "0/1/1", "0/0/2", "1/0/1"]);
    let events = reasons(&proxy, "ROLE_EVENTS");
    for event in &events {
        println!("role event: {event}");
    }
    for (reason, class) in [
        ("borrow_mixed", "tier2"),
        ("reclaim_mixed", "premium"),
        ("borrow_lower", "freemium"),
    ] {
        assert!(
            events
                .iter()
                .any(|e| e.ends_with(&format!("|{class}|{reason}"))),
            "no {reason} by {class} in SHOW ROLE_EVENTS"
        );
    }
    // The class of each client as pgtier serves it.
    let clients = admin(&proxy, "CLIENTS");
    assert!(
        clients.iter().any(|line| line.contains("|tier2|")),
        "SHOW CLIENTS names the tier2 class: {clients:?}"
    );

    // Kill tier2's last own replica: both borrowed replicas host two ranks, so they become
    // Mixed, and repair gives one back to tier2 so every rank keeps a replica.
    cluster.replicas[3]
        .stop_immediate()
        .expect("pg_ctl stop -m immediate");
    let router = proxy
        .routers()
        .routers()
        .iter()
        .find(|r| r.name().contains("ranked"))
        .cloned()
        .expect("the ranked router");
    wait_for("Down of the killed replica", DETECTION_LIMIT, || {
        router.is_down(pgtier_policy::ReplicaId(3))
    });
    wait_for("repair to target", RETURN_WAIT, || {
        let roles = ranked_roles();
        roles[3] == "down" && roles.iter().filter(|r| *r == "tier2").count() == 1
    });
    let after = ranked_roles();
    println!("after the kill: {after:?}");
    assert_eq!(after.iter().filter(|r| *r == "premium").count(), 2);
    assert_eq!(after.iter().filter(|r| *r == "freemium").count(), 1);
    let tier2_home = after
        .iter()
        .position(|r| r == "tier2")
        .expect("tier2 has a replica");
    // The idle tier2 sessions pinned to the dead replica run their next transaction elsewhere.
    let (mut c2, mut c4) = (c2, c4);
    for session in [&mut c2, &mut c4] {
        let port = session
            .client
            .query("SELECT inet_server_port()")
            .expect("an idle session on the dead replica continues");
        assert_ne!(cluster.index_of(&port[0]), 3, "re-pinned to a live replica");
    }
    let c6 = open_as("carol");
    expect_on(&c6, tier2_home, "c6 on tier2's repaired replica");
    let failures = reasons(&proxy, "EVENTS");
    for reason in ["|down|", "|canonical_mixed_sessions|", "|repair_to_target|"] {
        assert!(
            failures.iter().any(|e| e.contains(reason)),
            "no {reason} in SHOW EVENTS: {failures:?}"
        );
    }

    // It rejoins as Mixed, and repair brings the reference split back.
    cluster.replicas[3].start().expect("restart");
    wait_for("rejoin", REJOIN_LIMIT, || ranked_roles()[3] != "down");
    let rejoined = ranked_roles();
    println!("after the rejoin: {rejoined:?}");
    let count = |name: &str| rejoined.iter().filter(|r| *r == name).count();
    assert_eq!(
        (
            count("premium"),
            count("freemium"),
            count("tier2"),
            count("mixed")
        ),
        (1, 1, 2, 1),
        "repair brings back the reference split"
    );
    assert!(
        reasons(&proxy, "EVENTS")
            .iter()
            .any(|e| e.contains("|rejoin|")),
        "no rejoin in SHOW EVENTS"
    );

    // A tier2 user on a two-class entry is served as freemium there (its last class).
    let classic = open(&proxy, &cluster, "carol", "classic", &[]).expect("classic");
    assert!(
        [2, 3].contains(&classic.replica),
        "tier2 runs on a freemium replica of the two-class entry, not {}",
        classic.replica
    );
    let classic_rows = layout(&proxy, &cluster);
    println!("classic layout: {classic_rows:?}");

    drop((c2, c3, c4, c5, c6, a1, a2, a3, b1, b2, b3, classic));
    wait_for("every session released", RETURN_WAIT, || {
        proxy
            .routers()
            .routers()
            .iter()
            .all(|r| r.total_sessions() == 0)
    });
    proxy.shutdown(pgtier::ShutdownMode::Immediate);
    proxy.join().expect("clean shutdown");
}
