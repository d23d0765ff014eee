//! Rough cost of one admission (run with `cargo test --release -p pgtier-policy --test cost
//! -- --ignored --nocapture`). Ignored by default: timing belongs to the bench crate; this is
//! only a quick check that the O(K) path stays in the sub-microsecond range.

mod common;

use std::hint::black_box;
use std::time::Instant;

use common::*;
use pgtier_policy::{Plb, PlbParams, ReplicaLoad, RoleTable, SplitMix64};

fn measure(k: usize) -> f64 {
    let premium: Vec<u8> = (0..(2 * k / 5) as u8).collect();
    let freemium: Vec<u8> = ((2 * k / 5) as u8..(4 * k / 5) as u8).collect();
    let table = layout(k, &premium, &freemium);
    let plb = Plb::new(PlbParams::PAPER, &table).expect("valid");
    let mut rng = SplitMix64::new(9);
    let loads: Vec<ReplicaLoad> = (0..k)
        .map(|_| ReplicaLoad {
            premium: rng.below(14) as u32,
            freemium: rng.below(14) as u32,
        })
        .collect();
    let table: RoleTable = table;
    let rounds = 200_000u32;
    let start = Instant::now();
    for i in 0..rounds {
        let class = if i % 2 == 0 { P } else { F };
        black_box(
            plb.admit(black_box(&table), black_box(&loads), class)
                .expect("admit"),
        );
    }
    start.elapsed().as_nanos() as f64 / f64::from(rounds)
}

#[test]
#[ignore = "timing report, run explicitly in release"]
fn admission_cost_report() {
    for k in [5, 16, 64] {
        println!("K = {k:2}: {:.0} ns per admission", measure(k));
    }
}

#[test]
#[ignore = "timing report, run explicitly in release"]
fn admission_parts_report() {
    use pgtier_policy::{Admission, Role, RoleChange};
    println!(
        "sizes: Role {} RoleChange {} Admission {} RoleTable {}",
        std::mem::size_of::<Role>(),
        std::mem::size_of::<RoleChange>(),
        std::mem::size_of::<Admission>(),
        std::mem::size_of::<RoleTable>()
    );
    let table = paper_table();
    let plb = paper_plb();
    let l = loads(&[(3, 0), (4, 0), (0, 2), (0, 5), (0, 0)]);
    let rounds = 1_000_000u32;
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(
            plb.returns(black_box(&table), black_box(&l))
                .expect("returns"),
        );
    }
    let returns_ns = start.elapsed().as_nanos() as f64 / f64::from(rounds);
    let start = Instant::now();
    for _ in 0..rounds {
        black_box(pgtier_policy::least_sessions(
            black_box(&table),
            black_box(&l),
        ));
    }
    let scan_ns = start.elapsed().as_nanos() as f64 / f64::from(rounds);
    println!("returns {returns_ns:.0} ns, one least-loaded scan {scan_ns:.0} ns");
}
