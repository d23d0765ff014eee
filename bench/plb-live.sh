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
# analytical queries (QUERIES=pgbench: TPC-H shapes over the pgbench tables; QUERIES=tpch:
# TPC-H queries over tpchgen-cli data; tens of milliseconds to seconds each on a capped
# replica; parallel query is off so that a query's cost stays on its replica's quota).
#
# Runs: a light-load 5RR run (the reference for "contention"), then every strategy at
# contention. Per run: per-class median, p95, mean and goodput (pgtier-load summarize),
# per-replica CPU from the cgroups and the cluster's utilisation u (mean busy fraction of the
# quotas) with its CV, and PLB's role timeline (SHOW ROLE_EVENTS + SHOW EVENTS).
#
# Failures (001 §V), each at the contention rate, replicas killed with `pg_ctl stop -m
# immediate` and restarted inside their cgroup, phases of equal length after a ramp-up:
#   cascade      5RR against PLB: replica 0, then replica 1 (PLB's two premium replicas) go
#                down, then rejoin in the same order (before, one-down, two-down,
#                one-rejoined, rejoined).
#   class-local  3RR+2RR against PLB: replica 0 (premium in both) down, then back (before,
#                fault, rejoined).
# Per phase and class: p95 inflation (p95 / the run's own "before" p95) and goodput retention
# (goodput / "before" goodput), and PLB against the baseline in the same phase.
#
# Variants beyond the paper (VARIANTS): the strategies' PLB with each replica's pool held to
# WAIT_POOL servers so that queries queue inside pgtier, once with `waiter_policy = "fifo"`
# (PgBouncer's order) and once with "class" (premium first, freemium aged); pgtier restarts
# between them since a pool's size is fixed at creation. And PLB+inflight: PLB's roles still
# follow its session counts, but each transaction goes to the less busy (in-flight reads) of
# two replicas drawn from those serving the session's class (a reader entry with
# plb_per_transaction; the primary, uncapped, serves only reads no replica may take, counted
# as primary_fallbacks in <run>-readers.csv). PLB+kp1: PLB with K_P = 1 (premium-side
# borrowing by freemium allowed down to one premium replica). PLB+txsignal: PLB deciding on
# transactions in flight instead of open sessions (`load_signal = "in_flight"`, θ = THETA_TX
# transactions per replica); sessions stay pinned as in PLB. FAIL_VARIANTS run in each
# failure scenario next to its two strategies: PLB+drain is PLB with the recovery-tail drain
# (`recovery_drain = true`: after a rejoin, sessions leave overloaded survivors between
# transactions, and the rejoined replica goes to the needier class).
#
# Three classes (THREE_CLASS_STRATEGIES): users premium, freemium and tier2 arrive in the
# shares THREE_SHARES at RATE. PLB is the paper's two-class PLB with tier2 served as freemium
# (one premium pool, ranks 1 and 2 share freemium's); PLB/top2 the same with freemium users
# served as premium (ranks 0 and 1 share premium's pool); PLB-tiered is PLB over three ranks
# (`tiers`: premium r0, freemium r1, tier2 r2 r3, r4 Mixed, K = 1, 1, 2, α = 0.6, 0.7, 0.8 as
# the simulator's `pgtier-sim tiers --live`), the only one that
# keeps three service levels. Compared in one table with PLB as the baseline.
#
# Several proxies (issue 27; bench/plb-live-fleet.sh, sourced): `--proxies N` runs N pgtier
# processes in front of the same replicas, the clients spread over them round robin, and
# compares one proxy, N independent proxies, N with θ split by N and the fleet
# (`fleet_name`), then the fleet's leader-kill and store-outage scenarios; its own report
# (fleet.md) replaces the grid's. See that file's header for its settings.
#
# Usage: bash bench/plb-live.sh [--quick] [--proxies N]   (from the repository root, as root)
# Exit status 3: no cgroup CPU controller that can be written here.
# Environment (defaults; --quick shortens the runs, keeps only the cascade and no variants):
#   REPLICAS=5 REPLICA_CPU=0.25 SCALE=5 SEED=1 DURATION=60 LIGHT_DURATION=40
#   QUERIES=pgbench (the TPC-H-shaped mix over pgbench -i -s $SCALE) or tpch (TPC-H data from
#   tpchgen-cli at TPCH_SCALE=0.1, installed with pip when missing, and the TPC-H queries of
#   bench/plb-live-tpch.tsv; heavier, so lower RATE)
#   LIFETIME=5:15 THINK=0.5 PREMIUM_SHARE=0.25 RATE=2.5 (sessions/s at contention, both
#   classes) LIGHT_RATE=0.3 STRATEGIES="5RR 3RR+2RR 4RR+1RR PLB" THETA=3 THETA_TX=2
#   POOL_SIZE=20
#   FAILURES="cascade class-local" (--quick: cascade) FAIL_DURATION=150 (--quick: 40)
#   VARIANTS="PLB+wait-fifo PLB+wait-class PLB+inflight PLB+txsignal" (--quick: none;
#   PLB+kp1 on request)
#   WAIT_POOL=2 FAIL_VARIANTS="" (e.g. "PLB+drain")
#   THREE_CLASS_STRATEGIES="PLB PLB/top2 PLB-tiered" (--quick: none) THREE_SHARES="0.2 0.3 0.5"
#   PGTIER_BIN=<release build> OUT=bench/out/plb-live-<time>
#   PORT_BASE (unset: free ports; set: consecutive ports from it, for a shared machine)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

