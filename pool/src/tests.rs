//! Scenario tests of a slice (and of several slices sharing budgets). The submodules test the
//! handover between workers, eviction, logins, draining and waiting by class one behaviour at
//! a time, and `model` drives random operations on three slices against a model: a server is
//! never in two places, counts and budgets always agree, waiters are served in their pool's
//! order.

use crate::*;
use crate::{handover::SlotGrant, lease::CloseReason, pool::PoolCounts, slice::Expired};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Slice = PoolSlice<u32, u32>;

fn key(user: &str) -> PoolKey {
    PoolKey::new(
        "db".into(),
        user.into(),
        ServerTarget::Primary,
        StartupProfile::default(),
    )
}

fn limits(pool_size: u32) -> PoolLimits {
    PoolLimits::with_budget(Arc::new(PoolBudget::new(pool_size, 0)))
}

fn secs(count: u64) -> Duration {
    Duration::from_secs(count)
}

/// Opens a server through the slice and checks it in idle.
fn open_idle(slice: &mut Slice, id: PoolId, server: u32, now: Instant) {
    assert_eq!(slice.try_open(id, now), Ok(()));
    assert_eq!(slice.opened(id, server, now), Checkin::Pooled);
}

#[test]
fn checkout_reuses_most_recently_used_first() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    let lease = slice.checkout(id).expect("idle server");
    assert_eq!(lease.server, 2);
    assert_eq!(slice.checkin(id, lease, t0 + secs(1)), Checkin::Pooled);
    assert_eq!(slice.checkout(id).map(|lease| lease.server), Some(2));
    assert_eq!(
        slice.counts(id),
        PoolCounts {
            idle: 1,
            active: 1,
            opening: 0,
            leaving: 0,
            waiting: 0
        }
    );
}

#[test]
fn take_idle_checks_out_that_idle_server() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    let lease = slice.take_idle(id, &1).expect("idle");
    assert_eq!(lease.server, 1);
    assert_eq!((slice.counts(id).idle, slice.counts(id).active), (1, 1));
    assert_eq!(slice.checkout(id).map(|lease| lease.server), Some(2));
}

#[test]
fn take_idle_of_a_server_that_is_not_idle_is_none() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    let _busy = slice.checkout(id).expect("server");
    assert_eq!(slice.take_idle(id, &1), None);
    assert_eq!(slice.counts(id).active, 1);
}

#[test]
fn same_key_same_pool_and_exact_match_only() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(slice.register(&key("alice"), &limits(5), t0), Ok(alice));
    let bob = slice
        .register(&key("bob"), &limits(5), t0)
        .expect("register");
    assert_ne!(alice, bob);
    let with_options = PoolKey {
        profile: StartupProfile::from_parameters([("options", "-c work_mem=1MB")]),
        ..key("alice")
    };
    assert_ne!(slice.register(&with_options, &limits(5), t0), Ok(alice));
    assert_eq!(slice.find(&key("alice")), Some(alice));
    open_idle(&mut slice, alice, 1, Instant::now());
    assert_eq!(slice.checkout(bob), None, "bob never gets alice's server");
}

#[test]
fn unused_pools_are_forgotten_and_ids_go_stale() {
    let t0 = Instant::now();
    let mut slice = Slice::new(1, 2);
    let first = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(
        slice.register(&key("bob"), &limits(5), t0),
        Err(PoolError::TooManyPools { max_pools: 1 })
    );
    slice.unregister(first);
    assert_eq!(slice.find(&key("alice")), None);
    assert_eq!(slice.key(first), None, "stale id");
    let second = slice
        .register(&key("bob"), &limits(5), t0)
        .expect("slot reused");
    assert_ne!(first, second);
    assert_eq!(slice.checkout(first), None);
}

#[test]
fn pool_with_idle_servers_outlives_its_sessions() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    slice.unregister(id);
    assert_eq!(slice.find(&key("alice")), Some(id));
    let mut closing = Vec::new();
    slice.collect_closable(t0 + secs(601), &mut closing);
    assert_eq!(closing.len(), 1);
    assert_eq!(closing[0].reason, CloseReason::IdleTimeout);
    assert_eq!(slice.find(&key("alice")), None);
}

