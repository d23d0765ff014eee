//! The read side of a reader entry against real PostgreSQL: a primary and two streaming
//! replicas started with `localpg`, polled by the control plane's LSN poller and probed by
//! its health probes with their default settings. Shows that the LSN view follows replay,
//! that a read with a read-your-writes instant waits for (only) a replica that replayed the
//! write, that a replica delayed by `recovery_min_apply_delay` is excluded past a one-second
//! lag cap and readmitted once it catches up, that weights spread reads, and that stopped
//! replicas stop being candidates until none is left and reads go to the primary.
//!
//! Every wait is bounded and waits for a condition; nothing asserts on wall-clock speed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtier_core::config::Config;
use pgtier_core::localpg::{LocalPg, PgOptions};
use pgtier_policy::{ReplicaId, ServiceClass};
use pgtier_replicas::lsn::Lsn;
use pgtier_replicas::{
    ControlOptions, ControlPlane, ReadAsk, ReadLocal, ReadPlacement, ReadRouter, RouterMap,
    default_probe_login,
};

const WAIT: Duration = Duration::from_secs(20);

struct Cluster {
    // Replicas first so they stop before their primary when dropped.
    replicas: Vec<LocalPg>,
    primary: LocalPg,
}

fn start_cluster() -> Cluster {
    let primary = LocalPg::start_primary(&PgOptions::default()).expect("primary");
    let replicas = (0..2)
        .map(|_| LocalPg::start_replica(&primary).expect("replica"))
        .collect();
    Cluster { replicas, primary }
}

/// The reader entry over `cluster`, its plane (probes and LSN poller running) and the map.
fn reader(cluster: &Cluster, extra: &str) -> (Arc<ReadRouter>, ControlPlane, RouterMap) {
    let replicas: Vec<String> = cluster
        .replicas
        .iter()
        .map(|pg| format!("\"127.0.0.1:{}\"", pg.port()))
        .collect();
    let text = format!(
        r#"
        [pgtier]
        auth_type = "trust"
        pool_mode = "transaction"
        [databases.app]
        dbname = "postgres"
        user = "postgres"
        primary = "127.0.0.1:{}"
        replicas = [{}]
        {extra}
        "#,
        cluster.primary.port(),
        replicas.join(", ")
    );
    let config = Config::from_str(&text, "/tmp/pgtier-reader-test.toml").expect("config");
    let map = RouterMap::from_config(&config, default_probe_login).expect("map");
    let mut plane =
        ControlPlane::start(map.routers(), ControlOptions::from_settings(&config.pgtier))
            .expect("plane");
    plane.start_lsn_pollers(map.readers()).expect("pollers");
    let reader = Arc::clone(map.reader("app").expect("reader entry"));
    (reader, plane, map)
}

fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < WAIT,
            "{what} did not happen within {WAIT:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn current_lsn(primary: &LocalPg) -> Lsn {
    let text = primary
        .psql("postgres", "SELECT pg_current_wal_lsn()")
        .expect("psql");
    Lsn::parse(text.as_bytes()).expect("an LSN")
}

fn replay(reader: &ReadRouter, index: usize) -> Option<Lsn> {
    reader.view().replica(index).and_then(|r| r.replay)
}

/// A committed write on the primary; returns an instant after its acknowledgement.
fn write(primary: &LocalPg, sql: &str) -> Instant {
    primary.psql("postgres", sql).expect("write");
    Instant::now()
}

fn ask(after: Option<Instant>) -> ReadAsk {
    ReadAsk {
        class: ServiceClass::Freemium.into(),
        leased: None,
        after,
        avoid: None,
    }
}

