#!/usr/bin/env bash
# A shortened bench/plb-live.sh for the test command: five cgroup-capped replicas, 5RR and PLB
# switched by reload, and the two-down cascade with its kills and rejoins, in about two
# minutes. It checks what the harness promises rather than any figure: every run's rows, the
# report's sections, both plots, per-replica CPU read from the cgroups, and PLB's repair and
# rejoin in SHOW EVENTS. Needs root (cgroups); a host without a writable cgroup CPU controller
# (the harness exits 3) is reported and skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "plb-live smoke: skipped (needs root for the cgroups)"
  exit 0
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$(pwd)/target}"
cargo build --locked -q -p pgtier --bin pgtier
cargo build --locked -q -p pgtier-bench --bin pgtier-load
out="$(mktemp -d /tmp/pgtier-plb-smoke.XXXXXX)"
trap 'rm -rf "$out"' EXIT

PGTIER_BIN="$CARGO_TARGET_DIR/debug/pgtier" PGTIER_LOAD_BIN="$CARGO_TARGET_DIR/debug/pgtier-load" \
  OUT="$out" STRATEGIES="5RR PLB" VARIANTS="" FAILURES="cascade" \
  SCALE=1 DURATION=6 LIGHT_DURATION=6 FAIL_DURATION=30 LIFETIME=2:4 RATE=2 LIGHT_RATE=1 \
  bash bench/plb-live.sh >"$out/stdout.txt" 2>"$out/stderr.txt" || {
  status=$?
  if [ "$status" = 3 ]; then
    echo "plb-live smoke: skipped: $(tail -1 "$out/stderr.txt")"
    exit 0
  fi
  cat "$out/stderr.txt" "$out/stdout.txt" >&2
  exit 1
}

fail() {
  echo "plb-live smoke: $*" >&2
  cat "$out/stdout.txt" >&2
  exit 1
}
for run in light-5RR 5RR PLB cascade-5RR cascade-PLB; do
  [ "$(wc -l <"$out/$run.csv")" -gt 10 ] || fail "$run.csv has (almost) no rows"
done
for section in "## Light load" "## Contention" "## Failure: cascade" "p95 inflation" "cluster u"; do
  grep -qF "$section" "$out/report.md" || fail "report.md lacks \"$section\""
done
for png in contention.png cascade.png; do
  [ -s "$out/$png" ] || fail "no $png"
done
# Every replica of every run used some CPU, as its cgroup counted it.
awk -F, 'NR > 1 && $3 <= 0 { bad = 1 } END { exit bad }' "$out/replica_cpu.csv" ||
  fail "a replica's cgroup counted no CPU: $(cat "$out/replica_cpu.csv")"
[ "$(grep -c ',kill,' "$out/faults.csv")" = 4 ] || fail "expected 4 kills in faults.csv"
grep -q ',down,' "$out/cascade-PLB-events.csv" || fail "PLB saw no replica go down"
grep -q ',rejoin,' "$out/cascade-PLB-events.csv" || fail "PLB saw no replica rejoin"
grep -q 'repair_to_target' "$out/cascade-PLB-events.csv" || fail "PLB did not repair to target"
echo "plb-live smoke: ok ($(grep -c . "$out/PLB.csv") PLB rows, faults and rejoins seen)"

# --proxies 2 (about a minute, its own cluster): one proxy and two independent ones, clients spread over both; the
# fleet too when this pgtier has one (SHOW FLEET), else the report must say it was not
# measured. No fleet scenarios here.
fleet_out="$out/proxies"
PGTIER_BIN="$CARGO_TARGET_DIR/debug/pgtier" PGTIER_LOAD_BIN="$CARGO_TARGET_DIR/debug/pgtier-load" \
  OUT="$fleet_out" FLEET_MODES="single independent fleet" FLEET_SCENARIOS="" \
  SCALE=1 DURATION=6 LIFETIME=2:3 RATE=2 \
  bash bench/plb-live.sh --proxies 2 >"$out/proxies-stdout.txt" 2>"$out/proxies-stderr.txt" || {
  cat "$out/proxies-stderr.txt" "$out/proxies-stdout.txt" >&2
  fail "--proxies 2 failed"
}
for run in single independent; do
  [ "$(wc -l <"$fleet_out/$run.csv")" -gt 10 ] || fail "--proxies 2: $run.csv has (almost) no rows"
done
# Round robin: both proxies got sessions, and the single proxy all of them.
[ "$(awk -F, 'NR > 1 { print $3 }' "$fleet_out/independent-proxies.csv" | sort -u | tr -d '\n')" = 01 ] ||
  fail "--proxies 2: the sessions did not go to both proxies"
[ "$(awk -F, 'NR > 1 { print $3 }' "$fleet_out/single-proxies.csv" | sort -u | tr -d '\n')" = 0 ] ||
  fail "--proxies 2: the single proxy's run used another port"
grep -qF "### Contention" "$fleet_out/fleet.md" || fail "--proxies 2: fleet.md lacks the contention table"
grep -qE '\*\*Fleet: not measured\.\*\*|Agreement over' "$fleet_out/fleet.md" ||
  fail "--proxies 2: fleet.md says neither the fleet's agreement nor why it was not measured"
echo "plb-live smoke: --proxies 2 ok ($(grep -c . "$fleet_out/independent.csv") rows over two proxies)"