#[test]
fn checkin_hands_off_to_waiters_first_come_first_served() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    open_idle(&mut slice, id, 7, t0);
    let lease = slice.checkout(id).expect("server");
    assert_eq!(
        slice.try_open(id, t0),
        Err(Refusal::PoolFull),
        "pool_size 1 is spent"
    );
    for client in [100, 101, 102] {
        slice
            .park(id, client, t0, Some(t0 + secs(120)))
            .expect("parked");
    }
    let Checkin::Handoff { waiter, lease } = slice.checkin(id, lease, t0 + secs(1)) else {
        panic!("expected a handoff");
    };
    assert_eq!((waiter, lease.server), (100, 7));
    let Checkin::Handoff { waiter, .. } = slice.checkin(id, lease, t0 + secs(2)) else {
        panic!("expected a handoff");
    };
    assert_eq!(waiter, 101);
    assert_eq!(
        slice.counts(id),
        PoolCounts {
            idle: 0,
            active: 1,
            opening: 0,
            leaving: 0,
            waiting: 1
        }
    );
}

#[test]
fn new_server_goes_to_the_oldest_waiter() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    let Checkin::Handoff { waiter, lease } = slice.opened(id, 9, t0) else {
        panic!("expected a handoff");
    };
    assert_eq!((waiter, lease.server, lease.opened_at), (100, 9, t0));
    assert_eq!(slice.counts(id).active, 1);
}

#[test]
fn waiters_expire_in_deadline_order() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let a = slice.register(&key("a"), &limits(1), t0).expect("register");
    let b = slice.register(&key("b"), &limits(1), t0).expect("register");
    slice.park(a, 1, t0, Some(t0 + secs(10))).expect("parked");
    slice.park(b, 2, t0, Some(t0 + secs(11))).expect("parked");
    slice.park(a, 3, t0, None).expect("parked");
    slice.park(a, 4, t0, Some(t0 + secs(12))).expect("parked");
    assert_eq!(slice.next_deadline(), Some(t0 + secs(10)));
    assert_eq!(slice.poll_expired(t0 + secs(9)), None);
    assert_eq!(
        slice.poll_expired(t0 + secs(11)),
        Some(Expired { pool: a, waiter: 1 })
    );
    assert_eq!(
        slice.poll_expired(t0 + secs(11)),
        Some(Expired { pool: b, waiter: 2 })
    );
    assert_eq!(slice.poll_expired(t0 + secs(11)), None);
    assert_eq!(slice.next_deadline(), Some(t0 + secs(12)));
    assert_eq!(
        slice.next_waiter(a),
        Some(3),
        "the waiter without deadline stays first"
    );
    assert_eq!(
        slice.poll_expired(t0 + secs(60)),
        Some(Expired { pool: a, waiter: 4 })
    );
    assert_eq!(slice.next_deadline(), None);
}

#[test]
fn cancelled_waiter_leaves_the_queue_and_its_ticket_goes_stale() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    let first = slice.park(id, 1, t0, Some(t0 + secs(5))).expect("parked");
    slice.park(id, 2, t0, Some(t0 + secs(6))).expect("parked");
    assert_eq!(slice.cancel_wait(first), Some(1));
    assert_eq!(slice.cancel_wait(first), None);
    assert_eq!(slice.next_deadline(), Some(t0 + secs(6)));
    let reused = slice.park(id, 3, t0, None).expect("parked");
    assert_ne!(reused, first);
    assert_eq!(
        slice.cancel_wait(first),
        None,
        "stale ticket does not cancel the new waiter"
    );
    assert_eq!(slice.next_waiter(id), Some(2));
    assert_eq!(slice.next_waiter(id), Some(3));
    assert_eq!(slice.next_waiter(id), None);
}

