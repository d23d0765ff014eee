#!/usr/bin/env bash
# class-waiting.sh: what waiting by class buys premium clients and costs freemium ones when a
# pool is exhausted, waiter_policy = "fifo" against "class", in one sitting.
#
# A throw-away PostgreSQL and pgtier (1 worker, transaction mode, default_pool_size
# $POOL_SIZE). One entry logs every client in as `postgres`, so the users `premium` (class
# premium) and `freemium` (the entry's class) share one pool. Each transaction holds its
# server $HOLD_MS ms (`SELECT pg_sleep`). Two pgbench runs at once on that pool:
# - freemium: $FREEMIUM_CLIENTS clients, closed loop (each sends its next transaction at once:
#   the pool stays exhausted for the whole run);
# - premium: $PREMIUM_CLIENTS clients at a fixed rate (`pgbench -R`, Poisson arrivals) of
#   $PREMIUM_SHARE of the pool's capacity, measured first by a freemium-only run of
#   $CALIBRATE s. PREMIUM_RATE=N fixes the rate (tps); PREMIUM_RATE=closed makes premium a
#   closed loop too (see docs/benchmarks.md: then no order can meet both bars).
# The pair runs once per policy ($POLICIES, each with a fresh pgtier). Per-transaction
# latencies come from pgbench --log (for the rated run, counted from the scheduled start,
# as pgbench's own summary does: time + schedule_lag); the first $WARMUP_S s are dropped.
# Prints per class and policy the transactions, p50 and p95 in ms, and the ratios
# premium_p95(class)/premium_p95(fifo) and freemium_p95(class)/freemium_p95(fifo) against the
# bar (premium <= 0.5, freemium <= 1.15). Output is Markdown. Only 127.0.0.1 is used.
#
# Usage: bash bench/class-waiting.sh            (from the repository root)
# Environment (defaults): POOL_SIZE=4 HOLD_MS=2 PREMIUM_CLIENTS=8 FREEMIUM_CLIENTS=24
#   DURATION=30 CALIBRATE=10 WARMUP_S=2 PREMIUM_SHARE=0.2 PREMIUM_RATE=auto
#   WAITER_AGING=<pgtier's default> POLICIES="fifo class"
#   PGTIER_BIN=<built with cargo build --release> OUT=bench/out/class-waiting-<time>.md
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

POOL_SIZE="${POOL_SIZE:-4}"
HOLD_MS="${HOLD_MS:-2}"
PREMIUM_CLIENTS="${PREMIUM_CLIENTS:-8}"
FREEMIUM_CLIENTS="${FREEMIUM_CLIENTS:-24}"
DURATION="${DURATION:-30}"
CALIBRATE="${CALIBRATE:-10}"
WARMUP_S="${WARMUP_S:-2}"
PREMIUM_SHARE="${PREMIUM_SHARE:-0.2}"
PREMIUM_RATE="${PREMIUM_RATE:-auto}"
WAITER_AGING="${WAITER_AGING:-}"
POLICIES="${POLICIES:-fifo class}"
mkdir -p bench/out
OUT="${OUT:-bench/out/class-waiting-$(date -u +%Y%m%dT%H%M%SZ).md}"

# shellcheck source=bench/lib.sh
source bench/lib.sh

# ---- tools -------------------------------------------------------------------------------
bench_tools
pgbench_bin="$(command -v pgbench || echo "$bindir/pgbench")"


