//! The read side of reader entries without servers: LSN views are fed by hand through an
//! `LsnTracker` and published as the poller would.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtier_core::config::Config;
use pgtier_engine::services::{ReadRequest, ReadRoute, Routing};
use pgtier_policy::{ReplicaId, ServiceClass};

use crate::lsn::{LagCap, Lsn, LsnTracker};
use crate::routing::{ShardRouting, SharedRouting};
use crate::{ReadAsk, ReadLocal, ReadPlacement, ReadRouter, ReplyMailbox, RouterMap};

const MS: Duration = Duration::from_millis(1);

fn config(extra: &str) -> Config {
    let text = format!(
        r#"
        [pgtier]
        auth_type = "trust"
        pool_mode = "transaction"

        [databases.app]
        dbname = "postgres"
        user = "postgres"
        primary = "127.0.0.1:15400"
        replicas = ["127.0.0.1:15401", "127.0.0.1:15402", "127.0.0.1:15403"]
        {extra}
        "#
    );
    Config::from_str(&text, "/tmp/pgtier-read-test.toml").expect("config")
}

fn map(extra: &str) -> RouterMap {
    RouterMap::from_config(&config(extra), crate::default_probe_login).expect("map")
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn ask(after: Option<Instant>) -> ReadAsk {
    ReadAsk {
        class: ServiceClass::Freemium.into(),
        leased: None,
        after,
        avoid: None,
    }
}

fn placed(reader: &Arc<ReadRouter>, ask: &ReadAsk, local: &mut ReadLocal) -> Option<ReplicaId> {
    match reader.route(ask, local) {
        ReadPlacement::Replica(ticket) => Some(ticket.replica()),
        ReadPlacement::Primary => None,
        ReadPlacement::NotYet => Some(ReplicaId(u8::MAX)),
    }
}

/// Publishes a view where the primary was sampled at `start + 10 ms` with `lsn`, and each
/// replica replayed `replays[i]`.
fn publish(reader: &ReadRouter, start: Instant, lsn: u64, replays: &[u64], cap: LagCap) {
    let mut tracker = LsnTracker::new(replays.len(), cap);
    tracker.on_primary(start + 10 * MS, Lsn(lsn));
    for (index, replay) in replays.iter().enumerate() {
        tracker.on_replica(index, Lsn(*replay));
    }
    reader.publish(tracker.view(start + 20 * MS));
}

#[test]
fn a_reader_entry_gets_a_read_side_and_plain_replica_sets_do_not() {
    let map = map("");
    let reader = map.reader("app").expect("reader");
    assert_eq!(reader.primary(), addr(15400));
    assert_eq!(reader.replica_count(), 3);
    assert!(map.reader_of(reader.router()).is_some());
    assert_eq!(map.readers().len(), 1);
    let text = r#"
        [pgtier]
        auth_type = "trust"
        [databases.ro]
        dbname = "postgres"
        replicas = ["127.0.0.1:15401", "127.0.0.1:15402"]
        routing = "round_robin"
    "#;
    let plain = RouterMap::from_config(
        &Config::from_str(text, "/tmp/x.toml").expect("config"),
        |_| None,
    )
    .expect("map");
    assert!(plain.reader("ro").is_none() && plain.readers().is_empty());
}

#[test]
fn tickets_count_reads_in_flight_until_dropped() {
    let map = map("");
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(1);
    let tickets: Vec<_> = (0..30)
        .map(|_| match reader.route(&ask(None), &mut local) {
            ReadPlacement::Replica(ticket) => ticket,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(reader.counters().total_in_flight(), 30);
    // Equal weights and every read still in flight: power of two choices keeps them level.
    for index in 0..3 {
        let replica = ReplicaId(index);
        let in_flight = reader.counters().in_flight(replica);
        assert!(
            (9..=11).contains(&in_flight),
            "replica {index}: {in_flight}"
        );
        assert_eq!(u64::from(in_flight), reader.counters().reads(replica));
    }
    drop(tickets);
    assert_eq!(reader.counters().total_in_flight(), 0);
    assert_eq!(reader.primary_fallbacks(), 0);
}

#[test]
fn a_read_run_again_avoids_the_replica_its_server_died_on() {
    let map = map("");
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(3);
    let avoiding = ReadAsk {
        avoid: Some(addr(15402)),
        ..ask(None)
    };
    for _ in 0..60 {
        let placed = placed(&reader, &avoiding, &mut local);
        assert!(matches!(placed, Some(ReplicaId(0 | 2))), "{placed:?}");
    }
    // The session's only replica (session-level PLB's lease) is the one to avoid: the read
    // falls back to the primary.
    let leased = ReadAsk {
        leased: Some(addr(15402)),
        ..avoiding
    };
    assert_eq!(placed(&reader, &leased, &mut local), None);
}

#[test]
fn p2c_weights_spread_reads() {
    let map = map(r#"routing = "p2c"
        weights = [1, 1, 2]"#);
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(7);
    let mut tickets = Vec::new();
    for _ in 0..400 {
        match reader.route(&ask(None), &mut local) {
            ReadPlacement::Replica(ticket) => tickets.push(ticket),
            other => panic!("{other:?}"),
        }
    }
    let reads: Vec<u64> = (0..3)
        .map(|i| reader.counters().reads(ReplicaId(i)))
        .collect();
    assert!((95..=105).contains(&reads[0]), "{reads:?}");
    assert!((95..=105).contains(&reads[1]), "{reads:?}");
    assert!((195..=205).contains(&reads[2]), "{reads:?}");
}

#[test]
fn a_read_with_a_target_waits_for_a_sample_then_for_a_replica_that_replayed_it() {
    let map = map("");
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(3);
    let start = Instant::now();
    let not_yet = Some(ReplicaId(u8::MAX));
    assert_eq!(
        placed(&reader, &ask(Some(start)), &mut local),
        not_yet,
        "no sample yet"
    );
    publish(&reader, start, 1000, &[999, 1000, 500], LagCap::default());
    for _ in 0..20 {
        assert_eq!(
            placed(&reader, &ask(Some(start)), &mut local),
            Some(ReplicaId(1))
        );
    }
    // A commit after the newest sample: no target known yet.
    assert_eq!(
        placed(&reader, &ask(Some(start + 10 * MS)), &mut local),
        not_yet
    );
    publish(&reader, start, 1000, &[999, 998, 500], LagCap::default());
    assert_eq!(
        placed(&reader, &ask(Some(start)), &mut local),
        not_yet,
        "none replayed"
    );
    assert!(reader.not_yet() >= 3);
    assert_eq!(reader.primary_fallbacks(), 0);
}

#[test]
fn the_lag_cap_excludes_replicas_and_none_left_means_the_primary() {
    let map = map("max_replica_lag_bytes = 100");
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let cap = reader.lag_cap();
    let mut local = ReadLocal::new(3);
    let start = Instant::now();
    publish(&reader, start, 1000, &[800, 950, 1000], cap);
    let view = reader.view();
    assert!(view.is_excluded(0) && !view.is_excluded(1) && !view.is_excluded(2));
    for _ in 0..20 {
        let replica = placed(&reader, &ask(None), &mut local);
        assert!(matches!(replica, Some(ReplicaId(1 | 2))), "{replica:?}");
    }
    publish(&reader, start, 1000, &[800, 800, 800], cap);
    assert_eq!(placed(&reader, &ask(None), &mut local), None);
    assert_eq!(placed(&reader, &ask(Some(start)), &mut local), None);
    assert_eq!(reader.primary_fallbacks(), 2);
}

#[test]
fn a_leased_read_runs_only_on_its_replica() {
    let map = map("");
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(3);
    let start = Instant::now();
    publish(&reader, start, 1000, &[1000, 1000, 10], LagCap::default());
    let leased = |port, after| ReadAsk {
        class: ServiceClass::Premium.into(),
        leased: Some(addr(port)),
        after,
        avoid: None,
    };
    for _ in 0..10 {
        assert_eq!(
            placed(&reader, &leased(15402, None), &mut local),
            Some(ReplicaId(1))
        );
    }
    let behind = leased(15403, Some(start));
    assert_eq!(
        placed(&reader, &behind, &mut local),
        Some(ReplicaId(u8::MAX))
    );
    // A lease on an address the entry does not have: nowhere but the primary.
    assert_eq!(placed(&reader, &leased(15499, None), &mut local), None);
}

#[test]
fn per_transaction_plb_keeps_reads_in_the_class_pool() {
    let map = map(r#"routing = "plb"
        plb_per_transaction = true
        [databases.app.plb]
        premium = ["127.0.0.1:15401"]
        freemium = ["127.0.0.1:15402"]
        premium_target = 1
        freemium_target = 1"#);
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(3);
    for class in ServiceClass::ALL {
        let own = match class {
            ServiceClass::Premium => ReplicaId(0),
            ServiceClass::Freemium => ReplicaId(1),
        };
        let ask = ReadAsk {
            class: class.into(),
            leased: None,
            after: None,
            avoid: None,
        };
        let mut seen = Vec::new();
        for _ in 0..20 {
            let replica = placed(&reader, &ask, &mut local).expect("a replica");
            assert!(
                replica == own || replica == ReplicaId(2),
                "{class}: {replica:?}"
            );
            seen.push(replica);
        }
        // Two replicas serve the class (its own and the Mixed one): strict alternation.
        assert!(seen.windows(2).all(|w| w[0] != w[1]), "{class}: {seen:?}");
    }
}

#[test]
fn an_entry_without_a_poll_login_sends_targeted_reads_to_the_primary() {
    let config = config("");
    let map = RouterMap::from_config(&config, |_| None).expect("map");
    let reader = Arc::clone(map.reader("app").expect("reader"));
    let mut local = ReadLocal::new(3);
    assert_eq!(
        placed(&reader, &ask(Some(Instant::now())), &mut local),
        None
    );
    assert!(placed(&reader, &ask(None), &mut local).is_some());
}

#[test]
fn reload_keeps_an_unchanged_read_side_and_rebuilds_a_changed_one() {
    let first = map("");
    let reader = Arc::clone(first.reader("app").expect("reader"));
    let kept = first
        .reload(&config(""), crate::default_probe_login)
        .expect("reload");
    assert!(Arc::ptr_eq(kept.reader("app").expect("reader"), &reader));
    let changed = first
        .reload(
            &config("max_replica_lag_bytes = 5"),
            crate::default_probe_login,
        )
        .expect("reload");
    let rebuilt = changed.reader("app").expect("reader");
    assert!(!Arc::ptr_eq(rebuilt, &reader));
    assert!(
        Arc::ptr_eq(rebuilt.router(), reader.router()),
        "the router itself is kept"
    );
}

#[test]
fn the_shard_routing_serves_reads_and_shares_user_writes() {
    let shared = Arc::new(SharedRouting::new(map("")));
    let one = ShardRouting::new(Arc::clone(&shared), ReplyMailbox::new(|| {}));
    let two = ShardRouting::new(Arc::clone(&shared), ReplyMailbox::new(|| {}));
    let request = |database| ReadRequest {
        database,
        class: ServiceClass::Freemium.into(),
        leased: None,
        after: None,
        avoid: None,
    };
    let ReadRoute::Replica(ticket) = one.route_read(&request("app")) else {
        panic!("a replica");
    };
    assert!([15401, 15402, 15403].contains(&ticket.addr().port()));
    assert!(matches!(
        one.route_read(&request("elsewhere")),
        ReadRoute::Primary
    ));
    let (early, late) = (Instant::now(), Instant::now() + MS);
    assert_eq!(two.user_write("app", "alice"), None);
    one.note_user_write("app", "alice", late);
    two.note_user_write("app", "alice", early);
    assert_eq!(
        two.user_write("app", "alice"),
        Some(late),
        "the latest write wins"
    );
    assert_eq!(one.user_write("app", "bob"), None);
    assert_eq!(one.user_write("other", "alice"), None);
}
