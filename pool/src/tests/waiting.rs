//! Waiting by class: which parked client a server goes to under the class order and FIFO,
//! and that deadlines, cancels and the reserve see every waiter of both lanes.

use super::*;

const P: WaitClass = WaitClass::Premium;
const F: WaitClass = WaitClass::Freemium;

fn millis(count: u64) -> Duration {
    Duration::from_millis(count)
}

/// A pool of one server, checked out, under `order`.
fn busy_pool(order: WaitOrder, t0: Instant) -> (Slice, PoolId, Lease<u32>) {
    let mut slice = Slice::new(10, 1);
    let limits = PoolLimits {
        wait_order: order,
        ..limits(1)
    };
    let id = slice
        .register(&key("alice"), &limits, t0)
        .expect("register");
    open_idle(&mut slice, id, 7, t0);
    let lease = slice.checkout(id).expect("server");
    (slice, id, lease)
}

/// Checks the server in and out until nobody waits; the waiters in the order served.
fn serve_all(slice: &mut Slice, id: PoolId, mut lease: Lease<u32>, now: Instant) -> Vec<u32> {
    let mut served = Vec::new();
    loop {
        match slice.checkin(id, lease, now) {
            Checkin::Handoff {
                waiter,
                lease: next,
            } => {
                served.push(waiter);
                lease = next;
            }
            Checkin::Pooled => return served,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn a_premium_client_parked_after_a_freemium_one_gets_the_server_first() {
    let t0 = Instant::now();
    let (mut slice, id, lease) = busy_pool(WaitOrder::DEFAULT, t0);
    slice.park_as(id, 1, F, t0, None).expect("parked");
    slice
        .park_as(id, 2, F, t0 + millis(1), None)
        .expect("parked");
    slice
        .park_as(id, 3, P, t0 + millis(2), None)
        .expect("parked");
    slice
        .park_as(id, 4, P, t0 + millis(3), None)
        .expect("parked");
    assert_eq!(slice.waiting(id), 4);
    assert_eq!(
        serve_all(&mut slice, id, lease, t0 + millis(5)),
        [3, 4, 1, 2]
    );
}

#[test]
fn a_freemium_client_goes_before_premium_ones_parked_after_it_aged() {
    let t0 = Instant::now();
    let order = WaitOrder::Class { aging: millis(100) };
    let (mut slice, id, lease) = busy_pool(order, t0);
    slice.park_as(id, 1, F, t0, None).expect("parked");
    slice
        .park_as(id, 2, P, t0 + millis(100), None)
        .expect("parked");
    slice
        .park_as(id, 3, P, t0 + millis(101), None)
        .expect("parked");
    slice
        .park_as(id, 4, F, t0 + millis(102), None)
        .expect("parked");
    // When the server comes back does not matter: the order is fixed at parking.
    assert_eq!(
        serve_all(&mut slice, id, lease, t0 + millis(150)),
        [2, 1, 3, 4]
    );
}

#[test]
fn fifo_ignores_the_class() {
    let t0 = Instant::now();
    let (mut slice, id, lease) = busy_pool(WaitOrder::Fifo, t0);
    slice.park_as(id, 1, F, t0, None).expect("parked");
    slice.park_as(id, 2, P, t0, None).expect("parked");
    slice.park_as(id, 3, F, t0, None).expect("parked");
    assert_eq!(serve_all(&mut slice, id, lease, t0), [1, 2, 3]);
}

#[test]
fn without_premium_waiters_the_class_order_is_fifo() {
    let t0 = Instant::now();
    let order = WaitOrder::Class { aging: secs(3600) };
    let (mut slice, id, lease) = busy_pool(order, t0);
    for waiter in 1..=4 {
        slice.park(id, waiter, t0, None).expect("parked");
    }
    assert_eq!(serve_all(&mut slice, id, lease, t0), [1, 2, 3, 4]);
}

#[test]
fn deadlines_and_cancels_reach_both_lanes() {
    let t0 = Instant::now();
    let (mut slice, id, lease) = busy_pool(WaitOrder::DEFAULT, t0);
    slice
        .park_as(id, 1, F, t0, Some(t0 + secs(5)))
        .expect("parked");
    let cancelled = slice
        .park_as(id, 2, P, t0, Some(t0 + secs(6)))
        .expect("parked");
    slice
        .park_as(id, 3, P, t0, Some(t0 + secs(7)))
        .expect("parked");
    slice.park_as(id, 4, F, t0, None).expect("parked");
    assert_eq!(slice.cancel_wait(cancelled), Some(2));
    assert_eq!(slice.next_deadline(), Some(t0 + secs(5)));
    assert_eq!(
        slice.poll_expired(t0 + secs(7)),
        Some(Expired {
            pool: id,
            waiter: 1
        })
    );
    assert_eq!(
        slice.poll_expired(t0 + secs(7)),
        Some(Expired {
            pool: id,
            waiter: 3
        })
    );
    assert_eq!(slice.poll_expired(t0 + secs(7)), None);
    assert_eq!(slice.next_deadline(), None);
    assert_eq!(serve_all(&mut slice, id, lease, t0 + secs(7)), [4]);
}

#[test]
fn the_reserve_counts_the_longest_wait_of_either_class() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    let limits = PoolLimits {
        reserve_pool_timeout: Some(secs(5)),
        ..PoolLimits::with_budget(Arc::new(PoolBudget::new(1, 1)))
    };
    let id = slice
        .register(&key("alice"), &limits, t0)
        .expect("register");
    open_idle(&mut slice, id, 7, t0);
    let _held = slice.checkout(id).expect("server");
    slice.park_as(id, 1, F, t0, None).expect("parked");
    slice.park_as(id, 2, P, t0 + secs(4), None).expect("parked");
    assert_eq!(
        slice.try_open(id, t0 + secs(5)),
        Ok(()),
        "the freemium waiter has waited 5 s, though a premium one is served first"
    );
}

#[test]
fn a_reload_changes_the_order_of_clients_already_parked() {
    let t0 = Instant::now();
    let (mut slice, id, lease) = busy_pool(WaitOrder::Fifo, t0);
    slice.park_as(id, 1, F, t0, None).expect("parked");
    slice.park_as(id, 2, P, t0, None).expect("parked");
    let limits = PoolLimits {
        wait_order: WaitOrder::DEFAULT,
        ..slice.limits(id).expect("pool").clone()
    };
    slice.set_limits(id, limits);
    assert_eq!(serve_all(&mut slice, id, lease, t0), [2, 1]);
}