QUICK=0
PROXIES=0
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) QUICK=1 ;;
    --proxies) PROXIES="${2:-}"; shift ;;
    *) echo "usage: bash bench/plb-live.sh [--quick] [--proxies N]" >&2; exit 2 ;;
  esac
  shift
done
case "$PROXIES" in ''|*[!0-9]*) echo "--proxies needs a number" >&2; exit 2 ;; esac
REPLICAS="${REPLICAS:-5}"
REPLICA_CPU="${REPLICA_CPU:-0.25}"
SCALE="${SCALE:-5}"
QUERIES="${QUERIES:-pgbench}"
TPCH_SCALE="${TPCH_SCALE:-0.1}"
SEED="${SEED:-1}"
DURATION="${DURATION:-$([ "$QUICK" = 1 ] && echo 22 || echo 60)}"
LIGHT_DURATION="${LIGHT_DURATION:-$([ "$QUICK" = 1 ] && echo 15 || echo 40)}"
LIFETIME="${LIFETIME:-5:15}"
THINK="${THINK:-0.5}"
PREMIUM_SHARE="${PREMIUM_SHARE:-0.25}"
RATE="${RATE:-2.5}"
LIGHT_RATE="${LIGHT_RATE:-0.3}"
STRATEGIES="${STRATEGIES-5RR 3RR+2RR 4RR+1RR PLB}"
THETA="${THETA:-3}"
THETA_TX="${THETA_TX:-2}"
POOL_SIZE="${POOL_SIZE:-20}"
FAILURES="${FAILURES-$([ "$QUICK" = 1 ] && echo cascade || echo "cascade class-local")}"
FAIL_DURATION="${FAIL_DURATION:-$([ "$QUICK" = 1 ] && echo 40 || echo 150)}"
VARIANTS="${VARIANTS-$([ "$QUICK" = 1 ] && echo "" || echo "PLB+wait-fifo PLB+wait-class PLB+inflight PLB+txsignal")}"
WAIT_POOL="${WAIT_POOL:-2}"
FAIL_VARIANTS="${FAIL_VARIANTS:-}"
THREE_CLASS_STRATEGIES="${THREE_CLASS_STRATEGIES-$([ "$QUICK" = 1 ] && echo "" || echo "PLB PLB/top2 PLB-tiered")}"
THREE_SHARES="${THREE_SHARES:-0.2 0.3 0.5}"
OUT="${OUT:-bench/out/plb-live-$(date -u +%Y%m%dT%H%M%SZ)}"

