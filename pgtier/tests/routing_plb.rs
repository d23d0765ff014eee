//! Replica routing through the real proxy: sessions of both classes opened one at a time over
//! a primary and five streaming replicas land where Algorithm 1 of the PLB paper says
//! (`SELECT inet_server_port()`), including a borrow from Mixed, a borrow across pools and the
//! returns once sessions close; the class can be lowered, never raised, by a startup option.

mod common;

use std::time::Duration;

use common::replicas::{self, Cluster, Session, admin, layout, open, roles, wait_for};

const RETURN_WAIT: Duration = Duration::from_secs(5);

fn expect_on(session: &Session, replica: usize, step: &str) {
    assert_eq!(
        session.replica, replica,
        "{step}: landed on the wrong replica"
    );
}

#[test]
fn plb_sessions_land_where_algorithm_1_says() {
    let cluster = Cluster::start();
    // theta = 2 so the pools fill after two sessions per replica; tau = floor(alpha * 2) = 1.
    let proxy = common::start_proxy(&replicas::config(&cluster, "transaction", 2, ""));
    assert_eq!(
        roles(&proxy, &cluster),
        ["premium", "premium", "freemium", "freemium", "mixed"]
    );
    let premium = |db: &str, user: &str| open(&proxy, &cluster, user, db, &[]).expect("premium");

    // Lines 3-5: least-loaded premium replica with headroom (ties: lowest index).
    let p1 = premium("analytics", "alice");
    expect_on(&p1, 0, "p1 headroom");
    let p2 = premium("analytics_premium", "carol");
    expect_on(&p2, 1, "p2 headroom (alias entry gives premium)");
    let p3 = premium("analytics", "alice");
    expect_on(&p3, 0, "p3 headroom");
    let p4 = premium("analytics", "alice");
    expect_on(&p4, 1, "p4 headroom");
    // Lines 7-10: no premium headroom left: borrow the Mixed replica.
    let p5 = premium("analytics", "alice");
    expect_on(&p5, 4, "p5 borrows Mixed");
    let p6 = premium("analytics", "alice");
    expect_on(&p6, 4, "p6 uses the borrowed replica's headroom");
    // Lines 12-19: no Mixed left; a Freemium donor less loaded than every premium replica,
    // while |R_F| - 1 >= kappa_F.
    let p7 = premium("analytics", "alice");
    expect_on(&p7, 2, "p7 borrows across pools from Freemium");
    let rows = layout(&proxy, &cluster);
    println!("after the premium burst: {rows:?}");
    assert_eq!(
        roles(&proxy, &cluster),
        [
            "premium",
            "premium",
            "borrowed_to_premium",
            "freemium",
            "borrowed_to_premium"
        ]
    );
    let counts: Vec<(u32, u32)> = rows.iter().map(|r| (r.1, r.2)).collect();
    assert_eq!(counts, [(2, 0), (2, 0), (1, 0), (0, 0), (2, 0)]);

    // Freemium now has one replica left in its pool.
    let f1 = open(&proxy, &cluster, "bob", "analytics", &[]).expect("freemium");
    expect_on(&f1, 3, "f1 headroom on the remaining freemium replica");

    // Returns (section III-D): replica 2 hosts no premium session once p7 leaves, and
    // pressure eases when replica 0 drops below tau = 1; Freemium is below its target, so
    // replica 2 goes back to Freemium.
    drop((p7, p1, p3));
    wait_for("return of replica 2", RETURN_WAIT, || {
        roles(&proxy, &cluster)[2] == "freemium"
    });
    let f2 = open(&proxy, &cluster, "bob", "analytics", &[]).expect("freemium");
    expect_on(&f2, 2, "f2 headroom on the returned replica");

    // A premium user may lower its class: routed as freemium (tie between 2 and 3: lowest).
    let lowered = [("options", "-c pgtier.class=freemium")];
    let mut f3 = open(&proxy, &cluster, "alice", "analytics", &lowered).expect("lowered");
    assert!(
        [2, 3].contains(&f3.replica),
        "a lowered premium session runs on a freemium replica, not {}",
        f3.replica
    );
    // The option is consumed by pgtier and never reaches the server.
    let seen = f3
        .client
        .query("SELECT coalesce(current_setting('pgtier.class', true), '')")
        .expect("query");
    assert_eq!(seen, [""], "pgtier.class was forwarded to the server");
    // A freemium user may not raise its class.
    let raised = [("options", "-c pgtier.class=premium")];
    let error = open(&proxy, &cluster, "bob", "analytics", &raised)
        .err()
        .expect("a raise is refused");
    assert_eq!(error.0, "42501", "{error:?}");

    // The Mixed borrow returns once p5 and p6 leave; Freemium is at target, so to Mixed.
    drop((p5, p6));
    wait_for("return of replica 4", RETURN_WAIT, || {
        roles(&proxy, &cluster)[4] == "mixed"
    });
    let events = admin(&proxy, "ROLE_EVENTS");
    for event in &events {
        println!("role event: {event}");
    }
    let reasons: Vec<&str> = events
        .iter()
        .filter_map(|line| line.rsplit('|').next())
        .collect();
    for reason in [
        "borrow_mixed_for_premium",
        "borrow_freemium_for_premium",
        "return_to_unmet_target",
        "return_to_mixed",
    ] {
        assert!(reasons.contains(&reason), "no {reason} in SHOW ROLE_EVENTS");
    }

    drop((p2, p4, f1, f2, f3));
    replicas::expect_released_and_stop(proxy, &cluster, RETURN_WAIT, replicas::PAPER_ROLES);
}
