#!/usr/bin/env bash
# pgbench-compare.sh: pgtier vs PgBouncer vs direct, in one sitting, on this machine.
#
# Starts a throw-away PostgreSQL (initdb/pg_ctl as user postgres when run as root), loads
# `pgbench -i -s $SCALE`, then runs `pgbench -S` (simple and extended protocol, 1, 8 and 64
# clients) directly, through pgtier (1 worker, transaction mode), through PgBouncer
# (transaction mode, same pool size) and through pgtier-forwarder (bench/src/bin: a bare
# io_uring forwarder, one server connection per client, no parsing: what a proxy that does
# nothing costs on this machine). Prints tps and each proxy's CPU microseconds per
# transaction (utime+stime deltas from /proc/<pid>/stat), the ratios pgtier/PgBouncer,
# pgtier/forwarder and PgBouncer/forwarder, the
# same CPU split into user-space (utime) and kernel (stime) time, which shows how much of a
# proxy's cost is the loopback TCP work that any proxy pays, and
# each proxy's RSS with $IDLE_CLIENTS idle client connections. Output is Markdown.
# When CLIENTS includes 1, a second table gives the 1-client transaction latency p50 and p99
# (from pgbench's per-transaction log, -l) for direct and every proxy.
# Only 127.0.0.1 is used; every run is bounded by $DURATION seconds.
#
# Usage: bash bench/pgbench-compare.sh            (from the repository root)
# Environment (defaults): SCALE=10 DURATION=10 CLIENTS="1 8 64" PROTOCOLS="simple extended"
#   POOL_SIZE=20 IDLE_CLIENTS=10000 PGTIER_BIN=<built by scripts/build-pgo.sh, as shipped>
#   PGO=1 (0: without PGTIER_BIN, the plain `cargo build --release` binary instead)
#   REPEAT=1 (runs per cell; the median tps and the median µs/tx are printed; the runs are
#             interleaved, one of each target per round, cell by cell: direct, pgtier,
#             PgBouncer, forwarder; latency p50 and p99 are the medians of the runs' own
#             percentiles)
#   FORWARDER=1 (0: no forwarder column, the table of earlier versions; TLS=1 implies 0,
#               since the forwarder cannot terminate TLS and PostgreSQL here has none)
#   FORWARDER_BIN=<built with cargo build --release -p pgtier-bench --bin pgtier-forwarder>
#   WORKERS=1 (2: pgtier with `workers = 2`, two PgBouncer processes sharing the port with
#              so_reuseport = 1, each with half the pool so that PostgreSQL sees the same
#              number of servers as from pgtier, whose pool sizes hold across workers, and
#              the forwarder with --threads 2; CLIENTS then defaults to "64 256", and
#              PgBouncer's CPU and RSS are the sums over its processes)
#   PROFILE=0 (1: one more extended/64-client run through pgtier under `perf record -g`;
#              the hottest symbols go to bench/out/pgtier-perf-<time>.txt)
#   SKIP_MEMORY=0 OUT=bench/out/pgbench-compare-<time>.md
#   Every proxy run is listed at the end with its sleeps per transaction (voluntary context
#   switches of the proxy's threads), which tell the two regimes of a run apart, and the
#   PostgreSQL backends' CPU per transaction, which on two shared cores decides its tps.
#   TLS=0 (1: clients reach both proxies over TLS, client_tls_sslmode = require with a
#          throw-away self-signed certificate, pgbench with sslmode=require; the proxies
#          reach PostgreSQL in plain text, and direct runs stay plain)
#   PROXY_CHRT="" (chrt options, e.g. "-f 1": both proxies under that scheduling policy)
#   PROTOCOLS may include "prepared": PgBouncer before 1.21 cannot run it in transaction
#   mode, so its cells stay empty; compare with its extended row.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"

SCALE="${SCALE:-10}"
DURATION="${DURATION:-10}"
WORKERS="${WORKERS:-1}"
if [ "$WORKERS" -gt 1 ]; then CLIENTS="${CLIENTS:-64 256}"; else CLIENTS="${CLIENTS:-1 8 64}"; fi
PROTOCOLS="${PROTOCOLS:-simple extended}"
POOL_SIZE="${POOL_SIZE:-20}"
IDLE_CLIENTS="${IDLE_CLIENTS:-10000}"
SKIP_MEMORY="${SKIP_MEMORY:-0}"
REPEAT="${REPEAT:-1}"
PROFILE="${PROFILE:-0}"
FORWARDER="${FORWARDER:-1}"
[ "${TLS:-0}" = 1 ] && FORWARDER=0
mkdir -p bench/out
OUT="${OUT:-bench/out/pgbench-compare-$(date -u +%Y%m%dT%H%M%SZ).md}"