# shellcheck source=bench/lib.sh
source bench/lib.sh
if [ -n "${PORT_BASE:-}" ]; then
  # Consecutive ports from PORT_BASE (a counter file, since callers run in subshells).
  port_file="$(mktemp /tmp/pgtier-plb-live-ports.XXXXXX)"; echo "$PORT_BASE" >"$port_file"
  free_port() { local p; p="$(cat "$port_file")"; echo $((p + 1)) >"$port_file"; echo "$p"; }
fi

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
case "$QUERIES" in
  pgbench) ;;
  tpch)
    command -v tpchgen-cli >/dev/null || { log "installing tpchgen-cli (pip)"; pip install -q tpchgen-cli >/dev/null 2>&1 || true; }
    command -v tpchgen-cli >/dev/null || { log "QUERIES=tpch needs tpchgen-cli (pip install tpchgen-cli)"; exit 1; } ;;
  *) log "QUERIES is pgbench or tpch, not $QUERIES"; exit 1 ;;
esac

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
  log "no usable cgroup CPU controller (neither cgroup v2 cpu.max nor v1 cpu + cpuacct)"; exit 3
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
# A controller that is listed but cannot be written (a read-only cgroupfs in a container):
# said, with its own exit status (3) so that callers can tell it from a failed run.
if ! { cg_create probe && cg_usage_us probe >/dev/null; } 2>/dev/null; then
  rmdir "/sys/fs/cgroup/$cg_name-probe" "/sys/fs/cgroup/cpu/$cg_name-probe" "/sys/fs/cgroup/cpuacct/$cg_name-probe" 2>/dev/null || true
  log "cgroup $cg_mode is present but a replica cgroup cannot be created and capped here"; exit 3
fi
rmdir "/sys/fs/cgroup/$cg_name-probe" "/sys/fs/cgroup/cpu/$cg_name-probe" "/sys/fs/cgroup/cpuacct/$cg_name-probe" 2>/dev/null || true
log "cgroup $cg_mode: each replica held to $REPLICA_CPU cores ($quota_us µs per $period_us µs)"

