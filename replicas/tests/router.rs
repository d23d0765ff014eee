//! Stress test of the replica router: many threads admitting and releasing sessions against
//! one router while the control shard runs, then proof from the event log that no role change
//! was lost or applied twice, that every table state respected the policy's invariants, and
//! that every count went back to zero.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use pgtier_core::config::{PlbSettings, Routing};
use pgtier_policy::{ChangeReason, PlbParams, ReplicaId, RoleTable, ServiceClass, SplitMix64};
use pgtier_replicas::{
    Admission, ControlEvent, ControlOptions, ControlPlane, EventKind, ReplicaRouter, ReplyMailbox,
    RouterConfig, ServerFailureCause, SessionLease,
};

const THREADS: usize = 8;
const OPERATIONS_PER_THREAD: usize = 100_000;
const MAX_HELD_PER_THREAD: usize = 8;
const THETA: u32 = 3;
/// Admissions after which the Mixed replica is failed (about two thirds of the run).
const FAIL_AFTER_ADMISSIONS: u64 = 100_000;

fn settings() -> PlbSettings {
    PlbSettings {
        premium: vec![0, 1],
        freemium: vec![2, 3],
        params: PlbParams::PAPER
            .with_theta(ServiceClass::Premium, THETA)
            .with_theta(ServiceClass::Freemium, THETA),
        load_signal: Default::default(),
        recovery_drain: false,
        tiers: None,
    }
}

fn params() -> PlbParams {
    PlbParams::PAPER
        .with_theta(ServiceClass::Premium, THETA)
        .with_theta(ServiceClass::Freemium, THETA)
}

fn stress_router() -> Arc<ReplicaRouter> {
    ReplicaRouter::new(RouterConfig {
        name: "stress".to_string(),
        replicas: (0..5u16).map(|i| ([127, 0, 0, 1], 2 + i).into()).collect(),
        routing: Routing::Plb(settings()),
        role_events_capacity: 1 << 20,
        control_queue_capacity: 4096,
        claim_attempts: 8,
        probe_login: None,
    })
    .expect("router")
}

/// Invariants of every table state in this test: K fixed, every role well formed, the
/// Freemium floor and the Premium target kept (the floors only protect the persistent pools).
fn check_invariants(table: &RoleTable, at: &str) {
    assert_eq!(table.len(), 5, "{at}: K is fixed");
    for role in table.roles() {
        assert!(role.is_valid(), "{at}: malformed role {role}");
    }
    let survivors = table.up_count();
    let vector = table.vector();
    if survivors == 5 {
        assert!(vector.freemium >= 1, "{at}: freemium floor broken: {table}");
        assert!(vector.premium >= 2, "{at}: premium target broken: {table}");
    } else {
        assert!(
            vector.freemium >= 1 && vector.premium >= 1,
            "{at}: a class lost its pool: {table}"
        );
    }
}

/// Admits one session, waiting for the control shard's reply like a shard loop would.
fn admit(
    router: &Arc<ReplicaRouter>,
    mailbox: &Arc<ReplyMailbox>,
    class: ServiceClass,
    id: u64,
) -> SessionLease {
    match router.admit_session(class, mailbox, id) {
        Admission::Placed(lease) => lease,
        Admission::Refused(error) => panic!("refused: {error}"),
        Admission::Pending => {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(reply) = mailbox.poll_reply() {
                    assert_eq!(reply.request_id, id, "reply for another request");
                    return reply.result.expect("admitted by the control shard");
                }
                assert!(Instant::now() < deadline, "no reply from the control shard");
                std::thread::park_timeout(Duration::from_millis(5));
            }
        }
    }
}

/// Fills to `MAX_HELD_PER_THREAD` and drains to zero in phases of `PHASE` that all threads
/// share, so the total load swings past `θ` (borrows) and back below `τ` (returns).
fn worker(router: Arc<ReplicaRouter>, seed: u64, placed: Arc<AtomicU64>, started: Instant) {
    const PHASE: Duration = Duration::from_millis(4);
    let me = std::thread::current();
    let mailbox = ReplyMailbox::new(move || me.unpark());
    let mut random = SplitMix64::new(seed);
    let mut held: Vec<SessionLease> = Vec::with_capacity(MAX_HELD_PER_THREAD);
    for op in 0..OPERATIONS_PER_THREAD {
        let filling = (started.elapsed().as_millis() / PHASE.as_millis()).is_multiple_of(2);
        if !filling && held.is_empty() {
            std::thread::yield_now();
            continue;
        }
        if filling && held.len() < MAX_HELD_PER_THREAD {
            let class = if random.below(2) == 0 {
                ServiceClass::Premium
            } else {
                ServiceClass::Freemium
            };
            held.push(admit(&router, &mailbox, class, op as u64));
            placed.fetch_add(1, Ordering::Relaxed);
        } else {
            let index = random.below(held.len() as u64) as usize;
            drop(held.swap_remove(index));
        }
    }
}