#[test]
fn lifetime_closes_at_checkin_and_zero_means_one_use() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let mut short = limits(2);
    short.server_lifetime = secs(30);
    let id = slice.register(&key("alice"), &short, t0).expect("register");
    open_idle(&mut slice, id, 1, t0);
    let lease = slice.checkout(id).expect("server");
    assert_eq!(slice.checkin(id, lease, t0 + secs(29)), Checkin::Pooled);
    let lease = slice.checkout(id).expect("server");
    let Checkin::Close {
        reason,
        open_replacement,
        ..
    } = slice.checkin(id, lease, t0 + secs(30))
    else {
        panic!("expected a close");
    };
    assert_eq!((reason, open_replacement), (CloseReason::Lifetime, false));

    let mut once = limits(2);
    once.server_lifetime = Duration::ZERO;
    let id = slice.register(&key("once"), &once, t0).expect("register");
    open_idle(&mut slice, id, 2, t0);
    let lease = slice.checkout(id).expect("fresh server is usable");
    assert!(matches!(
        slice.checkin(id, lease, t0),
        Checkin::Close {
            reason: CloseReason::Lifetime,
            ..
        }
    ));
}

#[test]
fn lifetime_close_with_waiters_opens_a_replacement() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let mut short = limits(1);
    short.server_lifetime = secs(30);
    let id = slice.register(&key("alice"), &short, t0).expect("register");
    open_idle(&mut slice, id, 1, t0);
    let lease = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    let Checkin::Close {
        open_replacement, ..
    } = slice.checkin(id, lease, t0 + secs(31))
    else {
        panic!("expected a close");
    };
    assert!(open_replacement);
    assert_eq!(
        slice.counts(id),
        PoolCounts {
            idle: 0,
            active: 0,
            opening: 1,
            leaving: 0,
            waiting: 1
        }
    );
}

#[test]
fn idle_timeout_closes_least_recently_used_above_min_pool_size() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let mut warm = limits(5);
    warm.min_pool_size = 1;
    let id = slice.register(&key("alice"), &warm, t0).expect("register");
    for server in 1..=3 {
        open_idle(&mut slice, id, server, t0);
    }
    let newest = slice.checkout(id).expect("server 3");
    slice.checkin(id, newest, t0 + secs(500));
    let mut closing = Vec::new();
    slice.collect_closable(t0 + secs(650), &mut closing);
    let closed: Vec<_> = closing.iter().map(|closing| closing.lease.server).collect();
    assert_eq!(closed, [1, 2]);
    slice.collect_closable(t0 + secs(2000), &mut closing);
    assert_eq!(closing.len(), 2, "min_pool_size keeps the last one");
    assert_eq!(slice.counts(id).idle, 1);
}

#[test]
fn idle_servers_past_lifetime_are_collected() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let mut never_idle_out = limits(5);
    never_idle_out.server_idle_timeout = None;
    let id = slice
        .register(&key("alice"), &never_idle_out, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0 + secs(100));
    let mut closing = Vec::new();
    slice.collect_closable(t0 + secs(3650), &mut closing);
    assert_eq!(closing.len(), 1);
    assert_eq!(
        (closing[0].lease.server, closing[0].reason),
        (1, CloseReason::Lifetime)
    );
}

#[test]
fn pool_size_holds_across_slices() {
    let t0 = Instant::now();
    let shared = limits(3);
    let mut slices: Vec<Slice> = (0..4).map(|_| Slice::new(10, 2)).collect();
    let ids: Vec<_> = slices
        .iter_mut()
        .map(|slice| {
            slice
                .register(&key("alice"), &shared, t0)
                .expect("register")
        })
        .collect();
    let mut opened = 0;
    for (slice, id) in slices.iter_mut().zip(&ids) {
        opened += usize::from(slice.try_open(*id, t0).is_ok());
    }
    assert_eq!(opened, 3);
    assert_eq!(shared.pool_budget.in_use(), 3);
}

#[test]
fn shared_database_budget_caps_pools_of_different_users() {
    let t0 = Instant::now();
    let database_budget = Arc::new(PoolBudget::new(2, 0));
    let mut slice = Slice::new(10, 2);
    let with_db_cap = |pool_size| PoolLimits {
        shared_budgets: vec![Arc::clone(&database_budget)],
        ..limits(pool_size)
    };
    let alice = slice
        .register(&key("alice"), &with_db_cap(5), t0)
        .expect("register");
    let bob = slice
        .register(&key("bob"), &with_db_cap(5), t0)
        .expect("register");
    assert_eq!(slice.try_open(alice, t0), Ok(()));
    assert_eq!(slice.try_open(bob, t0), Ok(()));
    assert_eq!(
        slice.try_open(alice, t0),
        Err(Refusal::SharedFull { budget: 0 })
    );
    assert_eq!(
        slice.pool_budget_in_use(alice),
        1,
        "refused open gave its pool slot back"
    );
    slice.open_failed(bob, t0, None);
    assert_eq!(slice.try_open(alice, t0), Ok(()));
}

