#!/usr/bin/env bash
# plb-live.sh: the PLB paper's experiment on real replicas through pgtier.
#
# A throw-away primary with pgbench data and $REPLICAS streaming replicas on loopback, each
# held to $REPLICA_CPU cores by a cgroup (v2 `cpu.max`, or v1 `cpu.cfs_quota_us` with
# `cpuacct` for the usage; the script says which, and stops when neither can be written).
# One pgtier (transaction mode) in front; users `premium` and `freemium` are the two classes.
# For each strategy the config's `routing` is rewritten and pgtier reloaded (SIGHUP), then
# `pgtier-load run` plays the same seeded workload (common random numbers): Poisson session
# arrivals per class, lifetimes in $LIFETIME, exponential think time, and a weighted mix of
# analytical queries over the pgbench tables (scans, aggregates, a join, a top-N sort: tens to
# hundreds of milliseconds each on a capped replica; parallel query is off so that a query's
# cost stays on its replica's quota).
#
# Runs: a light-load 5RR run (the reference for "contention"), then every strategy at
# contention. Per run: per-class median, p95, mean and goodput (pgtier-load summarize),
# per-replica CPU from the cgroups and the cluster's utilisation u (mean busy fraction of the
# quotas) with its CV, and PLB's role timeline (SHOW ROLE_EVENTS + SHOW EVENTS).
#
# Usage: bash bench/plb-live.sh [--quick]            (from the repository root, as root)
# Environment (defaults; --quick shortens DURATION and LIGHT_DURATION):
#   REPLICAS=5 REPLICA_CPU=0.25 SCALE=5 SEED=1 DURATION=60 LIGHT_DURATION=40
#   LIFETIME=5:15 THINK=0.5 PREMIUM_SHARE=0.25 RATE=2.5 (sessions/s at contention, both
#   classes) LIGHT_RATE=0.3 STRATEGIES="5RR 3RR+2RR 4RR+1RR PLB" THETA=3 POOL_SIZE=20
#   PGTIER_BIN=<release build> OUT=bench/out/plb-live-<time>
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

QUICK=0
[ "${1:-}" = --quick ] && QUICK=1
REPLICAS="${REPLICAS:-5}"
REPLICA_CPU="${REPLICA_CPU:-0.25}"
SCALE="${SCALE:-5}"
SEED="${SEED:-1}"
DURATION="${DURATION:-$([ "$QUICK" = 1 ] && echo 30 || echo 60)}"
LIGHT_DURATION="${LIGHT_DURATION:-$([ "$QUICK" = 1 ] && echo 20 || echo 40)}"
LIFETIME="${LIFETIME:-5:15}"
THINK="${THINK:-0.5}"
PREMIUM_SHARE="${PREMIUM_SHARE:-0.25}"
RATE="${RATE:-2.5}"
LIGHT_RATE="${LIGHT_RATE:-0.3}"
STRATEGIES="${STRATEGIES:-5RR 3RR+2RR 4RR+1RR PLB}"
THETA="${THETA:-3}"
POOL_SIZE="${POOL_SIZE:-20}"
OUT="${OUT:-bench/out/plb-live-$(date -u +%Y%m%dT%H%M%SZ)}"

# shellcheck source=bench/lib.sh
source bench/lib.sh

[ "$(id -u)" = 0 ] || { log "plb-live.sh needs root (cgroups, running PostgreSQL as postgres)"; exit 1; }
[ "$REPLICAS" -ge 5 ] || { log "the strategies need REPLICAS >= 5"; exit 1; }

# ---- tools -------------------------------------------------------------------------------
bench_tools
if [ -z "${PGTIER_LOAD_BIN:-}" ]; then
  log "building pgtier-load (release)"
  cargo build --release -q -p pgtier-bench --bin pgtier-load
  PGTIER_LOAD_BIN="$CARGO_TARGET_DIR/release/pgtier-load"
fi
mkdir -p "$OUT"

# ---- cgroups -----------------------------------------------------------------------------
# cg_mode: v2 (one hierarchy with the cpu controller) or v1 (cpu + cpuacct hierarchies).
cg_name="pgtier-live-$$"
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
  cg_mode=v2
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
    echo +cpu >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
elif [ -d /sys/fs/cgroup/cpu ] && [ -d /sys/fs/cgroup/cpuacct ]; then
  cg_mode=v1
else
  log "no usable cgroup CPU controller (neither cgroup v2 cpu.max nor v1 cpu + cpuacct)"; exit 1