# ---- servers -----------------------------------------------------------------------------
work="$(mktemp -d /tmp/pgtier-plb-live.XXXXXX)"
chmod 755 "$work"; chown postgres:postgres "$work"
pgtier_pid=""
cleanup() {
  set +e
  [ -n "$pgtier_pid" ] && kill -INT "$pgtier_pid" 2>/dev/null && sleep 0.5 && kill -9 "$pgtier_pid" 2>/dev/null
  # bench/plb-live-fleet.sh's proxies, by the pid files it keeps.
  for f in "$work"/proxy-*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  [ -n "${port_file:-}" ] && rm -f "$port_file"
  for d in "$work"/r*/ "$work"/primary/; do
    [ -f "$d/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$d/data" -m immediate -w stop >/dev/null 2>&1
  done
  sleep 0.5; cg_remove; rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pg_port="$(free_port)"; pgtier_port="$(free_port)"
mkdir -p "$work/primary"; chown postgres:postgres "$work/primary"
data="$([ "$QUERIES" = tpch ] && echo "TPC-H SF $TPCH_SCALE (tpchgen-cli)" || echo "pgbench scale $SCALE")"
log "primary on 127.0.0.1:$pg_port ($data)"
pg_initdb "$work/primary" "$pg_port" 100 "wal_level = replica
max_wal_senders = 20
wal_keep_size = 1024
hot_standby = on
max_parallel_workers_per_gather = 0
jit = off"
echo "host replication all 127.0.0.1/32 trust" >>"$work/primary/data/pg_hba.conf"
as_pg "$bindir/pg_ctl" -D "$work/primary/data" -l "$work/primary/postgres.log" -w start >/dev/null
psql_primary() { as_pg "$bindir/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres "$@" postgres; }
if [ "$QUERIES" = tpch ]; then
  tpchgen-cli -s "$TPCH_SCALE" --output-dir="$work/tpch" >/dev/null
  psql_primary <"$repo/bench/plb-live-tpch.sql" >/dev/null
  for t in region nation supplier customer part partsupp orders lineitem; do
    # tpchgen's .tbl lines end with the delimiter, which COPY would read as one more column.
    sed 's/|$//' "$work/tpch/$t.tbl" | psql_primary -c "COPY $t FROM STDIN WITH (FORMAT text, DELIMITER '|')"
  done
  psql_primary -c "ANALYZE"
  rm -rf "$work/tpch"
else
  as_pg "$bindir/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1
fi
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
printf '"postgres" ""\n"premium" ""\n"freemium" ""\n"tier2" ""\n' >"$work/userlist.txt"
r() { local out="" i; for i in "$@"; do out+="${out:+, }\"127.0.0.1:${rport[i]}\""; done; echo "$out"; }
all="$(r $(seq 0 $((REPLICAS - 1))))"

# routing_block STRATEGY: the read entry's routing for one strategy.
routing_block() {
  case "$1" in
    5RR) echo 'routing = "round_robin"' ;;
    PLB/top2) routing_block PLB ;;
    3RR+2RR) printf 'routing = "dedicated"\n[databases.live.dedicated]\npremium = [%s]\nfreemium = [%s]\n' "$(r 0 1 2)" "$(r $(seq 3 $((REPLICAS - 1))))" ;;
    4RR+1RR) printf 'routing = "dedicated"\n[databases.live.dedicated]\npremium = [%s]\nfreemium = [%s]\n' "$(r 0 1 2 3)" "$(r $(seq 4 $((REPLICAS - 1))))" ;;
    PLB-tiered) printf 'routing = "plb"\n[databases.live.plb]\ntiers = [[%s], [%s], [%s]]\ntier_theta = [%s, %s, %s]\ntier_alpha = [0.6, 0.7, 0.8]\ntier_target = [1, 1, 2]\n' \
      "$(r 0)" "$(r 1)" "$(r 2 3)" "$THETA" "$THETA" "$THETA" ;;
    PLB*) theta="$THETA"; case "$1" in *+txsignal) theta="$THETA_TX" ;; esac
      printf 'routing = "plb"\n[databases.live.plb]\npremium = [%s]\nfreemium = [%s]\ntheta_premium = %s\ntheta_freemium = %s\n' "$(r 0 1)" "$(r 2 3)" "$theta" "$theta"
      # PLB+kp1: K_P = 1, so freemium may borrow a Premium-empty premium replica while premium
      # keeps one (the paper's K_P = |R_P| = 2 never lets it). PLB+txsignal: θ counts
      # transactions in flight, not open sessions.
      case "$1" in
        *+kp1) echo 'premium_target = 1' ;;
        *+txsignal) echo 'load_signal = "in_flight"' ;;
        *+drain) echo 'recovery_drain = true' ;;
      esac ;;
    *) log "unknown strategy $1"; exit 1 ;;
  esac
}
# pool_settings STRATEGY: the pool size and waiting order a strategy runs with (and, as a
# comment, whether the entry is a reader entry, which a restart sets up).
pool_settings() {
  case "$1" in
    *+inflight) printf 'default_pool_size = %s\n# reader entry\n' "$POOL_SIZE" ;;
    *+wait-fifo) printf 'default_pool_size = %s\nwaiter_policy = "fifo"\n' "$WAIT_POOL" ;;
    *+wait-class) printf 'default_pool_size = %s\nwaiter_policy = "class"\n' "$WAIT_POOL" ;;
    *) printf 'default_pool_size = %s\n' "$POOL_SIZE" ;;
  esac
}
# entry_settings STRATEGY: keys of the database entry itself. PLB+inflight makes it a reader
# entry (the primary for anything not read-only, which this workload never sends) whose
# transactions each go to the replica with fewer in-flight reads of two drawn among those
# PLB's roles currently give the session's class (plb_per_transaction).
entry_settings() {
  case "$1" in
    *+inflight) printf 'primary = "127.0.0.1:%s"\nplb_per_transaction = true\n' "$pg_port" ;;
  esac
}
# user_classes STRATEGY: each user's class. tier2 is served as freemium by two-class
# routings; PLB/top2 serves the freemium user as premium, so ranks 0 and 1 share a pool.
user_classes() {
  local freemium=freemium
  [ "$1" = PLB/top2 ] && freemium=premium
  printf '[users.premium]\nclass = "premium"\n[users.freemium]\nclass = "%s"\n[users.tier2]\nclass = "tier2"\n' "$freemium"
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
$(pool_settings "$1")
max_client_conn = 1000
query_wait_timeout = 120
log_level = "warn"

$(user_classes "$1")

[databases.live]
dbname = "postgres"
user = "postgres"
replicas = [$all]
$(entry_settings "$1")
$(routing_block "$1")
CONF
}
start_pgtier() {
  PGTIER_LOG=warn "$PGTIER_BIN" --config "$work/pgtier.toml" >>"$work/pgtier.log" 2>&1 &
  pgtier_pid=$!
  wait_port "$pgtier_port" pgtier "$pgtier_pid" || { cat "$work/pgtier.log" >&2; exit 1; }
}
if [ "$PROXIES" = 0 ]; then
  write_config 5RR
  start_pgtier
  current_pools="$(pool_settings 5RR)"
