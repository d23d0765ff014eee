//! PLB deciding on transactions in flight (`load_signal = "in_flight"`) through the real proxy
//! over a primary and five streaming replicas: idle sessions leave a replica's headroom alone,
//! open transactions fill it and make premium borrow, a borrowed replica with a pinned idle
//! session is not returned until that session leaves, and a session that ends inside a
//! transaction takes its count with it. `SHOW REPLICAS` shows the counts.

mod common;

use std::time::Duration;

use common::replicas::{self, Cluster, Session, admin, layout, open, roles, wait_for};

const WAIT: Duration = Duration::from_secs(5);

/// `in_flight` of `SHOW REPLICAS`, by replica index.
fn in_flight(proxy: &pgtier::ProxyHandle, cluster: &Cluster) -> Vec<u32> {
    let mut counts = vec![0; cluster.replicas.len()];
    for line in admin(proxy, "REPLICAS") {
        let cols: Vec<&str> = line.split('|').collect();
        let port = cols[1].rsplit(':').next().unwrap_or_default();
        counts[cluster.index_of(port)] = cols[14].parse().expect("in_flight is counted");
    }
    counts
}

fn begin(session: &mut Session) {
    session.client.query("BEGIN").expect("BEGIN");
    session.client.query("SELECT 1").expect("a query inside it");
}

fn commit(session: &mut Session) {
    session.client.query("COMMIT").expect("COMMIT");
}

#[test]
fn plb_on_in_flight_transactions_fills_replicas_by_what_runs_not_by_what_is_open() {
    let cluster = Cluster::start();
    // theta = 2 transactions per replica, tau = floor(alpha * 2) = 1.
    let config = replicas::config(&cluster, "transaction", 2, "").replace(
        "freemium_target = 2\n",
        "freemium_target = 2\nload_signal = \"in_flight\"\n",
    );
    let proxy = common::start_proxy(&config);
    let premium = || open(&proxy, &cluster, "alice", "analytics", &[]).expect("premium");

    // Four idle premium sessions: none is in a transaction, so replica 0 keeps its headroom
    // (on open sessions they would alternate 0, 1 and then borrow).
    let mut idle: Vec<Session> = (0..4).map(|_| premium()).collect();
    for session in &idle {
        assert_eq!(session.replica, 0, "an idle session used up headroom");
    }
    assert_eq!(
        layout(&proxy, &cluster)[0].1,
        4,
        "four sessions pinned to replica 0"
    );
    assert_eq!(in_flight(&proxy, &cluster), [0, 0, 0, 0, 0]);

    // Two open transactions fill replica 0: the next session goes to replica 1.
    begin(&mut idle[0]);
    begin(&mut idle[1]);
    assert_eq!(in_flight(&proxy, &cluster), [2, 0, 0, 0, 0]);
    let mut p5 = premium();
    assert_eq!(
        p5.replica, 1,
        "replica 0 has no headroom with 2 transactions running"
    );
    begin(&mut p5);
    let mut p6 = premium();
    assert_eq!(p6.replica, 1);
    begin(&mut p6);
    assert_eq!(in_flight(&proxy, &cluster), [2, 2, 0, 0, 0]);

    // Both premium replicas run theta transactions: premium borrows the Mixed replica.
    let p7 = premium();
    assert_eq!(p7.replica, 4, "premium borrows Mixed");
    assert_eq!(roles(&proxy, &cluster)[4], "borrowed_to_premium");

    // Every transaction ends: pressure is gone, but p7 is still pinned to replica 4, so the
    // admission below (which evaluates returns first) must not return it.
    for session in idle.iter_mut().take(2).chain([&mut p5, &mut p6]) {
        commit(session);
    }
    wait_for("in-flight counts back to zero", WAIT, || {
        in_flight(&proxy, &cluster) == [0, 0, 0, 0, 0]
    });
    let p8 = premium();
    assert_eq!(p8.replica, 0, "headroom again on replica 0");
    assert_eq!(
        roles(&proxy, &cluster)[4],
        "borrowed_to_premium",
        "returned while a premium session is pinned there"
    );
    drop(p7);
    wait_for("return of replica 4 once p7 left", WAIT, || {
        roles(&proxy, &cluster)[4] == "mixed"
    });

    // A session that ends inside a transaction gives its in-flight count back.
    let mut leaving = idle.pop().expect("a session");
    begin(&mut leaving);
    assert_eq!(in_flight(&proxy, &cluster)[0], 1);
    drop(leaving);
    wait_for("the leaver's transaction uncounted", WAIT, || {
        in_flight(&proxy, &cluster) == [0, 0, 0, 0, 0]
    });

    drop((idle, p5, p6, p8));
    replicas::expect_released_and_stop(proxy, &cluster, WAIT, replicas::PAPER_ROLES);
}
