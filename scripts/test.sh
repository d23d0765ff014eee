#!/usr/bin/env bash
# The project's test command (README, CI): installs what the tests need, then runs
# formatting, lints, the whole workspace's tests against real PostgreSQL servers, short
# fuzz runs and the instruction budgets. Run as root (servers are started as the `postgres`
# user) or as a user that can run initdb. Set PGTIER_SKIP_FUZZ=1 to skip the fuzz smoke
# runs, PGTIER_SKIP_BUDGETS=1 to skip the instruction budgets (bench/budgets.toml),
# PGTIER_SKIP_LIVE=1 to skip the PLB live smoke (scripts/plb-live-smoke.sh),
# PGTIER_SKIP_PGB_SUITE=1 to skip PgBouncer's own suite (scripts/pgbouncer-suite.sh),
# PGTIER_SKIP_FAULTS=1 to skip the short fault-injection run (bench/faults.sh --short),
# PGTIER_SKIP_SOAK=1 to skip the 2-minute soak (bench/soak.sh runs the 30-minute one).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== shell scripts parse (bash -n)"
for f in scripts/*.sh bench/*.sh .ci/run; do bash -n "$f"; done
echo "== cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
echo "== cargo build (pgtier binary used by the end-to-end tests)"
cargo build --locked -p pgtier --bin pgtier
echo "== cargo test"
# The 1000-client test raises its own RLIMIT_NOFILE; let the hard limit allow it.
ulimit -Hn 65536 2>/dev/null || true
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
cargo test --workspace --locked --no-fail-fast -- --test-threads="${PGTIER_TEST_THREADS:-2}"

if [ "${PGTIER_SKIP_SOAK:-0}" != "1" ]; then
  echo "== soak, 2 minutes: pgtier's RSS, fds, pools and servers stay flat (pgtier-soak)"
  cargo build --locked -q -p pgtier-tests --bins
  cargo run --locked -q -p pgtier-tests --bin pgtier-soak -- --minutes 2
fi

if [ "${PGTIER_SKIP_PGB_SUITE:-0}" != "1" ]; then
  echo "== PgBouncer's own test suite against pgtier (tests/pgbouncer-suite/ci-subset.txt)"
  bash scripts/pgbouncer-suite.sh target/debug/pgtier
fi

if [ "${PGTIER_SKIP_FAULTS:-0}" != "1" ]; then
  echo "== faults under load in network namespaces, write ledger (bench/faults.sh --short)"
  bash bench/faults.sh --short
fi

if [ "${PGTIER_SKIP_LIVE:-0}" != "1" ]; then
  echo "== PLB live smoke (a shortened bench/plb-live.sh: cgroup-capped replicas, a cascade)"
  bash scripts/plb-live-smoke.sh
fi

if [ "${PGTIER_SKIP_FUZZ:-0}" != "1" ]; then
  echo "== fuzz smoke runs"
  bash scripts/fuzz-smoke.sh
fi
if [ "${PGTIER_SKIP_BUDGETS:-0}" != "1" ]; then
  # After the fuzz smoke, which has built the benchmarks' dependencies in the bench profile.
  bash bench/iai-budgets.sh
fi
echo "all tests passed"