work="$(mktemp -d /tmp/pgtier-class-waiting.XXXXXX)"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"
pgtier_pid=""
stop_pgtier() {
  if [ -n "$pgtier_pid" ]; then
    kill -INT "$pgtier_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pgtier_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pgtier_pid" 2>/dev/null || true
    wait "$pgtier_pid" 2>/dev/null || true
    pgtier_pid=""
  fi
}
cleanup() {
  set +e
  stop_pgtier
  [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- PostgreSQL --------------------------------------------------------------------------
pg_port="$(free_port)"; pgtier_port="$(free_port)"
log "initdb + start PostgreSQL on 127.0.0.1:$pg_port"
as_pg "$bindir/initdb" -D "$work/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >/dev/null
cat >>"$work/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$work'
max_connections = 100
fsync = off
synchronous_commit = off
CONF
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w start >/dev/null

# ---- pgtier ------------------------------------------------------------------------------
printf '"postgres" ""\n"premium" ""\n"freemium" ""\n' >"$work/userlist.txt"
hold_s="$(awk -v ms="$HOLD_MS" 'BEGIN { printf "%.4f", ms / 1000 }')"
printf 'SELECT pg_sleep(%s);\n' "$hold_s" >"$work/hold.sql"


# start_pgtier POLICY: a fresh pgtier with waiter_policy = POLICY.
start_pgtier() {
  local aging=""
  [ -n "$WAITER_AGING" ] && aging="waiter_aging = $WAITER_AGING"
  cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $pgtier_port
workers = 1
auth_type = "trust"
auth_file = "$work/userlist.txt"
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = 500
query_wait_timeout = 60
log_level = "warn"
waiter_policy = "$1"
$aging

[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
user = "postgres"
class = "freemium"

[users.premium]
class = "premium"
CONF
  PGTIER_LOG=warn "$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier-$1.log" 2>&1 &
  pgtier_pid=$!
  if ! wait_port "$pgtier_port" pgtier "$pgtier_pid"; then
    log "pgtier did not start; its log:"; cat "$work/pgtier-$1.log" >&2; exit 1
  fi
}

# pgbench_run USER CLIENTS SECONDS LOG_PREFIX [RATE]: one pgbench through pgtier.
pgbench_run() {
  local user="$1" clients="$2" seconds="$3" prefix="$4" rate="${5:-}"
  local args=(-n -h 127.0.0.1 -p "$pgtier_port" -U "$user" -c "$clients" -j 2 -T "$seconds"
    -f "$work/hold.sql" --log --log-prefix="$prefix")
  [ -n "$rate" ] && args+=(-R "$rate")
  (cd "$work" && "$pgbench_bin" "${args[@]}" postgres) >"$prefix.out" 2>&1
}

# latencies PREFIX START_EPOCH: per-transaction latency in µs (time + schedule_lag) of the
# logs of one pgbench, transactions started at or after START_EPOCH.
latencies() {
  cat "$1".[0-9]* 2>/dev/null | awk -v from="$2" \
    '$3 ~ /^[0-9]+$/ && $5 >= from { lag = (NF >= 7 && $7 ~ /^[0-9]+$/) ? $7 : 0; print $3 + lag }'
}

# stats FILE: "count p50_ms p95_ms" of the latencies in FILE.
stats() {
  sort -n "$1" | awk '{ v[NR] = $1 }
    END {
      if (NR == 0) { print "0 - -"; exit }
      i50 = int(0.50 * NR); if (i50 < 1) i50 = 1
      i95 = int(0.95 * NR + 0.999999); if (i95 > NR) i95 = NR
      printf "%d %.2f %.2f\n", NR, v[i50] / 1000, v[i95] / 1000
    }'
}

# ---- calibration -------------------------------------------------------------------------
if [ "$PREMIUM_RATE" = auto ]; then
  start_pgtier fifo
  log "calibrating: $FREEMIUM_CLIENTS freemium clients alone for ${CALIBRATE}s"
  pgbench_run freemium "$FREEMIUM_CLIENTS" "$CALIBRATE" "$work/calibrate"
  stop_pgtier
  capacity="$(awk '/^tps = / { printf "%d", $3; exit }' "$work/calibrate.out")"
  [ -n "$capacity" ] && [ "$capacity" -gt 0 ] || { cat "$work/calibrate.out" >&2; exit 1; }
  premium_rate="$(awk -v c="$capacity" -v s="$PREMIUM_SHARE" 'BEGIN { r = int(c * s); if (r < 1) r = 1; print r }')"
  log "capacity ${capacity} tps; premium rate ${premium_rate} tps"
elif [ "$PREMIUM_RATE" = closed ]; then
  capacity="-"; premium_rate=""
else
  capacity="-"; premium_rate="$PREMIUM_RATE"
fi

# ---- runs --------------------------------------------------------------------------------
declare -A p50 p95 count
for policy in $POLICIES; do
  start_pgtier "$policy"
  log "waiter_policy = $policy: premium ${PREMIUM_CLIENTS} clients (${premium_rate:-closed loop}), freemium ${FREEMIUM_CLIENTS} clients, ${DURATION}s"
  start_epoch=$(( $(date +%s) + WARMUP_S ))
  pgbench_run premium "$PREMIUM_CLIENTS" "$DURATION" "$work/premium-$policy" "$premium_rate" &
  premium_job=$!
  pgbench_run freemium "$FREEMIUM_CLIENTS" "$DURATION" "$work/freemium-$policy" &
  freemium_job=$!
  wait "$premium_job" || { cat "$work/premium-$policy.out" >&2; exit 1; }
  wait "$freemium_job" || { cat "$work/freemium-$policy.out" >&2; exit 1; }
  stop_pgtier
  for class in premium freemium; do
    latencies "$work/$class-$policy" "$start_epoch" >"$work/$class-$policy.us"
    read -r n a b < <(stats "$work/$class-$policy.us")
    count[$class-$policy]="$n"; p50[$class-$policy]="$a"; p95[$class-$policy]="$b"
  done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
verdict() { awk -v r="$1" -v bar="$2" 'BEGIN { if (r == "-") print "-"; else if (r <= bar) print "meets"; else print "misses" }'; }

{
  echo "# Class-aware waiting, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "pool_size $POOL_SIZE, transactions hold the server ${HOLD_MS} ms; premium $PREMIUM_CLIENTS clients at ${premium_rate:-closed loop}${premium_rate:+ tps} (capacity $capacity tps), freemium $FREEMIUM_CLIENTS clients closed loop; ${DURATION} s per policy, the first ${WARMUP_S} s dropped; waiter_aging ${WAITER_AGING:-default}."
  echo
  echo "| policy | class | transactions | p50 ms | p95 ms |"
  echo "| --- | --- | ---: | ---: | ---: |"
  for policy in $POLICIES; do
    for class in premium freemium; do
      echo "| $policy | $class | ${count[$class-$policy]} | ${p50[$class-$policy]} | ${p95[$class-$policy]} |"
    done
  done
  if [[ " $POLICIES " == *" fifo "* && " $POLICIES " == *" class "* ]]; then
    premium_ratio="$(ratio "${p95[premium-class]}" "${p95[premium-fifo]}")"
    freemium_ratio="$(ratio "${p95[freemium-class]}" "${p95[freemium-fifo]}")"
    echo
    echo "| ratio | value | bar | |"
    echo "| --- | ---: | ---: | --- |"
    echo "| premium_p95(class) / premium_p95(fifo) | $premium_ratio | 0.5 | $(verdict "$premium_ratio" 0.5) |"
    echo "| freemium_p95(class) / freemium_p95(fifo) | $freemium_ratio | 1.15 | $(verdict "$freemium_ratio" 1.15) |"
  fi
} | tee "$OUT"
log "written to $OUT"