fi
period_us=100000
quota_us="$(awk -v c="$REPLICA_CPU" -v p=$period_us 'BEGIN { printf "%d", c * p }')"

# cg_create I: the cgroup(s) of replica I with its quota.
cg_create() {
  if [ "$cg_mode" = v2 ]; then
    mkdir -p "/sys/fs/cgroup/$cg_name-$1"
    echo "$quota_us $period_us" >"/sys/fs/cgroup/$cg_name-$1/cpu.max"
  else
    mkdir -p "/sys/fs/cgroup/cpu/$cg_name-$1" "/sys/fs/cgroup/cpuacct/$cg_name-$1"
    echo $period_us >"/sys/fs/cgroup/cpu/$cg_name-$1/cpu.cfs_period_us"
    echo "$quota_us" >"/sys/fs/cgroup/cpu/$cg_name-$1/cpu.cfs_quota_us"
  fi
}
# cg_enter I PID: moves PID into replica I's cgroup(s); its children stay there.
cg_enter() {
  if [ "$cg_mode" = v2 ]; then
    echo "$2" >"/sys/fs/cgroup/$cg_name-$1/cgroup.procs"
  else
    echo "$2" >"/sys/fs/cgroup/cpu/$cg_name-$1/cgroup.procs"
    echo "$2" >"/sys/fs/cgroup/cpuacct/$cg_name-$1/cgroup.procs"
  fi
}
# cg_usage_us I: CPU time used by replica I's cgroup so far, in µs.
cg_usage_us() {
  if [ "$cg_mode" = v2 ]; then
    awk '/^usage_usec/ { print $2 }' "/sys/fs/cgroup/$cg_name-$1/cpu.stat"
  else
    awk '{ printf "%d\n", $1 / 1000 }' "/sys/fs/cgroup/cpuacct/$cg_name-$1/cpuacct.usage"
  fi
}
cg_remove() {
  local i
  for i in $(seq 0 $((REPLICAS - 1))); do
    if [ "$cg_mode" = v2 ]; then
      rmdir "/sys/fs/cgroup/$cg_name-$i" 2>/dev/null || true
    else
      rmdir "/sys/fs/cgroup/cpu/$cg_name-$i" "/sys/fs/cgroup/cpuacct/$cg_name-$i" 2>/dev/null || true
    fi
  done
}
log "cgroup $cg_mode: each replica held to $REPLICA_CPU cores ($quota_us µs per $period_us µs)"

