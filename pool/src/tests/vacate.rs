//! Emptying a pool for a statement on its database: idle servers leave, checked-out ones
//! stay, and warmup waits.

use super::*;

#[test]
fn vacate_takes_every_idle_server_out_and_keeps_the_checked_out_one() {
    let t0 = Instant::now();
    let mut slice = Slice::new(10, 2);
    let id = slice
        .register(&key("alice"), &limits(5), t0)
        .expect("register");
    for server in 1..=3 {
        open_idle(&mut slice, id, server, t0);
    }
    let in_use = slice.checkout(id).expect("a server");
    let mut closing = Vec::new();
    assert_eq!(slice.vacate(id, t0 + secs(10), &mut closing), 2);
    let mut taken: Vec<u32> = closing.iter().map(|c| c.lease.server).collect();
    taken.sort_unstable();
    assert_eq!(in_use.server, 3, "the most recently used");
    assert_eq!(taken, [1, 2], "the idle ones, not the client's");
    assert!(
        closing
            .iter()
            .all(|c| c.leaving && c.reason == CloseReason::DatabaseVacated)
    );
    let counts = slice.counts(id);
    assert_eq!((counts.idle, counts.active, counts.leaving), (0, 1, 2));
    // The slots are held until the backends are gone.
    assert_eq!(slice.left(id), None);
    assert_eq!(slice.left(id), None);
    assert_eq!(slice.counts(id).servers(), 1);
}

#[test]
fn vacate_holds_warmup_but_not_waiting_clients() {
    let t0 = Instant::now();
    let mut warm = limits(10);
    warm.min_pool_size = 2;
    let mut slice = Slice::new(10, 1);
    let id = slice.register(&key("alice"), &warm, t0).expect("register");
    open_idle(&mut slice, id, 1, t0);
    open_idle(&mut slice, id, 2, t0);
    let mut closing = Vec::new();
    slice.vacate(id, t0 + secs(10), &mut closing);
    for _ in &closing {
        slice.left(id);
    }
    let mut opens = Vec::new();
    slice.collect_opens(t0 + secs(1), &mut opens);
    assert_eq!(opens, [], "no warmup while held");
    slice.park(id, 7, t0 + secs(1), None);
    slice.collect_opens(t0 + secs(1), &mut opens);
    assert_eq!(opens, [id], "a waiting client still gets a server opened");
    assert_eq!(
        slice.opened(id, 3, t0 + secs(2)),
        Checkin::Handoff {
            waiter: 7,
            lease: Lease {
                server: 3,
                opened_at: t0 + secs(2),
                idle_since: t0 + secs(2)
            }
        }
    );
    opens.clear();
    slice.collect_opens(t0 + secs(10), &mut opens);
    assert_eq!(opens, [id], "warmup again once the hold is over");
}