fi

admin() { "$bindir/psql" -X -A -F ',' -P footer=off -h 127.0.0.1 -p "$pgtier_port" -U postgres -c "$1" pgtier; }
# switch_to STRATEGY: a reload when only the routing changes, a restart when the pools do.
switch_to() {
  write_config "$1"
  if [ "$(pool_settings "$1")" = "$current_pools" ]; then
    kill -HUP "$pgtier_pid"; sleep 1
  else
    kill -INT "$pgtier_pid"; wait "$pgtier_pid" 2>/dev/null || true
    start_pgtier; current_pools="$(pool_settings "$1")"
  fi
  admin "SHOW ROUTERS" | grep -q "^live," || { log "switch to $1 failed"; cat "$work/pgtier.log" >&2; exit 1; }
}

# ---- queries -----------------------------------------------------------------------------
accounts=$((SCALE * 100000))
if [ "$QUERIES" = tpch ]; then
  cp bench/plb-live-tpch.tsv "$work/queries.tsv"
else
cat >"$work/queries.tsv" <<Q
# name	weight	SQL: TPC-H-like shapes over the pgbench tables
pricing_summary	2	SELECT bid, count(*), sum(abalance), avg(abalance), min(aid), max(aid) FROM pgbench_accounts GROUP BY bid
top_balances	2	SELECT aid, abalance FROM pgbench_accounts ORDER BY abalance DESC, aid LIMIT 20
branch_join	2	SELECT b.bid, count(*), sum(a.abalance) FROM pgbench_branches b JOIN pgbench_accounts a ON a.bid = b.bid WHERE a.aid % 7 = 3 GROUP BY b.bid
range_revenue	3	SELECT sum(abalance), count(*) FROM pgbench_accounts WHERE aid BETWEEN $((accounts / 4)) AND $((accounts / 2))
distinct_filler	1	SELECT count(DISTINCT substr(filler, 1, 4)) FROM pgbench_accounts WHERE aid % 3 = 0
point_lookup	4	SELECT * FROM pgbench_accounts WHERE aid = $((accounts / 3))
Q
fi