# ---- servers -----------------------------------------------------------------------------
work="$(mktemp -d /tmp/pgtier-plb-live.XXXXXX)"
chmod 755 "$work"; chown postgres:postgres "$work"
pgtier_pid=""
cleanup() {
  set +e
  [ -n "$pgtier_pid" ] && kill -INT "$pgtier_pid" 2>/dev/null && sleep 0.5 && kill -9 "$pgtier_pid" 2>/dev/null
  for d in "$work"/r*/ "$work"/primary/; do
    [ -f "$d/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null 2>&1
  done
  sleep 0.5; cg_remove; rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pg_port="$(free_port)"; pgtier_port="$(free_port)"
mkdir -p "$work/primary"; chown postgres:postgres "$work/primary"
log "primary on 127.0.0.1:$pg_port (pgbench -i -s $SCALE)"
pg_initdb "$work/primary" "$pg_port" 100 "wal_level = replica
max_wal_senders = 20
wal_keep_size = 1024
hot_standby = on
max_parallel_workers_per_gather = 0
jit = off"
echo "host replication all 127.0.0.1/32 trust" >>"$work/primary/data/pg_hba.conf"
as_pg "$bindir/pg_ctl" -D "$work/primary/data" -l "$work/primary/postgres.log" -w start >/dev/null
as_pg "$bindir/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1
as_pg "$bindir/psql" -X -q -h 127.0.0.1 -p "$pg_port" -U postgres -c "CHECKPOINT" postgres

declare -a rport
# start_replica I: pg_ctl start from a shell already inside replica I's cgroup.
start_replica() {
  local dir="$work/r$1"
  (cg_enter "$1" "$BASHPID"; exec runuser -u postgres -- "$bindir/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w start >/dev/null)
}
for i in $(seq 0 $((REPLICAS - 1))); do
  rport[i]="$(free_port)"
  mkdir -p "$work/r$i"; chown postgres:postgres "$work/r$i"
  as_pg "$bindir/pg_basebackup" -h 127.0.0.1 -p "$pg_port" -U postgres -D "$work/r$i/data" -R -c fast -X stream
  sed -i "s/^port = .*/port = ${rport[i]}/; s#^unix_socket_directories = .*#unix_socket_directories = '$work/r$i'#" "$work/r$i/data/postgresql.conf"
  cg_create "$i"
  start_replica "$i"
  log "replica $i on 127.0.0.1:${rport[i]}"
done

# ---- pgtier ------------------------------------------------------------------------------
printf '"postgres" ""\n"premium" ""\n"freemium" ""\n' >"$work/userlist.txt"
r() { local out="" i; for i in "$@"; do out+="${out:+, }\"127.0.0.1:${rport[i]}\""; done; echo "$out"; }
all="$(r $(seq 0 $((REPLICAS - 1))))"

# routing_block STRATEGY: the read entry's routing for one strategy.
routing_block() {
  case "$1" in
    5RR) echo 'routing = "round_robin"' ;;
    3RR+2RR) printf 'routing = "dedicated"\n[databases.live.dedicated]\npremium = [%s]\nfreemium = [%s]\n' "$(r 0 1 2)" "$(r $(seq 3 $((REPLICAS - 1))))" ;;
    4RR+1RR) printf 'routing = "dedicated"\n[databases.live.dedicated]\npremium = [%s]\nfreemium = [%s]\n' "$(r 0 1 2 3)" "$(r $(seq 4 $((REPLICAS - 1))))" ;;
    PLB*) printf 'routing = "plb"\n[databases.live.plb]\npremium = [%s]\nfreemium = [%s]\ntheta_premium = %s\ntheta_freemium = %s\n' "$(r 0 1)" "$(r 2 3)" "$THETA" "$THETA" ;;
    *) log "unknown strategy $1"; exit 1 ;;
  esac
}
write_config() {
  cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $pgtier_port
workers = 1
auth_type = "trust"
auth_file = "$work/userlist.txt"
admin_users = ["postgres"]
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = 1000
query_wait_timeout = 120
log_level = "warn"

[users.premium]
class = "premium"
[users.freemium]
class = "freemium"

[databases.live]
dbname = "postgres"
user = "postgres"
replicas = [$all]
$(routing_block "$1")
CONF
}
write_config 5RR
PGTIER_LOG=warn "$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1 &
pgtier_pid=$!
wait_port "$pgtier_port" pgtier "$pgtier_pid" || { cat "$work/pgtier.log" >&2; exit 1; }

admin() { "$bindir/psql" -X -A -F ',' -P footer=off -h 127.0.0.1 -p "$pgtier_port" -U postgres -c "$1" pgtier; }
switch_to() {
  write_config "$1"; kill -HUP "$pgtier_pid"; sleep 1
  admin "SHOW ROUTERS" | grep -q "^live," || { log "reload to $1 failed"; cat "$work/pgtier.log" >&2; exit 1; }
}

# ---- queries -----------------------------------------------------------------------------
accounts=$((SCALE * 100000))
cat >"$work/queries.tsv" <<Q
# name	weight	SQL: TPC-H-like shapes over the pgbench tables
pricing_summary	2	SELECT bid, count(*), sum(abalance), avg(abalance), min(aid), max(aid) FROM pgbench_accounts GROUP BY bid
top_balances	2	SELECT aid, abalance FROM pgbench_accounts ORDER BY abalance DESC, aid LIMIT 20
branch_join	2	SELECT b.bid, count(*), sum(a.abalance) FROM pgbench_branches b JOIN pgbench_accounts a ON a.bid = b.bid WHERE a.aid % 7 = 3 GROUP BY b.bid
range_revenue	3	SELECT sum(abalance), count(*) FROM pgbench_accounts WHERE aid BETWEEN $((accounts / 4)) AND $((accounts / 2))
distinct_filler	1	SELECT count(DISTINCT substr(filler, 1, 4)) FROM pgbench_accounts WHERE aid % 3 = 0
point_lookup	4	SELECT * FROM pgbench_accounts WHERE aid = $((accounts / 3))
Q

