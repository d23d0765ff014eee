//! The asynchronous admission path as a shard loop uses it: several "shards" (threads), each
//! with one reply mailbox, keep many admissions in flight at once, match replies to sessions
//! by request id, and close sessions in any order. Every request must be answered exactly
//! once, to the shard that sent it, and every count must come back to zero.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgtier_core::config::{PlbSettings, Routing};
use pgtier_policy::{PlbParams, ServiceClass, SplitMix64};
use pgtier_replicas::{
    Admission, ControlOptions, ControlPlane, ReplicaRouter, ReplyMailbox, RouterConfig,
    SessionLease,
};

const SHARDS: u64 = 4;
const SESSIONS_PER_SHARD: u64 = 3000;
const IN_FLIGHT_PER_SHARD: usize = 24;

fn router() -> Arc<ReplicaRouter> {
    ReplicaRouter::new(RouterConfig {
        name: "mailbox".to_string(),
        replicas: (0..5u16).map(|i| ([127, 0, 0, 1], 20 + i).into()).collect(),
        routing: Routing::Plb(PlbSettings {
            premium: vec![0, 1],
            freemium: vec![2, 3],
            params: PlbParams::PAPER
                .with_theta(ServiceClass::Premium, 2)
                .with_theta(ServiceClass::Freemium, 2),
            load_signal: Default::default(),
            recovery_drain: false,
            tiers: None,
        }),
        role_events_capacity: 1 << 16,
        control_queue_capacity: 1024,
        claim_attempts: 4,
        probe_login: None,
    })
    .expect("router")
}

/// One shard: admissions in flight keyed by request id, open sessions, a mailbox.
fn shard_loop(router: Arc<ReplicaRouter>, shard: u64) -> (u64, u64) {
    let me = std::thread::current();
    let mailbox = ReplyMailbox::new(move || me.unpark());
    let mut random = SplitMix64::new(shard);
    let mut pending: HashMap<u64, ServiceClass> = HashMap::new();
    let mut open: Vec<SessionLease> = Vec::new();
    let (mut next_id, mut answered_by_control) = (shard << 32, 0u64);
    let last_id = next_id + SESSIONS_PER_SHARD;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next_id < last_id || !pending.is_empty() {
        assert!(Instant::now() < deadline, "shard {shard} stalled");
        while let Some(reply) = mailbox.poll_reply() {
            let class = pending.remove(&reply.request_id).unwrap_or_else(|| {
                panic!("shard {shard}: unknown or repeated id {}", reply.request_id)
            });
            let lease = reply.result.expect("admitted");
            assert_eq!(
                lease.class(),
                class.into(),
                "the reply belongs to this request"
            );
            open.push(lease);
            answered_by_control += 1;
        }
        if next_id < last_id && pending.len() < IN_FLIGHT_PER_SHARD {
            let class = if random.below(2) == 0 {
                ServiceClass::Premium
            } else {
                ServiceClass::Freemium
            };
            match router.admit_session(class, &mailbox, next_id) {
                Admission::Placed(lease) => open.push(lease),
                Admission::Pending => {
                    pending.insert(next_id, class);
                }
                Admission::Refused(error) => panic!("refused: {error}"),
            }
            next_id += 1;
        } else if !pending.is_empty() {
            std::thread::park_timeout(Duration::from_millis(2));
        }
        // Close sessions at random so load rises and falls (borrows, then returns).
        if open.len() > 20 || (!open.is_empty() && random.below(4) == 0) {
            let index = random.below(open.len() as u64) as usize;
            drop(open.swap_remove(index));
        }
    }
    drop(open);
    (SESSIONS_PER_SHARD, answered_by_control)
}

#[test]
fn replies_reach_the_right_shard_exactly_once() {
    let router = router();
    let plane = ControlPlane::start(
        &[Arc::clone(&router)],
        ControlOptions {
            probes: false,
            return_tick: Duration::from_millis(1),
            ..ControlOptions::default()
        },
    )
    .expect("plane");
    let shards: Vec<_> = (1..=SHARDS)
        .map(|shard| {
            let router = Arc::clone(&router);
            std::thread::spawn(move || shard_loop(router, shard))
        })
        .collect();
    let mut via_control = 0;
    for shard in shards {
        let (sessions, answered) = shard.join().expect("shard panicked");
        assert_eq!(sessions, SESSIONS_PER_SHARD);
        via_control += answered;
    }
    plane.shutdown();
    let stats = router.stats();
    assert_eq!(
        stats.control_admissions, via_control,
        "every pending admission answered once"
    );
    assert_eq!(
        stats.local_admissions + stats.control_admissions,
        SHARDS * SESSIONS_PER_SHARD
    );
    assert!(via_control > 0, "the test exercised the control path");
    assert_eq!(router.total_sessions(), 0);
    println!(
        "{} sessions on {SHARDS} shards: {} local, {via_control} answered through mailboxes, {} role events",
        SHARDS * SESSIONS_PER_SHARD,
        stats.local_admissions,
        router.events_recorded()
    );
}