# ---- runs --------------------------------------------------------------------------------
# faults PLAN: runs in the background during a load; PLAN is "SECONDS:kill|start:REPLICA ...",
# offsets from the load's start, in order. Each action is logged to $OUT/faults.csv.
faults() {
  local label="$1" t0="$2" step at what i now; shift 2
  for step in "$@"; do
    IFS=: read -r at what i <<<"$step"
    now="$(awk -v t0="$t0" -v n="$(date +%s.%N)" 'BEGIN { print n - t0 }')"
    sleep "$(awk -v a="$at" -v n="$now" 'BEGIN { d = a - n; print (d > 0 ? d : 0) }')"
    case "$what" in
      kill) as_pg "$bindir/pg_ctl" -D "$work/r$i/data" -m immediate -w stop >/dev/null 2>&1 || true ;;
      start) start_replica "$i" || log "restarting replica $i failed" ;;
      *) fleet_action "$label" "$what" "$i" ;;  # bench/plb-live-fleet.sh's proxy and store actions
    esac
    echo "$label,$at,$what,$i" >>"$OUT/faults.csv"
  done
}

# run_load LABEL RATE SECONDS [FAULT...]: one seeded workload through pgtier, with faults
# injected on schedule; per-replica CPU, u, roles.
run_load() {
  local label="$1" rate="$2" seconds="$3" i before=() after=() start end fault_pid=""
  shift 3
  local rp rf
  rp="$(awk -v r="$rate" -v s="$PREMIUM_SHARE" 'BEGIN { printf "%.4f", r * s }')"
  rf="$(awk -v r="$rate" -v s="$PREMIUM_SHARE" 'BEGIN { printf "%.4f", r * (1 - s) }')"
  for i in $(seq 0 $((REPLICAS - 1))); do before[i]="$(cg_usage_us "$i")"; done
  start="$(date +%s.%N)"
  local mix="$rp premium + $rf freemium sessions/s"
  [ -n "${CLASSES:-}" ] && mix="classes $CLASSES (NAME:USER:sessions/s)"
  log "$label: $mix for ${seconds}s, lifetime $LIFETIME s, think $THINK s${1:+, faults $*}"
  [ $# -gt 0 ] && { faults "$label" "$start" "$@" & fault_pid=$!; }
  local classes=(--user-premium premium --user-freemium freemium --rate-premium "$rp" --rate-freemium "$rf")
  if [ -n "${CLASSES:-}" ]; then
    classes=(); for c in $CLASSES; do classes+=(--class "$c"); done
  fi
  "$PGTIER_LOAD_BIN" run --host 127.0.0.1 --port "${LOAD_PORTS:-$pgtier_port}" --dbname live \
    ${PROXY_MAP:+--proxy-map "$PROXY_MAP"} \
    "${classes[@]}" \
    --duration "$seconds" --lifetime "$LIFETIME" --think "$THINK" --queries "$work/queries.tsv" \
    --seed "$SEED" --out "$OUT/$label.csv" --progress 10 2>"$OUT/$label.log"
  [ -n "$fault_pid" ] && wait "$fault_pid"
  end="$(date +%s.%N)"
  for i in $(seq 0 $((REPLICAS - 1))); do after[i]="$(cg_usage_us "$i")"; done
  {
    for i in $(seq 0 $((REPLICAS - 1))); do
      echo "$label,$i,${before[i]},${after[i]},$start,$end"
    done
  } | awk -F, -v q="$REPLICA_CPU" '{ u = ($4 - $3) / 1e6 / (($6 - $5) * q); printf "%s,%d,%.2f,%.3f\n", $1, $2, ($4 - $3) / 1e6, u }' >>"$OUT/replica_cpu.csv"
  admin "SHOW ROLE_EVENTS" >"$OUT/$label-role_events.csv" 2>/dev/null || true
  admin "SHOW EVENTS" >"$OUT/$label-events.csv" 2>/dev/null || true
  admin "SHOW READERS" >"$OUT/$label-readers.csv" 2>/dev/null || true
  # Repins and drain_moves (PLB+drain), counted since the router was built (a reload that
  # changes the routing builds a new one).
  admin "SHOW ROUTERS" >"$OUT/$label-routers.csv" 2>/dev/null || true
}

# ---- several proxies (--proxies N) -------------------------------------------------------
if [ "$PROXIES" -gt 0 ]; then
  # shellcheck source=bench/plb-live-fleet.sh
  source bench/plb-live-fleet.sh
  exit 0
fi

echo "label,replica,cpu_s,u" >"$OUT/replica_cpu.csv"
switch_to 5RR
run_load light-5RR "$LIGHT_RATE" "$LIGHT_DURATION"
for s in $STRATEGIES $VARIANTS; do
  switch_to "$s"
  run_load "$s" "$RATE" "$DURATION"
done
# Three classes: the same seeded arrivals per class for every strategy.
three_classes="$(awk -v r="$RATE" -v shares="$THREE_SHARES" 'BEGIN { n = split(shares, s, " "); split("premium freemium tier2", c, " ");
  for (i = 1; i <= n && i <= 3; i++) printf "%s%s:%s:%.4f", (i > 1 ? " " : ""), c[i], c[i], r * s[i] }')"
