//! The admission path must not allocate (000 §III-E: O(K) per admission; the proxy calls it on
//! every session open). A counting global allocator checks it, counting per thread so the test
//! harness's own threads do not interfere.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

use common::*;
use pgtier_policy::tiers::{Tier, TierLoad, TierTable, TieredPlb};
use pgtier_policy::{Draw, P2c, Strategy};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // try_with: the thread-local may already be gone while a thread shuts down.
        let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn admission_path_does_not_allocate() {
    let plb = paper_plb();
    let table = with_roles(
        &paper_table(),
        &[(
            4,
            pgtier_policy::Role::BorrowedToFreemium {
                from: pgtier_policy::Pool::Mixed,
            },
        )],
    );
    let l = loads(&[(10, 0), (10, 0), (0, 3), (0, 10), (0, 0)]);
    let strategies = [
        Strategy::Plb(plb),
        Strategy::RoundRobin,
        Strategy::LeastSessions,
        Strategy::P2c(P2c::uniform()),
    ];
    let tier_table = TierTable::from_roles(&table);
    let tiered = TieredPlb::new(*plb.params(), &tier_table).expect("valid");
    let tier_loads: Vec<TierLoad> = l.iter().map(|&load| TierLoad::from(load)).collect();
    let before = allocations();
    let mut chosen = 0usize;
    for round in 0..100u64 {
        for strategy in &strategies {
            for class in [P, F] {
                let draw = Draw {
                    ticket: round,
                    random: round.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                };
                let a = strategy.route(&table, &l, class, draw).expect("routable");
                chosen += a.replica.index() + a.role_changes.len();
            }
        }
        let changes = plb.returns(&table, &l).expect("returns");
        chosen += changes.len();
        for tier in 0..2 {
            let a = tiered
                .admit(&tier_table, &tier_loads, Tier(tier))
                .expect("routable");
            chosen += a.replica.index() + a.role_changes.len();
        }
    }
    let after = allocations();
    assert!(chosen > 0);
    assert_eq!(after - before, 0, "admission allocated");
    // The counter does see allocations on this thread.
    let control = black_box(vec![chosen]);
    assert_eq!(allocations(), after + 1);
    drop(control);
}
