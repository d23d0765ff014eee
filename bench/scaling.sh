#!/usr/bin/env bash
# scaling.sh: pgbench -S through pgtier with 1 and 2 workers under CPU placements (taskset),
# with per-shard CPU and cross-shard server moves, and PgBouncer unpinned as the reference.
#
# Starts a throw-away PostgreSQL (initdb/pg_ctl as user postgres when run as root), loads
# `pgbench -i -s $SCALE`, then for each placement starts a fresh pgtier (transaction mode)
# and runs `pgbench -S` (simple and extended protocol, each of $CLIENTS) through it. Per cell
# (median of $REPEAT runs): tps, pgtier's CPU µs per transaction (utime+stime delta of the
# whole process from /proc/<pid>/stat), the same per shard thread (pgtier-shard-N, from
# /proc/<pid>/task/<tid>/stat), the idle servers moved whole between shards during the run
# (pgtier_servers_moved_total on the Prometheus endpoint: the one cross-shard counter pgtier
# exposes) and the server connections on each shard afterwards (`SHOW SERVERS`, its shard
# column). PgBouncer (transaction mode, same pool size) runs once with nothing pinned.
# Output is Markdown (stdout and $OUT). Only 127.0.0.1 is used.
#
# Placements (PLACEMENTS, names below; CPU numbers assume 2 or more cores):
#   w1-none    1 worker, nothing pinned by this script (pgtier pins shard 0 to CPU 0 itself)
#   w1-float   1 worker, every pgtier thread allowed on every CPU (pgtier's own pin undone)
#   w1-split   1 worker: pgtier on CPU 0; PostgreSQL and pgbench on CPU 1
#   w1-shared  1 worker: pgtier and pgbench on CPU 0; PostgreSQL on CPU 1
#   w2-none    2 workers, nothing pinned by this script (pgtier pins shard i to CPU i)
#   w2-float   2 workers, every pgtier thread allowed on both CPUs (pgtier's own pin undone)
# pgtier pins shard thread i to the i-th CPU of its affinity mask at start (pgtier/src/proxy.rs
# `pin_to_core`; the "pin_to_core under taskset" table this script prints first shows where
# shards end up under a launch-time mask). The script applies
# pgtier's placement after start-up with `taskset -a -p` on every thread, and prints the
# affinity each shard ended with. PostgreSQL's placement is applied to the postmaster and its
# children (new backends inherit it); pgbench runs under taskset.
#
# Usage: bash bench/scaling.sh            (from the repository root; root needed for taskset
#                                          on postgres-owned processes when run as root)
# Environment (defaults): CLIENTS="8 64" DURATION=10 REPEAT=3 PROTOCOLS="simple extended"
#   PLACEMENTS="w1-none w1-float w1-split w1-shared w2-none w2-float" SCALE=10 POOL_SIZE=20
#   BOUNCER=1 (0: no PgBouncer reference) PROBE=1 (0: skip the pin_to_core probe)
#   PGTIER_BIN=<built with cargo build --release when unset>
#   OUT=bench/out/scaling-<time>.md
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

CLIENTS="${CLIENTS:-8 64}"
DURATION="${DURATION:-10}"
REPEAT="${REPEAT:-3}"
PROTOCOLS="${PROTOCOLS:-simple extended}"
PLACEMENTS="${PLACEMENTS:-w1-none w1-float w1-split w1-shared w2-none w2-float}"
SCALE="${SCALE:-10}"
POOL_SIZE="${POOL_SIZE:-20}"
BOUNCER="${BOUNCER:-1}"
PROBE="${PROBE:-1}"
mkdir -p bench/out
OUT="${OUT:-bench/out/scaling-$(date -u +%Y%m%dT%H%M%SZ).md}"

# shellcheck source=bench/lib.sh
source bench/lib.sh

ncpu="$(nproc)"
all_cpus="0-$((ncpu - 1))"
[ "$ncpu" -lt 2 ] && log "only $ncpu CPU: the pinned placements put everything on CPU 0"
# placement NAME -> "workers pgtier_cpus pg_cpus client_cpus" ("-": leave as pgtier set it)
placement() {
  local last=$((ncpu > 1 ? 1 : 0))
  case "$1" in
    w1-none) echo "1 - $all_cpus $all_cpus" ;;
    w1-float) echo "1 $all_cpus $all_cpus $all_cpus" ;;
    w1-split) echo "1 0 $last $last" ;;
    w1-shared) echo "1 0 $last 0" ;;
    w2-none) echo "2 - $all_cpus $all_cpus" ;;
    w2-float) echo "2 $all_cpus $all_cpus $all_cpus" ;;
    *) log "unknown placement $1"; return 1 ;;
  esac
}
for name in $PLACEMENTS; do placement "$name" >/dev/null || exit 2; done

