//! The fault harness's packet-level netem (tests/src/faults/netem.rs over nfqueue.rs), against
//! a real PostgreSQL in a network namespace of the test's own: iptables' NFQUEUE hands the
//! server's TCP segments to the netem, which holds each for a drawn delay (or drops it).
//! Proves, without timing anything, that segments really leave out of order and are
//! dropped, that queries still succeed through it, and that a queue nobody listens on any
//! more (a crashed netem) passes traffic instead of blackholing it.
//!
//! Needs root (a namespace, iptables); as another user it says so and passes.

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use pgtier_tests::faults::netem::{Netem, NetemSpec, NetemStats, QueueRules};
use pgtier_tests::{LocalPg, PgOptions, netns};

const QUEUE: u16 = 7;
/// A bound on any one query, so a blackholed link fails the test instead of hanging it.
const QUERY_BOUND: Duration = Duration::from_secs(60);

/// Runs `body` in a namespace of its own with a 1500-byte loopback (so a large answer is
/// many segments, as on a real link) and a PostgreSQL in it; `None` when not root.
fn in_namespace<T: Send + 'static>(body: impl FnOnce(&LocalPg) -> T + Send + 'static) -> Option<T> {
    netns::run_isolated(false, move |isolated| {
        if !isolated {
            return None;
        }
        // Children of this thread live in its namespace.
        let out = Command::new("ip")
            .args(["link", "set", "lo", "mtu", "1500"])
            .stdin(Stdio::null())
            .output()
            .expect("ip");
        assert!(out.status.success(), "ip link set lo mtu: {out:?}");
        let pg = LocalPg::start_primary(&PgOptions::default()).expect("PostgreSQL");
        Some(body(&pg))
    })
}

/// The server's segments to its clients (the direction that carries the large answers).
fn queue_server_segments(pg: &LocalPg) -> QueueRules {
    let mut rules = QueueRules::new(None);
    let port = pg.port().to_string();
    rules
        .add(
            "OUTPUT",
            &["-o", "lo", "-p", "tcp", "--sport", &port],
            QUEUE,
        )
        .expect("the NFQUEUE rule (is iptables installed? scripts/install-deps.sh)");
    rules
}

/// One connection running `queries` large answers and checking their length; on a thread
/// of this namespace, waited for within `QUERY_BOUND`.
fn large_answers(pg: &LocalPg, queries: usize) -> Result<(), String> {
    let conninfo = pg.conninfo("postgres", "postgres");
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = (|| -> Result<(), String> {
            let mut client =
                postgres::Client::connect(&conninfo, postgres::NoTls).map_err(|e| e.to_string())?;
            for n in 0..queries {
                let size = 200_000 + 1000 * n as i32;
                let row = client
                    .query_one("SELECT repeat('x', $1)", &[&size])
                    .map_err(|e| e.to_string())?;
                let text: String = row.get(0);
                if text.len() != size as usize {
                    return Err(format!("{} bytes, not {size}", text.len()));
                }
            }
            Ok(())
        })();
        let _ = done_tx.send(outcome);
    });
    done_rx
        .recv_timeout(QUERY_BOUND)
        .map_err(|_| format!("no answer within {QUERY_BOUND:?}: the link is blackholed"))?
}

fn stats_of(netem: Netem) -> NetemStats {
    netem.stop().expect("the netem ran without an error")
}

#[test]
fn jitter_reorders_a_flows_segments_and_queries_still_succeed() {
    let Some(stats) = in_namespace(|pg| {
        let spec = NetemSpec::jitter(Duration::from_millis(20), Duration::from_millis(15));
        let netem = Netem::start(None, QUEUE, spec, 1).expect("bind the queue");
        let rules = queue_server_segments(pg);
        large_answers(pg, 5).expect("queries through the jittered link");
        drop(rules);
        stats_of(netem)
    }) else {
        eprintln!("skipped: no network namespace of its own (not root?)");
        return;
    };
    eprintln!("jitter: {stats:?}");
    assert!(stats.packets > 50, "{stats:?}");
    assert_eq!(stats.accepted, stats.packets, "{stats:?}");
    assert!(
        stats.reordered > 0,
        "no segment overtook another: {stats:?}"
    );
}

#[test]
fn late_packets_are_overtaken_and_lost_packets_are_recovered() {
    let Some(stats) = in_namespace(|pg| {
        let spec = NetemSpec {
            loss_percent: 5,
            ..NetemSpec::reorder(10, Duration::from_millis(20))
        };
        let netem = Netem::start(None, QUEUE, spec, 2).expect("bind the queue");
        let rules = queue_server_segments(pg);
        large_answers(pg, 5).expect("queries through the lossy link");
        drop(rules);
        stats_of(netem)
    }) else {
        eprintln!("skipped: no network namespace of its own (not root?)");
        return;
    };
    eprintln!("reorder and loss: {stats:?}");
    assert!(stats.late > 0 && stats.dropped > 0, "{stats:?}");
    assert!(
        stats.reordered > 0,
        "no segment overtook a late one: {stats:?}"
    );
    assert_eq!(stats.accepted + stats.dropped, stats.packets, "{stats:?}");
}

#[test]
fn a_queue_whose_netem_is_gone_passes_traffic() {
    let Some((before, after)) = in_namespace(|pg| {
        let spec = NetemSpec::jitter(Duration::from_millis(5), Duration::from_millis(2));
        let netem = Netem::start(None, QUEUE, spec, 3).expect("bind the queue");
        // The rule stays while the netem goes: as if it had crashed mid-scenario.
        let rules = queue_server_segments(pg);
        large_answers(pg, 1).expect("queries through the netem");
        let before = stats_of(netem);
        let after = large_answers(pg, 2);
        drop(rules);
        (before, after)
    }) else {
        eprintln!("skipped: no network namespace of its own (not root?)");
        return;
    };
    assert!(before.packets > 0, "the rule queued nothing: {before:?}");
    after.expect("the queue fails open once nobody listens");
}