/// Replays the role changes of the log over the initial table: each change must find the role
/// it was decided against (a change applied twice or lost would not), and every table that was
/// published must satisfy the invariants. The steps of one failure handling (Down or Rejoin,
/// canonicalization, repair) are published together, so they are checked after the last one.
/// Returns the final table.
fn replay(initial: &RoleTable, events: &[ControlEvent]) -> RoleTable {
    let mut table = initial.clone();
    for (index, event) in events.iter().enumerate() {
        let EventKind::Role { change, .. } = &event.kind else {
            continue;
        };
        table.apply(change, &params()).unwrap_or_else(|conflict| {
            panic!("event {} does not replay: {change}: {conflict}", event.seq)
        });
        let batch_continues = event.is_failure_handling()
            && events.get(index + 1).is_some_and(|next| {
                matches!(next.kind, EventKind::Role { .. }) && next.is_failure_handling()
            });
        if !batch_continues {
            check_invariants(&table, &format!("after event {}", event.seq));
        }
    }
    table
}

#[test]
fn concurrent_admissions_never_lose_or_duplicate_a_role_change() {
    let router = stress_router();
    let plane = ControlPlane::start(
        &[Arc::clone(&router)],
        ControlOptions {
            return_tick: Duration::from_millis(2),
            probes: false,
            ..ControlOptions::default()
        },
    )
    .expect("control plane");

    let stop = Arc::new(AtomicBool::new(false));
    let observer = {
        let (router, stop) = (Arc::clone(&router), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut last_generation = 0;
            let mut seen = 0u64;
            while !stop.load(Ordering::Acquire) {
                let snapshot = router.snapshot();
                assert!(
                    snapshot.generation >= last_generation,
                    "generations go backwards"
                );
                if snapshot.generation != last_generation {
                    check_invariants(
                        snapshot.table.classes().expect("a two-class table"),
                        &format!("generation {}", snapshot.generation),
                    );
                    seen += 1;
                }
                last_generation = snapshot.generation;
                std::thread::yield_now();
            }
            seen
        })
    };

    let placed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..THREADS)
        .map(|i| {
            let (router, placed) = (Arc::clone(&router), Arc::clone(&placed));
            std::thread::spawn(move || worker(router, 0xC0FFEE + i as u64, placed, started))
        })
        .collect();
    // Late in the run the Mixed replica fails: repair runs concurrently with admissions.
    let deadline = Instant::now() + Duration::from_secs(2);
    while placed.load(Ordering::Relaxed) < FAIL_AFTER_ADMISSIONS && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    router.report_server_failure(ReplicaId(4), ServerFailureCause::ConnectionReset);
    for worker in workers {
        worker.join().expect("worker panicked");
    }
    let elapsed = started.elapsed();
    // The control thread takes the failure report from its queue when it next runs, which on a
    // loaded machine can be after the last admission; shutting the plane down first would drop
    // it. Let it be handled (bounded) before stopping.
    let handled_by = Instant::now() + Duration::from_secs(10);
    while !router.is_down(ReplicaId(4)) && Instant::now() < handled_by {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    let observed = observer.join().expect("observer panicked");
    plane.shutdown();

    assert_eq!(router.total_sessions(), 0, "every count released");
    let events = router.events();
    assert_eq!(
        events.len() as u64,
        router.events_recorded(),
        "the ring kept every event"
    );
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event.seq, index as u64 + 1, "sequence numbers are gapless");
    }
    let initial = router.initial_table().classes().expect("a two-class table");
    let final_table = replay(initial, &events);
    assert_eq!(
        Some(&final_table),
        router.snapshot().table.classes(),
        "replaying the log gives the published table"
    );
    assert!(router.is_down(ReplicaId(4)));

    let count = |keep: fn(ChangeReason) -> bool| {
        events
            .iter()
            .filter(|e| matches!(&e.kind, EventKind::Role { change, .. } if keep(change.reason)))
            .count()
    };
    let borrows = count(|r| r.is_borrow());
    let returns = count(|r| {
        matches!(
            r,
            ChangeReason::ReturnToMixed | ChangeReason::ReturnToUnmetTarget
        )
    });
    let downs = count(|r| r == ChangeReason::Down);
    assert_eq!(downs, 1, "one Down applied once");
    assert!(
        borrows > 0 && returns > 0,
        "the test exercised borrows ({borrows}) and returns ({returns})"
    );
    let stats = router.stats();
    assert_eq!(
        stats.local_admissions + stats.control_admissions,
        placed.load(Ordering::Relaxed),
        "every admission was decided exactly once"
    );
    assert!(
        stats.local_admissions > stats.control_admissions,
        "the common case is local"
    );
    println!(
        "{} admissions by {THREADS} threads in {elapsed:?} ({} local, {} via the control shard, \
         {} lost races); {borrows} borrows, {returns} returns, {} events, {observed} snapshots \
         observed; final table {}",
        placed.load(Ordering::Relaxed),
        stats.local_admissions,
        stats.control_admissions,
        stats.claim_races,
        events.len(),
        router
            .snapshot()
            .table
            .classes()
            .expect("a two-class table")
    );
}