#[test]
fn a_starving_slice_asks_by_message_not_through_its_pool_budget() {
    let t0 = Instant::now();
    let shared = limits(1);
    let mut holder = Slice::new(10, 2);
    let mut starving = Slice::new(10, 2);
    let held = holder
        .register(&key("alice"), &shared, t0)
        .expect("register");
    let wanted = starving
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut holder, held, 1, t0);
    starving
        .park(wanted, 100, t0, Some(t0 + secs(120)))
        .expect("parked");
    assert_eq!(starving.try_open(wanted, t0), Err(Refusal::PoolFull));
    assert_eq!(
        shared.pool_budget.release_requests(),
        0,
        "the holder is asked for this key's server, which moves whole"
    );
    assert!(starving.should_ask_others(wanted, t0));
    let mut closing = Vec::new();
    holder.collect_closable(t0 + secs(1), &mut closing);
    assert!(closing.is_empty(), "the idle server is not closed for it");
    assert!(matches!(
        holder.release_for(&key("alice"), 1),
        Release::Now(Lease { server: 1, .. })
    ));
}

#[test]
fn warmup_opens_to_min_pool_size_counted_across_slices() {
    let t0 = Instant::now();
    let mut warm = limits(10);
    warm.min_pool_size = 3;
    let mut first = Slice::new(10, 2);
    let mut second = Slice::new(10, 2);
    let a = first.register(&key("alice"), &warm, t0).expect("register");
    let b = second.register(&key("alice"), &warm, t0).expect("register");
    let mut opens = Vec::new();
    first.collect_opens(t0, &mut opens);
    assert_eq!(opens, [a, a, a]);
    opens.clear();
    second.collect_opens(t0, &mut opens);
    assert!(opens.is_empty(), "the other slice already opens enough");
    for server in 1..=3 {
        assert_eq!(first.opened(a, server, t0), Checkin::Pooled);
    }
    assert_eq!(second.counts(b).servers(), 0);
}

#[test]
fn a_pool_kept_warm_everywhere_splits_min_pool_size_between_workers() {
    let t0 = Instant::now();
    let mut warm = limits(10);
    warm.min_pool_size = 3;
    let mut slices = [Slice::new(10, 2), Slice::new(10, 2)];
    let mut ids = Vec::new();
    for (worker, slice) in slices.iter_mut().enumerate() {
        let id = slice.register(&key("alice"), &warm, t0).expect("register");
        slice.keep_warm(id, Slice::warm_share(3, worker, 2));
        ids.push(id);
    }
    let mut opens = Vec::new();
    slices[0].collect_opens(t0, &mut opens);
    assert_eq!(opens.len(), 2, "worker 0 opens its share of 3, rounded up");
    opens.clear();
    slices[1].collect_opens(t0, &mut opens);
    assert_eq!(opens.len(), 1, "worker 1 the rest");
    assert_eq!(warm.pool_budget.in_use(), 3, "3 in all, not 6");
    opens.clear();
    slices[1].collect_opens(t0, &mut opens);
    assert!(opens.is_empty());
    // Its servers left for the other worker (moved there): the minimum is still met.
    assert_eq!(slices[1].opened(ids[1], 9, t0), Checkin::Pooled);
    let Release::Now(_) = slices[1].release_for(&key("alice"), 0) else {
        panic!("idle server leaves");
    };
    slices[1].moved(ids[1], 0);
    opens.clear();
    slices[1].collect_opens(t0, &mut opens);
    assert!(
        opens.is_empty(),
        "the total is what counts once the share is met or moved"
    );
}

#[test]
fn warm_shares_add_up_to_the_minimum() {
    for workers in 1..6 {
        for min in 0..12 {
            let total: u32 = (0..workers)
                .map(|w| Slice::warm_share(min, w, workers))
                .sum();
            assert_eq!(total, min, "{min} over {workers}");
        }
    }
}

