//! Draining (replica Down, entry reloaded) and re-routing waiters; refusals of `try_open`.

use super::*;

fn replica_key(addr: &str, database: &str) -> PoolKey {
    PoolKey {
        database: database.into(),
        target: ServerTarget::Replica(addr.parse().expect("addr")),
        ..key("alice")
    }
}

#[test]
fn take_waiters_moves_every_waiter_in_order() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    for waiter in [1, 2, 3] {
        slice
            .park(id, waiter, t0, Some(t0 + secs(60)))
            .expect("parked");
    }
    let mut out = Vec::new();
    slice.take_waiters(id, &mut out);
    assert_eq!(out, [1, 2, 3]);
    assert_eq!(slice.waiting(id), 0);
    assert_eq!(slice.next_deadline(), None);
}

#[test]
fn drain_where_matches_the_replica_and_database_only() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let down = replica_key("10.0.0.1:5432", "db");
    let other_db = replica_key("10.0.0.1:5432", "other");
    let other_replica = replica_key("10.0.0.2:5432", "db");
    let ids = [&down, &other_db, &other_replica]
        .map(|key| slice.register(key, &limits(5), t0).expect("register"));
    let addr = "10.0.0.1:5432".parse().expect("addr");
    slice.drain_where(|key| key.target == ServerTarget::Replica(addr) && &*key.database == "db");
    assert_eq!(ids.map(|id| slice.is_draining(id)), [true, false, false]);
}

#[test]
fn drained_pool_is_unlisted_and_a_new_registration_gets_a_fresh_pool() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let key = replica_key("10.0.0.1:5432", "db");
    let old = slice.register(&key, &limits(5), t0).expect("register");
    slice.drain(old);
    assert_eq!(slice.find(&key), None);
    let fresh = slice.register(&key, &limits(5), t0).expect("register");
    assert_ne!(fresh, old);
    assert!(!slice.is_draining(fresh));
    assert_eq!(slice.try_open(fresh, t0), Ok(()));
}

#[test]
fn drained_pool_empties_through_its_old_id_and_is_forgotten() {
    let t0 = Instant::now();
    let shared = limits(5);
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    open_idle(&mut slice, id, 1, t0);
    let lease = slice.checkout(id).expect("server");
    slice.park(id, 100, t0, None).expect("parked");
    slice.drain(id);
    let mut rerouted = Vec::new();
    slice.take_waiters(id, &mut rerouted);
    assert_eq!(rerouted, [100]);
    slice.unregister(id);
    assert!(matches!(
        slice.checkin(id, lease, t0),
        Checkin::Close {
            reason: CloseReason::Draining,
            open_replacement: false,
            ..
        }
    ));
    assert_eq!(slice.key(id), None);
    assert_eq!(shared.pool_budget.in_use(), 0);
}

#[test]
fn a_refused_open_changes_no_count() {
    let t0 = Instant::now();
    let database = Arc::new(PoolBudget::new(5, 0));
    let user = Arc::new(PoolBudget::new(0, 0));
    let capped = PoolLimits {
        shared_budgets: vec![Arc::clone(&database), Arc::clone(&user)],
        ..limits(1)
    };
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &capped, t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    let before = (
        slice.counts(id),
        capped.pool_budget.in_use(),
        database.in_use(),
        user.in_use(),
    );
    assert_eq!(slice.try_open(id, t0), Err(Refusal::PoolFull));
    let after = (
        slice.counts(id),
        capped.pool_budget.in_use(),
        database.in_use(),
        user.in_use(),
    );
    assert_eq!(before, after);
}

#[test]
fn shared_full_names_the_refusing_budget_and_gives_the_others_back() {
    let t0 = Instant::now();
    let database = Arc::new(PoolBudget::new(5, 0));
    let user = Arc::new(PoolBudget::new(1, 0));
    assert!(
        user.try_acquire(),
        "another pool holds the user's only slot"
    );
    let capped = PoolLimits {
        shared_budgets: vec![Arc::clone(&database), Arc::clone(&user)],
        ..limits(5)
    };
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &capped, t0)
        .expect("register");
    assert_eq!(
        slice.try_open(id, t0),
        Err(Refusal::SharedFull { budget: 1 })
    );
    assert_eq!((capped.pool_budget.in_use(), database.in_use()), (0, 0));
}

#[test]
fn shared_full_asks_for_a_release_through_the_refusing_budget() {
    let t0 = Instant::now();
    let user = Arc::new(PoolBudget::new(1, 0));
    assert!(
        user.try_acquire(),
        "another worker holds the user's only slot"
    );
    let capped = PoolLimits {
        shared_budgets: vec![Arc::clone(&user)],
        ..limits(5)
    };
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &capped, t0)
        .expect("register");
    slice.park(id, 100, t0, None).expect("parked");
    assert_eq!(
        slice.try_open(id, t0),
        Err(Refusal::SharedFull { budget: 0 })
    );
    assert_eq!(user.release_requests(), 1);
    assert_eq!(capped.pool_budget.release_requests(), 0);
}

#[test]
fn a_stale_id_is_refused_with_not_now() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    slice.unregister(id);
    assert_eq!(slice.try_open(id, t0), Err(Refusal::NotNow));
}

#[test]
fn a_pool_is_forgotten_when_its_last_waiter_expires() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    slice.park(id, 100, t0, Some(t0 + secs(5))).expect("parked");
    slice.unregister(id);
    assert!(slice.poll_expired(t0 + secs(5)).is_some());
    assert_eq!(slice.key(id), None);
}