# ---- runs --------------------------------------------------------------------------------
# run_load LABEL RATE SECONDS: one seeded workload through pgtier; per-replica CPU, u, roles.
run_load() {
  local label="$1" rate="$2" seconds="$3" i before=() after=() start end
  local rp rf
  rp="$(awk -v r="$rate" -v s="$PREMIUM_SHARE" 'BEGIN { printf "%.4f", r * s }')"
  rf="$(awk -v r="$rate" -v s="$PREMIUM_SHARE" 'BEGIN { printf "%.4f", r * (1 - s) }')"
  for i in $(seq 0 $((REPLICAS - 1))); do before[i]="$(cg_usage_us "$i")"; done
  start="$(date +%s.%N)"
  log "$label: $rp premium + $rf freemium sessions/s for ${seconds}s, lifetime $LIFETIME s, think $THINK s"
  "$PGTIER_LOAD_BIN" run --host 127.0.0.1 --port "$pgtier_port" --dbname live \
    --user-premium premium --user-freemium freemium --rate-premium "$rp" --rate-freemium "$rf" \
    --duration "$seconds" --lifetime "$LIFETIME" --think "$THINK" --queries "$work/queries.tsv" \
    --seed "$SEED" --out "$OUT/$label.csv" --progress 10 2>"$OUT/$label.log"
  end="$(date +%s.%N)"
  for i in $(seq 0 $((REPLICAS - 1))); do after[i]="$(cg_usage_us "$i")"; done
  {
    for i in $(seq 0 $((REPLICAS - 1))); do
      echo "$label,$i,${before[i]},${after[i]},$start,$end"
    done
  } | awk -F, -v q="$REPLICA_CPU" '{ u = ($4 - $3) / 1e6 / (($6 - $5) * q); printf "%s,%d,%.2f,%.3f\n", $1, $2, ($4 - $3) / 1e6, u }' >>"$OUT/replica_cpu.csv"
  admin "SHOW ROLE_EVENTS" >"$OUT/$label-role_events.csv" 2>/dev/null || true
  admin "SHOW EVENTS" >"$OUT/$label-events.csv" 2>/dev/null || true
}

echo "label,replica,cpu_s,u" >"$OUT/replica_cpu.csv"
switch_to 5RR
run_load light-5RR "$LIGHT_RATE" "$LIGHT_DURATION"
for s in $STRATEGIES; do
  switch_to "$s"
  run_load "$s" "$RATE" "$DURATION"
done

# ---- report ------------------------------------------------------------------------------
# The window: after the first 20 % of the arrivals (ramp-up) until arrivals stop.
from="$(awk -v d="$DURATION" 'BEGIN { printf "%.1f", d * 0.2 }')"
light_from="$(awk -v d="$LIGHT_DURATION" 'BEGIN { printf "%.1f", d * 0.2 }')"
ins=(); for s in $STRATEGIES; do ins+=(--in "$s=$OUT/$s.csv"); done
"$PGTIER_LOAD_BIN" summarize --in "light-5RR=$OUT/light-5RR.csv" --phases "steady:$light_from:$LIGHT_DURATION" \
  --md "$OUT/light.md" --csv "$OUT/light.csv" >/dev/null
"$PGTIER_LOAD_BIN" summarize "${ins[@]}" --phases "steady:$from:$DURATION" --baseline 5RR \
  --md "$OUT/contention.md" --csv "$OUT/contention.csv" --png "$OUT/contention.png" >/dev/null
{
  echo "# PLB live, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "$REPLICAS replicas at $REPLICA_CPU cores each (cgroup $cg_mode), pgbench scale $SCALE, seed $SEED;"
  echo "premium share $PREMIUM_SHARE, lifetime $LIFETIME s, think $THINK s, θ = $THETA, pool $POOL_SIZE per replica."
  echo
  echo "## Light load (5RR, $LIGHT_RATE sessions/s)"
  echo
  cat "$OUT/light.md"
  echo
  echo "## Contention ($RATE sessions/s)"
  echo
  cat "$OUT/contention.md"
  echo
  echo "## Replica CPU (busy fraction of each quota over the whole run) and cluster u"
  echo
  echo "| run | per replica u | cluster u | CV(u) |"
  echo "| --- | --- | ---: | ---: |"
  awk -F, 'NR > 1 { us[$1] = us[$1] (us[$1] == "" ? "" : " ") $4; s[$1] += $4; ss[$1] += $4 * $4; n[$1]++; if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 } }
    END { for (i = 1; i <= k; i++) { l = order[i]; m = s[l] / n[l]; v = ss[l] / n[l] - m * m; if (v < 0) v = 0;
      printf "| %s | %s | %.2f | %.2f |\n", l, us[l], m, (m > 0 ? sqrt(v) / m : 0) } }' "$OUT/replica_cpu.csv"
} >"$OUT/report.md"
cat "$OUT/report.md"
echo
echo "plots: $OUT/contention.png"
echo "per-query rows: $OUT/<run>.csv; role timelines: $OUT/<run>-role_events.csv, $OUT/<run>-events.csv"
