#!/usr/bin/env bash
# Short fuzz runs for CI: each cargo-fuzz target for a fixed time from the committed seed corpus;
# fails on any crash. Longer runs: see fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --version 0.13.2 --locked
(
    cd fuzz
    export RUSTC_BOOTSTRAP=1
    scratch=$(mktemp -d)
    cargo fuzz build
    for target in frame_decode startup_packet scram_server client_auth session_state engine read_only normalize; do
        mkdir -p "$scratch/$target" "corpus/$target"
        echo "fuzz: $target for ${PGTIER_FUZZ_SECONDS:-25} s"
        if ! cargo fuzz run "$target" "$scratch/$target" "corpus/$target" -- \
            -max_total_time="${PGTIER_FUZZ_SECONDS:-25}" -print_final_stats=1 >"$scratch/$target.log" 2>&1; then
            tail -n 60 "$scratch/$target.log"
            echo "fuzz: $target FAILED; the input is saved under fuzz/artifacts/$target/" >&2
            exit 1
        fi
        grep -E '^(Done|stat::number_of_executed_units)' "$scratch/$target.log" || true
    done
    rm -rf "$scratch"
)
# The wire benchmarks must at least build (running them is manual; see the wire report).
cargo bench -p pgtier-bench --bench wire_criterion --bench wire_iai --no-run
