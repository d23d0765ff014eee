//! Slots moving between workers: asking, releasing now or later, fair share, leaving servers,
//! adopting and returning slots.

use super::*;

/// The grant of a slot of alice's pool to worker `to`.
fn grant_to(to: usize) -> SlotGrant {
    SlotGrant {
        to,
        key: key("alice"),
    }
}

fn millis(count: u64) -> Duration {
    Duration::from_millis(count)
}

/// Two slices sharing `shared`, each with the pool of alice registered.
fn two_workers(shared: &PoolLimits, t0: Instant) -> ([Slice; 2], [PoolId; 2]) {
    let mut slices = [Slice::new(10, 2), Slice::new(10, 2)];
    let ids = [
        slices[0]
            .register(&key("alice"), shared, t0)
            .expect("register"),
        slices[1]
            .register(&key("alice"), shared, t0)
            .expect("register"),
    ];
    (slices, ids)
}

#[test]
fn should_ask_others_at_most_once_per_interval() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    slice.park(id, 100, t0, None).expect("parked");
    assert!(slice.should_ask_others(id, t0));
    assert!(!slice.should_ask_others(id, t0 + millis(249)));
    assert!(slice.should_ask_others(id, t0 + millis(250)));
}

#[test]
fn should_ask_others_not_without_waiters() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    assert!(!slice.should_ask_others(id, t0));
}

#[test]
fn should_ask_others_not_when_holding_pool_size() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    let _busy = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    assert!(!slice.should_ask_others(id, t0));
}

#[test]
fn should_ask_others_not_with_one_worker() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    slice.park(id, 100, t0, None).expect("parked");
    assert!(!slice.should_ask_others(id, t0));
}

#[test]
fn release_for_an_unknown_key() {
    let mut slice = Slice::new(10, 2);
    assert_eq!(slice.release_for(&key("alice"), 1), Release::Unknown);
}

#[test]
fn release_for_gives_the_least_recently_used_idle_server_now() {
    let t0 = Instant::now();
    let shared = limits(3);
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0 + secs(1));
    let Release::Now(lease) = slice.release_for(&key("alice"), 1) else {
        panic!("expected an idle server now");
    };
    assert_eq!(lease.server, 1);
    assert_eq!((slice.counts(id).idle, slice.counts(id).leaving), (1, 1));
    assert_eq!(shared.pool_budget.in_use(), 2, "the slot is still held");
}

#[test]
fn release_for_with_waiters_here_defers() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(3), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.release_for(&key("alice"), 1), Release::Later);
    assert_eq!(slice.counts(id).idle, 1);
}

#[test]
fn deferred_release_hands_over_the_next_checkin_when_no_one_waits() {
    let t0 = Instant::now();
    let shared = limits(2);
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    let lease = slice.checkout(id).expect("server");
    assert_eq!(slice.release_for(&key("alice"), 1), Release::Later);
    let Checkin::HandOver { lease, to } = slice.checkin(id, lease, t0) else {
        panic!("expected a handover");
    };
    assert_eq!((lease.server, to), (1, 1));
    assert_eq!(slice.counts(id).leaving, 1);
    assert_eq!(shared.pool_budget.in_use(), 1);
}

#[test]
fn deferred_release_hands_over_a_newly_opened_server() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    assert_eq!(slice.release_for(&key("alice"), 1), Release::Later);
    assert!(matches!(
        slice.opened(id, 1, t0),
        Checkin::HandOver { to: 1, .. }
    ));
}

#[test]
fn deferred_release_is_dropped_when_waiters_here_and_within_fair_share() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    let lease = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.release_for(&key("alice"), 1), Release::Later);
    let Checkin::Handoff { waiter, lease } = slice.checkin(id, lease, t0) else {
        panic!("one server of a fair share of one stays for the waiter");
    };
    assert_eq!(waiter, 100);
    assert_eq!(
        slice.checkin(id, lease, t0),
        Checkin::Pooled,
        "the request was dropped"
    );
}

#[test]
fn deferred_release_hands_over_above_fair_share_despite_waiters() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(2), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    let first = slice.checkout(id).expect("server");
    let _second = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(slice.release_for(&key("alice"), 1), Release::Later);
    assert!(
        matches!(
            slice.checkin(id, first, t0),
            Checkin::HandOver { to: 1, .. }
        ),
        "two servers are above the fair share of one (pool_size 2, 2 workers)"
    );
    assert_eq!(slice.waiting(id), 1);
}