for s in $THREE_CLASS_STRATEGIES; do
  switch_to "$s"
  CLASSES="$three_classes" run_load "three-${s//\//-}" "$RATE" "$DURATION"
done

# Failure phases: a ramp-up as long as the longest session, then equal phases.
ramp="${LIFETIME#*:}"
fail_phase() { awk -v d="$FAIL_DURATION" -v r="$ramp" -v n="$1" -v k="$2" 'BEGIN { printf "%.1f", r + (d - r) / n * k }'; }
echo "label,at_s,action,replica" >"$OUT/faults.csv"
for f in $FAILURES; do
  case "$f" in
    cascade) against="5RR PLB"
      plan=("$(fail_phase 5 1):kill:0" "$(fail_phase 5 2):kill:1" "$(fail_phase 5 3):start:0" "$(fail_phase 5 4):start:1")
      phases="before:$ramp:$(fail_phase 5 1),one-down:$(fail_phase 5 1):$(fail_phase 5 2),two-down:$(fail_phase 5 2):$(fail_phase 5 3),one-rejoined:$(fail_phase 5 3):$(fail_phase 5 4),rejoined:$(fail_phase 5 4):$FAIL_DURATION" ;;
    class-local) against="3RR+2RR PLB"
      plan=("$(fail_phase 3 1):kill:0" "$(fail_phase 3 2):start:0")
      phases="before:$ramp:$(fail_phase 3 1),fault:$(fail_phase 3 1):$(fail_phase 3 2),rejoined:$(fail_phase 3 2):$FAIL_DURATION" ;;
    *) log "unknown failure scenario $f"; exit 1 ;;
  esac
  for s in $against $FAIL_VARIANTS; do
    switch_to "$s"
    run_load "$f-$s" "$RATE" "$FAIL_DURATION" "${plan[@]}"
    # The rejoined replicas must be routable again before the next run.
    for _ in $(seq 1 60); do
      admin "SHOW REPLICAS" 2>/dev/null | grep -qi ",down" || break; sleep 1
    done
  done
  base="${against%% *}"
  extra=(); for v in $FAIL_VARIANTS; do extra+=(--in "$v=$OUT/$f-$v.csv"); done
  "$PGTIER_LOAD_BIN" summarize --in "$base=$OUT/$f-$base.csv" --in "PLB=$OUT/$f-PLB.csv" "${extra[@]}" \
    --phases "$phases" --baseline "$base" \
    --md "$OUT/$f.md" --csv "$OUT/$f.csv" --png "$OUT/$f.png" >/dev/null
done

