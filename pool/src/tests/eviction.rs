//! Closing idle servers of other pools: under a full shared cap, and for room for a new pool.

use super::*;

/// Limits of a pool of size 5 under the shared `cap`.
fn under(cap: &Arc<PoolBudget>) -> PoolLimits {
    PoolLimits {
        shared_budgets: vec![Arc::clone(cap)],
        ..limits(5)
    }
}

#[test]
fn evict_idle_sharing_takes_an_idle_server_of_another_pool_under_the_cap() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &under(&cap), t0)
        .expect("register");
    let bob = slice
        .register(&key("bob"), &under(&cap), t0)
        .expect("register");
    open_idle(&mut slice, bob, 1, t0);
    assert_eq!(
        slice.try_open(alice, t0),
        Err(Refusal::SharedFull { budget: 0 })
    );
    let closing = slice
        .evict_idle_sharing(alice, 0)
        .expect("bob's idle server");
    assert_eq!(
        (
            closing.pool,
            closing.lease.server,
            closing.reason,
            closing.leaving
        ),
        (bob, 1, CloseReason::SharedBudgetFull, true)
    );
}

#[test]
fn evict_idle_sharing_ignores_an_equal_but_different_budget() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let lookalike = Arc::new(PoolBudget::new(1, 0));
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &under(&cap), t0)
        .expect("register");
    let bob = slice
        .register(&key("bob"), &under(&lookalike), t0)
        .expect("register");
    open_idle(&mut slice, bob, 1, t0);
    assert_eq!(slice.evict_idle_sharing(alice, 0), None);
}

#[test]
fn evict_idle_sharing_never_takes_from_the_refused_pool_itself() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &under(&cap), t0)
        .expect("register");
    open_idle(&mut slice, alice, 1, t0);
    assert_eq!(slice.evict_idle_sharing(alice, 0), None);
}

#[test]
fn evict_idle_sharing_takes_the_longest_idle_server() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(3, 0));
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &under(&cap), t0)
        .expect("register");
    let bob = slice
        .register(&key("bob"), &under(&cap), t0)
        .expect("register");
    let carol = slice
        .register(&key("carol"), &under(&cap), t0)
        .expect("register");
    open_idle(&mut slice, bob, 1, t0 + secs(2));
    open_idle(&mut slice, carol, 2, t0 + secs(1));
    let closing = slice.evict_idle_sharing(alice, 0).expect("an idle server");
    assert_eq!((closing.pool, closing.lease.server), (carol, 2));
}

#[test]
fn evicted_server_keeps_its_slots_until_left() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &under(&cap), t0)
        .expect("register");
    let bob = slice
        .register(&key("bob"), &under(&cap), t0)
        .expect("register");
    open_idle(&mut slice, bob, 1, t0);
    slice.park(alice, 100, t0, None).expect("parked");
    let closing = slice
        .evict_idle_sharing(alice, 0)
        .expect("bob's idle server");
    assert_eq!(cap.in_use(), 1, "the backend may still be there");
    let mut opens = Vec::new();
    slice.collect_opens(t0, &mut opens);
    assert!(opens.is_empty(), "no slot before the server is gone");
    assert_eq!(slice.left(closing.pool), None, "back to the budgets");
    assert_eq!(cap.in_use(), 0);
    slice.collect_opens(t0, &mut opens);
    assert_eq!(opens, [alice]);
}

#[test]
fn release_idle_sharing_skips_pools_with_waiters() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(4, 0));
    let mut slice = Slice::new(10, 2);
    let alice = slice
        .register(&key("alice"), &under(&cap), t0)
        .expect("register");
    let bob = slice
        .register(&key("bob"), &under(&cap), t0)
        .expect("register");
    open_idle(&mut slice, alice, 1, t0);
    open_idle(&mut slice, bob, 2, t0 + secs(1));
    slice.park(alice, 100, t0, None).expect("parked");
    let closing = slice.release_idle_sharing(&cap).expect("bob's idle server");
    assert_eq!(
        (closing.pool, closing.reason, closing.leaving),
        (bob, CloseReason::ReleaseRequested, true)
    );
    assert_eq!(slice.release_idle_sharing(&cap), None);
}