#[test]
fn fair_share_uses_the_smallest_shared_cap() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let capped = PoolLimits {
        shared_budgets: vec![
            Arc::new(PoolBudget::new(0, 0)),
            Arc::new(PoolBudget::new(2, 0)),
        ],
        ..limits(10)
    };
    let id = slice
        .register(&key("alice"), &capped, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    let first = slice.checkout(id).expect("server");
    let _second = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    slice.release_for(&key("alice"), 1);
    assert!(
        matches!(slice.checkin(id, first, t0), Checkin::HandOver { .. }),
        "the cap of 2 (not pool_size 10, not the unlimited cap) makes a share of 1"
    );
}

#[test]
fn left_hands_the_slot_to_the_asking_worker_without_releasing_it() {
    let t0 = Instant::now();
    let shared = limits(1);
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    assert!(matches!(
        slice.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    assert_eq!(slice.left(id), Some(grant_to(1)));
    assert_eq!(shared.pool_budget.in_use(), 1, "the slot is in transit");
    assert_eq!(slice.counts(id).servers(), 0);
}

#[test]
fn left_names_the_key_of_a_pool_it_forgets() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    assert!(matches!(
        slice.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    slice.unregister(id);
    assert_eq!(slice.left(id), Some(grant_to(1)));
    assert_eq!(slice.key(id), None);
}

#[test]
fn pool_with_a_leaving_server_is_not_forgotten() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    assert!(matches!(
        slice.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    slice.unregister(id);
    assert_eq!(slice.find(&key("alice")), Some(id));
    assert_eq!(slice.counts(id).servers(), 1);
    slice.left(id);
    assert_eq!(slice.key(id), None, "forgotten once the server left");
}

#[test]
fn adopted_slot_opens_without_touching_the_budget() {
    let t0 = Instant::now();
    let shared = limits(1);
    let ([mut giver, mut taker], [given, taken]) = two_workers(&shared, t0);
    open_idle(&mut giver, given, 1, t0);
    taker.park(taken, 100, t0, None).expect("parked");
    assert_eq!(taker.try_open(taken, t0), Err(Refusal::PoolFull));
    assert!(matches!(
        giver.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    assert_eq!(giver.left(given), Some(grant_to(1)));
    assert!(taker.adopt_slot(&key("alice")));
    assert_eq!(taker.try_open(taken, t0), Ok(()));
    taker.return_unused_slots(taken);
    assert_eq!(shared.pool_budget.in_use(), 1, "one slot, counted once");
    assert!(matches!(
        taker.opened(taken, 2, t0),
        Checkin::Handoff { waiter: 100, .. }
    ));
}

#[test]
fn adopted_slot_is_usable_by_the_adopting_slice_only() {
    let t0 = Instant::now();
    let shared = limits(1);
    let ([mut giver, mut taker], [given, taken]) = two_workers(&shared, t0);
    let mut third = Slice::new(10, 3);
    let other = third
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut giver, given, 1, t0);
    assert!(matches!(
        giver.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    assert_eq!(giver.left(given), Some(grant_to(1)));
    assert!(taker.adopt_slot(&key("alice")));
    assert_eq!(third.try_open(other, t0), Err(Refusal::PoolFull));
    assert_eq!(giver.try_open(given, t0), Err(Refusal::PoolFull));
    assert_eq!(taker.try_open(taken, t0), Ok(()));
}

#[test]
fn unused_adopted_slot_goes_back_to_the_budgets() {
    let t0 = Instant::now();
    let database = Arc::new(PoolBudget::new(5, 0));
    let shared = PoolLimits {
        shared_budgets: vec![Arc::clone(&database)],
        ..limits(1)
    };
    let ([mut giver, mut taker], [given, taken]) = two_workers(&shared, t0);
    open_idle(&mut giver, given, 1, t0);
    assert!(matches!(
        giver.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    assert_eq!(giver.left(given), Some(grant_to(1)));
    assert!(taker.adopt_slot(&key("alice")));
    taker.return_unused_slots(taken);
    assert_eq!(shared.pool_budget.in_use(), 0);
    assert_eq!(database.in_use(), 0);
    taker.return_unused_slots(taken);
    assert_eq!(shared.pool_budget.in_use(), 0, "returned once only");
}

#[test]
fn adopt_slot_without_the_pool_is_refused_and_the_slot_can_be_given_back() {
    let t0 = Instant::now();
    let database = Arc::new(PoolBudget::new(5, 0));
    let shared = PoolLimits {
        shared_budgets: vec![Arc::clone(&database)],
        ..limits(1)
    };
    let mut giver = Slice::new(10, 2);
    let given = giver
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut giver, given, 1, t0);
    assert!(matches!(
        giver.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    assert_eq!(giver.left(given), Some(grant_to(1)));
    let mut taker = Slice::new(10, 2);
    assert!(!taker.adopt_slot(&key("alice")));
    give_back_slot(&shared);
    assert_eq!((shared.pool_budget.in_use(), database.in_use()), (0, 0));
}

#[test]
fn a_leaving_server_of_a_cap_eviction_is_released_while_a_handover_is_pending() {
    let t0 = Instant::now();
    let shared = limits(3);
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    assert!(matches!(
        slice.release_for(&key("alice"), 1),
        Release::Now(_)
    ));
    let budget = Arc::clone(&shared.pool_budget);
    assert!(slice.release_idle_sharing(&budget).is_some());
    assert_eq!(slice.counts(id).leaving, 2);
    let outcomes = [slice.left(id), slice.left(id)];
    assert_eq!(
        outcomes,
        [Some(grant_to(1)), None],
        "one slot moves, one is released"
    );
    assert_eq!(shared.pool_budget.in_use(), 1);
}

#[test]
fn a_server_moved_whole_keeps_its_slot_and_goes_to_the_waiter_there() {
    let t0 = Instant::now();
    let shared = limits(1);
    let ([mut giver, mut taker], [from, to]) = two_workers(&shared, t0);
    open_idle(&mut giver, from, 1, t0);
    taker.park(to, 100, t0, None).expect("parked");
    let Release::Now(lease) = giver.release_for(&key("alice"), 1) else {
        panic!("an idle server leaves now");
    };
    giver.moved(from, 1);
    assert_eq!(giver.counts(from), PoolCounts::default());
    assert_eq!(shared.pool_budget.in_use(), 1, "the slot travels with it");
    let arrived = Lease {
        server: 7,
        opened_at: lease.opened_at,
        idle_since: lease.idle_since,
    };
    assert_eq!(
        taker.adopt_server(to, arrived, t0 + millis(1)),
        Checkin::Handoff {
            waiter: 100,
            lease: Lease {
                server: 7,
                opened_at: t0,
                idle_since: t0,
            },
        }
    );
    assert_eq!(taker.counts(to).active, 1);
    assert_eq!(shared.pool_budget.in_use(), 1);
    // The grant it would have paid is gone: a later close gives the slot back.
    assert!(!taker.closed(to, t0 + millis(2)));
    assert_eq!(shared.pool_budget.in_use(), 0);
}

#[test]
fn a_server_that_arrives_after_its_waiter_left_is_kept_idle() {
    let t0 = Instant::now();
    let shared = limits(1);
    let ([mut giver, mut taker], [from, to]) = two_workers(&shared, t0);
    open_idle(&mut giver, from, 1, t0);
    let Release::Now(lease) = giver.release_for(&key("alice"), 1) else {
        panic!("an idle server leaves now");
    };
    giver.moved(from, 1);
    assert_eq!(taker.adopt_server(to, lease, t0), Checkin::Pooled);
    assert_eq!(taker.counts(to).idle, 1);
    assert_eq!(shared.pool_budget.in_use(), 1);
}

#[test]
fn a_server_past_its_lifetime_that_arrives_is_closed_and_its_slot_given_back() {
    let t0 = Instant::now();
    let shared = limits(1);
    let ([mut giver, mut taker], [from, to]) = two_workers(&shared, t0);
    open_idle(&mut giver, from, 1, t0);
    let Release::Now(lease) = giver.release_for(&key("alice"), 1) else {
        panic!("an idle server leaves now");
    };
    giver.moved(from, 1);
    let late = t0 + shared.server_lifetime;
    assert!(matches!(
        taker.adopt_server(to, lease, late),
        Checkin::Close {
            reason: CloseReason::Lifetime,
            ..
        }
    ));
    assert_eq!(shared.pool_budget.in_use(), 0);
}

#[test]
fn a_move_that_fails_before_the_socket_left_grants_the_slot_as_a_close_would() {
    let t0 = Instant::now();
    let shared = limits(1);
    let ([mut giver, _], [from, _]) = two_workers(&shared, t0);
    open_idle(&mut giver, from, 1, t0);
    let Release::Now(_lease) = giver.release_for(&key("alice"), 1) else {
        panic!("an idle server leaves now");
    };
    assert_eq!(giver.left(from), Some(grant_to(1)));
    assert_eq!(shared.pool_budget.in_use(), 1);
}
