//! What a pool remembers of its logins: the failure memo, the welcome, the spellings.

use super::*;

fn error() -> Bytes {
    Bytes::from_static(b"E password authentication failed")
}

/// A pool of alice whose only login failed at `t0`, retry at `t0 + 15 s`.
fn failed_pool(slice: &mut Slice, t0: Instant) -> PoolId {
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    slice.open_failed(id, t0 + secs(15), Some(error()));
    id
}

#[test]
fn login_failure_is_reported_until_retry_at() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = failed_pool(&mut slice, t0);
    assert_eq!(slice.login_failure(id, t0 + secs(14)), Some(error()));
    assert_eq!(slice.login_failure(id, t0 + secs(15)), None);
}

#[test]
fn forgotten_login_failures_let_the_next_login_go_at_once() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = failed_pool(&mut slice, t0);
    slice.forget_login_failures();
    assert_eq!(slice.login_failure(id, t0 + secs(1)), None);
    assert_eq!(slice.try_open(id, t0 + secs(1)), Ok(()));
}

#[test]
fn login_failure_is_hidden_while_the_slice_holds_a_server() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    assert_eq!(slice.try_open(id, t0), Ok(()));
    slice.open_failed(id, t0 + secs(15), Some(error()));
    assert_eq!(
        slice.login_failure(id, t0),
        None,
        "another login is still under way"
    );
    // For a caller that knows which servers will serve again, it still stands.
    assert_eq!(slice.standing_login_failure(id, t0), Some(error()));
    assert_eq!(slice.standing_login_failure(id, t0 + secs(15)), None);
}

#[test]
fn opened_clears_the_login_failure() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    assert_eq!(slice.try_open(id, t0), Ok(()));
    slice.open_failed(id, t0 + secs(15), Some(error()));
    slice.opened(id, 1, t0);
    let _lease = slice.checkout(id).expect("server");
    slice.closed(id, t0);
    assert_eq!(slice.login_failure(id, t0), None);
    assert_eq!(slice.try_open(id, t0), Ok(()), "no retry pause either");
}

#[test]
fn open_failed_without_an_error_keeps_clients_waiting() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(slice.try_open(id, t0), Ok(()));
    slice.open_failed(id, t0 + secs(15), None);
    assert_eq!(slice.login_failure(id, t0), None);
    assert_eq!(slice.try_open(id, t0), Err(Refusal::NotNow));
}

#[test]
fn a_later_failure_replaces_the_error() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = failed_pool(&mut slice, t0);
    assert_eq!(slice.try_open(id, t0 + secs(15)), Ok(()));
    let other = Bytes::from_static(b"E database does not exist");
    slice.open_failed(id, t0 + secs(30), Some(other.clone()));
    assert_eq!(slice.login_failure(id, t0 + secs(16)), Some(other));
}

#[test]
fn a_login_failure_keeps_its_pool_until_retry_at() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = failed_pool(&mut slice, t0);
    slice.unregister(id);
    assert_eq!(
        slice.find(&key("alice")),
        Some(id),
        "the next client meets it"
    );
    let mut closing = Vec::new();
    slice.collect_closable(t0 + secs(14), &mut closing);
    assert_eq!(slice.find(&key("alice")), Some(id));
    slice.collect_closable(t0 + secs(15), &mut closing);
    assert_eq!(slice.find(&key("alice")), None);
}

#[test]
fn welcome_is_none_until_learned_and_the_first_login_wins() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    assert_eq!(slice.welcome(id), None);
    let first = vec![
        ("server_version".to_string(), "17.2".to_string()),
        ("TimeZone".to_string(), "UTC".to_string()),
    ];
    slice.learn_welcome(id, &first);
    slice.learn_welcome(id, &[("TimeZone".to_string(), "Europe/Paris".to_string())]);
    let welcome = slice.welcome(id).expect("learned");
    assert_eq!(welcome.params, first);
    assert_eq!(welcome.tracked.get(2), Some("UTC"));
}

#[test]
fn spelling_limit_comes_from_the_limits_and_follows_a_reload() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let small = PoolLimits {
        max_spellings: 1,
        ..limits(5)
    };
    let id = slice.register(&key("alice"), &small, t0).expect("register");
    assert_eq!(
        slice.spellings(id).map(|spellings| spellings.limit),
        Some(1)
    );
    let spellings = slice.spellings_mut(id).expect("pool");
    spellings.learn(0, "utf8", "UTF8");
    spellings.learn(0, "latin1", "LATIN1");
    assert_eq!(slice.spellings(id).map(Spellings::len), Some(1));
    slice.set_limits(
        id,
        PoolLimits {
            max_spellings: 3,
            ..small
        },
    );
    assert_eq!(
        slice.spellings(id).map(|spellings| spellings.limit),
        Some(3)
    );
}

#[test]
fn a_login_failure_stands_for_every_worker_of_the_pool() {
    // One worker's refused login is not tried again by the others before retry_at, as
    // PgBouncer's one pool would not; a login that succeeds anywhere ends it.
    let t0 = Instant::now();
    let shared = limits(5);
    let (mut first, mut second) = (Slice::new(10, 2), Slice::new(10, 2));
    let a = first.register(&key("alice"), &shared, t0).expect("a");
    let b = second.register(&key("alice"), &shared, t0).expect("b");
    assert_eq!(second.login_failure(b, t0), None);
    assert_eq!(first.try_open(a, t0), Ok(()));
    first.open_failed(a, t0 + secs(15), Some(error()));
    assert_eq!(second.login_failure(b, t0 + secs(14)), Some(error()));
    assert_eq!(
        second.try_open(b, t0 + secs(14)),
        Err(Refusal::NotNow),
        "the refused login is not tried again"
    );
    assert_eq!(
        second.login_failure(b, t0 + secs(15)),
        None,
        "retry_at passed"
    );
    assert_eq!(first.try_open(a, t0 + secs(15)), Ok(()));
    first.opened(a, 1, t0 + secs(15));
    assert_eq!(
        second.login_failure(b, t0 + secs(14)),
        None,
        "a login succeeded"
    );
}

#[test]
fn an_unreachable_server_fails_newcomers_here_but_not_the_waiters_nor_other_workers() {
    // A connect that was refused says the server is down for now: a client joining on this
    // worker hears it at once (fast fail), the waiters wait for the next attempt (not a
    // standing failure), and other workers try for themselves.
    let t0 = Instant::now();
    let shared = limits(5);
    let (mut first, mut second) = (Slice::new(10, 2), Slice::new(10, 2));
    let a = first.register(&key("alice"), &shared, t0).expect("a");
    let b = second.register(&key("alice"), &shared, t0).expect("b");
    assert_eq!(first.try_open(a, t0), Ok(()));
    first.open_unreachable(a, t0 + secs(15), Some(error()));
    assert_eq!(first.login_failure(a, t0 + secs(14)), Some(error()));
    assert_eq!(first.standing_login_failure(a, t0 + secs(14)), None);
    assert_eq!(second.login_failure(b, t0 + secs(14)), None);
    assert_eq!(
        first.try_open(a, t0 + secs(14)),
        Err(Refusal::NotNow),
        "tried again after server_login_retry"
    );
}