#[test]
fn failed_open_waits_for_retry_time() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    slice.open_failed(id, t0 + secs(15), None);
    assert_eq!(slice.counts(id).opening, 0);
    assert_eq!(slice.try_open(id, t0 + secs(14)), Err(Refusal::NotNow));
    let mut opens = Vec::new();
    slice.collect_opens(t0 + secs(14), &mut opens);
    assert!(opens.is_empty());
    slice.collect_opens(t0 + secs(15), &mut opens);
    assert_eq!(opens, [id]);
}

#[test]
fn reserve_is_used_only_after_reserve_pool_timeout() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let reserve = PoolLimits {
        reserve_pool_timeout: Some(secs(5)),
        ..PoolLimits::with_budget(Arc::new(PoolBudget::new(1, 1)))
    };
    let id = slice
        .register(&key("alice"), &reserve, t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    assert!(!slice.take_reserve_open(id), "within pool_size");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.try_open(id, t0 + secs(4)), Err(Refusal::PoolFull));
    assert_eq!(slice.try_open(id, t0 + secs(5)), Ok(()));
    assert!(slice.take_reserve_open(id), "from the reserve");
    assert!(!slice.take_reserve_open(id), "told once");
    assert_eq!(
        slice.try_open(id, t0 + secs(6)),
        Err(Refusal::PoolFull),
        "reserve spent"
    );
}

#[test]
fn a_server_opened_from_the_reserve_stays_in_the_pool() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    let reserve = PoolLimits {
        reserve_pool_timeout: Some(secs(5)),
        ..PoolLimits::with_budget(Arc::new(PoolBudget::new(1, 1)))
    };
    let id = slice
        .register(&key("alice"), &reserve, t0)
        .expect("register");
    open_idle(&mut slice, id, 7, t0);
    let _held = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.try_open(id, t0 + secs(5)), Ok(()));
    let Checkin::Handoff { waiter, lease } = slice.opened(id, 8, t0 + secs(5)) else {
        panic!("the reserve server goes to the waiter");
    };
    assert_eq!(waiter, 100);
    // As in PgBouncer, the reserve server is not closed when it comes back: the next
    // client uses it without waiting again.
    assert_eq!(slice.checkin(id, lease, t0 + secs(6)), Checkin::Pooled);
    assert_eq!(slice.checkout(id).map(|lease| lease.server), Some(8));
}

#[test]
fn draining_pool_closes_everything_and_opens_nothing() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let replica: std::net::SocketAddr = "127.0.0.1:15431".parse().expect("addr");
    let replica_key = PoolKey {
        target: ServerTarget::Replica(replica),
        ..key("alice")
    };
    let shared = limits(5);
    let id = slice.register(&replica_key, &shared, t0).expect("register");
    let other = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    open_idle(&mut slice, other, 3, t0);
    let lease = slice.checkout(id).expect("server");
    slice.drain_where(|key| key.target == ServerTarget::Replica(replica));
    assert!(slice.is_draining(id) && !slice.is_draining(other));
    assert_eq!(slice.try_open(id, t0), Err(Refusal::NotNow));
    let mut closing = Vec::new();
    slice.collect_closable(t0, &mut closing);
    assert_eq!(
        closing
            .iter()
            .map(|closing| closing.lease.server)
            .collect::<Vec<_>>(),
        [1]
    );
    assert!(matches!(
        slice.checkin(id, lease, t0),
        Checkin::Close {
            reason: CloseReason::Draining,
            ..
        }
    ));
    assert_eq!(shared.pool_budget.in_use(), 0);
}

#[test]
fn closed_active_server_frees_its_slot_and_replaces_for_waiters() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let shared = limits(1);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    let _dirty = slice.checkout(id).expect("server");
    assert!(!slice.closed(id, t0), "no waiter, no replacement");
    assert_eq!(shared.pool_budget.in_use(), 0);
    open_idle(&mut slice, id, 2, t0);
    let _broken = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    assert!(slice.closed(id, t0));
    assert_eq!(
        slice.counts(id),
        PoolCounts {
            idle: 0,
            active: 0,
            opening: 1,
            leaving: 0,
            waiting: 1
        }
    );
}