# ---- report ------------------------------------------------------------------------------
# The window: after the first 20 % of the arrivals (ramp-up) until arrivals stop.
from="$(awk -v d="$DURATION" 'BEGIN { printf "%.1f", d * 0.2 }')"
light_from="$(awk -v d="$LIGHT_DURATION" 'BEGIN { printf "%.1f", d * 0.2 }')"
ins=(); for s in $STRATEGIES $VARIANTS; do ins+=(--in "$s=$OUT/$s.csv"); done
three=(); for s in $THREE_CLASS_STRATEGIES; do three+=(--in "$s=$OUT/three-${s//\//-}.csv"); done
"$PGTIER_LOAD_BIN" summarize --in "light-5RR=$OUT/light-5RR.csv" --phases "steady:$light_from:$LIGHT_DURATION" \
  --md "$OUT/light.md" --csv "$OUT/light.csv" >/dev/null
if [ ${#ins[@]} -gt 0 ]; then
  contention_base=5RR; case " $STRATEGIES $VARIANTS " in *" 5RR "*) ;; *) contention_base="${ins[1]%%=*}" ;; esac
  "$PGTIER_LOAD_BIN" summarize "${ins[@]}" --phases "steady:$from:$DURATION" --baseline "$contention_base" \
    --md "$OUT/contention.md" --csv "$OUT/contention.csv" --png "$OUT/contention.png" >/dev/null
else
  echo "(no contention strategies run)" >"$OUT/contention.md"
fi
if [ ${#three[@]} -gt 0 ]; then
  three_base="PLB"; case " $THREE_CLASS_STRATEGIES " in *" PLB "*) ;; *) three_base="${THREE_CLASS_STRATEGIES%% *}" ;; esac
  "$PGTIER_LOAD_BIN" summarize "${three[@]}" --phases "steady:$from:$DURATION" --baseline "$three_base" \
    --md "$OUT/three-classes.md" --csv "$OUT/three-classes.csv" --png "$OUT/three-classes.png" >/dev/null
fi
{
  echo "# PLB live, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "$REPLICAS replicas at $REPLICA_CPU cores each (cgroup $cg_mode), $data, seed $SEED;"
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
  if [ -n "$VARIANTS" ]; then
    echo "Variants: $VARIANTS. +wait-fifo and +wait-class: PLB with each replica's pool held to $WAIT_POOL servers, waiter_policy fifo and class; +inflight: PLB's roles with a per-transaction choice of the less busy of two replicas serving the class; +kp1: PLB with K_P = 1; +txsignal: PLB deciding on transactions in flight, θ = $THETA_TX."
    echo
  fi
  if [ ${#three[@]} -gt 0 ]; then
    echo "## Three classes ($RATE sessions/s, shares $THREE_SHARES for premium, freemium, tier2)"
    echo
    cat "$OUT/three-classes.md"
    echo
    echo "PLB: tier2 served as freemium; PLB/top2: freemium served as premium; PLB-tiered: one pool per rank (r0, r1, r2 r3) and r4 Mixed."
    echo
  fi
  for f in $FAILURES; do
    echo "## Failure: $f (faults at: $(awk -F, -v l="$f-PLB" '$1 == l { printf "%s%s %s@%ss", sep, $3, $4, $2; sep = ", " }' "$OUT/faults.csv"))"
    echo
    cat "$OUT/$f.md"
    echo
    echo "Per phase against the run's own \"before\": p95 inflation and goodput retention."
    echo
    echo "| run | phase | class | p95 inflation | goodput retention |"
    echo "| --- | --- | --- | ---: | ---: |"
    awk -F, 'NR > 1 && $3 != "all" { k = $1 SUBSEP $3; if ($2 == "before") { p[k] = $8; g[k] = $10 }
        else if (p[k] > 0 && g[k] > 0) printf "| %s | %s | %s | %+.1f %% | %.2f |\n", $1, $2, $3, ($8 / p[k] - 1) * 100, $10 / g[k] }' "$OUT/$f.csv"
    echo
  done
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
echo "plots: $OUT/contention.png$([ ${#three[@]} -gt 0 ] && printf ' %s' "$OUT/three-classes.png")$(for f in $FAILURES; do printf ' %s' "$OUT/$f.png"; done)"
echo "per-query rows: $OUT/<run>.csv; role timelines: $OUT/<run>-role_events.csv, $OUT/<run>-events.csv"
