//! `pool_idle_timeout`: an unused pool stays listed (welcome and all) until it has been
//! unused that long; without it, it is freed as soon as it is unused.

use super::*;

fn closed_all(slice: &mut Slice, now: Instant) {
    let mut out = Vec::new();
    slice.collect_closable(now, &mut out);
}

#[test]
fn without_pool_idle_timeout_an_unused_pool_is_freed_at_once() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    slice.unregister(id);
    assert_eq!(slice.pools().count(), 0);
    let mut freed = Vec::new();
    slice.collect_idle_pools(t0 + secs(5), &mut freed);
    assert!(freed.is_empty(), "nothing to report");
}

#[test]
fn an_unused_pool_is_kept_until_pool_idle_timeout_then_freed() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    slice.set_idle_pool_timeout(Some(secs(2)));
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    slice.learn_welcome(id, &[("server_version".into(), "17".into())]);
    let mut freed = Vec::new();
    // In use at t0 + 1: the unused time counts from there.
    slice.collect_idle_pools(t0 + secs(1), &mut freed);
    slice.unregister(id);
    closed_all(&mut slice, t0 + secs(1));
    assert_eq!(slice.pools().count(), 1, "kept while unused");
    assert_eq!(slice.find(&key("alice")), Some(id), "still listed");
    slice.collect_idle_pools(t0 + secs(3), &mut freed);
    assert!(freed.is_empty(), "unused for 2 s, not longer");
    assert!(slice.welcome(id).is_some(), "its welcome kept");
    slice.collect_idle_pools(t0 + secs(3) + Duration::from_millis(250), &mut freed);
    assert_eq!(
        freed,
        vec![FreedPool {
            key: key("alice"),
            unused_for: secs(2) + Duration::from_millis(250),
        }]
    );
    assert_eq!(slice.pools().count(), 0);
    assert_eq!(slice.find(&key("alice")), None);
}

#[test]
fn a_pool_used_again_before_pool_idle_timeout_is_the_same_pool() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    slice.set_idle_pool_timeout(Some(secs(2)));
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    slice.unregister(id);
    let again = slice
        .register(&key("alice"), &limits(1), t0 + secs(1))
        .expect("register");
    assert_eq!(again, id);
    let mut freed = Vec::new();
    slice.collect_idle_pools(t0 + secs(10), &mut freed);
    assert!(freed.is_empty(), "in use");
    assert_eq!(slice.pools().count(), 1);
}

#[test]
fn a_drained_pool_is_freed_at_once_even_with_pool_idle_timeout() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 1);
    slice.set_idle_pool_timeout(Some(secs(60)));
    let id = slice
        .register(&key("alice"), &limits(1), t0)
        .expect("register");
    slice.drain(id);
    slice.unregister(id);
    assert_eq!(slice.pools().count(), 0);
}