# ---- tools -------------------------------------------------------------------------------
bench_tools pgbouncer


work="$(mktemp -d /tmp/pgtier-scaling.XXXXXX)"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"
pgtier_pid=""; bouncer_pid=""
stop_pgtier() {
  [ -z "$pgtier_pid" ] && return 0
  kill -INT "$pgtier_pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pgtier_pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pgtier_pid" 2>/dev/null || true
  wait "$pgtier_pid" 2>/dev/null || true
  pgtier_pid=""
}
cleanup() {
  set +e
  stop_pgtier
  [ -n "$bouncer_pid" ] && kill -9 "$bouncer_pid" 2>/dev/null
  [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- PostgreSQL --------------------------------------------------------------------------
pg_port="$(free_port)"; pgtier_port="$(free_port)"; bouncer_port="$(free_port)"; metrics_port="$(free_port)"
log "initdb + start PostgreSQL on 127.0.0.1:$pg_port"
pg_initdb "$work" "$pg_port" 300
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w start >/dev/null
postmaster_pid="$(head -1 "$work/data/postmaster.pid")"
log "pgbench -i -s $SCALE"
"$bindir/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1

# pin_pg CPUS: the postmaster and every process it started (new backends inherit it)
pin_pg() {
  local child
  taskset -a -p -c "$1" "$postmaster_pid" >/dev/null
  for child in $(pgrep -P "$postmaster_pid"); do taskset -p -c "$1" "$child" >/dev/null 2>&1 || true; done
}

# ---- proxies -----------------------------------------------------------------------------
printf '"postgres" ""\n' >"$work/userlist.txt"
# pgtier_config WORKERS -> writes $work/pgtier.toml
pgtier_config() {
  cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $pgtier_port
workers = $1
auth_type = "trust"
auth_file = "$work/userlist.txt"
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = 1000
admin_users = ["postgres"]
metrics_port = $metrics_port
log_level = "warn"

[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
CONF
}
cat >"$work/pgbouncer.ini" <<CONF
[databases]
postgres = host=127.0.0.1 port=$pg_port dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = 1000
logfile = $work/pgbouncer.log
pidfile = $work/pgbouncer.pid
log_connections = 0
log_disconnections = 0
CONF
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"/pgbouncer.ini "$work"/userlist.txt

# shard_tids PID -> "index:tid ..." of the pgtier-shard-N threads
shard_tids() {
  local task comm
  for task in /proc/"$1"/task/*; do
    comm="$(cat "$task/comm" 2>/dev/null)" || continue
    [[ "$comm" == pgtier-shard-* ]] && printf '%s:%s ' "${comm#pgtier-shard-}" "${task##*/}"
  done | tr ' ' '\n' | sort -n | tr '\n' ' '
}
# shard_affinity PID -> "s0:CPUS s1:CPUS"
shard_affinity() {
  local entry
  for entry in $(shard_tids "$1"); do
    printf 's%s:%s ' "${entry%%:*}" "$(awk '/^Cpus_allowed_list/ { print $2 }' "/proc/$1/task/${entry#*:}/status")"
  done | sed 's/ $//'
}

# start_pgtier WORKERS LAUNCH_CPUS -> sets pgtier_pid once every shard thread runs
start_pgtier() {
  pgtier_config "$1"
  if [ -n "$2" ]; then
    (export PGTIER_LOG=warn; exec taskset -c "$2" "$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1) &
  else
    (export PGTIER_LOG=warn; exec "$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1) &
  fi
  pgtier_pid=$!
  if ! wait_port "$pgtier_port" pgtier "$pgtier_pid"; then
    cat "$work/pgtier.log" >&2; pgtier_pid=""; return 1
  fi
  # Every shard thread exists and has pinned itself (pin_to_core runs first thing in the
  # thread, before its ring is built), and one answers a query.
  for _ in $(seq 1 50); do
    [ "$(shard_tids "$pgtier_pid" | wc -w)" -ge "$1" ] && break
    sleep 0.1
  done
  sleep 0.3
  "$bindir/psql" -X -q -At -h 127.0.0.1 -p "$pgtier_port" -U postgres -d postgres -c 'SELECT 1' >/dev/null
}

# ---- pin_to_core under taskset ------------------------------------------------------------
{
  echo "# pgbench -S scaling: pgtier workers and CPU placement"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $ncpu cores, $(uname -r), PostgreSQL $("$bindir/postgres" --version | awk '{print $3}'),"
  echo "$(pgbouncer --version | head -1), pgtier $("$PGTIER_BIN" --version | awk '{print $2}')."
  echo "Scale $SCALE, -T $DURATION s per run, median of $REPEAT run(s) per cell, transaction pooling, pool size $POOL_SIZE, pgbench -j 2."
} | tee "$OUT"
if [ "$PROBE" = 1 ] && [ "$ncpu" -ge 2 ]; then
  {
    echo
    echo "## pin_to_core under taskset"
    echo
    echo "pgtier started under a launch-time mask; the affinity its shard threads then have (before this script re-pins anything)."
    echo
    echo "| workers | launched with | shard threads' affinity | main thread's affinity |"
    echo "|---:|---|---|---|"
  } | tee -a "$OUT"
  for workers in 1 2; do
    for mask in "" "1" "$all_cpus"; do
      start_pgtier "$workers" "$mask" || { stop_pgtier; continue; }
      main_aff="$(awk '/^Cpus_allowed_list/ { print $2 }' "/proc/$pgtier_pid/status")"
      launched="no mask"; [ -n "$mask" ] && launched="taskset -c $mask"
      echo "| $workers | $launched | $(shard_affinity "$pgtier_pid") | $main_aff |" | tee -a "$OUT"
      stop_pgtier
    done
  done
fi

# ---- measurements ------------------------------------------------------------------------
moved_total() {
  curl -s --max-time 2 "http://127.0.0.1:$metrics_port/metrics" | awk '$1 == "pgtier_servers_moved_total" { print $2; found = 1 } END { if (!found) print 0 }'
}
# servers_per_shard -> "s0:N s1:M" from SHOW SERVERS' shard column
servers_per_shard() {
  "$bindir/psql" -X -q -A -F '|' -h 127.0.0.1 -p "$pgtier_port" -U postgres -d pgtier -c 'SHOW SERVERS' 2>/dev/null \
    | awk -F'|' 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "shard") col = i; next }
                 col && $col ~ /^[0-9]+$/ { n[$col]++ }
                 END { for (s in n) printf "s%s:%d\n", s, n[s] }' | sort | tr '\n' ' ' | sed 's/ $//'
}

# run_pgbench PORT PROTOCOL CLIENTS CPUS -> prints "tps transactions"
run_pgbench() {
  local out prefix=()
  [ -n "$4" ] && prefix=(taskset -c "$4")
  out="$("${prefix[@]}" "$bindir/pgbench" -S -n -M "$2" -c "$3" -j 2 -T "$DURATION" \
        -h 127.0.0.1 -p "$1" -U postgres postgres 2>&1)" || { log "pgbench failed: $out"; echo "0 0"; return; }
  local tps tx
  tps="$(sed -n 's/^tps = \([0-9.]*\) .*without initial.*/\1/p' <<<"$out" | head -1)"
  [ -z "$tps" ] && tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)"
  tx="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
  printf '%.0f %s\n' "${tps:-0}" "${tx:-0}"
}

# us_per_tx TICKS TX -> CPU µs per transaction
us_per_tx() { awk -v d="$1" -v hz="$ticks_per_s" -v n="$2" 'BEGIN { if (n > 0) printf "%.1f", d * 1e6 / hz / n; else print "-" }'; }

# measure PORT PID PROTOCOL CLIENTS CPUS -> "tps us_per_tx shard_us moved"
#   shard_us: per-shard µs/tx joined with "/" ("-" without shard threads); moved: servers
#   moved between shards during the run ("-" without a metrics endpoint)
measure() {
  local port="$1" pid="$2" before after entries=() shard_before=() i result tps tx moved_before=""
  if [ -n "$pid" ]; then
    before="$(stat_ticks "/proc/$pid/stat")"
    read -r -a entries <<<"$(shard_tids "$pid")"
    for i in "${!entries[@]}"; do shard_before[i]="$(stat_ticks "/proc/$pid/task/${entries[i]#*:}/stat")"; done
    [ "$pid" = "$pgtier_pid" ] && moved_before="$(moved_total)"
  fi
  result="$(run_pgbench "$port" "$3" "$4" "$5")"
  tps="${result% *}"; tx="${result#* }"
  if [ -z "$pid" ]; then echo "$tps - - -"; return; fi
  after="$(stat_ticks "/proc/$pid/stat")"
  local shard_us=""
  for i in "${!entries[@]}"; do
    shard_us+="$(us_per_tx $(( $(stat_ticks "/proc/$pid/task/${entries[i]#*:}/stat") - shard_before[i] )) "$tx")/"
  done
  shard_us="${shard_us%/}"
  local moved="-"
  [ -n "$moved_before" ] && moved=$(( $(moved_total) - moved_before ))
  echo "$tps $(us_per_tx $((after - before)) "$tx") ${shard_us:--} $moved"
}

# median VALUES... -> the middle value ("-" when there is none)
median() {
  printf '%s\n' "$@" | { grep -v '^-$' || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}
# median_split VALUES... ("a/b" each) -> per-position medians joined with "/"
median_split() {
  local n fields=() i out=""
  IFS=/ read -r -a fields <<<"$1"; n=${#fields[@]}
  [ "$1" = "-" ] && { echo "-"; return; }
  for i in $(seq 0 $((n - 1))); do
    out+="$(median $(printf '%s\n' "$@" | cut -d/ -f$((i + 1))))/"
  done
  echo "${out%/}"
}

# measure_cell PORT PID PROTOCOL CLIENTS CPUS -> "tps us shard_us moved" (medians; moved summed)
measure_cell() {
  local tps_list=() us_list=() shard_list=() moved_sum=0 tps us shard moved
  for _ in $(seq 1 "$REPEAT"); do
    read -r tps us shard moved <<<"$(measure "$@")"
    tps_list+=("$tps"); us_list+=("$us"); shard_list+=("$shard")
    [ "$moved" != "-" ] && moved_sum=$((moved_sum + moved)) || moved_sum="-"
  done
  echo "$(median "${tps_list[@]}") $(median "${us_list[@]}") $(median_split "${shard_list[@]}") $moved_sum"
}

{
  echo
  echo "## Throughput and CPU"
  echo
  echo "pgtier CPU is the whole process; per shard is each pgtier-shard-N thread (s0/s1). Moved: idle servers that moved whole to another shard during the cell's runs (pgtier_servers_moved_total, summed over runs). Servers per shard: \`SHOW SERVERS\` after the cell."
  echo
  echo "| proxy | workers | placement | shard CPUs | PostgreSQL CPUs | pgbench CPUs | protocol | clients | tps | CPU µs/tx | per-shard µs/tx | servers moved | servers per shard |"
  echo "|---|---:|---|---|---|---|---|---:|---:|---:|---:|---:|---|"
} | tee -a "$OUT"

for name in $PLACEMENTS; do
  read -r workers px_cpus pg_cpus cl_cpus <<<"$(placement "$name")"
  log "placement $name: workers $workers, pgtier ${px_cpus}, PostgreSQL $pg_cpus, pgbench $cl_cpus"
  launch=""; [ "$px_cpus" != "-" ] && launch="$px_cpus"
  if ! start_pgtier "$workers" "$launch"; then
    log "pgtier did not start for $name"; stop_pgtier; continue
  fi
  # pgtier pinned its shards itself; only a re-pin of every thread now makes the mask hold.
  [ "$px_cpus" != "-" ] && taskset -a -p -c "$px_cpus" "$pgtier_pid" >/dev/null
  pin_pg "$pg_cpus"
  shards="$(shard_affinity "$pgtier_pid")"
  log "pgtier shards: $shards"
  for protocol in $PROTOCOLS; do
    for clients in $CLIENTS; do
      log "$name: pgbench -S -M $protocol -c $clients"
      read -r tps us shard_us moved <<<"$(measure_cell "$pgtier_port" "$pgtier_pid" "$protocol" "$clients" "$cl_cpus")"
      echo "| pgtier | $workers | $name | $shards | $pg_cpus | $cl_cpus | $protocol | $clients | $tps | $us | $shard_us | $moved | $(servers_per_shard) |" | tee -a "$OUT"
    done
  done
  stop_pgtier
done

if [ "$BOUNCER" = 1 ]; then
  pin_pg "$all_cpus"
  log "starting PgBouncer on $bouncer_port (nothing pinned)"
  # setpriv, not runuser: runuser goes through PAM (pam_limits would cut the open-file limit).
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer -d "$work/pgbouncer.ini" >/dev/null 2>&1
  else
    pgbouncer -d "$work/pgbouncer.ini" >/dev/null 2>&1
  fi
  wait_port "$bouncer_port" pgbouncer || { cat "$work/pgbouncer.log" >&2; exit 1; }
  bouncer_pid="$(cat "$work/pgbouncer.pid")"
  for protocol in $PROTOCOLS; do
    for clients in $CLIENTS; do
      log "PgBouncer: pgbench -S -M $protocol -c $clients"
      read -r tps us _ _ <<<"$(measure_cell "$bouncer_port" "$bouncer_pid" "$protocol" "$clients" "")"
      echo "| PgBouncer | 1 | unpinned | $all_cpus | $all_cpus | $all_cpus | $protocol | $clients | $tps | $us | - | - | - |" | tee -a "$OUT"
    done
  done
fi
log "results written to $OUT"