#[test]
fn lowered_pool_size_shrinks_the_pool() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let shared = limits(3);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    for server in 1..=3 {
        open_idle(&mut slice, id, server, t0);
    }
    let lease = slice.checkout(id).expect("server");
    shared.pool_budget.set_limit(1, 0);
    let mut closing = Vec::new();
    slice.collect_closable(t0, &mut closing);
    let reasons: Vec<_> = closing.iter().map(|closing| closing.reason).collect();
    assert_eq!(reasons, [CloseReason::OverLimit, CloseReason::OverLimit]);
    assert_eq!(
        slice.checkin(id, lease, t0),
        Checkin::Pooled,
        "now within the limit"
    );
    open_idle_refused(&mut slice, id, t0);
    shared.pool_budget.set_limit(3, 0);
    open_idle(&mut slice, id, 4, t0);
    let first = slice.checkout(id).expect("server");
    let second = slice.checkout(id).expect("server");
    shared.pool_budget.set_limit(1, 0);
    assert!(matches!(
        slice.checkin(id, first, t0),
        Checkin::Close {
            reason: CloseReason::OverLimit,
            ..
        }
    ));
    assert_eq!(slice.checkin(id, second, t0), Checkin::Pooled);
    assert_eq!(shared.pool_budget.in_use(), 1);
}

fn open_idle_refused(slice: &mut Slice, id: PoolId, now: Instant) {
    assert_eq!(
        slice.try_open(id, now),
        Err(Refusal::PoolFull),
        "budget is spent"
    );
}

#[test]
fn warmup_deficit_counts_all_workers() {
    let t0 = Instant::now();
    let mut warm = limits(10);
    warm.min_pool_size = 2;
    let mut slice = Slice::new(10, 2);
    let id = slice.register(&key("alice"), &warm, t0).expect("register");
    assert_eq!(slice.warmup_deficit(id), 2);
    assert!(warm.pool_budget.try_acquire(), "another worker opened one");
    assert_eq!(slice.warmup_deficit(id), 1);
}

#[test]
fn totals_and_pool_listing() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let a = slice.register(&key("a"), &limits(5), t0).expect("register");
    let b = slice.register(&key("b"), &limits(5), t0).expect("register");
    open_idle(&mut slice, a, 1, t0);
    open_idle(&mut slice, b, 2, t0);
    let _lease = slice.checkout(b);
    slice.park(b, 9, t0, None);
    assert_eq!(
        slice.totals(),
        PoolCounts {
            idle: 1,
            active: 1,
            opening: 0,
            leaving: 0,
            waiting: 1
        }
    );
    let users: Vec<_> = slice
        .pools()
        .map(|(_, key, _)| key.server_user.to_string())
        .collect();
    assert_eq!(users, ["a", "b"]);
}

impl Slice {
    fn pool_budget_in_use(&self, id: PoolId) -> u32 {
        self.pool(id)
            .map_or(0, |pool| pool.limits.pool_budget.in_use())
    }
}

mod borrow;
mod draining;
mod eviction;
mod handover;
mod idle_pools;
mod logins;
mod model;
mod vacate;
mod waiting;

#[test]
fn budget_never_exceeded_by_slices_on_threads() {
    const LIMIT: u32 = 5;
    let shared = limits(LIMIT);
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                let mut slice = Slice::new(4, 2);
                let id = slice
                    .register(&key("alice"), &shared, t0)
                    .expect("register");
                for round in 0..5_000u32 {
                    if let Some(lease) = slice.checkout(id) {
                        slice.checkin(id, lease, t0);
                    } else if slice.try_open(id, t0).is_ok() {
                        assert!(shared.pool_budget.in_use() <= LIMIT);
                        slice.opened(id, round, t0);
                    }
                    if round % 7 == 0 {
                        if let Some(_lease) = slice.checkout(id) {
                            slice.closed(id, t0);
                        }
                    }
                }
                let mut closing = Vec::new();
                slice.drain(id);
                slice.collect_closable(t0, &mut closing);
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("slice thread panicked");
    }
    assert_eq!(shared.pool_budget.in_use(), 0);
}

