//! Borrowing another worker's idle server instead of opening one: the idle board, the lend,
//! the borrow's deadline and its refusal.

use super::*;

fn millis(count: u64) -> Duration {
    Duration::from_millis(count)
}

/// Two slices of alice's pool (pool size 20) sharing its budgets and its idle board, each
/// knowing its worker index.
fn two_workers(t0: Instant) -> ([Slice; 2], [PoolId; 2]) {
    let shared = PoolLimits {
        idle_board: Arc::new(IdleBoard::new(2)),
        ..limits(20)
    };
    let mut slices = [Slice::new(10, 2), Slice::new(10, 2)];
    slices[0].set_worker(0);
    slices[1].set_worker(1);
    let ids = [
        slices[0]
            .register(&key("alice"), &shared, t0)
            .expect("register"),
        slices[1]
            .register(&key("alice"), &shared, t0)
            .expect("register"),
    ];
    (slices, ids)
}

/// Worker 0 opened server 7 and it went idle.
fn idle_on_worker_0(slices: &mut [Slice; 2], ids: [PoolId; 2], t0: Instant) {
    assert_eq!(slices[0].try_open(ids[0], t0), Ok(()));
    assert_eq!(slices[0].opened(ids[0], 7, t0), Checkin::Pooled);
}

/// Worker 1 tried to log in and PostgreSQL refused (say `pg_hba.conf` changed): no open is
/// tried before 10 s.
fn refused_on_worker_1(slices: &mut [Slice; 2], ids: [PoolId; 2], t0: Instant) {
    assert_eq!(slices[1].try_open(ids[1], t0), Ok(()));
    slices[1].open_failed(
        ids[1],
        t0 + Duration::from_secs(10),
        Some(Bytes::from_static(b"E no pg_hba.conf entry")),
    );
}

#[test]
fn a_worker_that_can_log_in_opens_rather_than_borrows() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    idle_on_worker_0(&mut slices, ids, t0);
    slices[1].park(ids[1], 1, t0, None);
    assert_eq!(
        slices[1].borrow_from(ids[1], t0),
        None,
        "no login was refused: worker 1 opens its own server"
    );
    refused_on_worker_1(&mut slices, ids, t0);
    assert_eq!(
        slices[1].borrow_from(ids[1], t0),
        Some(0),
        "refused: borrow"
    );
    assert_eq!(
        slices[1].borrow_from(ids[1], t0 + Duration::from_secs(10)),
        None,
        "past server_login_retry a login is tried again"
    );
}

#[test]
fn a_refusal_on_another_worker_lets_this_one_borrow_too() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    idle_on_worker_0(&mut slices, ids, t0);
    // Worker 0 opens a second server while the first is idle (say for a burst) and
    // PostgreSQL refuses it: the refusal is shared through the pool's budget.
    assert_eq!(slices[0].try_open(ids[0], t0), Ok(()));
    slices[0].open_failed(
        ids[0],
        t0 + Duration::from_secs(10),
        Some(Bytes::from_static(b"E password authentication failed")),
    );
    slices[1].park(ids[1], 1, t0, None);
    assert_eq!(slices[1].borrow_from(ids[1], t0), Some(0));
}

#[test]
fn an_idle_server_on_another_worker_is_lent_whole_and_adopted() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    assert_eq!(
        slices[1].borrow_from(ids[1], t0),
        None,
        "nothing idle anywhere"
    );
    idle_on_worker_0(&mut slices, ids, t0);
    assert_eq!(
        slices[0].borrow_from(ids[0], t0),
        None,
        "its own idle server is checked out, not borrowed"
    );
    slices[1].park(ids[1], 1, t0, None);
    refused_on_worker_1(&mut slices, ids, t0);
    assert_eq!(slices[1].borrow_from(ids[1], t0), Some(0));
    slices[1].start_borrow(ids[1], t0 + millis(100));
    assert!(slices[1].borrowing(ids[1]));
    assert_eq!(
        slices[1].borrow_from(ids[1], t0),
        None,
        "one borrow at a time"
    );

    let lease = slices[0].lend(&key("alice"), 1, |_| true).expect("lent");
    assert_eq!(lease.server, 7);
    assert_eq!(
        slices[0].counts(ids[0]).leaving,
        1,
        "it leaves, keeping its slot"
    );
    assert_eq!(
        slices[0].checkout(ids[0]),
        None,
        "no local client can get it now"
    );
    slices[0].moved(ids[0], 1);
    slices[1].end_borrow(ids[1], false, t0);
    assert_eq!(
        slices[1].adopt_server(ids[1], lease, t0),
        Checkin::Handoff {
            waiter: 1,
            lease: Lease {
                server: 7,
                opened_at: t0,
                idle_since: t0
            }
        }
    );
    assert_eq!(slices[0].counts(ids[0]).servers(), 0);
    assert_eq!(
        slices[0].limits(ids[0]).map(|l| l.pool_budget.in_use()),
        Some(1),
        "one slot, counted once, moved with the server"
    );
    assert_eq!(
        slices[0].borrow_from(ids[0], t0),
        None,
        "nothing idle is published"
    );
}