#[test]
fn evict_for_room_evicts_the_least_recently_used_unregistered_pool() {
    let t0 = Instant::now();
    let mut slice = Slice::new(2, 2);
    let old = slice
        .register(&key("old"), &limits(5), t0)
        .expect("register");
    let recent = slice
        .register(&key("recent"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, old, 1, t0);
    open_idle(&mut slice, recent, 2, t0);
    let lease = slice.checkout(recent).expect("server");
    slice.checkin(recent, lease, t0 + secs(5));
    slice.unregister(old);
    slice.unregister(recent);
    let mut out = Vec::new();
    assert!(slice.evict_for_room(&mut out));
    assert_eq!(out.len(), 1);
    assert_eq!(
        (
            out[0].pool,
            out[0].lease.server,
            out[0].reason,
            out[0].leaving
        ),
        (old, 1, CloseReason::PoolEvicted, true)
    );
    assert_eq!(slice.find(&key("old")), None);
    assert_eq!(slice.find(&key("recent")), Some(recent));
}

#[test]
fn evict_for_room_spares_registered_and_waited_for_pools() {
    let t0 = Instant::now();
    let mut slice = Slice::new(2, 2);
    let _registered = slice.register(&key("a"), &limits(5), t0).expect("register");
    let waited = slice.register(&key("b"), &limits(5), t0).expect("register");
    slice.park(waited, 100, t0, None).expect("parked");
    slice.unregister(waited);
    let mut out = Vec::new();
    assert!(!slice.evict_for_room(&mut out));
    assert!(out.is_empty());
}

#[test]
fn register_succeeds_right_after_evict_for_room() {
    let t0 = Instant::now();
    let mut slice = Slice::new(1, 2);
    let old = slice
        .register(&key("old"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, old, 1, t0);
    slice.unregister(old);
    assert!(slice.register(&key("new"), &limits(5), t0).is_err());
    let mut out = Vec::new();
    assert!(slice.evict_for_room(&mut out));
    assert!(slice.register(&key("new"), &limits(5), t0).is_ok());
}

#[test]
fn evicted_pool_is_forgotten_once_its_servers_left() {
    let t0 = Instant::now();
    let shared = limits(5);
    let mut slice = Slice::new(1, 2);
    let old = slice.register(&key("old"), &shared, t0).expect("register");
    open_idle(&mut slice, old, 1, t0);
    open_idle(&mut slice, old, 2, t0);
    slice.unregister(old);
    let mut out = Vec::new();
    assert!(slice.evict_for_room(&mut out));
    assert_eq!(slice.counts(old).leaving, 2);
    assert_eq!(
        shared.pool_budget.in_use(),
        2,
        "slots held until the backends are gone"
    );
    slice.left(old);
    assert!(slice.key(old).is_some());
    slice.left(old);
    assert_eq!(slice.key(old), None);
    assert_eq!(shared.pool_budget.in_use(), 0);
}

#[test]
fn evicted_empty_pool_is_forgotten_at_once() {
    let t0 = Instant::now();
    let mut slice = Slice::new(1, 2);
    let old = slice
        .register(&key("old"), &limits(5), t0)
        .expect("register");
    let failing_until = t0 + secs(15);
    assert_eq!(slice.try_open(old, t0), Ok(()));
    slice.open_failed(old, failing_until, Some(Bytes::from_static(b"E")));
    slice.unregister(old);
    assert!(slice.key(old).is_some(), "kept for its login failure");
    let mut out = Vec::new();
    assert!(slice.evict_for_room(&mut out));
    assert!(out.is_empty());
    assert_eq!(slice.key(old), None);
}

#[test]
fn a_key_evicted_while_its_servers_leave_registers_a_fresh_pool() {
    let t0 = Instant::now();
    let mut slice = Slice::new(1, 2);
    let old = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    open_idle(&mut slice, old, 1, t0);
    slice.unregister(old);
    let mut out = Vec::new();
    assert!(slice.evict_for_room(&mut out));
    let fresh = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_ne!(fresh, old);
    slice.left(old);
    assert_eq!(
        slice.find(&key("alice")),
        Some(fresh),
        "forgetting the old pool leaves the fresh one listed"
    );
}

#[test]
fn a_pool_sharing_its_own_budget_evicts_an_idle_server_of_the_other() {
    let t0 = Instant::now();
    // A replication pool's key has its own profile, but its servers count in the ordinary
    // pool's budget (the engine hands both the same one).
    let budget = Arc::new(PoolBudget::new(1, 0));
    let shared = PoolLimits::with_budget(Arc::clone(&budget));
    let replication_key = PoolKey {
        profile: StartupProfile::of_replication([("replication", "database")]),
        ..key("alice")
    };
    assert!(replication_key.profile.is_replication());
    let mut slice = Slice::new(10, 2);
    let ordinary = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    let replication = slice
        .register(&replication_key, &shared, t0)
        .expect("register");
    assert!(
        slice.evict_idle_sibling(replication).is_none(),
        "nothing idle"
    );
    open_idle(&mut slice, ordinary, 1, t0);
    assert_eq!(slice.try_open(replication, t0), Err(Refusal::PoolFull));
    let closing = slice
        .evict_idle_sibling(replication)
        .expect("the ordinary pool's idle server");
    assert_eq!(
        (
            closing.pool,
            closing.lease.server,
            closing.reason.is_eviction()
        ),
        (ordinary, 1, true)
    );
    // Its slot comes back once it is closed: the replication pool opens with it.
    assert_eq!(slice.left(ordinary), None);
    assert_eq!(slice.try_open(replication, t0), Ok(()));
    assert_eq!(budget.in_use(), 1);
}