# The binary users run: the Debian package is built with profile-guided optimization.
PGO="${PGO:-1}"
# shellcheck source=bench/lib.sh
source bench/lib.sh

# ---- tools -------------------------------------------------------------------------------
bench_tools pgbouncer
if [ "$FORWARDER" = 1 ] && [ -z "${FORWARDER_BIN:-}" ]; then
  log "building pgtier-forwarder (release)"
  cargo build --release -q -p pgtier-bench --bin pgtier-forwarder
  FORWARDER_BIN="$CARGO_TARGET_DIR/release/pgtier-forwarder"
fi
if [ "$SKIP_MEMORY" != 1 ]; then
  log "building pg-idle-clients"
  cargo build -q -p pgtier-tests --bin pg-idle-clients
  IDLE_BIN="$CARGO_TARGET_DIR/debug/pg-idle-clients"
fi

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" -lt $((IDLE_CLIENTS + 1000)) ]; then
  log "open-file limit $(ulimit -n) is below $((IDLE_CLIENTS + 1000)); lowering IDLE_CLIENTS"
  IDLE_CLIENTS=$(( $(ulimit -n) - 1000 ))
fi

work="$(mktemp -d /tmp/pgtier-bench.XXXXXX)"
chmod 755 "$work"
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"
pgtier_pid=""; bouncer_pids=""; forwarder_pid=""; idle_pid=""
cleanup() {
  set +e
  [ -n "$idle_pid" ] && kill "$idle_pid" 2>/dev/null
  [ -n "$pgtier_pid" ] && kill -INT "$pgtier_pid" 2>/dev/null && sleep 0.5 && kill -9 "$pgtier_pid" 2>/dev/null
  for pid in $bouncer_pids; do kill -9 "$pid" 2>/dev/null; done
  [ -n "$forwarder_pid" ] && kill -9 "$forwarder_pid" 2>/dev/null
  [ -f "$work/data/postmaster.pid" ] && as_pg "$bindir/pg_ctl" -D "$work/data" -m immediate -w stop >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- PostgreSQL --------------------------------------------------------------------------
pg_port="$(free_port)"; pgtier_port="$(free_port)"; bouncer_port="$(free_port)"; forwarder_port="$(free_port)"
# The forwarder (and a direct run) opens one server per client, while both proxies keep
# their pools open: room for the largest cell, both pools and a margin for backends still
# exiting from the previous run.
max_clients=0
for clients in $CLIENTS; do [ "$clients" -gt "$max_clients" ] && max_clients="$clients"; done
max_connections=$(( max_clients + 2 * POOL_SIZE + 50 ))
[ "$max_connections" -lt 300 ] && max_connections=300
log "initdb + start PostgreSQL on 127.0.0.1:$pg_port"
pg_initdb "$work" "$pg_port" "$max_connections"
as_pg "$bindir/pg_ctl" -D "$work/data" -l "$work/postgres.log" -w start >/dev/null
postmaster_pid="$(head -1 "$work/data/postmaster.pid")"
log "pgbench -i -s $SCALE"
"$bindir/pgbench" -i -q -s "$SCALE" -h 127.0.0.1 -p "$pg_port" -U postgres postgres >/dev/null 2>&1

# ---- proxies -----------------------------------------------------------------------------
printf '"postgres" ""\n' >"$work/userlist.txt"
TLS="${TLS:-0}"
pgtier_tls=""
bouncer_tls=""
if [ "$TLS" = 1 ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=localhost" -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
    -keyout "$work/proxy.key" -out "$work/proxy.crt" >/dev/null 2>&1
  chmod 600 "$work/proxy.key"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$work/proxy.key" "$work/proxy.crt"
  pgtier_tls="client_tls_sslmode = \"require\"
client_tls_key_file = \"$work/proxy.key\"
client_tls_cert_file = \"$work/proxy.crt\"
server_tls_sslmode = \"disable\""
  bouncer_tls="client_tls_sslmode = require
client_tls_key_file = $work/proxy.key
client_tls_cert_file = $work/proxy.crt
server_tls_sslmode = disable"
fi
cat >"$work/pgtier.toml" <<CONF
[pgtier]
listen_addr = "127.0.0.1"
listen_port = $pgtier_port
workers = $WORKERS
auth_type = "trust"
auth_file = "$work/userlist.txt"
pool_mode = "transaction"
default_pool_size = $POOL_SIZE
max_client_conn = $((IDLE_CLIENTS + 1000))
log_level = "warn"
$pgtier_tls

[databases.postgres]
host = "127.0.0.1"
port = $pg_port
dbname = "postgres"
CONF
# One file per PgBouncer process: "pgbouncer" alone, or pgbouncer-1 .. pgbouncer-$WORKERS,
# which share the port (so_reuseport) and split the pool.
bouncer_names="pgbouncer"
bouncer_pool="$POOL_SIZE"
bouncer_reuseport=""
if [ "$WORKERS" -gt 1 ]; then
  bouncer_names="$(seq -f 'pgbouncer-%g' 1 "$WORKERS" | tr '\n' ' ')"
  bouncer_pool=$(( (POOL_SIZE + WORKERS - 1) / WORKERS ))
  bouncer_reuseport="so_reuseport = 1"
fi
for name in $bouncer_names; do
  cat >"$work/$name.ini" <<CONF
[databases]
postgres = host=127.0.0.1 port=$pg_port dbname=postgres

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = trust
auth_file = $work/userlist.txt
pool_mode = transaction
default_pool_size = $bouncer_pool
max_client_conn = $((IDLE_CLIENTS + 1000))
logfile = $work/$name.log
pidfile = $work/$name.pid
log_connections = 0
log_disconnections = 0
$bouncer_reuseport
$bouncer_tls
CONF
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$work/$name.ini"
done
[ "$(id -u)" = 0 ] && chown postgres:postgres "$work"/userlist.txt


log "starting pgtier ($PGTIER_BIN) on $pgtier_port"
PGTIER_LOG=warn "$PGTIER_BIN" --config "$work/pgtier.toml" >"$work/pgtier.log" 2>&1 &
pgtier_pid=$!
if ! wait_port "$pgtier_port" pgtier "$pgtier_pid"; then
  log "pgtier did not start; its columns stay empty. Its log:"; cat "$work/pgtier.log" >&2
  kill -9 "$pgtier_pid" 2>/dev/null || true; pgtier_pid=""
fi

# listens_on PID PORT: whether process PID has a TCP listener on 127.0.0.1:PORT (with
# so_reuseport the port answers as soon as the first process listens: wait for each).
listens_on() { ss -Hltnp "sport = :$2" 2>/dev/null | grep -q "pid=$1,"; }

for name in $bouncer_names; do
  log "starting PgBouncer ($name) on $bouncer_port"
  # setpriv, not runuser: runuser goes through PAM, whose pam_limits would cut the open-file
  # limit back to 1024 and cap PgBouncer near 1000 clients.
  if [ "$(id -u)" = 0 ]; then
    setpriv --reuid=postgres --regid=postgres --init-groups pgbouncer -d "$work/$name.ini" >/dev/null 2>&1
  else
    pgbouncer -d "$work/$name.ini" >/dev/null 2>&1
  fi
  wait_port "$bouncer_port" pgbouncer || { cat "$work/$name.log" >&2; exit 1; }
  bouncer_pid=""
  for _ in $(seq 1 100); do
    bouncer_pid="$(cat "$work/$name.pid" 2>/dev/null || true)"
    [ -n "$bouncer_pid" ] && listens_on "$bouncer_pid" "$bouncer_port" && break
    sleep 0.1
  done
  listens_on "$bouncer_pid" "$bouncer_port" \
    || { log "$name does not listen on $bouncer_port"; cat "$work/$name.log" >&2; exit 1; }
  bouncer_pids="${bouncer_pids:+$bouncer_pids }$bouncer_pid"
done
log "PgBouncer open-file limit: $(awk '/Max open files/ {print $4}' "/proc/$bouncer_pid/limits")"

if [ "$FORWARDER" = 1 ]; then
  log "starting pgtier-forwarder ($FORWARDER_BIN, $WORKERS thread(s)) on $forwarder_port"
  "$FORWARDER_BIN" --listen "127.0.0.1:$forwarder_port" --upstream "127.0.0.1:$pg_port" \
    --threads "$WORKERS" >"$work/forwarder.log" 2>&1 &
  forwarder_pid=$!
  if ! wait_port "$forwarder_port" pgtier-forwarder "$forwarder_pid"; then
    log "pgtier-forwarder did not start; its columns stay empty. Its log:"; cat "$work/forwarder.log" >&2
    kill -9 "$forwarder_pid" 2>/dev/null || true; forwarder_pid=""
  fi
fi
# PROXY_CHRT (e.g. "-f 1"): the same scheduling policy for every thread of every proxy, to
# measure what a policy does to each (docs/benchmarks.md, "The kernel floor").
if [ -n "${PROXY_CHRT:-}" ]; then
  for pid in $pgtier_pid $bouncer_pids $forwarder_pid; do
    # chrt wants the priority after -p: "-f 1" becomes `chrt -a -f -p 1 PID`.
    chrt -a "${PROXY_CHRT% *}" -p "${PROXY_CHRT##* }" "$pid" >/dev/null \
      || { log "chrt $PROXY_CHRT failed for $pid"; exit 1; }
  done
  log "the proxies now run under chrt $PROXY_CHRT"
fi

# ---- measurements ------------------------------------------------------------------------
# rss_kb PIDS: the summed RSS of the processes (PgBouncer may be several)
rss_kb() {
  local pid total=0
  for pid in $1; do total=$(( total + $(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status") )); done
  echo "$total"
}

# cpu_split_sum PIDS -> "utime stime" summed over the processes, in clock ticks
cpu_split_sum() {
  local pid u s user=0 sys=0
  for pid in $1; do
    read -r u s <<<"$(cpu_split "$pid")"
    user=$(( user + u )); sys=$(( sys + s ))
  done
  echo "$user $sys"
}

# sleeps_sum PIDS -> voluntary context switches summed over every thread of the processes:
# how often the proxy fell asleep waiting for work
sleeps_sum() {
  local pid total=0
  for pid in $1; do
    total=$(( total + $(cat /proc/"$pid"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }') ))
  done
  echo "$total"
}

# backend_ticks -> utime+stime of PostgreSQL's processes in clock ticks: its live children
# (the backends) plus what the postmaster reaped from those that exited, so that one that
# ends during a run is still counted. Only the difference across one run is used.
backend_ticks() {
  local user sys
  read -r user sys <<<"$(cpu_split_sum "$(pgrep -P "$postmaster_pid")" 2>/dev/null)"
  echo $(( user + sys + $(awk '{ print $16 + $17 }' "/proc/$postmaster_pid/stat") ))
}

# latency_percentiles FILES... -> "p50_us p99_us" of the per-transaction log lines (pgbench
# -l: the third field is the transaction's latency in µs), nearest rank; "- -" when empty
latency_percentiles() {
  cat "$@" 2>/dev/null | awk '{ print $3 }' | sort -n | awk '
    function rank(p) { r = p * NR; return (r == int(r)) ? r : int(r) + 1 }
    { v[NR] = $1 }
    END { if (NR == 0) print "- -"; else print v[rank(0.50)], v[rank(0.99)] }'
}

# run_pgbench PORT PROTOCOL CLIENTS -> prints "tps transactions p50_us p99_us"; the
# latencies come from pgbench's per-transaction log, kept for 1-client runs only ("-" else)
run_pgbench() {
  local out
  local sslmode=disable
  local latency_log=()
  [ "$TLS" = 1 ] && [ "$1" != "$pg_port" ] && sslmode=require
  rm -f "$work"/latency.*
  [ "$3" = 1 ] && latency_log=(-l "--log-prefix=$work/latency")
  out="$(PGSSLMODE=$sslmode "$bindir/pgbench" -S -n -M "$2" -c "$3" -j 2 -T "$DURATION" \
        "${latency_log[@]}" -h 127.0.0.1 -p "$1" -U postgres postgres 2>&1)" || { log "pgbench failed: $out"; echo "0 0 - -"; return; }
  local tps tx percentiles="- -"
  tps="$(sed -n 's/^tps = \([0-9.]*\) .*without initial.*/\1/p' <<<"$out" | head -1)"
  [ -z "$tps" ] && tps="$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)"
  tx="$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")"
  [ "$3" = 1 ] && percentiles="$(latency_percentiles "$work"/latency.*)"
  rm -f "$work"/latency.*
  printf '%.0f %s %s\n' "${tps:-0}" "${tx:-0}" "$percentiles"
}

# measure NAME PORT PIDS PROTOCOL CLIENTS -> prints "tps us_per_tx user_us_per_tx
# sys_us_per_tx p50_us p99_us sleeps_per_tx backends_us_per_tx" (CPU and sleeps summed
# over PIDS; none for a direct run)
measure() {
  local before after tps tx p50 p99 slept_before slept_after backends_before backends_after
  [ -n "$3" ] && before="$(cpu_split_sum "$3")" && slept_before="$(sleeps_sum "$3")"
  backends_before="$(backend_ticks)"
  read -r tps tx p50 p99 <<<"$(run_pgbench "$2" "$4" "$5")"
  backends_after="$(backend_ticks)"
  [ -n "$3" ] && after="$(cpu_split_sum "$3")" && slept_after="$(sleeps_sum "$3")"
  if [ -n "$3" ] && [ "$tx" -gt 0 ]; then
    echo "$tps $(awk -v b="$before" -v a="$after" -v hz="$ticks_per_s" -v n="$tx" 'BEGIN {
      split(b, x, " "); split(a, y, " "); u = y[1] - x[1]; s = y[2] - x[2]; k = 1e6 / hz / n
      printf "%.1f %.1f %.1f", (u + s) * k, u * k, s * k }') $p50 $p99 $(awk -v b="$slept_before" -v a="$slept_after" -v n="$tx" 'BEGIN { printf "%.3f", (a - b) / n }') $(awk -v b="$backends_before" -v a="$backends_after" -v hz="$ticks_per_s" -v n="$tx" 'BEGIN { printf "%.1f", (a - b) * 1e6 / hz / n }')"
  else
    echo "$tps - - - $p50 $p99 - -"
  fi
}

# median VALUES... -> the middle value ("-" when there is none)
median() {
  printf '%s\n' "$@" | grep -v '^-$' | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}

# measure_cell PROTOCOL CLIENTS TARGET... -> one line per TARGET ("median_tps median_us
# median_user_us median_sys_us median_p50_us median_p99_us", each column's own median over
# REPEAT runs). A TARGET is "NAME:PORT:PIDS" (PIDS comma-separated, empty for direct). The runs
# are interleaved, one of each target per round, so that a drift of the machine during the
# cell falls on every target alike. Every proxy run also goes to $work/runs.md, with how often
# the proxy fell asleep per transaction and what the backends spent per transaction.
measure_cell() {
  local protocol="$1" clients="$2"; shift 2
  local targets=("$@") n="$#" i round name port pids
  local -a tps_l us_l user_l sys_l p50_l p99_l
  local tps us user sys p50 p99 sleeps backends
  for round in $(seq 1 "$REPEAT"); do
    for i in $(seq 0 $((n - 1))); do
      IFS=: read -r name port pids <<<"${targets[$i]}"
      log "pgbench -S -M $protocol -c $clients: $name (run $round of $REPEAT)"
      read -r tps us user sys p50 p99 sleeps backends <<<"$(measure "$name" "$port" "${pids//,/ }" "$protocol" "$clients")"
      [ -n "$pids" ] && echo "| $protocol | $clients | $round | $name | $tps | $us | $sleeps | $backends |" >>"$work/runs.md"
      tps_l[i]+=" $tps"; us_l[i]+=" $us"; user_l[i]+=" $user"; sys_l[i]+=" $sys"
      p50_l[i]+=" $p50"; p99_l[i]+=" $p99"
    done
  done
  for i in $(seq 0 $((n - 1))); do
    # shellcheck disable=SC2086 # the lists are space-separated numbers
    echo "$(median ${tps_l[i]}) $(median ${us_l[i]}) $(median ${user_l[i]}) $(median ${sys_l[i]}) $(median ${p50_l[i]}) $(median ${p99_l[i]})"
  done
}

# ratio A B -> A / B with two decimals, "-" unless both are positive numbers
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a + 0 > 0) printf "%.2f", a / b; else print "-" }'; }

if [ "$WORKERS" -gt 1 ]; then
  workers_note="$WORKERS workers"
  bouncer_note=" ($WORKERS processes, so_reuseport, pool $bouncer_pool each)"
else
  workers_note="1 worker"
  bouncer_note=""
fi
{
  echo "# pgbench -S: direct vs pgtier vs PgBouncer"
  echo
  echo "$(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) cores, $(uname -r), PostgreSQL $("$bindir/postgres" --version | awk '{print $3}'),"
  echo "$(pgbouncer --version | head -1)$bouncer_note, pgtier $("$PGTIER_BIN" --version | awk '{print $2}') ($workers_note, $PGTIER_BIN)."
  echo "Scale $SCALE, -T $DURATION s per run, median of $REPEAT run(s) per cell, transaction pooling, pool size $POOL_SIZE, -j 2."
  [ "$TLS" = 1 ] && echo "Clients reach both proxies over TLS (sslmode=require, ECDSA P-256 certificate); direct runs are plain text."
  [ "$FORWARDER" = 1 ] && echo "forwarder: pgtier-forwarder ($WORKERS thread(s)), a bare io_uring 1:1 TCP forwarder (one server per client, no parsing, no pooling): the cost of a proxy that does nothing."
  echo
  if [ "$FORWARDER" = 1 ]; then
    echo "| protocol | clients | direct tps | pgtier tps | PgBouncer tps | forwarder tps | pgtier CPU µs/tx | PgBouncer CPU µs/tx | forwarder CPU µs/tx | ratio pgtier/PgBouncer | ratio pgtier/forwarder | ratio PgBouncer/forwarder | pgtier user / kernel µs | PgBouncer user / kernel µs | forwarder user / kernel µs |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  else
    echo "| protocol | clients | direct tps | pgtier tps | PgBouncer tps | pgtier CPU µs/tx | PgBouncer CPU µs/tx | ratio pgtier/PgBouncer | pgtier user / kernel µs | PgBouncer user / kernel µs |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  fi
} | tee "$OUT"

latency_rows=()
for protocol in $PROTOCOLS; do
  for clients in $CLIENTS; do
    targets=("direct:$pg_port:")
    [ -n "$pgtier_pid" ] && targets+=("pgtier:$pgtier_port:$pgtier_pid")
    targets+=("pgbouncer:$bouncer_port:${bouncer_pids// /,}")
    [ -n "$forwarder_pid" ] && targets+=("forwarder:$forwarder_port:$forwarder_pid")
    mapfile -t results < <(measure_cell "$protocol" "$clients" "${targets[@]}")
    t_tps="-"; t_us="-"; t_user="-"; t_sys="-"; t_p50="-"; t_p99="-"
    f_tps="-"; f_us="-"; f_user="-"; f_sys="-"; f_p50="-"; f_p99="-"
    k=0
    read -r d_tps _ _ _ d_p50 d_p99 <<<"${results[k]}"; k=$((k + 1))
    if [ -n "$pgtier_pid" ]; then
      read -r t_tps t_us t_user t_sys t_p50 t_p99 <<<"${results[k]}"; k=$((k + 1))
    fi
    read -r b_tps b_us b_user b_sys b_p50 b_p99 <<<"${results[k]}"; k=$((k + 1))
    if [ -n "$forwarder_pid" ]; then
      read -r f_tps f_us f_user f_sys f_p50 f_p99 <<<"${results[k]}"
    fi
    if [ "$FORWARDER" = 1 ]; then
      echo "| $protocol | $clients | $d_tps | $t_tps | $b_tps | $f_tps | $t_us | $b_us | $f_us | $(ratio "$t_us" "$b_us") | $(ratio "$t_us" "$f_us") | $(ratio "$b_us" "$f_us") | $t_user / $t_sys | $b_user / $b_sys | $f_user / $f_sys |" | tee -a "$OUT"
    else
      echo "| $protocol | $clients | $d_tps | $t_tps | $b_tps | $t_us | $b_us | $(ratio "$t_us" "$b_us") | $t_user / $t_sys | $b_user / $b_sys |" | tee -a "$OUT"
    fi
    if [ "$clients" = 1 ]; then
      row="| $protocol | $d_p50 / $d_p99 | $t_p50 / $t_p99 | $b_p50 / $b_p99 |"
      [ "$FORWARDER" = 1 ] && row="$row $f_p50 / $f_p99 |"
      latency_rows+=("$row")
    fi
  done
done

if [ "${#latency_rows[@]}" -gt 0 ]; then
  {
    echo
    echo "## 1-client latency"
    echo
    echo "Per-transaction latency p50 / p99 in µs (pgbench -l), each the median over $REPEAT run(s)."
    echo
    if [ "$FORWARDER" = 1 ]; then
      echo "| protocol | direct | pgtier | PgBouncer | forwarder |"
      echo "|---|---:|---:|---:|---:|"
    else
      echo "| protocol | direct | pgtier | PgBouncer |"
      echo "|---|---:|---:|---:|"
    fi
    printf '%s\n' "${latency_rows[@]}"
  } | tee -a "$OUT"
fi

if [ -s "$work/runs.md" ]; then
  {
    echo
    echo "## Every run"
    echo
    echo "Each proxy run: tps, CPU µs per transaction, and the proxy's sleeps per transaction"
    echo "(voluntary context switches of all its threads). Where a run's proxy falls asleep"
    echo "often, its CPU per transaction rises: in a virtual machine each sleep is a halt of the"
    echo "CPU and each wake-up an interrupt (docs/benchmarks.md, \"Two regimes\"). The last column"
    echo "is the CPU of PostgreSQL's backends per transaction: on two cores shared by the"
    echo "backends, pgbench and the proxy, a run's tps follows it (docs/benchmarks.md,"
    echo "\"What decides tps at 8 clients\")."
    echo
    echo "| protocol | clients | run | proxy | tps | CPU µs/tx | sleeps/tx | backends µs/tx |"
    echo "|---|---:|---:|---|---:|---:|---:|---:|"
    cat "$work/runs.md"
  } | tee -a "$OUT"
fi

# idle_rss NAME PORT PIDS -> prints "rss_before_kb rss_after_kb opened"
idle_rss() {
  local before after opened
  before="$(rss_kb "$3")"
  "$IDLE_BIN" --port "$2" --count "$IDLE_CLIENTS" --hold-secs 30 >"$work/idle.out" 2>"$work/idle.err" &
  idle_pid=$!
  for _ in $(seq 1 600); do
    grep -q '^opened' "$work/idle.out" 2>/dev/null && break
    kill -0 "$idle_pid" 2>/dev/null || break
    sleep 0.1
  done
  sleep 1
  after="$(rss_kb "$3")"
  opened="$(sed -n 's/^opened //p' "$work/idle.out")"
  [ -z "$opened" ] && log "$1: $(cat "$work/idle.err")"
  kill "$idle_pid" 2>/dev/null; wait "$idle_pid" 2>/dev/null || true; idle_pid=""
  sleep 1
  echo "$before $after ${opened:-0}"
}

if [ "$SKIP_MEMORY" != 1 ]; then
  {
    echo
    echo "| proxy | idle clients held | RSS before (MiB) | RSS with clients (MiB) | per client (KiB) |"
    echo "|---|---:|---:|---:|---:|"
  } | tee -a "$OUT"
  for target in pgtier pgbouncer; do
    if [ "$target" = pgtier ]; then port="$pgtier_port"; pid="$pgtier_pid"; else port="$bouncer_port"; pid="$bouncer_pids"; fi
    [ -z "$pid" ] && continue
    log "$IDLE_CLIENTS idle clients through $target"
    read -r before after opened <<<"$(idle_rss "$target" "$port" "$pid")"
    awk -v n="$target" -v b="$before" -v a="$after" -v o="$opened" 'BEGIN {
      per = (o > 0) ? sprintf("%.2f", (a - b) / o) : "-";
      printf "| %s | %d | %.1f | %.1f | %s |\n", n, o, b / 1024, a / 1024, per }' | tee -a "$OUT"
  done
fi
if [ "$PROFILE" = 1 ] && [ -n "$pgtier_pid" ] && command -v perf >/dev/null; then
  profile_out="${OUT%.md}-pgtier-perf.txt"
  log "profiling pgtier (perf record -g) during pgbench -S -M extended -c 64"
  perf record -q -g -o "$work/perf.data" -p "$pgtier_pid" -- sleep "$DURATION" 2>/dev/null &
  perf_pid=$!
  run_pgbench "$pgtier_port" extended 64 >/dev/null
  wait "$perf_pid" || true
  perf report -i "$work/perf.data" --no-children --stdio --percent-limit 0.5 2>/dev/null \
    | grep -v '^$' | head -200 >"$profile_out"
  log "profile written to $profile_out"
fi
log "results written to $OUT"