#[test]
fn replay_follows_writes_targets_wait_for_it_weights_spread_and_stopped_replicas_drop_out() {
    let cluster = start_cluster();
    let (reader, _plane, _map) = reader(&cluster, "routing = \"p2c\"\nweights = [1, 3]");

    // The view follows replay: after a write, both replicas reach the primary's position.
    let before = write(
        &cluster.primary,
        "CREATE TABLE t (x int); INSERT INTO t VALUES (1)",
    );
    let written = current_lsn(&cluster.primary);
    wait_for("both replicas replay the write", || {
        (0..2).all(|i| replay(&reader, i).is_some_and(|lsn| lsn >= written))
    });
    wait_for("lag back to zero", || {
        let view = reader.view();
        (0..2).all(|i| {
            view.replica(i)
                .is_some_and(|r| r.lag_bytes == 0 && !r.stale)
        })
    });
    assert!(
        reader
            .view()
            .primary_lsn()
            .is_some_and(|lsn| lsn >= written)
    );
    // The sample that showed `written` may have been sent just before `before` was taken
    // (psql returns after the commit, then the instant is read), so wait for a later one.
    wait_for("a primary sample sent after the write", || {
        reader.view().target_after(before).is_some()
    });

    // A read right after a write: not yet, or a replica that replayed it, never the primary.
    let mut local = ReadLocal::new(42);
    let after = write(
        &cluster.primary,
        "INSERT INTO t SELECT generate_series(1, 1000)",
    );
    let mut answers = Vec::new();
    let ticket = loop {
        match reader.route(&ask(Some(after)), &mut local) {
            ReadPlacement::Replica(ticket) => break ticket,
            ReadPlacement::NotYet => answers.push("not yet"),
            ReadPlacement::Primary => panic!("a live replica will replay the write"),
        }
        assert!(after.elapsed() < WAIT, "no replica replayed the write");
        std::thread::sleep(Duration::from_millis(1));
    };
    let target = reader.view().target_after(after).expect("a target");
    let index = ticket.replica().index();
    assert!(
        reader.view().is_ready(index, target),
        "placed on a replica that replayed it"
    );
    assert_eq!(reader.counters().in_flight(ticket.replica()), 1);
    drop(ticket);
    assert_eq!(reader.counters().total_in_flight(), 0);
    // Informational: the target is an insert position, so WAL inserted after the commit and
    // not yet flushed (up to wal_writer_delay) is waited for too.
    eprintln!(
        "{} answers 'not yet' before a replica, {:?} after the write",
        answers.len(),
        after.elapsed()
    );

    // Weights 1:3 over two replicas: the alternation gives exactly 1 in 4 to the first.
    let reads_before: Vec<u64> = (0..2)
        .map(|i| reader.counters().reads(ReplicaId(i)))
        .collect();
    let mut local = ReadLocal::new(7);
    for _ in 0..400 {
        assert!(matches!(
            reader.route(&ask(None), &mut local),
            ReadPlacement::Replica(_)
        ));
    }
    let reads: Vec<u64> = (0..2)
        .map(|i| reader.counters().reads(ReplicaId(i)) - reads_before[i as usize])
        .collect();
    assert_eq!(reads, vec![100, 300]);

    // A stopped replica is no candidate once it is Down; none left: the primary.
    let router = Arc::clone(reader.router());
    cluster.replicas[1]
        .stop_immediate()
        .expect("stop replica 1");
    wait_for("replica 1 Down", || router.is_down(ReplicaId(1)));
    for _ in 0..50 {
        match reader.route(&ask(None), &mut local) {
            ReadPlacement::Replica(ticket) => assert_eq!(ticket.replica(), ReplicaId(0)),
            other => panic!("replica 0 is up: {other:?}"),
        }
    }
    let fallbacks = reader.primary_fallbacks();
    cluster.replicas[0]
        .stop_immediate()
        .expect("stop replica 0");
    wait_for("replica 0 Down", || router.is_down(ReplicaId(0)));
    assert!(matches!(
        reader.route(&ask(None), &mut local),
        ReadPlacement::Primary
    ));
    assert!(matches!(
        reader.route(&ask(Some(Instant::now())), &mut local),
        ReadPlacement::Primary
    ));
    assert_eq!(reader.primary_fallbacks(), fallbacks + 2);
    wait_for("the stopped replicas' positions are stale", || {
        let view = reader.view();
        (0..2).all(|i| view.replica(i).is_some_and(|r| r.stale))
    });
}

#[test]
fn a_delayed_replica_waits_for_targets_and_is_excluded_past_the_lag_cap_until_it_catches_up() {
    let cluster = start_cluster();
    let delayed = &cluster.replicas[1];
    delayed
        .psql(
            "postgres",
            "ALTER SYSTEM SET recovery_min_apply_delay = '3s'",
        )
        .expect("alter system");
    delayed
        .psql("postgres", "SELECT pg_reload_conf()")
        .expect("reload");
    wait_for("the delay applies", || {
        delayed
            .psql("postgres", "SHOW recovery_min_apply_delay")
            .ok()
            .as_deref()
            == Some("3s")
    });
    let (reader, _plane, _map) = reader(&cluster, "max_replica_lag_seconds = 1");
    wait_for("both replicas polled", || {
        (0..2).all(|i| replay(&reader, i).is_some())
    });
    let delayed_addr = reader.replica_addr(ReplicaId(1)).expect("replica 1");

    let after = write(
        &cluster.primary,
        "CREATE TABLE d (x int); INSERT INTO d VALUES (1)",
    );
    let written = current_lsn(&cluster.primary);
    wait_for("a primary sample after the write", || {
        reader.view().target_after(after).is_some()
    });
    let target = reader.view().target_after(after).expect("target");

    // The prompt replica replays it; the delayed one cannot for three seconds.
    wait_for("replica 0 replays the write", || {
        reader.view().is_ready(0, target)
    });
    let mut local = ReadLocal::new(1);
    let leased_delayed = ReadAsk {
        leased: Some(delayed_addr),
        ..ask(Some(after))
    };
    if !reader.view().is_ready(1, target) {
        assert!(matches!(
            reader.route(&leased_delayed, &mut local),
            ReadPlacement::NotYet
        ));
    }
    for _ in 0..20 {
        match reader.route(&ask(Some(after)), &mut local) {
            ReadPlacement::Replica(ticket) => {
                assert!(reader.view().is_ready(ticket.replica().index(), target))
            }
            other => panic!("replica 0 has replayed the write: {other:?}"),
        }
    }

    // Past one second of lag the delayed replica is excluded: no reads at all, even plain.
    wait_for("replica 1 excluded", || reader.view().is_excluded(1));
    assert!(!reader.view().is_excluded(0));
    let lag = reader.view().replica(1).map(|r| r.lag).unwrap_or_default();
    assert!(lag > Duration::from_secs(1), "{lag:?}");
    for _ in 0..20 {
        match reader.route(&ask(None), &mut local) {
            ReadPlacement::Replica(ticket) => assert_eq!(ticket.replica(), ReplicaId(0)),
            other => panic!("replica 0 serves reads: {other:?}"),
        }
    }
    // Leased to the excluded replica: it can serve nothing now, so the primary.
    let leased_plain = ReadAsk {
        leased: Some(delayed_addr),
        ..ask(None)
    };
    assert!(matches!(
        reader.route(&leased_plain, &mut local),
        ReadPlacement::Primary
    ));

    // Once it replays the write its lag is zero and it is back.
    wait_for("replica 1 replays the write", || {
        replay(&reader, 1).is_some_and(|lsn| lsn >= written)
    });
    wait_for("replica 1 readmitted", || !reader.view().is_excluded(1));
    assert!(matches!(
        reader.route(&leased_delayed, &mut local),
        ReadPlacement::Replica(_)
    ));
}