/// `cargo test -p pgtier-pool --release -- --ignored --nocapture checkout_checkin_cost`
#[test]
#[ignore = "timing, run by hand in release mode"]
fn checkout_checkin_cost() {
    const ROUNDS: u32 = 10_000_000;
    let t0 = Instant::now();
    let mut slice = Slice::new(16, 2);
    let id = slice
        .register(&key("alice"), &limits(20), t0)
        .expect("register");
    for server in 0..20 {
        open_idle(&mut slice, id, server, t0);
    }
    let started = std::time::Instant::now();
    for _ in 0..ROUNDS {
        let lease = slice.checkout(id).expect("idle server");
        let outcome = slice.checkin(id, std::hint::black_box(lease), t0);
        std::hint::black_box(outcome);
    }
    let per_cycle = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    println!("checkout + checkin: {per_cycle:.1} ns");
    let started = std::time::Instant::now();
    for waiter in 0..ROUNDS {
        slice.park(id, waiter, t0, Some(t0 + secs(120)));
        std::hint::black_box(slice.next_waiter(id));
    }
    let per_cycle = started.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    println!("park + next_waiter: {per_cycle:.1} ns");
}

#[test]
fn workers_share_a_pools_place_in_its_host_list() {
    let t0 = Instant::now();
    let shared = limits(4);
    let mut first = Slice::new(10, 2);
    let mut second = Slice::new(10, 2);
    let on_first = first
        .register(&key("alice"), &shared, t0)
        .expect("register");
    let on_second = second
        .register(&key("alice"), &shared, t0)
        .expect("register");
    let stay = HostBalance::StayUntilFailure;
    // The first worker's open goes to host 0, which fails: the second worker's next open
    // passes it over, as PgBouncer's one pool would.
    assert_eq!(first.try_open(on_first, t0), Ok(()));
    assert_eq!(first.next_host(on_first, 2, stay), 0);
    first.open_failed(on_first, t0, None);
    assert_eq!(second.try_open(on_second, t0), Ok(()));
    assert_eq!(second.next_host(on_second, 2, stay), 1);
    assert_eq!(second.opened(on_second, 7, t0), Checkin::Pooled);
    assert_eq!(first.next_host(on_first, 2, stay), 1, "host 1 works: stay");
    // Both workers' opens to host 1 fail at once: the turn moves on once, not twice.
    assert_eq!(first.try_open(on_first, t0), Ok(()));
    assert_eq!(second.try_open(on_second, t0), Ok(()));
    first.open_failed(on_first, t0, None);
    second.open_failed(on_second, t0, None);
    assert_eq!(first.next_host(on_first, 2, stay), 0);
    assert_eq!(second.next_host(on_second, 2, stay), 0);
    // Round robin turns once per open, whichever worker opens.
    let round = HostBalance::RoundRobin;
    let picks = [
        first.next_host(on_first, 3, round),
        second.next_host(on_second, 3, round),
        first.next_host(on_first, 3, round),
    ];
    assert_eq!(picks, [2, 0, 1]);
}

#[test]
fn a_starving_pool_under_a_cap_asks_once_and_its_open_withdraws_the_ask() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let capped = PoolLimits {
        shared_budgets: vec![Arc::clone(&cap)],
        ..limits(5)
    };
    let mut holder = Slice::new(10, 2);
    let mut starving = Slice::new(10, 2);
    let held = holder.register(&key("bob"), &capped, t0).expect("register");
    let wanted = starving
        .register(&key("alice"), &capped, t0)
        .expect("register");
    assert_eq!(holder.try_open(held, t0), Ok(()), "bob's server is opening");
    starving.park(wanted, 100, t0, None).expect("parked");
    for _ in 0..3 {
        assert_eq!(
            starving.try_open(wanted, t0),
            Err(Refusal::SharedFull { budget: 0 })
        );
    }
    assert_eq!(cap.release_requests(), 1, "refused three times, asked once");
    // Bob's open fails (not for the ask): Alice's open takes its slot, and the ask is
    // withdrawn, so no idle server is closed for her later.
    holder.open_failed(held, t0, None);
    assert_eq!(starving.try_open(wanted, t0), Ok(()));
    assert_eq!(cap.release_requests(), 0);
}