#[test]
fn nothing_is_lent_while_clients_wait_there_or_when_nothing_can_move() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    idle_on_worker_0(&mut slices, ids, t0);
    assert_eq!(
        slices[0].lend(&key("alice"), 1, |_| false),
        None,
        "a TLS server stays"
    );
    assert_eq!(slices[0].counts(ids[0]).idle, 1);
    assert_eq!(
        slices[0].lend(&key("bob"), 1, |_| true),
        None,
        "no such pool"
    );
    // Its own client took it meanwhile: the borrow is refused, the requester opens.
    let lease = slices[0].checkout(ids[0]).expect("idle");
    assert_eq!(slices[0].lend(&key("alice"), 1, |_| true), None);
    assert_eq!(slices[0].checkin(ids[0], lease, t0), Checkin::Pooled);
    slices[0].park(ids[0], 5, t0, None);
    assert_eq!(
        slices[0].lend(&key("alice"), 1, |_| true),
        None,
        "its own waiters come first"
    );
}

#[test]
fn a_refused_or_unanswered_borrow_is_not_tried_again_within_the_ask_interval() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    idle_on_worker_0(&mut slices, ids, t0);
    refused_on_worker_1(&mut slices, ids, t0);
    slices[1].start_borrow(ids[1], t0 + millis(100));
    assert_eq!(slices[1].next_borrow_deadline(), Some(t0 + millis(100)));
    let mut expired = Vec::new();
    slices[1].expired_borrows(t0 + millis(99), &mut expired);
    assert!(expired.is_empty());
    slices[1].expired_borrows(t0 + millis(100), &mut expired);
    assert_eq!(expired, vec![ids[1]]);
    assert!(!slices[1].borrowing(ids[1]));
    assert_eq!(slices[1].next_borrow_deadline(), None);
    assert_eq!(slices[1].borrow_from(ids[1], t0 + millis(200)), None);
    assert_eq!(slices[1].borrow_from(ids[1], t0 + millis(350)), Some(0));
    slices[1].start_borrow(ids[1], t0 + millis(450));
    slices[1].end_borrow(ids[1], true, t0 + millis(360));
    assert_eq!(slices[1].borrow_from(ids[1], t0 + millis(400)), None);
}

#[test]
fn a_forgotten_pool_ends_its_borrow() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    slices[1].start_borrow(ids[1], t0 + millis(100));
    slices[1].unregister(ids[1]);
    assert_eq!(slices[1].next_borrow_deadline(), None);
}

#[test]
fn idle_counts_follow_the_idle_list() {
    let t0 = Instant::now();
    let (mut slices, ids) = two_workers(t0);
    let board = slices[0]
        .limits(ids[0])
        .map(|limits| Arc::clone(&limits.idle_board))
        .expect("limits");
    idle_on_worker_0(&mut slices, ids, t0);
    assert_eq!(board.idle_of(0), 1);
    let lease = slices[0].checkout(ids[0]).expect("idle");
    assert_eq!(board.idle_of(0), 0);
    assert_eq!(slices[0].checkin(ids[0], lease, t0), Checkin::Pooled);
    assert_eq!(board.idle_of(0), 1);
    slices[0].drain(ids[0]);
    let mut closing = Vec::new();
    slices[0].collect_closable(t0, &mut closing);
    assert_eq!(board.idle_of(0), 0, "{closing:?}");
}

#[test]
fn a_borrowed_server_withdraws_the_room_its_waiters_asked_for() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let shared = PoolLimits {
        idle_board: Arc::new(IdleBoard::new(2)),
        shared_budgets: vec![Arc::clone(&cap)],
        ..limits(20)
    };
    let mut slice = Slice::new(10, 2);
    slice.set_worker(1);
    let id = slice
        .register(&key("alice"), &shared, t0)
        .expect("register");
    assert!(cap.try_acquire(), "another pool holds the cap");
    slice.park(id, 1, t0, None);
    assert_eq!(
        slice.try_open(id, t0),
        Err(Refusal::SharedFull { budget: 0 })
    );
    assert_eq!(cap.release_requests(), 1, "room asked for under the cap");
    slice.start_borrow(id, t0 + millis(100));
    slice.end_borrow(id, false, t0);
    assert_eq!(
        cap.release_requests(),
        0,
        "served by the borrowed server instead"
    );
}

#[test]
fn no_borrow_under_a_cap_which_makes_room_instead() {
    let t0 = Instant::now();
    let cap = Arc::new(PoolBudget::new(1, 0));
    let shared = PoolLimits {
        idle_board: Arc::new(IdleBoard::new(2)),
        shared_budgets: vec![Arc::clone(&cap)],
        ..limits(20)
    };
    let mut slices = [Slice::new(10, 2), Slice::new(10, 2)];
    slices[0].set_worker(0);
    slices[1].set_worker(1);
    let ids = [
        slices[0]
            .register(&key("alice"), &shared, t0)
            .expect("register"),
        slices[1]
            .register(&key("alice"), &shared, t0)
            .expect("register"),
    ];
    assert_eq!(slices[0].try_open(ids[0], t0), Ok(()));
    assert_eq!(slices[0].opened(ids[0], 7, t0), Checkin::Pooled);
    slices[1].park(ids[1], 1, t0, None);
    cap.set_limit(2, 0);
    refused_on_worker_1(&mut slices, ids, t0);
    cap.set_limit(1, 0);
    assert_eq!(slices[1].borrow_from(ids[1], t0), None, "the cap is full");
    cap.set_limit(2, 0);
    assert_eq!(slices[1].borrow_from(ids[1], t0), None, "still capped");
    cap.set_limit(0, 0);
    assert_eq!(slices[1].borrow_from(ids[1], t0), Some(0), "no cap");
}
