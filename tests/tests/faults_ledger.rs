//! The write ledger of the fault harness (bench/faults.sh) against real servers in network
//! namespaces: an undisturbed write load through pgtier must check clean, and the check must
//! then catch an acknowledged id deleted on the primary and an id present twice. A check
//! that cannot see a lost write would make every "0 lost" in docs/reliability.md empty.
//!
//! Needs root (network namespaces) and `ip`, as CI has; as another user it says so and
//! passes. Its namespaces are `faults-t-*` on 10.26.11.0/24, apart from the harness's own.

use pgtier_tests::faults::netns::Lab;
use pgtier_tests::faults::scenarios::{self, HOSTS};

#[test]
fn the_ledger_check_catches_a_lost_and_a_duplicated_write() {
    // SAFETY: geteuid takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: network namespaces need root");
        return;
    }
    let lab = Lab::create("faults-t", "10.26.11", &HOSTS).expect("lab namespaces");
    let outcome = scenarios::self_check(&lab);
    drop(lab);
    let _ = std::fs::remove_dir_all(scenarios::work_dir());
    let line = outcome.expect("the ledger self-check");
    assert!(line.contains("reported lost"), "{line}");
}
